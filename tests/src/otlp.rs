//! An in-process OTLP/HTTP (protobuf) receiver: services under test export their
//! traces and metrics to it, and tests inspect what arrived.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric, Exemplar, Metric};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, Span};
use prost::Message;
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};

/// The kind of a received span, as OTLP encodes it (unknown values map to `Unspecified`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpanKind {
    Unspecified,
    Internal,
    Server,
    Client,
    Producer,
    Consumer,
}

impl SpanKind {
    fn from_otlp(kind: i32) -> Self {
        match span::SpanKind::try_from(kind) {
            Ok(span::SpanKind::Internal) => Self::Internal,
            Ok(span::SpanKind::Server) => Self::Server,
            Ok(span::SpanKind::Client) => Self::Client,
            Ok(span::SpanKind::Producer) => Self::Producer,
            Ok(span::SpanKind::Consumer) => Self::Consumer,
            Ok(span::SpanKind::Unspecified) | Err(_) => Self::Unspecified,
        }
    }
}

/// One span as received, with ids in lowercase hex and attribute values as strings.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// The `service.name` resource attribute (empty when absent).
    pub service_name: String,
    /// Lowercase hex, 32 characters.
    pub trace_id: String,
    /// Lowercase hex, 16 characters.
    pub span_id: String,
    /// `None` for a root span.
    pub parent_span_id: Option<String>,
    pub name: String,
    pub kind: SpanKind,
    /// Every attribute rendered as a string: strings as-is, ints, doubles and bools via
    /// `to_string`, arrays joined by `,`.
    pub attributes: BTreeMap<String, String>,
    /// `(trace_id, span_id)` in lowercase hex.
    pub links: Vec<(String, String)>,
    /// Event names, in order.
    pub events: Vec<String>,
}

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    metric_names: Vec<String>,
    strings: Vec<String>,
}

type Shared = Arc<Mutex<Received>>;

/// Serves OTLP/HTTP on `127.0.0.1` until dropped.
pub struct OtlpReceiver {
    addr: SocketAddr,
    received: Shared,
    server: JoinHandle<()>,
}

impl OtlpReceiver {
    /// Binds 127.0.0.1:0 and serves OTLP/HTTP (protobuf) until dropped.
    pub async fn start() -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("binding the OTLP receiver on 127.0.0.1");
        let addr = listener
            .local_addr()
            .expect("reading the OTLP receiver's address");
        let received = Shared::default();
        let server = tokio::spawn(serve(listener, received.clone()));
        Self {
            addr,
            received,
            server,
        }
    }

    /// e.g. `http://127.0.0.1:43210` — what a service gets as `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far, decoded, in arrival order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.lock().spans.clone()
    }

    /// Names of every metric received so far (from `/v1/metrics`), one per metric
    /// per export, in arrival order.
    pub fn metric_names(&self) -> Vec<String> {
        self.lock().metric_names.clone()
    }

    /// Every string found anywhere in what was received: span names, attribute keys and
    /// values, event names and attributes, resource and scope attributes, status messages,
    /// links, trace states, metric names, descriptions, units and data point attributes.
    pub fn all_strings(&self) -> Vec<String> {
        self.lock().strings.clone()
    }

    /// Polls every 50 ms until `done` accepts the spans received so far, and returns them;
    /// panics naming `what` (with a summary of what did arrive) after `timeout`.
    pub async fn wait_for_spans<F: Fn(&[ReceivedSpan]) -> bool>(
        &self,
        timeout: Duration,
        what: &str,
        done: F,
    ) -> Vec<ReceivedSpan> {
        let deadline = Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            if Instant::now() >= deadline {
                let mut summary = String::new();
                for span in &spans {
                    let _ = writeln!(
                        summary,
                        "  {} / {} ({:?}) trace {} span {} parent {}",
                        span.service_name,
                        span.name,
                        span.kind,
                        span.trace_id,
                        span.span_id,
                        span.parent_span_id.as_deref().unwrap_or("-"),
                    );
                }
                panic!(
                    "timed out after {timeout:?} waiting for {what}; {} span(s) received:\n{summary}",
                    spans.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn lock(&self) -> MutexGuard<'_, Received> {
        lock(&self.received)
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        // Dropping the accept task drops its JoinSet, which aborts every open connection.
        self.server.abort();
    }
}

fn lock(received: &Shared) -> MutexGuard<'_, Received> {
    // A panicking test thread must not hide what was received from the others.
    received
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn serve(listener: TcpListener, received: Shared) {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let Ok((stream, _)) = listener.accept().await else {
            // Transient accept errors (e.g. too many open files): back off and retry.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let received = received.clone();
        connections.spawn(async move {
            let service = service_fn(move |request| handle(request, received.clone()));
            // A client hanging up mid-request is not the receiver's problem.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle(
    request: Request<Incoming>,
    received: Shared,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let route = match (request.method(), request.uri().path()) {
        (&Method::POST, "/v1/traces") => Route::Traces,
        (&Method::POST, "/v1/metrics") => Route::Metrics,
        _ => return Ok(plain(StatusCode::NOT_FOUND, "not found")),
    };
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            return Ok(plain(
                StatusCode::BAD_REQUEST,
                format!("reading body: {error}"),
            ))
        }
    };
    let answer = match route {
        Route::Traces => ExportTraceServiceRequest::decode(body).map(|request| {
            record_traces(&mut lock(&received), &request);
            ExportTraceServiceResponse::default().encode_to_vec()
        }),
        Route::Metrics => ExportMetricsServiceRequest::decode(body).map(|request| {
            record_metrics(&mut lock(&received), &request);
            ExportMetricsServiceResponse::default().encode_to_vec()
        }),
    };
    Ok(match answer {
        Ok(encoded) => Response::builder()
            .status(StatusCode::OK)
            .header(CONTENT_TYPE, "application/x-protobuf")
            .body(Full::new(Bytes::from(encoded)))
            .expect("a valid response"),
        Err(error) => plain(StatusCode::BAD_REQUEST, format!("decoding body: {error}")),
    })
}

enum Route {
    Traces,
    Metrics,
}

fn plain(status: StatusCode, text: impl Into<String>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "text/plain")
        .body(Full::new(Bytes::from(text.into())))
        .expect("a valid response")
}

fn record_traces(received: &mut Received, request: &ExportTraceServiceRequest) {
    for resource_spans in &request.resource_spans {
        let service_name = service_name(resource_spans.resource.as_ref());
        collect_resource(&mut received.strings, resource_spans.resource.as_ref());
        push_nonempty(&mut received.strings, &resource_spans.schema_url);
        for scope_spans in &resource_spans.scope_spans {
            collect_scope(&mut received.strings, scope_spans.scope.as_ref());
            push_nonempty(&mut received.strings, &scope_spans.schema_url);
            for span in &scope_spans.spans {
                collect_span(&mut received.strings, span);
                received.spans.push(decode_span(&service_name, span));
            }
        }
    }
}

fn record_metrics(received: &mut Received, request: &ExportMetricsServiceRequest) {
    for resource_metrics in &request.resource_metrics {
        collect_resource(&mut received.strings, resource_metrics.resource.as_ref());
        push_nonempty(&mut received.strings, &resource_metrics.schema_url);
        for scope_metrics in &resource_metrics.scope_metrics {
            collect_scope(&mut received.strings, scope_metrics.scope.as_ref());
            push_nonempty(&mut received.strings, &scope_metrics.schema_url);
            for metric in &scope_metrics.metrics {
                received.metric_names.push(metric.name.clone());
                collect_metric(&mut received.strings, metric);
            }
        }
    }
}

fn decode_span(service_name: &str, span: &Span) -> ReceivedSpan {
    ReceivedSpan {
        service_name: service_name.to_owned(),
        trace_id: hex(&span.trace_id),
        span_id: hex(&span.span_id),
        parent_span_id: (!span.parent_span_id.is_empty()).then(|| hex(&span.parent_span_id)),
        name: span.name.clone(),
        kind: SpanKind::from_otlp(span.kind),
        attributes: span
            .attributes
            .iter()
            .map(|attribute| (attribute.key.clone(), render_key_value(attribute)))
            .collect(),
        links: span
            .links
            .iter()
            .map(|link| (hex(&link.trace_id), hex(&link.span_id)))
            .collect(),
        events: span.events.iter().map(|event| event.name.clone()).collect(),
    }
}

fn service_name(resource: Option<&Resource>) -> String {
    resource
        .into_iter()
        .flat_map(|resource| &resource.attributes)
        .find(|attribute| attribute.key == "service.name")
        .map(render_key_value)
        .unwrap_or_default()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}

fn render_key_value(attribute: &KeyValue) -> String {
    attribute.value.as_ref().map(render).unwrap_or_default()
}

/// An attribute value as a string: strings as-is, scalars via `to_string`, arrays joined
/// by `,`, key-value lists as `key=value` joined by `,`, bytes as hex.
fn render(value: &AnyValue) -> String {
    match &value.value {
        None => String::new(),
        Some(any_value::Value::StringValue(text)) => text.clone(),
        Some(any_value::Value::BoolValue(flag)) => flag.to_string(),
        Some(any_value::Value::IntValue(number)) => number.to_string(),
        Some(any_value::Value::DoubleValue(number)) => number.to_string(),
        Some(any_value::Value::ArrayValue(array)) => array
            .values
            .iter()
            .map(render)
            .collect::<Vec<_>>()
            .join(","),
        Some(any_value::Value::KvlistValue(list)) => list
            .values
            .iter()
            .map(|entry| format!("{}={}", entry.key, render_key_value(entry)))
            .collect::<Vec<_>>()
            .join(","),
        Some(any_value::Value::BytesValue(bytes)) => hex(bytes),
        Some(any_value::Value::StringValueStrindex(index)) => index.to_string(),
    }
}

fn push_nonempty(strings: &mut Vec<String>, text: &str) {
    if !text.is_empty() {
        strings.push(text.to_owned());
    }
}

fn collect_attributes(strings: &mut Vec<String>, attributes: &[KeyValue]) {
    for attribute in attributes {
        push_nonempty(strings, &attribute.key);
        if let Some(value) = &attribute.value {
            collect_value(strings, value);
        }
    }
}

/// Every string inside a value: nested array elements and list entries individually,
/// and the rendered whole as well (so a secret split across elements still shows up).
fn collect_value(strings: &mut Vec<String>, value: &AnyValue) {
    match &value.value {
        Some(any_value::Value::StringValue(text)) => push_nonempty(strings, text),
        Some(any_value::Value::ArrayValue(array)) => {
            for element in &array.values {
                collect_value(strings, element);
            }
            push_nonempty(strings, &render(value));
        }
        Some(any_value::Value::KvlistValue(list)) => {
            collect_attributes(strings, &list.values);
            push_nonempty(strings, &render(value));
        }
        Some(any_value::Value::BytesValue(bytes)) => {
            push_nonempty(strings, &String::from_utf8_lossy(bytes));
        }
        Some(_) => push_nonempty(strings, &render(value)),
        None => {}
    }
}

fn collect_resource(strings: &mut Vec<String>, resource: Option<&Resource>) {
    if let Some(resource) = resource {
        collect_attributes(strings, &resource.attributes);
    }
}

fn collect_scope(strings: &mut Vec<String>, scope: Option<&InstrumentationScope>) {
    if let Some(scope) = scope {
        push_nonempty(strings, &scope.name);
        push_nonempty(strings, &scope.version);
        collect_attributes(strings, &scope.attributes);
    }
}

fn collect_span(strings: &mut Vec<String>, span: &Span) {
    push_nonempty(strings, &span.name);
    push_nonempty(strings, &span.trace_state);
    collect_attributes(strings, &span.attributes);
    for event in &span.events {
        push_nonempty(strings, &event.name);
        collect_attributes(strings, &event.attributes);
    }
    for link in &span.links {
        push_nonempty(strings, &link.trace_state);
        collect_attributes(strings, &link.attributes);
    }
    if let Some(status) = &span.status {
        push_nonempty(strings, &status.message);
    }
}

fn collect_metric(strings: &mut Vec<String>, metric: &Metric) {
    push_nonempty(strings, &metric.name);
    push_nonempty(strings, &metric.description);
    push_nonempty(strings, &metric.unit);
    collect_attributes(strings, &metric.metadata);
    let collect_exemplars = |strings: &mut Vec<String>, exemplars: &[Exemplar]| {
        for exemplar in exemplars {
            collect_attributes(strings, &exemplar.filtered_attributes);
        }
    };
    match &metric.data {
        Some(metric::Data::Gauge(gauge)) => {
            for point in &gauge.data_points {
                collect_attributes(strings, &point.attributes);
                collect_exemplars(strings, &point.exemplars);
            }
        }
        Some(metric::Data::Sum(sum)) => {
            for point in &sum.data_points {
                collect_attributes(strings, &point.attributes);
                collect_exemplars(strings, &point.exemplars);
            }
        }
        Some(metric::Data::Histogram(histogram)) => {
            for point in &histogram.data_points {
                collect_attributes(strings, &point.attributes);
                collect_exemplars(strings, &point.exemplars);
            }
        }
        Some(metric::Data::ExponentialHistogram(histogram)) => {
            for point in &histogram.data_points {
                collect_attributes(strings, &point.attributes);
                collect_exemplars(strings, &point.exemplars);
            }
        }
        Some(metric::Data::Summary(summary)) => {
            for point in &summary.data_points {
                collect_attributes(strings, &point.attributes);
            }
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::common::v1::ArrayValue;
    use opentelemetry_proto::tonic::metrics::v1::{
        number_data_point, AggregationTemporality, NumberDataPoint, ResourceMetrics, ScopeMetrics,
        Sum,
    };
    use opentelemetry_proto::tonic::trace::v1::{status, ResourceSpans, ScopeSpans, Status};

    use super::*;

    const TRACE_ID: [u8; 16] = [
        0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31,
        0x9c,
    ];
    const SERVER_SPAN: [u8; 8] = [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31];
    const CLIENT_SPAN: [u8; 8] = [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7];
    const LINKED_TRACE: [u8; 16] = [0xff; 16];
    const LINKED_SPAN: [u8; 8] = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08];

    fn attribute(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        }
    }

    fn text(key: &str, value: &str) -> KeyValue {
        attribute(key, any_value::Value::StringValue(value.to_owned()))
    }

    fn resource(service: &str) -> Resource {
        Resource {
            attributes: vec![text("service.name", service)],
            ..Default::default()
        }
    }

    fn trace_request() -> ExportTraceServiceRequest {
        let server = Span {
            trace_id: TRACE_ID.to_vec(),
            span_id: SERVER_SPAN.to_vec(),
            name: "POST /v1/operations".to_owned(),
            kind: span::SpanKind::Server as i32,
            attributes: vec![
                text("http.request.method", "POST"),
                attribute("http.response.status_code", any_value::Value::IntValue(202)),
            ],
            events: vec![span::Event {
                name: "accepted".to_owned(),
                attributes: vec![text("event.detail", "queued")],
                ..Default::default()
            }],
            ..Default::default()
        };
        let client = Span {
            trace_id: TRACE_ID.to_vec(),
            span_id: CLIENT_SPAN.to_vec(),
            parent_span_id: SERVER_SPAN.to_vec(),
            name: "provider call".to_owned(),
            kind: span::SpanKind::Client as i32,
            attributes: vec![
                text("peer.service", "provider-sim"),
                attribute("retry", any_value::Value::BoolValue(true)),
                attribute("ratio", any_value::Value::DoubleValue(0.5)),
                attribute(
                    "tags",
                    any_value::Value::ArrayValue(ArrayValue {
                        values: vec![
                            AnyValue {
                                value: Some(any_value::Value::StringValue("a".to_owned())),
                            },
                            AnyValue {
                                value: Some(any_value::Value::IntValue(7)),
                            },
                        ],
                    }),
                ),
            ],
            links: vec![span::Link {
                trace_id: LINKED_TRACE.to_vec(),
                span_id: LINKED_SPAN.to_vec(),
                attributes: vec![text("link.reason", "follows-from")],
                ..Default::default()
            }],
            status: Some(Status {
                message: "upstream said no".to_owned(),
                code: status::StatusCode::Error as i32,
            }),
            ..Default::default()
        };
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(resource("svc")),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "opgate-test".to_owned(),
                        ..Default::default()
                    }),
                    spans: vec![server, client],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    async fn post(receiver: &OtlpReceiver, path: &str, body: Vec<u8>) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}{path}", receiver.endpoint()))
            .header("content-type", "application/x-protobuf")
            .body(body)
            .send()
            .await
            .expect("posting to the receiver")
    }

    #[tokio::test]
    async fn decodes_exported_spans() {
        let receiver = OtlpReceiver::start().await;
        assert!(receiver.endpoint().starts_with("http://127.0.0.1:"));

        let response = post(&receiver, "/v1/traces", trace_request().encode_to_vec()).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "application/x-protobuf");
        let body = response.bytes().await.unwrap();
        ExportTraceServiceResponse::decode(body).expect("a protobuf export response");

        let spans = receiver.spans();
        assert_eq!(spans.len(), 2, "{spans:#?}");
        let (server, client) = (&spans[0], &spans[1]);

        assert_eq!(server.service_name, "svc");
        assert_eq!(server.trace_id, "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(server.span_id, "b7ad6b7169203331");
        assert_eq!(server.parent_span_id, None);
        assert_eq!(server.name, "POST /v1/operations");
        assert_eq!(server.kind, SpanKind::Server);
        assert_eq!(server.attributes["http.request.method"], "POST");
        assert_eq!(server.attributes["http.response.status_code"], "202");
        assert_eq!(server.events, vec!["accepted".to_owned()]);
        assert!(server.links.is_empty());

        assert_eq!(client.service_name, "svc");
        assert_eq!(client.trace_id, server.trace_id);
        assert_eq!(client.span_id, "00f067aa0ba902b7");
        assert_eq!(client.parent_span_id.as_deref(), Some("b7ad6b7169203331"));
        assert_eq!(client.kind, SpanKind::Client);
        let expected: BTreeMap<String, String> = [
            ("peer.service", "provider-sim"),
            ("retry", "true"),
            ("ratio", "0.5"),
            ("tags", "a,7"),
        ]
        .into_iter()
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect();
        assert_eq!(client.attributes, expected);
        assert_eq!(
            client.links,
            vec![(
                "ffffffffffffffffffffffffffffffff".to_owned(),
                "0102030405060708".to_owned()
            )]
        );
        assert!(client.events.is_empty());

        let strings = receiver.all_strings();
        for expected in [
            "provider-sim",
            "peer.service",
            "POST /v1/operations",
            "svc",
            "service.name",
            "queued",
            "follows-from",
            "upstream said no",
            "opgate-test",
        ] {
            assert!(
                strings.iter().any(|found| found == expected),
                "{expected:?} missing from {strings:?}"
            );
        }
        assert!(receiver.metric_names().is_empty());

        let waited = receiver
            .wait_for_spans(Duration::from_secs(1), "the client span", |spans| {
                spans.iter().any(|span| span.kind == SpanKind::Client)
            })
            .await;
        assert_eq!(waited.len(), 2);
    }

    #[tokio::test]
    async fn records_metric_names() {
        let receiver = OtlpReceiver::start().await;
        let request = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(resource("svc")),
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: "opgate_test_total".to_owned(),
                        description: "operations counted by the test".to_owned(),
                        data: Some(metric::Data::Sum(Sum {
                            data_points: vec![NumberDataPoint {
                                attributes: vec![text("outcome", "succeeded")],
                                value: Some(number_data_point::Value::AsInt(3)),
                                ..Default::default()
                            }],
                            aggregation_temporality: AggregationTemporality::Cumulative as i32,
                            is_monotonic: true,
                        })),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };

        let response = post(&receiver, "/v1/metrics", request.encode_to_vec()).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "application/x-protobuf");
        ExportMetricsServiceResponse::decode(response.bytes().await.unwrap())
            .expect("a protobuf export response");

        assert_eq!(
            receiver.metric_names(),
            vec!["opgate_test_total".to_owned()]
        );
        let strings = receiver.all_strings();
        for expected in [
            "opgate_test_total",
            "operations counted by the test",
            "succeeded",
        ] {
            assert!(
                strings.iter().any(|found| found == expected),
                "{expected:?} missing from {strings:?}"
            );
        }
        assert!(receiver.spans().is_empty());
    }

    #[tokio::test]
    async fn rejects_garbage_and_unknown_routes() {
        let receiver = OtlpReceiver::start().await;

        let garbage = vec![0xff, 0xff, 0xff, 0xff, 0x0f, 0x00, 0x13];
        let response = post(&receiver, "/v1/traces", garbage.clone()).await;
        assert_eq!(response.status(), 400);
        let response = post(&receiver, "/v1/metrics", garbage).await;
        assert_eq!(response.status(), 400);

        let response = post(&receiver, "/v1/logs", trace_request().encode_to_vec()).await;
        assert_eq!(response.status(), 404);
        let response = reqwest::get(format!("{}/v1/traces", receiver.endpoint()))
            .await
            .unwrap();
        assert_eq!(response.status(), 404);

        assert!(receiver.spans().is_empty());
        assert!(receiver.metric_names().is_empty());
        assert!(receiver.all_strings().is_empty());
    }

    #[tokio::test]
    async fn stops_serving_when_dropped() {
        let receiver = OtlpReceiver::start().await;
        let endpoint = receiver.endpoint();
        drop(receiver);
        tokio::task::yield_now().await;
        let result = reqwest::Client::new()
            .post(format!("{endpoint}/v1/traces"))
            .timeout(Duration::from_secs(2))
            .body(trace_request().encode_to_vec())
            .send()
            .await;
        assert!(result.is_err(), "{result:?}");
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after")]
    async fn wait_for_spans_panics_with_a_summary() {
        let receiver = OtlpReceiver::start().await;
        post(&receiver, "/v1/traces", trace_request().encode_to_vec()).await;
        receiver
            .wait_for_spans(
                Duration::from_millis(120),
                "a span that never comes",
                |spans| spans.iter().any(|span| span.name == "never"),
            )
            .await;
    }
}
