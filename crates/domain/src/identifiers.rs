//! Identifiers that arrive from agents and operators, validated on construction so that
//! an invalid one cannot exist past the edge.

use std::fmt;

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentifierError {
    #[error("{field} must not be empty")]
    Empty { field: &'static str },
    #[error("{field} must be at most {max} characters")]
    TooLong { field: &'static str, max: usize },
    #[error("{field} may contain only {allowed}")]
    InvalidCharacter {
        field: &'static str,
        allowed: &'static str,
    },
}

/// The agent's `Idempotency-Key`: 1..=255 visible ASCII characters (0x21..=0x7E),
/// taken exactly as sent (no trimming: a key is an opaque token).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub const MAX_LEN: usize = 255;

    pub fn parse(raw: &str) -> Result<Self, IdentifierError> {
        const FIELD: &str = "Idempotency-Key";
        if raw.is_empty() {
            return Err(IdentifierError::Empty { field: FIELD });
        }
        if raw.len() > Self::MAX_LEN {
            return Err(IdentifierError::TooLong {
                field: FIELD,
                max: Self::MAX_LEN,
            });
        }
        if !raw.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(IdentifierError::InvalidCharacter {
                field: FIELD,
                allowed: "visible ASCII characters (no spaces)",
            });
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A business identifier inside a request body (customer id, invoice id): trimmed,
/// 1..=100 characters, no control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BusinessId(String);

impl BusinessId {
    pub const MAX_CHARS: usize = 100;

    pub fn parse(field: &'static str, raw: &str) -> Result<Self, IdentifierError> {
        Self::parse_at_most(field, raw, Self::MAX_CHARS)
    }

    /// The same rules with another length limit (free text such as a refund's reason).
    pub fn parse_at_most(
        field: &'static str,
        raw: &str,
        max_chars: usize,
    ) -> Result<Self, IdentifierError> {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err(IdentifierError::Empty { field });
        }
        if trimmed.chars().count() > max_chars {
            return Err(IdentifierError::TooLong {
                field,
                max: max_chars,
            });
        }
        if trimmed.chars().any(is_invisible) {
            return Err(IdentifierError::InvalidCharacter {
                field,
                allowed: "printable characters (no control or invisible format characters)",
            });
        }
        Ok(Self(trimmed.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Control characters (Unicode Cc: NUL, U+0085, …) and format characters (Cf: U+200B,
/// the bidirectional overrides U+202E and U+2066–2069, U+FEFF, …): invisible, so an
/// identifier holding one looks like another that does not, to people and to logs.
/// An ASCII character (almost every one in a key) is answered without the table: Cc in
/// ASCII is U+0000-U+001F and U+007F, and no ASCII character is Cf.
fn is_invisible(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_control();
    }
    is_invisible_by_category(c)
}

fn is_invisible_by_category(c: char) -> bool {
    matches!(
        c.general_category(),
        GeneralCategory::Control | GeneralCategory::Format
    )
}

/// An agent's id, chosen by the operator: 1..=100 of `[A-Za-z0-9._-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AgentId(String);

impl AgentId {
    pub const MAX_LEN: usize = 100;

    pub fn parse(raw: &str) -> Result<Self, IdentifierError> {
        const FIELD: &str = "agent_id";
        if raw.is_empty() {
            return Err(IdentifierError::Empty { field: FIELD });
        }
        if raw.len() > Self::MAX_LEN {
            return Err(IdentifierError::TooLong {
                field: FIELD,
                max: Self::MAX_LEN,
            });
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if !raw.chars().all(allowed) {
            return Err(IdentifierError::InvalidCharacter {
                field: FIELD,
                allowed: "letters, digits, '.', '_' and '-'",
            });
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ascii_answer_is_the_tables() {
        for c in (0u8..=127).map(char::from) {
            assert_eq!(is_invisible(c), is_invisible_by_category(c), "{:?}", c);
        }
        assert!(is_invisible('\u{85}'));
        assert!(is_invisible('\u{202E}'));
        assert!(!is_invisible('é'));
    }

    #[test]
    fn idempotency_key_accepts_visible_ascii_up_to_255() {
        assert!(IdempotencyKey::parse("order-42:retry#1").is_ok());
        assert!(IdempotencyKey::parse(&"k".repeat(255)).is_ok());
    }

    #[test]
    fn idempotency_key_rejects_empty_long_space_and_non_ascii() {
        assert!(matches!(
            IdempotencyKey::parse(""),
            Err(IdentifierError::Empty { .. })
        ));
        assert!(matches!(
            IdempotencyKey::parse(&"k".repeat(256)),
            Err(IdentifierError::TooLong { max: 255, .. })
        ));
        for bad in ["has space", "tab\there", "caf\u{e9}", "nul\0"] {
            assert!(
                matches!(
                    IdempotencyKey::parse(bad),
                    Err(IdentifierError::InvalidCharacter { .. })
                ),
                "{bad:?} must be rejected"
            );
        }
    }

    #[test]
    fn business_id_is_trimmed_and_bounded() {
        let id = BusinessId::parse("customer_id", "  cus_1 ").unwrap();
        assert_eq!(id.as_str(), "cus_1");
        assert!(BusinessId::parse("customer_id", "   ").is_err());
        assert!(BusinessId::parse("customer_id", &"é".repeat(100)).is_ok());
        assert!(BusinessId::parse("customer_id", &"é".repeat(101)).is_err());
        assert!(BusinessId::parse("customer_id", "a\u{7}b").is_err());
        for invisible in [
            "\u{200b}",
            "a\u{202e}b",
            "\u{2066}x\u{2069}",
            "\u{feff}cus",
            "c\u{85}d",
            "nul\0",
        ] {
            assert!(
                BusinessId::parse("customer_id", invisible).is_err(),
                "{invisible:?} must be refused"
            );
        }
        assert!(BusinessId::parse("customer_id", "Zoë Ünal 名前").is_ok());
    }

    #[test]
    fn agent_id_allows_a_conservative_alphabet() {
        assert!(AgentId::parse("billing-agent_1.prod").is_ok());
        assert!(AgentId::parse("").is_err());
        assert!(AgentId::parse("has space").is_err());
        assert!(AgentId::parse(&"a".repeat(101)).is_err());
    }
}
