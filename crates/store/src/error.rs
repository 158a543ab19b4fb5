//! The store's one error type. `Unavailable` means "the database could not be reached
//! or went away": callers answer 503 and try again later. Anything else is a bug or a
//! constraint the caller should have respected.

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("agent {0} already exists")]
    AgentExists(String),
    #[error("operator {0} already exists")]
    OperatorExists(String),
    /// Displays only the SQLSTATE and the server's message, never its DETAIL (which
    /// can quote row values, such as the key of a violated constraint).
    #[error("database error: {}", describe(.0))]
    Query(tokio_postgres::Error),
    #[error("stored data is invalid: {0}")]
    Corrupt(String),
    #[error("{0}")]
    BatchFailed(String),
    #[error("migration failed: {0}")]
    Migration(String),
    #[error("citus: {0}")]
    Citus(String),
}

impl StoreError {
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }

    /// The same failure for another member of a failed batch (errors are not Clone).
    pub fn for_batch_member(&self) -> StoreError {
        match self {
            Self::Unavailable(message) => Self::Unavailable(message.clone()),
            other => Self::BatchFailed(format!("the batch it was part of failed: {other}")),
        }
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(error: tokio_postgres::Error) -> Self {
        if is_connection_failure(&error) {
            StoreError::Unavailable(error.to_string())
        } else {
            StoreError::Query(error)
        }
    }
}

/// A status the domain does not know, read back from the database.
impl From<opgate_domain::UnknownStatus> for StoreError {
    fn from(error: opgate_domain::UnknownStatus) -> Self {
        StoreError::Corrupt(error.to_string())
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(error: deadpool_postgres::PoolError) -> Self {
        match error {
            deadpool_postgres::PoolError::Backend(inner) => inner.into(),
            other => StoreError::Unavailable(other.to_string()),
        }
    }
}

/// A closed connection, an I/O failure, one of the SQLSTATEs that say the server is
/// going away or not accepting connections (class 08, 57P01..57P03, 53300), or a
/// statement cancelled by the statement timeout (57014): the database did not answer in
/// time, and the same request may succeed later.
fn is_connection_failure(error: &tokio_postgres::Error) -> bool {
    if error.is_closed() {
        return true;
    }
    if let Some(code) = error.code() {
        let code = code.code();
        return code.starts_with("08")
            || matches!(code, "57P01" | "57P02" | "57P03" | "53300" | "57014");
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if cause.is::<std::io::Error>() {
            return true;
        }
        source = cause.source();
    }
    false
}

fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("SQLSTATE {}: {}", db.code().code(), db.message()),
        None => error.to_string(),
    }
}
