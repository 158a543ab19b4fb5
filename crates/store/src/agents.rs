//! The `agents` table: credentials (the hash of each key, never the key) and policy.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use opgate_domain::{AgentPolicy, KindName, RateLimit};
use rust_decimal::Decimal;
use tokio_postgres::Row;

use crate::error::StoreError;
use crate::pool::Store;

pub struct NewAgent<'a> {
    pub agent_id: &'a str,
    pub key_id: &'a str,
    pub api_key_hash: &'a str,
    pub policy: &'a AgentPolicy,
}

#[derive(Debug, Clone)]
pub struct AgentRecord {
    pub agent_id: String,
    pub key_id: String,
    pub api_key_hash: String,
    pub policy: AgentPolicy,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// The columns `agent_from_row` reads: `agent_columns!("a.", "agent_")` selects
/// `a.agent_id AS agent_agent_id, …` for statements that also return other tables.
macro_rules! agent_columns {
    ($table:literal, $alias:literal) => {
        concat!(
            $table,
            "agent_id AS ",
            $alias,
            "agent_id, ",
            $table,
            "key_id AS ",
            $alias,
            "key_id, ",
            $table,
            "api_key_hash AS ",
            $alias,
            "api_key_hash, ",
            $table,
            "allowed_operations AS ",
            $alias,
            "allowed_operations, ",
            $table,
            "max_amounts AS ",
            $alias,
            "max_amounts, ",
            $table,
            "approval_above AS ",
            $alias,
            "approval_above, ",
            $table,
            "daily_budgets AS ",
            $alias,
            "daily_budgets, ",
            $table,
            "rate_limit AS ",
            $alias,
            "rate_limit, ",
            $table,
            "rate_limit_burst AS ",
            $alias,
            "rate_limit_burst, ",
            $table,
            "created_at AS ",
            $alias,
            "created_at, ",
            $table,
            "revoked_at AS ",
            $alias,
            "revoked_at"
        )
    };
}
pub(crate) use agent_columns;

const AGENT_COLUMNS: &str = agent_columns!("", "");

const INSERT_AGENT: &str =
    "INSERT INTO agents (agent_id, key_id, api_key_hash, allowed_operations, max_amounts, \
                         rate_limit, rate_limit_burst, daily_budgets, approval_above) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (agent_id) DO NOTHING";

const REVOKE_AGENT: &str =
    "UPDATE agents SET revoked_at = now() WHERE agent_id = $1 AND revoked_at IS NULL";

impl Store {
    /// Fails with `AgentExists` when the id is taken (revoked agents keep their id).
    #[tracing::instrument(name = "INSERT agents", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "INSERT", db.collection.name = "agents"))]
    pub async fn create_agent(&self, agent: &NewAgent<'_>) -> Result<(), StoreError> {
        let allowed: Vec<&str> = agent
            .policy
            .allowed_operations
            .iter()
            .map(|op| op.as_str())
            .collect();
        let limits = amounts_json(&agent.policy.max_amounts);
        let budgets = amounts_json(&agent.policy.daily_budgets);
        let approval_above = amounts_json(&agent.policy.approval_above);
        let client = self.client().await?;
        let inserted = client
            .execute(
                INSERT_AGENT,
                &[
                    &agent.agent_id,
                    &agent.key_id,
                    &agent.api_key_hash,
                    &allowed,
                    &limits,
                    &agent.policy.rate_limit.map(|r| r.to_string()),
                    &agent.policy.rate_limit.map(|r| r.burst() as i32),
                    &budgets,
                    &approval_above,
                ],
            )
            .await?;
        if inserted == 0 {
            return Err(StoreError::AgentExists(agent.agent_id.to_owned()));
        }
        Ok(())
    }

    #[tracing::instrument(name = "SELECT agents", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "agents"))]
    pub async fn find_active_agent_by_key_id(
        &self,
        key_id: &str,
    ) -> Result<Option<AgentRecord>, StoreError> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "SELECT {AGENT_COLUMNS} FROM agents WHERE key_id = $1 AND revoked_at IS NULL"
            ))
            .await?;
        client
            .query_opt(&statement, &[&key_id])
            .await?
            .map(|row| agent_from_row(&row, ""))
            .transpose()
    }

    #[tracing::instrument(name = "SELECT agents", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "SELECT", db.collection.name = "agents"))]
    pub async fn list_agents(&self) -> Result<Vec<AgentRecord>, StoreError> {
        let client = self.client().await?;
        client
            .query(
                &format!("SELECT {AGENT_COLUMNS} FROM agents ORDER BY agent_id"),
                &[],
            )
            .await?
            .iter()
            .map(|row| agent_from_row(row, ""))
            .collect()
    }

    /// Returns false when no active agent has this id.
    #[tracing::instrument(name = "UPDATE agents", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "agents"))]
    pub async fn revoke_agent(&self, agent_id: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        Ok(client.execute(REVOKE_AGENT, &[&agent_id]).await? == 1)
    }
}

/// `{"USD": "5000.00"}`: amounts as exact decimal text.
fn amounts_json(amounts: &BTreeMap<String, Decimal>) -> serde_json::Value {
    serde_json::Value::Object(
        amounts
            .iter()
            .map(|(currency, amount)| (currency.clone(), amount.to_string().into()))
            .collect(),
    )
}

/// Reads the columns of `agent_columns!(_, alias)`.
pub(crate) fn agent_from_row(row: &Row, alias: &str) -> Result<AgentRecord, StoreError> {
    let column = |name: &str| format!("{alias}{name}");
    let agent_id: String = row.get(column("agent_id").as_str());
    let corrupt = |what: String| StoreError::Corrupt(format!("agent {agent_id}: {what}"));
    let allowed_operations = row
        .get::<_, Vec<String>>(column("allowed_operations").as_str())
        .iter()
        .map(|name| KindName::parse(name).map_err(|_| corrupt(format!("operation kind {name:?}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let amounts = |name: &str| {
        let value: serde_json::Value = row.get(column(name).as_str());
        value
            .as_object()
            .ok_or_else(|| corrupt(format!("{name} is not an object")))?
            .iter()
            .map(|(currency, max)| {
                let max = max
                    .as_str()
                    .and_then(|text| text.parse::<Decimal>().ok())
                    .ok_or_else(|| corrupt(format!("{name} for {currency}")))?;
                Ok((currency.clone(), max))
            })
            .collect::<Result<BTreeMap<_, _>, StoreError>>()
    };
    let max_amounts = amounts("max_amounts")?;
    let daily_budgets = amounts("daily_budgets")?;
    let approval_above = amounts("approval_above")?;
    let rate_limit = match row.get::<_, Option<String>>(column("rate_limit").as_str()) {
        Some(text) => {
            let burst: Option<i32> = row.get(column("rate_limit_burst").as_str());
            let burst = burst.map(|b| b.max(0) as u32);
            Some(RateLimit::parse(&text, burst).map_err(|e| corrupt(e.to_string()))?)
        }
        None => None,
    };
    Ok(AgentRecord {
        key_id: row.get(column("key_id").as_str()),
        api_key_hash: row.get(column("api_key_hash").as_str()),
        policy: AgentPolicy {
            allowed_operations,
            max_amounts,
            rate_limit,
            daily_budgets,
            approval_above,
        },
        created_at: row.get(column("created_at").as_str()),
        revoked_at: row.get(column("revoked_at").as_str()),
        agent_id,
    })
}
