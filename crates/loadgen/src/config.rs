//! The command line, parsed by clap into the `Config` that `run` takes as it is. Tests
//! build one with `Config::try_parse_from`, so the flags below are the whole interface.
//! Everything that can be checked before the first request is checked here: a bad
//! argument exits 2 before any load is sent.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use clap::{ArgGroup, Parser};
use hyper::http::uri::Scheme;
use hyper::Uri;

use crate::scenario::Scenario;

/// Closed-loop load generator for intake's `POST /agent/operations/payment`.
#[derive(Debug, Clone, Parser)]
#[command(name = "loadgen", version, about)]
#[command(group(ArgGroup::new("amount").required(true).args(["requests", "duration"])))]
pub struct Config {
    /// Base URL of intake, plain HTTP, e.g. http://127.0.0.1:8080.
    #[arg(long, value_parser = parse_base_url)]
    pub url: Uri,

    /// The agent's bearer key.
    #[arg(long, env = "LOADGEN_KEY", hide_env_values = true, value_parser = parse_token)]
    pub key: String,

    /// new: a new payment per request (expects 202); replay: re-send prefilled payments
    /// (expects 200/202 with Idempotent-Replayed: true); wait: a new payment with
    /// `Prefer: wait=N` (expects 200 SUCCEEDED).
    #[arg(long, value_enum)]
    pub scenario: Scenario,

    /// The kind new, replayed and waited-for requests ask for, at
    /// /agent/operations/KIND: payment, or a kind of intake's catalog (with --body).
    #[arg(long, default_value = "payment", value_parser = parse_kind)]
    pub kind: String,

    /// The JSON body of every request of a kind other than payment (payments get a
    /// new invoice per request). Each request still has its own Idempotency-Key.
    #[arg(long, value_parser = parse_json_object, conflicts_with = "bodies")]
    pub body: Option<String>,

    /// A file of JSON bodies, one object per line, taken in turn: the run's t-th request
    /// (warmup included, counted across workers) sends line t mod N. For a kind whose
    /// requests must differ, e.g. refunds of many payments.
    #[arg(long, value_parser = read_bodies)]
    pub bodies: Option<Bodies>,

    /// Workers (1..=10000); each sends its next request when the previous answer has
    /// arrived.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,

    /// Timed requests to send in all (after the warmup).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: Option<u64>,

    /// How long to send timed requests (after the warmup), e.g. 10s.
    #[arg(long, value_parser = parse_positive_duration)]
    pub duration: Option<Duration>,

    /// Load sent first and left out of the results, e.g. 2s.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,

    /// Prefix of every Idempotency-Key; random when absent. Reusing one turns `new`
    /// payments into replays (counted as unexpected).
    #[arg(long, value_parser = parse_run_id)]
    pub run_id: Option<String>,

    /// replay: how many payments to register (untimed) before the timed requests.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub prefill: u64,

    /// wait: the N in `Prefer: wait=N` (intake honours at most 30).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=30))]
    pub wait_secs: u64,

    /// Give up on one request after this long (counted in errors); the wait scenario
    /// adds --wait-secs to it.
    #[arg(long, default_value = "30s", value_parser = parse_positive_duration)]
    pub timeout: Duration,

    /// Also print the report as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Longest `--run-id`: leaves room for `-{worker}-{n}` under intake's 255-byte key limit.
pub const MAX_RUN_ID_LEN: usize = 200;

fn parse_base_url(raw: &str) -> Result<Uri, String> {
    let uri: Uri = raw.parse().map_err(|e| format!("not a URL: {e}"))?;
    if uri.scheme() != Some(&Scheme::HTTP) {
        return Err("must start with http:// (TLS is not supported)".into());
    }
    if uri.authority().is_none() {
        return Err("has no host".into());
    }
    if uri.query().is_some() {
        return Err("must not have a query".into());
    }
    Ok(uri)
}

/// A path segment intake could route: letters, digits and '_' (intake answers an
/// unknown kind with 404, which the run counts as unexpected).
fn parse_kind(raw: &str) -> Result<String, String> {
    if !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        Ok(raw.to_owned())
    } else {
        Err("must be letters, digits and '_'".into())
    }
}

fn parse_json_object(raw: &str) -> Result<String, String> {
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(serde_json::Value::Object(_)) => Ok(raw.to_owned()),
        Ok(_) => Err("must be a JSON object".into()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

/// The bodies of `--bodies`, in file order (never empty).
#[derive(Debug, Clone)]
pub struct Bodies(pub Arc<Vec<Bytes>>);

fn read_bodies(path: &str) -> Result<Bodies, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let mut bodies = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let body = parse_json_object(line).map_err(|e| format!("{path} line {}: {e}", i + 1))?;
        bodies.push(Bytes::from(body));
    }
    if bodies.is_empty() {
        return Err(format!("{path} has no body"));
    }
    Ok(Bodies(Arc::new(bodies)))
}

fn is_visible_ascii(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic())
}

fn parse_token(raw: &str) -> Result<String, String> {
    if is_visible_ascii(raw) {
        Ok(raw.to_owned())
    } else {
        Err("must be non-empty visible ASCII".into())
    }
}

fn parse_run_id(raw: &str) -> Result<String, String> {
    if raw.len() > MAX_RUN_ID_LEN {
        return Err(format!("at most {MAX_RUN_ID_LEN} characters"));
    }
    parse_token(raw)
}

fn parse_positive_duration(raw: &str) -> Result<Duration, String> {
    match humantime::parse_duration(raw) {
        Ok(d) if d.is_zero() => Err("must be greater than zero".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `loadgen --url http://127.0.0.1:8080 --key k ARGS`, ARGS split on spaces.
    fn parse(args: &str) -> Result<Config, clap::Error> {
        let base = "loadgen --url http://127.0.0.1:8080 --key k";
        Config::try_parse_from(format!("{base} {args}").split(' '))
    }

    #[test]
    fn defaults_and_required_flags() {
        let c = parse("--scenario new --concurrency 8 --requests 200").unwrap();
        assert_eq!(c.scenario, Scenario::New);
        assert_eq!(c.url, "http://127.0.0.1:8080/");
        assert_eq!(c.key, "k");
        assert_eq!(
            (c.concurrency, c.requests, c.duration),
            (8, Some(200), None)
        );
        assert_eq!(
            (c.warmup, c.prefill, c.wait_secs),
            (Duration::ZERO, 1000, 5)
        );
        assert_eq!((c.run_id, c.json), (None, false));
        assert_eq!(c.timeout, Duration::from_secs(30));

        let all = "--scenario wait --concurrency 2 --duration 10s --warmup 2s --run-id r1 \
                   --wait-secs 30 --prefill 7 --timeout 1m --json";
        let c = parse(all).unwrap();
        assert_eq!(c.scenario, Scenario::Wait);
        assert_eq!(
            (c.duration, c.requests),
            (Some(Duration::from_secs(10)), None)
        );
        assert_eq!(c.warmup, Duration::from_secs(2));
        assert_eq!(
            (c.run_id.as_deref(), c.wait_secs, c.prefill),
            (Some("r1"), 30, 7)
        );
        assert_eq!((c.timeout, c.json), (Duration::from_secs(60), true));
    }

    #[test]
    fn bad_arguments_are_refused() {
        let refused = [
            "--scenario new --concurrency 1",
            "--scenario new --concurrency 1 --requests 1 --duration 1s",
            "--scenario new --concurrency 1 --requests 0",
            "--scenario new --concurrency 1 --duration 0s",
            "--scenario new --concurrency 1 --duration soon",
            "--scenario new --concurrency 0 --requests 1",
            "--scenario new --concurrency 10001 --requests 1",
            "--scenario other --concurrency 1 --requests 1",
            "--scenario new --requests 1",
            "--scenario wait --concurrency 1 --requests 1 --wait-secs 31",
            "--scenario replay --concurrency 1 --requests 1 --prefill 0",
            "--scenario new --concurrency 1 --requests 1 --run-id a\tb",
        ];
        for args in refused {
            assert!(parse(args).is_err(), "{args}");
        }
        let long_run_id = "x".repeat(MAX_RUN_ID_LEN + 1);
        let args = format!("--scenario new --concurrency 1 --requests 1 --run-id {long_run_id}");
        assert!(parse(&args).is_err());

        let with_url = |url: &str| {
            let args =
                format!("loadgen --key k --scenario new --concurrency 1 --requests 1 --url {url}");
            Config::try_parse_from(args.split(' '))
        };
        for url in [
            "https://h:1",
            "127.0.0.1:8080",
            "http://h:1/?a=b",
            "http://",
        ] {
            assert!(with_url(url).is_err(), "{url}");
        }
        assert_eq!(with_url("http://h:1/p/").unwrap().url, "http://h:1/p/");
    }
}
