//! Every status code of intake's contract, each from a request a user could send, and
//! each refusal leaves every table as it was.

use opgate_e2e::api::{get_operation, payment_body, post_payment, post_raw, Reply};
use opgate_e2e::{Intake, TestDb};
use serde_json::json;

struct Fixture {
    db: TestDb,
    intake: Intake,
    client: reqwest::Client,
    key: String,
}

async fn fixture() -> Fixture {
    let db = TestDb::create().await;
    let key = db.create_agent("billing-agent", &["--max-amount", "USD:1000.00"]);
    let intake = Intake::start(&db.url).await;
    Fixture {
        db,
        intake,
        client: reqwest::Client::new(),
        key,
    }
}

impl Fixture {
    async fn post(&self, idempotency_key: Option<&str>, body: serde_json::Value) -> Reply {
        post_payment(
            &self.client,
            &self.intake.base_url,
            Some(&self.key),
            idempotency_key,
            &body,
        )
        .await
    }
}

#[tokio::test]
async fn a_new_payment_is_accepted_with_its_location() {
    let f = fixture().await;
    let reply = f
        .post(Some("order-1"), payment_body("cus_1", "inv_1", "250.00"))
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    let id = reply.operation_id().to_owned();
    assert_eq!(
        reply.header("location"),
        Some(format!("/agent/operations/{id}").as_str())
    );
    assert_eq!(reply.header("idempotent-replayed"), None);
    assert_eq!(reply.body["status"], "PENDING");
    assert_eq!(reply.body["operation_type"], "payment");
    assert_eq!(reply.body["attempts"], 0);
    assert!(reply.body["message"]
        .as_str()
        .unwrap()
        .contains("Do not submit a new request for it"));
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert!(reply.body.get("provider_reference").is_none());

    let read = get_operation(&f.client, &f.intake.base_url, &f.key, &id).await;
    assert_eq!(read.status, 202);
    assert_eq!(read.body["operation_id"], id.as_str());
    assert_eq!(read.body["created_at"], reply.body["created_at"]);

    let counts = f.db.counts().await;
    assert_eq!(
        (counts.operations, counts.outbox, counts.operation_events),
        (1, 1, 1)
    );

    // Ids are UUIDv7: a later operation's id sorts after an earlier one's.
    let later = f
        .post(Some("order-2"), payment_body("cus_1", "inv_2", "250.00"))
        .await;
    let (first, second): (uuid::Uuid, uuid::Uuid) =
        (id.parse().unwrap(), later.operation_id().parse().unwrap());
    assert_eq!((first.get_version_num(), second.get_version_num()), (7, 7));
    assert!(first < second, "{first} then {second}");
}

#[tokio::test]
async fn amounts_may_be_numbers_and_currency_defaults_to_usd() {
    let f = fixture().await;
    let reply = f
        .post(
            Some("numeric"),
            json!({"customer_id": "c", "invoice_id": "i", "amount": 19.99}),
        )
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    // The same payment with the amount as text, key order changed, currency explicit:
    // the same logical request.
    let replay = post_raw(
        &f.client,
        &f.intake.base_url,
        Some(&f.key),
        Some("numeric"),
        "application/json; charset=utf-8",
        r#"{ "currency" : "usd", "amount": "19.990", "invoice_id": " i ", "customer_id": "c" }"#
            .into(),
    )
    .await;
    assert_eq!(replay.status, 202, "{}", replay.body);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.operation_id(), reply.operation_id());
}

#[tokio::test]
async fn every_refusal_has_its_status_and_writes_nothing() {
    let f = fixture().await;
    let before = f.db.counts().await;
    let valid = payment_body("cus_1", "inv_1", "10.00");
    let base = f.intake.base_url.clone();
    let c = &f.client;
    let key = Some(f.key.as_str());

    let cases: Vec<(&str, u16, Reply)> = vec![
        ("missing key", 400, post_payment(c, &base, key, None, &valid).await),
        ("over-long key", 400, post_payment(c, &base, key, Some(&"k".repeat(256)), &valid).await),
        ("key with a space", 400, post_payment(c, &base, key, Some("two words"), &valid).await),
        ("malformed JSON", 400, post_raw(c, &base, key, Some("k1"), "application/json", "{\"customer_id\": ".into()).await),
        ("unknown field", 422, f.post(Some("k2"), json!({"customer_id": "c", "invoice_id": "i", "amount": "1", "tip": "5"})).await),
        ("missing field", 422, f.post(Some("k3"), json!({"customer_id": "c", "amount": "1"})).await),
        ("zero amount", 422, f.post(Some("k4"), payment_body("c", "i", "0")).await),
        ("negative amount", 422, f.post(Some("k5"), payment_body("c", "i", "-5.00")).await),
        ("over-precise amount", 422, f.post(Some("k6"), payment_body("c", "i", "1.001")).await),
        ("over-precise yen", 422, f.post(Some("k7"), json!({"customer_id": "c", "invoice_id": "i", "amount": "1.5", "currency": "JPY"})).await),
        ("unknown currency", 422, f.post(Some("k8"), json!({"customer_id": "c", "invoice_id": "i", "amount": "1", "currency": "ZZZ"})).await),
        ("empty customer", 422, f.post(Some("k9"), payment_body("  ", "i", "1")).await),
        ("amount not a number", 422, f.post(Some("k10"), payment_body("c", "i", "ten")).await),
        ("no bearer key", 401, post_payment(c, &base, None, Some("k11"), &valid).await),
        ("unknown bearer key", 401, post_payment(c, &base, Some("opg_0123456789abcdef_0000000000000000000000000000000000000000000000000000000000000000"), Some("k12"), &valid).await),
        ("garbage bearer key", 401, post_payment(c, &base, Some("hunter2"), Some("k13"), &valid).await),
        ("over the limit", 403, f.post(Some("k14"), payment_body("c", "i", "1000.01")).await),
        ("currency without a limit", 403, f.post(Some("k15"), json!({"customer_id": "c", "invoice_id": "i", "amount": "1", "currency": "EUR"})).await),
        ("body over 16 KiB", 413, f.post(Some("k16"), json!({"customer_id": "c", "invoice_id": "i", "amount": "1", "pad": "x".repeat(17 * 1024)})).await),
        ("wrong content type", 415, post_raw(c, &base, key, Some("k17"), "text/plain", valid.to_string()).await),
        ("no content type", 415, post_raw(c, &base, key, Some("k18"), "", valid.to_string()).await),
    ];
    for (case, status, reply) in &cases {
        assert_eq!(reply.status, *status, "{case}: {}", reply.body);
        reply.assert_problem(*status);
    }
    let unauthenticated = &cases
        .iter()
        .find(|(case, ..)| *case == "no bearer key")
        .unwrap()
        .2;
    assert_eq!(unauthenticated.header("www-authenticate"), Some("Bearer"));
    assert_eq!(
        f.db.counts().await,
        before,
        "a refused request wrote something"
    );
}

#[tokio::test]
async fn the_limit_itself_is_allowed() {
    let f = fixture().await;
    let reply = f
        .post(Some("at-limit"), payment_body("c", "i", "1000"))
        .await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    // Registered for exactly the limit, neither rounded nor cut.
    let id = reply.operation_id().parse().unwrap();
    let stored = f.db.store.find_operation(id).await.unwrap().unwrap();
    assert_eq!(
        (
            stored.amount.map(|a| a.to_string()),
            stored.currency.as_deref()
        ),
        (Some("1000.00".to_owned()), Some("USD"))
    );
    assert_eq!(stored.agent_id, "billing-agent");
    assert_eq!(stored.status.as_str(), "PENDING");
}

#[tokio::test]
async fn a_key_reused_for_a_different_payment_is_unprocessable_and_writes_nothing() {
    let f = fixture().await;
    let first = f
        .post(Some("order-7"), payment_body("cus_1", "inv_7", "70.00"))
        .await;
    assert_eq!(first.status, 202);
    let before = f.db.counts().await;
    let reuse = f
        .post(Some("order-7"), payment_body("cus_1", "inv_7", "71.00"))
        .await;
    // 422, as draft-ietf-httpapi-idempotency-key-header says: the key is fine, the
    // request does not match it.
    reuse.assert_problem(422);
    assert_eq!(
        reuse.body["type"],
        "urn:opgate:problem:idempotency-key-reused"
    );
    assert_eq!(f.db.counts().await, before);
}

#[tokio::test]
async fn revoked_and_unauthorised_agents_are_refused() {
    let f = fixture().await;
    let reader = f.db.create_agent("read-only-agent", &["--allow", "none"]);
    let revoked = f.db.create_agent("old-agent", &[]);
    opgate_e2e::opgate(&f.db.url, &["agents", "revoke", "old-agent"]).success();
    let body = payment_body("c", "i", "5");
    let reply = post_payment(
        &f.client,
        &f.intake.base_url,
        Some(&revoked),
        Some("r1"),
        &body,
    )
    .await;
    reply.assert_problem(401);
    assert_eq!(reply.header("www-authenticate"), Some("Bearer"));
    // An agent allowed no operation types may authenticate but not pay.
    let refused = post_payment(
        &f.client,
        &f.intake.base_url,
        Some(&reader),
        Some("r2"),
        &body,
    )
    .await;
    refused.assert_problem(403);
    assert!(refused.body["detail"].as_str().unwrap().contains("payment"));
    // A limit in EUR alone refuses USD.
    let eur_only = f.db.create_agent("eur-agent", &["--max-amount", "EUR:5"]);
    let usd = post_payment(
        &f.client,
        &f.intake.base_url,
        Some(&eur_only),
        Some("r3"),
        &body,
    )
    .await;
    usd.assert_problem(403);
}

#[tokio::test]
async fn unknown_and_malformed_operation_ids_are_not_found() {
    let f = fixture().await;
    let base = &f.intake.base_url;
    get_operation(&f.client, base, &f.key, &uuid::Uuid::new_v4().to_string())
        .await
        .assert_problem(404);
    get_operation(&f.client, base, &f.key, "not-a-uuid")
        .await
        .assert_problem(404);
    let anonymous = f
        .client
        .get(format!("{base}/agent/operations/{}", uuid::Uuid::new_v4()))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
}

#[tokio::test]
async fn health_readiness_and_openapi_are_served() {
    let f = fixture().await;
    let get = |path: &str| f.client.get(f.intake.url(path)).send();
    assert_eq!(get("/healthz").await.unwrap().status(), 200);
    assert_eq!(get("/readyz").await.unwrap().status(), 200);
    let spec: serde_json::Value = get("/openapi.json").await.unwrap().json().await.unwrap();
    assert!(spec["openapi"].as_str().unwrap().starts_with("3."));
    assert!(spec["paths"]["/agent/operations/{kind}"]["post"].is_object());
    assert!(spec["paths"]["/agent/operations/{operation_id}"]["get"].is_object());
    assert!(spec["components"]["schemas"]["PaymentBody"].is_object());
    assert!(spec["components"]["schemas"]["RefundBody"].is_object());
}
