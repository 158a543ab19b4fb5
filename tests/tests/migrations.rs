//! Upgrading a database that an earlier release wrote: a payment registered before
//! operation kinds existed (schema V4) keeps its request hash and becomes a payment of
//! the opgate HTTP provider with its money, so that a retry still replays it and it can
//! be refunded. Real `opgate migrate`, real intake, real PostgreSQL.

use opgate_domain::{ApiKey, KeyKind, PaymentRequest};
use opgate_e2e::db::empty_database;
use opgate_e2e::{opgate, Intake};
use uuid::Uuid;

/// The agent as `opgate agents create legacy --allow payment --allow refund` wrote it
/// before V5 (today's CLI writes columns a V4 database does not have).
const LEGACY_AGENT: &str = "
INSERT INTO agents (agent_id, key_id, api_key_hash, allowed_operations)
VALUES ('legacy', $1, $2, ARRAY['payment', 'refund'])";

/// The row intake wrote for a SUCCEEDED payment before V5, as it wrote it.
const LEGACY_PAYMENT: &str = "
INSERT INTO operations (operation_id, agent_id, idempotency_key, operation_type, customer_id,
                        request_hash, request_payload, status, provider_reference, attempts)
VALUES ($1, 'legacy', 'invoice-1-payment', 'payment', 'cus_1', $2, $3, 'SUCCEEDED', 'pay_legacy', 1)";

#[tokio::test]
async fn a_payment_from_before_kinds_keeps_its_hash_replays_and_can_be_refunded() {
    let url = empty_database().await;

    opgate(&url, &["migrate", "--to", "4"]).success();
    let (db, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let agent_key = ApiKey::generate(KeyKind::Agent);
    db.execute(LEGACY_AGENT, &[&agent_key.key_id(), &agent_key.hash()])
        .await
        .unwrap();
    let key = agent_key.expose().to_owned();
    let payment = PaymentRequest::parse("cus_1", "inv_1", "250.00", Some("USD")).unwrap();
    let hash = payment.request_hash().to_string();
    assert_eq!(
        hash,
        "991c3105c2e27a2e5d9a241dc3e226871fc747505498baa11adb1b4c153f4d13"
    );
    let payload = serde_json::to_value(payment.business_fields()).unwrap();
    let id = Uuid::new_v4();
    db.execute(LEGACY_PAYMENT, &[&id, &hash, &payload])
        .await
        .unwrap();

    opgate(&url, &["migrate"]).success();
    let store = opgate_store::Store::connect(&url, &Default::default()).unwrap();
    let migrated = store.find_operation(id).await.unwrap().unwrap();
    assert_eq!(
        migrated.request_hash.as_str(),
        hash,
        "the stored hash is unchanged"
    );
    assert_eq!(migrated.operation_type, "payment");
    assert_eq!(migrated.provider, "opgate-http");
    assert_eq!(migrated.amount, Some("250.00".parse().unwrap()));
    assert_eq!(migrated.currency.as_deref(), Some("USD"));

    let intake = Intake::start(&url).await;
    let client = reqwest::Client::new();
    let retry = opgate_e2e::api::post_operation(
        &client,
        &intake.base_url,
        "payment",
        &key,
        "invoice-1-payment",
        &serde_json::json!({"customer_id": "cus_1", "invoice_id": "inv_1", "amount": "250", "currency": "usd"}),
    )
    .await;
    assert_eq!(retry.status, 200, "{}", retry.body);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.operation_id(), id.to_string());

    let refund = opgate_e2e::api::post_operation(
        &client,
        &intake.base_url,
        "refund",
        &key,
        "invoice-1-refund",
        &serde_json::json!({"payment_operation_id": id}),
    )
    .await;
    assert_eq!(refund.status, 202, "{}", refund.body);
    let refund_id: Uuid = refund.operation_id().parse().unwrap();
    let refund = store.find_operation(refund_id).await.unwrap().unwrap();
    assert_eq!(
        refund.amount,
        Some("250.00".parse().unwrap()),
        "all of it remained"
    );
    assert_eq!(refund.provider, "opgate-http", "the payment's provider");
}

/// V14 gives every per-operation key agent_id (for Citus) on a database already in use:
/// every row stays, audit event ids count on from where the identity column was, and
/// the new foreign keys hold an event to its operation's agent.
#[tokio::test]
async fn keys_gain_agent_id_in_place_and_nothing_is_lost() {
    let url = empty_database().await;
    opgate(&url, &["migrate", "--to", "13"]).success();
    opgate(&url, &["agents", "create", "keyed"]).success();
    opgate(&url, &["agents", "create", "other"]).success();
    let store = opgate_store::Store::connect(&url, &Default::default()).unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            opgate_e2e::db::register_payment(&store, "keyed", &format!("k-{i}"), "1.00").await,
        );
    }
    let (db, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let counts = "SELECT (SELECT count(*) FROM operations), (SELECT count(*) FROM outbox),
                         (SELECT count(*) FROM operation_events), (SELECT max(event_id) FROM operation_events)";
    let before = db.query_one(counts, &[]).await.unwrap();
    let before: (i64, i64, i64, i64) = (before.get(0), before.get(1), before.get(2), before.get(3));
    assert_eq!((before.0, before.1), (5, 5));

    opgate(&url, &["migrate"]).success();

    let after = db.query_one(counts, &[]).await.unwrap();
    assert_eq!(
        (
            after.get::<_, i64>(0),
            after.get::<_, i64>(1),
            after.get::<_, i64>(2)
        ),
        (before.0, before.1, before.2),
        "every operation, outbox event and audit event kept"
    );
    let key_columns = "SELECT string_agg(a.attname, ',' ORDER BY k.n)
        FROM pg_constraint c, unnest(c.conkey) WITH ORDINALITY k(attnum, n)
        JOIN pg_attribute a ON a.attnum = k.attnum
        WHERE c.conname = $1 AND c.conparentid = 0 AND a.attrelid = c.conrelid";
    for (constraint, columns) in [
        ("operations_pkey", "operation_id,agent_id"),
        ("outbox_pkey", "event_id,agent_id,slot"),
        ("operation_events_pkey", "event_id,agent_id"),
        ("outbox_operation_fkey", "operation_id,agent_id"),
        ("operation_events_operation_fkey", "operation_id,agent_id"),
    ] {
        let found: Option<String> = db
            .query_one(key_columns, &[&constraint])
            .await
            .unwrap()
            .get(0);
        assert_eq!(found.as_deref(), Some(columns), "{constraint}");
    }

    // A new audit event numbers after the old ones.
    let next = opgate_e2e::db::register_payment(&store, "keyed", "k-after", "1.00").await;
    let newest: i64 = db
        .query_one(
            "SELECT min(event_id) FROM operation_events WHERE operation_id = $1",
            &[&next],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        newest > before.3,
        "audit ids count on: {newest} after {}",
        before.3
    );
    // An event cannot name another agent than its operation's.
    let foreign = db
        .execute(
            "INSERT INTO outbox (operation_id, agent_id, event_type) VALUES ($1, 'other', 'execute')",
            &[&ids[0]],
        )
        .await
        .unwrap_err();
    assert_eq!(
        foreign.code(),
        Some(&tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION)
    );
}
