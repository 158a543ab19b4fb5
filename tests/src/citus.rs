//! A fresh database per test on the Citus cluster that `OPGATE_TEST_CITUS_URL` names (a
//! coordinator with its workers added; `make test-citus`). Citus keeps its metadata per
//! database, so each test's database is created on the coordinator and on every
//! worker, given the extension, and has the workers added.

use std::collections::BTreeMap;
use std::str::FromStr;

use tokio_postgres::{Config, NoTls};
use uuid::Uuid;

use opgate_store::{PoolSettings, Store};

use crate::binaries::opgate;
use crate::db::with_database;
use crate::TestDb;

const CITUS_URL: &str = "OPGATE_TEST_CITUS_URL";

/// Adding workers to two databases at once fails ("tuple concurrently updated": Citus
/// copies roles, a catalog all databases share, to each node it adds), so this test
/// binary's tests make their databases one at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The coordinator's URL, or `None` after printing why the test does not run.
pub fn citus_url(test: &str) -> Option<String> {
    match std::env::var(CITUS_URL) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!(
                "skipped {test}: {CITUS_URL} is not set (make test-citus runs it against a \
                 Citus coordinator; docs/scale-out.md)"
            );
            None
        }
    }
}

/// A new database on every node of the cluster, with the citus extension and the
/// workers added, and nothing else (no migrations).
pub struct CitusDb {
    pub url: String,
    name: String,
    coordinator: Config,
    /// Host and port of the coordinator and of every worker.
    nodes: Vec<(String, u16)>,
}

impl CitusDb {
    /// `None` (with the reason printed) when no cluster is configured.
    pub async fn create(test: &str) -> Option<Self> {
        let coordinator_url = citus_url(test)?;
        let _turn = ONE_AT_A_TIME.lock().await;
        let coordinator = Config::from_str(&coordinator_url).expect("OPGATE_TEST_CITUS_URL");
        let admin = connect(&coordinator).await;
        let workers: Vec<(String, i32)> = admin
            .query(
                "SELECT node_name::text, node_port::int FROM citus_get_active_worker_nodes() ORDER BY 2",
                &[],
            )
            .await
            .expect("list the cluster's workers")
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        assert!(
            !workers.is_empty(),
            "the coordinator at {CITUS_URL} has no active workers"
        );
        let name = format!("opgate_citus_{}", Uuid::new_v4().simple());
        let (host, port) = host_and_port(&coordinator);
        let nodes: Vec<(String, u16)> = std::iter::once((host.clone(), port))
            .chain(workers.iter().map(|(h, p)| (h.clone(), *p as u16)))
            .collect();
        for (node_host, node_port) in &nodes {
            let node = on_node(&coordinator, node_host, *node_port, None);
            connect(&node)
                .await
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
                .expect("create the test database on a node");
            connect(&on_node(&coordinator, node_host, *node_port, Some(&name)))
                .await
                .batch_execute("CREATE EXTENSION citus")
                .await
                .expect("create the citus extension on a node");
        }
        let database = connect(&on_node(&coordinator, &host, port, Some(&name))).await;
        database
            .execute(
                "SELECT citus_set_coordinator_host($1, $2)",
                &[&host, &i32::from(port)],
            )
            .await
            .expect("name the coordinator");
        for (worker_host, worker_port) in &workers {
            database
                .execute("SELECT citus_add_node($1, $2)", &[worker_host, worker_port])
                .await
                .expect("add a worker");
        }
        Some(Self {
            url: with_database(&coordinator_url, &name),
            name,
            coordinator,
            nodes,
        })
    }

    /// `create`, then `opgate migrate --citus --shard-count <shards>`: a distributed
    /// opgate database, for the services to run on.
    pub async fn migrated(test: &str, shards: u32) -> Option<(Self, TestDb)> {
        let db = Self::create(test).await?;
        let shards = shards.to_string();
        opgate(&db.url, &["migrate", "--citus", "--shard-count", &shards]).success();
        let store = Store::connect(&db.url, &PoolSettings::default()).expect("pool");
        let test_db = TestDb {
            url: db.url.clone(),
            store,
        };
        Some((db, test_db))
    }

    /// Drops the database on every node: each one keeps a Citus maintenance process
    /// running, and a cluster that kept every test's would run out of them. A test
    /// that fails leaves its database for a look.
    pub async fn drop_everywhere(self) {
        let _turn = ONE_AT_A_TIME.lock().await;
        for (host, port) in &self.nodes {
            connect(&on_node(&self.coordinator, host, *port, None))
                .await
                .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
                .await
                .expect("drop the test database on a node");
        }
    }

    /// A client on the coordinator's test database.
    pub async fn client(&self) -> tokio_postgres::Client {
        connect(&Config::from_str(&self.url).expect("test database URL")).await
    }
}

/// `per_worker` agent names whose shards are on each worker: names hash to shards
/// unevenly, and the test is about operations spread over nodes.
pub async fn agents_on_every_worker(
    sql: &tokio_postgres::Client,
    per_worker: usize,
) -> Vec<String> {
    let mut by_node: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for n in 0..200 {
        let agent = format!("citus-agent-{n}");
        let node: i32 = sql
            .query_one(
                "SELECT nodeport FROM pg_dist_shard_placement
                 WHERE shardid = get_shard_id_for_distribution_column('operations', $1::text)",
                &[&agent],
            )
            .await
            .unwrap()
            .get(0);
        let agents = by_node.entry(node).or_default();
        if agents.len() < per_worker {
            agents.push(agent);
        }
    }
    assert!(
        by_node.len() >= 2,
        "every agent name hashed to one node: {by_node:?}"
    );
    by_node.into_values().flatten().collect()
}

/// How many two-phase transactions the coordinator has recorded. Only meaningful on a
/// coordinator started with `citus.recover_2pc_interval = -1`, where nothing clears the
/// record while a test reads it: asserted here.
pub async fn prepared_transactions(sql: &tokio_postgres::Client) -> i64 {
    let interval: String = sql
        .query_one("SELECT current_setting('citus.recover_2pc_interval')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        interval, "-1",
        "start the coordinator with citus.recover_2pc_interval = -1 (docs/scale-out.md)"
    );
    sql.query_one("SELECT count(*) FROM pg_dist_transaction", &[])
        .await
        .unwrap()
        .get(0)
}

fn host_and_port(config: &Config) -> (String, u16) {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => "127.0.0.1".to_owned(),
    };
    (host, config.get_ports().first().copied().unwrap_or(5432))
}

/// The coordinator's connection settings (user, password) for another node and database.
fn on_node(coordinator: &Config, host: &str, port: u16, database: Option<&str>) -> Config {
    let mut config = Config::new();
    config.host(host).port(port);
    if let Some(user) = coordinator.get_user() {
        config.user(user);
    }
    if let Some(password) = coordinator.get_password() {
        config.password(password);
    }
    config.dbname(database.or(coordinator.get_dbname()).unwrap_or("postgres"));
    config
}

async fn connect(config: &Config) -> tokio_postgres::Client {
    let (client, connection) = config
        .connect(NoTls)
        .await
        .expect("connect to a Citus node");
    tokio::spawn(connection);
    client
}
