//! Carrying out one claimed operation: call the provider under a heartbeated lease,
//! classify the outcome into a transition, and write it only if the fencing token is
//! still ours. No database transaction is open during the provider call.

use std::sync::Arc;
use std::time::Duration;

use opgate_domain::{OperationStatus, Transition};
use opgate_provider::{Instruction, ProviderOutcome, Providers};
use opgate_store::{ClaimedOperation, FencedTransition, FencedWrite, Store};
use tokio::sync::watch;

use crate::completions::Completions;
use crate::heartbeat::{spawn_heartbeat, LeaseLost};
use crate::rules::{before_call, Attempt, Claim, Step};
use crate::settled::SettledNotifier;
use opgate_domain::backoff::retry_delay;
use opgate_telemetry::{metrics, propagation};
use tracing::Instrument;

pub struct Worker {
    pub store: Store,
    pub providers: Arc<Providers>,
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
    Write(Transition),
    Requeue {
        delay: Duration,
        error: String,
    },
    /// Rate limited by the provider: back to PENDING after `delay`, the call uncounted.
    Throttled {
        delay: Duration,
    },
    LeaseLost,
}

impl Worker {
    /// Runs in a messaging "process" span that continues the trace the operation was
    /// registered in (its stored traceparent).
    pub async fn execute(&self, op: ClaimedOperation) {
        let span = tracing::info_span!(
            "process operation",
            otel.kind = "consumer",
            messaging.system = "opgate",
            messaging.operation.type = "process",
            messaging.destination.name = "outbox",
            opgate.operation_id = %op.operation_id,
            opgate.operation_type = %op.operation_type,
            opgate.provider = %op.provider,
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
        let claim = Claim {
            taken_over: op.previous_status == OperationStatus::InProgress,
            attempts: op.attempts.max(0) as u32,
            max_attempts: self.max_attempts,
            keyed_retries_safe: self.providers.keyed_retries_safe(&op.provider),
        };
        if let Some(transition) = before_call(&claim) {
            return self.write(op, Decision::Write(transition), 0).await;
        }
        let (lost, heartbeat) = spawn_heartbeat(self.store.clone(), op.lease(), self.lease);
        let mut calls = 0;
        let decision = self
            .call_provider(op, &claim, &instruction_of(op), lost, &mut calls)
            .await;
        drop(heartbeat);
        self.write(op, decision, calls).await;
    }

    async fn call_provider(
        &self,
        op: &ClaimedOperation,
        claim: &Claim,
        instruction: &Instruction,
        mut lost: watch::Receiver<LeaseLost>,
        calls_made: &mut u32,
    ) -> Decision {
        let mut attempt = Attempt::first_call(
            claim,
            op.retry_count.max(0) as u32,
            self.retry_base,
            self.retry_max,
        );
        let mut retry_in_claim = 0;
        loop {
            let started = std::time::Instant::now();
            // Biased: an answer that has arrived is used (and then fenced) even if the
            // lease was lost meanwhile, so the refusal shows in the audit trail.
            let outcome = tokio::select! {
                biased;
                outcome = self.providers.execute(&op.provider, instruction) => outcome,
                _ = lost.changed() => return Decision::LeaseLost,
            };
            // A throttled call was not taken on: it is not counted as one.
            if !matches!(outcome, ProviderOutcome::Throttled { .. }) {
                *calls_made += 1;
            }
            metrics().provider_call(outcome_name(&outcome), started.elapsed().as_secs_f64());
            tracing::info!(
                operation_id = %op.operation_id, attempt = attempt.calls,
                outcome = outcome_name(&outcome), elapsed_ms = started.elapsed().as_millis() as u64,
                "provider call"
            );
            match attempt.answered(outcome) {
                Step::Write(transition) => return Decision::Write(transition),
                Step::Requeue { delay, error } => return Decision::Requeue { delay, error },
                Step::Throttled { delay } => return Decision::Throttled { delay },
                Step::WaitSameKey { delay } => {
                    // The lease is heartbeated meanwhile; the next call takes this one's
                    // place in the count, so nothing is counted.
                    tracing::info!(operation_id = %op.operation_id, wait_ms = delay.as_millis() as u64, "provider rate limited a retry; waiting in the claim");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = lost.changed() => return Decision::LeaseLost,
                    }
                    continue;
                }
                Step::RetrySameKey { .. } => {}
            }
            // Same key, same operation: the provider deduplicates, so this is safe.
            let delay = retry_delay(retry_in_claim, self.retry_base, self.retry_max);
            retry_in_claim += 1;
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = lost.changed() => return Decision::LeaseLost,
            }
            match self.store.count_attempt(&op.lease()).await {
                Ok(true) => {}
                Ok(false) => return Decision::LeaseLost,
                Err(error) => {
                    tracing::warn!(operation_id = %op.operation_id, %error, "could not count an attempt; retrying anyway");
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
                    if let Err(error) = self.store.record_lease_lost(&op.lease(), &self.owner).await
                    {
                        tracing::warn!(operation_id = %op.operation_id, %error, "could not audit the lost lease");
                    }
                    return;
                }
                Decision::Write(transition) => {
                    self.completions
                        .write(FencedTransition {
                            lease: op.lease(),
                            from: OperationStatus::InProgress,
                            transition: transition.clone(),
                        })
                        .await
                }
                Decision::Requeue { delay, error } => {
                    self.store
                        .requeue_with_fence(&op.lease(), &self.owner, *delay, error)
                        .await
                }
                Decision::Throttled { delay } => {
                    self.store
                        .requeue_rate_limited(&op.lease(), &self.owner, *delay)
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
            Decision::Write(transition) => {
                let status = transition.to;
                // Calls made for it in all: earlier claims' and this one's.
                let attempts = (op.attempts.max(1) as u32 - 1 + calls) as u64;
                metrics().operation_completed(status.as_str(), attempts);
                let span = tracing::Span::current();
                span.record("opgate.transition", format!("IN_PROGRESS->{status}"));
                if let Some(reference) = &transition.provider_reference {
                    span.record("opgate.provider_reference", reference.as_str());
                }
                tracing::info!(operation_id = %op.operation_id, agent_id = %op.agent_id, kind = %op.operation_type, status = %status, "operation completed");
                if status.is_terminal() {
                    self.settled.settled(op.operation_id);
                }
            }
            Decision::Requeue { delay, .. } => {
                tracing::info!(operation_id = %op.operation_id, retry_in_ms = delay.as_millis() as u64, "provider unreachable; requeued");
            }
            Decision::Throttled { delay } => {
                tracing::info!(operation_id = %op.operation_id, retry_in_ms = delay.as_millis() as u64, "provider rate limited the call; requeued, not counted");
            }
            Decision::LeaseLost => {}
        }
    }
}

/// What the provider is asked, built from the claimed row.
fn instruction_of(op: &ClaimedOperation) -> Instruction {
    let money = op.amount.zip(op.currency.clone());
    Instruction::for_operation(
        op.operation_id,
        &op.operation_type,
        &op.payload,
        money.map(|(amount, currency)| (amount.to_string(), currency)),
        op.provider_reference.as_deref(),
    )
}

fn outcome_name(outcome: &ProviderOutcome) -> &'static str {
    match outcome {
        ProviderOutcome::Succeeded { .. } => "succeeded",
        ProviderOutcome::Declined { .. } => "declined",
        ProviderOutcome::Pending { .. } => "pending",
        ProviderOutcome::Rejected { .. } => "rejected",
        ProviderOutcome::NotSent { .. } => "not_sent",
        ProviderOutcome::Uncertain { .. } => "uncertain",
        ProviderOutcome::TimedOut { .. } => "timeout",
        ProviderOutcome::UncertainFinal { .. } => "uncertain_final",
        ProviderOutcome::Throttled { .. } => "throttled",
    }
}
