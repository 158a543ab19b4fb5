//! The `opgate_*` metrics. Instruments live on the global meter, so they reach both
//! `/metrics` (Prometheus text) and OTLP. Counters are per process; the pipeline
//! gauges (operations by status, outbox depth and age, the queue's dead tuples and
//! vacuum horizon) are read from the database by the executor and reconciler and are
//! the same whichever process serves them.
//! Every metric is described in docs/observability.md.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::metrics::{Counter, Histogram};
use opentelemetry::{global, KeyValue};

/// A reading of the pipeline from the database.
///
/// The queue-health fields are read apart from the rest (a role that may not read a
/// statistics view must not hide the backlog): `None` means that reading failed, and
/// the gauge keeps its previous value.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PipelineSnapshot {
    /// Non-terminal statuses and how many operations are in each.
    pub operations_by_status: BTreeMap<String, i64>,
    pub outbox_depth: i64,
    pub outbox_oldest_age_seconds: f64,
    /// Dead tuples over the outbox's partitions.
    pub outbox_dead_tuples: Option<i64>,
    /// Seconds since the oldest transaction that holds back vacuum began.
    pub oldest_transaction_age_seconds: Option<f64>,
    /// Transactions since the oldest xmin that holds back vacuum.
    pub oldest_xmin_age: Option<i64>,
}

impl PipelineSnapshot {
    /// This reading, with the queue-health values it lacks taken from `previous`.
    fn or_previous(mut self, previous: Option<&PipelineSnapshot>) -> Self {
        if let Some(previous) = previous {
            self.outbox_dead_tuples = self.outbox_dead_tuples.or(previous.outbox_dead_tuples);
            self.oldest_transaction_age_seconds = self
                .oldest_transaction_age_seconds
                .or(previous.oldest_transaction_age_seconds);
            self.oldest_xmin_age = self.oldest_xmin_age.or(previous.oldest_xmin_age);
        }
        self
    }
}

pub struct Metrics {
    intake_requests: Counter<u64>,
    duplicates_prevented: Counter<u64>,
    execution_duration: Histogram<f64>,
    attempts_per_operation: Histogram<u64>,
    provider_timeouts: Counter<u64>,
    provider_uncertain: Counter<u64>,
    stale_writes_rejected: Counter<u64>,
    operations_completed: Counter<u64>,
    reconciliations: Counter<u64>,
    claim_duration: Histogram<f64>,
    pipeline: Arc<Mutex<Option<PipelineSnapshot>>>,
}

static METRICS: OnceLock<Metrics> = OnceLock::new();

/// The process's metrics (created on first use, on the global meter provider: call
/// after `init`).
pub fn metrics() -> &'static Metrics {
    METRICS.get_or_init(Metrics::new)
}

/// Statuses reported by the operations gauge even when no operation is in them.
const GAUGED_STATUSES: [&str; 5] = [
    "PENDING",
    "IN_PROGRESS",
    "UNKNOWN",
    "RECONCILING",
    "MANUAL_REVIEW",
];

impl Metrics {
    fn new() -> Self {
        let meter = global::meter("opgate");
        let pipeline: Arc<Mutex<Option<PipelineSnapshot>>> = Arc::default();

        let snapshot = pipeline.clone();
        meter
            .i64_observable_gauge("opgate_operations")
            .with_description("Operations in each non-terminal status (read from the database)")
            .with_unit("{operation}")
            .with_callback(move |observer| {
                if let Some(snapshot) = snapshot.lock().unwrap().as_ref() {
                    for status in GAUGED_STATUSES {
                        let count = snapshot
                            .operations_by_status
                            .get(status)
                            .copied()
                            .unwrap_or(0);
                        observer.observe(count, &[KeyValue::new("status", status)]);
                    }
                }
            })
            .build();
        let snapshot = pipeline.clone();
        meter
            .i64_observable_gauge("opgate_operations_needing_intervention")
            .with_description("Operations in MANUAL_REVIEW, waiting for an operator")
            .with_unit("{operation}")
            .with_callback(move |observer| {
                if let Some(snapshot) = snapshot.lock().unwrap().as_ref() {
                    let count = snapshot
                        .operations_by_status
                        .get("MANUAL_REVIEW")
                        .copied()
                        .unwrap_or(0);
                    observer.observe(count, &[]);
                }
            })
            .build();
        let snapshot = pipeline.clone();
        meter
            .i64_observable_gauge("opgate_outbox_depth")
            .with_description("Outbox events not yet completed")
            .with_unit("{event}")
            .with_callback(move |observer| {
                if let Some(snapshot) = snapshot.lock().unwrap().as_ref() {
                    observer.observe(snapshot.outbox_depth, &[]);
                }
            })
            .build();
        let snapshot = pipeline.clone();
        meter
            .f64_observable_gauge("opgate_outbox_oldest_age")
            .with_description("Age of the oldest outbox event")
            .with_unit("s")
            .with_callback(move |observer| {
                if let Some(snapshot) = snapshot.lock().unwrap().as_ref() {
                    observer.observe(snapshot.outbox_oldest_age_seconds, &[]);
                }
            })
            .build();
        let snapshot = pipeline.clone();
        meter
            .i64_observable_gauge("opgate_outbox_dead_tuples")
            .with_description("Dead tuples in the outbox (all partitions), not yet vacuumed")
            .with_unit("{tuple}")
            .with_callback(move |observer| {
                if let Some(dead) = snapshot
                    .lock()
                    .unwrap()
                    .as_ref()
                    .and_then(|s| s.outbox_dead_tuples)
                {
                    observer.observe(dead, &[]);
                }
            })
            .build();
        let snapshot = pipeline.clone();
        meter
            .f64_observable_gauge("opgate_oldest_transaction_age")
            .with_description("Age of the oldest open transaction holding back vacuum")
            .with_unit("s")
            .with_callback(move |observer| {
                if let Some(age) = snapshot
                    .lock()
                    .unwrap()
                    .as_ref()
                    .and_then(|s| s.oldest_transaction_age_seconds)
                {
                    observer.observe(age, &[]);
                }
            })
            .build();
        let snapshot = pipeline.clone();
        meter
            .i64_observable_gauge("opgate_oldest_xmin_age")
            .with_description("Transactions since the oldest xmin holding back vacuum")
            .with_unit("{transaction}")
            .with_callback(move |observer| {
                if let Some(age) = snapshot
                    .lock()
                    .unwrap()
                    .as_ref()
                    .and_then(|s| s.oldest_xmin_age)
                {
                    observer.observe(age, &[]);
                }
            })
            .build();

        Self {
            intake_requests: meter
                .u64_counter("opgate_intake_requests")
                .with_description("Requests answered by intake, by route and outcome")
                .with_unit("{request}")
                .build(),
            duplicates_prevented: meter
                .u64_counter("opgate_duplicate_requests_prevented")
                .with_description("Retries recognised as an existing operation (idempotent replays)")
                .with_unit("{request}")
                .build(),
            execution_duration: meter
                .f64_histogram("opgate_execution_duration")
                .with_description("Duration of provider calls, by outcome")
                .with_unit("s")
                .with_boundaries(vec![0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0])
                .build(),
            attempts_per_operation: meter
                .u64_histogram("opgate_operation_attempts")
                .with_description("Provider calls an operation took, when the executor finished with it")
                .with_unit("{attempt}")
                .with_boundaries(vec![1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 10.0])
                .build(),
            provider_timeouts: meter
                .u64_counter("opgate_provider_timeouts")
                .with_description("Provider calls with no complete answer within the response timeout")
                .with_unit("{call}")
                .build(),
            provider_uncertain: meter
                .u64_counter("opgate_provider_uncertain")
                .with_description("Provider calls sent whose outcome is uncertain for a reason other than a timeout (reset or dropped answer, 5xx, 408/409/425/429, unreadable 2xx)")
                .with_unit("{call}")
                .build(),
            stale_writes_rejected: meter
                .u64_counter("opgate_stale_writes_rejected")
                .with_description("Writes refused because the worker's fencing token was no longer current")
                .with_unit("{write}")
                .build(),
            operations_completed: meter
                .u64_counter("opgate_operations_completed")
                .with_description("Operations the executor moved out of IN_PROGRESS, by resulting status")
                .with_unit("{operation}")
                .build(),
            reconciliations: meter
                .u64_counter("opgate_reconciliations")
                .with_description("Reconciler verdicts, by outcome")
                .with_unit("{check}")
                .build(),
            claim_duration: meter
                .f64_histogram("opgate_claim_duration")
                .with_description("Duration of each claim of due work, with the connection wait")
                .with_unit("s")
                .with_boundaries(vec![0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 30.0])
                .build(),
            pipeline,
        }
    }

    /// `outcome`: created, replayed, conflict, rejected, unavailable or error.
    pub fn intake_request(&self, route: &'static str, outcome: &'static str, status: u16) {
        self.intake_requests.add(
            1,
            &[
                KeyValue::new("route", route),
                KeyValue::new("outcome", outcome),
                KeyValue::new("status", i64::from(status)),
            ],
        );
    }

    pub fn duplicate_prevented(&self) {
        self.duplicates_prevented.add(1, &[]);
    }

    /// `outcome`: succeeded, declined, pending, rejected, not_sent, timeout (no
    /// complete answer within the response timeout), uncertain or uncertain_final.
    pub fn provider_call(&self, outcome: &'static str, seconds: f64) {
        self.execution_duration
            .record(seconds, &[KeyValue::new("outcome", outcome)]);
        match outcome {
            "timeout" => self.provider_timeouts.add(1, &[]),
            "uncertain" | "uncertain_final" => self.provider_uncertain.add(1, &[]),
            _ => {}
        }
    }

    pub fn operation_completed(&self, status: &'static str, attempts: u64) {
        self.operations_completed
            .add(1, &[KeyValue::new("status", status)]);
        self.attempts_per_operation
            .record(attempts, &[KeyValue::new("status", status)]);
    }

    pub fn stale_write_rejected(&self, actor_kind: &'static str) {
        self.stale_writes_rejected
            .add(1, &[KeyValue::new("worker", actor_kind)]);
    }

    /// `outcome`: succeeded, failed, pending, not_found, lookup_failed, manual_review.
    pub fn reconciliation(&self, outcome: &'static str) {
        self.reconciliations
            .add(1, &[KeyValue::new("outcome", outcome)]);
    }

    /// One claim statement, answered or failed (`worker`: executor).
    pub fn claim(&self, worker: &'static str, seconds: f64) {
        self.claim_duration
            .record(seconds, &[KeyValue::new("worker", worker)]);
    }

    pub fn set_pipeline(&self, snapshot: PipelineSnapshot) {
        let mut pipeline = self.pipeline.lock().unwrap();
        *pipeline = Some(snapshot.or_previous(pipeline.as_ref()));
    }
}

/// Refreshes the pipeline gauges every `interval` with what `read` returns (`None`:
/// the reading failed; the previous one stays).
pub fn refresh_pipeline_every<F, Fut>(interval: Duration, read: F)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Option<PipelineSnapshot>> + Send,
{
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        loop {
            ticker.tick().await;
            if let Some(snapshot) = read().await {
                metrics().set_pipeline(snapshot);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::PipelineSnapshot;

    #[test]
    fn a_failed_queue_health_read_keeps_the_previous_values() {
        let previous = PipelineSnapshot {
            outbox_depth: 1,
            outbox_dead_tuples: Some(7),
            oldest_transaction_age_seconds: Some(1.5),
            oldest_xmin_age: Some(3),
            ..PipelineSnapshot::default()
        };
        let failed = PipelineSnapshot {
            outbox_depth: 2,
            ..PipelineSnapshot::default()
        };
        let merged = failed.or_previous(Some(&previous));
        assert_eq!(merged.outbox_depth, 2);
        assert_eq!(merged.outbox_dead_tuples, Some(7));
        assert_eq!(merged.oldest_transaction_age_seconds, Some(1.5));
        assert_eq!(merged.oldest_xmin_age, Some(3));

        let read = PipelineSnapshot {
            oldest_xmin_age: Some(0),
            ..previous.clone()
        };
        assert_eq!(read.clone().or_previous(Some(&previous)), read);
        assert_eq!(read.clone().or_previous(None), read);
    }
}
