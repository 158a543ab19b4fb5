//! A validated request of any kind, as the store registers it: the kind, the
//! normalised business fields (what is hashed and stored), their canonical hash, and
//! the money the operation moves, if any. Each kind's parser builds one; nothing past
//! intake needs to know which kind it came from.

use std::collections::BTreeMap;

use crate::kind::KindName;
use crate::money::Money;
use crate::request_hash::RequestHash;

#[derive(Debug, Clone, PartialEq)]
pub struct OperationRequest {
    kind: KindName,
    fields: serde_json::Value,
    hash: RequestHash,
    money: Option<Money>,
}

impl OperationRequest {
    /// From normalised string fields (built-in kinds): the canonical JSON is the compact,
    /// key-sorted object, which for string members is exactly RFC 8785's form. The
    /// payment hashes stored before kinds existed were computed this way.
    pub fn from_string_fields(
        kind: KindName,
        fields: BTreeMap<&'static str, String>,
        money: Option<Money>,
    ) -> Self {
        let canonical = serde_json::to_string(&fields).expect("a map of strings always serialises");
        let hash = RequestHash::of_canonical_json(&canonical);
        let fields = serde_json::to_value(&fields).expect("a map of strings always serialises");
        Self {
            kind,
            fields,
            hash,
            money,
        }
    }

    /// From a canonical JSON text computed by the caller (declared kinds: RFC 8785 over
    /// the normalised body); `fields` is what is stored as the payload.
    pub fn from_canonical(
        kind: KindName,
        fields: serde_json::Value,
        canonical_json: &str,
        money: Option<Money>,
    ) -> Self {
        Self {
            kind,
            fields,
            hash: RequestHash::of_canonical_json(canonical_json),
            money,
        }
    }

    pub fn kind(&self) -> &KindName {
        &self.kind
    }

    /// The normalised business fields, stored as the operation's payload.
    pub fn fields(&self) -> &serde_json::Value {
        &self.fields
    }

    pub fn request_hash(&self) -> &RequestHash {
        &self.hash
    }

    pub fn money(&self) -> Option<Money> {
        self.money
    }
}
