//! Observability end to end: one operation is one trace across intake, executor,
//! provider and reconciler, exported over OTLP/HTTP to a receiver the test runs;
//! `/metrics` counters move with what happened; nothing secret reaches a log line or
//! a span, whatever the log level.

use std::collections::HashSet;
use std::time::Duration;

use opgate_e2e::api::{payment_body, post_payment, post_raw};
use opgate_e2e::metrics::metric;
use opgate_e2e::otlp::{OtlpReceiver, ReceivedSpan, SpanKind};
use opgate_e2e::{eventually, Executor, Reconciler, Stack, TestDb};
use serde_json::json;

const SETTLE: Duration = Duration::from_secs(30);

fn otel_env(receiver: &OtlpReceiver) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".into()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "500".into()),
    ]
}

fn as_refs<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

fn find<'a>(spans: &'a [ReceivedSpan], service: &str, name: &str) -> Vec<&'a ReceivedSpan> {
    spans
        .iter()
        .filter(|s| s.service_name == service && s.name == name)
        .collect()
}

#[tokio::test]
async fn one_payment_is_one_trace_across_every_service() {
    let receiver = OtlpReceiver::start().await;
    let env = otel_env(&receiver);
    let env = as_refs(&env);
    let stack =
        Stack::start_with_env(TestDb::create().await, &["drop-after-commit=1.0"], &env).await;
    let _executor = Executor::start_with_env(
        &stack.db.url,
        &stack.sim.base_url,
        &["--keyed-retries", "false"],
        &env,
    )
    .await;
    let _reconciler =
        Reconciler::start_reconciler_with_env(&stack.db.url, &stack.sim.base_url, &[], &env).await;

    // The agent sends its own trace context: opgate must continue that trace.
    let agent_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let agent_span = "00f067aa0ba902b7";
    let reply = stack
        .client
        .post(stack.intake.url("/agent/operations/payment"))
        .bearer_auth(&stack.key)
        .header("Idempotency-Key", "traced-1")
        .header("traceparent", format!("00-{agent_trace}-{agent_span}-01"))
        .json(&payment_body("cus_traced", "inv_traced", "42.00"))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 202);
    let body: serde_json::Value = reply.json().await.unwrap();
    let id = body["operation_id"].as_str().unwrap().parse().unwrap();
    stack.wait_for_status(id, "SUCCEEDED", SETTLE).await;

    // Every span asserted below, before any is looked at: each service exports in
    // batches, so one span of a service may arrive a batch before another.
    let expected = [
        ("intake", "POST /agent/operations/{kind}"),
        ("intake", "INSERT operations"),
        ("executor", "process operation"),
        ("executor", "POST"),
        ("reconciler", "reconcile operation"),
        ("reconciler", "GET"),
    ];
    let spans = receiver
        .wait_for_spans(SETTLE, "intake, executor and reconciler spans", |spans| {
            expected.iter().all(|(service, name)| {
                spans.iter().any(|s| {
                    s.service_name == *service && s.name == *name && s.trace_id == agent_trace
                })
            })
        })
        .await;

    // intake: a server span, child of the agent's span, with the HTTP conventions.
    let server = find(&spans, "intake", "POST /agent/operations/{kind}");
    let server = server
        .iter()
        .find(|s| s.trace_id == agent_trace)
        .expect("intake server span");
    assert_eq!(server.kind, SpanKind::Server);
    assert_eq!(server.parent_span_id.as_deref(), Some(agent_span));
    assert_eq!(server.attributes["http.request.method"], "POST");
    assert_eq!(server.attributes["http.route"], "/agent/operations/{kind}");
    assert_eq!(server.attributes["http.response.status_code"], "202");
    assert_eq!(server.attributes["opgate.operation_id"], id.to_string());
    assert_eq!(server.attributes["opgate.agent_id"], "agent");
    assert_eq!(server.attributes["opgate.idempotency_key"], "traced-1");

    // Its database calls are client spans with the database conventions, no values.
    let db = spans
        .iter()
        .find(|s| {
            s.service_name == "intake"
                && s.parent_span_id.as_deref() == Some(server.span_id.as_str())
                && s.name == "INSERT operations"
        })
        .expect("intake's INSERT as a child client span");
    assert_eq!(db.kind, SpanKind::Client);
    assert_eq!(db.attributes["db.system.name"], "postgresql");
    assert_eq!(db.attributes["db.operation.name"], "INSERT");

    // executor: the process span continues the trace from the outbox, as a child of
    // intake's server span; the provider call is a client span inside it.
    let process = find(&spans, "executor", "process operation");
    let process = process
        .iter()
        .find(|s| s.trace_id == agent_trace)
        .expect("executor process span");
    assert_eq!(process.kind, SpanKind::Consumer);
    assert_eq!(
        process.parent_span_id.as_deref(),
        Some(server.span_id.as_str())
    );
    assert_eq!(
        process.attributes["opgate.transition"],
        "IN_PROGRESS->UNKNOWN"
    );
    assert_eq!(process.attributes["opgate.attempt"], "1");
    let call = spans
        .iter()
        .find(|s| {
            s.service_name == "executor"
                && s.parent_span_id.as_deref() == Some(process.span_id.as_str())
                && s.kind == SpanKind::Client
                && s.name == "POST"
        })
        .expect("the provider call as a client span");
    assert_eq!(call.attributes["http.request.method"], "POST");

    // The provider received that client span's context.
    let ledger = stack.sim.ledger().await;
    let sent = ledger["traceparents_by_key"][format!("opgate-{id}")][0]
        .as_str()
        .expect("a traceparent reached the provider")
        .to_owned();
    assert_eq!(sent, format!("00-{agent_trace}-{}-01", call.span_id));

    // reconciler: its check continues the operation's trace and resolves it.
    let check = spans
        .iter()
        .find(|s| {
            s.service_name == "reconciler"
                && s.name == "reconcile operation"
                && s.trace_id == agent_trace
        })
        .expect("a reconciler span in the operation's trace");
    assert_eq!(
        check.parent_span_id.as_deref(),
        Some(server.span_id.as_str())
    );
    assert_eq!(
        check.attributes["opgate.transition"],
        "RECONCILING->SUCCEEDED"
    );
    assert!(check.attributes["opgate.provider_reference"].starts_with("pay_"));
    assert!(spans.iter().any(|s| s.service_name == "reconciler"
        && s.trace_id == check.trace_id
        && s.kind == SpanKind::Client
        && s.name == "GET"));

    // Log lines name the trace: intake's line for this registration carries the
    // agent's trace id and the server span's id.
    let registered = stack
        .intake
        .service
        .logs()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| {
            line["message"] == "operation registered"
                && line["fields"]["operation_id"] == id.to_string().as_str()
        })
        .expect("a JSON log line for the registration");
    assert_eq!(registered["trace_id"], agent_trace);
    assert_eq!(registered["span_id"], server.span_id.as_str());

    // Metrics went out over OTLP too.
    eventually(SETTLE, "opgate metrics over OTLP", || async {
        let names: HashSet<String> = receiver.metric_names().into_iter().collect();
        (names.contains("opgate_intake_requests") && names.contains("opgate_execution_duration"))
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn metrics_move_with_replays_lost_answers_and_reconciliations() {
    let stack = Stack::start(&["drop-after-commit=1.0"]).await;
    let intake_metrics = stack.intake.metrics_url.clone();
    // /metrics is on intake's own metrics listener, not on the agents' API.
    let on_api = stack
        .client
        .get(stack.intake.url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(on_api.status(), 404);
    let executor = Executor::start(
        &stack.db.url,
        &stack.sim.base_url,
        &["--keyed-retries", "false", "--gauge-interval", "100ms"],
    )
    .await;

    let body = payment_body("cus_m", "inv_m", "5.00");
    let before = metric(
        &intake_metrics,
        "opgate_duplicate_requests_prevented_total",
        None,
    )
    .await;
    let first = post_payment(
        &stack.client,
        &stack.intake.base_url,
        Some(&stack.key),
        Some("m-1"),
        &body,
    )
    .await;
    post_payment(
        &stack.client,
        &stack.intake.base_url,
        Some(&stack.key),
        Some("m-1"),
        &body,
    )
    .await;
    assert_eq!(
        metric(
            &intake_metrics,
            "opgate_duplicate_requests_prevented_total",
            None
        )
        .await,
        before + 1.0
    );
    assert!(
        metric(
            &intake_metrics,
            "opgate_intake_requests_total",
            Some(("outcome", "created"))
        )
        .await
            >= 1.0
    );

    // The dropped answer: an uncertain outcome that is no timeout (the timeouts are
    // counted in executor_timeouts.rs), and the UNKNOWN gauge shows it.
    let id = first.operation_id().parse().unwrap();
    stack.wait_for_status(id, "UNKNOWN", SETTLE).await;
    assert_eq!(
        metric(
            executor.metrics_url(),
            "opgate_provider_uncertain_total",
            None
        )
        .await,
        1.0
    );
    assert_eq!(
        metric(
            executor.metrics_url(),
            "opgate_provider_timeouts_total",
            None
        )
        .await,
        0.0,
        "a dropped connection counted as a timeout"
    );
    eventually(SETTLE, "the UNKNOWN gauge at 1", || async {
        let unknown = metric(
            executor.metrics_url(),
            "opgate_operations",
            Some(("status", "UNKNOWN")),
        )
        .await;
        (unknown == 1.0).then_some(())
    })
    .await;

    // The reconciler resolves it: a successful reconciliation, and the gauge drops.
    let reconciler = Reconciler::start_reconciler(
        &stack.db.url,
        &stack.sim.base_url,
        &["--gauge-interval", "100ms"],
    )
    .await;
    stack.wait_for_status(id, "SUCCEEDED", SETTLE).await;
    assert_eq!(
        metric(
            reconciler.metrics_url(),
            "opgate_reconciliations_total",
            Some(("outcome", "succeeded"))
        )
        .await,
        1.0
    );
    eventually(SETTLE, "the UNKNOWN gauge back to 0", || async {
        let unknown = metric(
            reconciler.metrics_url(),
            "opgate_operations",
            Some(("status", "UNKNOWN")),
        )
        .await;
        (unknown == 0.0).then_some(())
    })
    .await;
    let histogram = metric(
        executor.metrics_url(),
        "opgate_execution_duration_seconds_count",
        None,
    )
    .await;
    assert_eq!(histogram, 1.0);
}

#[tokio::test]
async fn no_secret_reaches_a_log_line_or_a_span_at_any_log_level() {
    let receiver = OtlpReceiver::start().await;
    let mut env = otel_env(&receiver);
    // Everything at trace, and the database driver's query logging asked for by name.
    env.push((
        "RUST_LOG",
        "trace,tokio_postgres::query=debug,tokio_postgres=trace".into(),
    ));
    let env = as_refs(&env);
    // The provider drops its answer: the reconciler's path runs too.
    let stack =
        Stack::start_with_env(TestDb::create().await, &["drop-after-commit=1.0"], &env).await;
    let executor = Executor::start_with_env(
        &stack.db.url,
        &stack.sim.base_url,
        &["--keyed-retries", "false"],
        &env,
    )
    .await;
    let reconciler =
        Reconciler::start_reconciler_with_env(&stack.db.url, &stack.sim.base_url, &[], &env).await;
    let (c, base, key) = (
        &stack.client,
        stack.intake.base_url.as_str(),
        stack.key.as_str(),
    );

    let customer = "cus_SECRET_4242";
    let invoice = "inv_SECRET_777";
    let amount = "987654.31";
    let forged_key = format!("opg_{}_{}", "d".repeat(16), "5ec2e7".repeat(10) + "abcd");
    let secret_body = json!({"customer_id": customer, "invoice_id": invoice, "amount": amount});
    // Every path: success, replay, key reuse (422), 401 with a forged key, 400, 413,
    // 415, 422, 403.
    let ok = post_payment(c, base, Some(key), Some("s-1"), &secret_body).await;
    assert_eq!(ok.status, 202);
    post_payment(c, base, Some(key), Some("s-1"), &secret_body).await;
    let other = json!({"customer_id": customer, "invoice_id": invoice, "amount": "987654.32"});
    assert_eq!(
        post_payment(c, base, Some(key), Some("s-1"), &other)
            .await
            .status,
        422
    );
    assert_eq!(
        post_payment(c, base, Some(&forged_key), Some("s-2"), &secret_body)
            .await
            .status,
        401
    );
    assert_eq!(
        post_raw(
            c,
            base,
            Some(key),
            Some("s-3"),
            "application/json",
            format!("{{\"customer_id\": \"{customer}\", ")
        )
        .await
        .status,
        400
    );
    assert_eq!(
        post_raw(
            c,
            base,
            Some(key),
            Some("s-4"),
            "text/plain",
            secret_body.to_string()
        )
        .await
        .status,
        415
    );
    let unknown_field = json!({"customer_id": customer, "invoice_id": invoice, "amount": amount, "card": "4242424242424242"});
    assert_eq!(
        post_payment(c, base, Some(key), Some("s-5"), &unknown_field)
            .await
            .status,
        422
    );
    let bad_amount =
        json!({"customer_id": customer, "invoice_id": invoice, "amount": "987654.311"});
    assert_eq!(
        post_payment(c, base, Some(key), Some("s-6"), &bad_amount)
            .await
            .status,
        422
    );
    let huge = json!({"customer_id": customer, "invoice_id": invoice, "amount": amount, "pad": "x".repeat(20_000)});
    assert_eq!(
        post_payment(c, base, Some(key), Some("s-7"), &huge)
            .await
            .status,
        413
    );
    let id = ok.operation_id().parse().unwrap();
    stack.wait_for_status(id, "SUCCEEDED", SETTLE).await;
    receiver
        .wait_for_spans(SETTLE, "the executor's spans", |spans| {
            spans.iter().any(|s| s.name == "process operation")
        })
        .await;

    let key_secret = key.rsplit('_').next().unwrap();
    let secrets = [
        customer,
        invoice,
        amount,
        "987654.32",
        "4242424242424242",
        key,
        key_secret,
        forged_key.as_str(),
    ];
    let logs = format!(
        "{}{}{}",
        stack.intake.service.logs(),
        executor.service.logs(),
        reconciler.service.logs()
    );
    assert!(
        logs.lines().count() > 20,
        "expected trace-level logs to be captured"
    );
    let exported = receiver.all_strings();
    assert!(!exported.is_empty());
    for secret in secrets {
        assert!(!logs.contains(secret), "{secret:?} appears in the logs");
        assert!(
            !exported.iter().any(|s| s.contains(secret)),
            "{secret:?} appears in an exported span"
        );
    }
}
