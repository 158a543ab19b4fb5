//! `loadgen` as a library: `run` drives one benchmark against intake's payment API and
//! returns its `Report`, so tests can run it in-process against a server on port 0.
//! `config` is the command line, `scenario` builds requests and judges answers,
//! `runner` is the closed loop, `report` the results.

pub mod config;
pub mod report;
mod runner;
pub mod scenario;

pub use config::Config;
pub use report::Report;
pub use scenario::Scenario;

/// Runs the prefill (replay), the warmup and the timed phase that `config` describes.
/// Transport errors are counted, not returned; an error means the run could not start
/// (or, for replay, that every prefill registration failed).
pub async fn run(config: Config) -> anyhow::Result<Report> {
    runner::run(config).await
}
