//! `loadgen::run` against a tiny in-process intake on 127.0.0.1:0 that checks what it is
//! sent and answers like intake: 202 for a new key, 202 with `Idempotent-Replayed: true`
//! for a key seen before (409 if its body differs), 200 SUCCEEDED on `Prefer: wait=N`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opgate_loadgen::{run, Config, Report};

const KEY: &str = "sk_test_bench";

#[derive(Default)]
struct Intake {
    posts: AtomicU64,
    connections: AtomicU64,
    bodies: Mutex<HashMap<String, Bytes>>,
}

impl Intake {
    fn keys(&self) -> usize {
        self.bodies.lock().unwrap().len()
    }
}

async fn answer(
    intake: Arc<Intake>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode| Response::builder().status(status);
    let (parts, body) = request.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    intake.posts.fetch_add(1, Ordering::Relaxed);
    let status = if parts.method != "POST" || parts.uri.path() != "/agent/operations/payment" {
        StatusCode::NOT_FOUND
    } else if header("authorization") != Some(format!("Bearer {KEY}")) {
        StatusCode::UNAUTHORIZED
    } else if header("content-type").as_deref() != Some("application/json") {
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    } else if serde_json::from_slice::<serde_json::Value>(&body)
        .map(|b| {
            b["customer_id"] != "cus_bench" || b["amount"] != "10.00" || b["currency"] != "USD"
        })
        .unwrap_or(true)
    {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::OK
    };
    if status != StatusCode::OK {
        return Ok(reply(status).body(Full::default()).unwrap());
    }
    let Some(key) = header("idempotency-key") else {
        return Ok(reply(StatusCode::BAD_REQUEST)
            .body(Full::default())
            .unwrap());
    };
    let previous = intake.bodies.lock().unwrap().insert(key, body.clone());
    let response = match (previous, header("prefer")) {
        (Some(previous), _) if previous != body => reply(StatusCode::CONFLICT),
        (Some(_), _) => reply(StatusCode::ACCEPTED).header("Idempotent-Replayed", "true"),
        (None, Some(prefer)) if prefer == "wait=3" => {
            // The operation settles while the request waits.
            tokio::time::sleep(std::time::Duration::from_millis(3)).await;
            reply(StatusCode::OK)
        }
        (None, Some(_)) => reply(StatusCode::BAD_REQUEST),
        (None, None) => reply(StatusCode::ACCEPTED),
    };
    let view = Bytes::from_static(br#"{"operation_id":"op","status":"SUCCEEDED"}"#);
    Ok(response
        .header("content-type", "application/json")
        .body(Full::new(view))
        .unwrap())
}

async fn start() -> (SocketAddr, Arc<Intake>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let intake = Arc::new(Intake::default());
    let state = intake.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            state.connections.fetch_add(1, Ordering::Relaxed);
            let state = state.clone();
            let service = service_fn(move |r| answer(state.clone(), r));
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    (addr, intake)
}

/// `loadgen --url http://ADDR --key KEY ARGS` (ARGS split on spaces), in-process.
async fn loadgen(addr: SocketAddr, key: &str, args: &str) -> Report {
    let url = format!("http://{addr}");
    let base = ["loadgen", "--url", &url, "--key", key];
    let config = Config::try_parse_from(base.into_iter().chain(args.split(' '))).unwrap();
    run(config).await.unwrap()
}

fn assert_latencies_populated(report: &Report) {
    let l = report.latency_ms;
    assert!(l.p50 > 0.0 && l.mean > 0.0, "{l:?}");
    assert!(l.p50 <= l.p90 && l.p90 <= l.p99 && l.p99 <= l.max, "{l:?}");
    assert!(
        report.duration_s > 0.0 && report.requests_per_s > 0.0,
        "{report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_payments_are_all_counted_over_kept_alive_connections() {
    let (addr, intake) = start().await;
    let args = "--scenario new --requests 200 --concurrency 8 --run-id t1";
    let report = loadgen(addr, KEY, args).await;
    assert_eq!(
        (report.requests, report.errors, report.expected()),
        (200, 0, 200),
        "{report:?}"
    );
    assert!(report.unexpected_status.is_empty(), "{report:?}");
    assert_eq!(report.concurrency, 8);
    assert_latencies_populated(&report);
    assert_eq!(intake.posts.load(Ordering::Relaxed), 200);
    assert_eq!(intake.keys(), 200, "every key is new");
    // Keep-alive: about one connection per worker. hyper's pool races a new connect
    // against a connection about to turn idle, so a few more may open at the start.
    let connections = intake.connections.load(Ordering::Relaxed);
    assert!((1..50).contains(&connections), "{connections} connections");

    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["scenario"], "new");
    assert_eq!(json["requests"], 200);
    assert_eq!(json["unexpected_status"], serde_json::json!({}));
    assert!(json["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_resends_the_prefilled_payments() {
    let (addr, intake) = start().await;
    let args = "--scenario replay --requests 200 --concurrency 8 --prefill 50";
    let report = loadgen(addr, KEY, args).await;
    assert_eq!(
        (report.requests, report.errors, report.expected()),
        (200, 0, 200),
        "{report:?}"
    );
    assert!(report.unexpected_status.is_empty(), "{report:?}");
    assert_latencies_populated(&report);
    let prefill = report.context.prefill.as_ref().unwrap();
    assert_eq!((prefill.requests, prefill.failed()), (50, 0));
    assert_eq!(
        intake.posts.load(Ordering::Relaxed),
        250,
        "prefill is not timed"
    );
    assert_eq!(intake.keys(), 50, "only the prefilled keys");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_expects_settled_operations() {
    let (addr, intake) = start().await;
    let args = "--scenario wait --requests 40 --concurrency 4 --wait-secs 3";
    let report = loadgen(addr, KEY, args).await;
    assert_eq!(
        (report.requests, report.expected(), report.not_settled()),
        (40, 40, 0),
        "{report:?}"
    );
    assert_latencies_populated(&report);
    assert!(
        report.latency_ms.p50 >= 3.0,
        "the 3 ms wait is timed: {report:?}"
    );
    assert_eq!(intake.keys(), 40);

    // Re-using a run id makes `new` meet its own keys again: each is flagged.
    let args = "--scenario new --requests 10 --concurrency 1 --run-id same";
    assert!(loadgen(addr, KEY, args).await.unexpected_status.is_empty());
    let again = loadgen(addr, KEY, args).await;
    assert_eq!(
        again.unexpected_status,
        [("202 replayed".to_string(), 10)].into()
    );
    assert!(again.all_failed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_mode_with_warmup_counts_only_the_timed_requests() {
    let (addr, intake) = start().await;
    let args = "--scenario new --duration 300ms --warmup 100ms --concurrency 4";
    let report = loadgen(addr, KEY, args).await;
    assert!(
        report.requests > 0 && report.context.warmup_requests > 0,
        "{report:?}"
    );
    assert_eq!(report.expected(), report.requests);
    assert!(report.duration_s >= 0.3, "{report:?}");
    let sent = report.requests + report.context.warmup_requests;
    assert_eq!(intake.posts.load(Ordering::Relaxed), sent);
    assert_latencies_populated(&report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_and_transport_errors_are_counted_not_fatal() {
    let (addr, _) = start().await;
    let args = "--scenario new --requests 30 --concurrency 3";
    let refused = loadgen(addr, "wrong-key", args).await;
    assert_eq!(refused.unexpected_status, [("401".to_string(), 30)].into());
    assert!(refused.all_failed());
    assert_eq!(
        refused.latency_ms.max, 0.0,
        "only expected answers are timed"
    );

    let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let down = loadgen(closed, KEY, args).await;
    assert_eq!((down.requests, down.errors), (30, 30), "{down:?}");
    assert!(down.all_failed() && down.context.first_error.is_some());
}
