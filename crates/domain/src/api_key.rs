//! API keys of agents (`opg_…`) and operators (`opo_…`). A key is
//! `<prefix><key id>_<secret>`: the key id (public, 16 hex characters) finds the row,
//! then the SHA-256 of the whole key is compared in constant time with the stored
//! hash. The key itself is never stored. The prefix says which kind of principal it
//! belongs to, so an agent key can never pass for an operator's.

use crate::sha256_hex::sha256_hex;
use rand::RngCore;
use subtle::ConstantTimeEq;

/// Who a key belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Agent,
    Operator,
}

impl KeyKind {
    fn prefix(self) -> &'static str {
        match self {
            Self::Agent => "opg_",
            Self::Operator => "opo_",
        }
    }
}
const KEY_ID_HEX: usize = 16;
const SECRET_HEX: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an opgate API key")]
pub struct ApiKeyError;

/// A presented or freshly generated key. `Debug` never prints the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    kind: KeyKind,
    key_id: String,
    full: String,
    /// Computed once: a request compares it with the rate limiter's cached hash and
    /// with the stored one.
    hash: String,
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKey")
            .field("kind", &self.kind)
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl ApiKey {
    pub fn generate(kind: KeyKind) -> Self {
        let mut bytes = [0u8; (KEY_ID_HEX + SECRET_HEX) / 2];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        let (id, secret) = bytes.split_at(KEY_ID_HEX / 2);
        let key_id = hex::encode(id);
        let full = format!("{}{key_id}_{}", kind.prefix(), hex::encode(secret));
        Self::new(kind, key_id, full)
    }

    pub fn parse(raw: &str) -> Result<Self, ApiKeyError> {
        let (kind, rest) = [KeyKind::Agent, KeyKind::Operator]
            .into_iter()
            .find_map(|kind| Some((kind, raw.strip_prefix(kind.prefix())?)))
            .ok_or(ApiKeyError)?;
        let (key_id, secret) = rest.split_once('_').ok_or(ApiKeyError)?;
        let is_hex = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        };
        if !is_hex(key_id, KEY_ID_HEX) || !is_hex(secret, SECRET_HEX) {
            return Err(ApiKeyError);
        }
        Ok(Self::new(kind, key_id.to_owned(), raw.to_owned()))
    }

    fn new(kind: KeyKind, key_id: String, full: String) -> Self {
        let hash = sha256_hex(full.as_bytes());
        Self {
            kind,
            key_id,
            full,
            hash,
        }
    }

    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The lowercase hex SHA-256 of the whole key: what storage keeps.
    pub fn hash(&self) -> String {
        self.hash.clone()
    }

    /// Compares this key's hash with a stored one without leaking, through timing,
    /// how many leading characters matched.
    pub fn matches_hash(&self, stored_hash: &str) -> bool {
        self.hash.as_bytes().ct_eq(stored_hash.as_bytes()).into()
    }

    /// The key as text, for printing once at creation. Never log it.
    pub fn expose(&self) -> &str {
        &self.full
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_parse_back_and_match_their_hash() {
        let key = ApiKey::generate(KeyKind::Agent);
        let parsed = ApiKey::parse(key.expose()).unwrap();
        assert_eq!(parsed.kind(), KeyKind::Agent);
        assert_eq!(parsed.key_id(), key.key_id());
        assert!(parsed.matches_hash(&key.hash()));
        assert_eq!(key.hash().len(), 64);
    }

    #[test]
    fn keys_are_distinct_and_hashes_do_not_cross_match() {
        let (a, b) = (
            ApiKey::generate(KeyKind::Agent),
            ApiKey::generate(KeyKind::Agent),
        );
        assert_ne!(a.key_id(), b.key_id());
        assert!(!a.matches_hash(&b.hash()));
    }

    #[test]
    fn malformed_keys_are_rejected() {
        let good = ApiKey::generate(KeyKind::Agent);
        let text = good.expose();
        for bad in [
            "",
            "opg_",
            "sk_live_abc",
            &text[..text.len() - 1],
            &text.to_uppercase(),
            &text.replace('_', "-"),
        ] {
            assert!(ApiKey::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn operator_keys_are_told_apart_from_agent_keys() {
        let operator = ApiKey::generate(KeyKind::Operator);
        assert!(operator.expose().starts_with("opo_"));
        assert_eq!(
            ApiKey::parse(operator.expose()).unwrap().kind(),
            KeyKind::Operator
        );
        let forged = operator.expose().replacen("opo_", "opg_", 1);
        let as_agent = ApiKey::parse(&forged).unwrap();
        assert_eq!(as_agent.kind(), KeyKind::Agent);
        assert!(
            !as_agent.matches_hash(&operator.hash()),
            "the prefix is part of the hash"
        );
    }

    #[test]
    fn debug_output_hides_the_secret() {
        let key = ApiKey::generate(KeyKind::Operator);
        let printed = format!("{key:?}");
        assert!(!printed.contains(key.expose()));
        assert!(printed.contains(key.key_id()));
    }
}
