//! Over MCP, as over HTTP, intake remembers an agent it read recently and does not read
//! it again for a message that only registers (`tools/call` of `request_<kind>`): the
//! registration's statement confirms the agent's row. What must still hold, checked
//! here with raw JSON-RPC posts to a real intake on a real PostgreSQL:
//! - a revoked agent is refused at once, by a read tool and by a registration, with
//!   nothing written;
//! - a limit raised by `opgate agents update` applies to the next call, though the
//!   agent was remembered with the lower one.

use opgate_e2e::{opgate, Intake, TestDb};
use serde_json::{json, Value};

/// One `tools/call` posted to `/mcp` as the agent with `key`: the HTTP status and the
/// JSON-RPC answer (Null when the body is not JSON-RPC, as for a 401 problem).
async fn tool_call(intake: &Intake, key: &str, tool: &str, arguments: Value) -> (u16, Value) {
    let reply = reqwest::Client::new()
        .post(intake.url("/mcp"))
        .bearer_auth(key)
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": { "name": tool, "arguments": arguments }
        }))
        .send()
        .await
        .unwrap();
    let status = reply.status().as_u16();
    let body: Value = reply.json().await.unwrap_or(Value::Null);
    (status, body)
}

fn payment(invoice: &str, amount: &str) -> Value {
    json!({
        "customer_id": "cus_remembered",
        "invoice_id": invoice,
        "amount": amount,
        "idempotency_key": format!("payment-{invoice}"),
    })
}

/// The tool result's HTTP-like status: 200 for an operation, the problem's otherwise.
fn outcome(answer: &(u16, Value)) -> u16 {
    let (http, body) = answer;
    if *http != 200 {
        return *http;
    }
    let result = &body["result"];
    if result["isError"] == json!(true) {
        result["structuredContent"]["status"].as_u64().unwrap_or(0) as u16
    } else {
        200
    }
}

#[tokio::test]
async fn a_remembered_agent_is_refused_at_once_when_revoked_and_sees_a_raised_limit() {
    let db = TestDb::create().await;
    let alice = db.create_agent("alice-mcp", &["--allow", "payment"]);
    let bob = db.create_agent(
        "bob-mcp",
        &["--allow", "payment", "--max-amount", "USD:100.00"],
    );
    let intake = Intake::start(&db.url).await;

    // Read once, then remembered: both register.
    let first = tool_call(&intake, &alice, "request_payment", payment("a-1", "5.00")).await;
    assert_eq!(outcome(&first), 200, "{first:?}");
    let id = first.1["result"]["structuredContent"]["operation_id"].clone();
    let second = tool_call(&intake, &alice, "request_payment", payment("a-2", "5.00")).await;
    assert_eq!(outcome(&second), 200, "{second:?}");

    opgate(&db.url, &["agents", "revoke", "alice-mcp"]).success();
    let read = tool_call(
        &intake,
        &alice,
        "get_operation",
        json!({ "operation_id": id }),
    )
    .await;
    assert_eq!(read.0, 401, "a read right after the revocation: {read:?}");
    let register = tool_call(&intake, &alice, "request_payment", payment("a-3", "5.00")).await;
    assert_eq!(
        outcome(&register),
        401,
        "a registration right after it: {register:?}"
    );
    assert_eq!(
        db.counts().await.operations,
        2,
        "nothing written after the revocation"
    );

    // Bob is remembered with a 100.00 limit; raised to 200.00, the next call may use it.
    let over = tool_call(&intake, &bob, "request_payment", payment("b-1", "150.00")).await;
    assert_eq!(outcome(&over), 403, "{over:?}");
    let under = tool_call(&intake, &bob, "request_payment", payment("b-2", "50.00")).await;
    assert_eq!(outcome(&under), 200, "{under:?}");
    opgate(
        &db.url,
        &["agents", "update", "bob-mcp", "--max-amount", "USD:200.00"],
    )
    .success();
    let raised = tool_call(&intake, &bob, "request_payment", payment("b-3", "150.00")).await;
    assert_eq!(
        outcome(&raised),
        200,
        "after the limit was raised: {raised:?}"
    );
    assert_eq!(db.counts().await.operations, 4);
}
