//! Carrying out one claimed operation: call the provider under a heartbeated lease,
//! classify the outcome into a transition, and write it only if the fencing token is
//! still ours. No database transaction is open during the provider call.

use std::sync::Arc;
use std::time::Duration;

use opgate_domain::OperationStatus;
use opgate_provider::{PaymentInstruction, Provider, ProviderOutcome};
use opgate_store::{ClaimedOperation, FencedWrite, PendingTransition, Store};
use tokio::sync::watch;

use crate::completions::Completions;
use crate::heartbeat::{spawn_heartbeat, LeaseLost};
use crate::settled::SettledNotifier;
use opgate_domain::backoff::retry_delay;
use opgate_telemetry::{metrics, propagation};
use tracing::Instrument;

pub struct Worker<P> {
    pub store: Store,
    pub provider: Arc<P>,
    pub owner: String,
    pub lease: Duration,
    pub max_attempts: u32,
    pub retry_base: Duration,
    pub retry_max: Duration,
    pub settled: SettledNotifier,
    /// Where outcomes are written (group commit unless `--group-commit false`).
    pub completions: Completions,
}

/// The write a provider call leads to.
enum Decision {
    Complete {
        status: OperationStatus,
        reference: Option<String>,
        error: Option<String>,
        reason: &'static str,
    },
    Requeue {
        delay: Duration,
        error: String,
    },
    LeaseLost,
}

impl<P: Provider> Worker<P> {
    /// Runs in a messaging "process" span that continues the trace the operation was
    /// registered in (its stored traceparent).
    pub async fn execute(&self, op: ClaimedOperation) {
        let span = tracing::info_span!(
            "process payment",
            otel.kind = "consumer",
            messaging.system = "opgate",
            messaging.operation.type = "process",
            messaging.destination.name = "outbox",
            opgate.operation_id = %op.operation_id,
            opgate.agent_id = %op.agent_id,
            opgate.fencing_token = op.fencing_token,
            opgate.attempt = op.attempts,
            opgate.transition = tracing::field::Empty,
            opgate.provider_reference = tracing::field::Empty,
            opgate.execution_duration_ms = tracing::field::Empty,
        );
        propagation::continue_trace(&span, op.trace_context.as_deref());
        let started = std::time::Instant::now();
        self.execute_in_span(&op).instrument(span.clone()).await;
        span.record(
            "opgate.execution_duration_ms",
            started.elapsed().as_millis() as u64,
        );
    }

    async fn execute_in_span(&self, op: &ClaimedOperation) {
        let op = op.clone();
        let (decision, calls) = match PaymentInstruction::from_payload(op.operation_id, &op.payload)
        {
            None => (
                complete(
                    OperationStatus::Failed,
                    None,
                    Some("stored request could not be read; never sent".into()),
                    "unreadable request",
                ),
                0,
            ),
            Some(_)
                if op.previous_status == OperationStatus::InProgress
                    && !self.provider.keyed_retries_safe() =>
            {
                (
                    complete(
                        OperationStatus::Unknown,
                        None,
                        Some("a previous executor's lease expired during execution".into()),
                        "abandoned mid-call; not re-sent because keyed retries are off",
                    ),
                    0,
                )
            }
            // Claims count as attempts: an operation whose every execution ends with
            // its executor gone (a crash it causes, say) is not sent again forever.
            Some(_)
                if op.previous_status == OperationStatus::InProgress
                    && op.attempts.max(0) as u32 > self.max_attempts =>
            {
                (
                    complete(
                        OperationStatus::Unknown,
                        None,
                        Some(format!(
                            "abandoned mid-call; not re-sent after {} attempts",
                            op.attempts - 1
                        )),
                        "abandoned mid-call with no attempts left; the reconciler follows up",
                    ),
                    0,
                )
            }
            Some(instruction) => {
                let (lost, heartbeat) = spawn_heartbeat(
                    self.store.clone(),
                    op.operation_id,
                    op.fencing_token,
                    self.lease,
                );
                let mut calls = 0;
                let decision = self
                    .call_provider(&op, &instruction, lost, &mut calls)
                    .await;
                drop(heartbeat);
                (decision, calls)
            }
        };
        self.write(&op, decision, calls).await;
    }

    async fn call_provider(
        &self,
        op: &ClaimedOperation,
        instruction: &PaymentInstruction,
        mut lost: watch::Receiver<LeaseLost>,
        calls_made: &mut u32,
    ) -> Decision {
        // A previous owner may have sent the request before its lease expired.
        let mut maybe_sent = op.previous_status == OperationStatus::InProgress;
        let mut calls = op.attempts.max(1) as u32;
        let mut retry_in_claim = 0;
        loop {
            let started = std::time::Instant::now();
            // Biased: an answer that has arrived is used (and then fenced) even if the
            // lease was lost meanwhile, so the refusal shows in the audit trail.
            let outcome = tokio::select! {
                biased;
                outcome = self.provider.execute(instruction) => outcome,
                _ = lost.changed() => return Decision::LeaseLost,
            };
            *calls_made += 1;
            metrics().provider_call(outcome_name(&outcome), started.elapsed().as_secs_f64());
            tracing::info!(
                operation_id = %op.operation_id, attempt = calls,
                outcome = outcome_name(&outcome), elapsed_ms = started.elapsed().as_millis() as u64,
                "provider call"
            );
            let uncertain_cause = match outcome {
                ProviderOutcome::Succeeded { reference } => {
                    return complete(
                        OperationStatus::Succeeded,
                        Some(reference),
                        None,
                        "provider confirmed the payment",
                    )
                }
                ProviderOutcome::Declined { reference, code } => {
                    return complete(
                        OperationStatus::Failed,
                        reference,
                        Some(format!("declined by the provider: {code}")),
                        "provider declined",
                    )
                }
                // A refusal proves nothing about an earlier attempt that may have
                // reached the provider: only a first-hand refusal is a failure.
                ProviderOutcome::Rejected { status, detail } if !maybe_sent => {
                    return complete(
                        OperationStatus::Failed,
                        None,
                        Some(format!("provider rejected the request (HTTP {status}): {detail}")),
                        "provider rejected the request",
                    )
                }
                ProviderOutcome::Rejected { status, detail } => {
                    return complete(
                        OperationStatus::Unknown,
                        None,
                        Some(format!("provider rejected a retry (HTTP {status}): {detail}; an earlier attempt may have reached it")),
                        "outcome uncertain; the reconciler follows up",
                    )
                }
                ProviderOutcome::Pending { reference } => {
                    return complete(
                        OperationStatus::Unknown,
                        reference,
                        Some("provider reports the payment as pending".into()),
                        "pending at the provider; the reconciler follows up",
                    )
                }
                ProviderOutcome::NotSent { cause } if !maybe_sent => {
                    if calls >= self.max_attempts {
                        return complete(
                            OperationStatus::Failed,
                            None,
                            Some(format!(
                                "never reached the provider after {calls} attempts: {cause}"
                            )),
                            "never reached the provider",
                        );
                    }
                    let delay = retry_delay(op.retry_count as u32, self.retry_base, self.retry_max);
                    return Decision::Requeue {
                        delay,
                        error: cause,
                    };
                }
                ProviderOutcome::NotSent { cause } => cause,
                ProviderOutcome::Uncertain { cause } => {
                    maybe_sent = true;
                    cause
                }
            };
            if !self.provider.keyed_retries_safe() || calls >= self.max_attempts {
                return complete(
                    OperationStatus::Unknown,
                    None,
                    Some(uncertain_cause),
                    "outcome uncertain; the reconciler follows up",
                );
            }
            // Same key, same operation: the provider deduplicates, so this is safe.
            let delay = retry_delay(retry_in_claim, self.retry_base, self.retry_max);
            retry_in_claim += 1;
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = lost.changed() => return Decision::LeaseLost,
            }
            match self
                .store
                .count_attempt(op.operation_id, op.fencing_token)
                .await
            {
                Ok(true) => calls += 1,
                Ok(false) => return Decision::LeaseLost,
                Err(error) => {
                    tracing::warn!(operation_id = %op.operation_id, %error, "could not count an attempt; retrying anyway");
                    calls += 1;
                }
            }
        }
    }

    /// Writes the decision, retrying while the database is unavailable: until the
    /// write lands, is rejected as stale, or the lease has surely passed to another.
    async fn write(&self, op: &ClaimedOperation, decision: Decision, calls: u32) {
        let give_up_after = self.lease * 2;
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(100);
        loop {
            let result = match &decision {
                Decision::LeaseLost => {
                    metrics().stale_write_rejected("executor");
                    tracing::warn!(operation_id = %op.operation_id, fencing_token = op.fencing_token, "lease lost during execution; writing nothing");
                    // Only the audit trail learns of it; the operation is not touched.
                    if let Err(error) = self
                        .store
                        .record_lease_lost(op.operation_id, op.fencing_token, &self.owner)
                        .await
                    {
                        tracing::warn!(operation_id = %op.operation_id, %error, "could not audit the lost lease");
                    }
                    return;
                }
                Decision::Complete {
                    status,
                    reference,
                    error,
                    reason,
                } => {
                    self.completions
                        .write(PendingTransition {
                            operation_id: op.operation_id,
                            fencing_token: op.fencing_token,
                            from: OperationStatus::InProgress,
                            status: *status,
                            provider_reference: reference.clone(),
                            last_error: error.clone(),
                            reason: (*reason).to_owned(),
                            next_check_in: None,
                        })
                        .await
                }
                Decision::Requeue { delay, error } => {
                    self.store
                        .requeue_with_fence(
                            op.operation_id,
                            op.fencing_token,
                            &self.owner,
                            *delay,
                            error,
                        )
                        .await
                }
            };
            match result {
                Ok(FencedWrite::Applied) => {
                    self.after_applied(op, &decision, calls);
                    return;
                }
                Ok(FencedWrite::RejectedStale) => {
                    metrics().stale_write_rejected("executor");
                    tracing::warn!(operation_id = %op.operation_id, fencing_token = op.fencing_token, "stale write rejected by the fencing token");
                    return;
                }
                Err(error) if started.elapsed() < give_up_after => {
                    tracing::warn!(operation_id = %op.operation_id, %error, "could not record the outcome; retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                Err(error) => {
                    tracing::error!(operation_id = %op.operation_id, %error, "gave up recording the outcome; the lease has passed to another executor");
                    return;
                }
            }
        }
    }

    fn after_applied(&self, op: &ClaimedOperation, decision: &Decision, calls: u32) {
        match decision {
            Decision::Complete { status, .. } => {
                // Calls made for it in all: earlier claims' and this one's.
                let attempts = (op.attempts.max(1) as u32 - 1 + calls) as u64;
                metrics().operation_completed(status.as_str(), attempts);
                let span = tracing::Span::current();
                span.record("opgate.transition", format!("IN_PROGRESS->{status}"));
                if let Decision::Complete {
                    reference: Some(reference),
                    ..
                } = decision
                {
                    span.record("opgate.provider_reference", reference.as_str());
                }
                tracing::info!(operation_id = %op.operation_id, agent_id = %op.agent_id, status = %status, "operation completed");
                if status.is_terminal() {
                    self.settled.settled(op.operation_id);
                }
            }
            Decision::Requeue { delay, .. } => {
                tracing::info!(operation_id = %op.operation_id, retry_in_ms = delay.as_millis() as u64, "provider unreachable; requeued");
            }
            Decision::LeaseLost => {}
        }
    }
}

fn complete(
    status: OperationStatus,
    reference: Option<String>,
    error: Option<String>,
    reason: &'static str,
) -> Decision {
    Decision::Complete {
        status,
        reference,
        error,
        reason,
    }
}

fn outcome_name(outcome: &ProviderOutcome) -> &'static str {
    match outcome {
        ProviderOutcome::Succeeded { .. } => "succeeded",
        ProviderOutcome::Declined { .. } => "declined",
        ProviderOutcome::Pending { .. } => "pending",
        ProviderOutcome::Rejected { .. } => "rejected",
        ProviderOutcome::NotSent { .. } => "not_sent",
        ProviderOutcome::Uncertain { .. } => "uncertain",
    }
}
