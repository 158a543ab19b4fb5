//! Generic resources (`POST /v1/resources/{collection}`, its lookups and settlement)
//! against an in-process simulator on 127.0.0.1:0.

mod common;

use std::time::{Duration, Instant};

use common::*;
use opgate_provider_sim::FaultSet;
use serde_json::json;

#[tokio::test]
async fn create_replay_and_conflict() {
    let addr = start(FaultSet::default()).await;
    let body = json!({"sku": "A-1", "quantity": 2, "ship_to": {"city": "Lyon", "lines": [1, 2]}});
    let first = create(addr, "orders", "order-1", &body).await;
    assert_eq!(first.status, 201);
    let r = &first.body;
    let id = r["id"].as_str().unwrap();
    assert!(id.starts_with("res_") && id.len() == 28, "{id}");
    assert!(id[4..].bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
    assert_eq!(r["status"], "succeeded");
    assert!(r.get("failure_code").is_none());
    assert_eq!(r["collection"], "orders");
    assert_eq!(r["idempotency_key"], "order-1");
    assert!(r["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(r["request"], body);
    assert_eq!(r.as_object().unwrap().len(), 6, "{r}");

    // The same object with its keys in another order is the same request.
    let reordered =
        json!({"ship_to": {"lines": [1, 2], "city": "Lyon"}, "quantity": 2, "sku": "A-1"});
    let repeat = create(addr, "orders", "order-1", &reordered).await;
    assert_eq!(repeat.status, 200);
    assert_eq!(repeat.body, first.body);

    for different in [
        json!({"sku": "A-1", "quantity": 3, "ship_to": {"city": "Lyon", "lines": [1, 2]}}),
        json!({"sku": "A-1", "quantity": 2, "ship_to": {"city": "Lyon", "lines": [2, 1]}}),
        json!({"sku": "A-1", "quantity": 2}),
        json!({}),
    ] {
        let conflict = create(addr, "orders", "order-1", &different).await;
        assert_eq!(conflict.status, 409, "{different}");
        assert_eq!(
            conflict.body,
            json!({"error": "idempotency key reused with different parameters"})
        );
    }

    // Keys are scoped per collection.
    let booking = create(addr, "bookings", "order-1", &json!({"room": 7})).await;
    assert_eq!(booking.status, 201);
    assert_ne!(booking.body["id"], first.body["id"]);

    let book = ledger(addr).await;
    assert_eq!(book["resource_count"], 2);
    assert_eq!(book["count"], 0);
    assert_eq!(book["refund_count"], 0);
    let row = &book["resources"][0];
    assert_eq!(
        *row,
        json!({
            "resource_id": id,
            "collection": "orders",
            "idempotency_key": "order-1",
            "created_at": r["created_at"],
        })
    );
    assert_eq!(book["resources"][1]["collection"], "bookings");
    // Counted under the key whatever the collection.
    assert_eq!(book["requests_by_key"]["order-1"], 7);
}

#[tokio::test]
async fn lookups() {
    let addr = start(FaultSet::default()).await;
    let key = "opgate-agent:1/op 7+x";
    let created = create(addr, "hotel_bookings-v2", key, &json!({"night": 1})).await;
    let id = created.body["id"].as_str().unwrap();

    let by_key = get(
        addr,
        &format!(
            "/v1/resources/hotel_bookings-v2?idempotency_key={}",
            encode(key)
        ),
    )
    .await;
    assert_eq!(by_key.status, 200);
    assert_eq!(by_key.body, created.body);
    let by_id = get(addr, &format!("/v1/resources/hotel_bookings-v2/{id}")).await;
    assert_eq!(by_id.status, 200);
    assert_eq!(by_id.body, created.body);

    for missing in [
        "/v1/resources/hotel_bookings-v2?idempotency_key=nope".to_owned(),
        format!("/v1/resources/orders?idempotency_key={}", encode(key)),
        format!("/v1/resources/orders/{id}"),
        "/v1/resources/hotel_bookings-v2/res_nope".to_owned(),
    ] {
        let reply = get(addr, &missing).await;
        assert_eq!(reply.status, 404, "{missing}");
        assert_eq!(reply.body, json!({"error": "not found"}));
    }
    assert_eq!(get(addr, "/v1/resources/orders").await.status, 400);
    assert_eq!(
        get(addr, "/v1/resources/orders?idempotency_key=")
            .await
            .status,
        400
    );
}

#[tokio::test]
async fn bad_requests() {
    let addr = start(FaultSet::default()).await;
    let no_key = send(addr, "POST", "/v1/resources/orders", None, Some(&json!({})))
        .await
        .unwrap();
    assert_eq!(no_key.status, 400);
    assert_eq!(no_key.body, json!({"error": "missing Idempotency-Key"}));

    for not_an_object in [json!([1]), json!("order"), json!(7), json!(null)] {
        let reply = create(addr, "orders", "k", &not_an_object).await;
        assert_eq!(reply.status, 400, "{not_an_object}");
        assert_eq!(reply.body, json!({"error": "body must be a JSON object"}));
    }

    let long = "x".repeat(65);
    for collection in ["Orders", "or.ders", "%41", "", long.as_str()] {
        let reply = create(addr, collection, "k", &json!({})).await;
        assert_eq!(reply.status, 400, "{collection:?}");
        assert_eq!(
            reply.body,
            json!({"error": "collection must be 1 to 64 characters of a-z, 0-9, _ and -"})
        );
    }
    assert_eq!(
        create(addr, &"x".repeat(64), "k", &json!({})).await.status,
        201
    );

    for (method, path) in [
        ("POST", "/v1/resources/orders/res_1"),
        ("GET", "/v1/resources/orders/res_1/x"),
        ("GET", "/v1/resources/orders/"),
        ("DELETE", "/v1/resources/orders"),
        ("POST", "/v1/resources"),
    ] {
        let reply = send(addr, method, path, Some("k"), Some(&json!({})))
            .await
            .unwrap();
        assert_eq!(reply.status, 404, "{method} {path}");
    }

    let book = ledger(addr).await;
    assert_eq!(book["resource_count"], 1);
    // Only requests that reached a valid collection were counted.
    assert_eq!(book["requests_by_key"]["k"], 5);
}

#[tokio::test]
async fn simulated_failure_and_pending_then_settle() {
    let addr = start(FaultSet::default()).await;
    let failed = create(
        addr,
        "orders",
        "f",
        &json!({"simulate": "failed", "sku": "A"}),
    )
    .await;
    assert_eq!(failed.status, 201);
    assert_eq!(failed.body["status"], "failed");
    assert_eq!(failed.body["failure_code"], "rejected");
    assert_eq!(failed.body["request"]["simulate"], "failed");
    let replay = create(
        addr,
        "orders",
        "f",
        &json!({"sku": "A", "simulate": "failed"}),
    )
    .await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.body, failed.body);

    // Any other value of simulate is just data.
    let plain = create(addr, "orders", "s", &json!({"simulate": "succeeded"})).await;
    assert_eq!(plain.body["status"], "succeeded");

    let pending = create(addr, "orders", "p", &json!({"simulate": "pending"})).await;
    assert_eq!(pending.status, 201);
    assert_eq!(pending.body["status"], "pending");
    assert_eq!(ledger(addr).await["resource_count"], 1);

    let id = pending.body["id"].as_str().unwrap();
    let settle_path = format!("/_sim/resources/{id}/settle");
    let settled = post(addr, &settle_path, json!({"status": "succeeded"})).await;
    assert_eq!(settled.status, 200);
    assert_eq!(settled.body["status"], "succeeded");
    let book = ledger(addr).await;
    assert_eq!(book["resource_count"], 2);
    assert_eq!(book["resources"][1]["resource_id"], id);
    assert_eq!(
        get(addr, &format!("/v1/resources/orders/{id}")).await.body["status"],
        "succeeded"
    );
    let again = post(addr, &settle_path, json!({"status": "succeeded"})).await;
    assert_eq!(again.status, 409);
    assert_eq!(again.body, json!({"error": "resource is not pending"}));

    let pending = create(addr, "orders", "p2", &json!({"simulate": "pending"})).await;
    let id = pending.body["id"].as_str().unwrap();
    let failed = post(
        addr,
        &format!("/_sim/resources/{id}/settle"),
        json!({"status": "failed"}),
    )
    .await;
    assert_eq!(failed.body["status"], "failed");
    assert_eq!(failed.body["failure_code"], "rejected");
    assert_eq!(ledger(addr).await["resource_count"], 2);
}

#[tokio::test]
async fn faults_apply_to_resources() {
    let addr = start(FaultSet::default()).await;
    let body = json!({"sku": "A"});
    let arm = |fault: &str| json!({ fault: {"probability": 1.0, "times": 1} });

    post(addr, "/_sim/faults", arm("error_before_commit")).await;
    let reply = create(addr, "orders", "b", &body).await;
    assert_eq!(reply.status, 503);
    assert_eq!(reply.body, json!({"error": "injected error before commit"}));
    assert_eq!(
        get(addr, "/v1/resources/orders?idempotency_key=b")
            .await
            .status,
        404
    );
    assert_eq!(create(addr, "orders", "b", &body).await.status, 201);

    post(addr, "/_sim/faults", arm("error_after_commit")).await;
    let reply = create(addr, "orders", "a", &body).await;
    assert_eq!(reply.status, 500);
    assert_eq!(reply.body, json!({"error": "injected error after commit"}));
    let retry = create(addr, "orders", "a", &body).await;
    assert_eq!(retry.status, 200);
    assert_eq!(retry.body["status"], "succeeded");

    post(addr, "/_sim/faults", arm("drop_after_commit")).await;
    let err = try_create(addr, "orders", "d", &body).await.unwrap_err();
    assert!(err.is_incomplete_message() || err.is_closed(), "{err}");
    let found = get(addr, "/v1/resources/orders?idempotency_key=d").await;
    assert_eq!(found.body["status"], "succeeded");
    assert_eq!(create(addr, "orders", "d", &body).await.body, found.body);

    post(addr, "/_sim/faults", arm("pending")).await;
    let pending = create(addr, "orders", "p", &body).await;
    assert_eq!(pending.status, 201);
    assert_eq!(pending.body["status"], "pending");

    let book = ledger(addr).await;
    assert_eq!(book["resource_count"], 3);
    assert_eq!(book["requests_by_key"]["d"], 2);

    post(addr, "/_sim/faults", json!({"delay_ms": 150})).await;
    let started = Instant::now();
    assert_eq!(create(addr, "orders", "late", &body).await.status, 201);
    assert!(started.elapsed() >= Duration::from_millis(150));
}
