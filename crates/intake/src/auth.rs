//! Bearer-key authentication. The key id finds the agent (or operator) row; the key's
//! SHA-256 is compared with the stored hash in constant time. An agent's key id is its
//! current one or, until the grace period of its last rotation ends, the previous one.
//! Missing, unknown, expired and revoked keys all get the same 401. A valid key of the wrong kind gets 403: agent
//! keys cannot reach `/admin`, operator keys cannot act as agents. A request that
//! carries `Authorization` more than once is refused with 400 before any of its values
//! is read: which one counts is what a proxy and intake could disagree on.

use actix_web::{web, HttpRequest};
use opgate_domain::{AgentPolicy, ApiKey, IdempotencyKey, KeyKind};
use opgate_store::{OperationRecord, Store};

use crate::headers::single_header;
use crate::problem::Problem;
use crate::rate_limits::Admission;
use crate::AppState;

pub struct AuthenticatedAgent {
    pub agent_id: String,
    pub policy: AgentPolicy,
}

pub struct AuthenticatedOperator {
    pub operator_id: String,
}

pub async fn authenticate(
    request: &HttpRequest,
    store: &Store,
) -> Result<AuthenticatedAgent, Problem> {
    Ok(authenticate_with_existing(request, store, None).await?.0)
}

/// Authenticates the agent and, in the same database round trip, finds the operation
/// its Idempotency-Key already names (only returned once the key is verified).
pub async fn authenticate_with_existing(
    request: &HttpRequest,
    store: &Store,
    idempotency_key: Option<&IdempotencyKey>,
) -> Result<(AuthenticatedAgent, Option<OperationRecord>), Problem> {
    let key = presented_key(request)?;
    match key.kind() {
        KeyKind::Agent => {
            // Over its rate limit, a known agent is refused before any database work.
            let limiters = request
                .app_data::<web::Data<AppState>>()
                .map(|state| state.limiters.clone());
            let admission = match &limiters {
                Some(limiters) => limiters.admit_cached(&key)?,
                None => Admission::Admitted,
            };
            let (agent, existing, api_key_hash) = verified_agent(store, &key, idempotency_key)
                .await?
                .ok_or_else(Problem::unauthenticated)?;
            if let Some(limiters) = limiters {
                limiters.after_read(
                    &key,
                    &api_key_hash,
                    &agent.agent_id,
                    agent.policy.rate_limit,
                    admission,
                )?;
            }
            Ok((agent, existing))
        }
        KeyKind::Operator => match verified_operator(store, &key).await? {
            Some(_) => Err(Problem::wrong_key_kind(
                "Operator keys cannot request or read agents' operations; use an agent's \
                 key here, or the admin API (/admin) with this one.",
            )),
            None => Err(Problem::unauthenticated()),
        },
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

fn presented_key(request: &HttpRequest) -> Result<ApiKey, Problem> {
    let presented = bearer_token(request)?.ok_or_else(Problem::unauthenticated)?;
    ApiKey::parse(presented).map_err(|_| Problem::unauthenticated())
}

/// The agent, the operation its Idempotency-Key names, and its stored key hash.
type VerifiedAgent = (AuthenticatedAgent, Option<OperationRecord>, String);

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
    // the row just read; the rate limiter's cache only counts.
    Ok(key.matches_hash(&context.presented_key_hash).then(|| {
        let agent = AuthenticatedAgent {
            agent_id: context.agent.agent_id,
            policy: context.agent.policy,
        };
        (agent, context.existing, context.presented_key_hash)
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
