//! `opgate agents create|update|rotate|list|revoke`.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Subcommand;
use opgate_catalog::Catalog;
use opgate_domain::{
    AgentId, AgentPolicy, ApiKey, BuiltinKind, Currency, KeyKind, KindName, Money, RateLimit,
};
use opgate_store::{AgentUpdate, NewAgent, Store};
use rust_decimal::Decimal;

#[derive(Subcommand)]
pub enum AgentsCommand {
    /// Create an agent and print its new API key on stdout, once. Store it now: only
    /// its hash is kept.
    Create {
        agent_id: String,
        /// Operation kinds the agent may request (repeatable): payment, refund, or a
        /// kind of the catalog (`--catalog`); `none` for an agent that may only read its
        /// operations.
        #[arg(long = "allow", default_values_t = vec!["payment".to_string()])]
        allow: Vec<String>,
        /// Per-currency maximum amount, as CURRENCY:AMOUNT (repeatable), e.g.
        /// USD:1000.00. Once any is set, currencies not listed are refused.
        #[arg(long = "max-amount")]
        max_amount: Vec<String>,
        /// The most the agent may spend per currency over any 24 hours, as
        /// CURRENCY:AMOUNT (repeatable), e.g. USD:5000.00. Refunds and FAILED operations
        /// do not count; over it, requests get 403 budget-exceeded.
        #[arg(long = "daily-budget")]
        daily_budget: Vec<String>,
        /// Amount per currency above which an operation waits for an operator's
        /// approval before anything is sent, as CURRENCY:AMOUNT (repeatable).
        #[arg(long = "approval-above")]
        approval_above: Vec<String>,
        /// Requests the agent may make, as N/s or N/m (e.g. 50/s), enforced by each
        /// intake replica; excess requests get 429. No limit when absent.
        #[arg(long = "rate-limit")]
        rate_limit: Option<String>,
        /// Requests that may arrive at once within the rate limit (default: N).
        #[arg(long = "rate-limit-burst", requires = "rate_limit")]
        rate_limit_burst: Option<u32>,
    },
    /// Change an active agent's settings: each setting given replaces that setting
    /// (all its currencies), settings not given are kept. Running intake replicas apply
    /// the change to the agent's next request (a rate limit within 30 seconds); no
    /// restart is needed.
    Update {
        agent_id: String,
        /// Operation kinds the agent may request (repeatable), replacing its kinds; as
        /// for create, `none` for an agent that may only read its operations.
        #[arg(long = "allow")]
        allow: Vec<String>,
        /// Per-currency maximum amounts (repeatable), replacing all of them.
        #[arg(long = "max-amount", conflicts_with = "clear_max_amounts")]
        max_amount: Vec<String>,
        /// Removes every maximum amount.
        #[arg(long)]
        clear_max_amounts: bool,
        /// Daily budgets per currency (repeatable), replacing all of them.
        #[arg(long = "daily-budget", conflicts_with = "clear_daily_budgets")]
        daily_budget: Vec<String>,
        /// Removes every daily budget.
        #[arg(long)]
        clear_daily_budgets: bool,
        /// Approval thresholds per currency (repeatable), replacing all of them.
        #[arg(long = "approval-above", conflicts_with = "clear_approval_above")]
        approval_above: Vec<String>,
        /// Removes every approval threshold.
        #[arg(long)]
        clear_approval_above: bool,
        /// The new rate limit, as N/s or N/m.
        #[arg(long = "rate-limit", conflicts_with = "no_rate_limit")]
        rate_limit: Option<String>,
        /// Requests that may arrive at once within the new rate limit (default: N).
        #[arg(long = "rate-limit-burst", requires = "rate_limit")]
        rate_limit_burst: Option<u32>,
        /// Removes the rate limit.
        #[arg(long)]
        no_rate_limit: bool,
    },
    /// Give an agent a new API key, printed on stdout once (only its hash is kept). The
    /// old key stops at once, or at the end of `--grace`.
    Rotate {
        agent_id: String,
        /// How long the old key keeps working, e.g. 10m, 90s, 1h (default: 0, it stops
        /// at once). A later rotation ends any grace period still running.
        #[arg(long, default_value = "0", value_parser = parse_grace)]
        grace: Duration,
    },
    /// List agents (never their keys).
    List,
    /// Revoke an agent's key: its requests get 401 from now on.
    Revoke { agent_id: String },
}

pub async fn run(store: &Store, catalog: &Catalog, command: AgentsCommand) -> anyhow::Result<()> {
    match command {
        AgentsCommand::Create {
            agent_id,
            allow,
            max_amount,
            daily_budget,
            approval_above,
            rate_limit,
            rate_limit_burst,
        } => {
            let rate_limit = rate_limit
                .map(|text| RateLimit::parse(&text, rate_limit_burst))
                .transpose()?;
            let limits = Limits {
                max_amounts: parse_amounts("--max-amount", &max_amount)?,
                daily_budgets: parse_amounts("--daily-budget", &daily_budget)?,
                approval_above: parse_amounts("--approval-above", &approval_above)?,
                rate_limit,
            };
            create(store, catalog, &agent_id, &allow, limits).await
        }
        AgentsCommand::Update {
            agent_id,
            allow,
            max_amount,
            clear_max_amounts,
            daily_budget,
            clear_daily_budgets,
            approval_above,
            clear_approval_above,
            rate_limit,
            rate_limit_burst,
            no_rate_limit,
        } => {
            let replaced = |flag: &str, specs: &[String], clear: bool| {
                anyhow::Ok(if clear {
                    Some(BTreeMap::new())
                } else if specs.is_empty() {
                    None
                } else {
                    Some(parse_amounts(flag, specs)?)
                })
            };
            let rate_limit = match rate_limit {
                Some(text) => Some(Some(RateLimit::parse(&text, rate_limit_burst)?)),
                None if no_rate_limit => Some(None),
                None => None,
            };
            let update = AgentUpdate {
                allowed_operations: if allow.is_empty() {
                    None
                } else {
                    Some(allowed_kinds(catalog, &allow)?)
                },
                max_amounts: replaced("--max-amount", &max_amount, clear_max_amounts)?,
                daily_budgets: replaced("--daily-budget", &daily_budget, clear_daily_budgets)?,
                approval_above: replaced(
                    "--approval-above",
                    &approval_above,
                    clear_approval_above,
                )?,
                rate_limit,
            };
            update_agent(store, &agent_id, &update).await
        }
        AgentsCommand::Rotate { agent_id, grace } => rotate(store, &agent_id, grace).await,
        AgentsCommand::List => list(store).await,
        AgentsCommand::Revoke { agent_id } => {
            if !store.revoke_agent(&agent_id).await? {
                bail!("no active agent named {agent_id:?}");
            }
            eprintln!("agent {agent_id} revoked");
            Ok(())
        }
    }
}

async fn create(
    store: &Store,
    catalog: &Catalog,
    agent_id: &str,
    allow: &[String],
    limits: Limits,
) -> anyhow::Result<()> {
    let agent_id = AgentId::parse(agent_id)?;
    let policy = AgentPolicy {
        allowed_operations: allowed_kinds(catalog, allow)?,
        max_amounts: limits.max_amounts,
        rate_limit: limits.rate_limit,
        daily_budgets: limits.daily_budgets,
        approval_above: limits.approval_above,
    };
    let key = ApiKey::generate(KeyKind::Agent);
    store
        .create_agent(&NewAgent {
            agent_id: agent_id.as_str(),
            key_id: key.key_id(),
            api_key_hash: &key.hash(),
            policy: &policy,
        })
        .await?;
    println!("{}", key.expose());
    Ok(())
}

async fn update_agent(store: &Store, agent_id: &str, update: &AgentUpdate) -> anyhow::Result<()> {
    if update.is_empty() {
        bail!("nothing to update: give at least one setting (see --help)");
    }
    let Some(agent) = store.update_agent(agent_id, update).await? else {
        bail!("no active agent named {agent_id:?}");
    };
    eprintln!(
        "agent {} updated: allowed {}; limits {}",
        agent.agent_id,
        allowed_list(&agent.policy),
        limits_list(&agent.policy)
    );
    Ok(())
}

async fn rotate(store: &Store, agent_id: &str, grace: Duration) -> anyhow::Result<()> {
    let key = ApiKey::generate(KeyKind::Agent);
    let Some(old_key_until) = store
        .rotate_agent_key(agent_id, key.key_id(), &key.hash(), grace)
        .await?
    else {
        bail!("no active agent named {agent_id:?}");
    };
    println!("{}", key.expose());
    match old_key_until {
        Some(until) => eprintln!(
            "agent {agent_id}: new key id {}; the old key works until {}",
            key.key_id(),
            until.format("%Y-%m-%dT%H:%M:%SZ")
        ),
        None => eprintln!(
            "agent {agent_id}: new key id {}; the old key no longer works",
            key.key_id()
        ),
    }
    Ok(())
}

/// `--grace`: a whole number followed by ms, s, m, h or d; `0` alone is none.
fn parse_grace(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?}: expected a duration such as 90s, 10m or 1h"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a duration such as 90s, 10m or 1h"))?;
    let seconds = match unit {
        "ms" => return Ok(Duration::from_millis(number)),
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{text:?}: the unit must be ms, s, m, h or d")),
    };
    number
        .checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{text:?}: too long"))
}

/// The kinds of `--allow`, each a built-in or declared kind; `none` grants none.
fn allowed_kinds(catalog: &Catalog, allow: &[String]) -> anyhow::Result<Vec<KindName>> {
    allow
        .iter()
        .filter(|name| name.as_str() != "none")
        .map(|name| known_kind(catalog, name))
        .collect()
}

/// What an agent may spend and how fast it may ask.
struct Limits {
    max_amounts: BTreeMap<String, Decimal>,
    daily_budgets: BTreeMap<String, Decimal>,
    approval_above: BTreeMap<String, Decimal>,
    rate_limit: Option<RateLimit>,
}

/// `CURRENCY:AMOUNT` specs of `flag`, one per currency.
fn parse_amounts(flag: &str, specs: &[String]) -> anyhow::Result<BTreeMap<String, Decimal>> {
    let mut amounts = BTreeMap::new();
    for spec in specs {
        let (currency, amount) = spec
            .split_once(':')
            .with_context(|| format!("{flag} {spec:?}: expected CURRENCY:AMOUNT"))?;
        let currency = Currency::parse(currency).with_context(|| format!("{flag} {spec:?}"))?;
        let money = Money::parse(amount, currency).with_context(|| format!("{flag} {spec:?}"))?;
        if amounts
            .insert(currency.code().to_owned(), money.amount())
            .is_some()
        {
            bail!("{flag} given twice for {currency}");
        }
    }
    Ok(amounts)
}

/// A built-in kind, or one declared in the catalog.
fn known_kind(catalog: &Catalog, name: &str) -> anyhow::Result<KindName> {
    if let Some(kind) = BuiltinKind::parse(name) {
        return Ok(kind.name());
    }
    if let Some(kind) = catalog.kind(name) {
        return Ok(kind.name().clone());
    }
    let known: Vec<String> = BuiltinKind::ALL
        .iter()
        .map(|k| k.as_str().to_owned())
        .chain(catalog.kinds().map(|k| k.name().to_string()))
        .collect();
    bail!(
        "unknown operation kind {name:?} (known: {}; declared kinds need --catalog)",
        known.join(", ")
    )
}

async fn list(store: &Store) -> anyhow::Result<()> {
    let agents = store.list_agents().await?;
    println!(
        "{:<32} {:<16} {:<12} {:<28} {:<25} REVOKED",
        "AGENT", "KEY ID", "ALLOWED", "LIMITS", "CREATED"
    );
    for agent in agents {
        println!(
            "{:<32} {:<16} {:<12} {:<28} {:<25} {}",
            agent.agent_id,
            agent.key_id,
            allowed_list(&agent.policy),
            limits_list(&agent.policy),
            agent.created_at.format("%Y-%m-%dT%H:%M:%SZ"),
            agent
                .revoked_at
                .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                .unwrap_or_else(|| "-".into()),
        );
    }
    Ok(())
}

/// The agent's kinds, comma-separated (`-` for none).
fn allowed_list(policy: &AgentPolicy) -> String {
    let allowed: Vec<&str> = policy
        .allowed_operations
        .iter()
        .map(|op| op.as_str())
        .collect();
    if allowed.is_empty() {
        "-".to_string()
    } else {
        allowed.join(",")
    }
}

/// The agent's amounts, thresholds, budgets and rate limit, comma-separated (`-` for
/// none).
fn limits_list(policy: &AgentPolicy) -> String {
    let mut limits: Vec<String> = policy
        .max_amounts
        .iter()
        .map(|(currency, max)| format!("{currency}:{max}"))
        .collect();
    for (currency, threshold) in &policy.approval_above {
        limits.push(format!("approval>{currency}:{threshold}"));
    }
    for (currency, budget) in &policy.daily_budgets {
        limits.push(format!("{currency}:{budget}/24h"));
    }
    if let Some(rate) = policy.rate_limit {
        limits.push(format!("{rate} burst {}", rate.burst()));
    }
    if limits.is_empty() {
        "-".to_string()
    } else {
        limits.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_periods_parse_with_a_unit_or_as_zero() {
        assert_eq!(parse_grace("0"), Ok(Duration::ZERO));
        assert_eq!(parse_grace("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_grace("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_grace("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_grace("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["", "10", "m", "-1s", "1.5m", "10 m", "3w"] {
            assert!(parse_grace(bad).is_err(), "{bad:?}");
        }
    }
}
