//! Bearer-key authentication. The key id finds the agent (or operator) row; the key's
//! SHA-256 is compared with the stored hash in constant time. An agent's key id is its
//! current one or, until the grace period of its last rotation ends, the previous one.
//! Missing, unknown, expired and revoked keys all get the same 401. A valid key of the wrong kind gets 403: agent
//! keys cannot reach `/admin`, operator keys cannot act as agents. A request that
//! carries `Authorization` more than once is refused with 400 before any of its values
//! is read: which one counts is what a proxy and intake could disagree on.

use actix_web::{web, HttpRequest};
use opgate_domain::{AgentPolicy, ApiKey, IdempotencyKey, KeyKind};
use opgate_store::{AgentCheck, OperationRecord, Store};

use crate::headers::single_header;
use crate::problem::Problem;
use crate::rate_limits::{Admission, AgentLimiters};
use crate::AppState;

#[derive(Clone)]
pub struct AuthenticatedAgent {
    pub agent_id: String,
    pub policy: AgentPolicy,
    /// Set when the agent was not read for this request but remembered from an earlier
    /// read (`Reading::UnlessRemembered`): what the registration must confirm.
    pub remembered: Option<AgentCheck>,
}

impl AuthenticatedAgent {
    /// Whether `problem` is a refusal by a remembered policy (403), which a fresh read
    /// may overturn (a grant or a higher limit set since).
    pub fn refused_from_memory(&self, problem: &Problem) -> bool {
        self.remembered.is_some() && problem.status == 403
    }
}

pub struct AuthenticatedOperator {
    pub operator_id: String,
}

/// Whether an agent's request reads the agent's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Always: the request acts on what it reads, with nothing to confirm it later.
    Always,
    /// Not when this intake read it recently for the same key: a registration, whose
    /// statement confirms the row is unchanged (`AuthenticatedAgent::remembered`).
    UnlessRemembered,
    /// Again, for a request whose remembered agent was not confirmed: read, and not
    /// counted against the rate limit a second time.
    Again,
}

pub async fn authenticate(
    request: &HttpRequest,
    store: &Store,
) -> Result<AuthenticatedAgent, Problem> {
    Ok(
        authenticate_with_existing(request, store, None, Reading::Always)
            .await?
            .0,
    )
}

/// Authenticates the agent and, in the same database round trip, finds the operation
/// its Idempotency-Key already names (only returned once the key is verified). A
/// remembered agent is not read, so nothing is found for it.
pub async fn authenticate_with_existing(
    request: &HttpRequest,
    store: &Store,
    idempotency_key: Option<&IdempotencyKey>,
    reading: Reading,
) -> Result<(AuthenticatedAgent, Option<OperationRecord>), Problem> {
    let key = presented_agent_key(request, store).await?;
    let limiters = request
        .app_data::<web::Data<AppState>>()
        .map(|state| &state.limiters);
    authenticate_agent_key(&key, limiters, store, idempotency_key, reading).await
}

/// The request's key, if it is an agent's: none, or an operator's, is refused as the
/// agents' API refuses it (401, or 403 for a valid operator key).
pub async fn presented_agent_key(request: &HttpRequest, store: &Store) -> Result<ApiKey, Problem> {
    let key = presented_key(request)?;
    match key.kind() {
        KeyKind::Agent => Ok(key),
        KeyKind::Operator => Err(operator_key_refused(store, &key).await),
    }
}

/// `authenticate_with_existing` for a key already taken from its request (an agent's),
/// counted by `limiters` when there are any.
pub async fn authenticate_agent_key(
    key: &ApiKey,
    limiters: Option<&AgentLimiters>,
    store: &Store,
    idempotency_key: Option<&IdempotencyKey>,
    reading: Reading,
) -> Result<(AuthenticatedAgent, Option<OperationRecord>), Problem> {
    // Over its rate limit, a known agent is refused before any database work.
    let admission = match (limiters, reading) {
        (Some(_), Reading::Again) | (None, _) => Admission::Admitted,
        (Some(limiters), _) => limiters.admit_cached(key, reading == Reading::UnlessRemembered)?,
    };
    if let (Admission::Remembered(agent), Reading::UnlessRemembered) = (&admission, reading) {
        let agent = AuthenticatedAgent {
            agent_id: agent.agent_id.clone(),
            policy: agent.policy.clone(),
            remembered: Some(agent.check.clone()),
        };
        return Ok((agent, None));
    }
    let Some(verified) = verified_agent(store, key, idempotency_key).await? else {
        if let Some(limiters) = limiters {
            limiters.forget(key);
        }
        return Err(Problem::unauthenticated());
    };
    if let Some(limiters) = limiters {
        limiters.after_read(
            key,
            &verified.api_key_hash,
            &verified.agent.agent_id,
            &verified.agent.policy,
            verified.row_version,
            &admission,
        )?;
    }
    Ok((verified.agent, verified.existing))
}

/// The answer to an operator's key where an agent's is needed.
async fn operator_key_refused(store: &Store, key: &ApiKey) -> Problem {
    match verified_operator(store, key).await {
        Ok(Some(_)) => Problem::wrong_key_kind(
            "Operator keys cannot request or read agents' operations; use an agent's \
             key here, or the admin API (/admin) with this one.",
        ),
        Ok(None) => Problem::unauthenticated(),
        Err(problem) => problem,
    }
}

pub async fn authenticate_operator(
    request: &HttpRequest,
    store: &Store,
) -> Result<AuthenticatedOperator, Problem> {
    let key = presented_key(request)?;
    match key.kind() {
        KeyKind::Operator => verified_operator(store, &key)
            .await?
            .ok_or_else(Problem::unauthenticated),
        KeyKind::Agent => match verified_agent(store, &key, None).await? {
            Some(_) => Err(Problem::wrong_key_kind(
                "Agent keys cannot use the admin API; it needs an operator key.",
            )),
            None => Err(Problem::unauthenticated()),
        },
    }
}

/// The bearer key the request presents, parsed; 401 when there is none.
fn presented_key(request: &HttpRequest) -> Result<ApiKey, Problem> {
    let presented = bearer_token(request)?.ok_or_else(Problem::unauthenticated)?;
    ApiKey::parse(presented).map_err(|_| Problem::unauthenticated())
}

/// An agent read for a request and verified against the presented key.
struct VerifiedAgent {
    agent: AuthenticatedAgent,
    /// The operation the request's Idempotency-Key names.
    existing: Option<OperationRecord>,
    /// The stored hash the key was verified against.
    api_key_hash: String,
    row_version: Option<i64>,
}

async fn verified_agent(
    store: &Store,
    key: &ApiKey,
    idempotency_key: Option<&IdempotencyKey>,
) -> Result<Option<VerifiedAgent>, Problem> {
    let found = store
        .find_agent_request_context(key.key_id(), idempotency_key.map(IdempotencyKey::as_str))
        .await?;
    let Some(context) = found else {
        return Ok(None);
    };
    // The hash of the key this key id names: the agent's current key or, during a
    // rotation's grace period, its previous one. Every request is verified here against
    // the row just read, or against the one remembered and confirmed by the
    // registration's statement; the rate limiter's cache only counts.
    Ok(key
        .matches_hash(&context.presented_key_hash)
        .then_some(VerifiedAgent {
            agent: AuthenticatedAgent {
                agent_id: context.agent.agent_id,
                policy: context.agent.policy,
                remembered: None,
            },
            existing: context.existing,
            api_key_hash: context.presented_key_hash,
            row_version: context.row_version,
        }))
}

async fn verified_operator(
    store: &Store,
    key: &ApiKey,
) -> Result<Option<AuthenticatedOperator>, Problem> {
    let Some(operator) = store.find_active_operator_by_key_id(key.key_id()).await? else {
        return Ok(None);
    };
    Ok(key
        .matches_hash(&operator.api_key_hash)
        .then_some(AuthenticatedOperator {
            operator_id: operator.operator_id,
        }))
}

/// The bearer token of the one `Authorization` header; `None` when there is none.
fn bearer_token(request: &HttpRequest) -> Result<Option<&str>, Problem> {
    let Some(value) = single_header(request, "Authorization")? else {
        return Ok(None);
    };
    let Some((scheme, token)) = value.to_str().ok().and_then(|v| v.trim().split_once(' ')) else {
        return Ok(None);
    };
    Ok(scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|token| !token.is_empty()))
}
