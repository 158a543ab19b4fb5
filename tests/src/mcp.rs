//! Drives intake's `/mcp` with the official Python MCP client (`tests/mcp/driver.py`,
//! on the `mcp` package `make test` installs into target/pytools).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

pub const PYTHON: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/pytools/bin/python");
const DRIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/mcp/driver.py");

/// Runs `steps` (see driver.py) through one MCP client session at `mcp_url` as the
/// agent with `key`, negotiating as `mode` (auto, legacy, or a protocol version); one
/// answer per step.
pub fn run_steps(mcp_url: &str, key: &str, mode: &str, steps: &Value) -> Vec<Value> {
    assert!(
        Path::new(PYTHON).exists(),
        "the Python MCP client is not installed: run `make test` (scripts/python-tools.sh)"
    );
    let mut child = Command::new(PYTHON)
        .arg(DRIVER)
        .env("MCP_URL", mcp_url)
        .env("AGENT_KEY", key)
        .env("MCP_MODE", mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the MCP driver");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(steps.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "MCP driver failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}
