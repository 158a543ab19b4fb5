//! `opgate agents create|list|revoke`.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use clap::Subcommand;
use opgate_catalog::Catalog;
use opgate_domain::{
    AgentId, AgentPolicy, ApiKey, BuiltinKind, Currency, KeyKind, KindName, Money, RateLimit,
};
use opgate_store::{NewAgent, Store};
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
        allowed_operations: allow
            .iter()
            .filter(|name| name.as_str() != "none")
            .map(|name| known_kind(catalog, name))
            .collect::<anyhow::Result<_>>()?,
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
        let allowed: Vec<&str> = agent
            .policy
            .allowed_operations
            .iter()
            .map(|op| op.as_str())
            .collect();
        let mut limits: Vec<String> = agent
            .policy
            .max_amounts
            .iter()
            .map(|(currency, max)| format!("{currency}:{max}"))
            .collect();
        for (currency, threshold) in &agent.policy.approval_above {
            limits.push(format!("approval>{currency}:{threshold}"));
        }
        for (currency, budget) in &agent.policy.daily_budgets {
            limits.push(format!("{currency}:{budget}/24h"));
        }
        if let Some(rate) = agent.policy.rate_limit {
            limits.push(format!("{rate} burst {}", rate.burst()));
        }
        println!(
            "{:<32} {:<16} {:<12} {:<28} {:<25} {}",
            agent.agent_id,
            agent.key_id,
            allowed.join(","),
            if limits.is_empty() {
                "-".to_string()
            } else {
                limits.join(",")
            },
            agent.created_at.format("%Y-%m-%dT%H:%M:%SZ"),
            agent
                .revoked_at
                .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                .unwrap_or_else(|| "-".into()),
        );
    }
    Ok(())
}
