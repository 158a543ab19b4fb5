//! Bearer-key authentication against the `agents` table: the key id finds the agent,
//! the key's SHA-256 is compared with the stored hash in constant time. Missing,
//! unknown and revoked keys all get the same 401.

use actix_web::http::header;
use actix_web::HttpRequest;
use opgate_domain::{AgentKey, AgentPolicy};
use opgate_store::Store;

use crate::problem::Problem;

pub struct AuthenticatedAgent {
    pub agent_id: String,
    pub policy: AgentPolicy,
}

pub async fn authenticate(
    request: &HttpRequest,
    store: &Store,
) -> Result<AuthenticatedAgent, Problem> {
    let presented = bearer_token(request).ok_or_else(Problem::unauthenticated)?;
    let key = AgentKey::parse(presented).map_err(|_| Problem::unauthenticated())?;
    let agent = store
        .find_active_agent_by_key_id(key.key_id())
        .await?
        .ok_or_else(Problem::unauthenticated)?;
    if !key.matches_hash(&agent.api_key_hash) {
        return Err(Problem::unauthenticated());
    }
    Ok(AuthenticatedAgent {
        agent_id: agent.agent_id,
        policy: agent.policy,
    })
}

fn bearer_token(request: &HttpRequest) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|token| !token.is_empty())
}
