//! intake against its own `/openapi.json`: schemathesis (a third-party property-based
//! API tester, installed by `make test`) generates requests for every route, as an agent
//! and as an operator, and fails on any 5xx, any status code the document does not list
//! for that route, or a response whose content type it does not declare. Real intake
//! (serving the example catalog's kinds too), real PostgreSQL.

use std::path::Path;
use std::process::Command;

use opgate_e2e::{opgate, Intake, TestDb};

const SCHEMATHESIS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../target/pytools/bin/schemathesis"
);

fn run_as(intake: &Intake, key: &str, who: &str) {
    assert!(
        Path::new(SCHEMATHESIS).exists(),
        "schemathesis is not installed: run `make test` (scripts/python-tools.sh installs it)"
    );
    let output = Command::new(SCHEMATHESIS)
        .args([
            "run",
            &intake.url("/openapi.json"),
            "--header",
            &format!("Authorization: Bearer {key}"),
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance",
            "--phases",
            "examples,coverage,fuzzing",
            "--max-examples",
            "25",
            // The same cases every run: a failure can be replayed, and CI is not flaky.
            "--seed",
            "20261203",
        ])
        .env("NO_COLOR", "1")
        .output()
        .expect("run schemathesis");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis as {who} found problems:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(report.contains("passed"), "{report}");
}

#[tokio::test]
async fn every_route_answers_only_what_the_openapi_document_says() {
    let db = TestDb::create().await;
    let catalog = format!("{}/../examples/catalog.toml", env!("CARGO_MANIFEST_DIR"));
    let agent = db.create_agent(
        "fuzzed-agent",
        &[
            "--catalog",
            &catalog,
            "--allow",
            "payment",
            "--allow",
            "refund",
            "--allow",
            "order",
            "--allow",
            "booking",
            "--allow",
            "provisioning",
        ],
    );
    let operator = opgate(&db.url, &["operators", "create", "fuzzed-operator"])
        .success()
        .stdout
        .trim()
        .to_owned();
    let intake = Intake::start_with(&db.url, &["--catalog", &catalog]).await;
    run_as(&intake, &agent, "an agent");
    run_as(&intake, &operator, "an operator");
}
