//! The providers a service can call, by the name recorded on each operation at
//! registration. An operation whose provider this service does not have is never sent:
//! executing it reports `NotSent` (retried later, perhaps by a replica that has it) and
//! looking it up reports `Unavailable`.

use std::collections::BTreeMap;
use std::sync::Arc;

use opgate_catalog::Catalog;
use opgate_domain::OPGATE_HTTP_PROVIDER;

use crate::declared_http::DeclaredHttpProvider;
use crate::stripe::{StripeConfig, StripeProvider, STRIPE_PROVIDER};
use crate::{
    HttpProvider, HttpProviderConfig, Instruction, LookupOutcome, Provider, ProviderOutcome,
};

#[derive(Clone, Default)]
pub struct Providers {
    by_name: BTreeMap<String, Arc<dyn Provider>>,
}

impl Providers {
    /// Every provider a service of this deployment can call: the opgate HTTP provider,
    /// Stripe when it is configured, and each provider of the catalog (with the same
    /// timeouts; keyed retries only where both the catalog and
    /// `opgate_http.keyed_retries_safe` allow them).
    pub fn build(
        opgate_http: &HttpProviderConfig,
        stripe: Option<&StripeConfig>,
        catalog: &Arc<Catalog>,
    ) -> Result<Self, String> {
        let mut providers = Self::default().with(
            OPGATE_HTTP_PROVIDER,
            Arc::new(HttpProvider::new(opgate_http.clone())),
        );
        if let Some(stripe) = stripe {
            providers = providers.with(STRIPE_PROVIDER, Arc::new(StripeProvider::new(stripe)));
        }
        for declared in catalog.providers() {
            if providers.get(&declared.name).is_some() {
                return Err(format!(
                    "catalog provider {:?}: the name is taken by a built-in provider",
                    declared.name
                ));
            }
            let mut declared = declared.clone();
            declared.keyed_retries_safe &= opgate_http.keyed_retries_safe;
            let adapter = DeclaredHttpProvider::new(
                catalog.clone(),
                &declared,
                opgate_http.connect_timeout,
                opgate_http.response_timeout,
            );
            providers = providers.with(&declared.name, Arc::new(adapter));
        }
        Ok(providers)
    }

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
