//! Failed logins per client address: a token bucket per address (a burst of
//! [`FREE_FAILURES`], refilled one token every [`REFILL`]). An address whose bucket is empty
//! waits [`PENALTY`] before its failure is answered, which bounds how fast it can guess.
//! The table holds at most [`MAX_ADDRESSES`]; when full, the stalest entry goes.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

const FREE_FAILURES: f64 = 5.0;
const REFILL: Duration = Duration::from_secs(1);
pub const PENALTY: Duration = Duration::from_millis(500);
const MAX_ADDRESSES: usize = 10_000;

#[derive(Default)]
pub struct FailedLogins {
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

impl FailedLogins {
    /// Records a failed login from `address`; returns how long to wait before answering.
    pub fn record_failure(&self, address: Option<IpAddr>) -> Duration {
        let Some(address) = address else { return Duration::ZERO };
        let now = Instant::now();
        let mut buckets = self.buckets.lock();
        if buckets.len() >= MAX_ADDRESSES && !buckets.contains_key(&address) {
            if let Some(stalest) = buckets.iter().min_by_key(|(_, bucket)| bucket.updated).map(|(address, _)| *address) {
                buckets.remove(&stalest);
            }
        }
        let bucket = buckets.entry(address).or_insert(Bucket { tokens: FREE_FAILURES, updated: now });
        let refilled = now.duration_since(bucket.updated).as_secs_f64() / REFILL.as_secs_f64();
        bucket.tokens = (bucket.tokens + refilled).min(FREE_FAILURES);
        bucket.updated = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Duration::ZERO
        } else {
            PENALTY
        }
    }

    pub fn tracked_addresses(&self) -> usize {
        self.buckets.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_free_then_failures_wait_and_the_table_stays_bounded() {
        let limiter = FailedLogins::default();
        let address: IpAddr = "10.0.0.1".parse().expect("address");
        let waits: Vec<Duration> = (0..7).map(|_| limiter.record_failure(Some(address))).collect();
        assert_eq!(&waits[..5], &[Duration::ZERO; 5]);
        assert_eq!(waits[6], PENALTY);
        assert_eq!(limiter.record_failure(None), Duration::ZERO);
        for index in 0..(MAX_ADDRESSES as u32 + 10) {
            limiter.record_failure(Some(IpAddr::from(index.to_be_bytes())));
        }
        assert_eq!(limiter.tracked_addresses(), MAX_ADDRESSES);
    }
}
