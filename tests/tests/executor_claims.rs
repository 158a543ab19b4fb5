//! A lone operation takes a few claims, not one from every claim loop in turn: each
//! empty claim is a round trip to the database on the same cores as the work it waits
//! for (`Prefer: wait` measured 10 % faster once they stopped).

use std::time::Duration;

use opgate_e2e::metrics::metric;
use opgate_e2e::{Executor, Stack};

const CLAIMS: &str = "opgate_claim_duration_seconds_count";

#[tokio::test]
async fn a_lone_operation_costs_a_few_claims_not_one_per_claim_loop() {
    let stack = Stack::start(&[]).await;
    // Polls would add empty claims of their own: only notifications start claims here.
    let executor = Executor::start_polling_every(
        "60s",
        &stack.db.url,
        &stack.sim.base_url,
        &["--claimers", "4"],
    )
    .await;
    let url = executor.metrics_url();
    // The claims of the executor's start, done before counting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = metric(url, CLAIMS, Some(("worker", "executor"))).await;
    let lone = 10;
    for i in 0..lone {
        let id = stack.pay("cus_lone", &format!("lone-{i}")).await;
        stack
            .wait_for_status(id, "SUCCEEDED", Duration::from_secs(30))
            .await;
    }
    let claims = metric(url, CLAIMS, Some(("worker", "executor"))).await - before;
    assert!(
        claims >= lone as f64 && claims <= 3.0 * lone as f64,
        "{claims} claims for {lone} operations registered one at a time"
    );
}
