//! The Stripe provider against localstripe (a third-party fake of Stripe's API, started
//! per test), with real intake, executor and reconciler on a real PostgreSQL. A
//! recording proxy between opgate and localstripe shows what went over the wire
//! (localstripe itself ignores idempotency keys, so duplicate-charge tests stay on
//! provider-sim) and loses an answer on demand.

use std::time::Duration;

use opgate_e2e::api::post_operation;
use opgate_e2e::{eventually, Executor, Intake, LocalStripe, Reconciler, RecordingProxy, TestDb};
use opgate_store::OperationRecord;
use uuid::Uuid;

const SETTLE: Duration = Duration::from_secs(30);
/// Nothing listens here: operations bound to Stripe never reach the opgate HTTP provider.
const NO_PROVIDER: &str = "http://127.0.0.1:9";

struct StripeStack {
    db: TestDb,
    stripe: LocalStripe,
    proxy: RecordingProxy,
    intake: Intake,
    key: String,
    client: reqwest::Client,
}

impl StripeStack {
    async fn start() -> Self {
        let db = TestDb::create().await;
        let key = db.create_agent("stripe-agent", &["--allow", "payment", "--allow", "refund"]);
        let stripe = LocalStripe::start().await;
        let proxy = RecordingProxy::start(&stripe.base_url).await;
        let intake = Intake::start_with(&db.url, &["--payment-provider", "stripe"]).await;
        Self {
            db,
            stripe,
            proxy,
            intake,
            key,
            client: reqwest::Client::new(),
        }
    }

    fn env(&self) -> [(&str, &str); 1] {
        [("STRIPE_SECRET_KEY", self.stripe.secret_key.as_str())]
    }

    async fn executor(&self, extra: &[&str]) -> Executor {
        let mut args = vec!["--stripe-url", self.proxy.base_url.as_str()];
        args.extend_from_slice(extra);
        Executor::start_with_env(&self.db.url, NO_PROVIDER, &args, &self.env()).await
    }

    async fn post(&self, kind: &str, key: &str, body: serde_json::Value) -> Uuid {
        let reply = post_operation(
            &self.client,
            &self.intake.base_url,
            kind,
            &self.key,
            key,
            &body,
        )
        .await;
        assert_eq!(reply.status, 202, "{}", reply.body);
        reply.operation_id().parse().unwrap()
    }

    async fn pay(&self, customer: &str, amount: &str, key: &str) -> Uuid {
        let body = serde_json::json!({"customer_id": customer, "invoice_id": key, "amount": amount, "currency": "EUR"});
        self.post("payment", key, body).await
    }

    async fn wait_for(&self, id: Uuid, status: &str) -> OperationRecord {
        eventually(SETTLE, &format!("{id} to be {status}"), || async {
            let op = self.db.store.find_operation(id).await.ok()??;
            (op.status.as_str() == status).then_some(op)
        })
        .await
    }

    /// The POSTs opgate sent to `path`.
    fn posts_to(&self, path: &str) -> Vec<opgate_e2e::Recorded> {
        self.proxy
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path_and_query == path)
            .collect()
    }
}

#[tokio::test]
async fn a_payment_is_a_confirmed_payment_intent_in_minor_units_with_opgates_key() {
    let stack = StripeStack::start().await;
    let executor = stack.executor(&[]).await;
    let customer = stack.stripe.customer_with_card("4242424242424242").await;
    let id = stack.pay(&customer, "25.00", "inv-1").await;
    let op = stack.wait_for(id, "SUCCEEDED").await;
    assert_eq!(op.provider, "stripe");
    let reference = op.provider_reference.unwrap();
    assert!(reference.starts_with("pi_"), "{reference}");

    let intent = stack
        .stripe
        .get(&format!("/v1/payment_intents/{reference}"))
        .await;
    assert_eq!(intent["amount"], 2500);
    assert_eq!(intent["currency"], "eur");
    assert_eq!(intent["customer"], customer.as_str());
    assert_eq!(intent["status"], "succeeded");
    assert_eq!(intent["metadata"]["opgate_operation_id"], id.to_string());
    assert_eq!(intent["metadata"]["invoice_id"], "inv-1");

    let sent = stack.posts_to("/v1/payment_intents");
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].header("idempotency-key"),
        Some(format!("opgate-{id}").as_str())
    );
    assert_eq!(sent[0].header("authorization"), Some("<redacted>"));
    assert!(sent[0].body.contains("confirm=true"), "{}", sent[0].body);
    let logs = executor.service.logs();
    assert!(
        !logs.contains(&stack.stripe.secret_key),
        "the secret key reached a log line"
    );
}

#[tokio::test]
async fn a_refund_is_a_stripe_refund_of_the_payments_intent() {
    let stack = StripeStack::start().await;
    let _executor = stack.executor(&[]).await;
    let customer = stack.stripe.customer_with_card("4242424242424242").await;
    let payment = stack.pay(&customer, "40.00", "inv-2").await;
    let intent = stack
        .wait_for(payment, "SUCCEEDED")
        .await
        .provider_reference
        .unwrap();

    let body = serde_json::json!({"payment_operation_id": payment, "amount": "15.50"});
    let refund_id = stack.post("refund", "refund-1", body).await;
    let refund = stack.wait_for(refund_id, "SUCCEEDED").await;
    assert_eq!(
        refund.provider, "stripe",
        "a refund goes to the payment's provider"
    );
    let reference = refund.provider_reference.unwrap();
    assert!(reference.starts_with("re_"), "{reference}");
    let at_stripe = stack.stripe.get(&format!("/v1/refunds/{reference}")).await;
    assert_eq!(at_stripe["payment_intent"], intent.as_str());
    assert_eq!(at_stripe["amount"], 1550);
    assert_eq!(
        at_stripe["metadata"]["opgate_operation_id"],
        refund_id.to_string()
    );
    let sent = stack.posts_to("/v1/refunds");
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].header("idempotency-key"),
        Some(format!("opgate-{refund_id}").as_str())
    );
}

#[tokio::test]
async fn a_declined_card_fails_with_the_decline_code() {
    let stack = StripeStack::start().await;
    let _executor = stack.executor(&[]).await;
    let customer = stack.stripe.customer_with_card("4000000000000341").await;
    let id = stack.pay(&customer, "12.00", "inv-3").await;
    let op = stack.wait_for(id, "FAILED").await;
    let error = op.last_error.unwrap();
    assert!(error.contains("card_declined"), "{error}");
    assert_eq!(
        stack.posts_to("/v1/payment_intents").len(),
        1,
        "a decline is not retried"
    );
}

#[tokio::test]
async fn a_lost_answer_is_reconciled_by_finding_the_intent_by_metadata() {
    let stack = StripeStack::start().await;
    // localstripe ignores idempotency keys, so the executor must not re-send here: the
    // reconciler finds the intent Stripe created instead.
    let executor = stack.executor(&["--keyed-retries", "false"]).await;
    let customer = stack.stripe.customer_with_card("4242424242424242").await;
    stack.proxy.lose_answers("/v1/payment_intents", 1);
    let id = stack.pay(&customer, "30.00", "inv-4").await;
    let unknown = stack.wait_for(id, "UNKNOWN").await;
    assert_eq!(
        unknown.provider_reference, None,
        "the answer with the id was lost"
    );
    drop(executor);
    let reconciler = Reconciler::start_reconciler_with_env(
        &stack.db.url,
        NO_PROVIDER,
        &[
            "--stripe-url",
            &stack.proxy.base_url,
            "--backoff-base",
            "20ms",
        ],
        &stack.env(),
    )
    .await;
    let op = stack.wait_for(id, "SUCCEEDED").await;
    let reference = op.provider_reference.unwrap();
    let intents = stack.stripe.get("/v1/payment_intents?limit=100").await;
    let mine: Vec<_> = intents["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|pi| pi["metadata"]["opgate_operation_id"] == id.to_string().as_str())
        .collect();
    assert_eq!(mine.len(), 1, "one intent for the operation");
    assert_eq!(mine[0]["id"], reference.as_str());
    // Found by its metadata: Stripe's search first, then (localstripe has none) a list.
    let lookups: Vec<String> = stack
        .proxy
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path_and_query.starts_with("/v1/payment_intents"))
        .map(|r| r.path_and_query)
        .collect();
    assert!(
        lookups[0].starts_with("/v1/payment_intents/search?query="),
        "{lookups:?}"
    );
    assert!(
        lookups
            .iter()
            .any(|p| p.starts_with("/v1/payment_intents?limit=100")),
        "{lookups:?}"
    );
    assert!(!reconciler.service.logs().contains(&stack.stripe.secret_key));
}
