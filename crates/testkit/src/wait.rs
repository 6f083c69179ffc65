//! Waiting for a condition, never for a fixed time: a test polls what it waits for until it
//! holds, and fails naming it once a deadline passes. The deadline bounds waiting for work the
//! server does in the background; it is not a speed assertion.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Polls `check` until it answers true; panics naming `what` after `limit`.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "still not true after {limit:?}: {what}");
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Polls `check` until it answers `Some`, and returns that; panics naming `what` after `limit`.
pub async fn eventually_some<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "still not true after {limit:?}: {what}");
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The blocking form of [`eventually`], for tests without a runtime.
pub fn wait_until(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "still not true after {limit:?}: {what}");
        std::thread::sleep(POLL_INTERVAL);
    }
}
