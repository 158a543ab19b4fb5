//! Waiting on a condition instead of sleeping for a guessed time.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `probe` every 25 ms until it returns `Some`, or panics after `timeout`
/// naming `what` was awaited.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
