//! A private PostgreSQL cluster for tests that stop, crash and restart the database under
//! a running service (the shared server must stay up for every other test).
//!
//! It commits synchronously (`synchronous_commit=on`, whatever the shared server's
//! settings): a commit the server acknowledged is in its WAL before the client hears of
//! it, so a crash (`crash`) may lose nothing a client was told. `fsync=off` stays: only
//! the server process dies here, never the machine, and the page cache survives it.

use std::path::PathBuf;
use std::process::Command;

pub struct PgCluster {
    dir: PathBuf,
    port: u16,
    owner: Option<String>,
}

impl PgCluster {
    pub fn start() -> Self {
        let base = crate::binaries::binary("opgate")
            .parent()
            .unwrap()
            .join("test-clusters");
        std::fs::create_dir_all(&base).expect("cluster base dir");
        let dir = base.join(uuid::Uuid::new_v4().simple().to_string());
        std::fs::create_dir_all(&dir).expect("cluster dir");
        let owner = running_as_root().then(|| {
            let owner = if user_exists("postgres") {
                "postgres"
            } else {
                "nobody"
            };
            run(Command::new("chown").arg(owner).arg(&dir));
            owner.to_owned()
        });
        let port = free_port();
        let cluster = Self { dir, port, owner };
        cluster.run_owned(&[
            "initdb",
            "-D",
            &cluster.data_dir(),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-locale",
            "-N",
        ]);
        cluster.start_server();
        cluster
    }

    fn data_dir(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn run_owned(&self, args: &[&str]) {
        let mut command = match &self.owner {
            Some(owner) => {
                let mut c = Command::new("runuser");
                c.args(["-u", owner, "--"]).args(args);
                c
            }
            None => {
                let mut c = Command::new(args[0]);
                c.args(&args[1..]);
                c
            }
        };
        run(&mut command);
    }

    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn start_server(&self) {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -c unix_socket_directories= -c fsync=off \
             -c synchronous_commit=on",
            self.port
        );
        let log = self.dir.join("server.log").display().to_string();
        self.run_owned(&[
            "pg_ctl",
            "-D",
            &self.data_dir(),
            "-l",
            &log,
            "-w",
            "-o",
            &options,
            "start",
        ]);
    }

    /// A fast shutdown: connections are terminated, as in a real outage or restart.
    pub fn stop_server(&self) {
        self.run_owned(&["pg_ctl", "-D", &self.data_dir(), "-m", "fast", "-w", "stop"]);
    }

    /// `pg_ctl stop -m immediate`: every server process is killed without a checkpoint,
    /// as in a crash of PostgreSQL; the next `start_server` recovers from the WAL.
    pub fn crash(&self) {
        self.run_owned(&[
            "pg_ctl",
            "-D",
            &self.data_dir(),
            "-m",
            "immediate",
            "-w",
            "stop",
        ]);
    }

    /// The server's log (crash recovery shows here).
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let data = self.data_dir();
        let mut command = match &self.owner {
            Some(owner) => {
                let mut c = Command::new("runuser");
                c.args(["-u", owner, "--", "pg_ctl"]);
                c
            }
            None => Command::new("pg_ctl"),
        };
        let _ = command
            .args(["-D", &data, "-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run(command: &mut Command) {
    let output = command.output().expect("run cluster command");
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn user_exists(name: &str) -> bool {
    Command::new("id")
        .arg(name)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}
