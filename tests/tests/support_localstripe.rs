//! The test support the Stripe provider's tests stand on: a real localstripe
//! (`LocalStripe`) and the proxy in front of it (`RecordingProxy`). No database needed.

use opgate_e2e::{LocalStripe, RecordingProxy};
use serde_json::Value;

const GOOD_CARD: &str = "4242424242424242";
/// Attaches, but is declined when charged.
const DECLINED_CARD: &str = "4000000000000341";

/// The customer's default payment method, as `customer_with_card` set it.
async fn default_payment_method(stripe: &LocalStripe, customer: &str) -> String {
    let customer = stripe.get(&format!("/v1/customers/{customer}")).await;
    customer["invoice_settings"]["default_payment_method"]
        .as_str()
        .unwrap_or_else(|| panic!("no default payment method: {customer}"))
        .to_owned()
}

/// The form of a confirmed 25.00 USD PaymentIntent, as opgate would send it.
fn payment_intent<'a>(
    customer: &'a str,
    pm: &'a str,
    operation: &'a str,
) -> Vec<(&'a str, &'a str)> {
    vec![
        ("amount", "2500"),
        ("currency", "usd"),
        ("confirm", "true"),
        ("customer", customer),
        ("payment_method", pm),
        ("metadata[opgate_operation_id]", operation),
    ]
}

async fn payment_intents(stripe: &LocalStripe) -> Vec<Value> {
    let list = stripe.get("/v1/payment_intents?limit=10").await;
    list["data"].as_array().expect("a list").clone()
}

#[tokio::test]
async fn localstripe_charges_the_good_card_and_declines_0341() {
    let stripe = LocalStripe::start().await;

    let customer = stripe.customer_with_card(GOOD_CARD).await;
    assert!(customer.starts_with("cus_"), "{customer}");
    let pm = default_payment_method(&stripe, &customer).await;
    let attached = stripe.get(&format!("/v1/payment_methods/{pm}")).await;
    assert_eq!(attached["customer"], customer.as_str());
    assert_eq!(attached["card"]["last4"], "4242");

    let intent = stripe
        .post_form(
            "/v1/payment_intents",
            &payment_intent(&customer, &pm, "op-1"),
        )
        .await;
    assert_eq!(intent["status"], "succeeded", "{intent}");
    assert_eq!(intent["amount"], 2500);
    assert_eq!(intent["metadata"]["opgate_operation_id"], "op-1");

    let declined = stripe.customer_with_card(DECLINED_CARD).await;
    let pm = default_payment_method(&stripe, &declined).await;
    let (status, body) = stripe
        .post_form_status(
            "/v1/payment_intents",
            &payment_intent(&declined, &pm, "op-2"),
        )
        .await;
    assert_eq!(status.as_u16(), 402, "{body}");
    assert_eq!(body["error"]["code"], "card_declined", "{body}");
}

#[tokio::test]
async fn the_proxy_forwards_and_records_headers_with_authorization_redacted() {
    let stripe = LocalStripe::start().await;
    let proxy = RecordingProxy::start(&stripe.base_url).await;
    let customer = stripe.customer_with_card(GOOD_CARD).await;
    let pm = default_payment_method(&stripe, &customer).await;

    let response = reqwest::Client::new()
        .post(format!("{}/v1/payment_intents", proxy.base_url))
        .basic_auth(&stripe.secret_key, None::<&str>)
        .header("Idempotency-Key", "opgate-op-1")
        .form(&payment_intent(&customer, &pm, "op-1"))
        .send()
        .await
        .expect("through the proxy");
    assert_eq!(response.status().as_u16(), 200);
    let intent: Value = response.json().await.expect("json");
    assert_eq!(intent["status"], "succeeded", "{intent}");
    let list = reqwest::Client::new()
        .get(format!("{}/v1/payment_intents?limit=10", proxy.base_url))
        .basic_auth(&stripe.secret_key, None::<&str>)
        .send()
        .await
        .expect("list through the proxy");
    assert_eq!(list.status().as_u16(), 200);

    let requests = proxy.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let post = &requests[0];
    assert_eq!(post.method, "POST");
    assert_eq!(post.path_and_query, "/v1/payment_intents");
    assert_eq!(post.header("Idempotency-Key"), Some("opgate-op-1"));
    assert_eq!(post.header("authorization"), Some("<redacted>"));
    assert!(
        !format!("{post:?}").contains(&stripe.secret_key),
        "the key leaked: {post:?}"
    );
    assert!(post.body.contains("amount=2500"), "{}", post.body);
    assert!(
        post.body.contains("metadata%5Bopgate_operation_id%5D=op-1"),
        "{}",
        post.body
    );
    assert_eq!(requests[1].method, "GET");
    assert_eq!(requests[1].path_and_query, "/v1/payment_intents?limit=10");
}

#[tokio::test]
async fn a_lost_answer_reaches_the_client_as_an_error_after_stripe_charged() {
    let stripe = LocalStripe::start().await;
    let proxy = RecordingProxy::start(&stripe.base_url).await;
    let customer = stripe.customer_with_card(GOOD_CARD).await;
    let pm = default_payment_method(&stripe, &customer).await;
    let client = reqwest::Client::new();
    let charge = |operation: &'static str| {
        client
            .post(format!("{}/v1/payment_intents", proxy.base_url))
            .basic_auth(&stripe.secret_key, None::<&str>)
            .header("Idempotency-Key", operation)
            .form(&payment_intent(&customer, &pm, operation))
            .send()
    };

    proxy.lose_answers("/v1/payment_intents", 1);
    let lost = charge("op-lost").await;
    assert!(lost.is_err(), "the answer was not lost: {lost:?}");

    // Stripe acted all the same.
    let intents = payment_intents(&stripe).await;
    assert_eq!(intents.len(), 1, "{intents:#?}");
    assert_eq!(intents[0]["status"], "succeeded");
    assert_eq!(intents[0]["metadata"]["opgate_operation_id"], "op-lost");

    // Only the next one was lost; the same client gets the following answer.
    let answered = charge("op-next").await.expect("answered");
    assert_eq!(answered.status().as_u16(), 200);
    assert_eq!(payment_intents(&stripe).await.len(), 2);
    let keys: Vec<_> = proxy
        .requests()
        .iter()
        .map(|r| r.header("idempotency-key").unwrap_or_default().to_owned())
        .collect();
    assert_eq!(keys, ["op-lost", "op-next"]);
}

#[tokio::test]
async fn lose_answers_spares_other_paths() {
    let stripe = LocalStripe::start().await;
    let proxy = RecordingProxy::start(&stripe.base_url).await;
    proxy.lose_answers("/v1/payment_intents", 1);

    let customers = reqwest::Client::new()
        .get(format!("{}/v1/customers", proxy.base_url))
        .basic_auth(&stripe.secret_key, None::<&str>)
        .send()
        .await
        .expect("not lost");
    assert_eq!(customers.status().as_u16(), 200);
    assert_eq!(proxy.requests()[0].path_and_query, "/v1/customers");
}
