//! The payment kind's part of a registration: its body and the validated request it
//! becomes (the shared flow is in `create.rs`).

use opgate_domain::{AgentPolicy, OperationRequest, PaymentRequest};
use serde::Deserialize;
use serde_json::value::RawValue;
use utoipa::ToSchema;

use crate::body::{amount_text, parse_object};
use crate::problem::Problem;

/// The body of a payment request. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PaymentBody {
    pub customer_id: String,
    pub invoice_id: String,
    /// Decimal amount, as a string ("250.00") or a number; > 0, with no more decimals
    /// than the currency allows. Strings are exact; prefer them.
    #[schema(value_type = String, example = "250.00")]
    pub amount: Box<RawValue>,
    /// ISO 4217 code; USD when absent.
    #[serde(default)]
    pub currency: Option<String>,
}

/// Validates the body and the agent's limits for the amount.
pub fn parse(body: &[u8], policy: &AgentPolicy) -> Result<OperationRequest, Problem> {
    let body: PaymentBody = parse_object(body)?;
    let payment = PaymentRequest::parse(
        &body.customer_id,
        &body.invoice_id,
        &amount_text(&body.amount)?,
        body.currency.as_deref(),
    )
    .map_err(|e| Problem::invalid_body(e.to_string()))?;
    policy
        .permits_amount(payment.money())
        .map_err(|denial| Problem::forbidden(denial.to_string()))?;
    Ok(payment.to_operation_request())
}
