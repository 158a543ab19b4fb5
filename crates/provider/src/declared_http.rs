//! The declared HTTP adapter: one provider of the catalog (`[providers.NAME]`) and the
//! declared kinds bound to it, each executed and looked up exactly as its catalog entry
//! says (method, path, idempotency header, and how an answer maps to an outcome). The
//! body sent is the operation's normalised request as registered.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request};
use opgate_catalog::{fill_path, Catalog, Classified, DeclaredKind, DeclaredProvider};

use crate::http_client::HttpClient;
use crate::outcome::{classify_status, LookupOutcome, ProviderOutcome};
use crate::{BoxFuture, Instruction, Provider};

pub struct DeclaredHttpProvider {
    client: HttpClient,
    catalog: Arc<Catalog>,
    name: String,
    base_url: String,
    keyed_retries_safe: bool,
}

impl DeclaredHttpProvider {
    /// The provider `provider` of `catalog`, serving every kind bound to it.
    pub fn new(
        catalog: Arc<Catalog>,
        provider: &DeclaredProvider,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Self {
        Self {
            client: HttpClient::new(connect_timeout, response_timeout),
            name: provider.name.clone(),
            base_url: provider.base_url.clone(),
            keyed_retries_safe: provider.keyed_retries_safe,
            catalog,
        }
    }

    fn kind_of(&self, instruction: &Instruction) -> Result<&DeclaredKind, String> {
        let kind = self.catalog.kind(&instruction.kind);
        kind.filter(|kind| kind.provider() == self.name)
            .ok_or_else(|| {
                format!(
                    "the catalog binds no {:?} operations to this provider",
                    instruction.kind
                )
            })
    }

    async fn execute_now(&self, instruction: &Instruction) -> ProviderOutcome {
        let kind = match self.kind_of(instruction) {
            Ok(kind) => kind,
            Err(cause) => return ProviderOutcome::NotSent { cause },
        };
        let execute = kind.execute();
        let operation_id = instruction.operation_id.to_string();
        let Some(path) = fill_path(
            &execute.path,
            &instruction.provider_key,
            &operation_id,
            None,
        ) else {
            return ProviderOutcome::NotSent {
                cause: "the execute path needs a value the operation does not have".into(),
            };
        };
        let method = Method::from_bytes(execute.method.as_bytes()).unwrap_or(Method::POST);
        let request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base_url))
            .header("content-type", "application/json")
            .header(
                execute.idempotency_header.as_str(),
                &instruction.provider_key,
            )
            .body(Full::new(Bytes::from(instruction.payload.to_string())));
        let request = match request {
            Ok(request) => request,
            Err(error) => {
                return ProviderOutcome::NotSent {
                    cause: format!("could not build the request: {error}"),
                }
            }
        };
        self.client
            .exchange(request)
            .await
            .executed(|status, body| answered(kind, status, body))
    }

    async fn lookup_now(&self, instruction: &Instruction) -> LookupOutcome {
        let kind = match self.kind_of(instruction) {
            Ok(kind) => kind,
            Err(cause) => return LookupOutcome::Unavailable { cause },
        };
        let operation_id = instruction.operation_id.to_string();
        let Some(path) = fill_path(
            &kind.lookup().path,
            &instruction.provider_key,
            &operation_id,
            instruction.provider_reference.as_deref(),
        ) else {
            // Looked up by the provider's reference, which never arrived.
            return LookupOutcome::NotFound;
        };
        let request = Request::builder()
            .method(Method::GET)
            .uri(format!("{}{path}", self.base_url))
            .body(Full::new(Bytes::new()));
        let request = match request {
            Ok(request) => request,
            Err(error) => {
                return LookupOutcome::Unavailable {
                    cause: format!("could not build the lookup: {error}"),
                }
            }
        };
        self.client
            .exchange(request)
            .await
            .looked_up(|status, body| answered(kind, status, body))
    }
}

/// A complete answer: a 2xx body is read by the kind's response mapping; any other
/// status is classified as for every provider.
fn answered(kind: &DeclaredKind, status: u16, body: &[u8]) -> ProviderOutcome {
    if !(200..=299).contains(&status) {
        return classify_status(status, body);
    }
    match kind.response().classify(body) {
        Classified::Succeeded { reference } => ProviderOutcome::Succeeded { reference },
        Classified::Failed { reference, code } => ProviderOutcome::Declined { reference, code },
        Classified::Pending { reference } => ProviderOutcome::Pending { reference },
        Classified::Unreadable { cause } => ProviderOutcome::Uncertain {
            cause: format!("provider answered 2xx but {cause}"),
        },
    }
}

impl Provider for DeclaredHttpProvider {
    fn execute<'a>(&'a self, instruction: &'a Instruction) -> BoxFuture<'a, ProviderOutcome> {
        Box::pin(self.execute_now(instruction))
    }

    fn lookup<'a>(&'a self, instruction: &'a Instruction) -> BoxFuture<'a, LookupOutcome> {
        Box::pin(self.lookup_now(instruction))
    }

    fn keyed_retries_safe(&self) -> bool {
        self.keyed_retries_safe
    }
}
