//! What each scenario sends and which answers it counts as expected.
//!
//! `new` and `wait` send worker w's n-th payment (n from 1, warmup included) under
//! `Idempotency-Key: {run-id}-{w}-{n}` with invoice `inv_{n}`; `wait` adds
//! `Prefer: wait=N`. `replay` sends prefilled payment i (0..K) under
//! `{run-id}-prefill-{i}` with invoice `inv_{i}`: the very request that registered it.
//! `mcp` sends the same payments as `new`, as MCP `tools/call request_payment` requests
//! to `/mcp` (protocol 2026-07-28, stateless: one HTTP request per call).
//! An unexpected answer is labelled by its status code, followed for a 2xx by what was
//! wrong with it ("202 replayed", "200 not replayed", "200 FAILED").

use bytes::Bytes;
use clap::ValueEnum;
use http_body_util::Full;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, Request, StatusCode, Uri};
use serde::{Deserialize, Serialize};

use crate::config::{Bodies, Config, MAX_RUN_ID_LEN};

pub const MCP_PATH: &str = "/mcp";
const MCP_PROTOCOL_VERSION: &str = "2026-07-28";
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
pub const PREFER: HeaderName = HeaderName::from_static("prefer");

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    New,
    Replay,
    Wait,
    /// New payments over MCP.
    Mcp,
}

/// How one answer counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Expected,
    /// The label it is counted under in `unexpected_status`.
    Unexpected(String),
}

/// Builds every request of a run.
#[derive(Debug, Clone)]
pub struct Requests {
    scenario: Scenario,
    target: Uri,
    mcp_target: Uri,
    authorization: HeaderValue,
    prefer: HeaderValue,
    run_id: String,
    prefill: u64,
    /// The body of every request, for a kind other than payment.
    body: Option<Bytes>,
    /// Bodies taken in turn by the run's requests (`--bodies`).
    bodies: Option<Bodies>,
}

impl Requests {
    pub fn new(config: &Config, run_id: &str) -> anyhow::Result<Self> {
        anyhow::ensure!(
            !run_id.is_empty()
                && run_id.len() <= MAX_RUN_ID_LEN
                && run_id.bytes().all(|b| b.is_ascii_graphic()),
            "run id must be 1..={MAX_RUN_ID_LEN} visible ASCII characters"
        );
        let mut authorization = HeaderValue::from_str(&format!("Bearer {}", config.key))?;
        authorization.set_sensitive(true);
        Ok(Self {
            scenario: config.scenario,
            target: uri_at(&config.url, &format!("/agent/operations/{}", config.kind))?,
            mcp_target: uri_at(&config.url, MCP_PATH)?,
            authorization,
            prefer: HeaderValue::from_str(&format!("wait={}", config.wait_secs))?,
            run_id: run_id.to_owned(),
            prefill: config.prefill,
            body: config.body.clone().map(Bytes::from),
            bodies: config.bodies.clone(),
        })
    }

    pub fn scenario(&self) -> Scenario {
        self.scenario
    }

    /// Payments `replay` registers before timing; none for the other scenarios.
    pub fn prefill_count(&self) -> u64 {
        match self.scenario {
            Scenario::Replay => self.prefill,
            Scenario::New | Scenario::Wait | Scenario::Mcp => 0,
        }
    }

    /// `worker`'s `n`-th request; `ticket` counts requests run-wide (replay's round robin).
    pub fn next(&self, worker: u32, n: u64, ticket: u64) -> Request<Full<Bytes>> {
        match self.scenario {
            Scenario::New => self.post(&format!("{}-{worker}-{n}", self.run_id), n, ticket, false),
            Scenario::Wait => self.post(&format!("{}-{worker}-{n}", self.run_id), n, ticket, true),
            Scenario::Replay => self.prefilled(ticket % self.prefill.max(1)),
            Scenario::Mcp => self.mcp_call(&format!("{}-{worker}-{n}", self.run_id), n),
        }
    }

    /// `tools/call request_payment` for invoice `invoice` under `key`.
    fn mcp_call(&self, key: &str, invoice: u64) -> Request<Full<Bytes>> {
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": invoice,
            "method": "tools/call",
            "params": {
                "name": "request_payment",
                "arguments": {
                    "customer_id": "cus_bench",
                    "invoice_id": format!("inv_{invoice}"),
                    "amount": "10.00",
                    "currency": "USD",
                    "idempotency_key": key,
                },
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MCP_PROTOCOL_VERSION,
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        });
        let mut request = Request::new(Full::new(Bytes::from(body.to_string())));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.mcp_target.clone();
        let headers = request.headers_mut();
        headers.insert(AUTHORIZATION, self.authorization.clone());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            hyper::header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        headers.insert(
            HeaderName::from_static("mcp-protocol-version"),
            HeaderValue::from_static(MCP_PROTOCOL_VERSION),
        );
        headers.insert(
            HeaderName::from_static("mcp-method"),
            HeaderValue::from_static("tools/call"),
        );
        headers.insert(
            HeaderName::from_static("mcp-name"),
            HeaderValue::from_static("request_payment"),
        );
        request
    }

    /// Prefilled payment `i`, as registered and as replayed.
    pub fn prefilled(&self, i: u64) -> Request<Full<Bytes>> {
        self.post(&format!("{}-prefill-{i}", self.run_id), i, i, false)
    }

    /// A request under `key`: its body the one given, the `ticket`-th of the bodies
    /// given, or payment `invoice`.
    fn post(&self, key: &str, invoice: u64, ticket: u64, wait: bool) -> Request<Full<Bytes>> {
        let body = match (&self.body, &self.bodies) {
            (Some(body), _) => body.clone(),
            (None, Some(Bodies(bodies))) => bodies[(ticket % bodies.len() as u64) as usize].clone(),
            (None, None) => payment_body(invoice),
        };
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.target.clone();
        let headers = request.headers_mut();
        headers.insert(AUTHORIZATION, self.authorization.clone());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        // The run id is checked in `new` and the rest is digits and dashes.
        let key = HeaderValue::from_str(key).expect("idempotency key is visible ASCII");
        headers.insert(IDEMPOTENCY_KEY, key);
        if wait {
            headers.insert(PREFER, self.prefer.clone());
        }
        request
    }

    /// How an answer counts in this run's scenario.
    pub fn classify(&self, status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Outcome {
        classify(self.scenario, status, headers, body)
    }
}

pub fn payment_body(invoice: u64) -> Bytes {
    Bytes::from(format!(
        r#"{{"customer_id":"cus_bench","invoice_id":"inv_{invoice}","amount":"10.00","currency":"USD"}}"#
    ))
}

/// `base` (http://host:port[/prefix]) joined with `path`.
fn uri_at(base: &Uri, path: &str) -> anyhow::Result<Uri> {
    let scheme = base.scheme_str().unwrap_or("http");
    let authority = base
        .authority()
        .ok_or_else(|| anyhow::anyhow!("URL {base} has no host"))?;
    let prefix = base.path().trim_end_matches('/');
    Ok(format!("{scheme}://{authority}{prefix}{path}").parse()?)
}

pub fn classify(
    scenario: Scenario,
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
) -> Outcome {
    let code = status.as_u16();
    let replayed = headers
        .get(IDEMPOTENT_REPLAYED)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"));
    let unexpected = |what: &str| Outcome::Unexpected(format!("{code} {what}"));
    match (scenario, code, replayed) {
        (Scenario::Mcp, 200, _) => match mcp_result(body) {
            Some((false, false, status)) if status == "PENDING" => Outcome::Expected,
            Some((true, _, _)) => unexpected("tool error"),
            Some((_, true, _)) => unexpected("replayed"),
            Some((_, _, other)) => unexpected(&other),
            None => unexpected("unreadable body"),
        },
        (Scenario::New, 202, false) => Outcome::Expected,
        (Scenario::New | Scenario::Wait, 200 | 202, true) => unexpected("replayed"),
        (Scenario::Replay, 200 | 202, true) => Outcome::Expected,
        (Scenario::Replay, 200 | 202, false) => unexpected("not replayed"),
        (Scenario::Wait, 200, false) => match operation_status(body) {
            Some(s) if s == "SUCCEEDED" => Outcome::Expected,
            Some(other) => unexpected(&other),
            None => unexpected("unreadable body"),
        },
        _ => Outcome::Unexpected(code.to_string()),
    }
}

/// A `tools/call` answer: (isError, replayed, the operation's status).
fn mcp_result(body: &[u8]) -> Option<(bool, bool, String)> {
    let answer: serde_json::Value = serde_json::from_slice(body).ok()?;
    let result = answer.get("result")?;
    let is_error = result["isError"].as_bool().unwrap_or(false);
    let replayed = result["_meta"]["io.opgate/idempotent-replayed"] == true;
    let status = result["structuredContent"]["status"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Some((is_error, replayed, status))
}

fn operation_status(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Operation {
        status: String,
    }
    serde_json::from_slice::<Operation>(body)
        .ok()
        .map(|o| o.status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use http_body_util::BodyExt;

    fn requests(scenario: &str, url: &str) -> Requests {
        let args = format!(
            "loadgen --url {url} --key sk_test --scenario {scenario} --concurrency 1 \
             --requests 1 --prefill 3 --wait-secs 7"
        );
        let config = Config::try_parse_from(args.split(' ')).unwrap();
        Requests::new(&config, "run1").unwrap()
    }

    async fn body_of(request: Request<Full<Bytes>>) -> String {
        let bytes = request.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn mcp_request_is_a_tools_call_with_the_key_in_its_arguments() {
        let r = requests("mcp", "http://127.0.0.1:8080");
        let req = r.next(3, 17, 99);
        assert_eq!(req.uri(), "http://127.0.0.1:8080/mcp");
        assert_eq!(req.headers()["mcp-method"], "tools/call");
        let body: serde_json::Value = serde_json::from_str(&body_of(req).await).unwrap();
        assert_eq!(body["params"]["name"], "request_payment");
        assert_eq!(body["params"]["arguments"]["idempotency_key"], "run1-3-17");
        assert_eq!(body["params"]["arguments"]["invoice_id"], "inv_17");
    }

    #[test]
    fn mcp_answers_count_only_new_pending_operations() {
        let answer = |result: serde_json::Value| {
            let body = serde_json::json!({ "jsonrpc": "2.0", "id": 1, "result": result });
            classify(
                Scenario::Mcp,
                StatusCode::OK,
                &HeaderMap::new(),
                body.to_string().as_bytes(),
            )
        };
        let pending = serde_json::json!({ "structuredContent": { "status": "PENDING" } });
        assert_eq!(answer(pending), Outcome::Expected);
        let error = serde_json::json!({ "isError": true, "structuredContent": { "status": 422 } });
        assert_eq!(answer(error), Outcome::Unexpected("200 tool error".into()));
        let replayed = serde_json::json!({
            "structuredContent": { "status": "PENDING" },
            "_meta": { "io.opgate/idempotent-replayed": true }
        });
        assert_eq!(answer(replayed), Outcome::Unexpected("200 replayed".into()));
    }

    #[tokio::test]
    async fn new_request_has_unique_key_and_the_payment_body() {
        let r = requests("new", "http://127.0.0.1:8080");
        let req = r.next(3, 17, 99);
        assert_eq!(req.method(), Method::POST);
        assert_eq!(req.uri(), "http://127.0.0.1:8080/agent/operations/payment");
        let h = req.headers();
        assert_eq!(h[AUTHORIZATION], "Bearer sk_test");
        assert!(h[AUTHORIZATION].is_sensitive());
        assert_eq!(h[CONTENT_TYPE], "application/json");
        assert_eq!(h[IDEMPOTENCY_KEY], "run1-3-17");
        assert!(h.get(PREFER).is_none());
        let body = body_of(req).await;
        assert_eq!(
            body,
            r#"{"customer_id":"cus_bench","invoice_id":"inv_17","amount":"10.00","currency":"USD"}"#
        );
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(json["invoice_id"], "inv_17");
        assert_eq!(r.prefill_count(), 0);
    }

    #[tokio::test]
    async fn another_kind_is_posted_to_its_path_with_the_body_given() {
        let parse = |extra: &[&str]| {
            let base = "loadgen --url http://h:1 --key k --scenario new --concurrency 1";
            Config::try_parse_from(base.split(' ').chain(extra.iter().copied()))
        };
        let body = r#"{"customer_id":"c","sku":"s","quantity":1,"total":"1.00"}"#;
        let config = parse(&["--requests", "1", "--kind", "order", "--body", body]).unwrap();
        let r = Requests::new(&config, "run1").unwrap();
        let req = r.next(0, 5, 0);
        assert_eq!(req.uri(), "http://h:1/agent/operations/order");
        assert_eq!(req.headers()[IDEMPOTENCY_KEY], "run1-0-5");
        assert_eq!(body_of(req).await, body);
        for (flag, value) in [("--kind", "../admin"), ("--body", "[1]"), ("--body", "{")] {
            assert!(parse(&[flag, value]).is_err(), "{flag} {value}");
        }
    }

    #[tokio::test]
    async fn bodies_from_a_file_are_taken_in_turn_across_workers() {
        let dir = std::env::temp_dir().join(format!("loadgen-bodies-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("refunds.jsonl");
        std::fs::write(&file, "{\"n\":0}\n\n{\"n\":1}\n{\"n\":2}\n").unwrap();
        let parse = |extra: &[&str]| {
            let base = "loadgen --url http://h:1 --key k --scenario new --concurrency 2 \
                        --requests 1 --kind refund";
            Config::try_parse_from(base.split(' ').chain(extra.iter().copied()))
        };
        let config = parse(&["--bodies", file.to_str().unwrap()]).unwrap();
        let r = Requests::new(&config, "run1").unwrap();
        let mut sent = Vec::new();
        for (worker, n, ticket) in [(0, 1, 0), (1, 1, 1), (0, 2, 2), (1, 2, 3)] {
            let req = r.next(worker, n, ticket);
            assert_eq!(req.uri(), "http://h:1/agent/operations/refund");
            sent.push(body_of(req).await);
        }
        assert_eq!(
            sent,
            [r#"{"n":0}"#, r#"{"n":1}"#, r#"{"n":2}"#, r#"{"n":0}"#]
        );

        // A bad file is refused before any load: not JSON, not an object, empty, absent,
        // or given with --body.
        for (name, text) in [("bad", "{\"n\":0}\n{"), ("array", "[1]"), ("empty", "\n")] {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            assert!(
                parse(&["--bodies", path.to_str().unwrap()]).is_err(),
                "{name}"
            );
        }
        let absent = dir.join("absent");
        assert!(parse(&["--bodies", absent.to_str().unwrap()]).is_err());
        let both = ["--bodies", file.to_str().unwrap(), "--body", "{}"];
        assert!(parse(&both).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn wait_request_prefers_waiting() {
        let r = requests("wait", "http://h:1/base/");
        let req = r.next(0, 1, 0);
        assert_eq!(req.uri(), "http://h:1/base/agent/operations/payment");
        assert_eq!(req.headers()[PREFER], "wait=7");
        assert_eq!(req.headers()[IDEMPOTENCY_KEY], "run1-0-1");
    }

    #[tokio::test]
    async fn replay_cycles_through_the_prefilled_payments() {
        let r = requests("replay", "http://h:1");
        assert_eq!(r.prefill_count(), 3);
        let keys: Vec<_> = (0..5)
            .map(|t| r.next(1, t + 1, t).headers()[IDEMPOTENCY_KEY].clone())
            .collect();
        let want = [
            "run1-prefill-0",
            "run1-prefill-1",
            "run1-prefill-2",
            "run1-prefill-0",
            "run1-prefill-1",
        ];
        assert_eq!(keys, want);
        let replayed = body_of(r.next(0, 1, 4)).await;
        assert_eq!(replayed, body_of(r.prefilled(1)).await);
        assert!(replayed.contains(r#""invoice_id":"inv_1""#));
    }

    #[test]
    fn answers_are_classified_per_scenario() {
        let plain = HeaderMap::new();
        let mut replayed = HeaderMap::new();
        replayed.insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
        let ok = StatusCode::OK;
        let accepted = StatusCode::ACCEPTED;
        let label = |s: &str| Outcome::Unexpected(s.to_owned());
        let succeeded = br#"{"status":"SUCCEEDED","operation_id":"x"}"#;

        assert_eq!(
            classify(Scenario::New, accepted, &plain, b""),
            Outcome::Expected
        );
        assert_eq!(
            classify(Scenario::New, accepted, &replayed, b""),
            label("202 replayed")
        );
        assert_eq!(
            classify(Scenario::New, StatusCode::CONFLICT, &plain, b""),
            label("409")
        );
        assert_eq!(
            classify(Scenario::Replay, ok, &replayed, b""),
            Outcome::Expected
        );
        assert_eq!(
            classify(Scenario::Replay, accepted, &replayed, b""),
            Outcome::Expected
        );
        assert_eq!(
            classify(Scenario::Replay, accepted, &plain, b""),
            label("202 not replayed")
        );
        assert_eq!(
            classify(Scenario::Wait, ok, &plain, succeeded),
            Outcome::Expected
        );
        assert_eq!(
            classify(Scenario::Wait, ok, &plain, br#"{"status":"FAILED"}"#),
            label("200 FAILED")
        );
        assert_eq!(
            classify(Scenario::Wait, ok, &plain, b"<html>"),
            label("200 unreadable body")
        );
        assert_eq!(
            classify(Scenario::Wait, ok, &replayed, succeeded),
            label("200 replayed")
        );
        assert_eq!(
            classify(Scenario::Wait, accepted, &plain, b"{}"),
            label("202")
        );
        let unavailable = StatusCode::SERVICE_UNAVAILABLE;
        assert_eq!(
            classify(Scenario::Wait, unavailable, &plain, b""),
            label("503")
        );
    }
}
