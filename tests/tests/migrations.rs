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
