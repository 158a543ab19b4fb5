//! W3C trace context across process boundaries: into and out of the `traceparent`
//! stored with an operation and its outbox event, and into provider requests.

use std::collections::HashMap;

use opentelemetry::global;
use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TraceContextExt;
use opentelemetry::Context;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct MapCarrier<'a>(&'a mut HashMap<String, String>);

impl Injector for MapCarrier<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
}

/// Keeps only the `traceparent` an injection writes: what an operation stores, without a
/// map built and searched on every request.
#[derive(Default)]
struct TraceparentOnly(Option<String>);

impl Injector for TraceparentOnly {
    fn set(&mut self, key: &str, value: String) {
        if key == "traceparent" {
            self.0 = Some(value);
        }
    }
}

struct TraceparentCarrier<'a>(&'a str);

impl Extractor for TraceparentCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == "traceparent").then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent"]
    }
}

/// The `traceparent` of `span`, to store with an operation; `None` if it has no
/// valid context.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = TraceparentOnly::default();
    global::get_text_map_propagator(|p| p.inject_context(&context, &mut carrier));
    carrier.0
}

/// The context a stored or received `traceparent` names (empty if malformed).
pub fn context_from_traceparent(traceparent: &str) -> Context {
    global::get_text_map_propagator(|p| p.extract(&TraceparentCarrier(traceparent)))
}

/// Makes `span` a child of the stored trace context (the messaging "process" span
/// continuing the operation's trace).
pub fn continue_trace(span: &tracing::Span, traceparent: Option<&str>) {
    if let Some(traceparent) = traceparent {
        let context = context_from_traceparent(traceparent);
        if context.span().span_context().is_valid() {
            let _ = span.set_parent(context);
        }
    }
}

/// Links `span` to the stored trace context without making it a child.
pub fn link_trace(span: &tracing::Span, traceparent: Option<&str>) {
    if let Some(traceparent) = traceparent {
        let context = context_from_traceparent(traceparent);
        let span_context = context.span().span_context().clone();
        if span_context.is_valid() {
            span.add_link(span_context);
        }
    }
}

/// Headers (`traceparent`, `tracestate`) that carry `span`'s context to a callee.
pub fn headers_for(span: &tracing::Span) -> HashMap<String, String> {
    let context = span.context();
    let mut carrier = HashMap::new();
    if context.span().span_context().is_valid() {
        global::get_text_map_propagator(|p| {
            p.inject_context(&context, &mut MapCarrier(&mut carrier))
        });
    }
    carrier
}

/// Extracts the caller's context from request headers given as (name, value) pairs.
pub fn context_from_headers<'a>(headers: impl Iterator<Item = (&'a str, &'a str)>) -> Context {
    let map: HashMap<String, String> = headers
        .filter(|(name, _)| {
            name.eq_ignore_ascii_case("traceparent") || name.eq_ignore_ascii_case("tracestate")
        })
        .map(|(name, value)| (name.to_ascii_lowercase(), value.to_owned()))
        .collect();
    global::get_text_map_propagator(|p| p.extract(&map))
}
