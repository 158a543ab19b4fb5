//! MCP at intake's `/mcp`, driven by the official Python MCP client (PyPI `mcp`,
//! installed by `make test`) as an agent framework would drive it: tools per agent,
//! schemas and annotations a model reads, the same operation on a retry with the same
//! key, one charge when the provider's answer is lost, refusals as tool errors, and
//! guardrails exactly as over HTTP. Real intake, executor, provider-sim, PostgreSQL.

use opgate_e2e::mcp::run_steps;
use opgate_e2e::{Executor, Intake, Stack, TestDb};
use serde_json::{json, Value};

/// Runs the steps through one MCP client session as the agent with `key`; one answer
/// per step.
fn mcp(intake: &Intake, key: &str, steps: Value) -> Vec<Value> {
    mcp_in_mode(intake, key, "auto", steps)
}

fn mcp_in_mode(intake: &Intake, key: &str, mode: &str, steps: Value) -> Vec<Value> {
    run_steps(&intake.url("/mcp"), key, mode, &steps)
}

fn call(tool: &str, args: Value) -> Value {
    json!({ "tool": tool, "args": args })
}

fn pay_args(invoice: &str, amount: &str) -> Value {
    json!({
        "customer_id": "cus_mcp",
        "invoice_id": invoice,
        "amount": amount,
        "idempotency_key": format!("payment-{invoice}"),
    })
}

fn tool_names(listing: &Value) -> Vec<String> {
    listing["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

fn tool<'a>(listing: &'a Value, name: &str) -> &'a Value {
    listing["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name} in {listing}"))
}

#[tokio::test]
async fn each_agent_sees_its_own_kinds_with_schemas_and_hints_a_model_can_follow() {
    let db = TestDb::create().await;
    let payer = db.create_agent("payer", &["--allow", "payment"]);
    let refunder = db.create_agent("refunder", &["--allow", "payment", "--allow", "refund"]);
    let intake = Intake::start(&db.url).await;

    let payer_tools = &mcp(&intake, &payer, json!([{ "list_tools": true }]))[0];
    let names = tool_names(payer_tools);
    assert_eq!(
        names,
        [
            "request_payment",
            "get_operation",
            "find_operation",
            "wait_for_operation",
            "list_operations"
        ],
        "a payment-only agent sees no request_refund"
    );
    let refunder_tools = &mcp(&intake, &refunder, json!([{ "list_tools": true }]))[0];
    assert!(tool_names(refunder_tools).contains(&"request_refund".to_owned()));

    let pay = tool(payer_tools, "request_payment");
    let schema = &pay["input_schema"];
    let required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for field in ["idempotency_key", "customer_id", "invoice_id", "amount"] {
        assert!(required.contains(&field), "{field} is required: {schema}");
    }
    assert_eq!(schema["properties"]["idempotency_key"]["maxLength"], 255);
    assert_eq!(schema["properties"]["amount"]["type"], "string");
    assert_eq!(
        pay["annotations"],
        json!({ "readOnlyHint": false, "destructiveHint": true, "idempotentHint": true, "openWorldHint": true })
    );
    let description = pay["description"].as_str().unwrap();
    for words in [
        "SAME idempotency_key",
        "payment-<invoice_id>",
        "different key",
    ] {
        assert!(
            description.contains(words),
            "{words:?} missing from {description}"
        );
    }
    for read in [
        "get_operation",
        "find_operation",
        "wait_for_operation",
        "list_operations",
    ] {
        assert_eq!(tool(payer_tools, read)["annotations"]["readOnlyHint"], true);
    }
    let refund = tool(refunder_tools, "request_refund");
    assert!(refund["input_schema"]["required"]
        .as_array()
        .unwrap()
        .contains(&json!("payment_operation_id")));
}

#[tokio::test]
async fn a_retry_with_the_same_key_is_the_same_operation_and_a_lost_answer_charges_once() {
    // The provider charges, then drops its answer, the first time.
    let stack = Stack::start(&["drop-after-commit=1.0/1"]).await;
    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;
    let args = pay_args("inv-lost-1", "125.50");
    let answers = mcp(
        &stack.intake,
        &stack.key,
        json!([
            call("request_payment", args.clone()),
            call("request_payment", args)
        ]),
    );
    let (first, retry) = (&answers[0], &answers[1]);
    assert!(!first["is_error"].as_bool().unwrap(), "{first}");
    let id = first["structured"]["operation_id"].as_str().unwrap();
    assert_eq!(
        retry["structured"]["operation_id"], id,
        "the same operation"
    );
    assert_eq!(retry["meta"]["io.opgate/idempotent-replayed"], true);
    assert_eq!(first["structured"]["next"]["same_key_on_retry"], true);
    assert_eq!(
        first["text"][0].as_str().unwrap(),
        format!(
            "Operation {id} is {}. {}",
            first["structured"]["status"].as_str().unwrap(),
            first["structured"]["message"].as_str().unwrap()
        )
    );

    let waited = &mcp(
        &stack.intake,
        &stack.key,
        json!([call(
            "wait_for_operation",
            json!({ "operation_id": id, "timeout_seconds": 30 })
        )]),
    )[0];
    assert_eq!(waited["structured"]["status"], "SUCCEEDED", "{waited}");
    assert_eq!(waited["structured"]["next"]["action"], "done");
    let ledger = stack.sim.ledger().await;
    let charges: Vec<&Value> = ledger["charges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["invoice_id"] == "inv-lost-1")
        .collect();
    assert_eq!(
        charges.len(),
        1,
        "exactly one charge for the invoice: {ledger}"
    );
    assert_eq!(charges[0]["amount"], "125.50");
    assert_eq!(stack.db.counts().await.operations, 1);

    // The agent that lost everything finds it by its key, over MCP and over HTTP.
    let found = &mcp(
        &stack.intake,
        &stack.key,
        json!([call(
            "find_operation",
            json!({ "idempotency_key": "payment-inv-lost-1" })
        )]),
    )[0];
    assert_eq!(found["structured"]["operation_id"], id);
    let http: Value = stack
        .client
        .get(
            stack
                .intake
                .url("/agent/operations?idempotency_key=payment-inv-lost-1"),
        )
        .bearer_auth(&stack.key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(http["operation_id"], id);
    assert_eq!(http["status"], "SUCCEEDED");
}

#[tokio::test]
async fn refusals_are_tool_errors_that_say_what_to_do_and_write_nothing() {
    let db = TestDb::create().await;
    let alice = db.create_agent(
        "alice",
        &["--allow", "payment", "--max-amount", "USD:100.00"],
    );
    let bob = db.create_agent("bob", &["--allow", "payment"]);
    let intake = Intake::start(&db.url).await;

    let answers = mcp(
        &intake,
        &alice,
        json!([
            call("request_payment", pay_args("inv-a", "40.00")),
            call("request_payment", pay_args("inv-a", "41.00")),
            call("request_payment", pay_args("inv-big", "100.01")),
            call(
                "request_payment",
                json!({ "customer_id": "c", "invoice_id": "i", "amount": "1.00" })
            ),
            call(
                "request_payment",
                json!({ "customer_id": "c", "invoice_id": "i", "amount": 1.5, "idempotency_key": "k-number" })
            ),
            call(
                "request_refund",
                json!({ "payment_operation_id": "x", "idempotency_key": "k-refund" })
            ),
        ]),
    );
    let alice_payment = answers[0]["structured"]["operation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let reused = &answers[1];
    assert!(reused["is_error"].as_bool().unwrap());
    assert!(reused["structured"]["type"]
        .as_str()
        .unwrap()
        .ends_with("idempotency-key-reused"));
    assert!(reused["text"][0]
        .as_str()
        .unwrap()
        .contains("if you meant a new operation, choose a new key"));
    let over = &answers[2];
    assert!(over["is_error"].as_bool().unwrap());
    assert_eq!(over["structured"]["status"], 403);
    assert!(over["structured"]["next_step"]
        .as_str()
        .unwrap()
        .contains("Retrying will not help"));
    assert_eq!(
        answers[3]["structured"]["status"], 400,
        "no key: {}",
        answers[3]
    );
    assert_eq!(
        answers[4]["structured"]["status"], 422,
        "a float amount: {}",
        answers[4]
    );
    assert_eq!(
        answers[5]["structured"]["status"], 403,
        "refunds not granted: {}",
        answers[5]
    );
    assert_eq!(
        db.counts().await.operations,
        1,
        "only the first was written"
    );

    // Bob cannot see Alice's operation, by id or by key.
    let bobs = mcp(
        &intake,
        &bob,
        json!([
            call("get_operation", json!({ "operation_id": alice_payment })),
            call(
                "find_operation",
                json!({ "idempotency_key": "payment-inv-a" })
            ),
            call("list_operations", json!({})),
        ]),
    );
    assert_eq!(bobs[0]["structured"]["status"], 404);
    assert_eq!(bobs[1]["structured"]["status"], 404);
    assert_eq!(bobs[2]["structured"]["operations"], json!([]));

    // A member named twice is refused before the SDK's parser keeps one of them.
    let duplicated = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"request_payment",
        "arguments":{"customer_id":"c","invoice_id":"dup","amount":"1.00","amount":"900.00",
        "idempotency_key":"payment-dup"}}}"#;
    let reply = reqwest::Client::new()
        .post(intake.url("/mcp"))
        .bearer_auth(&alice)
        .header("Content-Type", "application/json")
        .header("Accept", "application/json, text/event-stream")
        .body(duplicated)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 422);
    assert_eq!(db.counts().await.operations, 1, "nothing written");

    // Without a key, /mcp is refused before MCP: the HTTP API's 401 problem.
    let reply = reqwest::Client::new()
        .post(intake.url("/mcp"))
        .header("Accept", "application/json, text/event-stream")
        .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 401);
    assert_eq!(reply.headers()["www-authenticate"], "Bearer");
}

#[tokio::test]
async fn budgets_and_approvals_answer_over_mcp_as_over_http() {
    let db = TestDb::create().await;
    let key = db.create_agent(
        "guarded",
        &[
            "--allow",
            "payment",
            "--daily-budget",
            "USD:1000.00",
            "--approval-above",
            "USD:500.00",
        ],
    );
    let intake = Intake::start(&db.url).await;
    let answers = mcp(
        &intake,
        &key,
        json!([
            call("request_payment", pay_args("inv-approve", "600.00")),
            call("request_payment", pay_args("inv-fits", "300.00")),
            call("request_payment", pay_args("inv-over", "200.00")),
        ]),
    );
    let approval = &answers[0]["structured"];
    assert_eq!(approval["status"], "AWAITING_APPROVAL");
    assert_eq!(approval["next"]["action"], "wait_for_approval");
    assert_eq!(answers[1]["structured"]["status"], "PENDING");
    let over = &answers[2];
    assert!(over["is_error"].as_bool().unwrap());
    assert!(over["structured"]["type"]
        .as_str()
        .unwrap()
        .ends_with("budget-exceeded"));
    assert!(over["structured"]["retry_after_seconds"].as_u64().unwrap() > 3600);
    assert_eq!(db.counts().await.operations, 2);
}

#[tokio::test]
async fn the_handshake_era_client_gets_the_same_tools_and_answers() {
    let stack = Stack::start(&[]).await;
    let answers = mcp_in_mode(
        &stack.intake,
        &stack.key,
        "legacy",
        json!([
            { "list_tools": true },
            call("request_payment", pay_args("inv-legacy", "5.00")),
            call("list_operations", json!({ "status": "pending", "limit": 5 })),
        ]),
    );
    assert!(tool_names(&answers[0]).contains(&"request_refund".to_owned()));
    let id = &answers[1]["structured"]["operation_id"];
    assert_eq!(
        answers[2]["structured"]["operations"][0]["operation_id"],
        *id
    );
}

#[tokio::test]
async fn agents_page_through_their_operations_over_http() {
    let stack = Stack::start(&[]).await;
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(
            stack
                .pay("cus_page", &format!("page-{n}"))
                .await
                .to_string(),
        );
    }
    ids.reverse();
    let get = |query: String| {
        let request = stack
            .client
            .get(stack.intake.url(&format!("/agent/operations{query}")))
            .bearer_auth(&stack.key);
        async move {
            let reply = request.send().await.unwrap();
            (
                reply.status().as_u16(),
                reply.json::<Value>().await.unwrap(),
            )
        }
    };
    let (status, first) = get("?limit=2".into()).await;
    assert_eq!(status, 200);
    let page_ids = |page: &Value| -> Vec<String> {
        page["operations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["operation_id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(page_ids(&first), ids[0..2], "newest first");
    let cursor = first["next_cursor"].as_str().unwrap();
    let (_, second) = get(format!("?limit=2&cursor={cursor}")).await;
    assert_eq!(page_ids(&second), ids[2..4]);
    let cursor = second["next_cursor"].as_str().unwrap();
    let (_, last) = get(format!("?limit=2&cursor={cursor}")).await;
    assert_eq!(page_ids(&last), ids[4..5]);
    assert!(last.get("next_cursor").is_none());

    let (status, filtered) = get("?status=SUCCEEDED".into()).await;
    assert_eq!((status, filtered["operations"].clone()), (200, json!([])));
    let (status, problem) = get("?idempotency_key=page-1&limit=2".into()).await;
    assert_eq!(status, 400, "{problem}");
    let (status, _) = get("?idempotency_key=nope".into()).await;
    assert_eq!(status, 404);
    let (status, one) = get("?idempotency_key=page-3".into()).await;
    assert_eq!(
        (status, one["operation_id"].as_str().unwrap()),
        (202, ids[1].as_str())
    );
}
