//! An agent's own operations, newest first, a page at a time: `GET /agent/operations`
//! and MCP's `list_operations` read through here, with the same filters, bounds and
//! cursor. The cursor is the last listed operation's id, read back only within the
//! same agent.

use opgate_domain::OperationStatus;
use opgate_store::{AgentOperationFilter, Store};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::problem::Problem;
use crate::view::OperationView;

pub const DEFAULT_LIMIT: i64 = 20;
pub const MAX_LIMIT: i64 = 100;

/// What to list, as received (text, from a query string or tool arguments).
#[derive(Debug, Default)]
pub struct ListRequest<'a> {
    pub status: Option<&'a str>,
    pub kind: Option<&'a str>,
    pub limit: Option<i64>,
    pub cursor: Option<&'a str>,
}

/// One page of an agent's operations.
#[derive(Debug, Serialize, ToSchema)]
pub struct OperationPage {
    /// Newest first.
    pub operations: Vec<OperationView>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A `status` filter, in any case; else the 400 that names the statuses there are.
pub fn status_filter(text: &str) -> Result<OperationStatus, Problem> {
    text.to_ascii_uppercase()
        .parse::<OperationStatus>()
        .map_err(|_| {
            let all: Vec<&str> = OperationStatus::ALL.iter().map(|s| s.as_str()).collect();
            Problem::bad_query(format!("status must be one of {}", all.join(", ")))
        })
}

pub async fn list_page(
    store: &Store,
    agent_id: &str,
    request: &ListRequest<'_>,
) -> Result<OperationPage, Problem> {
    let status = request.status.map(status_filter).transpose()?;
    let limit = match request.limit {
        None => DEFAULT_LIMIT,
        Some(limit) if limit >= 1 => limit.min(MAX_LIMIT),
        Some(_) => {
            return Err(Problem::bad_query(format!(
                "limit must be a whole number of at least 1 (at most {MAX_LIMIT} are listed)"
            )))
        }
    };
    let after = request
        .cursor
        .map(|cursor| {
            Uuid::parse_str(cursor)
                .map_err(|_| Problem::bad_query("cursor must be a next_cursor this API returned"))
        })
        .transpose()?;
    let kind = request.kind.filter(|kind| !kind.is_empty());
    let records = store
        .list_agent_operations(&AgentOperationFilter {
            agent_id,
            status,
            kind,
            limit,
            after,
        })
        .await?;
    // A full page may have more behind it; a short one is the last.
    let next_cursor = (records.len() as i64 == limit)
        .then(|| records.last().map(|r| r.operation_id.to_string()))
        .flatten();
    Ok(OperationPage {
        operations: records.iter().map(OperationView::from).collect(),
        next_cursor,
    })
}
