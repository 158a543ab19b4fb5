//! The two ways a catalog says no: `CatalogError` when the file itself is wrong (the
//! service must not start, and the message names the file, the kind or provider and
//! the field), and `BodyError` when an agent's body does not fit a declared kind.

use std::fmt;

/// The catalog entry an error is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Kind(String),
    Provider(String),
}

impl fmt::Display for Item {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Kind(name) => write!(f, "kind {name:?}"),
            Self::Provider(name) => write!(f, "provider {name:?}"),
        }
    }
}

/// A catalog that cannot be used. Every variant names the file it came from, so that
/// a service refusing to start says which of its files to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    #[error("catalog {file}: cannot read it: {cause}")]
    Unreadable { file: String, cause: String },
    /// Not TOML, or TOML of the wrong shape (a missing or unknown field, a wrong type):
    /// `message` is toml's own, with the line and column.
    #[error("catalog {file}: {}{message}", prefix(.item))]
    Syntax {
        file: String,
        item: Option<Item>,
        message: String,
    },
    /// Well-formed TOML whose content does not make sense.
    #[error("catalog {file}: {item}: field {field:?}: {message}")]
    Invalid {
        file: String,
        item: Item,
        field: String,
        message: String,
    },
}

fn prefix(item: &Option<Item>) -> String {
    item.as_ref()
        .map(|item| format!("{item}: "))
        .unwrap_or_default()
}

/// Builds the errors of one entry of one file.
pub(crate) struct Blame<'a> {
    pub file: &'a str,
    pub item: Item,
}

impl Blame<'_> {
    pub fn at(&self, field: &str, message: impl Into<String>) -> CatalogError {
        CatalogError::Invalid {
            file: self.file.to_owned(),
            item: self.item.clone(),
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

/// Why an agent's body was refused: one line per problem, each naming the field as a
/// JSON pointer (`"/quantity"`), or `body` for the body as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .problems.join("; "))]
pub struct BodyError {
    pub problems: Vec<String>,
}

impl BodyError {
    pub(crate) fn one(problem: String) -> Self {
        Self {
            problems: vec![problem],
        }
    }
}
