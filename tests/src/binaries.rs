//! The real binaries, started from the workspace's target directory (the Makefile
//! builds them before the tests run).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

/// `target/<profile>/<name>`, found next to the running test executable.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executable lives in target/<profile>/deps");
    let path = profile_dir.join(name);
    assert!(
        path.exists(),
        "{} not built: run `cargo build --workspace --bins` first (make test does)",
        path.display()
    );
    path
}

/// Where child processes' logs go, so a failing test can be diagnosed.
pub fn log_file(prefix: &str) -> (PathBuf, std::fs::File) {
    let dir = binary_dir().join("test-logs");
    std::fs::create_dir_all(&dir).expect("log dir");
    let path = dir.join(format!("{prefix}-{}.log", uuid::Uuid::new_v4().simple()));
    let file = std::fs::File::create(&path).expect("log file");
    (path, file)
}

fn binary_dir() -> PathBuf {
    binary("opgate").parent().unwrap().to_path_buf()
}

pub struct CliOutput {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl CliOutput {
    pub fn success(self) -> Self {
        assert!(
            self.status.success(),
            "opgate failed ({}): {}",
            self.status,
            self.stderr
        );
        self
    }
}

/// Runs `opgate <args>` against `database_url` and waits for it.
pub fn opgate(database_url: &str, args: &[&str]) -> CliOutput {
    let output = Command::new(binary("opgate"))
        .args(args)
        .env("DATABASE_URL", database_url)
        .stdin(Stdio::null())
        .output()
        .expect("run opgate");
    CliOutput {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A running `intake` on a free port; killed when dropped.
pub struct Intake {
    child: tokio::process::Child,
    pub base_url: String,
    pub log_path: PathBuf,
}

impl Intake {
    pub async fn start(database_url: &str) -> Self {
        Self::start_with(database_url, &[]).await
    }

    pub async fn start_with(database_url: &str, extra_args: &[&str]) -> Self {
        let (log_path, log) = log_file("intake");
        let mut child = tokio::process::Command::new(binary("intake"))
            .args(["--listen", "127.0.0.1:0"])
            .args(extra_args)
            .env("DATABASE_URL", database_url)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .expect("start intake");
        let stdout = child.stdout.take().expect("intake stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("intake did not start; see {}", log_path.display()))
            .expect("read intake stdout")
            .unwrap_or_else(|| panic!("intake exited; see {}", log_path.display()));
        let base_url = line
            .strip_prefix("intake listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from intake: {line:?}"))
            .to_owned();
        Self {
            child,
            base_url,
            log_path,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("intake did not stop within 30 s of SIGTERM")
            .expect("wait for intake")
    }
}
