//! Providers: the `Provider` trait the executor and reconciler call, the kind-neutral
//! `Instruction` they pass, the outcome types every call is classified into, the
//! registry that finds the provider an operation was bound to, and the adapters (one
//! file each): the opgate HTTP contract of provider-sim, Stripe, and the declared HTTP
//! adapter that executes the catalog's kinds.

mod declared_http;
mod http_adapter;
mod http_client;
mod instruction;
mod outcome;
mod registry;
mod retry_after;
mod stripe;
mod stripe_outcome;

pub use declared_http::DeclaredHttpProvider;
pub use futures_util::future::BoxFuture;
pub use http_adapter::{HttpProvider, HttpProviderConfig};
pub use instruction::{provider_key, Instruction};
pub use outcome::{classify_response, LookupOutcome, ProviderOutcome};
pub use registry::Providers;
pub use retry_after::{DEFAULT_RETRY_AFTER, MAX_RETRY_AFTER, MIN_RETRY_AFTER};
pub use stripe::{StripeConfig, StripeProvider, STRIPE_PROVIDER};

/// One provider adapter. Used as a trait object (`Arc<dyn Provider>` in `Providers`),
/// so that a deployment's set of providers is chosen at start-up and an adapter is one
/// file plus its registration; the boxed future costs one allocation per call.
pub trait Provider: Send + Sync + 'static {
    /// Asks the provider to carry out the operation under `instruction.provider_key`.
    fn execute<'a>(&'a self, instruction: &'a Instruction) -> BoxFuture<'a, ProviderOutcome>;

    /// Asks the provider what became of the operation with this key (and, when one was
    /// learnt, the provider's own reference).
    fn lookup<'a>(&'a self, instruction: &'a Instruction) -> BoxFuture<'a, LookupOutcome>;

    /// Whether re-sending a request with the same key is safe (the provider
    /// deduplicates by key). Decides whether an uncertain outcome may be retried and
    /// whether abandoned work may be re-sent.
    fn keyed_retries_safe(&self) -> bool;
}
