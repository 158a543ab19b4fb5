//! opgate's domain: the validated types a request must become before anything is
//! written, the operation state machine, and the canonical request hash.
//! Nothing here performs I/O; every other crate depends on this one.

pub mod agent_policy;
pub mod api_key;
pub mod backoff;
pub mod identifiers;
pub mod kind;
pub mod money;
pub mod operation_id;
pub mod operation_request;
pub mod payment;
pub mod rate_limit;
pub mod refund;
pub mod request_hash;
mod sha256_hex;
pub mod status;
pub mod transition;

pub use agent_policy::{AgentPolicy, PolicyDenial};
pub use api_key::{ApiKey, ApiKeyError, KeyKind};
pub use identifiers::{AgentId, BusinessId, IdempotencyKey, IdentifierError};
pub use kind::{BuiltinKind, InvalidKindName, KindName, OPGATE_HTTP_PROVIDER};
pub use money::{Currency, Money, MoneyError};
pub use operation_id::new_operation_id;
pub use operation_request::OperationRequest;
pub use payment::{PaymentRequest, PaymentRequestError};
pub use rate_limit::{InvalidRateLimit, RateLimit};
pub use refund::{RefundRequest, RefundRequestError};
pub use request_hash::RequestHash;
pub use status::{NextAction, OperationStatus, UnknownStatus};
pub use transition::Transition;
