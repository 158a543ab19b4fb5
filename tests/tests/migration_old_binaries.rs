//! A rolling upgrade: the previous release's intake and executor keep serving while the
//! new release's migrations apply under them, and are then replaced by the new binaries,
//! with agents registering payments throughout. Migrations must be expand-only: the old
//! binaries' statements keep working against the new schema until they are replaced.
//!
//! The previous release is built from git history by scripts/previous-release.sh (make
//! test runs it before the suite; this test runs it when its binaries are missing) into
//! target/previous-release/<commit>/bin. The test works with whatever migrations the
//! tree holds: the old `opgate migrate` writes the old schema, the new one the rest.
//!
//! What must hold: every operation registered (2xx) in any phase reaches SUCCEEDED with
//! exactly one charge; the old binaries answer no 5xx once the new schema is in place,
//! and the old executor still executes; nothing registered is lost or duplicated.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use opgate_e2e::agent_load::{
    assert_all_succeed, assert_charged_once_each, send_payment, stored_ids, AgentLoad,
};
use opgate_e2e::binaries::opgate_program;
use opgate_e2e::db::empty_database;
use opgate_e2e::{eventually, opgate, Executor, Intake, ProviderSim};
use uuid::Uuid;

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../scripts/previous-release.sh"
);
const CLIENTS: usize = 6;
/// Each client stops after this many keys, whatever happens: the load is bounded.
const MAX_KEYS_PER_CLIENT: usize = 400;
/// Registrations answered 2xx wanted in each phase before the next begins.
const ACKED_PER_PHASE: usize = 100;

/// The old schema, old binaries.
const OLD: u8 = 0;
/// The new `opgate migrate` running under the old binaries.
const MIGRATING: u8 = 1;
/// The new schema, old binaries.
const MIGRATED: u8 = 2;
/// New binaries started beside the old, then the old stopped.
const REPLACED: u8 = 3;
const PHASES: [&str; 4] = ["old", "migrating", "migrated", "replaced"];

/// Operations that are still to execute but have no outbox event to execute them.
const WITHOUT_EVENT: &str = "
SELECT count(*) FROM operations o
WHERE o.status IN ('PENDING', 'IN_PROGRESS')
  AND NOT EXISTS (SELECT 1 FROM outbox x WHERE x.operation_id = o.operation_id)";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_previous_release_keeps_working_while_the_new_migrations_apply() {
    let started = Instant::now();
    let old = previous_release();
    let url = empty_database().await;
    let old_opgate = old.join("opgate");
    opgate_program(&old_opgate, &url, &["migrate"]).success();
    let sql = connect(&url).await;
    let old_version = schema_version(&sql).await;
    let key = opgate_program(
        &old_opgate,
        &url,
        &["agents", "create", "agent", "--allow", "payment"],
    )
    .success()
    .stdout
    .trim()
    .to_owned();

    let sim = ProviderSim::start(&["delay-ms=10"]).await;
    let old_intake = Intake::start_program(&old.join("intake"), &url, &[], &[]).await;
    let old_executor =
        Executor::start_executor_program(&old.join("executor"), &url, &sim.base_url, &[], &[])
            .await;
    let old_owner = old_executor.owner().to_owned();

    let load = AgentLoad::start(
        &old_intake.base_url,
        &key,
        "upgrade",
        CLIENTS,
        MAX_KEYS_PER_CLIENT,
    );
    load.wait_acked(ACKED_PER_PHASE).await;

    // The new release's migrations, under load.
    load.set_phase(MIGRATING);
    let migrate_url = url.clone();
    let migrating = Instant::now();
    let migrated = tokio::task::spawn_blocking(move || opgate(&migrate_url, &["migrate"]))
        .await
        .unwrap()
        .success();
    let migration_took = migrating.elapsed();
    load.set_phase(MIGRATED);
    let migrated_at = timestamp(&sql).await;
    let new_version = schema_version(&sql).await;
    println!(
        "schema V{old_version} → V{new_version} in {:.2} s under load: {}",
        migration_took.as_secs_f64(),
        format!("{}{}", migrated.stdout, migrated.stderr).trim()
    );

    // The old binaries on the new schema: registrations answered, and executed.
    load.wait_acked(load.acked() + ACKED_PER_PHASE).await;
    eventually(
        Duration::from_secs(60),
        "the old executor to finish operations registered after the migration",
        || async {
            let done: i64 = sql
                .query_one(
                    "SELECT count(*) FROM operation_events e
                     JOIN operations o USING (operation_id)
                     WHERE e.actor = $1 AND e.to_status = 'SUCCEEDED' AND o.created_at > $2::text::timestamptz",
                    &[&old_owner, &migrated_at],
                )
                .await
                .unwrap()
                .get(0);
            (done >= 20).then_some(())
        },
    )
    .await;

    // The rolling replacement: the new binaries start beside the old ones, agents move
    // to the new intake, and the old binaries stop.
    let new_intake = Intake::start(&url).await;
    let new_executor = Executor::start(&url, &sim.base_url, &[]).await;
    load.set_phase(REPLACED);
    load.move_to(&new_intake.base_url).await;
    // Their logs up to now: what they say while shutting down (connections closed
    // under the pool) is not about the schema.
    let old_logs = [
        ("intake", old_intake.service.logs()),
        ("executor", old_executor.service.logs()),
    ];
    let stopped = old_intake.service.terminate().await;
    assert!(stopped.success(), "the old intake exited with {stopped}");
    let stopped = old_executor.service.terminate().await;
    assert!(stopped.success(), "the old executor exited with {stopped}");
    load.wait_acked(load.acked() + ACKED_PER_PHASE).await;
    let sent = load.stop().await;

    // What agents saw, by phase.
    let mut by_phase: BTreeMap<(&str, u16), usize> = BTreeMap::new();
    for s in &sent {
        *by_phase
            .entry((PHASES[s.phase as usize], s.status))
            .or_default() += 1;
    }
    println!("(phase, status) → requests (0: no answer): {by_phase:?}");
    let server_errors: Vec<_> = sent
        .iter()
        .filter(|s| s.phase != OLD && s.status >= 500)
        .map(|s| format!("{} ({}): {}", s.key, PHASES[s.phase as usize], s.status))
        .collect();
    assert!(
        server_errors.is_empty(),
        "5xx from the old intake while or after the new migrations applied: {server_errors:?}"
    );
    let refused: Vec<_> = sent
        .iter()
        .filter(|s| s.status != 0 && s.operation_id.is_none())
        .map(|s| format!("{} ({}): {}", s.key, PHASES[s.phase as usize], s.status))
        .collect();
    assert!(refused.is_empty(), "requests refused: {refused:?}");
    // The old services' own account: no failed claim, write or request after the
    // migration (a statement the new schema broke shows here first).
    for (name, log) in &old_logs {
        let deadlocks = log.matches(DEADLOCK_RETRIED).count();
        if deadlocks > 0 {
            println!("the old {name} ran {deadlocks} transactions again after a deadlock");
        }
        let complaints = complaints(log);
        assert!(
            complaints.is_empty(),
            "the old {name} logged warnings or errors:\n{}",
            complaints.join("\n")
        );
    }

    // A request that got no answer while the old intake stopped is re-sent with its key.
    let client = reqwest::Client::new();
    let mut answered: HashMap<String, Uuid> = HashMap::new();
    for s in &sent {
        let id = match s.operation_id {
            Some(id) => id,
            None => {
                eventually(
                    Duration::from_secs(30),
                    &format!("{} to be answered 2xx", s.key),
                    || async {
                        send_payment(&client, &new_intake.base_url, &key, "cus_upgrade", &s.key)
                            .await
                            .operation_id
                    },
                )
                .await
            }
        };
        answered.insert(s.key.clone(), id);
    }
    let stored = stored_ids(&sql).await;
    assert_eq!(
        stored, answered,
        "the database holds exactly one operation per key sent, each as answered"
    );
    let without_event: i64 = sql.query_one(WITHOUT_EVENT, &[]).await.unwrap().get(0);
    assert_eq!(
        without_event, 0,
        "operations to execute without an outbox event"
    );

    let total = stored.len() as i64;
    assert_all_succeed(&sql, total).await;
    let ledger = sim.ledger().await;
    assert_charged_once_each(&ledger, &stored);
    let charges = ledger["charges"].as_array().expect("charges");
    let by_old_executor: i64 = sql
        .query_one(
            "SELECT count(*) FROM operation_events WHERE actor = $1 AND to_status = 'SUCCEEDED'",
            &[&old_owner],
        )
        .await
        .unwrap()
        .get(0);
    drop(new_executor);
    println!(
        "{total} operations, {} charges, {by_old_executor} executed by the old executor; {:.1} s",
        charges.len(),
        started.elapsed().as_secs_f64()
    );
}

/// The previous release's bin directory, built by scripts/previous-release.sh if needed.
fn previous_release() -> PathBuf {
    let output = std::process::Command::new("bash")
        .arg(SCRIPT)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run scripts/previous-release.sh");
    assert!(
        output.status.success(),
        "scripts/previous-release.sh failed ({})",
        output.status
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let dir = PathBuf::from(stdout.lines().last().expect("the bin directory").trim());
    for name in ["intake", "executor", "opgate"] {
        assert!(
            dir.join(name).is_file(),
            "{} missing",
            dir.join(name).display()
        );
    }
    dir
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client
}

async fn schema_version(sql: &tokio_postgres::Client) -> i32 {
    sql.query_one("SELECT max(version) FROM refinery_schema_history", &[])
        .await
        .expect("read the schema version")
        .get(0)
}

/// The database's clock, as text PostgreSQL reads back as a timestamptz.
async fn timestamp(sql: &tokio_postgres::Client) -> String {
    let row = sql.query_one("SELECT now()::text", &[]).await.unwrap();
    row.get(0)
}

/// A registration's transaction can deadlock with a migration that locks `outbox`
/// before `operations` (the registration locks them the other way round): PostgreSQL
/// aborts one of the two, and the store runs a registration chosen as the victim again,
/// so no agent sees it. Counted and printed, not a failure.
const DEADLOCK_RETRIED: &str = "chosen as a deadlock victim; running it again";

/// The WARN and ERROR lines of a service's JSON log, but for deadlocks retried.
fn complaints(log: &str) -> Vec<String> {
    log.lines()
        .filter(|line| {
            serde_json::from_str::<serde_json::Value>(line)
                .map(|v| {
                    (v["level"] == "WARN" || v["level"] == "ERROR")
                        && v["message"] != DEADLOCK_RETRIED
                })
                .unwrap_or(false)
        })
        .map(str::to_owned)
        .collect()
}
