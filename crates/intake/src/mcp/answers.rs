//! What a tool call answers: the operation (or a page of them) as `structuredContent`
//! with its `message` as text, or a refusal as a tool error (`isError: true`) that
//! carries the problem and, in plain words, what the model should do next.

use opgate_store::OperationRecord;
use rmcp::model::{CallToolResult, ContentBlock as Content, MetaObject};
use serde_json::{json, Value};

use crate::listing::OperationPage;
use crate::problem::Problem;
use crate::view::OperationView;

/// The operation: its body (with `next`) as structured content; as text, its id, status
/// and message, which is what a client that shows only text needs to act.
pub fn operation(record: &OperationRecord, replayed: bool) -> CallToolResult {
    let view = OperationView::from(record);
    let body = serde_json::to_value(&view).unwrap_or(Value::Null);
    let mut result = CallToolResult::success(vec![Content::text(format!(
        "Operation {} is {}. {}",
        view.operation_id, view.status, view.message
    ))]);
    result.structured_content = Some(body);
    if replayed {
        let mut meta = MetaObject::new();
        meta.insert("io.opgate/idempotent-replayed".into(), true.into());
        result.meta = Some(meta);
    }
    result
}

pub fn page(page: &OperationPage) -> CallToolResult {
    let body = serde_json::to_value(page).unwrap_or(Value::Null);
    let shown = page.operations.len();
    let more = if page.next_cursor.is_some() {
        " More follow: call list_operations again with cursor = next_cursor."
    } else {
        ""
    };
    let mut result = CallToolResult::success(vec![
        Content::text(format!("{shown} operation(s), newest first.{more}")),
        Content::text(body.to_string()),
    ]);
    result.structured_content = Some(body);
    result
}

/// A refusal: nothing was recorded (or, for a read, nothing was found). The text is
/// the problem's title and detail, then what to do next; the structured content is
/// the problem itself with `next_step` and, where known, `retry_after_seconds`.
pub fn refusal(problem: &Problem) -> CallToolResult {
    let next_step = next_step(problem);
    let retry_after = problem.retry_after_secs();
    let mut body = json!({
        "type": problem.problem_type,
        "title": problem.title,
        "status": problem.status,
        "detail": problem.detail,
        "next_step": next_step,
    });
    if let Some(secs) = retry_after {
        body["retry_after_seconds"] = secs.into();
    }
    let mut result = CallToolResult::error(vec![Content::text(format!(
        "{}: {} {next_step}",
        problem.title, problem.detail
    ))]);
    result.structured_content = Some(body);
    result
}

/// What the model should do after this refusal, in plain words.
fn next_step(problem: &Problem) -> String {
    match problem.slug() {
        "idempotency-key-reused" => "This idempotency_key already names a different request. \
            If you are retrying that request, send exactly its arguments again with this key; \
            if you meant a new operation, choose a new key for it."
            .to_owned(),
        "invalid-request" | "malformed-json" | "invalid-idempotency-key" => {
            "Nothing was recorded. Correct the arguments and call again (the same \
             idempotency_key is fine: nothing uses it yet)."
                .to_owned()
        }
        "budget-exceeded" => match problem.retry_after_secs() {
            Some(secs) => format!(
                "Nothing was recorded. Do not retry before {secs} seconds have passed, or ask \
                 a human operator to raise this agent's budget."
            ),
            None => "Nothing was recorded. Ask a human operator to raise this agent's budget."
                .to_owned(),
        },
        "forbidden" => "Nothing was recorded. Retrying will not help: this agent is not \
            allowed to do this. Ask a human operator if it should be."
            .to_owned(),
        "rate-limited" | "database-unavailable" | "internal" => format!(
            "Nothing was recorded. Call again with the SAME idempotency_key and arguments \
             after {} second(s).",
            problem.retry_after_secs().unwrap_or(1)
        ),
        "not-found" => "No such operation exists for this agent. Check the operation_id, or \
            use find_operation with the idempotency_key you chose."
            .to_owned(),
        "payment-not-refundable" => "Nothing was recorded. Only a SUCCEEDED payment can be \
            refunded; if the payment is still in progress, wait for it \
            (wait_for_operation) and then refund with a new request."
            .to_owned(),
        "refund-exceeds-payment" => "Nothing was recorded. Ask for at most what remains \
            refundable (the detail says how much)."
            .to_owned(),
        "unknown-tool" => "Call one of the tools tools/list shows.".to_owned(),
        "unknown-kind" => {
            "This kind does not exist; use one of the request_* tools listed.".to_owned()
        }
        _ => "Nothing was recorded.".to_owned(),
    }
}
