//! The example agent (`examples/agent/pay_and_refund.py`) runs as its docstring says,
//! against the real stack, and its payment is charged once and refunded once.

use std::process::Command;

use opgate_e2e::{Executor, Stack};

use opgate_e2e::mcp::PYTHON;
const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../examples/agent/pay_and_refund.py"
);

#[tokio::test]
async fn the_example_agent_pays_once_through_a_lost_answer_and_refunds() {
    let stack = Stack::start(&["delay-ms=50"]).await;
    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;
    let output = Command::new(PYTHON)
        .arg(EXAMPLE)
        .arg("inv-example-test")
        .env("OPGATE_MCP_URL", stack.intake.url("/mcp"))
        .env("OPGATE_AGENT_KEY", &stack.key)
        .output()
        .expect("run the example agent");
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{printed}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(printed.contains("retrying with the same key"), "{printed}");
    assert!(printed.contains("done: payment"), "{printed}");

    let ledger = stack.sim.ledger().await;
    let charges: Vec<_> = ledger["charges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["invoice_id"] == "inv-example-test")
        .collect();
    assert_eq!(charges.len(), 1, "{ledger}");
    let refunds = ledger["refunds"].as_array().unwrap();
    assert_eq!(refunds.len(), 1, "{ledger}");
    assert_eq!(refunds[0]["amount"], "20.00");
}
