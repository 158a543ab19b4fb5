//! Requests intake refuses at its edges: unknown routes, wrong methods, repeated
//! headers that decide who asks and what is meant, and admin requests that are not an
//! operator's or that carry values the database must never see. Each is answered with
//! an RFC 9457 problem and writes nothing.

use opgate_e2e::api::{payment_body, post_payment, Reply};
use opgate_e2e::{opgate, Intake, TestDb};
use reqwest::Method;
use serde_json::json;

struct Fixture {
    db: TestDb,
    intake: Intake,
    client: reqwest::Client,
    /// billing-agent's key.
    key: String,
    /// Another agent's valid key.
    other_key: String,
    operator_key: String,
    /// billing-agent's payment, registered before the test's request.
    payment_id: String,
}

async fn fixture() -> Fixture {
    let db = TestDb::create().await;
    let key = db.create_agent("billing-agent", &[]);
    let other_key = db.create_agent("other-agent", &[]);
    let operator_key = opgate(&db.url, &["operators", "create", "ana"])
        .success()
        .stdout
        .trim()
        .to_owned();
    let intake = Intake::start(&db.url).await;
    let client = reqwest::Client::new();
    let created = post_payment(
        &client,
        &intake.base_url,
        Some(&key),
        Some("first"),
        &payment_body("cus_1", "inv_1", "10.00"),
    )
    .await;
    assert_eq!(created.status, 202, "{}", created.body);
    let payment_id = created.operation_id().to_owned();
    Fixture {
        db,
        intake,
        client,
        key,
        other_key,
        operator_key,
        payment_id,
    }
}

impl Fixture {
    /// Sends the request and checks the answer is the problem with `status`, and that
    /// no table gained or lost a row.
    async fn refused(&self, request: reqwest::RequestBuilder, status: u16) -> Reply {
        let before = self.db.counts().await;
        let reply = Reply::from(request.send().await.expect("send")).await;
        reply.assert_problem(status);
        assert_eq!(
            self.db.counts().await,
            before,
            "a refused request wrote something"
        );
        reply
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.client.request(method, self.intake.url(path))
    }

    /// `method path` is answered 405 with exactly these methods in `Allow`.
    async fn assert_method_not_allowed(&self, method: Method, path: &str, allowed: &[&str]) {
        let reply = self
            .refused(
                self.request(method.clone(), path).bearer_auth(&self.key),
                405,
            )
            .await;
        assert_eq!(
            reply.body["type"], "urn:opgate:problem:method-not-allowed",
            "{method} {path}"
        );
        let mut allow: Vec<&str> = reply
            .header("allow")
            .unwrap_or_else(|| panic!("{method} {path}: no Allow header"))
            .split(',')
            .map(str::trim)
            .collect();
        allow.sort_unstable();
        let mut expected = allowed.to_vec();
        expected.sort_unstable();
        assert_eq!(allow, expected, "{method} {path}");
    }

    fn operation_path(&self) -> String {
        format!("/agent/operations/{}", self.payment_id)
    }

    fn resolve(&self, key: Option<&str>, body: serde_json::Value) -> reqwest::RequestBuilder {
        let request = self
            .request(
                Method::POST,
                &format!("/admin/operations/{}/resolve", self.payment_id),
            )
            .json(&body);
        match key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    fn admin_list(&self, query: &str) -> reqwest::RequestBuilder {
        self.request(Method::GET, &format!("/admin/operations{query}"))
            .bearer_auth(&self.operator_key)
    }

    async fn payment_status(&self) -> String {
        let id = self.payment_id.parse().unwrap();
        let operation = self.db.store.find_operation(id).await.unwrap().unwrap();
        operation.status.as_str().to_owned()
    }
}

fn assert_route_not_found(reply: &Reply) {
    assert_eq!(reply.body["type"], "urn:opgate:problem:route-not-found");
}

// Unknown routes.

#[tokio::test]
async fn get_on_an_unknown_route_is_a_404_problem() {
    let f = fixture().await;
    let reply = f
        .refused(f.request(Method::GET, "/agent/payments"), 404)
        .await;
    assert_route_not_found(&reply);
}

#[tokio::test]
async fn post_on_an_unknown_route_is_a_404_problem() {
    let f = fixture().await;
    let request = f
        .request(Method::POST, "/v1/operations/payment")
        .bearer_auth(&f.key)
        .header("Idempotency-Key", "unknown-route")
        .json(&payment_body("cus_1", "inv_2", "5.00"));
    let reply = f.refused(request, 404).await;
    assert_route_not_found(&reply);
}

// Known paths, wrong methods.

#[tokio::test]
async fn trace_on_healthz_is_a_405_problem_with_allow() {
    let f = fixture().await;
    f.assert_method_not_allowed(Method::TRACE, "/healthz", &["GET"])
        .await;
}

#[tokio::test]
async fn put_on_healthz_is_a_405_problem_with_allow() {
    let f = fixture().await;
    f.assert_method_not_allowed(Method::PUT, "/healthz", &["GET"])
        .await;
}

#[tokio::test]
async fn delete_on_healthz_is_a_405_problem_with_allow() {
    let f = fixture().await;
    f.assert_method_not_allowed(Method::DELETE, "/healthz", &["GET"])
        .await;
}

/// `/agent/operations/<x>` is both an operation (GET) and a kind (POST).
#[tokio::test]
async fn trace_on_an_operation_is_a_405_problem_with_allow() {
    let f = fixture().await;
    f.assert_method_not_allowed(Method::TRACE, &f.operation_path(), &["GET", "POST"])
        .await;
}

#[tokio::test]
async fn put_on_an_operation_is_a_405_problem_with_allow() {
    let f = fixture().await;
    f.assert_method_not_allowed(Method::PUT, &f.operation_path(), &["GET", "POST"])
        .await;
}

#[tokio::test]
async fn delete_on_an_operation_is_a_405_problem_with_allow() {
    let f = fixture().await;
    f.assert_method_not_allowed(Method::DELETE, &f.operation_path(), &["GET", "POST"])
        .await;
    assert_eq!(f.payment_status().await, "PENDING");
}

// Repeated headers.

/// The agent's valid key first, another agent's valid key second: taking either would
/// attribute the request to an agent that may not have sent it.
#[tokio::test]
async fn two_authorization_headers_on_a_payment_are_a_400_problem() {
    let f = fixture().await;
    let request = f
        .request(Method::POST, "/agent/operations/payment")
        .bearer_auth(&f.key)
        .bearer_auth(&f.other_key)
        .header("Idempotency-Key", "two-keys")
        .json(&payment_body("cus_1", "inv_3", "5.00"));
    let reply = f.refused(request, 400).await;
    assert_eq!(reply.body["type"], "urn:opgate:problem:duplicate-header");
    assert!(reply.body["detail"]
        .as_str()
        .unwrap()
        .contains("Authorization"));
}

#[tokio::test]
async fn two_authorization_headers_on_a_read_are_a_400_problem() {
    let f = fixture().await;
    let request = f
        .request(Method::GET, &f.operation_path())
        .bearer_auth(&f.key)
        .bearer_auth("opg_0123456789abcdef_not-a-key");
    let reply = f.refused(request, 400).await;
    assert_eq!(reply.body["type"], "urn:opgate:problem:duplicate-header");
}

#[tokio::test]
async fn two_authorization_headers_on_admin_are_a_400_problem() {
    let f = fixture().await;
    let request = f.admin_list("").bearer_auth(&f.key);
    let reply = f.refused(request, 400).await;
    assert_eq!(reply.body["type"], "urn:opgate:problem:duplicate-header");
}

/// Two keys would name two operations; the first must not quietly win.
#[tokio::test]
async fn two_idempotency_keys_on_a_payment_are_a_400_problem() {
    let f = fixture().await;
    let request = f
        .request(Method::POST, "/agent/operations/payment")
        .bearer_auth(&f.key)
        .header("Idempotency-Key", "key-a")
        .header("Idempotency-Key", "key-b")
        .json(&payment_body("cus_1", "inv_4", "5.00"));
    let reply = f.refused(request, 400).await;
    assert_eq!(reply.body["type"], "urn:opgate:problem:duplicate-header");
    assert!(reply.body["detail"]
        .as_str()
        .unwrap()
        .contains("Idempotency-Key"));
}

// The admin API authenticates before it reads anything.

#[tokio::test]
async fn admin_resolve_without_authorization_and_a_bogus_body_is_a_401_problem() {
    let f = fixture().await;
    let reply = f.refused(f.resolve(None, json!({"bogus": 1})), 401).await;
    assert_eq!(reply.header("www-authenticate"), Some("Bearer"));
    let detail = reply.body["detail"].as_str().unwrap();
    assert!(
        !detail.contains("bogus") && !detail.contains("reason"),
        "the body was read before authentication: {detail}"
    );
}

#[tokio::test]
async fn admin_resolve_with_an_agent_key_and_a_bogus_body_is_a_403_problem() {
    let f = fixture().await;
    f.refused(f.resolve(Some(&f.key), json!({"bogus": 1})), 403)
        .await;
}

#[tokio::test]
async fn admin_list_without_authorization_and_a_bad_query_is_a_401_problem() {
    let f = fixture().await;
    let request = f.request(Method::GET, "/admin/operations?limit=abc&status=BOGUS");
    f.refused(request, 401).await;
}

// Values the database must never see.

#[tokio::test]
async fn nul_in_a_resolve_reason_is_a_422_problem() {
    let f = fixture().await;
    let body = json!({"status": "FAILED", "reason": "checked the ledger\u{0}"});
    let reply = f.refused(f.resolve(Some(&f.operator_key), body), 422).await;
    assert!(reply.body["detail"].as_str().unwrap().contains("reason"));
    assert!(!reply.body["detail"]
        .as_str()
        .unwrap()
        .contains("Idempotency-Key"));
    assert_eq!(f.payment_status().await, "PENDING");
}

#[tokio::test]
async fn an_over_long_resolve_reason_is_a_422_problem() {
    let f = fixture().await;
    let body = json!({"status": "FAILED", "reason": "r".repeat(1001)});
    let reply = f.refused(f.resolve(Some(&f.operator_key), body), 422).await;
    assert!(reply.body["detail"].as_str().unwrap().contains("reason"));
}

#[tokio::test]
async fn an_over_long_provider_reference_is_a_422_problem() {
    let f = fixture().await;
    let body =
        json!({"status": "SUCCEEDED", "reason": "found it", "provider_reference": "p".repeat(256)});
    let reply = f.refused(f.resolve(Some(&f.operator_key), body), 422).await;
    assert!(reply.body["detail"]
        .as_str()
        .unwrap()
        .contains("provider_reference"));
}

#[tokio::test]
async fn nul_in_the_agent_query_is_a_400_problem() {
    let f = fixture().await;
    let reply = f.refused(f.admin_list("?agent=billing%00agent"), 400).await;
    assert_eq!(reply.body["type"], "urn:opgate:problem:invalid-query");
}

#[tokio::test]
async fn an_over_long_agent_query_is_a_400_problem() {
    let f = fixture().await;
    let query = format!("?agent={}", "a".repeat(101));
    let reply = f.refused(f.admin_list(&query), 400).await;
    assert_eq!(reply.body["type"], "urn:opgate:problem:invalid-query");
}

#[tokio::test]
async fn a_limit_that_is_not_a_number_is_a_400_problem() {
    let f = fixture().await;
    let reply = f.refused(f.admin_list("?limit=abc"), 400).await;
    assert_eq!(reply.body["type"], "urn:opgate:problem:invalid-query");
}

#[tokio::test]
async fn an_unknown_status_filter_is_a_400_problem() {
    let f = fixture().await;
    let reply = f.refused(f.admin_list("?status=BOGUS"), 400).await;
    assert!(reply.body["detail"]
        .as_str()
        .unwrap()
        .contains("MANUAL_REVIEW"));
}

#[tokio::test]
async fn an_unknown_query_parameter_is_a_400_problem() {
    let f = fixture().await;
    let reply = f.refused(f.admin_list("?agnet=billing-agent"), 400).await;
    assert_eq!(reply.body["type"], "urn:opgate:problem:invalid-query");
}

/// The valid forms of what is refused above still work.
#[tokio::test]
async fn valid_admin_queries_are_answered() {
    let f = fixture().await;
    // Another agent's pending payment, which the agent filter leaves out.
    let other = post_payment(
        &f.client,
        &f.intake.base_url,
        Some(&f.other_key),
        Some("other-first"),
        &payment_body("cus_2", "inv_2", "20.00"),
    )
    .await;
    assert_eq!(other.status, 202, "{}", other.body);
    let reply = Reply::from(
        f.admin_list("?agent=billing-agent&status=pending&limit=5000")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let listed = reply.body.as_array().unwrap();
    assert_eq!(listed.len(), 1, "{}", reply.body);
    assert_eq!(listed[0]["operation_id"], f.payment_id.as_str());
    assert_eq!(listed[0]["agent_id"], "billing-agent");
    assert_eq!(listed[0]["operation_type"], "payment");
    assert_eq!(listed[0]["status"], "PENDING");
}
