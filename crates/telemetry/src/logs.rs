//! Log lines. JSON lines carry the OpenTelemetry trace_id and span_id of the span they
//! were written in, so a log line leads to its trace. Only what the code puts in an
//! event's fields is written: ids, states and timings, never payloads or credentials.

use std::fmt;

use opentelemetry::trace::TraceContextExt;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Human-readable lines; coloured only when stderr is a terminal, so a log file or a
/// journal never receives escape sequences.
pub fn pretty_layer<S>() -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    use std::io::IsTerminal;
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
}

pub fn json_layer<S>() -> impl Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .event_format(JsonWithTraceIds)
}

struct JsonWithTraceIds;

#[derive(Default)]
struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_owned(), Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .insert(field.name().to_owned(), Value::String(value.to_owned()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), value.into());
    }
}

impl<S, N> FormatEvent<S, N> for JsonWithTraceIds
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut line = Map::new();
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        line.insert("timestamp".into(), now.into());
        line.insert("level".into(), event.metadata().level().as_str().into());
        line.insert("target".into(), event.metadata().target().into());
        if let Some(message) = fields.0.remove("message") {
            line.insert("message".into(), message);
        }
        if let Some(span) = ctx.lookup_current() {
            line.insert("span".into(), span.name().into());
        }
        let context = tracing::Span::current().context();
        let span_context = context.span().span_context().clone();
        if span_context.is_valid() {
            line.insert(
                "trace_id".into(),
                span_context.trace_id().to_string().into(),
            );
            line.insert("span_id".into(), span_context.span_id().to_string().into());
        }
        line.insert("fields".into(), Value::Object(fields.0));
        writeln!(writer, "{}", Value::Object(line))
    }
}
