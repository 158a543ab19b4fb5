//! `opgate operators create|list|revoke`: credentials for the admin API, a different
//! kind of key from agents' (prefix `opo_`), printed once, stored only as a hash.

use anyhow::{bail, Context};
use clap::Subcommand;
use opgate_domain::{AgentId, ApiKey, KeyKind};
use opgate_store::{OperatorRecord, OperatorRevocation, Store};

#[derive(Subcommand)]
pub enum OperatorsCommand {
    /// Create an operator and print its key on stdout, once. Store it now: only its
    /// hash is kept.
    Create { name: String },
    /// List operators (never their keys): name, key id, created, revoked.
    List {
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke an operator's key: its requests to /admin get 401 from now on.
    Revoke { name: String },
}

pub async fn run(store: &Store, command: OperatorsCommand) -> anyhow::Result<()> {
    match command {
        OperatorsCommand::Create { name } => {
            // Operator names follow the same alphabet as agent ids.
            let name =
                AgentId::parse(&name).with_context(|| format!("invalid operator name {name:?}"))?;
            let key = ApiKey::generate(KeyKind::Operator);
            store
                .create_operator(name.as_str(), key.key_id(), &key.hash())
                .await?;
            println!("{}", key.expose());
            Ok(())
        }
        OperatorsCommand::List { json } => {
            let operators = store.list_operators().await?;
            if json {
                for operator in &operators {
                    println!("{}", operator_json(operator));
                }
            } else {
                print_table(&operators);
            }
            Ok(())
        }
        OperatorsCommand::Revoke { name } => match store.revoke_operator(&name).await? {
            OperatorRevocation::Revoked(_) => {
                eprintln!("operator {name} revoked");
                Ok(())
            }
            OperatorRevocation::AlreadyRevoked(Some(at)) => {
                bail!(
                    "operator {name:?} is already revoked (since {}): nothing changed",
                    at.format("%Y-%m-%dT%H:%M:%SZ")
                )
            }
            OperatorRevocation::AlreadyRevoked(None) => {
                bail!("operator {name:?} is already revoked: nothing changed")
            }
            OperatorRevocation::NotFound => bail!("no operator named {name:?}"),
        },
    }
}

/// Never the key nor its hash.
fn operator_json(operator: &OperatorRecord) -> serde_json::Value {
    serde_json::json!({
        "operator_id": operator.operator_id, "key_id": operator.key_id,
        "created_at": operator.created_at, "revoked_at": operator.revoked_at,
    })
}

fn print_table(operators: &[OperatorRecord]) {
    println!(
        "{:<32} {:<16} {:<20} REVOKED",
        "OPERATOR", "KEY ID", "CREATED"
    );
    for operator in operators {
        println!(
            "{:<32} {:<16} {:<20} {}",
            operator.operator_id,
            operator.key_id,
            operator.created_at.format("%Y-%m-%dT%H:%M:%SZ"),
            operator
                .revoked_at
                .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
                .unwrap_or_else(|| "-".into()),
        );
    }
}
