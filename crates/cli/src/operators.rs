//! `opgate operators create`: credentials for the admin API, a different kind of key
//! from agents' (prefix `opo_`), printed once, stored only as a hash.

use clap::Subcommand;
use opgate_domain::{AgentId, ApiKey, KeyKind};
use opgate_store::Store;

#[derive(Subcommand)]
pub enum OperatorsCommand {
    /// Create an operator and print its key on stdout, once.
    Create { name: String },
}

pub async fn run(store: &Store, command: OperatorsCommand) -> anyhow::Result<()> {
    match command {
        OperatorsCommand::Create { name } => {
            // Operator names follow the same alphabet as agent ids.
            let name = AgentId::parse(&name)?;
            let key = ApiKey::generate(KeyKind::Operator);
            store
                .create_operator(name.as_str(), key.key_id(), &key.hash())
                .await?;
            println!("{}", key.expose());
            Ok(())
        }
    }
}
