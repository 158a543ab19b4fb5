//! Agent API keys. A key is `opg_<key id>_<secret>`: the key id (public, 16 hex
//! characters) finds the agent row, then the SHA-256 of the whole key is compared in
//! constant time with the stored hash. The key itself is never stored.

use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

const PREFIX: &str = "opg_";
const KEY_ID_HEX: usize = 16;
const SECRET_HEX: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an opgate API key")]
pub struct AgentKeyError;

/// A presented or freshly generated key. `Debug` never prints the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct AgentKey {
    key_id: String,
    full: String,
}

impl std::fmt::Debug for AgentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentKey")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl AgentKey {
    pub fn generate() -> Self {
        let mut bytes = [0u8; (KEY_ID_HEX + SECRET_HEX) / 2];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        let (id, secret) = bytes.split_at(KEY_ID_HEX / 2);
        let key_id = hex::encode(id);
        let full = format!("{PREFIX}{key_id}_{}", hex::encode(secret));
        Self { key_id, full }
    }

    pub fn parse(raw: &str) -> Result<Self, AgentKeyError> {
        let rest = raw.strip_prefix(PREFIX).ok_or(AgentKeyError)?;
        let (key_id, secret) = rest.split_once('_').ok_or(AgentKeyError)?;
        let is_hex = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        };
        if !is_hex(key_id, KEY_ID_HEX) || !is_hex(secret, SECRET_HEX) {
            return Err(AgentKeyError);
        }
        Ok(Self {
            key_id: key_id.to_owned(),
            full: raw.to_owned(),
        })
    }

    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The lowercase hex SHA-256 of the whole key: what storage keeps.
    pub fn hash(&self) -> String {
        hex::encode(Sha256::digest(self.full.as_bytes()))
    }

    /// Compares this key's hash with a stored one without leaking, through timing,
    /// how many leading characters matched.
    pub fn matches_hash(&self, stored_hash: &str) -> bool {
        self.hash().as_bytes().ct_eq(stored_hash.as_bytes()).into()
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
        let key = AgentKey::generate();
        let parsed = AgentKey::parse(key.expose()).unwrap();
        assert_eq!(parsed.key_id(), key.key_id());
        assert!(parsed.matches_hash(&key.hash()));
        assert_eq!(key.hash().len(), 64);
    }

    #[test]
    fn keys_are_distinct_and_hashes_do_not_cross_match() {
        let (a, b) = (AgentKey::generate(), AgentKey::generate());
        assert_ne!(a.key_id(), b.key_id());
        assert!(!a.matches_hash(&b.hash()));
    }

    #[test]
    fn malformed_keys_are_rejected() {
        let good = AgentKey::generate();
        let text = good.expose();
        for bad in [
            "",
            "opg_",
            "sk_live_abc",
            &text[..text.len() - 1],
            &text.to_uppercase(),
            &text.replace('_', "-"),
        ] {
            assert!(AgentKey::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn debug_output_hides_the_secret() {
        let key = AgentKey::generate();
        let printed = format!("{key:?}");
        assert!(!printed.contains(key.expose()));
        assert!(printed.contains(key.key_id()));
    }
}
