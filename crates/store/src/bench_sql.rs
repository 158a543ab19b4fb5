//! pgbench scripts made from the store's own statements, so that `make bench` can run
//! the very SQL the services run, side by side with them, and the two cannot drift.
//! Parameters become pgbench variables or constants; nothing else changes.

use crate::agent_request::AGENT_WITH_EXISTING_OPERATION;
use crate::execution::CLAIM_DUE;
use crate::fenced::TRANSITION;
use crate::operations::REGISTER_OPERATION;

const REQUEST_HASH: &str = "'0000000000000000000000000000000000000000000000000000000000000000'";
const PAYLOAD: &str = r#"'{"amount":"10.00","currency":"USD","customer_id":"cus_bench","invoice_id":"inv_bench","operation_type":"payment"}'::jsonb"#;

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

/// The executor's claim (batch of one, as `--batch-size 1` runs it) and its fenced
/// completion to SUCCEEDED, as one pgbench transaction: the claimed row's id and
/// token pass from the first statement to the second with `\gset`. The outbox must
/// hold at least as many due events as the run has transactions.
pub fn claim_and_complete() -> String {
    let owner = "('pgbench-' || :client_id)".to_owned();
    let claim = bind(CLAIM_DUE, &[owner.clone(), "30000".into(), "1".into()]);
    let complete = bind(
        TRANSITION,
        &[
            ":operation_id".into(),
            ":fencing_token".into(),
            "'IN_PROGRESS'".into(),
            "'SUCCEEDED'".into(),
            "'pay_pgbench'".into(),
            "NULL".into(),
            owner,
            "'provider confirmed the payment'".into(),
            "0".into(),
        ],
    );
    format!("{} \\gset\n{};\n", one_line(&claim), one_line(&complete))
}

fn register_values(agent_id: &str, key: String) -> Vec<String> {
    vec![
        "gen_random_uuid()".into(),
        sql_text(agent_id),
        key,
        "'payment'".into(),
        "'cus_bench'".into(),
        REQUEST_HASH.into(),
        PAYLOAD.into(),
        "NULL".into(),
        // "intake:agent/…" spelt without a colon: pgbench reads `:agent` as a variable.
        format!(
            "'intake' || chr(58) || {}",
            sql_text(&format!("agent/{agent_id}"))
        ),
    ]
}

/// pgbench reads one statement per line; `--` comments would swallow the rest of it.
fn one_line(statement: &str) -> String {
    statement
        .lines()
        .map(|line| line.split("--").next().unwrap_or_default())
        .flat_map(str::split_whitespace)
        .collect::<Vec<_>>()
        .join(" ")
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
        assert!(replay.contains("random(1, 100)") && replay.contains("LEFT JOIN LATERAL"));
        assert_eq!(replay.lines().count(), 2);
        assert!(!replay.contains('$'));
        let drain = claim_and_complete();
        assert!(drain.contains("FOR UPDATE OF o, op SKIP LOCKED") && drain.contains("\\gset"));
        assert!(!drain.contains('$') && !drain.contains("--"), "{drain}");
    }
}
