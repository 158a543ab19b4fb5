//! Refunds (`POST /v1/refunds`, its lookup and settlement) against an in-process
//! simulator on 127.0.0.1:0.

mod common;

use std::time::{Duration, Instant};

use common::*;
use opgate_provider_sim::FaultSet;
use serde_json::{json, Value};

fn lookup_path(key: &str) -> String {
    format!("/v1/refunds?idempotency_key={}", encode(key))
}

#[tokio::test]
async fn refund_and_idempotent_repeat() {
    let addr = start(FaultSet::default()).await;
    let payment_id = paid(addr, "pay-1", "250.00").await;
    let first = refund(addr, "refund-1", &payment_id, "100.00").await;
    assert_eq!(first.status, 200);
    let r = &first.body;
    let id = r["id"].as_str().unwrap();
    assert!(id.starts_with("re_") && id.len() == 27, "{id}");
    assert!(id[3..].bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    assert_eq!(r["status"], "succeeded");
    assert!(r.get("failure_code").is_none());
    assert_eq!(r["payment_id"], payment_id.as_str());
    assert_eq!(r["amount"], "100.00");
    assert_eq!(r["currency"], "USD");
    assert_eq!(r["idempotency_key"], "refund-1");
    assert!(r["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(r.as_object().unwrap().len(), 7, "{r}");

    let repeat = refund(addr, "refund-1", &payment_id, "100.00").await;
    assert_eq!(repeat.status, 200);
    assert_eq!(repeat.body, first.body);

    let book = ledger(addr).await;
    assert_eq!(book["count"], 1, "count stays the number of charges");
    assert_eq!(book["refund_count"], 1);
    let row = &book["refunds"][0];
    assert_eq!(row["refund_id"], id);
    assert_eq!(row["payment_id"], payment_id.as_str());
    assert_eq!(row["idempotency_key"], "refund-1");
    assert_eq!(row["amount"], "100.00");
    assert_eq!(row["currency"], "USD");
    assert!(row["refunded_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(row.as_object().unwrap().len(), 6, "{row}");
    assert_eq!(book["requests_by_key"]["refund-1"], 2);

    let found = get(addr, &lookup_path("refund-1")).await;
    assert_eq!(found.status, 200);
    assert_eq!(found.body, first.body);
    let missing = get(addr, &lookup_path("nope")).await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.body, json!({"error": "not found"}));
    assert_eq!(get(addr, "/v1/refunds").await.status, 400);
    // A payment's key is not a refund's.
    assert_eq!(get(addr, &lookup_path("pay-1")).await.status, 404);
}

#[tokio::test]
async fn partial_refunds_stop_exactly_at_the_amount_paid() {
    let addr = start(FaultSet::default()).await;
    let payment_id = paid(addr, "pay", "0.30").await;
    assert_eq!(refund(addr, "r1", &payment_id, "0.1").await.status, 200);
    assert_eq!(refund(addr, "r2", &payment_id, "0.2").await.status, 200);
    let over = refund(addr, "r3", &payment_id, "0.01").await;
    assert_eq!(over.status, 400);
    assert_eq!(
        over.body,
        json!({
            "error": "refund exceeds the amount paid",
            "amount_paid": "0.30",
            "amount_refunded": "0.3",
            "amount_refundable": "0.00"
        })
    );

    let payment_id = paid(addr, "pay-2", "10.00").await;
    assert_eq!(refund(addr, "r4", &payment_id, "3.33").await.status, 200);
    let over = refund(addr, "r5", &payment_id, "6.68").await;
    assert_eq!(over.status, 400);
    assert_eq!(over.body["amount_refundable"], "6.67");
    assert_eq!(refund(addr, "r5", &payment_id, "6.67").await.status, 200);

    let book = ledger(addr).await;
    assert_eq!(book["refund_count"], 4);
    assert_eq!(book["count"], 2);
    // A refused refund is not recorded: its key can be used again.
    assert_eq!(get(addr, &lookup_path("r3")).await.status, 404);
    assert_eq!(book["requests_by_key"]["r5"], 2);
}

#[tokio::test]
async fn conflicts_and_refusals() {
    let addr = start(FaultSet::default()).await;
    let payment_id = paid(addr, "pay", "50.00").await;
    assert_eq!(refund(addr, "k", &payment_id, "5.00").await.status, 200);
    let conflict = refund(addr, "k", &payment_id, "6.00").await;
    assert_eq!(conflict.status, 409);
    assert_eq!(
        conflict.body,
        json!({"error": "idempotency key reused with different parameters"})
    );
    // The same amount written differently is a different request, as for payments.
    assert_eq!(refund(addr, "k", &payment_id, "5.0").await.status, 409);

    let unknown = refund(addr, "k2", "pay_000000000000000000000000", "1.00").await;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.body, json!({"error": "payment not found"}));

    for customer in ["decline_1", "pending_1"] {
        let payment = pay(addr, &format!("pay-{customer}"), customer, "5.00").await;
        let id = payment.body["id"].as_str().unwrap();
        let refused = refund(addr, "k3", id, "1.00").await;
        assert_eq!(refused.status, 400);
        assert_eq!(refused.body, json!({"error": "payment is not refundable"}));
    }

    let mut euros = refund_body(&payment_id, "1.00");
    euros["currency"] = json!("EUR");
    let refused = send(addr, "POST", "/v1/refunds", Some("k4"), Some(&euros))
        .await
        .unwrap();
    assert_eq!(refused.status, 400);
    assert_eq!(
        refused.body,
        json!({"error": "currency differs from the payment's"})
    );

    let body = refund_body(&payment_id, "1.00");
    let no_key = send(addr, "POST", "/v1/refunds", None, Some(&body))
        .await
        .unwrap();
    assert_eq!(no_key.status, 400);
    assert_eq!(no_key.body, json!({"error": "missing Idempotency-Key"}));
    for bad in [
        json!({"payment_id": payment_id}),
        refund_body(&payment_id, "0"),
        refund_body(&payment_id, "-1.00"),
        refund_body("", "1.00"),
    ] {
        let reply = send(addr, "POST", "/v1/refunds", Some("k5"), Some(&bad))
            .await
            .unwrap();
        assert_eq!(reply.status, 400, "{bad}");
        assert!(reply.body["error"].is_string());
    }

    let book = ledger(addr).await;
    assert_eq!(book["refund_count"], 1);
    assert_eq!(book["requests_by_key"]["k"], 3);
}

#[tokio::test]
async fn simulated_failure_and_pending_then_settle() {
    let addr = start(FaultSet::default()).await;
    let payment_id = paid(addr, "pay", "20.00").await;
    let mut body = refund_body(&payment_id, "20.00");
    body["simulate"] = json!("failed");
    let failed = send(addr, "POST", "/v1/refunds", Some("f"), Some(&body))
        .await
        .unwrap();
    assert_eq!(failed.status, 200);
    assert_eq!(failed.body["status"], "failed");
    assert_eq!(failed.body["failure_code"], "refund_declined");
    // simulate is part of the parameters a repeat must match.
    assert_eq!(refund(addr, "f", &payment_id, "20.00").await.status, 409);

    // A failed refund holds nothing back; a pending one holds its amount.
    body["simulate"] = json!("pending");
    let pending = send(addr, "POST", "/v1/refunds", Some("p"), Some(&body))
        .await
        .unwrap();
    assert_eq!(pending.body["status"], "pending");
    assert_eq!(refund(addr, "x", &payment_id, "0.01").await.status, 400);
    assert_eq!(ledger(addr).await["refund_count"], 0);

    let id = pending.body["id"].as_str().unwrap();
    let settle_path = format!("/_sim/refunds/{id}/settle");
    let settled = post(addr, &settle_path, json!({"status": "succeeded"})).await;
    assert_eq!(settled.status, 200);
    assert_eq!(settled.body["status"], "succeeded");
    assert_eq!(settled.body["id"], id);
    let book = ledger(addr).await;
    assert_eq!(book["refund_count"], 1);
    assert_eq!(book["refunds"][0]["refund_id"], id);
    assert_eq!(
        get(addr, &lookup_path("p")).await.body["status"],
        "succeeded"
    );
    let again = post(addr, &settle_path, json!({"status": "failed"})).await;
    assert_eq!(again.status, 409);
    assert_eq!(again.body, json!({"error": "refund is not pending"}));
    assert_eq!(
        post(
            addr,
            "/_sim/refunds/re_nope/settle",
            json!({"status": "failed"})
        )
        .await
        .status,
        404
    );
}

#[tokio::test]
async fn pending_fault_then_settle_as_failed_gives_the_amount_back() {
    let addr = start(FaultSet::default()).await;
    let payment_id = paid(addr, "pay", "5.00").await;
    post(
        addr,
        "/_sim/faults",
        json!({"pending": {"probability": 1.0, "times": 1}}),
    )
    .await;
    let pending = refund(addr, "r1", &payment_id, "5.00").await;
    assert_eq!(pending.body["status"], "pending");
    let id = pending.body["id"].as_str().unwrap();
    let settled = post(
        addr,
        &format!("/_sim/refunds/{id}/settle"),
        json!({"status": "failed"}),
    )
    .await;
    assert_eq!(settled.body["status"], "failed");
    assert_eq!(settled.body["failure_code"], "refund_declined");
    let again = refund(addr, "r2", &payment_id, "5.00").await;
    assert_eq!(again.body["status"], "succeeded");
    assert_eq!(ledger(addr).await["refund_count"], 1);
}

#[tokio::test]
async fn faults_apply_to_refunds() {
    // error-before-commit: nothing recorded, the retry creates it.
    let addr = start(FaultSet::default()).await;
    let payment_id = paid(addr, "pay", "9.00").await;
    post(
        addr,
        "/_sim/faults",
        json!({"error_before_commit": {"probability": 1.0, "times": 1}}),
    )
    .await;
    let reply = refund(addr, "b", &payment_id, "1.00").await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.body, json!({"error": "injected error before commit"}));
    assert_eq!(get(addr, &lookup_path("b")).await.status, 404);
    assert_eq!(refund(addr, "b", &payment_id, "1.00").await.status, 200);

    // error-after-commit: recorded and refunded, answered 500; the retry replays.
    post(
        addr,
        "/_sim/faults",
        json!({"error_after_commit": {"probability": 1.0, "times": 1}}),
    )
    .await;
    let reply = refund(addr, "a", &payment_id, "2.00").await;
    assert_eq!(reply.status, 500);
    assert_eq!(reply.body, json!({"error": "injected error after commit"}));
    let found = get(addr, &lookup_path("a")).await;
    assert_eq!(found.body["status"], "succeeded");
    assert_eq!(
        refund(addr, "a", &payment_id, "2.00").await.body,
        found.body
    );

    // drop-after-commit: recorded, then no answer at all.
    post(
        addr,
        "/_sim/faults",
        json!({"drop_after_commit": {"probability": 1.0, "times": 1}}),
    )
    .await;
    let err = try_refund(addr, "d", &payment_id, "3.00")
        .await
        .unwrap_err();
    assert!(err.is_incomplete_message() || err.is_closed(), "{err}");
    let found = get(addr, &lookup_path("d")).await;
    assert_eq!(found.body["status"], "succeeded");
    assert_eq!(
        refund(addr, "d", &payment_id, "3.00").await.body,
        found.body
    );

    let book = ledger(addr).await;
    assert_eq!(book["refund_count"], 3);
    let keys: Vec<&Value> = (0..3)
        .map(|i| &book["refunds"][i]["idempotency_key"])
        .collect();
    assert_eq!(keys, [&json!("b"), &json!("a"), &json!("d")]);
    assert_eq!(book["requests_by_key"]["b"], 2);
    assert_eq!(book["requests_by_key"]["d"], 2);

    // delay-ms: applies before answering.
    post(addr, "/_sim/faults", json!({"delay_ms": 150})).await;
    let started = Instant::now();
    assert_eq!(refund(addr, "late", &payment_id, "1.00").await.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn traceparents_are_recorded_for_refunds() {
    let addr = start(FaultSet::default()).await;
    let payment_id = paid(addr, "pay", "1.00").await;
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let body = refund_body(&payment_id, "1.00");
    let reply = send_with(
        addr,
        "POST",
        "/v1/refunds",
        &[("idempotency-key", "r"), ("traceparent", traceparent)],
        Some(&body),
    )
    .await
    .unwrap();
    assert_eq!(reply.status, 200);
    let book = ledger(addr).await;
    assert_eq!(book["traceparents_by_key"]["r"], json!([traceparent]));
}
