//! The refund kind's part of a registration: its body, the payment it refunds (read
//! for its currency; another agent's payment does not exist), and what the store's
//! refund registration answers. Whether the refund fits is the database's decision.

use opgate_domain::{Currency, OperationRequest, RefundRequest};
use opgate_store::{OperationRecord, RefundRegistration, Registration, Store};
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

pub struct PreparedRefund {
    pub request: OperationRequest,
    pub payment_operation_id: Uuid,
}

pub async fn prepare(
    body: &[u8],
    store: &Store,
    agent_id: &str,
) -> Result<PreparedRefund, Problem> {
    let body: RefundBody = parse_object(body)?;
    let payment_operation_id = RefundRequest::parse_payment_id(&body.payment_operation_id)
        .map_err(|e| Problem::invalid_body(e.to_string()))?;
    let payment = store
        .find_operation_for_agent(payment_operation_id, agent_id)
        .await?
        .filter(|op| op.operation_type == "payment")
        .ok_or_else(Problem::payment_not_found)?;
    let amount = body.amount.as_deref().map(amount_text).transpose()?;
    let refund = RefundRequest::parse(
        payment_operation_id,
        amount.as_deref(),
        body.reason.as_deref(),
        currency_of(&payment)?,
    )
    .map_err(|e| Problem::invalid_body(e.to_string()))?;
    Ok(PreparedRefund {
        request: refund.to_operation_request(),
        payment_operation_id,
    })
}

fn currency_of(payment: &OperationRecord) -> Result<Currency, Problem> {
    let code = payment.currency.as_deref().ok_or_else(Problem::internal)?;
    Currency::parse(code).map_err(|_| Problem::internal())
}

/// The registration's answer, or the problem that refused it (nothing written).
pub fn answer(registration: RefundRegistration) -> Result<Registration, Problem> {
    match registration {
        RefundRegistration::Registered(registration) => Ok(registration),
        RefundRegistration::PaymentNotFound => Err(Problem::payment_not_found()),
        RefundRegistration::PaymentNotRefundable(status) => {
            Err(Problem::payment_not_refundable(status.as_str()))
        }
        RefundRegistration::ExceedsPayment { refundable } => {
            Err(Problem::refund_exceeds_payment(&refundable.to_string()))
        }
    }
}
