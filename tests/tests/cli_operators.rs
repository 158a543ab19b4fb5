//! `opgate operators create|list|revoke`: keys are never listed, a revoked operator's
//! key gets 401 on /admin; and the CLI's failures are one line, without a backtrace.

use std::process::{Command, Stdio};

use opgate_domain::OperationStatus;
use opgate_e2e::binaries::{binary, CliOutput};
use opgate_e2e::{opgate, Intake, TestDb};

/// `opgate <args>` with these extra environment variables.
fn opgate_with_env(database_url: &str, args: &[&str], env: &[(&str, &str)]) -> CliOutput {
    let output = Command::new(binary("opgate"))
        .args(args)
        .env("DATABASE_URL", database_url)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run opgate");
    CliOutput {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Both variables that make `anyhow` capture a backtrace.
const BACKTRACES_ON: &[(&str, &str)] = &[("RUST_BACKTRACE", "1"), ("RUST_LIB_BACKTRACE", "1")];

/// A failure reported as `error: …` on one line, exit status 1, no backtrace.
fn assert_one_line_failure(output: &CliOutput, expected: &str) {
    assert_eq!(output.status.code(), Some(1), "stderr: {}", output.stderr);
    assert!(output.stdout.is_empty(), "stdout: {}", output.stdout);
    let stderr = output.stderr.trim_end();
    assert!(
        !stderr.contains('\n'),
        "more than one line on stderr: {stderr}"
    );
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(stderr.contains(expected), "{stderr:?} lacks {expected:?}");
    assert_no_backtrace(&output.stderr);
}

fn assert_no_backtrace(stderr: &str) {
    assert!(
        !stderr.contains("Stack backtrace") && !stderr.contains("stack backtrace"),
        "backtrace printed: {stderr}"
    );
    assert!(
        !stderr.lines().any(|line| line.starts_with("   0: ")),
        "backtrace frames printed: {stderr}"
    );
}

fn create_operator(db: &TestDb, name: &str) -> String {
    let key = opgate(&db.url, &["operators", "create", name])
        .success()
        .stdout
        .trim()
        .to_owned();
    assert!(key.starts_with("opo_"), "unexpected key output {key:?}");
    key
}

/// `opo_<key id>_<secret>` → (key id, secret).
fn key_parts(key: &str) -> (&str, &str) {
    let rest = key.strip_prefix("opo_").unwrap();
    rest.split_once('_').unwrap()
}

fn assert_no_key(listing: &str, keys: &[&str]) {
    for key in keys {
        let (_, secret) = key_parts(key);
        assert!(!listing.contains(key), "a key was listed: {listing}");
        assert!(!listing.contains(secret), "a key's secret was listed");
    }
}

#[tokio::test]
async fn operators_are_listed_without_keys_and_a_revoked_key_gets_401() {
    let db = TestDb::create().await;
    let ana = create_operator(&db, "ana");
    let bob = create_operator(&db, "bob");

    // The table: name, key id, created, revoked; never a key, a secret or a hash.
    let listing = opgate(&db.url, &["operators", "list"]).success().stdout;
    assert_no_key(&listing, &[&ana, &bob]);
    let header = listing.lines().next().unwrap();
    for column in ["OPERATOR", "KEY ID", "CREATED", "REVOKED"] {
        assert!(header.contains(column), "{header}");
    }
    for (name, key) in [("ana", &ana), ("bob", &bob)] {
        let row = listing
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} not listed: {listing}"));
        assert!(row.contains(key_parts(key).0), "key id missing: {row}");
        assert!(row.trim_end().ends_with(" -"), "listed as revoked: {row}");
    }

    // The same as JSON, one object per line, with exactly these fields.
    let json = opgate(&db.url, &["operators", "list", "--json"])
        .success()
        .stdout;
    assert_no_key(&json, &[&ana, &bob]);
    let rows: Vec<serde_json::Value> = json
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{json}");
    for (row, (name, key)) in rows.iter().zip([("ana", &ana), ("bob", &bob)]) {
        let mut fields: Vec<&str> = row
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        fields.sort_unstable();
        assert_eq!(
            fields,
            ["created_at", "key_id", "operator_id", "revoked_at"]
        );
        assert_eq!(row["operator_id"], name);
        assert_eq!(row["key_id"], key_parts(key).0);
        assert!(row["created_at"].is_string(), "{row}");
        assert!(row["revoked_at"].is_null(), "{row}");
    }

    // Both keys work; revoke ana.
    let intake = Intake::start(&db.url).await;
    let client = reqwest::Client::new();
    let admin = |key: &str| {
        client
            .get(intake.url("/admin/operations"))
            .bearer_auth(key)
            .send()
    };
    assert_eq!(admin(&ana).await.unwrap().status(), 200);
    assert_eq!(admin(&bob).await.unwrap().status(), 200);

    let revoked = opgate(&db.url, &["operators", "revoke", "ana"]).success();
    assert!(revoked.stdout.is_empty(), "{}", revoked.stdout);
    assert!(
        revoked.stderr.contains("operator ana revoked"),
        "{}",
        revoked.stderr
    );

    let listing = opgate(&db.url, &["operators", "list"]).success().stdout;
    let ana_row = listing.lines().find(|l| l.starts_with("ana ")).unwrap();
    let bob_row = listing.lines().find(|l| l.starts_with("bob ")).unwrap();
    assert!(
        !ana_row.trim_end().ends_with(" -"),
        "revocation time missing: {ana_row}"
    );
    assert!(bob_row.trim_end().ends_with(" -"), "{bob_row}");
    let json = opgate(&db.url, &["operators", "list", "--json"])
        .success()
        .stdout;
    let rows: Vec<serde_json::Value> = json
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert!(rows[0]["revoked_at"].is_string(), "{}", rows[0]);
    assert!(rows[1]["revoked_at"].is_null(), "{}", rows[1]);

    // The revoked key is refused at once; the other still works.
    let refused = admin(&ana).await.unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(
        refused.headers()["content-type"],
        "application/problem+json"
    );
    assert_eq!(admin(&bob).await.unwrap().status(), 200);
}

#[tokio::test]
async fn revoking_twice_or_an_unknown_operator_fails_in_one_line_without_a_backtrace() {
    let db = TestDb::create().await;
    create_operator(&db, "ana");
    opgate(&db.url, &["operators", "revoke", "ana"]).success();

    let twice = opgate_with_env(&db.url, &["operators", "revoke", "ana"], BACKTRACES_ON);
    assert_one_line_failure(&twice, "operator \"ana\" is already revoked");

    let unknown = opgate_with_env(&db.url, &["operators", "revoke", "zoe"], BACKTRACES_ON);
    assert_one_line_failure(&unknown, "no operator named \"zoe\"");

    let invalid = opgate_with_env(
        &db.url,
        &["operators", "create", "has space"],
        BACKTRACES_ON,
    );
    assert_one_line_failure(&invalid, "invalid operator name \"has space\"");

    let duplicate = opgate_with_env(&db.url, &["operators", "create", "ana"], BACKTRACES_ON);
    assert_one_line_failure(&duplicate, "operator ana already exists");

    // Nothing was revoked or created by the failures.
    let json = opgate(&db.url, &["operators", "list", "--json"])
        .success()
        .stdout;
    assert_eq!(json.lines().count(), 1, "{json}");
}

#[tokio::test]
async fn an_error_and_its_causes_are_joined_on_one_line() {
    // No database needed: the URL is refused before connecting.
    let output = opgate_with_env("not a database url", &["operators", "list"], BACKTRACES_ON);
    assert_one_line_failure(
        &output,
        "configuring the database: database unavailable: invalid database URL",
    );
}

#[tokio::test]
async fn an_unknown_status_names_the_valid_ones() {
    let db = TestDb::create().await;
    let output = opgate_with_env(
        &db.url,
        &["operations", "list", "--status", "BOGUS"],
        BACKTRACES_ON,
    );
    // A usage error: clap's format and status.
    assert_eq!(output.status.code(), Some(2), "{}", output.stderr);
    assert!(output.stdout.is_empty());
    assert!(output.stderr.contains("BOGUS"), "{}", output.stderr);
    for status in OperationStatus::ALL {
        assert!(
            output.stderr.contains(status.as_str()),
            "{} not named: {}",
            status.as_str(),
            output.stderr
        );
    }
    assert_no_backtrace(&output.stderr);

    // Any case is accepted.
    for status in ["MANUAL_REVIEW", "manual_review", "Succeeded"] {
        opgate(&db.url, &["operations", "list", "--status", status]).success();
    }
}
