//! A real localstripe (a fake Stripe, in Python) as a child process on a free port, for
//! the Stripe provider's tests. scripts/python-tools.sh installs it into target/pytools
//! (`make test` runs that script); this module owns starting it, waiting until it answers,
//! killing it on drop, and the few Stripe API calls tests need to set up customers.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

/// Where scripts/python-tools.sh installs it: `<workspace>/target/pytools`.
const BINARY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../target/pytools/bin/localstripe"
);
/// The virtualenv's interpreter, which runs `LAUNCH`.
const PYTHON: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/pytools/bin/python");
/// What `bin/localstripe` runs, with the store kept in memory only. Upstream pickles its
/// whole store to the fixed path /tmp/localstripe.pickle after every write: parallel tests
/// would all write that one file (which a developer's own localstripe reloads when it
/// starts), and every write fails with 500 when another user owns it.
const LAUNCH: &str = "import sys, localstripe.resources as r, localstripe.server as s
r.Store.dump_to_disk = lambda self: None
sys.exit(s.start())";

/// A running localstripe, killed on drop. Its store is in its memory only (`--from-scratch`,
/// and see `LAUNCH`), so tests running in parallel never see each other's objects.
pub struct LocalStripe {
    /// e.g. `http://127.0.0.1:43210` (no trailing slash).
    pub base_url: String,
    /// Any `sk_…` key is accepted; this one is what tests configure opgate with.
    pub secret_key: String,
    /// localstripe's stdout and stderr (its access log among them).
    pub log_path: PathBuf,
    client: reqwest::Client,
    _child: tokio::process::Child,
}

impl LocalStripe {
    /// Starts localstripe on a free port and waits (at most 30 s) until it answers HTTP.
    pub async fn start() -> Self {
        assert!(
            Path::new(BINARY).exists(),
            "localstripe is not installed: run `make test` (scripts/python-tools.sh installs it)"
        );
        // The port is chosen by binding :0 and released before localstripe binds it, so
        // another process may take it in between: then localstripe exits, and we retry.
        let mut last_log = String::new();
        for _attempt in 0..3 {
            match Self::try_start().await {
                Ok(started) => return started,
                Err(log) => last_log = log,
            }
        }
        panic!("localstripe did not start (3 attempts); last log:\n{last_log}");
    }

    /// `Err(log)` when the process exited before answering.
    async fn try_start() -> Result<Self, String> {
        let port = free_port();
        let (log_path, log) = log_file();
        let stderr = log.try_clone().expect("clone log file handle");
        let mut child = tokio::process::Command::new(PYTHON)
            .args(["-c", LAUNCH, "--port", &port.to_string(), "--from-scratch"])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start localstripe ({PYTHON}): {e}"));
        let base_url = format!("http://127.0.0.1:{port}");
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        // Any HTTP answer (an unauthenticated request gets 401) means it is serving.
        while client.get(&base_url).send().await.is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                return Err(format!("exited with {status}:\n{log}"));
            }
            assert!(
                Instant::now() < deadline,
                "localstripe did not answer within 30 s; see {}",
                log_path.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Self {
            base_url,
            secret_key: "sk_test_opgate".to_owned(),
            log_path,
            client,
            _child: child,
        })
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// POSTs `form` form-encoded (as Stripe's API takes it; nested fields are written
    /// `card[number]`) and returns the status and the JSON body, whatever the status.
    pub async fn post_form_status(&self, path: &str, form: &[(&str, &str)]) -> (StatusCode, Value) {
        let request = self.client.post(self.url(path)).form(form);
        self.send(request, path).await
    }

    /// POSTs `form` form-encoded and returns the JSON body; panics on a non-2xx answer.
    pub async fn post_form(&self, path: &str, form: &[(&str, &str)]) -> Value {
        let (status, body) = self.post_form_status(path, form).await;
        assert!(status.is_success(), "POST {path}: {status} {body}");
        body
    }

    /// GETs `path` (with its query) and returns the JSON body; panics on a non-2xx answer.
    pub async fn get(&self, path: &str) -> Value {
        let (status, body) = self.send(self.client.get(self.url(path)), path).await;
        assert!(status.is_success(), "GET {path}: {status} {body}");
        body
    }

    async fn send(&self, request: reqwest::RequestBuilder, path: &str) -> (StatusCode, Value) {
        // Stripe takes the secret key as the Basic auth user name, with no password.
        let response = request
            .basic_auth(&self.secret_key, None::<&str>)
            .send()
            .await
            .unwrap_or_else(|e| panic!("localstripe {path}: {e}"));
        let status = response.status();
        let text = response.text().await.expect("localstripe body");
        let body = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("localstripe {path}: {status}, not JSON ({e}): {text}"));
        (status, body)
    }

    /// A customer whose default payment method (`invoice_settings.default_payment_method`)
    /// is a card with this number, attached to it; returns the customer id (`cus_…`).
    /// `4242424242424242` is charged; `4000000000000341` attaches, but charging it is
    /// declined (402, `card_declined`).
    pub async fn customer_with_card(&self, number: &str) -> String {
        let payment_method = self
            .post_form(
                "/v1/payment_methods",
                &[
                    ("type", "card"),
                    ("card[number]", number),
                    ("card[exp_month]", "12"),
                    ("card[exp_year]", "2030"),
                    ("card[cvc]", "123"),
                ],
            )
            .await;
        let pm = id_of(&payment_method);
        let customer = id_of(&self.post_form("/v1/customers", &[]).await);
        let attach = format!("/v1/payment_methods/{pm}/attach");
        self.post_form(&attach, &[("customer", &customer)]).await;
        let update = format!("/v1/customers/{customer}");
        self.post_form(
            &update,
            &[("invoice_settings[default_payment_method]", &pm)],
        )
        .await;
        customer
    }
}

fn id_of(object: &Value) -> String {
    object["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no id in {object}"))
        .to_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .expect("find a free port")
        .port()
}

/// `target/<profile>/test-logs/localstripe-<uuid>.log`, beside the other services' logs.
/// Not `binaries::log_file`: that one insists the opgate binaries are built, and these
/// tests need only localstripe.
fn log_file() -> (PathBuf, std::fs::File) {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executable lives in target/<profile>/deps");
    let dir = profile_dir.join("test-logs");
    std::fs::create_dir_all(&dir).expect("log dir");
    let path = dir.join(format!("localstripe-{}.log", uuid::Uuid::new_v4().simple()));
    let file = std::fs::File::create(&path).expect("log file");
    (path, file)
}
