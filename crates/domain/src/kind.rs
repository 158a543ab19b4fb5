//! Operation kinds: what an agent may ask for. A kind is named by a short lowercase
//! word that appears in the route (`POST /agent/operations/{kind}`), in the agent's
//! grants and in the stored `operation_type`. Two are built in; any others are
//! declared in a catalog file.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a kind name: use 1 to 63 of a-z, 0-9 and '_', starting with a letter")]
pub struct InvalidKindName(pub String);

/// A syntactically valid kind name (whether such a kind exists is the registry's
/// business). The database CHECKs the same pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KindName(String);

impl KindName {
    pub const MAX_LEN: usize = 63;

    pub fn parse(raw: &str) -> Result<Self, InvalidKindName> {
        let mut chars = raw.chars();
        let valid = raw.len() <= Self::MAX_LEN
            && chars.next().is_some_and(|c| c.is_ascii_lowercase())
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if valid {
            Ok(Self(raw.to_owned()))
        } else {
            Err(InvalidKindName(raw.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KindName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The kinds opgate knows without a catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BuiltinKind {
    Payment,
    Refund,
}

impl BuiltinKind {
    pub const ALL: [BuiltinKind; 2] = [Self::Payment, Self::Refund];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Payment => "payment",
            Self::Refund => "refund",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == raw)
    }

    pub fn name(self) -> KindName {
        KindName(self.as_str().to_owned())
    }
}

/// The provider that speaks opgate's own HTTP provider contract (provider-sim, or a
/// provider's service built to it): built-in kinds use it unless configured otherwise.
pub const OPGATE_HTTP_PROVIDER: &str = "opgate-http";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_are_short_lowercase_words() {
        for good in ["payment", "refund", "order", "cloud_vm2", "a"] {
            assert_eq!(KindName::parse(good).unwrap().as_str(), good);
        }
        let too_long = "k".repeat(64);
        for bad in [
            "",
            "Payment",
            "2fa",
            "_x",
            "pay-ment",
            "pay ment",
            "é",
            too_long.as_str(),
        ] {
            assert!(KindName::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn builtin_kinds_round_trip() {
        for kind in BuiltinKind::ALL {
            assert_eq!(BuiltinKind::parse(kind.as_str()), Some(kind));
            assert_eq!(kind.name().as_str(), kind.as_str());
        }
        assert_eq!(BuiltinKind::parse("order"), None);
    }
}
