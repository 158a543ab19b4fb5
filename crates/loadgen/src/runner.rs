//! The closed loop. One pooled keep-alive HTTP/1.1 client; `--concurrency` workers, each
//! sending its next request when the previous answer (body included) has arrived.
//!
//! Timeline: replay's prefill (untimed), then the warmup (requests sent, not counted),
//! then the timed phase, which ends when `--requests` have been claimed or `--duration`
//! has passed; a request counts when it *starts* in the timed phase. Each worker keeps
//! its own tally and latency histogram; they are merged once every worker is done.
//! A transport error or timeout is counted and the worker goes on.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::config::Config;
use crate::report::{PrefillStats, Report, RunContext};
use crate::scenario::{Outcome, Requests, Scenario};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// An answer, read to its end.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

/// What every worker shares.
struct Shared {
    client: HttpClient,
    requests: Requests,
    timeout: Duration,
    /// Requests sent so far, run-wide (replay's round robin, prefill's next index).
    ticket: AtomicU64,
}

/// When the timed phase starts and what ends it.
struct Phase {
    timed_from: Instant,
    deadline: Option<Instant>,
    /// Timed requests not yet claimed, with `--requests`.
    budget: Option<AtomicU64>,
}

impl Phase {
    /// Whether a worker may start one more timed request.
    fn claim(&self) -> bool {
        if self.deadline.is_some_and(|end| Instant::now() >= end) {
            return false;
        }
        self.budget.as_ref().is_none_or(|left| {
            left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
        })
    }
}

/// One worker's results, and after the merge the run's.
struct Tally {
    requests: u64,
    errors: u64,
    warmup: u64,
    unexpected: BTreeMap<String, u64>,
    latency_us: Histogram<u64>,
    first_error: Option<String>,
}

impl Tally {
    fn new() -> anyhow::Result<Self> {
        Ok(Self {
            requests: 0,
            errors: 0,
            warmup: 0,
            unexpected: BTreeMap::new(),
            // Auto-resizing: grows to the largest latency seen, so idle workers stay small.
            latency_us: Histogram::new(3).context("latency histogram")?,
            first_error: None,
        })
    }

    fn record(&mut self, requests: &Requests, answer: anyhow::Result<Answer>, latency: Duration) {
        self.requests += 1;
        match answer {
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert_with(|| format!("{e:#}"));
            }
            Ok(a) => match requests.classify(a.status, &a.headers, &a.body) {
                Outcome::Expected => {
                    let us = u64::try_from(latency.as_micros())
                        .unwrap_or(u64::MAX)
                        .max(1);
                    // `record` grows the histogram; `saturating_record` would clamp
                    // anything past its current range instead.
                    if self.latency_us.record(us).is_err() {
                        self.latency_us.saturating_record(us);
                    }
                }
                Outcome::Unexpected(label) => *self.unexpected.entry(label).or_default() += 1,
            },
        }
    }

    fn merge(&mut self, other: Tally) -> anyhow::Result<()> {
        self.requests += other.requests;
        self.errors += other.errors;
        self.warmup += other.warmup;
        for (label, n) in other.unexpected {
            *self.unexpected.entry(label).or_default() += n;
        }
        self.latency_us
            .add(&other.latency_us)
            .context("merging latency histograms")?;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        Ok(())
    }
}

pub async fn run(config: Config) -> anyhow::Result<Report> {
    let run_id = config.run_id.clone().unwrap_or_else(|| {
        let mut id = uuid::Uuid::new_v4().simple().to_string();
        id.truncate(12);
        id
    });
    let requests = Requests::new(&config, &run_id)?;
    let mut timeout = config.timeout;
    if config.scenario == Scenario::Wait {
        timeout += Duration::from_secs(config.wait_secs);
    }
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(config.concurrency as usize)
        .build(connector);
    let shared = Arc::new(Shared {
        client,
        requests,
        timeout,
        ticket: AtomicU64::new(0),
    });

    let prefill = match shared.requests.prefill_count() {
        0 => None,
        count => Some(prefill(&shared, config.concurrency, count).await?),
    };

    let start = Instant::now();
    let timed_from = start + config.warmup;
    let phase = Arc::new(Phase {
        timed_from,
        deadline: config.duration.map(|d| timed_from + d),
        budget: config.requests.map(AtomicU64::new),
    });
    let workers: Vec<_> = (0..config.concurrency)
        .map(|w| tokio::spawn(worker(shared.clone(), phase.clone(), w)))
        .collect();
    let mut total = Tally::new()?;
    for w in workers {
        total.merge(w.await.context("a worker panicked")??)?;
    }
    let duration = Instant::now().saturating_duration_since(timed_from);

    let context = RunContext {
        run_id,
        warmup: config.warmup,
        warmup_requests: total.warmup,
        prefill,
        first_error: total.first_error,
    };
    Ok(Report::new(
        config.scenario,
        config.concurrency,
        (total.requests, total.errors),
        total.unexpected,
        duration,
        &total.latency_us,
        context,
    ))
}

async fn worker(shared: Arc<Shared>, phase: Arc<Phase>, worker: u32) -> anyhow::Result<Tally> {
    let mut tally = Tally::new()?;
    for n in 1.. {
        let timed = Instant::now() >= phase.timed_from;
        if timed && !phase.claim() {
            break;
        }
        let ticket = shared.ticket.fetch_add(1, Ordering::Relaxed);
        let request = shared.requests.next(worker, n, ticket);
        let started = Instant::now();
        let answer = send(&shared, request).await;
        let latency = started.elapsed();
        if timed {
            tally.record(&shared.requests, answer, latency);
        } else {
            tally.warmup += 1;
        }
    }
    Ok(tally)
}

async fn send(shared: &Shared, request: Request<Full<Bytes>>) -> anyhow::Result<Answer> {
    let exchange = async {
        let response = shared.client.request(request).await?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        anyhow::Ok(Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    };
    match tokio::time::timeout(shared.timeout, exchange).await {
        Ok(answer) => answer,
        Err(_) => anyhow::bail!(
            "no answer within {}",
            humantime::format_duration(shared.timeout)
        ),
    }
}

/// Registers replay's `count` payments with `concurrency` workers, untimed. Fails only if
/// every registration failed: the timed requests would then all be unexpected.
async fn prefill(
    shared: &Arc<Shared>,
    concurrency: u32,
    count: u64,
) -> anyhow::Result<PrefillStats> {
    let workers: Vec<_> = (0..u64::from(concurrency).min(count))
        .map(|_| {
            let shared = shared.clone();
            tokio::spawn(async move {
                let mut failures = BTreeMap::<String, u64>::new();
                loop {
                    let i = shared.ticket.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        break failures;
                    }
                    let label = match send(&shared, shared.requests.prefilled(i)).await {
                        Ok(a) if matches!(a.status.as_u16(), 200 | 202) => continue,
                        Ok(a) => a.status.as_u16().to_string(),
                        Err(_) => "transport error".to_owned(),
                    };
                    *failures.entry(label).or_default() += 1;
                }
            })
        })
        .collect();
    let mut stats = PrefillStats {
        requests: count,
        failures: BTreeMap::new(),
    };
    for w in workers {
        for (label, n) in w.await.context("a prefill worker panicked")? {
            *stats.failures.entry(label).or_default() += n;
        }
    }
    shared.ticket.store(0, Ordering::Relaxed);
    anyhow::ensure!(
        stats.failed() < count,
        "prefill: all {count} registrations failed ({:?})",
        stats.failures
    );
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use hyper::header::HeaderValue;

    fn answer(status: u16, replayed: bool) -> anyhow::Result<Answer> {
        let mut headers = HeaderMap::new();
        if replayed {
            headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
        }
        let status = StatusCode::from_u16(status)?;
        Ok(Answer {
            status,
            headers,
            body: Bytes::new(),
        })
    }

    #[test]
    fn tallies_count_time_and_merge() {
        let args = "loadgen --url http://h:1 --key k --scenario new --concurrency 2 --requests 9";
        let requests =
            Requests::new(&Config::try_parse_from(args.split(' ')).unwrap(), "r").unwrap();
        let ms = Duration::from_millis;
        let mut a = Tally::new().unwrap();
        a.record(&requests, answer(202, false), ms(5));
        a.record(&requests, answer(202, false), Duration::from_secs(75));
        a.record(&requests, answer(202, true), ms(1));
        a.record(&requests, Err(anyhow::anyhow!("connection reset")), ms(1));
        let mut b = Tally::new().unwrap();
        b.record(&requests, answer(202, false), Duration::from_micros(300));
        b.record(&requests, answer(503, false), ms(1));
        b.record(&requests, Err(anyhow::anyhow!("timed out")), ms(1));
        b.warmup = 4;
        a.merge(b).unwrap();

        assert_eq!((a.requests, a.errors, a.warmup), (7, 2, 4));
        let unexpected: Vec<_> = a.unexpected.iter().map(|(k, n)| (k.as_str(), *n)).collect();
        assert_eq!(unexpected, [("202 replayed", 1), ("503", 1)]);
        assert_eq!(a.first_error.as_deref(), Some("connection reset"));
        let h = &a.latency_us;
        assert_eq!(h.len(), 3, "only expected answers are timed");
        assert_eq!(h.min(), 300);
        assert!(h.equivalent(h.value_at_quantile(0.5), 5000));
        assert!(
            h.equivalent(h.max(), 75_000_000),
            "long latencies are not clamped"
        );
    }
}
