//! The real binaries, started from the workspace's target directory (the Makefile
//! builds them before the tests run), as child processes that are killed on drop.

use std::path::{Path, PathBuf};
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
    let dir = binary("opgate").parent().unwrap().join("test-logs");
    std::fs::create_dir_all(&dir).expect("log dir");
    let path = dir.join(format!("{prefix}-{}.log", uuid::Uuid::new_v4().simple()));
    let file = std::fs::File::create(&path).expect("log file");
    (path, file)
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
    opgate_program(&binary("opgate"), database_url, args)
}

/// Runs another build of `opgate` (the previous release's, say) and waits for it.
pub fn opgate_program(program: &Path, database_url: &str, args: &[&str]) -> CliOutput {
    let output = Command::new(program)
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

/// A running service binary. Its first stdout line says it is ready; its stderr
/// (logs) goes to a file under target/<profile>/test-logs/.
pub struct Service {
    child: tokio::process::Child,
    pub ready_line: String,
    /// The lines after the first that the service prints once ready (intake's
    /// metrics address).
    pub more_lines: Vec<String>,
    pub log_path: PathBuf,
    name: &'static str,
}

impl Service {
    pub async fn spawn(name: &'static str, args: &[&str], envs: &[(&str, &str)]) -> Self {
        Self::spawn_reading(name, args, envs, 1).await
    }

    /// Starts the service and waits for its first `lines` lines on stdout.
    pub async fn spawn_reading(
        name: &'static str,
        args: &[&str],
        envs: &[(&str, &str)],
        lines: usize,
    ) -> Self {
        Self::spawn_program(name, &binary(name), args, envs, lines).await
    }

    /// Starts another build of the service `name` (the previous release's, say), and
    /// waits for its first `lines` lines on stdout.
    pub async fn spawn_program(
        name: &'static str,
        program: &Path,
        args: &[&str],
        envs: &[(&str, &str)],
        lines: usize,
    ) -> Self {
        let (log_path, log) = log_file(name);
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .env("RUST_LOG", "info")
            .envs(envs.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let mut reader = BufReader::new(stdout).lines();
        let mut read = Vec::with_capacity(lines);
        for _ in 0..lines.max(1) {
            let line = tokio::time::timeout(Duration::from_secs(30), reader.next_line())
                .await
                .unwrap_or_else(|_| panic!("{name} did not start; see {}", log_path.display()))
                .expect("read stdout")
                .unwrap_or_else(|| panic!("{name} exited; see {}", log_path.display()));
            read.push(line);
        }
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = reader.next_line().await {} });
        let ready_line = read.remove(0);
        Self {
            child,
            ready_line,
            more_lines: read,
            log_path,
            name,
        }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("process still running")
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {}", self.name);
    }

    /// `kill -9`, and waits until the process is gone.
    pub async fn kill9(mut self) {
        self.signal("KILL");
        let _ = self.child.wait().await;
    }

    /// Sends SIGTERM and waits (at most 60 s) for the exit status.
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} did not stop within 60 s of SIGTERM", self.name))
            .expect("wait")
    }
}

/// `intake` on a free port, its `/metrics` on another.
pub struct Intake {
    pub service: Service,
    pub base_url: String,
    pub metrics_url: String,
}

impl Intake {
    pub async fn start(database_url: &str) -> Self {
        Self::start_with(database_url, &[]).await
    }

    pub async fn start_with(database_url: &str, extra_args: &[&str]) -> Self {
        Self::start_with_env(database_url, extra_args, &[]).await
    }

    /// With extra environment variables (OTEL_*, RUST_LOG, …).
    pub async fn start_with_env(
        database_url: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_program(&binary("intake"), database_url, extra_args, env).await
    }

    /// Another build of intake (the previous release's, say).
    pub async fn start_program(
        program: &Path,
        database_url: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let mut args = vec!["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"];
        args.extend_from_slice(extra_args);
        let mut envs = vec![("DATABASE_URL", database_url)];
        envs.extend_from_slice(env);
        let service = Service::spawn_program("intake", program, &args, &envs, 2).await;
        let metrics_url = service.more_lines[0]
            .strip_prefix("intake metrics at ")
            .unwrap_or_else(|| {
                panic!(
                    "unexpected second line from intake: {:?}",
                    service.more_lines
                )
            })
            .to_owned();
        let base_url = service
            .ready_line
            .strip_prefix("intake listening on ")
            .unwrap_or_else(|| {
                panic!(
                    "unexpected first line from intake: {:?}",
                    service.ready_line
                )
            })
            .to_owned();
        Self {
            service,
            base_url,
            metrics_url,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }
}

/// `provider-sim` on a free port.
pub struct ProviderSim {
    pub service: Service,
    pub base_url: String,
}

impl ProviderSim {
    pub async fn start(faults: &[&str]) -> Self {
        let mut args = vec!["--listen", "127.0.0.1:0"];
        for fault in faults {
            args.extend_from_slice(&["--fault", fault]);
        }
        let service = Service::spawn("provider-sim", &args, &[]).await;
        let base_url = service
            .ready_line
            .strip_prefix("provider-sim listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {:?}", service.ready_line))
            .to_owned();
        Self { service, base_url }
    }

    pub async fn ledger(&self) -> serde_json::Value {
        reqwest::get(format!("{}/_sim/ledger", self.base_url))
            .await
            .expect("ledger")
            .json()
            .await
            .expect("ledger json")
    }

    /// Replaces the whole fault set.
    pub async fn set_faults(&self, faults: serde_json::Value) {
        let response = reqwest::Client::new()
            .post(format!("{}/_sim/faults", self.base_url))
            .json(&faults)
            .send()
            .await
            .expect("set faults");
        assert!(response.status().is_success(), "faults refused: {faults}");
    }
}

/// A worker binary (executor or reconciler): its ready line is
/// `<name> running as <owner>; metrics at <url>`.
pub struct Worker {
    pub service: Service,
    name: &'static str,
}

/// An `executor` against a database and a provider, polling every 200 ms.
pub type Executor = Worker;
/// A `reconciler` against a database and a provider, sweeping every 50 ms.
pub type Reconciler = Worker;

impl Worker {
    async fn spawn(
        name: &'static str,
        fast_poll: [&str; 2],
        database_url: &str,
        provider_url: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let program = binary(name);
        let urls = [database_url, provider_url];
        Self::spawn_program(name, &program, fast_poll, urls, extra_args, env).await
    }

    async fn spawn_program(
        name: &'static str,
        program: &Path,
        fast_poll: [&str; 2],
        [database_url, provider_url]: [&str; 2],
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let mut args = vec!["--provider-url", provider_url, fast_poll[0], fast_poll[1]];
        args.extend_from_slice(extra_args);
        let mut envs = vec![("DATABASE_URL", database_url)];
        envs.extend_from_slice(env);
        let service = Service::spawn_program(name, program, &args, &envs, 1).await;
        let expected = format!("{name} running as");
        assert!(
            service.ready_line.starts_with(&expected),
            "{}",
            service.ready_line
        );
        Self { service, name }
    }

    /// An executor (`Executor::start`).
    pub async fn start(database_url: &str, provider_url: &str, extra_args: &[&str]) -> Self {
        Self::start_with_env(database_url, provider_url, extra_args, &[]).await
    }

    /// An executor with extra environment variables (OTEL_*, RUST_LOG, …).
    pub async fn start_with_env(
        database_url: &str,
        provider_url: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::spawn(
            "executor",
            ["--poll-interval", "200ms"],
            database_url,
            provider_url,
            extra_args,
            env,
        )
        .await
    }

    /// An executor that polls the outbox every `poll` (the others: every 200 ms).
    pub async fn start_polling_every(
        poll: &str,
        database_url: &str,
        provider_url: &str,
        extra_args: &[&str],
    ) -> Self {
        let poll = ["--poll-interval", poll];
        Self::spawn(
            "executor",
            poll,
            database_url,
            provider_url,
            extra_args,
            &[],
        )
        .await
    }

    /// Another build of the executor (the previous release's, say).
    pub async fn start_executor_program(
        program: &Path,
        database_url: &str,
        provider_url: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let urls = [database_url, provider_url];
        let poll = ["--poll-interval", "200ms"];
        Self::spawn_program("executor", program, poll, urls, extra_args, env).await
    }

    /// A reconciler.
    pub async fn start_reconciler(
        database_url: &str,
        provider_url: &str,
        extra_args: &[&str],
    ) -> Self {
        Self::start_reconciler_with_env(database_url, provider_url, extra_args, &[]).await
    }

    /// A reconciler with extra environment variables.
    pub async fn start_reconciler_with_env(
        database_url: &str,
        provider_url: &str,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::spawn(
            "reconciler",
            ["--interval", "50ms"],
            database_url,
            provider_url,
            extra_args,
            env,
        )
        .await
    }

    pub fn owner(&self) -> &str {
        owner_in(
            &self.service.ready_line,
            &format!("{} running as ", self.name),
        )
    }

    /// The worker's Prometheus endpoint.
    pub fn metrics_url(&self) -> &str {
        metrics_url_in(&self.service.ready_line)
    }
}

impl ProviderSim {
    /// Settles a pending payment (`succeeded`, or `failed` with a code).
    pub async fn settle(&self, payment_id: &str, body: serde_json::Value) {
        let response = reqwest::Client::new()
            .post(format!(
                "{}/_sim/payments/{payment_id}/settle",
                self.base_url
            ))
            .json(&body)
            .send()
            .await
            .expect("settle");
        assert!(
            response.status().is_success(),
            "settle refused: {}",
            response.status()
        );
    }
}

/// `executor running as OWNER; metrics at URL` → OWNER.
fn owner_in<'a>(ready_line: &'a str, prefix: &str) -> &'a str {
    let rest = ready_line.strip_prefix(prefix).unwrap_or(ready_line);
    rest.split(';').next().unwrap_or(rest)
}

/// `…; metrics at URL` → URL.
fn metrics_url_in(ready_line: &str) -> &str {
    ready_line
        .split("metrics at ")
        .nth(1)
        .unwrap_or_else(|| panic!("no metrics address in {ready_line:?}"))
}
