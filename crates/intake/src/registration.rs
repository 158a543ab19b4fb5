//! The one registration path for every kind and both doors (`POST
//! /agent/operations/{kind}` and MCP's `request_<kind>` tools). Each kind contributes
//! only its part (its body, validated into an `OperationRequest`); grants, replays,
//! registration exactly once per (agent, key), budgets, approvals and the group commit
//! are shared. Every refusal happens before anything is written; the write itself is
//! one transaction in the store.

use opgate_catalog::{Catalog, DeclaredKind};
use opgate_domain::{BuiltinKind, IdempotencyKey, OperationRequest};
use opgate_store::{
    BatchAnswer, BudgetedRegistration, NewOperation, NewRefund, OperationRecord, PendingBudgeted,
    PendingRegistration, Registration,
};
use opgate_telemetry::metrics;

use crate::auth::AuthenticatedAgent;
use crate::body::{parse_object_value, require_exact_number};
use crate::problem::Problem;
use crate::routes::{payments, refunds};
use crate::AppState;

/// The kind a request names: built in, or declared in the catalog.
#[derive(Clone, Copy)]
pub enum Kind<'a> {
    Builtin(BuiltinKind),
    Declared(&'a DeclaredKind),
}

impl<'a> Kind<'a> {
    /// The kind called `name`, if there is one (else 404 `unknown-kind`).
    pub fn named(catalog: &'a Catalog, name: &str) -> Result<Self, Problem> {
        match BuiltinKind::parse(name) {
            Some(builtin) => Ok(Self::Builtin(builtin)),
            None => catalog
                .kind(name)
                .map(Self::Declared)
                .ok_or_else(|| Problem::unknown_kind(name)),
        }
    }

    /// The kind called `name`, if there is one and this agent may request it.
    pub fn permitted(
        catalog: &'a Catalog,
        agent: &AuthenticatedAgent,
        name: &str,
    ) -> Result<Self, Problem> {
        let kind = Self::named(catalog, name)?;
        agent
            .policy
            .permits_operation(kind.name())
            .map_err(|denial| Problem::forbidden(denial.to_string()))?;
        Ok(kind)
    }

    pub fn name(&self) -> &str {
        match self {
            Self::Builtin(kind) => kind.as_str(),
            Self::Declared(kind) => kind.name().as_str(),
        }
    }

    /// Every kind there is, built in first.
    pub fn all(catalog: &'a Catalog) -> impl Iterator<Item = Kind<'a>> {
        [
            Self::Builtin(BuiltinKind::Payment),
            Self::Builtin(BuiltinKind::Refund),
        ]
        .into_iter()
        .chain(catalog.kinds().map(Self::Declared))
    }
}

/// One request to register, as either door received it.
pub struct Submission<'a> {
    pub agent: &'a AuthenticatedAgent,
    pub kind: Kind<'a>,
    pub idempotency_key: &'a IdempotencyKey,
    /// The body as JSON text: the kind's schema.
    pub body: &'a [u8],
    /// The operation the key already names, when the caller read it while
    /// authenticating; `None` lets the registration statement find it.
    pub existing: Option<OperationRecord>,
    /// The W3C trace context carried to the executor and reconciler.
    pub traceparent: Option<String>,
}

/// What a registration did: a new operation, or the one the key already named.
pub struct Registered {
    pub record: OperationRecord,
    pub replayed: bool,
}

/// The end of a registration: answered, or to be judged again on a fresh read of the
/// agent (`Reading::Again`) because it was remembered and nothing confirmed it.
// One answer per request, moved once, as `opgate_store::Registration`.
#[allow(clippy::large_enum_variant)]
pub enum Registering {
    Answered(Result<Registered, Problem>),
    ReadAgentAgain,
}

impl Registering {
    /// The answer for an agent read in this request (`Reading::Always`), which is
    /// never sent to be read again.
    pub fn for_agent_read(self) -> Result<Registered, Problem> {
        match self {
            Self::Answered(answer) => answer,
            Self::ReadAgentAgain => Err(Problem::internal()),
        }
    }
}

/// A request validated by its kind, ready to register.
enum Prepared {
    /// Registered by the shared statement (group-committed when enabled).
    Plain {
        request: OperationRequest,
        provider: String,
    },
    /// Registered in its own transaction that reads the payment, parses the refund in
    /// its currency and reserves the amount on it.
    Refund(refunds::PreparedRefund),
}

/// Validates the body by its kind and registers it once per (agent, key): a new
/// operation (its executors woken after the commit), the existing one for a replay, or
/// the problem that refused it with nothing written.
///
/// For a remembered agent (`AuthenticatedAgent::remembered`) only what its statement
/// confirms is answered: a write that cannot check the agent's row, a refusal by the
/// remembered policy (403) and an unconfirmed registration (a refund's included) all
/// come back as `ReadAgentAgain`, with nothing written.
pub async fn register(state: &AppState, submission: Submission<'_>) -> Registering {
    let agent = submission.agent;
    match register_once(state, submission).await {
        Err(Refusal {
            problem,
            confirmed: false,
        }) if agent.refused_from_memory(&problem) => Registering::ReadAgentAgain,
        Ok(None) => Registering::ReadAgentAgain,
        Ok(Some(registered)) => Registering::Answered(Ok(registered)),
        Err(refusal) => Registering::Answered(Err(refusal.problem)),
    }
}

/// Why a registration was refused, and whether the database judged it against the
/// agent's row as it is (a budgeted batch confirms a remembered agent's row before it
/// refuses over the budget): such a refusal stands without reading the agent again.
struct Refusal {
    problem: Problem,
    confirmed: bool,
}

impl From<Problem> for Refusal {
    fn from(problem: Problem) -> Self {
        Self {
            problem,
            confirmed: false,
        }
    }
}

impl From<opgate_store::StoreError> for Refusal {
    fn from(error: opgate_store::StoreError) -> Self {
        Problem::from(error).into()
    }
}

/// `register`; `None` for a remembered agent that nothing confirmed.
async fn register_once(
    state: &AppState,
    submission: Submission<'_>,
) -> Result<Option<Registered>, Refusal> {
    let Submission {
        agent,
        kind,
        idempotency_key,
        body,
        existing,
        traceparent,
    } = submission;
    let prepared = prepare(state, agent, kind, body)?;
    let registration = match (existing, &prepared) {
        // The key was already taken when the request was authenticated: a replay, or
        // a reuse, answered from that read without writing. (A refund's request is
        // known only in its payment's currency: its transaction looks the key up
        // again, under the payment's lock.)
        (Some(existing), Prepared::Plain { request, .. }) => {
            if existing.request_hash == *request.request_hash() {
                Registration::Replayed(existing)
            } else {
                Registration::KeyReused
            }
        }
        _ => {
            let written = write(
                state,
                agent,
                idempotency_key,
                &prepared,
                traceparent.as_deref(),
            )
            .await?;
            let Some(registration) = written else {
                return Ok(None);
            };
            registration
        }
    };
    match registration {
        Registration::Created(record) => {
            // After the commit, never inside it: see wakeups.rs.
            state.executor_waker.operation_created();
            tracing::info!(agent_id = %agent.agent_id, operation_id = %record.operation_id, kind = %record.operation_type, "operation registered");
            Ok(Some(Registered {
                record,
                replayed: false,
            }))
        }
        Registration::Replayed(record) => {
            metrics().duplicate_prevented();
            tracing::info!(agent_id = %agent.agent_id, operation_id = %record.operation_id, status = %record.status, "idempotent replay");
            Ok(Some(Registered {
                record,
                replayed: true,
            }))
        }
        Registration::KeyReused => {
            tracing::info!(agent_id = %agent.agent_id, "idempotency key reused with a different request");
            Err(Problem::key_reused().into())
        }
    }
}

fn prepare(
    state: &AppState,
    agent: &AuthenticatedAgent,
    kind: Kind<'_>,
    body: &[u8],
) -> Result<Prepared, Problem> {
    Ok(match kind {
        Kind::Builtin(BuiltinKind::Payment) => Prepared::Plain {
            request: payments::parse(body, &agent.policy)?,
            provider: state.payment_provider.clone(),
        },
        Kind::Builtin(BuiltinKind::Refund) => Prepared::Refund(refunds::prepare(body)?),
        Kind::Declared(declared) => {
            if let Some(money) = declared.money() {
                require_exact_number(body, &money.amount_member())?;
            }
            let request = declared
                .validate(&parse_object_value(body)?)
                .map_err(|e| Problem::invalid_body(e.to_string()))?;
            if let Some(money) = request.money() {
                agent
                    .policy
                    .permits_amount(money)
                    .map_err(|denial| Problem::forbidden(denial.to_string()))?;
            }
            Prepared::Plain {
                request,
                provider: declared.provider().to_owned(),
            }
        }
    })
}

/// The write: group-committed (budgeted ones in batches of their own) or on its own for
/// a plain request; the refund transaction for a refund. `None`: the agent was
/// remembered, and this write could not confirm it (the group-committed ones and the
/// refund transaction check the agent's row; a plain write on its own does not).
async fn write(
    state: &AppState,
    agent: &AuthenticatedAgent,
    idempotency_key: &IdempotencyKey,
    prepared: &Prepared,
    traceparent: Option<&str>,
) -> Result<Option<Registration>, Refusal> {
    let (request, provider) = match prepared {
        Prepared::Plain { request, provider } => (request, provider),
        Prepared::Refund(refund) => {
            let new = NewRefund {
                operation_id: opgate_domain::new_operation_id(),
                agent_id: &agent.agent_id,
                idempotency_key,
                payment_operation_id: refund.payment_operation_id,
                amount: refund.amount.as_deref(),
                reason: refund.reason.as_deref(),
                trace_context: traceparent,
                agent_check: agent.remembered.as_ref(),
            };
            return Ok(refunds::answer(state.store.register_refund(&new).await?)?);
        }
    };
    // Above the agent's threshold, nothing is sent before an operator approves.
    let awaiting_approval_for = request
        .money()
        .filter(|money| agent.policy.needs_approval(*money))
        .map(|_| state.approval_timeout);
    let new = NewOperation {
        operation_id: opgate_domain::new_operation_id(),
        agent_id: &agent.agent_id,
        idempotency_key,
        request,
        provider,
        awaiting_approval_for,
        trace_context: traceparent,
    };
    let budget = request
        .money()
        .and_then(|money| agent.policy.daily_budget_for(money).map(|b| (money, b)));
    Ok(Some(match (budget, &state.batcher) {
        (Some((money, budget)), _) => {
            // A remembered agent is confirmed by the batch, under the agent's lock.
            let registered = match (&state.budgeted_batcher, &agent.remembered) {
                (Some(batcher), check) => {
                    let pending = PendingBudgeted::from_new(&new, budget);
                    let pending = match check {
                        Some(check) => pending.checked_against(check.clone()),
                        None => pending,
                    };
                    batcher.submit(pending).await?
                }
                (None, Some(_)) => return Ok(None),
                (None, None) => state.store.register_within_budget(&new, budget).await,
            };
            match registered? {
                BudgetedRegistration::Registered(registration) => registration,
                BudgetedRegistration::Unconfirmed => return Ok(None),
                BudgetedRegistration::Exceeded { frees_at, .. } => {
                    let retry_after =
                        frees_at.map(|at| (at - chrono::Utc::now()).num_seconds().max(1) as u64);
                    // Judged under the agent's lock against its row as it is: read for
                    // this request, or remembered and confirmed by the batch.
                    return Err(Refusal {
                        problem: Problem::budget_exceeded(
                            &budget.to_string(),
                            money.currency().code(),
                            retry_after,
                        ),
                        confirmed: true,
                    });
                }
            }
        }
        // (On Citus the batch commits shard by shard, each part on its node alone:
        // docs/scale-out.md.)
        (None, Some(batcher)) if awaiting_approval_for.is_none() => {
            let pending = PendingRegistration::from_new(&new);
            let pending = match &agent.remembered {
                Some(check) => pending.checked_against(check.clone()),
                None => pending,
            };
            match batcher.submit(pending).await? {
                BatchAnswer::Registered(registration) => registration,
                BatchAnswer::Unconfirmed => return Ok(None),
            }
        }
        (None, _) if agent.remembered.is_some() => return Ok(None),
        (None, _) => state.store.register_operation(&new).await?,
    }))
}
