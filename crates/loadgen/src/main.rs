//! `loadgen`: parses the command line (bad arguments exit 2), runs the benchmark, prints
//! the summary on stderr and, with `--json`, the report as one JSON object on stdout.
//! Exits 1 when the run could not start or no timed request got the expected answer.

use std::process::ExitCode;

use clap::Parser;
use opgate_loadgen::{run, Config};

#[tokio::main]
async fn main() -> ExitCode {
    let config = Config::parse();
    let json = config.json;
    let report = match run(config).await {
        Ok(report) => report,
        Err(e) => {
            eprintln!("loadgen: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    eprint!("{}", report.summary());
    if json {
        println!("{}", report.to_json());
    }
    if report.all_failed() {
        eprintln!("loadgen: no request got the expected answer");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
