//! The results of a run: the JSON object printed with `--json` (the serialized fields of
//! `Report`) and the human summary printed on stderr. Latencies are recorded in
//! microseconds and shown as milliseconds with 3 decimals; they cover only the timed
//! requests that got the expected answer.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::scenario::Scenario;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub scenario: Scenario,
    pub concurrency: u32,
    /// Timed requests sent, whatever became of them.
    pub requests: u64,
    /// Timed requests that got no answer: connection failures, broken answers, timeouts.
    pub errors: u64,
    /// Answers other than the expected one, by label (the status code, then for a 2xx
    /// what was wrong with it, e.g. "202 not replayed").
    pub unexpected_status: BTreeMap<String, u64>,
    /// From the end of the warmup until the last timed answer.
    pub duration_s: f64,
    pub requests_per_s: f64,
    pub latency_ms: LatencyMs,
    /// Shown in the summary only.
    #[serde(skip)]
    pub context: RunContext,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LatencyMs {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

/// What the summary tells besides the results.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunContext {
    pub run_id: String,
    pub warmup: Duration,
    pub warmup_requests: u64,
    pub prefill: Option<PrefillStats>,
    pub first_error: Option<String>,
}

/// The untimed registrations of the replay scenario.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PrefillStats {
    pub requests: u64,
    /// Failures by label: a status code, or "transport error".
    pub failures: BTreeMap<String, u64>,
}

impl PrefillStats {
    pub fn failed(&self) -> u64 {
        self.failures.values().sum()
    }
}

impl LatencyMs {
    /// p50/p90/p99/max/mean of a histogram of microseconds; all zero when it is empty.
    pub fn from_histogram(us: &Histogram<u64>) -> Self {
        let ms = |v: u64| v as f64 / 1000.0;
        Self {
            p50: ms(us.value_at_quantile(0.50)),
            p90: ms(us.value_at_quantile(0.90)),
            p99: ms(us.value_at_quantile(0.99)),
            max: ms(us.max()),
            mean: us.mean().round() / 1000.0,
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl Report {
    pub fn new(
        scenario: Scenario,
        concurrency: u32,
        (requests, errors): (u64, u64),
        unexpected_status: BTreeMap<String, u64>,
        duration: Duration,
        latency_us: &Histogram<u64>,
        context: RunContext,
    ) -> Self {
        let secs = duration.as_secs_f64();
        let rate = if secs > 0.0 {
            requests as f64 / secs
        } else {
            0.0
        };
        Self {
            scenario,
            concurrency,
            requests,
            errors,
            unexpected_status,
            duration_s: round3(secs),
            requests_per_s: round3(rate),
            latency_ms: LatencyMs::from_histogram(latency_us),
            context,
        }
    }

    pub fn unexpected(&self) -> u64 {
        self.unexpected_status.values().sum()
    }

    /// Timed requests that got the expected answer.
    pub fn expected(&self) -> u64 {
        self.requests
            .saturating_sub(self.errors + self.unexpected())
    }

    /// No timed request got the expected answer (then `loadgen` exits non-zero).
    pub fn all_failed(&self) -> bool {
        self.expected() == 0
    }

    /// wait: answers other than 200, i.e. operations not terminal within the wait.
    pub fn not_settled(&self) -> u64 {
        // Labels start with the status code.
        let unsettled = self
            .unexpected_status
            .iter()
            .filter(|(label, _)| !label.starts_with("200"));
        unsettled.map(|(_, n)| n).sum()
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a report serializes")
    }

    /// Several lines for a human, each ending in a newline.
    pub fn summary(&self) -> String {
        let c = &self.context;
        let mut s = String::new();
        let scenario = serde_json::to_value(self.scenario).unwrap_or_default();
        let scenario = scenario.as_str().unwrap_or("?");
        let _ = writeln!(
            s,
            "loadgen: scenario {scenario}, run id {}, concurrency {}",
            c.run_id, self.concurrency
        );
        if let Some(p) = &c.prefill {
            let _ = writeln!(
                s,
                "  prefill:    {} payments, {} failed{}",
                p.requests,
                p.failed(),
                labels(&p.failures)
            );
        }
        if !c.warmup.is_zero() {
            let warmup = humantime::format_duration(c.warmup);
            let _ = writeln!(
                s,
                "  warmup:     {warmup}, {} requests (not counted)",
                c.warmup_requests
            );
        }
        let _ = writeln!(
            s,
            "  requests:   {} in {:.3} s = {:.1} requests/s",
            self.requests, self.duration_s, self.requests_per_s
        );
        let _ = writeln!(
            s,
            "  expected:   {}; errors: {}; unexpected: {}{}",
            self.expected(),
            self.errors,
            self.unexpected(),
            labels(&self.unexpected_status)
        );
        if self.scenario == Scenario::Wait {
            let _ = writeln!(
                s,
                "  not settled within the wait (non-200): {}",
                self.not_settled()
            );
        }
        if let Some(e) = &c.first_error {
            let _ = writeln!(s, "  first error: {e}");
        }
        let l = &self.latency_ms;
        let _ = writeln!(
            s,
            "  latency ms: p50 {:.3}  p90 {:.3}  p99 {:.3}  max {:.3}  mean {:.3}  (expected answers)",
            l.p50, l.p90, l.p99, l.max, l.mean
        );
        s
    }
}

/// " (409: 2, 503: 1)", or nothing when empty.
fn labels(counts: &BTreeMap<String, u64>) -> String {
    if counts.is_empty() {
        return String::new();
    }
    let parts: Vec<_> = counts.iter().map(|(k, n)| format!("{k}: {n}")).collect();
    format!(" ({})", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(values: impl IntoIterator<Item = u64>) -> Histogram<u64> {
        let mut h = Histogram::new(3).unwrap();
        for v in values {
            h.record(v).unwrap();
        }
        h
    }

    fn report(scenario: Scenario, unexpected: &[(&str, u64)], h: &Histogram<u64>) -> Report {
        let unexpected = unexpected
            .iter()
            .map(|(k, n)| (k.to_string(), *n))
            .collect();
        let context = RunContext {
            run_id: "r1".into(),
            ..RunContext::default()
        };
        Report::new(
            scenario,
            8,
            (1000, 3),
            unexpected,
            Duration::from_millis(2500),
            h,
            context,
        )
    }

    #[test]
    fn percentiles_come_from_the_histogram_in_ms() {
        let l = LatencyMs::from_histogram(&histogram(1..=1000));
        assert_eq!((l.p50, l.p90, l.p99, l.max), (0.5, 0.9, 0.99, 1.0));
        assert_eq!(l.mean, 0.501, "500.5 us rounds to 501 us");

        let l = LatencyMs::from_histogram(&histogram([1234, 1234, 1234, 98_765]));
        assert_eq!(
            (l.p50, l.p90),
            (1.234, 98.815),
            "3 significant digits above 2048 us"
        );
        assert_eq!(l.max, 98.815);

        assert_eq!(
            LatencyMs::from_histogram(&histogram([])),
            LatencyMs::default()
        );
    }

    #[test]
    fn json_has_exactly_the_documented_fields() {
        let r = report(
            Scenario::Replay,
            &[("202 not replayed", 4), ("503", 1)],
            &histogram(1..=1000),
        );
        let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        // Sorted: the map's own order depends on serde_json's features in the build.
        let mut keys: Vec<_> = json.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        let want = [
            "concurrency",
            "duration_s",
            "errors",
            "latency_ms",
            "requests",
            "requests_per_s",
            "scenario",
            "unexpected_status",
        ];
        assert_eq!(keys, want);
        assert_eq!(json["scenario"], "replay");
        assert_eq!(json["requests"], 1000);
        assert_eq!(json["errors"], 3);
        assert_eq!(
            json["unexpected_status"],
            serde_json::json!({"202 not replayed": 4, "503": 1})
        );
        assert_eq!(json["duration_s"], 2.5);
        assert_eq!(json["requests_per_s"], 400.0);
        assert_eq!(
            json["latency_ms"],
            serde_json::json!({"p50": 0.5, "p90": 0.9, "p99": 0.99, "max": 1.0, "mean": 0.501})
        );
        assert!(r.to_json().contains(r#""p99":0.99,"#));
        assert_eq!(
            (r.unexpected(), r.expected(), r.all_failed()),
            (5, 992, false)
        );
    }

    #[test]
    fn summary_tells_counts_and_latencies() {
        let r = report(
            Scenario::Wait,
            &[("202", 10), ("200 FAILED", 2)],
            &histogram([1500]),
        );
        let s = r.summary();
        assert!(
            s.starts_with("loadgen: scenario wait, run id r1, concurrency 8\n"),
            "{s}"
        );
        assert!(
            s.contains("requests:   1000 in 2.500 s = 400.0 requests/s\n"),
            "{s}"
        );
        assert!(
            s.contains("expected:   985; errors: 3; unexpected: 12 (200 FAILED: 2, 202: 10)\n"),
            "{s}"
        );
        assert!(
            s.contains("not settled within the wait (non-200): 10\n"),
            "{s}"
        );
        assert!(
            s.contains("latency ms: p50 1.500  p90 1.500  p99 1.500  max 1.500  mean 1.500"),
            "{s}"
        );
        assert!(!s.contains("prefill") && !s.contains("warmup"), "{s}");
    }

    #[test]
    fn every_request_failing_is_all_failed() {
        let unexpected = [("401".to_string(), 7)].into_iter().collect();
        let r = Report::new(
            Scenario::New,
            1,
            (10, 3),
            unexpected,
            Duration::ZERO,
            &histogram([]),
            RunContext::default(),
        );
        assert!(r.all_failed());
        assert_eq!(r.requests_per_s, 0.0);
        assert_eq!(r.latency_ms, LatencyMs::default());
    }
}
