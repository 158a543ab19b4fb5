//! Start-up and shutdown of telemetry: the tracer and meter providers, the log layer,
//! and the global W3C propagator.

use std::str::FromStr;

use opentelemetry::global;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::Level;
use tracing_subscriber::filter::{filter_fn, FilterExt};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;

use crate::logs;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One JSON object per line, with trace_id and span_id.
    #[default]
    Json,
    /// Human-readable lines for a terminal.
    Pretty,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "json" => Ok(Self::Json),
            "pretty" => Ok(Self::Pretty),
            other => Err(format!("unknown log format {other:?} (json or pretty)")),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("could not build the OTLP exporter: {0}")]
    Exporter(String),
    #[error("could not build the Prometheus exporter: {0}")]
    Prometheus(String),
}

/// Keeps the providers alive; call `shutdown` before exiting to flush.
pub struct Telemetry {
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
    registry: prometheus::Registry,
    exporting: bool,
}

/// Libraries that would log payloads or headers below info (query parameters,
/// request heads): their events below info are dropped whatever RUST_LOG says, even
/// for a more specific directive such as `tokio_postgres::query=debug`.
const HELD_AT_INFO: [&str; 10] = [
    "tokio_postgres",
    "postgres_protocol",
    "actix_http",
    "actix_web",
    "hyper",
    "h2",
    "reqwest",
    "tonic",
    "opentelemetry",
    "deadpool",
];

/// The MCP SDK: its debug events carry whole tool arguments and results, and its info
/// events are three lines per request about the transport; only warnings and errors.
const HELD_AT_WARN: [&str; 1] = ["rmcp"];

/// Which events reach the log: RUST_LOG (default `info`), and nothing below info
/// (below warn for the MCP SDK) from the libraries above, so no log level can print an
/// amount, a customer id or a key.
fn log_filter<S>() -> impl tracing_subscriber::layer::Filter<S> {
    let env = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let held = filter_fn(|meta| {
        let from = |libraries: &[&str]| {
            libraries
                .iter()
                .any(|library| meta.target().starts_with(library))
        };
        if from(&HELD_AT_WARN) {
            *meta.level() <= Level::WARN
        } else {
            *meta.level() <= Level::INFO || !from(&HELD_AT_INFO)
        }
    });
    env.and(held)
}

/// Where the OTLP exporters send, when anything is configured.
fn otlp_configured(signal: &str) -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var(format!("OTEL_{signal}_EXPORTER")).is_ok_and(|v| v == "none");
    !disabled
        && (set("OTEL_EXPORTER_OTLP_ENDPOINT")
            || set(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")))
}

/// `grpc` selects gRPC; anything else (the default) is HTTP with protobuf.
fn otlp_grpc(signal: &str) -> bool {
    let protocol = std::env::var(format!("OTEL_EXPORTER_OTLP_{signal}_PROTOCOL"))
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_default();
    protocol == "grpc"
}

/// Sets up logs, traces and metrics for `service` (overridden by OTEL_SERVICE_NAME).
/// Must run inside a Tokio runtime when gRPC export is selected.
pub fn init(service: &'static str, log_format: LogFormat) -> Result<Telemetry, TelemetryError> {
    global::set_text_map_propagator(TraceContextPropagator::new());
    let service_name = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| service.to_owned());
    let mut resource = Resource::builder().with_service_name(service_name);
    // Replicas must be told apart in the backend (a metric series per process).
    if !std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.instance.id")) {
        resource = resource.with_attribute(opentelemetry::KeyValue::new(
            "service.instance.id",
            instance_id(),
        ));
    }
    let resource = resource.build();

    let mut tracer_builder = SdkTracerProvider::builder().with_resource(resource.clone());
    let traces_exported = otlp_configured("TRACES");
    if traces_exported {
        let exporter = if otlp_grpc("TRACES") {
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .build()
        } else {
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .build()
        }
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        tracer_builder = tracer_builder.with_batch_exporter(exporter);
    }
    let tracer_provider = tracer_builder.build();

    let registry = prometheus::Registry::new();
    let prometheus_reader = opentelemetry_prometheus::exporter()
        .with_registry(registry.clone())
        .scope_info_enabled(false)
        .build()
        .map_err(|e| TelemetryError::Prometheus(e.to_string()))?;
    let mut meter_builder = SdkMeterProvider::builder()
        .with_resource(resource)
        .with_reader(prometheus_reader);
    let metrics_exported = otlp_configured("METRICS");
    if metrics_exported {
        let exporter = if otlp_grpc("METRICS") {
            opentelemetry_otlp::MetricExporter::builder()
                .with_tonic()
                .build()
        } else {
            opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .build()
        }
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        meter_builder = meter_builder.with_periodic_exporter(exporter);
    }
    let meter_provider = meter_builder.build();
    global::set_meter_provider(meter_provider.clone());

    // Spans are opgate's own, at info and above, whatever RUST_LOG says: the trace
    // does not change with the log level, and no library's span (which might carry
    // a query's parameters) is exported.
    //
    // Without the layer's extras: code location and thread attributes on every span,
    // busy and idle times kept on every enter and exit, and the OpenTelemetry context
    // made current on every enter (nothing of ours reads it: propagation and the logs
    // take the context from the span itself). Together they were 3-6 % of intake's
    // instructions per request and 8 % of the executor's per drained operation
    // (`make bench-profile`, both builds in one run), and say nothing a span's name
    // and duration do not.
    let tracer = tracer_provider.tracer(service);
    let otel_layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_context_activation(false)
        .with_tracked_inactivity(false)
        .with_threads(false)
        .with_location(false)
        // A log event becomes an event of its span only for a span that is exported:
        // otherwise it was formatted into the span and dropped with it, 3-4 % of
        // intake's CPU per replay (perf, 32 clients).
        .with_filter(filter_fn(move |meta| {
            meta.target().starts_with("opgate")
                && *meta.level() <= Level::INFO
                && (traces_exported || meta.is_span())
        }));
    let registry_subscriber = tracing_subscriber::registry().with(otel_layer);
    match log_format {
        LogFormat::Json => registry_subscriber
            .with(logs::json_layer().with_filter(log_filter()))
            .init(),
        LogFormat::Pretty => registry_subscriber
            .with(logs::pretty_layer().with_filter(log_filter()))
            .init(),
    }
    tracing::debug!(traces_exported, metrics_exported, "telemetry initialised");
    Ok(Telemetry {
        tracer_provider,
        meter_provider,
        registry,
        exporting: traces_exported || metrics_exported,
    })
}

impl Telemetry {
    /// The Prometheus text exposition of every opgate metric of this process.
    pub fn render_metrics(&self) -> String {
        let encoder = prometheus::TextEncoder::new();
        encoder
            .encode_to_string(&self.registry.gather())
            .unwrap_or_default()
    }

    pub fn is_exporting(&self) -> bool {
        self.exporting
    }

    /// Flushes what is buffered and stops the exporters.
    pub fn shutdown(&self) {
        if let Err(error) = self.tracer_provider.shutdown() {
            eprintln!("telemetry: trace shutdown: {error}");
        }
        if let Err(error) = self.meter_provider.shutdown() {
            eprintln!("telemetry: metrics shutdown: {error}");
        }
    }
}

/// A per-process id: host name (when known), process id, and start time.
fn instance_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into());
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    format!("{host}-{}-{started}", std::process::id())
}
