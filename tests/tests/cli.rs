//! The operator's command: migrations and agent credentials.

use opgate_e2e::{opgate, TestDb};

#[tokio::test]
async fn migrate_is_safe_to_run_again_and_concurrently() {
    let db = TestDb::create().await; // already migrated once
    let again = opgate(&db.url, &["migrate"]).success();
    assert!(
        again.stderr.contains("migrations applied: 0"),
        "{}",
        again.stderr
    );
    let url = db.url.clone();
    let racers: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || opgate(&url, &["migrate"]).status.success())
        })
        .collect();
    assert!(racers.into_iter().all(|r| r.join().unwrap()));
}

#[tokio::test]
async fn agents_are_created_listed_and_revoked_without_exposing_keys() {
    let db = TestDb::create().await;
    let key = db.create_agent(
        "ops-bot",
        &["--max-amount", "USD:1000.00", "--max-amount", "jpy:50000"],
    );
    let listing = opgate(&db.url, &["agents", "list"]).success().stdout;
    assert!(listing.contains("ops-bot"));
    assert!(
        listing.contains("USD:1000.00") && listing.contains("JPY:50000"),
        "{listing}"
    );
    let secret = key.rsplit('_').next().unwrap();
    assert!(!listing.contains(secret), "the key's secret was listed");

    let duplicate = opgate(&db.url, &["agents", "create", "ops-bot"]);
    assert!(!duplicate.status.success());
    assert!(duplicate.stdout.is_empty(), "a failed create printed a key");
    assert!(
        duplicate.stderr.contains("already exists"),
        "{}",
        duplicate.stderr
    );

    opgate(&db.url, &["agents", "revoke", "ops-bot"]).success();
    let twice = opgate(&db.url, &["agents", "revoke", "ops-bot"]);
    assert!(!twice.status.success());
    let listing = opgate(&db.url, &["agents", "list"]).success().stdout;
    let row = listing.lines().find(|l| l.starts_with("ops-bot")).unwrap();
    assert!(
        !row.trim_end().ends_with('-'),
        "revocation time missing: {row}"
    );
}

#[tokio::test]
async fn invalid_agent_definitions_are_refused_and_write_nothing() {
    let db = TestDb::create().await;
    for args in [
        vec!["agents", "create", "has space"],
        vec!["agents", "create", "a", "--allow", "chargeback"],
        vec!["agents", "create", "a", "--max-amount", "USD"],
        vec!["agents", "create", "a", "--max-amount", "USD:1.001"],
        vec!["agents", "create", "a", "--max-amount", "ZZZ:5"],
        vec![
            "agents",
            "create",
            "a",
            "--max-amount",
            "USD:5",
            "--max-amount",
            "usd:6",
        ],
    ] {
        let output = opgate(&db.url, &args);
        assert!(!output.status.success(), "{args:?} was accepted");
        assert!(output.stdout.is_empty());
    }
    assert_eq!(db.counts().await.agents, 0);
}
