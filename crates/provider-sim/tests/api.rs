//! The provider contract against an in-process simulator on 127.0.0.1:0.

mod common;

use std::time::{Duration, Instant};

use common::*;
use opgate_provider_sim::{FaultSet, ProbFault};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn certain(times: Option<u32>) -> Option<ProbFault> {
    Some(ProbFault::new(1.0, times).unwrap())
}

fn requests_for(book: &Value, key: &str) -> u64 {
    book["requests_by_key"][key].as_u64().unwrap_or(0)
}

#[tokio::test]
async fn charge_and_idempotent_repeat() {
    let addr = start(FaultSet::default()).await;
    let first = pay(addr, "key-1", "cus_1", "250.00").await;
    assert_eq!(first.status, 200);
    let p = &first.body;
    let id = p["id"].as_str().unwrap();
    assert!(id.starts_with("pay_") && id.len() == 28, "{id}");
    assert_eq!(p["status"], "succeeded");
    assert!(p.get("failure_code").is_none());
    assert_eq!(p["customer_id"], "cus_1");
    assert_eq!(p["invoice_id"], "inv_1");
    assert_eq!(p["amount"], "250.00");
    assert_eq!(p["currency"], "USD");
    assert_eq!(p["idempotency_key"], "key-1");
    assert!(p["created_at"].as_str().unwrap().ends_with('Z'));

    let repeat = pay(addr, "key-1", "cus_1", "250.00").await;
    assert_eq!(repeat.status, 200);
    assert_eq!(repeat.body, first.body);

    let book = ledger(addr).await;
    assert_eq!(book["count"], 1);
    let charge = &book["charges"][0];
    assert_eq!(charge["payment_id"], id);
    assert_eq!(charge["idempotency_key"], "key-1");
    assert_eq!(charge["customer_id"], "cus_1");
    assert_eq!(charge["invoice_id"], "inv_1");
    assert_eq!(charge["amount"], "250.00");
    assert_eq!(charge["currency"], "USD");
    assert!(charge["charged_at"].is_string());
    assert_eq!(requests_for(&book, "key-1"), 2);
}

#[tokio::test]
async fn same_key_with_different_parameters_conflicts() {
    let addr = start(FaultSet::default()).await;
    assert_eq!(pay(addr, "k", "cus_1", "250.00").await.status, 200);
    let conflict = pay(addr, "k", "cus_1", "251.00").await;
    assert_eq!(conflict.status, 409);
    assert_eq!(
        conflict.body,
        json!({"error": "idempotency key reused with different parameters"})
    );
    assert_eq!(pay(addr, "k", "cus_2", "250.00").await.status, 409);
    let book = ledger(addr).await;
    assert_eq!(book["count"], 1);
    assert_eq!(requests_for(&book, "k"), 3);
}

#[tokio::test]
async fn declined_customer_fails_without_charge() {
    let addr = start(FaultSet::default()).await;
    let reply = pay(addr, "k", "decline_me", "10.00").await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body["status"], "failed");
    assert_eq!(reply.body["failure_code"], "card_declined");
    assert_eq!(ledger(addr).await["count"], 0);
    // A repeat returns the same failed payment.
    assert_eq!(pay(addr, "k", "decline_me", "10.00").await.body, reply.body);
}

#[tokio::test]
async fn lookup_by_key() {
    let addr = start(FaultSet::default()).await;
    let key = "opgate-agent:1/op 7+x";
    let created = pay(addr, key, "cus_1", "5.00").await;
    let found = get(
        addr,
        &format!("/v1/payments?idempotency_key={}", encode(key)),
    )
    .await;
    assert_eq!(found.status, 200);
    assert_eq!(found.body, created.body);

    let missing = get(addr, "/v1/payments?idempotency_key=nope").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.body, json!({"error": "not found"}));
    assert_eq!(get(addr, "/v1/payments").await.status, 400);
    assert_eq!(get(addr, "/v1/payments?idempotency_key=").await.status, 400);
    assert_eq!(
        get(addr, "/v1/payments?idempotency_key=%zz").await.status,
        400
    );
}

#[tokio::test]
async fn bad_requests() {
    let addr = start(FaultSet::default()).await;
    let body = payment_body("cus_1", "1.00");
    let no_key = send(addr, "POST", "/v1/payments", None, Some(&body))
        .await
        .unwrap();
    assert_eq!(no_key.status, 400);
    assert_eq!(no_key.body, json!({"error": "missing Idempotency-Key"}));

    let malformed = send(
        addr,
        "POST",
        "/v1/payments",
        Some("k"),
        Some(&json!({"amount": 1})),
    )
    .await
    .unwrap();
    assert_eq!(malformed.status, 400);
    assert!(malformed.body["error"].is_string());
    assert_eq!(pay(addr, "k2", "cus_1", "-1").await.status, 400);
    assert_eq!(ledger(addr).await["count"], 0);

    assert_eq!(get(addr, "/healthz").await.body, json!({"status": "ok"}));
    let unknown = get(addr, "/nope").await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.body, json!({"error": "not found"}));
    assert_eq!(
        send(addr, "DELETE", "/v1/payments", None, None)
            .await
            .unwrap()
            .status,
        404
    );
}

#[tokio::test]
async fn error_before_commit_records_nothing() {
    let addr = start(FaultSet {
        error_before_commit: certain(None),
        ..FaultSet::default()
    })
    .await;
    let reply = pay(addr, "k", "cus_1", "1.00").await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.body, json!({"error": "injected error before commit"}));
    let book = ledger(addr).await;
    assert_eq!(book["count"], 0);
    assert_eq!(requests_for(&book, "k"), 1);
    assert_eq!(
        get(addr, "/v1/payments?idempotency_key=k").await.status,
        404
    );
}

#[tokio::test]
async fn error_after_commit_keeps_the_charge() {
    let addr = start(FaultSet {
        error_after_commit: certain(None),
        ..FaultSet::default()
    })
    .await;
    let reply = pay(addr, "k", "cus_1", "1.00").await;
    assert_eq!(reply.status, 500);
    assert_eq!(reply.body, json!({"error": "injected error after commit"}));
    assert_eq!(ledger(addr).await["count"], 1);
    let found = get(addr, "/v1/payments?idempotency_key=k").await;
    assert_eq!(found.status, 200);
    assert_eq!(found.body["status"], "succeeded");
    // The retry is a replay: answered with the payment, no second charge.
    let retry = pay(addr, "k", "cus_1", "1.00").await;
    assert_eq!(retry.status, 200);
    assert_eq!(retry.body, found.body);
    assert_eq!(ledger(addr).await["count"], 1);
}

#[tokio::test]
async fn drop_after_commit_sends_no_bytes_but_charges() {
    let addr = start(FaultSet {
        drop_after_commit: certain(None),
        ..FaultSet::default()
    })
    .await;
    let body = payment_body("cus_1", "1.00").to_string();
    let request = format!(
        "POST /v1/payments HTTP/1.1\r\nhost: sim\r\nidempotency-key: raw\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut received))
        .await
        .expect("the server closes the connection");
    if let Err(e) = read {
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    }
    assert!(
        received.is_empty(),
        "got {:?}",
        String::from_utf8_lossy(&received)
    );

    // Through an HTTP client: an error, not a response.
    let err = try_pay(addr, "client", "cus_1", "2.00").await.unwrap_err();
    assert!(err.is_incomplete_message() || err.is_closed(), "{err}");

    let book = ledger(addr).await;
    assert_eq!(book["count"], 2);
    assert_eq!(
        get(addr, "/v1/payments?idempotency_key=raw").await.body["status"],
        "succeeded"
    );
}

#[tokio::test]
async fn limited_fault_spends_itself() {
    let addr = start(FaultSet {
        drop_after_commit: certain(Some(1)),
        ..FaultSet::default()
    })
    .await;
    assert!(try_pay(addr, "k", "cus_1", "1.00").await.is_err());
    let retry = pay(addr, "k", "cus_1", "1.00").await;
    assert_eq!(retry.status, 200);
    assert_eq!(retry.body["status"], "succeeded");
    // A new payment is not dropped either: the fault is spent.
    assert_eq!(pay(addr, "k2", "cus_1", "1.00").await.status, 200);
    let faults = get(addr, "/_sim/faults").await.body;
    assert_eq!(
        faults["drop_after_commit"],
        json!({"probability": 1.0, "times": 0})
    );
    let book = ledger(addr).await;
    assert_eq!(book["count"], 2);
    assert_eq!(requests_for(&book, "k"), 2);

    let addr = start(FaultSet {
        error_before_commit: certain(Some(1)),
        ..FaultSet::default()
    })
    .await;
    assert_eq!(pay(addr, "k", "cus_1", "1.00").await.status, 503);
    assert_eq!(pay(addr, "k", "cus_1", "1.00").await.status, 200);
    assert_eq!(ledger(addr).await["count"], 1);
}

#[tokio::test]
async fn pending_then_settle() {
    let addr = start(FaultSet::default()).await;
    let created = pay(addr, "k", "pending_1", "9.99").await;
    assert_eq!(created.status, 200);
    assert_eq!(created.body["status"], "pending");
    assert_eq!(ledger(addr).await["count"], 0);
    let id = created.body["id"].as_str().unwrap().to_owned();
    let settle_path = format!("/_sim/payments/{id}/settle");

    assert_eq!(
        post(addr, &settle_path, json!({"status": "maybe"}))
            .await
            .status,
        400
    );
    let settled = post(addr, &settle_path, json!({"status": "succeeded"})).await;
    assert_eq!(settled.status, 200);
    assert_eq!(settled.body["status"], "succeeded");
    assert_eq!(settled.body["id"], id.as_str());
    let book = ledger(addr).await;
    assert_eq!(book["count"], 1);
    assert_eq!(book["charges"][0]["payment_id"], id.as_str());
    assert_eq!(
        get(addr, "/v1/payments?idempotency_key=k").await.body["status"],
        "succeeded"
    );
    assert_eq!(
        post(addr, &settle_path, json!({"status": "succeeded"}))
            .await
            .status,
        409
    );
    assert_eq!(
        post(
            addr,
            "/_sim/payments/pay_nope/settle",
            json!({"status": "succeeded"})
        )
        .await
        .status,
        404
    );
}

#[tokio::test]
async fn pending_fault_then_settle_as_failed() {
    let addr = start(FaultSet {
        pending: certain(Some(1)),
        ..FaultSet::default()
    })
    .await;
    let created = pay(addr, "k", "cus_1", "1.00").await;
    assert_eq!(created.body["status"], "pending");
    let id = created.body["id"].as_str().unwrap();
    let settled = post(
        addr,
        &format!("/_sim/payments/{id}/settle"),
        json!({"status": "failed", "failure_code": "insufficient_funds"}),
    )
    .await;
    assert_eq!(settled.status, 200);
    assert_eq!(settled.body["status"], "failed");
    assert_eq!(settled.body["failure_code"], "insufficient_funds");
    assert_eq!(ledger(addr).await["count"], 0);
    // Spent: the next payment succeeds at once.
    assert_eq!(
        pay(addr, "k2", "cus_1", "1.00").await.body["status"],
        "succeeded"
    );
}

#[tokio::test]
async fn posting_faults_replaces_them() {
    let addr = start(FaultSet {
        error_after_commit: certain(None),
        delay_ms: 1000,
        ..FaultSet::default()
    })
    .await;
    let set = post(
        addr,
        "/_sim/faults",
        json!({"error_before_commit": {"probability": 1.0}}),
    )
    .await;
    assert_eq!(set.status, 200);
    let expected = json!({
        "drop_after_commit": null,
        "error_before_commit": {"probability": 1.0},
        "error_after_commit": null,
        "pending": null,
        "delay_ms": 0,
        "delay_answer_ms": 0
    });
    assert_eq!(set.body, expected);
    assert_eq!(get(addr, "/_sim/faults").await.body, expected);
    assert_eq!(pay(addr, "k", "cus_1", "1.00").await.status, 503);

    for invalid in [
        json!({"pending": {"probability": 1.5}}),
        json!({"explode": {"probability": 1.0}}),
        json!({"delay_ms": -1}),
        json!({"pending": {"probability": 0.5, "times": -1}}),
    ] {
        assert_eq!(post(addr, "/_sim/faults", invalid).await.status, 400);
    }
    assert_eq!(get(addr, "/_sim/faults").await.body, expected);

    let cleared = post(addr, "/_sim/faults", json!({})).await;
    assert_eq!(cleared.body["error_before_commit"], Value::Null);
    assert_eq!(pay(addr, "k", "cus_1", "1.00").await.status, 200);
}

#[tokio::test]
async fn delay_applies_before_answering() {
    let addr = start(FaultSet::default()).await;
    post(addr, "/_sim/faults", json!({"delay_ms": 150})).await;
    let started = Instant::now();
    assert_eq!(pay(addr, "k", "cus_1", "1.00").await.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn delay_answer_charges_first_and_answers_late() {
    let addr = start(FaultSet {
        delay_answer_ms: 300,
        ..FaultSet::default()
    })
    .await;
    let started = Instant::now();
    let paying = tokio::spawn(pay(addr, "k", "cus_1", "1.00"));
    // The charge is made before the answer is held: the ledger shows it meanwhile.
    while ledger(addr).await["count"] != 1 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let reply = paying.await.unwrap();
    assert_eq!(
        (reply.status, &reply.body["status"]),
        (200, &json!("succeeded"))
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    // A replay is held as well, and charges nothing more.
    let started = Instant::now();
    assert_eq!(pay(addr, "k", "cus_1", "1.00").await.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(ledger(addr).await["count"], 1);
}
