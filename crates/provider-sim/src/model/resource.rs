//! Generic resources: whatever a catalog-declared operation kind creates (an order, a
//! booking, a provisioned thing). The simulator does not know their shape: it keeps
//! the JSON object it was sent, and a repeat must send the same object.

use serde::Serialize;
use serde_json::Value;

use super::{Record, Simulate, Status};

/// A resource as stored and as returned by every endpoint that returns one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resource {
    pub id: String,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_code: Option<String>,
    pub collection: String,
    pub idempotency_key: String,
    pub created_at: String,
    /// The body as sent.
    pub request: Value,
}

impl Record for Resource {
    fn id(&self) -> &str {
        &self.id
    }
}

/// One row of the ledger's `resources`: a resource that exists (succeeded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LedgerResource {
    pub resource_id: String,
    pub collection: String,
    pub idempotency_key: String,
    pub created_at: String,
}

impl LedgerResource {
    pub fn of(resource: &Resource) -> LedgerResource {
        LedgerResource {
            resource_id: resource.id.clone(),
            collection: resource.collection.clone(),
            idempotency_key: resource.idempotency_key.clone(),
            created_at: resource.created_at.clone(),
        }
    }
}

/// A validated `POST /v1/resources/{collection}`: a repeat must send an equal body
/// (compared as JSON values, so key order and spacing do not matter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewResource {
    pub collection: String,
    pub body: Value,
    pub simulate: Option<Simulate>,
}

impl NewResource {
    pub fn new(collection: &str, body: Value) -> Result<NewResource, String> {
        if !valid_collection(collection) {
            return Err(COLLECTION_RULE.into());
        }
        let Some(object) = body.as_object() else {
            return Err("body must be a JSON object".into());
        };
        Ok(NewResource {
            collection: collection.to_owned(),
            simulate: Simulate::from_field(object.get("simulate")),
            body,
        })
    }
}

pub const COLLECTION_RULE: &str = "collection must be 1 to 64 characters of a-z, 0-9, _ and -";

/// 1 to 64 characters of `[a-z0-9_-]`: safe in a path and in a log line.
pub fn valid_collection(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn collections() {
        for ok in ["orders", "a", "hotel_bookings-v2", &"x".repeat(64)] {
            assert!(valid_collection(ok), "{ok}");
        }
        for bad in ["", "Orders", "a/b", "a.b", "a b", "ä", &"x".repeat(65)] {
            assert!(!valid_collection(bad), "{bad}");
        }
    }

    #[test]
    fn bodies() {
        let new = NewResource::new("orders", json!({"sku": "A", "simulate": "failed"})).unwrap();
        assert_eq!(new.simulate, Some(Simulate::Failed));
        assert_eq!(new.body, json!({"simulate": "failed", "sku": "A"}));
        assert_eq!(
            NewResource::new("orders", json!({"simulate": 1}))
                .unwrap()
                .simulate,
            None
        );
        assert!(NewResource::new("orders", json!([1])).is_err());
        assert!(NewResource::new("orders", json!("x")).is_err());
        assert!(NewResource::new("Orders", json!({})).is_err());
    }
}
