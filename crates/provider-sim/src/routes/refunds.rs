//! `POST /v1/refunds` and `GET /v1/refunds?idempotency_key=K`.

use hyper::body::Incoming;
use hyper::{Request, StatusCode};
use serde_json::json;

use super::{
    accept_key, created_reply, found, injected_delay, lookup_key, read_json, throttled, Handled,
};
use crate::model::CreateRefundRequest;
use crate::state::{RefundRejection, SimState};

pub(super) async fn create(state: &SimState, req: Request<Incoming>) -> Handled {
    let key = match accept_key(state, &req) {
        Ok(key) => key,
        Err(handled) => return handled,
    };
    let request = match read_json::<CreateRefundRequest>(req).await {
        Ok(body) => match body.validate() {
            Ok(request) => request,
            Err(message) => return Handled::bad_request(message),
        },
        Err(handled) => return handled,
    };
    if let Some(handled) = throttled(state, &key) {
        return handled;
    }
    let delayed = injected_delay(state).await;
    let handled = match state.create_refund(&key, request) {
        Ok(outcome) => created_reply(state, outcome, StatusCode::OK),
        Err(rejection) => rejected(rejection),
    };
    handled.delayed(delayed).answered_late(state).await
}

pub(super) fn lookup(state: &SimState, query: Option<&str>) -> Handled {
    match lookup_key(query) {
        Ok(key) => found(state, state.refund_by_key(&key)),
        Err(handled) => handled,
    }
}

fn rejected(rejection: RefundRejection) -> Handled {
    match rejection {
        RefundRejection::PaymentNotFound => {
            Handled::error(StatusCode::NOT_FOUND, "payment not found")
        }
        RefundRejection::NotRefundable => Handled::bad_request("payment is not refundable"),
        RefundRejection::CurrencyMismatch => {
            Handled::bad_request("currency differs from the payment's")
        }
        // The amounts tell the caller what is left; they are the caller's own data.
        RefundRejection::ExceedsAmountPaid {
            amount_paid,
            amount_refunded,
        } => Handled::json(
            StatusCode::BAD_REQUEST,
            &json!({
                "error": "refund exceeds the amount paid",
                "amount_paid": amount_paid.to_string(),
                "amount_refunded": amount_refunded.to_string(),
                "amount_refundable": (amount_paid - amount_refunded).to_string(),
            }),
        ),
    }
}
