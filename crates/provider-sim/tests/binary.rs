//! The real `provider-sim` binary: the stdout line, a command-line fault, SIGTERM,
//! and a clear failure on an invalid fault spec.

mod common;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_provider-sim");

#[tokio::test]
async fn binary_drops_once_then_answers_and_exits_on_sigterm() {
    let mut child = Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--fault",
            "drop-after-commit=1.0/1",
        ])
        .env_remove("PROVIDER_SIM_LISTEN")
        .env_remove("PROVIDER_SIM_FAULTS")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("the listening line in time")
        .unwrap()
        .expect("a line on stdout");
    let addr: SocketAddr = line
        .strip_prefix("provider-sim listening on http://")
        .unwrap_or_else(|| panic!("unexpected line {line:?}"))
        .parse()
        .unwrap();
    assert_eq!(addr.ip().to_string(), "127.0.0.1");
    assert_ne!(addr.port(), 0);

    assert!(try_pay(addr, "k", "cus_1", "250.00").await.is_err());
    let ledger_after_drop = ledger(addr).await;
    assert_eq!(ledger_after_drop["count"], 1);
    let retry = pay(addr, "k", "cus_1", "250.00").await;
    assert_eq!(retry.status, 200);
    assert_eq!(
        retry.body["id"],
        ledger_after_drop["charges"][0]["payment_id"]
    );
    let book = ledger(addr).await;
    assert_eq!(book["count"], 1);
    assert_eq!(book["requests_by_key"]["k"], 2);

    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("exits promptly on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
    assert_eq!(
        lines.next_line().await.unwrap(),
        None,
        "only one line on stdout"
    );
}

#[test]
fn binary_rejects_invalid_fault_specs() {
    for spec in ["drop-after-commit=2.0", "explode=1.0", "delay-ms=soon"] {
        let output = std::process::Command::new(BIN)
            .args(["--listen", "127.0.0.1:0", "--fault", spec])
            .env_remove("PROVIDER_SIM_FAULTS")
            .output()
            .unwrap();
        assert!(!output.status.success(), "{spec} accepted");
        assert!(output.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("--fault"), "{spec}: {stderr}");
    }
}
