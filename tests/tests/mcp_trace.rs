//! One trace per operation over MCP as over HTTP: a tool call continues the trace its
//! `_meta.traceparent` names (as the HTTP API continues the `traceparent` header), and
//! the executor's work on the operation joins that trace, as a child of the tool call.

use std::time::Duration;

use opgate_e2e::mcp::run_steps;
use opgate_e2e::otlp::{OtlpReceiver, SpanKind};
use opgate_e2e::{Executor, Stack, TestDb};
use serde_json::json;
const SETTLE: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_tool_call_continues_the_agents_trace_through_the_executor() {
    let receiver = OtlpReceiver::start().await;
    let endpoint = receiver.endpoint();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let stack = Stack::start_with_env(TestDb::create().await, &[], &env).await;
    let _executor = Executor::start_with_env(&stack.db.url, &stack.sim.base_url, &[], &env).await;

    let agent_trace = "5cf92f3577b34da6a3ce929d0e0e4737";
    let agent_span = "10f067aa0ba902b8";
    let steps = json!([{
        "tool": "request_payment",
        "args": {
            "customer_id": "cus_traced", "invoice_id": "inv-mcp-traced", "amount": "42.00",
            "idempotency_key": "payment-inv-mcp-traced"
        },
        "traceparent": format!("00-{agent_trace}-{agent_span}-01"),
    }]);
    let answer = &run_steps(&stack.intake.url("/mcp"), &stack.key, "auto", &steps)[0];
    let id = answer["structured"]["operation_id"].as_str().unwrap();
    stack
        .wait_for_status(id.parse().unwrap(), "SUCCEEDED", SETTLE)
        .await;

    // A span is exported when it ends, in batches: a parent ends after its children
    // and may come in a later batch, so wait for the named spans themselves.
    let spans = receiver
        .wait_for_spans(
            SETTLE,
            "the tool call's and the executor's spans",
            |spans| {
                [
                    ("intake", "tools/call request_payment"),
                    ("intake", "INSERT operations"),
                    ("executor", "process operation"),
                ]
                .iter()
                .all(|(service, name)| {
                    spans.iter().any(|s| {
                        s.service_name == *service && s.name == *name && s.trace_id == agent_trace
                    })
                })
            },
        )
        .await;
    let call = spans
        .iter()
        .find(|s| s.service_name == "intake" && s.name == "tools/call request_payment")
        .expect("the tool call's span");
    assert_eq!(call.trace_id, agent_trace);
    assert_eq!(call.parent_span_id.as_deref(), Some(agent_span));
    assert_eq!(call.kind, SpanKind::Server);
    assert_eq!(call.attributes["opgate.operation_id"], id);
    assert_eq!(
        call.attributes["opgate.idempotency_key"],
        "payment-inv-mcp-traced"
    );
    assert!(
        spans.iter().any(|s| s.service_name == "intake"
            && s.trace_id == agent_trace
            && s.parent_span_id.as_deref() == Some(call.span_id.as_str())
            && s.name == "INSERT operations"),
        "the registration's INSERT inside the tool call"
    );
    let process = spans
        .iter()
        .find(|s| s.service_name == "executor" && s.name == "process operation")
        .expect("the executor's span");
    assert_eq!(
        process.trace_id, agent_trace,
        "one trace, intake to executor"
    );
    assert_eq!(
        process.parent_span_id.as_deref(),
        Some(call.span_id.as_str())
    );
}
