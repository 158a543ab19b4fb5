//! The naive-agent soak: 200 scripted agents over MCP (the official Python client),
//! each paying one invoice and doing only what the tool description says. Their
//! clients give up on answers far sooner than the provider answers, so they retry
//! constantly, always with the key built from the invoice; the provider drops 25 % of
//! its answers after charging and fails 10 % with a 500 after charging, each after 500 ms;
//! an executor is killed mid-run. No invoice is charged twice, and every operation
//! finishes.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use opgate_e2e::{eventually, Executor, Reconciler, Stack, TestDb};
use serde_json::Value;

use opgate_e2e::mcp::PYTHON;
const AGENTS_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/naive_agents.py");
const AGENTS: usize = 200;
const IDENTITIES: usize = 20;

#[tokio::test]
async fn naive_agents_retrying_through_lost_answers_never_charge_an_invoice_twice() {
    let stack = Stack::start_on(
        TestDb::create().await,
        &[
            "drop-after-commit=0.25",
            "error-after-commit=0.10",
            "delay-ms=500",
        ],
    )
    .await;
    let keys: Vec<String> = (0..IDENTITIES)
        .map(|n| {
            stack
                .db
                .create_agent(&format!("naive-{n}"), &["--allow", "payment"])
        })
        .collect();
    let first = Executor::start(&stack.db.url, &stack.sim.base_url, &["--lease", "1s"]).await;
    let _reconciler = Reconciler::start_reconciler(&stack.db.url, &stack.sim.base_url, &[]).await;

    let agents = tokio::process::Command::new(PYTHON)
        .arg(AGENTS_SCRIPT)
        .env("MCP_URL", stack.intake.url("/mcp"))
        .env("AGENT_KEYS", keys.join(","))
        .env("AGENTS", AGENTS.to_string())
        // Far shorter than the provider's 500 ms: every wait, and many requests, are
        // lost to the agent.
        .env("CLIENT_TIMEOUT", "0.2")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the naive agents");

    // Mid-run, once payments are being executed, the executor dies without a word.
    eventually(Duration::from_secs(60), "the first charges", || async {
        let ledger = stack.sim.ledger().await;
        (ledger["charges"].as_array()?.len() >= 20).then_some(())
    })
    .await;
    first.service.kill9().await;
    let _second = Executor::start(&stack.db.url, &stack.sim.base_url, &["--lease", "1s"]).await;

    let output = tokio::time::timeout(Duration::from_secs(300), agents.wait_with_output())
        .await
        .expect("the agents finish")
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["gave_up"], serde_json::json!([]), "{report}");
    assert!(
        report["retries"].as_u64().unwrap() >= AGENTS as u64,
        "the agents' answers were lost and they retried: {report}"
    );

    // One operation per invoice, however many times each agent asked.
    for (invoice, seen) in report["operations"].as_object().unwrap() {
        let mut ids: Vec<&str> = seen
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        ids.dedup();
        assert_eq!(ids.len(), 1, "{invoice} became {ids:?}");
    }
    assert_eq!(stack.db.counts().await.operations, AGENTS as i64);

    // Every operation finishes, and the ledger agrees with it invoice by invoice.
    let statuses = eventually(
        Duration::from_secs(120),
        "every operation terminal",
        || async {
            let rows = stack
                .db
                .store
                .list_operations(&opgate_store::OperationFilter {
                    status: None,
                    agent_id: None,
                    limit: 1000,
                })
                .await
                .ok()?;
            rows.iter().all(|r| r.status.is_terminal()).then(|| {
                rows.iter()
                    .map(|r| (r.operation_id, r.status))
                    .collect::<Vec<_>>()
            })
        },
    )
    .await;
    let ledger = stack.sim.ledger().await;
    let mut charges_per_invoice: HashMap<String, usize> = HashMap::new();
    for charge in ledger["charges"].as_array().unwrap() {
        *charges_per_invoice
            .entry(charge["invoice_id"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    let twice: Vec<_> = charges_per_invoice
        .iter()
        .filter(|(_, n)| **n > 1)
        .collect();
    assert!(twice.is_empty(), "charged more than once: {twice:?}");
    let succeeded = statuses
        .iter()
        .filter(|(_, s)| s.as_str() == "SUCCEEDED")
        .count();
    assert_eq!(
        charges_per_invoice.len(),
        succeeded,
        "a charge for every SUCCEEDED payment and none for the others"
    );
}
