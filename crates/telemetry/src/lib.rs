//! opgate's telemetry, shared by every binary: `tracing` logs (JSON with trace and span
//! ids, or human-readable), OpenTelemetry traces exported over OTLP when the standard
//! `OTEL_*` variables ask for it, W3C trace context carried through the outbox, and
//! the `opgate_*` metrics, served as Prometheus text and exported over OTLP.
//!
//! With no `OTEL_EXPORTER_OTLP_*ENDPOINT` set nothing is exported: spans still get
//! ids (so logs and the outbox carry a trace context) but are dropped when they end.

mod init;
mod logs;
mod metrics;
mod metrics_server;
pub mod propagation;
mod redact;

pub use init::{init, LogFormat, Telemetry, TelemetryError};
pub use metrics::{metrics, refresh_pipeline_every, Metrics, PipelineSnapshot};
pub use metrics_server::serve_metrics;
pub use redact::loggable_url;
