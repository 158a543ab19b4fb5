//! `POST /v1/payments` and `GET /v1/payments?idempotency_key=K`.

use hyper::body::Incoming;
use hyper::{Request, StatusCode};

use super::{
    accept_key, created_reply, found, injected_delay, lookup_key, read_json, throttled, Handled,
};
use crate::model::CreatePaymentRequest;
use crate::state::SimState;

pub(super) async fn create(state: &SimState, req: Request<Incoming>) -> Handled {
    let key = match accept_key(state, &req) {
        Ok(key) => key,
        Err(handled) => return handled,
    };
    let request = match read_json::<CreatePaymentRequest>(req).await {
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
    created_reply(state, state.create_payment(&key, request), StatusCode::OK)
        .delayed(delayed)
        .answered_late(state)
        .await
}

pub(super) fn lookup(state: &SimState, query: Option<&str>) -> Handled {
    match lookup_key(query) {
        Ok(key) => found(state, state.payment_by_key(&key)),
        Err(handled) => handled,
    }
}
