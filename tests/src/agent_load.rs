//! Agents registering payments under new keys, one request at a time each, while a test
//! breaks something underneath them (the database, the release): every key sent, the
//! phase of the test it was sent in, and how it was answered, for the test to check
//! against what the database kept.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::api::payment_body;
use crate::eventually;

/// One key a client sent, and how its first request was answered.
pub struct Sent {
    pub key: String,
    /// The test's phase when it was sent (`AgentLoad::set_phase`).
    pub phase: u8,
    /// HTTP status, or 0 when no answer came (connection refused or reset).
    pub status: u16,
    pub operation_id: Option<Uuid>,
}

/// An answer to one payment request.
pub struct Answer {
    pub status: u16,
    pub operation_id: Option<Uuid>,
    pub replayed: bool,
}

/// Sends the payment for `key` (customer `customer`, invoice `inv-<key>`): the status (0
/// when nothing answered) and, on a 2xx, the operation id.
pub async fn send_payment(
    client: &reqwest::Client,
    base: &str,
    agent_key: &str,
    customer: &str,
    key: &str,
) -> Answer {
    let body = payment_body(customer, &format!("inv-{key}"), "10.00");
    let request = client
        .post(format!("{base}/agent/operations/payment"))
        .bearer_auth(agent_key)
        .header("Idempotency-Key", key)
        .json(&body);
    let Ok(response) = request.send().await else {
        return Answer {
            status: 0,
            operation_id: None,
            replayed: false,
        };
    };
    let status = response.status().as_u16();
    let replayed = response.headers().contains_key("idempotent-replayed");
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    let operation_id = (200..300)
        .contains(&status)
        .then(|| body["operation_id"].as_str()?.parse().ok())
        .flatten();
    Answer {
        status,
        operation_id,
        replayed,
    }
}

/// Every operation's id by its idempotency key.
pub async fn stored_ids(sql: &tokio_postgres::Client) -> HashMap<String, Uuid> {
    sql.query("SELECT idempotency_key, operation_id FROM operations", &[])
        .await
        .expect("read operations")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// Waits until the database's `total` operations are all SUCCEEDED or FAILED, and
/// asserts that every one SUCCEEDED (a FAILED one fails the test at once, with the
/// counts, rather than after the timeout).
pub async fn assert_all_succeed(sql: &tokio_postgres::Client, total: i64) {
    let counts = eventually(
        Duration::from_secs(120),
        "every operation to reach a final state",
        || async {
            let counts: BTreeMap<String, i64> = sql
                .query(
                    "SELECT status, count(*) FROM operations GROUP BY status",
                    &[],
                )
                .await
                .ok()?
                .iter()
                .map(|row| (row.get(0), row.get(1)))
                .collect();
            let done: i64 = ["SUCCEEDED", "FAILED"]
                .iter()
                .filter_map(|s| counts.get(*s))
                .sum();
            (done == total).then_some(counts)
        },
    )
    .await;
    assert_eq!(
        counts,
        BTreeMap::from([("SUCCEEDED".to_owned(), total)]),
        "every payment succeeds"
    );
}

/// Asserts that provider-sim's `ledger` holds exactly one charge for each of `stored`
/// (idempotency key → operation id, as `stored_ids` reads them), both under the
/// operation's provider key and for its invoice (`inv-<key>`), and no other charge.
pub fn assert_charged_once_each(ledger: &serde_json::Value, stored: &HashMap<String, Uuid>) {
    let charges = ledger["charges"].as_array().expect("charges");
    let mut per_key: HashMap<&str, usize> = HashMap::new();
    let mut per_invoice: HashMap<&str, usize> = HashMap::new();
    for charge in charges {
        *per_key
            .entry(charge["idempotency_key"].as_str().unwrap_or_default())
            .or_default() += 1;
        *per_invoice
            .entry(charge["invoice_id"].as_str().unwrap_or_default())
            .or_default() += 1;
    }
    let not_once: Vec<_> = stored
        .iter()
        .filter_map(|(key, id)| {
            let under_key = per_key.get(format!("opgate-{id}").as_str()).copied();
            let for_invoice = per_invoice.get(format!("inv-{key}").as_str()).copied();
            (under_key != Some(1) || for_invoice != Some(1))
                .then(|| format!("{key}: {under_key:?}/{for_invoice:?}"))
        })
        .collect();
    assert!(
        not_once.is_empty(),
        "operations not charged exactly once (under its key / for its invoice): {not_once:?}"
    );
    assert_eq!(
        charges.len(),
        stored.len(),
        "charges in the ledger beside those of the operations"
    );
}

/// `clients` agents, each sending up to `keys_per_client` payments (keys
/// `<prefix>-<client>-<i>`, customer `cus_<prefix>`) to the intake `set_base` names last,
/// backing off 100 ms after a request that got no 2xx.
pub struct AgentLoad {
    /// The intake to send to, and how many times it changed.
    base: Arc<RwLock<(String, usize)>>,
    /// The base change each client's latest request was sent after.
    moved: Arc<Vec<AtomicUsize>>,
    phase: Arc<AtomicU8>,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    clients: Vec<JoinHandle<Vec<Sent>>>,
}

impl AgentLoad {
    pub fn start(
        base: &str,
        agent_key: &str,
        prefix: &str,
        clients: usize,
        keys_per_client: usize,
    ) -> Self {
        let base = Arc::new(RwLock::new((base.to_owned(), 0)));
        let moved = Arc::new(
            (0..clients)
                .map(|_| AtomicUsize::new(0))
                .collect::<Vec<_>>(),
        );
        let phase = Arc::new(AtomicU8::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(15))
            .build()
            .unwrap();
        let customer = format!("cus_{prefix}");
        let clients = (0..clients)
            .map(|n| {
                let (http, agent_key) = (http.clone(), agent_key.to_owned());
                let (base, phase, stop) = (base.clone(), phase.clone(), stop.clone());
                let moved = moved.clone();
                let (acked, failed) = (acked.clone(), failed.clone());
                let (prefix, customer) = (prefix.to_owned(), customer.clone());
                tokio::spawn(async move {
                    let mut sent = Vec::new();
                    for i in 0..keys_per_client {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let key = format!("{prefix}-{n}-{i}");
                        let at = phase.load(Ordering::SeqCst);
                        let (url, generation) = base.read().unwrap().clone();
                        moved[n].store(generation, Ordering::SeqCst);
                        let answer = send_payment(&http, &url, &agent_key, &customer, &key).await;
                        if answer.operation_id.is_some() {
                            acked.fetch_add(1, Ordering::SeqCst);
                        } else {
                            failed.fetch_add(1, Ordering::SeqCst);
                            // An agent backs off after an error.
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        sent.push(Sent {
                            key,
                            phase: at,
                            status: answer.status,
                            operation_id: answer.operation_id,
                        });
                    }
                    sent
                })
            })
            .collect();
        Self {
            base,
            moved,
            phase,
            stop,
            acked,
            failed,
            clients,
        }
    }

    /// Requests sent from now on are recorded as sent in `phase`.
    pub fn set_phase(&self, phase: u8) {
        self.phase.store(phase, Ordering::SeqCst);
    }

    /// Requests sent from now on go to the intake at `base`; returns once every client
    /// has sent one there, so that none is still waiting on the previous intake (which
    /// may then be stopped).
    pub async fn move_to(&self, base: &str) {
        let generation = {
            let mut current = self.base.write().unwrap();
            *current = (base.to_owned(), current.1 + 1);
            current.1
        };
        eventually(
            Duration::from_secs(30),
            "every client to send to the new intake",
            || async {
                let moved = self.moved.iter();
                moved
                    .map(|m| m.load(Ordering::SeqCst))
                    .all(|m| m == generation)
                    .then_some(())
            },
        )
        .await;
    }

    /// Requests answered 2xx so far.
    pub fn acked(&self) -> usize {
        self.acked.load(Ordering::SeqCst)
    }

    /// Requests that got no 2xx so far.
    pub fn failed(&self) -> usize {
        self.failed.load(Ordering::SeqCst)
    }

    pub async fn wait_acked(&self, count: usize) {
        eventually(
            Duration::from_secs(60),
            &format!("{count} registrations answered 2xx"),
            || async { (self.acked() >= count).then_some(()) },
        )
        .await;
    }

    /// Stops every client after its request in flight; what each sent.
    pub async fn stop(self) -> Vec<Sent> {
        self.stop.store(true, Ordering::SeqCst);
        let mut sent = Vec::new();
        for client in self.clients {
            sent.extend(client.await.expect("client task"));
        }
        sent
    }
}
