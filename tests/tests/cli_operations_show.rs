//! `opgate operations show` takes an id's first digits, as `operations list` shows ids,
//! and refuses a prefix that names more than one operation or none. A database that
//! does not answer is named (never with its password), with how to choose another.

use opgate_e2e::{opgate, Stack};

#[tokio::test]
async fn show_finds_an_operation_by_the_start_of_its_id() {
    let stack = Stack::start(&[]).await;
    let id = stack.pay("cus_show", "show-1").await.to_string();
    let shown = opgate(&stack.db.url, &["operations", "show", &id[..8]]).success();
    assert!(shown.stdout.contains(&id), "{}", shown.stdout);
    assert!(shown.stdout.contains("payment"), "{}", shown.stdout);

    let too_short = opgate(&stack.db.url, &["operations", "show", &id[..4]]);
    assert!(!too_short.status.success());
    assert!(
        too_short.stderr.contains("8 or more"),
        "{}",
        too_short.stderr
    );

    let other = if id.starts_with('0') {
        "11111111"
    } else {
        "00000000"
    };
    let none = opgate(&stack.db.url, &["operations", "show", other]);
    assert!(!none.status.success());
    assert!(none.stderr.contains("no operation"), "{}", none.stderr);
}

#[test]
fn an_unreachable_database_is_named_without_its_password_with_a_hint() {
    let failed = opgate(
        "postgres://opgate:s3cret@127.0.0.1:1/opgate",
        &["agents", "list"],
    );
    assert!(!failed.status.success());
    assert!(
        failed
            .stderr
            .contains("no database answered at postgres://127.0.0.1:1/opgate"),
        "{}",
        failed.stderr
    );
    assert!(failed.stderr.contains("DATABASE_URL"), "{}", failed.stderr);
    assert_eq!(
        failed.stderr.trim_end().lines().count(),
        1,
        "{}",
        failed.stderr
    );
    assert!(!failed.stderr.contains("s3cret"), "{}", failed.stderr);
}
