//! Requests an agent would send, and the response parts tests check.

use reqwest::header::HeaderMap;
use serde_json::Value;

pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Value,
    pub content_type: String,
}

impl Reply {
    pub async fn from(response: reqwest::Response) -> Self {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let content_type = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let text = response.text().await.expect("response body");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Self {
            status,
            headers,
            body,
            content_type,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn operation_id(&self) -> &str {
        self.body["operation_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no operation_id in {}", self.body))
    }

    /// Asserts an RFC 9457 problem with this status.
    pub fn assert_problem(&self, status: u16) {
        assert_eq!(self.status, status, "body: {}", self.body);
        assert_eq!(self.content_type, "application/problem+json");
        assert_eq!(self.body["status"], status);
        for field in ["type", "title", "detail"] {
            assert!(
                self.body[field].is_string(),
                "problem lacks {field}: {}",
                self.body
            );
        }
    }
}

pub fn payment_body(customer: &str, invoice: &str, amount: &str) -> Value {
    serde_json::json!({"customer_id": customer, "invoice_id": invoice, "amount": amount, "currency": "USD"})
}

/// `POST /agent/operations/payment` with a JSON body.
pub async fn post_payment(
    client: &reqwest::Client,
    base_url: &str,
    key: Option<&str>,
    idempotency_key: Option<&str>,
    body: &Value,
) -> Reply {
    post_raw(
        client,
        base_url,
        key,
        idempotency_key,
        "application/json",
        body.to_string(),
    )
    .await
}

/// `POST /agent/operations/{kind}` with a JSON body.
pub async fn post_operation(
    client: &reqwest::Client,
    base_url: &str,
    kind: &str,
    key: &str,
    idempotency_key: &str,
    body: &Value,
) -> Reply {
    let response = client
        .post(format!("{base_url}/agent/operations/{kind}"))
        .bearer_auth(key)
        .header("Idempotency-Key", idempotency_key)
        .json(body)
        .send()
        .await
        .expect("send POST");
    Reply::from(response).await
}

pub async fn post_raw(
    client: &reqwest::Client,
    base_url: &str,
    key: Option<&str>,
    idempotency_key: Option<&str>,
    content_type: &str,
    body: String,
) -> Reply {
    let mut request = client
        .post(format!("{base_url}/agent/operations/payment"))
        .header("content-type", content_type)
        .body(body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(idempotency_key) = idempotency_key {
        request = request.header("Idempotency-Key", idempotency_key);
    }
    Reply::from(request.send().await.expect("send POST")).await
}

pub async fn get_operation(
    client: &reqwest::Client,
    base_url: &str,
    key: &str,
    operation_id: &str,
) -> Reply {
    let response = client
        .get(format!("{base_url}/agent/operations/{operation_id}"))
        .bearer_auth(key)
        .send()
        .await
        .expect("send GET");
    Reply::from(response).await
}
