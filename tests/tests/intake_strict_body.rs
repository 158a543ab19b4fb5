//! Bodies are read exactly as sent, or refused: objects only, each member once, amounts
//! never through a binary float and never rounded, identifiers without invisible
//! characters. Every refusal writes nothing. And every operation body says what to do
//! next in machine-readable form. Real intake, real PostgreSQL.

use std::time::Duration;

use opgate_e2e::api::post_raw;
use opgate_e2e::{Executor, Stack};

async fn post(stack: &Stack, key: &str, body: &str) -> opgate_e2e::api::Reply {
    post_raw(
        &stack.client,
        &stack.intake.base_url,
        Some(&stack.key),
        Some(key),
        "application/json",
        body.to_owned(),
    )
    .await
}

#[tokio::test]
async fn bodies_that_could_be_read_two_ways_are_refused_and_write_nothing() {
    let stack = Stack::start(&[]).await;
    let before = stack.db.counts().await;
    let cases = [
        ("a top-level array", r#"["cus","inv","7.00"]"#, 422),
        ("a string", r#""cus inv 7.00""#, 422),
        (
            "a repeated amount",
            r#"{"customer_id":"c","invoice_id":"i","amount":"1","amount":"999"}"#,
            422,
        ),
        (
            "a repeated customer",
            r#"{"customer_id":"a","customer_id":"b","invoice_id":"i","amount":"1"}"#,
            422,
        ),
        (
            "more digits than a decimal holds",
            r#"{"customer_id":"c","invoice_id":"i","amount":"1000.0000000000000000000000000001"}"#,
            422,
        ),
        (
            "an amount that is neither string nor number",
            r#"{"customer_id":"c","invoice_id":"i","amount":true}"#,
            422,
        ),
        ("an empty body", "", 400),
        ("truncated JSON", r#"{"customer_id":"#, 400),
    ];
    for (i, (what, body, status)) in cases.into_iter().enumerate() {
        let reply = post(&stack, &format!("k{i}"), body).await;
        assert_eq!(reply.status, status, "{what}: {}", reply.body);
        reply.assert_problem(status);
    }
    for (i, invisible) in [
        "\u{200b}",
        "cus\u{202e}1",
        "\u{2066}cus\u{2069}",
        "\u{feff}cus",
        "c\u{85}d",
    ]
    .into_iter()
    .enumerate()
    {
        let body = serde_json::json!({"customer_id": invisible, "invoice_id": "i", "amount": "1"});
        let reply = post(&stack, &format!("inv{i}"), &body.to_string()).await;
        reply.assert_problem(422);
        assert!(reply.body["detail"]
            .as_str()
            .unwrap()
            .contains("customer_id"));
    }
    assert_eq!(
        stack.db.counts().await,
        before,
        "a refused request wrote something"
    );
}

#[tokio::test]
async fn a_number_amount_is_taken_digit_for_digit() {
    let stack = Stack::start(&[]).await;
    let reply = post(
        &stack,
        "exact",
        r#"{"customer_id":"c","invoice_id":"i","amount":9007199254740993.01}"#,
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let op = stack.operation(reply.operation_id().parse().unwrap()).await;
    assert_eq!(op.amount, Some("9007199254740993.01".parse().unwrap()));
    // The same amount as text is the same request.
    let again = post(
        &stack,
        "exact",
        r#"{"customer_id":"c","invoice_id":"i","amount":"9007199254740993.010"}"#,
    )
    .await;
    assert_eq!(
        again.header("idempotent-replayed"),
        Some("true"),
        "{}",
        again.body
    );
}

#[tokio::test]
async fn every_operation_body_says_what_to_do_next() {
    let stack = Stack::start(&[]).await;
    let body = r#"{"customer_id":"c","invoice_id":"i","amount":"5"}"#;
    let queued = post(&stack, "next-1", body).await;
    let id = queued.operation_id().to_owned();
    let next = &queued.body["next"];
    assert_eq!(next["action"], "poll");
    assert_eq!(next["retry_after_seconds"], 1);
    assert_eq!(next["poll_url"], format!("/agent/operations/{id}"));
    assert_eq!(next["same_key_on_retry"], true);

    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;
    stack
        .wait_for_status(id.parse().unwrap(), "SUCCEEDED", Duration::from_secs(20))
        .await;
    let done = post(&stack, "next-1", body).await;
    assert_eq!(done.body["next"]["action"], "done");
    assert!(done.body["next"].get("poll_url").is_none());

    let declined = stack.pay("decline_next", "next-2").await;
    stack
        .wait_for_status(declined, "FAILED", Duration::from_secs(20))
        .await;
    let failed = opgate_e2e::api::get_operation(
        &stack.client,
        &stack.intake.base_url,
        &stack.key,
        &declined.to_string(),
    )
    .await;
    assert_eq!(failed.body["next"]["action"], "new_key_required");
    assert_eq!(failed.body["next"]["same_key_on_retry"], true);
}

/// Sends a request whose body stops after its first bytes; returns the raw answer.
async fn trickle(base_url: &str, key: &str, idempotency_key: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = base_url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST /agent/operations/payment HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {key}\r\n\
         Idempotency-Key: {idempotency_key}\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n{{\"customer_id\""
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn a_body_that_does_not_arrive_in_time_is_cut_off_without_holding_the_database() {
    let db = opgate_e2e::TestDb::create().await;
    let key = db.create_agent("slow-agent", &[]);
    let intake = opgate_e2e::Intake::start_with(
        &db.url,
        &["--body-timeout", "500ms", "--db-connections", "2"],
    )
    .await;
    let before = db.counts().await;
    // More slow clients than the pool has connections, all waiting at once...
    let keys: Vec<String> = (0..6).map(|i| format!("slow-{i}")).collect();
    let slow =
        futures_util::future::join_all(keys.iter().map(|k| trickle(&intake.base_url, &key, k)));
    let client = reqwest::Client::new();
    let prompt = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        opgate_e2e::api::post_payment(
            &client,
            &intake.base_url,
            Some(&key),
            Some("prompt"),
            &opgate_e2e::api::payment_body("c", "i", "1.00"),
        )
        .await
    };
    let (answers, prompt) = tokio::join!(slow, prompt);
    // ...and a prompt client is served meanwhile: none of them holds a connection.
    assert_eq!(prompt.status, 202, "{}", prompt.body);
    for answer in answers {
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("application/problem+json"), "{answer}");
        assert!(answer.contains("request-timeout"), "{answer}");
    }
    let after = db.counts().await;
    assert_eq!(
        after.operations,
        before.operations + 1,
        "only the prompt payment"
    );
}
