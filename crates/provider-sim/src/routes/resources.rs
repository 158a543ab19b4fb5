//! `POST /v1/resources/{collection}`, `GET /v1/resources/{collection}?idempotency_key=K`
//! and `GET /v1/resources/{collection}/{id}`.

use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::Value;

use super::{
    accept_key, created_reply, found, injected_delay, lookup_key, not_found, read_json, throttled,
    Handled,
};
use crate::model::{valid_collection, NewResource, COLLECTION_RULE};
use crate::state::SimState;

pub(super) const PREFIX: &str = "/v1/resources/";

pub(super) async fn route(state: &SimState, path: &str, req: Request<Incoming>) -> Handled {
    let rest = path.strip_prefix(PREFIX).unwrap_or_default();
    let (collection, id) = match rest.split_once('/') {
        Some((collection, id)) => (collection, Some(id)),
        None => (rest, None),
    };
    let known = match (req.method(), id) {
        (&Method::POST | &Method::GET, None) => true,
        (&Method::GET, Some(id)) => !id.is_empty() && !id.contains('/'),
        _ => false,
    };
    if !known {
        return not_found();
    }
    // Checked before the key is counted: a bad collection is a bad address, not a
    // request the provider received.
    if !valid_collection(collection) {
        return Handled::bad_request(COLLECTION_RULE);
    }
    match (req.method(), id) {
        (&Method::POST, _) => create(state, collection, req).await,
        (_, Some(id)) => found(state, state.resource_by_id(collection, id)),
        (_, None) => match lookup_key(req.uri().query()) {
            Ok(key) => found(state, state.resource_by_key(collection, &key)),
            Err(handled) => handled,
        },
    }
}

async fn create(state: &SimState, collection: &str, req: Request<Incoming>) -> Handled {
    let key = match accept_key(state, &req) {
        Ok(key) => key,
        Err(handled) => return handled,
    };
    let request = match read_json::<Value>(req).await {
        Ok(body) => match NewResource::new(collection, body) {
            Ok(request) => request,
            Err(message) => return Handled::bad_request(message),
        },
        Err(handled) => return handled,
    };
    if let Some(handled) = throttled(state, &key) {
        return handled;
    }
    let delayed = injected_delay(state).await;
    created_reply(
        state,
        state.create_resource(&key, request),
        StatusCode::CREATED,
    )
    .delayed(delayed)
    .answered_late(state)
    .await
}
