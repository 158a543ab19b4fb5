//! The `agents` table: credentials (the hash of each key, never the key) and policy.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use opgate_domain::{AgentPolicy, KindName, RateLimit};
use rust_decimal::Decimal;
use tokio_postgres::Row;

use crate::budgets::{CLEAR_SPEND, REFILL_SPEND};
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
    /// The key id replaced by the last rotation, still accepted until
    /// `previous_key_expires_at` (both `None` when no grace period is running or was
    /// given).
    pub previous_key_id: Option<String>,
    pub previous_key_expires_at: Option<DateTime<Utc>>,
}

/// What `update_agent` changes: each `Some` replaces that setting, each `None` keeps it.
#[derive(Debug, Clone, Default)]
pub struct AgentUpdate {
    pub allowed_operations: Option<Vec<KindName>>,
    pub max_amounts: Option<BTreeMap<String, Decimal>>,
    pub daily_budgets: Option<BTreeMap<String, Decimal>>,
    pub approval_above: Option<BTreeMap<String, Decimal>>,
    /// `Some(None)` removes the rate limit.
    pub rate_limit: Option<Option<RateLimit>>,
}

impl AgentUpdate {
    pub fn is_empty(&self) -> bool {
        self.allowed_operations.is_none()
            && self.max_amounts.is_none()
            && self.daily_budgets.is_none()
            && self.approval_above.is_none()
            && self.rate_limit.is_none()
    }
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
            "revoked_at, ",
            $table,
            "previous_key_id AS ",
            $alias,
            "previous_key_id, ",
            $table,
            "previous_key_expires_at AS ",
            $alias,
            "previous_key_expires_at"
        )
    };
}
pub(crate) use agent_columns;

/// The condition under which the key id `$1` (or the expression `$key`) names the
/// agent row `$table`: its current key id, or its previous one until that expires;
/// never for a revoked agent. Both columns are uniquely indexed, so this is a BitmapOr
/// of two index probes.
macro_rules! key_id_accepted {
    ($table:literal) => {
        key_id_accepted!($table, "$1")
    };
    ($table:literal, $key:literal) => {
        concat!(
            "(",
            $table,
            "key_id = ",
            $key,
            " OR (",
            $table,
            "previous_key_id = ",
            $key,
            " AND ",
            $table,
            "previous_key_expires_at > now())) AND ",
            $table,
            "revoked_at IS NULL"
        )
    };
}
pub(crate) use key_id_accepted;

/// The stored hash of the key that the key id `$1` names on the row `$table` (the
/// current key's or the previous one's), for the caller to verify the presented key
/// against; selected as `presented_key_hash`.
macro_rules! presented_key_hash {
    ($table:literal) => {
        concat!(
            "CASE WHEN ",
            $table,
            "key_id = $1 THEN ",
            $table,
            "api_key_hash ELSE ",
            $table,
            "previous_key_hash END AS presented_key_hash"
        )
    };
}
pub(crate) use presented_key_hash;

/// The version of the agent row `$table` (`agent_row_version`): its `xmin`, the
/// transaction that wrote this version of the row. Every UPDATE of the row (a policy
/// change, a rotation, a revocation, or an operator's own SQL) writes a new version
/// with a new `xmin`; row locks and freezing leave it as it is.
macro_rules! agent_row_version {
    ($table:literal) => {
        concat!($table, "xmin::text::bigint AS agent_row_version")
    };
}
pub(crate) use agent_row_version;

const AGENT_COLUMNS: &str = agent_columns!("", "");

const INSERT_AGENT: &str =
    "INSERT INTO agents (agent_id, key_id, api_key_hash, allowed_operations, max_amounts, \
                         rate_limit, rate_limit_burst, daily_budgets, approval_above) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (agent_id) DO NOTHING";

const REVOKE_AGENT: &str =
    "UPDATE agents SET revoked_at = now() WHERE agent_id = $1 AND revoked_at IS NULL";

/// Each non-NULL parameter replaces its setting; `$6` says whether the rate limit
/// (`$7`, `$8`, NULL for none) is replaced. Only an active agent is changed.
const UPDATE_AGENT: &str = concat!(
    "UPDATE agents SET \
         allowed_operations = COALESCE($2::text[], allowed_operations), \
         max_amounts = COALESCE($3::jsonb, max_amounts), \
         daily_budgets = COALESCE($4::jsonb, daily_budgets), \
         approval_above = COALESCE($5::jsonb, approval_above), \
         rate_limit = CASE WHEN $6::boolean THEN $7::text ELSE rate_limit END, \
         rate_limit_burst = CASE WHEN $6::boolean THEN $8::integer ELSE rate_limit_burst END \
     WHERE agent_id = $1 AND revoked_at IS NULL \
     RETURNING ",
    agent_columns!("", "")
);

/// The new key ($2, $3) replaces the current one, which stays accepted for `$4`
/// milliseconds when `$4` > 0 (replacing any previous key still in its grace period)
/// and is forgotten at once otherwise. SET expressions read the row as it was. A new
/// key id that is some agent's previous key id is refused, so that a key id never
/// names two agents.
const ROTATE_AGENT_KEY: &str = "UPDATE agents SET \
         previous_key_id = CASE WHEN $4::bigint > 0 THEN key_id END, \
         previous_key_hash = CASE WHEN $4::bigint > 0 THEN api_key_hash END, \
         previous_key_expires_at = \
             CASE WHEN $4::bigint > 0 THEN now() + $4::bigint * interval '1 millisecond' END, \
         key_id = $2, \
         api_key_hash = $3 \
     WHERE agent_id = $1 AND revoked_at IS NULL \
       AND NOT EXISTS (SELECT 1 FROM agents WHERE previous_key_id = $2) \
     RETURNING previous_key_expires_at";

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

    /// Replaces the settings `update` gives, in one conditional UPDATE; the agent as
    /// it now is, or `None` when no active agent has this id. Intake reads an agent's
    /// policy with every request (rate limits within its cache's refresh period).
    #[tracing::instrument(name = "UPDATE agents", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "agents"))]
    pub async fn update_agent(
        &self,
        agent_id: &str,
        update: &AgentUpdate,
    ) -> Result<Option<AgentRecord>, StoreError> {
        let allowed: Option<Vec<&str>> = update
            .allowed_operations
            .as_ref()
            .map(|kinds| kinds.iter().map(|kind| kind.as_str()).collect());
        let max_amounts = update.max_amounts.as_ref().map(amounts_json);
        let daily_budgets = update.daily_budgets.as_ref().map(amounts_json);
        let approval_above = update.approval_above.as_ref().map(amounts_json);
        let rate_limit = update.rate_limit.flatten();
        let mut client = self.client().await?;
        // One transaction: the update locks the agent's row, so the spending that a new
        // budget starts from is rebuilt before any budgeted registration reads it.
        let transaction = client.transaction().await?;
        let updated = transaction
            .query_opt(
                UPDATE_AGENT,
                &[
                    &agent_id,
                    &allowed,
                    &max_amounts,
                    &daily_budgets,
                    &approval_above,
                    &update.rate_limit.is_some(),
                    &rate_limit.map(|r| r.to_string()),
                    &rate_limit.map(|r| r.burst() as i32),
                ],
            )
            .await?
            .map(|row| agent_from_row(&row, ""))
            .transpose()?;
        if updated.is_some() && daily_budgets.is_some() {
            transaction.execute(CLEAR_SPEND, &[&agent_id]).await?;
            transaction.execute(REFILL_SPEND, &[&agent_id]).await?;
        }
        transaction.commit().await?;
        Ok(updated)
    }

    /// Gives an active agent a new key (its id and SHA-256); the old key stays
    /// accepted for `grace` (none: it stops at once). `None` when no active agent has
    /// this id; otherwise when the old key stops being accepted, if later than now.
    #[tracing::instrument(name = "UPDATE agents", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "UPDATE", db.collection.name = "agents"))]
    pub async fn rotate_agent_key(
        &self,
        agent_id: &str,
        key_id: &str,
        api_key_hash: &str,
        grace: Duration,
    ) -> Result<Option<Option<DateTime<Utc>>>, StoreError> {
        let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        let client = self.client().await?;
        Ok(client
            .query_opt(
                ROTATE_AGENT_KEY,
                &[&agent_id, &key_id, &api_key_hash, &grace_ms],
            )
            .await?
            .map(|row| row.get(0)))
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
        previous_key_id: row.get(column("previous_key_id").as_str()),
        previous_key_expires_at: row.get(column("previous_key_expires_at").as_str()),
        agent_id,
    })
}
