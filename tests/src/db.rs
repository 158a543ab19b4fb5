//! A fresh, migrated database per test.

use opgate_store::{PoolSettings, Store, TableCounts};

use crate::binaries::opgate;

pub struct TestDb {
    pub url: String,
    pub store: Store,
}

/// The server `DATABASE_URL` points at; tests cannot run without one.
pub fn admin_url() -> String {
    std::env::var("DATABASE_URL").expect(
        "DATABASE_URL must name a PostgreSQL server; run the suite with `make test`, \
         which starts a throwaway one",
    )
}

/// `url` with its database name replaced.
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let server = base
        .rsplit_once('/')
        .map(|(server, _)| server)
        .unwrap_or(base);
    format!("{server}/{database}{query}")
}

/// A new database on the shared server with nothing in it (no migrations): for tests
/// that migrate it themselves, to an older version first. Returns its URL.
pub async fn empty_database() -> String {
    empty_database_on(&admin_url()).await
}

async fn empty_database_on(admin_url: &str) -> String {
    let name = format!("opgate_test_{}", uuid::Uuid::new_v4().simple());
    let (client, connection) = tokio_postgres::connect(admin_url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test server");
    tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create test database");
    with_database(admin_url, &name)
}

impl TestDb {
    /// Creates an empty database on the shared server and migrates it with the real
    /// `opgate migrate`.
    pub async fn create() -> Self {
        Self::create_on(&admin_url()).await
    }

    pub async fn create_on(admin_url: &str) -> Self {
        let url = empty_database_on(admin_url).await;
        opgate(&url, &["migrate"]).success();
        let store = Store::connect(&url, &PoolSettings::default()).expect("pool");
        Self { url, store }
    }

    /// A plain connection to the test database, for what the store does not read
    /// (payloads, fencing tokens, leases).
    pub async fn sql(&self) -> tokio_postgres::Client {
        let (client, connection) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .expect("connect to the test database");
        tokio::spawn(connection);
        client
    }

    /// The provider keys (`opgate-<id>`) of every operation in the database.
    pub async fn provider_keys(&self) -> std::collections::HashSet<String> {
        self.sql()
            .await
            .query("SELECT operation_id FROM operations", &[])
            .await
            .expect("read operation ids")
            .iter()
            .map(|row| format!("opgate-{}", row.get::<_, uuid::Uuid>(0)))
            .collect()
    }

    /// A field of the operation's stored (normalised) payload.
    pub async fn payload_field(&self, id: uuid::Uuid, field: &str) -> Option<String> {
        self.sql()
            .await
            .query_one(
                "SELECT request_payload ->> $2 FROM operations WHERE operation_id = $1",
                &[&id, &field],
            )
            .await
            .expect("read the payload")
            .get(0)
    }

    pub async fn counts(&self) -> TableCounts {
        self.store.table_counts().await.expect("count rows")
    }

    /// Creates an agent with the real CLI and returns its key.
    pub fn create_agent(&self, agent_id: &str, extra: &[&str]) -> String {
        let mut args = vec!["agents", "create", agent_id];
        args.extend_from_slice(extra);
        let output = opgate(&self.url, &args).success();
        let key = output.stdout.trim().to_owned();
        assert!(key.starts_with("opg_"), "unexpected key output {key:?}");
        key
    }

    /// What intake remembers of the agent whose key is `key`, read as intake reads it:
    /// the key's id and the agent row's version.
    pub async fn agent_check(&self, key: &str) -> opgate_store::AgentCheck {
        let key_id = key.split('_').nth(1).expect("opg_<key id>_<secret>");
        let context = self
            .store
            .find_agent_request_context(key_id, None)
            .await
            .expect("read the agent")
            .expect("the agent exists");
        opgate_store::AgentCheck {
            key_id: key_id.to_owned(),
            row_version: context.row_version.expect("a row version on one node"),
        }
    }
}

/// A payment of `amount` for customer cus_1, invoice `inv_<key>`.
pub fn payment_request(key: &str, amount: &str) -> opgate_domain::OperationRequest {
    opgate_domain::PaymentRequest::parse("cus_1", &format!("inv_{key}"), amount, None)
        .unwrap()
        .to_operation_request()
}

/// `request` as intake registers it for `agent` under `key`, with a new id.
pub fn new_operation<'a>(
    agent: &'a str,
    key: &'a opgate_domain::IdempotencyKey,
    request: &'a opgate_domain::OperationRequest,
) -> opgate_store::NewOperation<'a> {
    opgate_store::NewOperation {
        operation_id: uuid::Uuid::new_v4(),
        agent_id: agent,
        idempotency_key: key,
        request,
        provider: opgate_domain::OPGATE_HTTP_PROVIDER,
        awaiting_approval_for: None,
        trace_context: None,
    }
}

/// Registers a payment of `amount` through the store, as intake does: PENDING, with its
/// outbox event; invoice `inv_<key>`.
pub async fn register_payment(store: &Store, agent: &str, key: &str, amount: &str) -> uuid::Uuid {
    let request = payment_request(key, amount);
    let key = opgate_domain::IdempotencyKey::parse(key).unwrap();
    let new = new_operation(agent, &key, &request);
    match store.register_operation(&new).await.unwrap() {
        opgate_store::Registration::Created(record) => record.operation_id,
        other => panic!("expected a new operation, got {other:?}"),
    }
}
