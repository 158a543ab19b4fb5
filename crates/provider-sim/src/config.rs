//! Command line and environment: the listen address and the `--fault NAME=SPEC`
//! flags, parsed into a `FaultSet`; `--help` also lists the endpoints.

use clap::{CommandFactory, Parser};

use crate::faults::{Fault, FaultSet, ProbFault};

/// The endpoints, for `--help`.
const ENDPOINTS: &str = "\
Endpoints (JSON; creates need an Idempotency-Key header: a repeat with the same
parameters returns the original, different parameters get 409):
  POST /v1/payments                    {customer_id, invoice_id, amount, currency}
                                       customer_id decline* fails, pending* stays pending
  GET  /v1/payments?idempotency_key=K
  POST /v1/refunds                     {payment_id, amount, currency}: a succeeded
                                       payment, at most what is left of it
  GET  /v1/refunds?idempotency_key=K
  POST /v1/resources/{collection}      any JSON object, kept as `request`; 201
  GET  /v1/resources/{collection}?idempotency_key=K
  GET  /v1/resources/{collection}/{id}
  Refund and resource bodies may hold \"simulate\": \"failed\" or \"pending\".
  Faults apply to every create; lookup-lag-ms to every lookup.

Simulator controls:
  GET  /_sim/ledger                    charges, refunds, resources, requests_by_key
  GET|POST /_sim/faults                read or replace the armed faults
  POST /_sim/{payments|refunds|resources}/{id}/settle  {status, failure_code?}
  GET  /healthz";

/// A fake payment provider for opgate's tests, demos and benchmarks.
#[derive(Debug, Clone, Parser)]
#[command(name = "provider-sim", version, about, after_help = ENDPOINTS)]
pub struct Config {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, env = "PROVIDER_SIM_LISTEN", default_value = "127.0.0.1:9090")]
    pub listen: String,

    /// Fault to inject, repeatable: `drop-after-commit`, `error-before-commit`,
    /// `error-after-commit`, `pending` or `throttle` (429, nothing recorded) with SPEC
    /// `P` (probability 0.0..=1.0) or `P/N` (at most N injections); or
    /// `delay-ms=MILLISECONDS` (before handling a create), `delay-answer-ms=MILLISECONDS`
    /// (after handling it, before answering), `throttle-retry-after-s=SECONDS` (the
    /// `Retry-After` of a 429) or `lookup-lag-ms=MILLISECONDS` (lookups answer 404 for
    /// that long after a record is committed).
    #[arg(
        long = "fault",
        value_name = "NAME=SPEC",
        env = "PROVIDER_SIM_FAULTS",
        value_delimiter = ',',
        value_parser = parse_fault_arg
    )]
    pub faults: Vec<FaultArg>,
}

/// One `--fault` flag.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultArg {
    Probability(Fault, ProbFault),
    DelayMs(u64),
    DelayAnswerMs(u64),
    ThrottleRetryAfterS(u64),
    LookupLagMs(u64),
}

impl FaultArg {
    fn name(&self) -> &'static str {
        match self {
            FaultArg::Probability(fault, _) => fault.name(),
            FaultArg::DelayMs(_) => "delay-ms",
            FaultArg::DelayAnswerMs(_) => "delay-answer-ms",
            FaultArg::ThrottleRetryAfterS(_) => "throttle-retry-after-s",
            FaultArg::LookupLagMs(_) => "lookup-lag-ms",
        }
    }
}

impl Config {
    /// Parses the command line and environment; on any error (including a fault
    /// given twice) prints it the clap way and exits with status 2.
    pub fn from_args() -> (Config, FaultSet) {
        let config = Config::parse();
        match config.fault_set() {
            Ok(faults) => (config, faults),
            Err(message) => Config::command()
                .error(clap::error::ErrorKind::ValueValidation, message)
                .exit(),
        }
    }

    /// The fault set the flags describe; each fault may be given once.
    pub fn fault_set(&self) -> Result<FaultSet, String> {
        let mut set = FaultSet::default();
        let mut seen = Vec::new();
        for arg in &self.faults {
            if seen.contains(&arg.name()) {
                return Err(format!("fault {} given more than once", arg.name()));
            }
            seen.push(arg.name());
            match arg {
                FaultArg::Probability(fault, p) => *set.slot_mut(*fault) = Some(*p),
                FaultArg::DelayMs(ms) => set.delay_ms = *ms,
                FaultArg::DelayAnswerMs(ms) => set.delay_answer_ms = *ms,
                FaultArg::ThrottleRetryAfterS(secs) => set.throttle_retry_after_s = Some(*secs),
                FaultArg::LookupLagMs(ms) => set.lookup_lag_ms = *ms,
            }
        }
        Ok(set)
    }
}

/// Parses `NAME=SPEC`.
pub fn parse_fault_arg(text: &str) -> Result<FaultArg, String> {
    let (name, spec) = text
        .split_once('=')
        .ok_or_else(|| format!("expected NAME=SPEC, got {text:?}"))?;
    if name == "delay-ms" {
        return spec
            .parse()
            .map(FaultArg::DelayMs)
            .map_err(|_| format!("delay-ms: expected milliseconds, got {spec:?}"));
    }
    if name == "delay-answer-ms" {
        return spec
            .parse()
            .map(FaultArg::DelayAnswerMs)
            .map_err(|_| format!("delay-answer-ms: expected milliseconds, got {spec:?}"));
    }
    if name == "throttle-retry-after-s" {
        return spec
            .parse()
            .map(FaultArg::ThrottleRetryAfterS)
            .map_err(|_| format!("throttle-retry-after-s: expected seconds, got {spec:?}"));
    }
    if name == "lookup-lag-ms" {
        return spec
            .parse()
            .map(FaultArg::LookupLagMs)
            .map_err(|_| format!("lookup-lag-ms: expected milliseconds, got {spec:?}"));
    }
    let fault = Fault::from_name(name).ok_or_else(|| {
        format!(
            "unknown fault {name:?}; expected one of drop-after-commit, error-before-commit, \
             error-after-commit, delay-ms, delay-answer-ms, pending, throttle, \
             throttle-retry-after-s, lookup-lag-ms"
        )
    })?;
    parse_probability_spec(spec)
        .map(|p| FaultArg::Probability(fault, p))
        .map_err(|e| format!("{name}: {e}"))
}

/// Parses `P` or `P/N`.
fn parse_probability_spec(spec: &str) -> Result<ProbFault, String> {
    let (p, n) = match spec.split_once('/') {
        Some((p, n)) => (p, Some(n)),
        None => (spec, None),
    };
    let probability: f64 = p
        .parse()
        .map_err(|_| format!("expected a probability such as 0.5 or 1.0/3, got {spec:?}"))?;
    let times = n
        .map(|n| {
            n.parse::<u32>()
                .map_err(|_| format!("expected a whole number of times after '/', got {n:?}"))
        })
        .transpose()?;
    ProbFault::new(probability, times)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prob(fault: Fault, p: f64, times: Option<u32>) -> FaultArg {
        FaultArg::Probability(fault, ProbFault::new(p, times).unwrap())
    }

    #[test]
    fn parses_probabilities_and_limits() {
        assert_eq!(
            parse_fault_arg("drop-after-commit=1.0/1"),
            Ok(prob(Fault::DropAfterCommit, 1.0, Some(1)))
        );
        assert_eq!(
            parse_fault_arg("error-before-commit=0.25"),
            Ok(prob(Fault::ErrorBeforeCommit, 0.25, None))
        );
        assert_eq!(
            parse_fault_arg("error-after-commit=0/5"),
            Ok(prob(Fault::ErrorAfterCommit, 0.0, Some(5)))
        );
        assert_eq!(
            parse_fault_arg("pending=1"),
            Ok(prob(Fault::Pending, 1.0, None))
        );
        assert_eq!(parse_fault_arg("delay-ms=200"), Ok(FaultArg::DelayMs(200)));
        assert_eq!(
            parse_fault_arg("delay-answer-ms=3000"),
            Ok(FaultArg::DelayAnswerMs(3000))
        );
        assert_eq!(
            parse_fault_arg("throttle=1.0/3"),
            Ok(prob(Fault::Throttle, 1.0, Some(3)))
        );
        assert_eq!(
            parse_fault_arg("throttle-retry-after-s=2"),
            Ok(FaultArg::ThrottleRetryAfterS(2))
        );
        assert_eq!(
            parse_fault_arg("lookup-lag-ms=3000"),
            Ok(FaultArg::LookupLagMs(3000))
        );
    }

    #[test]
    fn rejects_invalid_specs() {
        for bad in [
            "drop-after-commit",
            "drop-after-commit=",
            "drop-after-commit=1.5",
            "drop-after-commit=-0.1",
            "drop-after-commit=NaN",
            "drop-after-commit=abc",
            "drop-after-commit=0.5/",
            "drop-after-commit=0.5/-1",
            "drop-after-commit=0.5/x",
            "drop-after-commit=0.5/1/2",
            "explode=1.0",
            "delay-ms=fast",
            "delay-ms=-5",
            "delay-ms=1.5",
            "delay-answer-ms=soon",
            "throttle-retry-after-s=1.5",
            "lookup-lag-ms=-1",
            "throttle=2",
        ] {
            assert!(parse_fault_arg(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn command_line_builds_the_fault_set() {
        let config = Config::try_parse_from([
            "provider-sim",
            "--listen",
            "127.0.0.1:0",
            "--fault",
            "drop-after-commit=1.0/1",
            "--fault",
            "delay-ms=20",
            "--fault",
            "delay-answer-ms=30",
            "--fault",
            "throttle=0.5",
            "--fault",
            "throttle-retry-after-s=2",
            "--fault",
            "lookup-lag-ms=3000",
        ])
        .unwrap();
        assert_eq!(config.listen, "127.0.0.1:0");
        let set = config.fault_set().unwrap();
        assert_eq!(
            set.drop_after_commit,
            Some(ProbFault::new(1.0, Some(1)).unwrap())
        );
        assert_eq!(set.delay_ms, 20);
        assert_eq!(set.delay_answer_ms, 30);
        assert_eq!(set.pending, None);
        assert_eq!(set.throttle, Some(ProbFault::new(0.5, None).unwrap()));
        assert_eq!(set.throttle_retry_after_s, Some(2));
        assert_eq!(set.lookup_lag_ms, 3000);
    }

    #[test]
    fn help_lists_every_endpoint() {
        let help = Config::command().render_long_help().to_string();
        for endpoint in [
            "POST /v1/payments",
            "POST /v1/refunds",
            "GET  /v1/refunds?idempotency_key=K",
            "POST /v1/resources/{collection}",
            "GET  /v1/resources/{collection}/{id}",
            "/_sim/{payments|refunds|resources}/{id}/settle",
            "GET  /_sim/ledger",
        ] {
            assert!(help.contains(endpoint), "{endpoint} missing from {help}");
        }
    }

    #[test]
    fn command_line_rejects_bad_and_duplicate_faults() {
        assert!(Config::try_parse_from(["provider-sim", "--fault", "pending=2"]).is_err());
        let twice = Config::try_parse_from([
            "provider-sim",
            "--fault",
            "pending=0.1",
            "--fault",
            "pending=0.2",
        ])
        .unwrap();
        assert!(twice.fault_set().is_err());
    }
}
