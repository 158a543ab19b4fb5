//! The providers a service can call, by the name recorded on each operation at
//! registration. An operation whose provider this service does not have is never sent:
//! executing it reports `NotSent` (retried later, perhaps by a replica that has it) and
//! looking it up reports `Unavailable`.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::{Instruction, LookupOutcome, Provider, ProviderOutcome};

#[derive(Clone, Default)]
pub struct Providers {
    by_name: BTreeMap<String, Arc<dyn Provider>>,
}

impl Providers {
    pub fn with(mut self, name: &str, provider: Arc<dyn Provider>) -> Self {
        self.by_name.insert(name.to_owned(), provider);
        self
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Provider>> {
        self.by_name.get(name)
    }

    pub async fn execute(&self, provider: &str, instruction: &Instruction) -> ProviderOutcome {
        match self.get(provider) {
            Some(adapter) => adapter.execute(instruction).await,
            None => ProviderOutcome::NotSent {
                cause: format!("provider {provider:?} is not configured in this executor"),
            },
        }
    }

    pub async fn lookup(&self, provider: &str, instruction: &Instruction) -> LookupOutcome {
        match self.get(provider) {
            Some(adapter) => adapter.lookup(instruction).await,
            None => LookupOutcome::Unavailable {
                cause: format!("provider {provider:?} is not configured in this reconciler"),
            },
        }
    }

    /// False for a provider this service does not have: nothing is re-sent blindly.
    pub fn keyed_retries_safe(&self, provider: &str) -> bool {
        self.get(provider).is_some_and(|p| p.keyed_retries_safe())
    }
}
