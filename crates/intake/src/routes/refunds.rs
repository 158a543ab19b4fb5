//! The refund kind's part of a registration: its body, and what the store's refund
//! registration answers. The store reads the payment it refunds (another agent's
//! payment does not exist) under its lock, parses the amount in the payment's
//! currency, and decides whether the refund fits.

use opgate_domain::RefundRequest;
use opgate_store::{RefundRegistration, Registration};
use serde::Deserialize;
use serde_json::value::RawValue;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::body::{amount_text, parse_object};
use crate::problem::Problem;

/// The body of a refund request. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefundBody {
    /// The `operation_id` of one of this agent's SUCCEEDED payments.
    pub payment_operation_id: String,
    /// What to give back, in the payment's currency; what remains refundable when
    /// absent.
    #[serde(default)]
    #[schema(value_type = Option<String>, example = "30.00")]
    pub amount: Option<Box<RawValue>>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// A refund's body, checked for its shape: its amount and reason are read in the
/// payment's currency by the store, once the payment is locked.
pub struct PreparedRefund {
    pub payment_operation_id: Uuid,
    pub amount: Option<String>,
    pub reason: Option<String>,
}

pub fn prepare(body: &[u8]) -> Result<PreparedRefund, Problem> {
    let body: RefundBody = parse_object(body)?;
    let payment_operation_id = RefundRequest::parse_payment_id(&body.payment_operation_id)
        .map_err(|e| Problem::invalid_body(e.to_string()))?;
    let amount = body.amount.as_deref().map(amount_text).transpose()?;
    Ok(PreparedRefund {
        payment_operation_id,
        amount,
        reason: body.reason,
    })
}

/// The registration's answer, or the problem that refused it (nothing written);
/// `None` for a remembered agent that the transaction did not confirm.
pub fn answer(registration: RefundRegistration) -> Result<Option<Registration>, Problem> {
    match registration {
        RefundRegistration::Registered(registration) => Ok(Some(registration)),
        RefundRegistration::Unconfirmed => Ok(None),
        RefundRegistration::Invalid(invalid) => Err(Problem::invalid_body(invalid.to_string())),
        RefundRegistration::PaymentNotFound => Err(Problem::payment_not_found()),
        RefundRegistration::PaymentNotRefundable(status) => {
            Err(Problem::payment_not_refundable(status.as_str()))
        }
        RefundRegistration::ExceedsPayment { refundable } => {
            Err(Problem::refund_exceeds_payment(&refundable.to_string()))
        }
    }
}
