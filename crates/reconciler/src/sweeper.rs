//! The sweep: claim due UNKNOWN operations (and rescue abandoned RECONCILING ones),
//! look each up at the provider outside any transaction, and write the verdict
//! conditionally on the fencing token taken by the claim.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use opgate_domain::OperationStatus;
use opgate_provider::{Instruction, Providers};
use opgate_store::{ClaimedReconciliation, FencedTransition, FencedWrite, Store};
use opgate_telemetry::{metrics, propagation};
use tracing::Instrument;

use crate::config::Config;
use crate::decision::{decide, outcome_label, Policy};

pub struct Sweeper {
    pub store: Store,
    pub providers: Arc<Providers>,
    pub owner: String,
    pub policy: Policy,
    pub lease: Duration,
    pub batch_size: usize,
    pub concurrency: usize,
}

impl Sweeper {
    /// One sweep; returns how many operations it claimed.
    pub async fn run_once(&self) -> Result<usize, opgate_store::StoreError> {
        // Approvals nobody gave fail first: nothing was ever sent for them.
        let expired = self
            .store
            .expire_approvals(&self.owner, self.batch_size as i64)
            .await?;
        if !expired.is_empty() {
            for _ in &expired {
                metrics().reconciliation("approval_expired");
            }
            tracing::info!(count = expired.len(), "approvals expired");
            if let Err(error) = self.store.notify_settled(&expired).await {
                tracing::debug!(%error, "could not announce expired approvals; waiters poll");
            }
        }
        let started = std::time::Instant::now();
        let claim = self
            .store
            .claim_due_reconciliations(
                &self.owner,
                self.lease,
                self.batch_size.min(self.concurrency) as i64,
            )
            .await;
        metrics().claim("reconciler", started.elapsed().as_secs_f64());
        let claimed = claim?;
        let count = claimed.len();
        // Everything claimed runs at once, so every lookup ends inside its lease.
        let settled: Vec<_> =
            futures_util::future::join_all(claimed.into_iter().map(|op| self.reconcile_traced(op)))
                .await
                .into_iter()
                .flatten()
                .collect();
        // One NOTIFY for the sweep, after the commits, for requests waiting on them.
        if let Err(error) = self.store.notify_settled(&settled).await {
            tracing::debug!(%error, "could not announce settled operations; waiters poll");
        }
        Ok(count)
    }

    /// One check in its own span, a child of the context the operation was registered
    /// with, so that the whole life of an operation (request, execution, every check)
    /// is one trace.
    async fn reconcile_traced(&self, op: ClaimedReconciliation) -> Option<uuid::Uuid> {
        let span = tracing::info_span!(
            "reconcile operation",
            otel.kind = "internal",
            opgate.operation_id = %op.operation_id,
            opgate.operation_type = %op.operation_type,
            opgate.provider = %op.provider,
            opgate.agent_id = %op.agent_id,
            opgate.fencing_token = op.fencing_token,
            opgate.check = op.checks,
            opgate.transition = tracing::field::Empty,
            opgate.provider_reference = tracing::field::Empty,
            opgate.reconciliation_outcome = tracing::field::Empty,
        );
        propagation::continue_trace(&span, op.trace_context.as_deref());
        self.reconcile(op).instrument(span).await
    }

    /// Returns the operation's id when it reached a terminal state.
    async fn reconcile(&self, op: ClaimedReconciliation) -> Option<uuid::Uuid> {
        let age = (Utc::now() - op.unknown_since).to_std().unwrap_or_default();
        let money = op.amount.zip(op.currency.clone());
        let instruction = Instruction::for_operation(
            op.operation_id,
            &op.operation_type,
            &op.payload,
            money.map(|(amount, currency)| (amount.to_string(), currency)),
            op.provider_reference.as_deref(),
        );
        let lookup = self.providers.lookup(&op.provider, &instruction).await;
        let verdict = decide(&lookup, op.checks.max(1) as u32, age, &self.policy);
        let outcome = outcome_label(&lookup, verdict.to);
        metrics().reconciliation(outcome);
        tracing::Span::current().record("opgate.reconciliation_outcome", outcome);
        let written = self
            .store
            .transition_with_fence(
                &self.owner,
                FencedTransition {
                    lease: op.lease(),
                    from: OperationStatus::Reconciling,
                    transition: verdict.clone(),
                },
            )
            .await;
        match written {
            Ok(FencedWrite::Applied) => {
                let span = tracing::Span::current();
                span.record("opgate.transition", format!("RECONCILING->{}", verdict.to));
                if let Some(reference) = &verdict.provider_reference {
                    span.record("opgate.provider_reference", reference.as_str());
                }
                tracing::info!(
                    operation_id = %op.operation_id, agent_id = %op.agent_id, check = op.checks,
                    status = %verdict.to,
                    next_check_ms = verdict.next_check_in.map(|d| d.as_millis() as u64),
                    "reconciled"
                );
                return verdict.to.is_terminal().then_some(op.operation_id);
            }
            Ok(FencedWrite::RejectedStale) => {
                metrics().stale_write_rejected("reconciler");
                tracing::warn!(
                    operation_id = %op.operation_id, fencing_token = op.fencing_token,
                    "stale write rejected by the fencing token"
                )
            }
            // The lease expires and another sweep rescues the operation.
            Err(error) => {
                tracing::warn!(operation_id = %op.operation_id, %error, "could not record the verdict")
            }
        }
        None
    }
}

/// Sweeps until `shutdown` resolves; a sweep in progress is finished first (each
/// lookup is bounded by the provider timeouts, inside the lease).
pub async fn run(
    config: Config,
    store: Store,
    providers: Arc<Providers>,
    owner: String,
    shutdown: impl Future<Output = ()>,
) {
    let sweeper = Sweeper {
        store,
        providers,
        owner,
        policy: config.policy(),
        lease: config.lease,
        batch_size: config.batch_size,
        concurrency: config.concurrency,
    };
    tokio::pin!(shutdown);
    let mut failures = 0u32;
    loop {
        let pause = match sweeper.run_once().await {
            Ok(claimed) if claimed >= config.batch_size => Duration::ZERO,
            Ok(_) => {
                failures = 0;
                config.interval
            }
            Err(error) => {
                failures += 1;
                tracing::warn!(%error, "sweep failed");
                (config.interval * failures).min(Duration::from_secs(30))
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = &mut shutdown => break,
        }
    }
}
