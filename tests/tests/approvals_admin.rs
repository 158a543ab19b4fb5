//! Operators decide operations that are AWAITING_APPROVAL, through the admin API and the
//! CLI: an approval makes the operation PENDING with its one outbox event (and the
//! executors then send it), a rejection makes it FAILED with nothing queued; each
//! decision is audited with the operator's name, a second decision is refused (409),
//! and the admin routes authenticate an operator before they read the body.

use std::time::Duration;

use opgate_e2e::api::Reply;
use opgate_e2e::{opgate, Executor, Intake, Stack, TestDb};
use reqwest::Method;
use serde_json::{json, Value};
use uuid::Uuid;

const SETTLE: Duration = Duration::from_secs(30);
const AGENT: &str = "billing-agent";
const OPERATOR: &str = "carol";

/// Registers a payment through the store, as intake does: PENDING, with its outbox
/// event.
async fn register_payment(db: &TestDb, agent: &str, key: &str) -> Uuid {
    opgate_e2e::db::register_payment(&db.store, agent, key, "750.00").await
}

/// A payment that is AWAITING_APPROVAL: registered, then moved there with its outbox
/// event removed. This stands for the registration path of an operation above its
/// agent's approval threshold (AWAITING_APPROVAL, `approval_expires_at` set, no outbox
/// event), so that these tests do not depend on it.
async fn awaiting_approval(db: &TestDb, agent: &str, key: &str) -> Uuid {
    let id = register_payment(db, agent, key).await;
    let client = sql(db).await;
    client
        .execute(
            "UPDATE operations SET status = 'AWAITING_APPROVAL', \
             approval_expires_at = now() + interval '1 hour' WHERE operation_id = $1",
            &[&id],
        )
        .await
        .unwrap();
    client
        .execute("DELETE FROM outbox WHERE operation_id = $1", &[&id])
        .await
        .unwrap();
    id
}

async fn sql(db: &TestDb) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(connection);
    client
}

async fn outbox_rows(db: &TestDb, id: Uuid) -> i64 {
    sql(db)
        .await
        .query_one(
            "SELECT count(*) FROM outbox WHERE operation_id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0)
}

async fn approval_expires_at_is_set(db: &TestDb, id: Uuid) -> bool {
    sql(db)
        .await
        .query_one(
            "SELECT approval_expires_at IS NOT NULL FROM operations WHERE operation_id = $1",
            &[&id],
        )
        .await
        .unwrap()
        .get(0)
}

fn create_operator(db: &TestDb, name: &str) -> String {
    let key = opgate(&db.url, &["operators", "create", name])
        .success()
        .stdout
        .trim()
        .to_owned();
    assert!(key.starts_with("opo_"), "{key}");
    key
}

struct Fixture {
    db: TestDb,
    intake: Intake,
    client: reqwest::Client,
    agent_key: String,
    operator_key: String,
}

async fn fixture() -> Fixture {
    let db = TestDb::create().await;
    let agent_key = db.create_agent(AGENT, &[]);
    let operator_key = create_operator(&db, OPERATOR);
    let intake = Intake::start(&db.url).await;
    Fixture {
        db,
        intake,
        client: reqwest::Client::new(),
        agent_key,
        operator_key,
    }
}

impl Fixture {
    /// `POST /admin/operations/{id}/{decision}` with this key (none when `None`).
    async fn decide(&self, id: Uuid, decision: &str, key: Option<&str>, body: Value) -> Reply {
        let mut request = self
            .client
            .request(
                Method::POST,
                self.intake
                    .url(&format!("/admin/operations/{id}/{decision}")),
            )
            .json(&body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        Reply::from(request.send().await.expect("send")).await
    }

    /// As the operator.
    async fn operator(&self, id: Uuid, decision: &str, body: Value) -> Reply {
        self.decide(id, decision, Some(&self.operator_key), body)
            .await
    }

    /// The request is refused with `status` and writes nothing.
    async fn refused(
        &self,
        id: Uuid,
        decision: &str,
        key: Option<&str>,
        body: Value,
        status: u16,
    ) -> Reply {
        let before = self.db.counts().await;
        let reply = self.decide(id, decision, key, body).await;
        reply.assert_problem(status);
        assert_eq!(
            self.db.counts().await,
            before,
            "a refused {decision} wrote something"
        );
        reply
    }

    async fn status(&self, id: Uuid) -> String {
        let op = self.db.store.find_operation(id).await.unwrap().unwrap();
        op.status.as_str().to_owned()
    }
}

#[tokio::test]
async fn an_approval_queues_the_operation_once_and_is_audited_with_the_operator() {
    let f = fixture().await;
    let id = awaiting_approval(&f.db, AGENT, "approve-1").await;
    assert_eq!(outbox_rows(&f.db, id).await, 0);

    let reply = f
        .operator(
            id,
            "approve",
            json!({"reason": "customer confirmed by phone"}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["operation_id"], id.to_string());
    assert_eq!(reply.body["status"], "PENDING");
    assert_eq!(reply.body["agent_id"], AGENT);

    let op = f.db.store.find_operation(id).await.unwrap().unwrap();
    assert_eq!(op.status.as_str(), "PENDING");
    assert_eq!(outbox_rows(&f.db, id).await, 1);
    assert!(!approval_expires_at_is_set(&f.db, id).await);
    let events = f.db.store.operation_events(id).await.unwrap();
    let last = events.last().unwrap();
    assert_eq!(
        (last.from_status.as_deref(), last.to_status.as_str()),
        (Some("AWAITING_APPROVAL"), "PENDING")
    );
    assert_eq!(last.actor, format!("operator:{OPERATOR}"));
    assert_eq!(
        last.reason.as_deref(),
        Some("approved by operator: customer confirmed by phone")
    );

    // Decided: a second approval, or a rejection now, changes nothing.
    let again = f
        .refused(id, "approve", Some(&f.operator_key), json!({}), 409)
        .await;
    assert_eq!(
        again.body["type"],
        "urn:opgate:problem:not-awaiting-approval"
    );
    assert!(again.body["detail"].as_str().unwrap().contains("PENDING"));
    let reject = f
        .refused(
            id,
            "reject",
            Some(&f.operator_key),
            json!({"reason": "too late"}),
            409,
        )
        .await;
    assert_eq!(
        reject.body["type"],
        "urn:opgate:problem:not-awaiting-approval"
    );
    assert_eq!(outbox_rows(&f.db, id).await, 1);

    // The admin view shows the decision in the trail.
    let detail: Value = f
        .client
        .get(f.intake.url(&format!("/admin/operations/{id}")))
        .bearer_auth(&f.operator_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let last = detail["events"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["actor"], format!("operator:{OPERATOR}"));
    assert_eq!(last["to_status"], "PENDING");
}

#[tokio::test]
async fn an_approval_without_a_reason_is_audited_as_approved_by_operator() {
    let f = fixture().await;
    let id = awaiting_approval(&f.db, AGENT, "approve-plain").await;
    let reply = f.operator(id, "approve", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let events = f.db.store.operation_events(id).await.unwrap();
    assert_eq!(
        events.last().unwrap().reason.as_deref(),
        Some("approved by operator")
    );
}

#[tokio::test]
async fn a_rejection_fails_the_operation_with_the_reason_and_queues_nothing() {
    let f = fixture().await;
    let id = awaiting_approval(&f.db, AGENT, "reject-1").await;

    let reply = f
        .operator(id, "reject", json!({"reason": "invoice already paid"}))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["status"], "FAILED");
    assert_eq!(
        reply.body["last_error"],
        "rejected by operator: invoice already paid"
    );

    let op = f.db.store.find_operation(id).await.unwrap().unwrap();
    assert_eq!(op.status.as_str(), "FAILED");
    assert!(op
        .last_error
        .as_deref()
        .unwrap()
        .contains("invoice already paid"));
    assert_eq!(outbox_rows(&f.db, id).await, 0);
    let last =
        f.db.store
            .operation_events(id)
            .await
            .unwrap()
            .pop()
            .unwrap();
    assert_eq!(
        (last.from_status.as_deref(), last.to_status.as_str()),
        (Some("AWAITING_APPROVAL"), "FAILED")
    );
    assert_eq!(last.actor, format!("operator:{OPERATOR}"));
    assert_eq!(
        last.reason.as_deref(),
        Some("rejected by operator: invoice already paid")
    );

    // The agent sees the rejection.
    let agent_view: Value = f
        .client
        .get(f.intake.url(&format!("/agent/operations/{id}")))
        .bearer_auth(&f.agent_key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(agent_view["status"], "FAILED");

    // Decided: neither an approval nor a second rejection changes it.
    let approve = f
        .refused(id, "approve", Some(&f.operator_key), json!({}), 409)
        .await;
    assert_eq!(
        approve.body["type"],
        "urn:opgate:problem:not-awaiting-approval"
    );
    assert!(approve.body["detail"].as_str().unwrap().contains("FAILED"));
    f.refused(
        id,
        "reject",
        Some(&f.operator_key),
        json!({"reason": "again"}),
        409,
    )
    .await;
    assert_eq!(outbox_rows(&f.db, id).await, 0);
}

#[tokio::test]
async fn agent_keys_get_403_and_no_key_gets_401_before_the_body_is_read() {
    let f = fixture().await;
    let id = awaiting_approval(&f.db, AGENT, "auth-1").await;
    for decision in ["approve", "reject"] {
        let reply = f
            .refused(id, decision, None, json!({"bogus": 1}), 401)
            .await;
        assert_eq!(reply.header("www-authenticate"), Some("Bearer"));
        let detail = reply.body["detail"].as_str().unwrap();
        assert!(
            !detail.contains("bogus") && !detail.contains("reason"),
            "{decision}: the body was read before authentication: {detail}"
        );
        let reply = f
            .refused(id, decision, Some(&f.agent_key), json!({"bogus": 1}), 403)
            .await;
        assert!(
            !reply.body["detail"].as_str().unwrap().contains("bogus"),
            "{}",
            reply.body
        );
        // A well-formed decision with an agent key is refused just the same.
        f.refused(
            id,
            decision,
            Some(&f.agent_key),
            json!({"reason": "self-approved"}),
            403,
        )
        .await;
    }
    assert_eq!(f.status(id).await, "AWAITING_APPROVAL");
    assert_eq!(outbox_rows(&f.db, id).await, 0);
}

#[tokio::test]
async fn unknown_operations_are_404_and_invalid_reasons_are_422() {
    let f = fixture().await;
    let id = awaiting_approval(&f.db, AGENT, "invalid-1").await;
    let key = Some(f.operator_key.as_str());

    let unknown = Uuid::new_v4();
    f.refused(unknown, "approve", key, json!({}), 404).await;
    f.refused(unknown, "reject", key, json!({"reason": "no"}), 404)
        .await;

    let too_long = "x".repeat(1001);
    for (decision, body) in [
        ("approve", json!({"reason": "checked\u{0}"})),
        ("approve", json!({"reason": too_long})),
        ("approve", json!({"reason": "  "})),
        ("approve", json!({"reason": "ok", "amount": "1.00"})),
        ("reject", json!({})),
        ("reject", json!({"reason": ""})),
        ("reject", json!({"reason": "fraud\u{202e}"})),
        ("reject", json!({"reason": too_long})),
    ] {
        let reply = f.refused(id, decision, key, body.clone(), 422).await;
        assert!(
            reply.body["detail"].as_str().unwrap().contains("reason")
                || reply.body["detail"].as_str().unwrap().contains("amount"),
            "{decision} {body}: {}",
            reply.body
        );
    }
    // Exactly 1000 characters is allowed.
    let reply = f
        .operator(id, "reject", json!({"reason": "y".repeat(1000)}))
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

#[tokio::test]
async fn operations_that_never_awaited_approval_cannot_be_approved() {
    let f = fixture().await;
    // A PENDING operation, registered the ordinary way: already queued.
    let id = register_payment(&f.db, AGENT, "pending-1").await;
    let reply = f
        .refused(id, "approve", Some(&f.operator_key), json!({}), 409)
        .await;
    assert_eq!(
        reply.body["type"],
        "urn:opgate:problem:not-awaiting-approval"
    );
    assert!(reply.body["detail"].as_str().unwrap().contains("PENDING"));
    f.refused(
        id,
        "reject",
        Some(&f.operator_key),
        json!({"reason": "no"}),
        409,
    )
    .await;
    assert_eq!(outbox_rows(&f.db, id).await, 1);
    assert_eq!(f.status(id).await, "PENDING");

    // And both routes are in the OpenAPI document, with the answers they give.
    let document: Value = f
        .client
        .get(f.intake.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for decision in ["approve", "reject"] {
        let path = format!("/admin/operations/{{operation_id}}/{decision}");
        let responses = &document["paths"][&path]["post"]["responses"];
        for status in ["200", "401", "403", "404", "409", "422"] {
            assert!(
                responses.get(status).is_some(),
                "{path} does not document {status}"
            );
        }
    }
}

#[tokio::test]
async fn operators_approve_and_reject_through_the_cli() {
    let db = TestDb::create().await;
    db.create_agent(AGENT, &[]);
    let approved = awaiting_approval(&db, AGENT, "cli-approve").await;
    let rejected = awaiting_approval(&db, AGENT, "cli-reject").await;

    let id = approved.to_string();
    let out = opgate(
        &db.url,
        &[
            "operations",
            "approve",
            &id,
            "--operator",
            "ana",
            "--reason",
            "looks right",
        ],
    )
    .success();
    assert_eq!(out.stdout.trim(), format!("{id} is now PENDING"));
    assert_eq!(outbox_rows(&db, approved).await, 1);
    let shown = opgate(&db.url, &["operations", "show", &id])
        .success()
        .stdout;
    assert!(
        shown.contains("operator:ana") && shown.contains("approved by operator: looks right"),
        "{shown}"
    );
    let again = opgate(
        &db.url,
        &["operations", "approve", &id, "--operator", "bob"],
    );
    assert!(!again.status.success());
    assert_eq!(
        again.stderr.trim(),
        format!("error: {id} is PENDING, not AWAITING_APPROVAL: nothing changed")
    );
    assert_eq!(outbox_rows(&db, approved).await, 1);

    let id = rejected.to_string();
    let out = opgate(
        &db.url,
        &[
            "operations",
            "reject",
            &id,
            "--operator",
            "ana",
            "--reason",
            "duplicate invoice",
        ],
    )
    .success();
    assert_eq!(out.stdout.trim(), format!("{id} is now FAILED"));
    let op = db.store.find_operation(rejected).await.unwrap().unwrap();
    assert_eq!(
        op.last_error.as_deref(),
        Some("rejected by operator: duplicate invoice")
    );
    assert_eq!(outbox_rows(&db, rejected).await, 0);
    let last = db
        .store
        .operation_events(rejected)
        .await
        .unwrap()
        .pop()
        .unwrap();
    assert_eq!(last.actor, "operator:ana");

    // Errors are one line.
    let unknown = Uuid::new_v4().to_string();
    let missing = opgate(
        &db.url,
        &[
            "operations",
            "reject",
            &unknown,
            "--operator",
            "ana",
            "--reason",
            "x",
        ],
    );
    assert!(!missing.status.success());
    assert_eq!(
        missing.stderr.trim(),
        format!("error: no operation {unknown}")
    );
    let bad_reason = opgate(
        &db.url,
        &[
            "operations",
            "reject",
            &id,
            "--operator",
            "ana",
            "--reason",
            "bad\u{7}reason",
        ],
    );
    assert!(!bad_reason.status.success());
    assert_eq!(
        bad_reason.stderr.trim().lines().count(),
        1,
        "{}",
        bad_reason.stderr
    );
    assert!(
        bad_reason.stderr.starts_with("error: reason"),
        "{}",
        bad_reason.stderr
    );
    let bad_operator = opgate(
        &db.url,
        &["operations", "approve", &id, "--operator", "ana smith"],
    );
    assert!(!bad_operator.status.success());
    assert!(
        bad_operator
            .stderr
            .starts_with("error: invalid operator name"),
        "{}",
        bad_operator.stderr
    );
}

/// With an executor running, nothing is sent while the operation waits; once approved,
/// it is executed, once.
#[tokio::test]
async fn an_approved_operation_is_executed_and_nothing_is_sent_before() {
    let stack = Stack::start(&[]).await;
    let operator_key = create_operator(&stack.db, OPERATOR);
    let id = awaiting_approval(&stack.db, "agent", "executed-1").await;
    let _executor = Executor::start(&stack.db.url, &stack.sim.base_url, &[]).await;

    // Several of the executor's polls.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(stack.requests_for(id).await, 0);
    assert_eq!(
        stack.operation(id).await.status.as_str(),
        "AWAITING_APPROVAL"
    );

    let reply = stack
        .client
        .post(stack.intake.url(&format!("/admin/operations/{id}/approve")))
        .bearer_auth(&operator_key)
        .json(&json!({"reason": "within policy"}))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    stack.wait_for_status(id, "SUCCEEDED", SETTLE).await;
    assert_eq!(stack.charges_for(id).await.len(), 1);
}
