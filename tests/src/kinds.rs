//! The operation kinds the executor's failure tests run for: the built-in `payment` and
//! `refund`, and `order`, declared in examples/catalog.toml and executed by
//! provider-sim's generic resources. What differs between them is here: how their
//! stack and executors start, how operations of the kind are registered (a refund needs
//! a SUCCEEDED payment first) and what the provider really did for each of them.

use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::api::payment_body;
use crate::{eventually, Executor, Stack, TestDb};

/// How long a refund's payment may take to succeed before the refund is asked for.
const PREPARE: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `POST /v1/payments`; provider-sim's ledger lists it under `charges`.
    Payment,
    /// Of a SUCCEEDED payment; `POST /v1/refunds`, listed under `refunds`.
    Refund,
    /// Declared in the example catalog; `POST /v1/resources/orders`, listed under
    /// `resources` (collection `orders`).
    Order,
}

/// examples/catalog.toml, which declares `order`.
pub fn example_catalog() -> String {
    format!("{}/../examples/catalog.toml", env!("CARGO_MANIFEST_DIR"))
}

impl Kind {
    /// The kind's name, as in `POST /agent/operations/{kind}`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Payment => "payment",
            Kind::Refund => "refund",
            Kind::Order => "order",
        }
    }

    /// A stack for this kind on a fresh database on the shared server.
    pub async fn start(self) -> KindStack {
        self.start_on(TestDb::create().await).await
    }

    /// A stack for this kind on `db`, provider-sim without faults (they are armed when
    /// operations are registered), and an agent granted the kind.
    pub async fn start_on(self, db: TestDb) -> KindStack {
        let catalog = (self == Kind::Order).then(example_catalog);
        let stack = match &catalog {
            None => Stack::start_on(db, &[]).await,
            Some(catalog) => {
                let agent = ["--catalog", catalog.as_str(), "--allow", "order"];
                let intake = ["--catalog", catalog.as_str()];
                Stack::start_custom(db, &[], &agent, &intake, &[]).await
            }
        };
        KindStack {
            kind: self,
            stack,
            catalog,
            prerequisites: AtomicUsize::new(0),
        }
    }

    /// What provider-sim's `ledger` says it did for operations of this kind: charges,
    /// refunds or orders, of every key.
    pub fn effects_in(self, ledger: &Value) -> Vec<Value> {
        let list = match self {
            Kind::Payment => "charges",
            Kind::Refund => "refunds",
            Kind::Order => "resources",
        };
        ledger[list]
            .as_array()
            .unwrap_or_else(|| panic!("no {list} in the ledger: {ledger}"))
            .iter()
            .filter(|effect| self != Kind::Order || effect["collection"] == "orders")
            .cloned()
            .collect()
    }

    /// The provider's id of one of its ledger rows (`effects_in`): what the operation
    /// records as its provider reference.
    pub fn effect_id(self, effect: &Value) -> &str {
        let field = match self {
            Kind::Payment => "payment_id",
            Kind::Refund => "refund_id",
            Kind::Order => "resource_id",
        };
        effect[field]
            .as_str()
            .unwrap_or_else(|| panic!("no {field} in {effect}"))
    }

    /// The body of one operation of the kind (`refund` of `payment`).
    fn body(self, key: &str, payment: Option<Uuid>) -> Value {
        match self {
            Kind::Payment => payment_body(&format!("cus_{key}"), &format!("inv-{key}"), "25.00"),
            Kind::Refund => json!({ "payment_operation_id": payment.expect("a payment") }),
            Kind::Order => json!({
                "customer_id": format!("cus_{key}"),
                "sku": "SKU-1",
                "quantity": 1,
                "total": "25.00",
            }),
        }
    }
}

/// A `Stack` whose agent (and, for a declared kind, intake and executors) can run
/// operations of one kind.
pub struct KindStack {
    pub kind: Kind,
    pub stack: Stack,
    catalog: Option<String>,
    /// Operations registered only so that the kind's could be (a refund's payment),
    /// all SUCCEEDED.
    prerequisites: AtomicUsize,
}

impl Deref for KindStack {
    type Target = Stack;

    fn deref(&self) -> &Stack {
        &self.stack
    }
}

impl KindStack {
    /// An executor that can execute the kind (polling every 200 ms).
    pub async fn executor(&self, args: &[&str]) -> Executor {
        let (db, sim) = (&self.db.url, &self.sim.base_url);
        match &self.catalog {
            None => Executor::start(db, sim, args).await,
            Some(catalog) => {
                let mut all = vec!["--catalog", catalog.as_str()];
                all.extend_from_slice(args);
                Executor::start_with_env(db, sim, &all, &[("OPGATE_SIM_URL", sim.as_str())]).await
            }
        }
    }

    /// Registers one operation of the kind under `key` with `faults` (provider-sim's
    /// JSON fault set) armed for its call, and returns its id. A refund's payment is
    /// registered and SUCCEEDED first, by an executor of its own that is stopped
    /// before the faults are armed: they apply to the refund's call, not the payment's.
    pub async fn register(&self, key: &str, faults: Value) -> Uuid {
        self.register_keys(&[key.to_owned()], 1, faults).await[0]
    }

    /// Registers `count` operations of the kind (keys `bulk-<i>`), `parallel` requests
    /// at a time, as `register` does.
    pub async fn register_many(&self, count: usize, parallel: usize, faults: Value) -> Vec<Uuid> {
        let keys: Vec<String> = (0..count).map(|i| format!("bulk-{i}")).collect();
        self.register_keys(&keys, parallel, faults).await
    }

    async fn register_keys(&self, keys: &[String], parallel: usize, faults: Value) -> Vec<Uuid> {
        let payments: Vec<Option<Uuid>> = match self.kind {
            Kind::Refund => {
                let payments = self.succeeded_payments(keys, parallel).await;
                payments.into_iter().map(Some).collect()
            }
            Kind::Payment | Kind::Order => vec![None; keys.len()],
        };
        self.sim.set_faults(faults).await;
        let requests: Vec<(&String, Option<Uuid>)> = keys.iter().zip(payments).collect();
        let mut ids = Vec::with_capacity(keys.len());
        for chunk in requests.chunks(parallel) {
            let posts = chunk
                .iter()
                .map(|(key, payment)| self.post_one(key, *payment));
            ids.extend(join_all(posts).await);
        }
        ids
    }

    async fn post_one(&self, key: &str, payment: Option<Uuid>) -> Uuid {
        let reply = self
            .post(self.kind.name(), key, self.kind.body(key, payment))
            .await;
        assert_eq!(
            reply.status,
            202,
            "{} {key}: {}",
            self.kind.name(),
            reply.body
        );
        assert_eq!(reply.body["operation_type"], self.kind.name());
        reply.operation_id().parse().unwrap()
    }

    /// One SUCCEEDED payment per key (keys `pay-<key>`), executed by an executor
    /// started and stopped (SIGTERM) for them.
    async fn succeeded_payments(&self, keys: &[String], parallel: usize) -> Vec<Uuid> {
        let before = self.succeeded().await;
        let mut payments = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(parallel) {
            payments.extend(
                join_all(chunk.iter().map(|key| async move {
                    self.pay(&format!("cus_{key}"), &format!("pay-{key}")).await
                }))
                .await,
            );
        }
        let executor =
            Executor::start(&self.db.url, &self.sim.base_url, &["--concurrency", "16"]).await;
        let expected = before + payments.len() as i64;
        eventually(PREPARE, "the refunds' payments to succeed", || async {
            (self.succeeded().await == expected).then_some(())
        })
        .await;
        let status = executor.service.terminate().await;
        assert!(
            status.success(),
            "the payments' executor exited with {status}"
        );
        self.prerequisites
            .fetch_add(payments.len(), Ordering::SeqCst);
        payments
    }

    async fn succeeded(&self) -> i64 {
        let counts = self
            .db
            .store
            .count_by_status()
            .await
            .expect("count by status");
        counts.get("SUCCEEDED").copied().unwrap_or(0)
    }

    /// What provider-sim did for this operation, ledger-wide: its charges, refunds or
    /// orders under its provider key (`opgate-<id>`) or under a key that names no
    /// operation of the database; a payment's charges for its invoice too
    /// (`Stack::charges_for`).
    pub async fn effects_for(&self, id: Uuid) -> Vec<Value> {
        if self.kind == Kind::Payment {
            return self.charges_for(id).await;
        }
        let ledger = self.sim.ledger().await;
        let effects = self.kind.effects_in(&ledger);
        crate::stack::ledger_wide(&self.db, id, &effects, |_| false).await
    }

    /// How many charges, refunds or orders provider-sim made, for every key.
    pub async fn effect_count(&self) -> usize {
        self.kind.effects_in(&self.sim.ledger().await).len()
    }

    /// Waits until every one of `ids` (and every payment registered for them) is
    /// SUCCEEDED.
    pub async fn wait_all_succeeded(&self, ids: &[Uuid], timeout: Duration) {
        let expected = ids.len() + self.prerequisites.load(Ordering::SeqCst);
        self.stack
            .wait_all_succeeded(expected as i64, timeout)
            .await;
    }
}
