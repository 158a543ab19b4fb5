//! pgbench scripts made from the store's own statements, so that `make bench` can run
//! the very SQL the services run, side by side with them, and the two cannot drift.
//! Parameters become pgbench variables or constants; nothing else changes.

use crate::agent_request::AGENT_WITH_EXISTING_OPERATION;
use crate::execution::{CLAIM_DUE, CLAIM_RESULT};
use crate::fenced::TRANSITION;
use crate::operations::REGISTER_OPERATION;

const REQUEST_HASH: &str = "'0000000000000000000000000000000000000000000000000000000000000000'";
const PAYLOAD: &str = r#"'{"amount":"10.00","currency":"USD","customer_id":"cus_bench","invoice_id":"inv_bench","operation_type":"payment"}'::jsonb"#;

/// A new operation id made in SQL as intake makes it (`opgate_domain::new_operation_id`,
/// UUIDv7; PostgreSQL 15 has no function for it): the millisecond clock in the first 48
/// bits, then random ones, with the version (7) and variant (8) digits set.
pub const NEW_OPERATION_ID: &str = "overlay(overlay(lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') || substr(md5(random()::text), 1, 20) placing '7' from 13) placing '8' from 17)::uuid";

fn sql_text(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// `statement` with `$1`, `$2`, … replaced by `values` (in order).
fn bind(statement: &str, values: &[String]) -> String {
    // Highest first, so that `$1` never eats the start of `$10`.
    values
        .iter()
        .enumerate()
        .rev()
        .fold(statement.to_owned(), |sql, (i, value)| {
            sql.replace(&format!("${}", i + 1), value)
        })
}

/// The registration of a new operation, as intake runs it, with a fresh key per
/// transaction (`:client_id` and a random 63-bit number).
pub fn register_new_operation(agent_id: &str) -> String {
    let key = "('pg-' || :client_id || '-' || :r)".to_owned();
    let statement = bind(REGISTER_OPERATION, &register_values(agent_id, key));
    format!(
        "\\set r random(1, 9223372036854775806)\n{};\n",
        one_line(&statement)
    )
}

/// A replay, as intake runs it: the one read that authenticates the agent's key id and
/// finds the operation its Idempotency-Key names. Keys `{prefix}1` … `{prefix}{keys}`
/// must exist for the agent holding `key_id`.
pub fn register_replay(key_id: &str, key_prefix: &str, keys: u64) -> String {
    let key = format!("({} || :i)", sql_text(key_prefix));
    let lookup = bind(AGENT_WITH_EXISTING_OPERATION, &[sql_text(key_id), key]);
    format!("\\set i random(1, {keys})\n{};\n", one_line(&lookup))
}

/// Plain SQL (for psql) registering keys `{prefix}1` … `{prefix}{keys}` with the same
/// statement, so that a replay run has keys to replay.
pub fn register_keys(agent_id: &str, key_prefix: &str, keys: u64) -> String {
    (1..=keys)
        .map(|i| {
            let key = sql_text(&format!("{key_prefix}{i}"));
            format!(
                "{};\n",
                one_line(&bind(REGISTER_OPERATION, &register_values(agent_id, key)))
            )
        })
        .collect()
}

/// The executor's claim of up to `batch` events and their fenced completion to
/// SUCCEEDED, as one pgbench transaction. pgbench keeps one row of a result, so the
/// claim's last line returns the claimed ids, tokens and agents as arrays (`\\gset`)
/// instead of one row each; the completion is the executor's multi-row transition over
/// them.
/// The outbox must hold the events the run is to drain.
pub fn claim_and_complete(batch: u32) -> String {
    let owner = "('pgbench-' || :client_id)".to_owned();
    let claim = bind(
        CLAIM_DUE,
        &[owner.clone(), "30000".into(), batch.to_string()],
    );
    let claim = claim.replace(
        CLAIM_RESULT,
        "SELECT coalesce(array_agg(operation_id), '{}') AS ids, \
         coalesce(array_agg(fencing_token), '{}') AS tokens, \
         coalesce(array_agg(agent_id), '{}') AS agents FROM claimed",
    );
    let each = |value: &str| format!("array_fill({value}, ARRAY[cardinality(:ids::uuid[])])");
    let complete = bind(
        TRANSITION,
        &[
            ":ids".into(),
            ":tokens".into(),
            each("'IN_PROGRESS'::text"),
            each("'SUCCEEDED'::text"),
            each("'pay_pgbench'::text"),
            each("NULL::text"),
            each("'provider confirmed the operation'::text"),
            each("0::float8"),
            owner,
            ":agents".into(),
        ],
    );
    format!("{} \\gset\n{};\n", one_line(&claim), one_line(&complete))
}

fn register_values(agent_id: &str, key: String) -> Vec<String> {
    vec![
        NEW_OPERATION_ID.into(),
        sql_text(agent_id),
        key,
        "'payment'".into(),
        sql_text(opgate_domain::OPGATE_HTTP_PROVIDER),
        REQUEST_HASH.into(),
        PAYLOAD.into(),
        "NULL".into(),
        // "intake:agent/…" spelt without a colon: pgbench reads `:agent` as a variable.
        format!(
            "'intake' || chr(58) || {}",
            sql_text(&format!("agent/{agent_id}"))
        ),
        "10.00".into(),
        "'USD'".into(),
        "NULL".into(),
    ]
}

/// pgbench reads one statement per line; `--` comments would swallow the rest of it.
/// A `--` inside a quoted literal (an agent id may hold one) is kept.
fn one_line(statement: &str) -> String {
    statement
        .lines()
        .map(without_comment)
        .flat_map(str::split_whitespace)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `line` up to its `--` comment, if it has one outside quotes.
fn without_comment(line: &str) -> &str {
    let mut quoted = false;
    let bytes = line.as_bytes();
    for (i, byte) in bytes.iter().enumerate() {
        match byte {
            b'\'' => quoted = !quoted,
            b'-' if !quoted && bytes.get(i + 1) == Some(&b'-') => return &line[..i],
            _ => {}
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_are_the_store_statements_with_values_bound() {
        let script = register_new_operation("bench");
        assert!(!script.contains('$'), "{script}");
        let without_casts = script.replace("::", "");
        let variables: Vec<&str> = without_casts
            .split(':')
            .skip(1)
            .filter(|rest| rest.starts_with(|c: char| c.is_ascii_alphabetic()))
            .collect();
        assert_eq!(variables.len(), 2, "only :client_id and :r: {variables:?}");
        assert!(script.contains("ON CONFLICT (agent_id, idempotency_key) DO NOTHING"));
        assert_eq!(script.lines().count(), 2);
        let replay = register_replay("00112233aabbccdd", "k-", 100);
        assert!(
            replay.contains("random(1, 100)") && replay.contains("idempotency_key = ('k-' || :i)")
        );
        assert_eq!(replay.lines().count(), 2);
        assert!(!replay.contains('$'));
        let drain = claim_and_complete(32);
        assert!(drain.contains("FOR UPDATE OF o, op SKIP LOCKED") && drain.contains("\\gset"));
        assert!(
            drain.contains("LIMIT (SELECT 32::bigint)")
                && drain.contains("array_agg(operation_id)")
        );
        assert!(!drain.contains('$') && !drain.contains("--"), "{drain}");
        let dashed = register_new_operation("team--a");
        assert!(
            dashed.contains("'team--a'") && dashed.contains("RETURNING"),
            "{dashed}"
        );
    }
}
