//! A whole opgate on one database: provider-sim, intake and an agent, with the
//! executors left to each test (they are what the tests vary).

use std::time::Duration;

use futures_util::future::join_all;
use opgate_store::OperationRecord;
use uuid::Uuid;

use crate::api::{payment_body, post_operation, post_payment, Reply};
use crate::{eventually, Intake, ProviderSim, TestDb};

/// The ledger rows (charges, refunds, resources) operation `id` may have caused: under
/// its provider key, under a key that names no operation in `db` (so no other
/// operation's), or that `also` attributes to it.
pub async fn ledger_wide(
    db: &TestDb,
    id: Uuid,
    rows: &[serde_json::Value],
    also: impl Fn(&serde_json::Value) -> bool,
) -> Vec<serde_json::Value> {
    let mine = format!("opgate-{id}");
    let keys = db.provider_keys().await;
    rows.iter()
        .filter(|row| {
            let key = row["idempotency_key"].as_str().unwrap_or_default();
            key == mine || !keys.contains(key) || also(row)
        })
        .cloned()
        .collect()
}

pub struct Stack {
    pub db: TestDb,
    pub key: String,
    pub sim: ProviderSim,
    pub intake: Intake,
    pub client: reqwest::Client,
}

impl Stack {
    pub async fn start(faults: &[&str]) -> Self {
        Self::start_on(TestDb::create().await, faults).await
    }

    pub async fn start_on(db: TestDb, faults: &[&str]) -> Self {
        Self::start_with_env(db, faults, &[]).await
    }

    /// With extra environment variables for intake (OTEL_*, RUST_LOG, …).
    pub async fn start_with_env(db: TestDb, faults: &[&str], intake_env: &[(&str, &str)]) -> Self {
        let agent = ["--allow", "payment", "--allow", "refund"];
        Self::start_custom(db, faults, &agent, &[], intake_env).await
    }

    /// With the agent's flags (`opgate agents create agent <agent_args>`: grants, a
    /// `--catalog`) and intake's extra arguments and environment (a `--catalog`, say).
    pub async fn start_custom(
        db: TestDb,
        faults: &[&str],
        agent_args: &[&str],
        intake_args: &[&str],
        intake_env: &[(&str, &str)],
    ) -> Self {
        let key = db.create_agent("agent", agent_args);
        let sim = ProviderSim::start(faults).await;
        let intake = Intake::start_with_env(&db.url, intake_args, intake_env).await;
        Self {
            db,
            key,
            sim,
            intake,
            client: reqwest::Client::new(),
        }
    }

    /// Registers one payment through intake; returns its operation id.
    pub async fn pay(&self, customer: &str, idempotency_key: &str) -> Uuid {
        let body = payment_body(customer, &format!("inv-{idempotency_key}"), "25.00");
        let reply = post_payment(
            &self.client,
            &self.intake.base_url,
            Some(&self.key),
            Some(idempotency_key),
            &body,
        )
        .await;
        assert_eq!(reply.status, 202, "{}", reply.body);
        reply.operation_id().parse().unwrap()
    }

    /// `POST /agent/operations/{kind}` as this stack's agent.
    pub async fn post(&self, kind: &str, idempotency_key: &str, body: serde_json::Value) -> Reply {
        post_operation(
            &self.client,
            &self.intake.base_url,
            kind,
            &self.key,
            idempotency_key,
            &body,
        )
        .await
    }

    /// Asks for a refund of `payment` (the whole remainder when `amount` is `None`);
    /// returns the reply, whatever it is.
    pub async fn refund(
        &self,
        payment: Uuid,
        amount: Option<&str>,
        idempotency_key: &str,
    ) -> Reply {
        let mut body = serde_json::json!({ "payment_operation_id": payment });
        if let Some(amount) = amount {
            body["amount"] = amount.into();
        }
        self.post("refund", idempotency_key, body).await
    }

    /// Refunds in provider-sim's ledger (money actually given back), of every key.
    pub async fn ledger_refunds(&self) -> Vec<serde_json::Value> {
        let ledger = self.sim.ledger().await;
        ledger["refunds"].as_array().expect("refunds").clone()
    }

    /// Registers `count` payments, `parallel` requests at a time.
    pub async fn pay_many(&self, count: usize, parallel: usize) -> Vec<Uuid> {
        let mut ids = Vec::with_capacity(count);
        let keys: Vec<String> = (0..count).map(|i| format!("bulk-{i}")).collect();
        for chunk in keys.chunks(parallel) {
            ids.extend(join_all(chunk.iter().map(|key| self.pay("cus_bulk", key))).await);
        }
        ids
    }

    pub async fn operation(&self, id: Uuid) -> OperationRecord {
        self.db
            .store
            .find_operation(id)
            .await
            .expect("read operation")
            .expect("operation exists")
    }

    /// Waits until the operation reaches `status` (by name), and returns it.
    pub async fn wait_for_status(
        &self,
        id: Uuid,
        status: &str,
        timeout: Duration,
    ) -> OperationRecord {
        eventually(
            timeout,
            &format!("operation {id} to be {status}"),
            || async {
                let op = self.operation(id).await;
                (op.status.as_str() == status).then_some(op)
            },
        )
        .await
    }

    /// Waits until the operation is in none of `statuses` (the executor is done with
    /// it, say), and returns it: a test that expects one outcome fails as soon as
    /// another is written, not when its wait runs out.
    pub async fn wait_until_not(
        &self,
        id: Uuid,
        statuses: &[&str],
        timeout: Duration,
    ) -> OperationRecord {
        eventually(
            timeout,
            &format!("operation {id} to leave {statuses:?}"),
            || async {
                let op = self.operation(id).await;
                (!statuses.contains(&op.status.as_str())).then_some(op)
            },
        )
        .await
    }

    /// The statuses the operation moved through (applied transitions, in order).
    pub async fn trail(&self, id: Uuid) -> Vec<String> {
        self.db
            .store
            .operation_events(id)
            .await
            .expect("read the audit trail")
            .into_iter()
            .filter(|e| e.outcome == "applied")
            .map(|e| e.to_status)
            .collect()
    }

    /// Waits until every operation is SUCCEEDED.
    pub async fn wait_all_succeeded(&self, expected: i64, timeout: Duration) {
        eventually(
            timeout,
            &format!("{expected} operations to succeed"),
            || async {
                let counts = self.db.store.count_by_status().await.ok()?;
                (counts.get("SUCCEEDED").copied().unwrap_or(0) == expected).then_some(())
            },
        )
        .await
    }

    /// Every charge in provider-sim's ledger this operation may have caused, whatever
    /// key it was made under: those under its provider key, those for its invoice, and
    /// those under a key that names no operation of this database (a key bug). A second
    /// charge under another key shows as two charges, not as none.
    pub async fn charges_for(&self, id: Uuid) -> Vec<serde_json::Value> {
        let invoice = self.db.payload_field(id, "invoice_id").await;
        let ledger = self.sim.ledger().await;
        let charges = ledger["charges"].as_array().expect("charges");
        ledger_wide(&self.db, id, charges, |charge| {
            invoice.is_some() && charge["invoice_id"].as_str() == invoice.as_deref()
        })
        .await
    }

    pub async fn requests_for(&self, id: Uuid) -> u64 {
        let ledger = self.sim.ledger().await;
        ledger["requests_by_key"][format!("opgate-{id}")]
            .as_u64()
            .unwrap_or(0)
    }
}
