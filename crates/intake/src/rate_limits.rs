//! Per-agent rate limits, enforced in this intake replica before any database work.
//! An agent's limit comes from its row, read when its key is first authenticated (and
//! again once `REFRESH_AFTER` has passed, so that a changed limit takes effect); after
//! that, each request's key is checked against the cached hash in memory and counted
//! against the agent's GCRA limiter (`governor`). Only valid keys spend an agent's
//! allowance, so another party knowing its key id cannot exhaust it. An agent's keys
//! (its current one and, during a rotation's grace, its previous one) share one
//! allowance. Each replica counts on its own: N replicas admit up to N times the limit.
//!
//! The same entry remembers the agent as read (its policy and its row's version), so
//! that a registration can skip reading it again: the registration's statement then
//! confirms the row is unchanged (`opgate_store::AgentCheck`), and anything it cannot
//! confirm is judged again on a fresh read (`auth::Reading`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use opgate_domain::{AgentPolicy, ApiKey, RateLimit};
use opgate_store::AgentCheck;

use crate::problem::Problem;

/// How long a cached limit is trusted before the agent's row is read again.
const REFRESH_AFTER: Duration = Duration::from_secs(30);

type Limiter = RateLimiter<NotKeyed, InMemoryState, DefaultClock, StateInformationMiddleware>;

/// What is known of one key: whose it is, and when that was read.
struct KeyEntry {
    api_key_hash: String,
    agent_id: String,
    read_at: Instant,
    /// The agent's policy and row version as read; `None` where the store gives no
    /// version to check against (Citus).
    remembered: Option<(AgentPolicy, i64)>,
}

/// An agent as last read for a key, to be confirmed by the registration's statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RememberedAgent {
    pub agent_id: String,
    pub policy: AgentPolicy,
    pub check: AgentCheck,
}

/// One agent's limit and what is left of it, shared by all its keys.
struct AgentEntry {
    limit: Option<RateLimit>,
    limiter: Option<Arc<Limiter>>,
}

#[derive(Default)]
struct Entries {
    by_key_id: HashMap<String, KeyEntry>,
    by_agent_id: HashMap<String, AgentEntry>,
}

/// What the cache could say before the database was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Counted against a known limit (or the agent has none): go on.
    Admitted,
    /// Admitted, and the agent as last read (`RememberedAgent`).
    Remembered(RememberedAgent),
    /// Nothing fresh is known about this key: ask the database, then `after_read`.
    Unknown,
}

#[derive(Clone, Default)]
pub struct AgentLimiters {
    entries: Arc<Mutex<Entries>>,
}

impl AgentLimiters {
    /// Counts the request if this key's limit is known and fresh; a 429 problem when the
    /// agent is over it. The agent as last read comes back (`Admission::Remembered`)
    /// only when `remembered_wanted`: a request that reads the agent anyway does not
    /// pay for a copy of its policy.
    pub fn admit_cached(
        &self,
        key: &ApiKey,
        remembered_wanted: bool,
    ) -> Result<Admission, Problem> {
        let (limiter, admitted) = {
            let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            let known = entries.by_key_id.get(key.key_id()).filter(|entry| {
                entry.read_at.elapsed() < REFRESH_AFTER && key.matches_hash(&entry.api_key_hash)
            });
            let Some(known) = known else {
                return Ok(Admission::Unknown);
            };
            let admitted = match &known.remembered {
                Some((policy, row_version)) if remembered_wanted => {
                    Admission::Remembered(RememberedAgent {
                        agent_id: known.agent_id.clone(),
                        policy: policy.clone(),
                        check: AgentCheck {
                            key_id: key.key_id().to_owned(),
                            row_version: *row_version,
                        },
                    })
                }
                _ => Admission::Admitted,
            };
            match entries.by_agent_id.get(&known.agent_id) {
                Some(AgentEntry {
                    limiter: Some(limiter),
                    limit: Some(limit),
                }) => ((limiter.clone(), *limit), admitted),
                Some(_) => return Ok(admitted),
                None => return Ok(Admission::Unknown),
            }
        };
        check(&limiter.0, limiter.1).map(|()| admitted)
    }

    /// Forgets what is known of this key (its agent no longer accepts it).
    pub fn forget(&self, key: &ApiKey) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.by_key_id.remove(key.key_id());
    }

    /// After the database authenticated the key as `agent_id`'s: remember the agent
    /// (its policy, and its row's version when there is one) and its limit and, if the
    /// cache could not count this request, count it now.
    pub fn after_read(
        &self,
        key: &ApiKey,
        api_key_hash: &str,
        agent_id: &str,
        policy: &AgentPolicy,
        row_version: Option<i64>,
        admission: &Admission,
    ) -> Result<(), Problem> {
        let limit = policy.rate_limit;
        let limiter = {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            entries.by_key_id.insert(
                key.key_id().to_owned(),
                KeyEntry {
                    api_key_hash: api_key_hash.to_owned(),
                    agent_id: agent_id.to_owned(),
                    read_at: Instant::now(),
                    remembered: row_version.map(|version| (policy.clone(), version)),
                },
            );
            let agent = entries
                .by_agent_id
                .entry(agent_id.to_owned())
                .or_insert(AgentEntry {
                    limit: None,
                    limiter: None,
                });
            // A changed limit starts a fresh limiter; an unchanged one keeps its state,
            // so a refresh grants no extra burst.
            if agent.limit != limit || (agent.limiter.is_none() && limit.is_some()) {
                agent.limiter = limit.map(|limit| Arc::new(limiter_for(limit)));
                agent.limit = limit;
            }
            agent.limiter.clone().zip(agent.limit)
        };
        match (admission, limiter) {
            (Admission::Unknown, Some((limiter, limit))) => check(&limiter, limit),
            _ => Ok(()),
        }
    }
}

fn limiter_for(limit: RateLimit) -> Limiter {
    let burst = std::num::NonZeroU32::new(limit.burst()).unwrap_or(std::num::NonZeroU32::MIN);
    let quota = Quota::with_period(limit.replenish_interval())
        .expect("a rate limit's interval is never zero")
        .allow_burst(burst);
    RateLimiter::direct(quota).with_middleware::<StateInformationMiddleware>()
}

fn check(limiter: &Limiter, limit: RateLimit) -> Result<(), Problem> {
    match limiter.check() {
        Ok(_) => Ok(()),
        Err(not_until) => {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            Err(Problem::rate_limited(limit, wait))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opgate_domain::KeyKind;

    fn with_limit(rate_limit: Option<RateLimit>) -> AgentPolicy {
        AgentPolicy {
            allowed_operations: Vec::new(),
            max_amounts: Default::default(),
            rate_limit,
            daily_budgets: Default::default(),
            approval_above: Default::default(),
        }
    }

    #[test]
    fn a_burst_is_admitted_then_the_rest_refused_until_the_allowance_refills() {
        let limiters = AgentLimiters::default();
        let key = ApiKey::generate(KeyKind::Agent);
        let limit = RateLimit::parse("1/m", Some(3)).unwrap();
        assert_eq!(
            limiters.admit_cached(&key, true).unwrap(),
            Admission::Unknown
        );
        limiters
            .after_read(
                &key,
                &key.hash(),
                "agent-1",
                &with_limit(Some(limit)),
                None,
                &Admission::Unknown,
            )
            .unwrap();
        assert_eq!(
            limiters.admit_cached(&key, true).unwrap(),
            Admission::Admitted
        );
        assert_eq!(
            limiters.admit_cached(&key, true).unwrap(),
            Admission::Admitted
        );
        let refused = limiters.admit_cached(&key, true).unwrap_err();
        assert_eq!(refused.status, 429);
    }

    #[test]
    fn an_agents_keys_share_one_allowance() {
        let limiters = AgentLimiters::default();
        let (old, new) = (
            ApiKey::generate(KeyKind::Agent),
            ApiKey::generate(KeyKind::Agent),
        );
        let limit = RateLimit::parse("1/m", Some(2)).unwrap();
        limiters
            .after_read(
                &old,
                &old.hash(),
                "agent-3",
                &with_limit(Some(limit)),
                None,
                &Admission::Unknown,
            )
            .unwrap();
        limiters
            .after_read(
                &new,
                &new.hash(),
                "agent-3",
                &with_limit(Some(limit)),
                None,
                &Admission::Unknown,
            )
            .unwrap();
        assert_eq!(limiters.admit_cached(&old, true).unwrap_err().status, 429);
        assert_eq!(limiters.admit_cached(&new, true).unwrap_err().status, 429);
    }

    #[test]
    fn a_wrong_secret_spends_nothing_and_no_limit_admits_all() {
        let limiters = AgentLimiters::default();
        let key = ApiKey::generate(KeyKind::Agent);
        limiters
            .after_read(
                &key,
                &key.hash(),
                "agent-2",
                &with_limit(None),
                None,
                &Admission::Unknown,
            )
            .unwrap();
        for _ in 0..100 {
            assert_eq!(
                limiters.admit_cached(&key, true).unwrap(),
                Admission::Admitted
            );
        }
        let forged = ApiKey::parse(&format!("opg_{}_{}", key.key_id(), "0".repeat(64)));
        if let Ok(forged) = forged {
            assert_eq!(
                limiters.admit_cached(&forged, true).unwrap(),
                Admission::Unknown
            );
        }
    }

    #[test]
    fn an_agent_is_remembered_with_its_row_version_and_only_for_its_key() {
        let limiters = AgentLimiters::default();
        let (key, other) = (
            ApiKey::generate(KeyKind::Agent),
            ApiKey::generate(KeyKind::Agent),
        );
        let policy = with_limit(None);
        limiters
            .after_read(
                &key,
                &key.hash(),
                "agent-4",
                &policy,
                Some(7),
                &Admission::Unknown,
            )
            .unwrap();
        limiters
            .after_read(
                &other,
                &other.hash(),
                "agent-5",
                &policy,
                None,
                &Admission::Unknown,
            )
            .unwrap();
        let expected = RememberedAgent {
            agent_id: "agent-4".into(),
            policy,
            check: AgentCheck {
                key_id: key.key_id().to_owned(),
                row_version: 7,
            },
        };
        assert_eq!(
            limiters.admit_cached(&key, true).unwrap(),
            Admission::Remembered(expected)
        );
        // A request that reads the agent anyway is counted, and gets no copy.
        assert_eq!(
            limiters.admit_cached(&key, false).unwrap(),
            Admission::Admitted
        );
        // Without a row version (Citus) the agent is counted, never remembered.
        assert_eq!(
            limiters.admit_cached(&other, true).unwrap(),
            Admission::Admitted
        );
        limiters.forget(&key);
        assert_eq!(
            limiters.admit_cached(&key, true).unwrap(),
            Admission::Unknown
        );
    }
}
