//! When a request is sent again: only before its reply's first event.

use std::time::Duration;

/// How often, and after how long, a request is sent again. A request is retried only while
/// nothing of its reply has been shown: after a connection error, after a `429` or `5xx`
/// status, or when the body fails or ends before its first event. Once an event has come,
/// an error ends the stream (the events already shown cannot be taken back), as Jan's
/// client does.
///
/// The wait before retry `n` (from 1) is `first_backoff × 2^(n-1)`, at most `max_backoff`;
/// a `Retry-After` header in seconds replaces it, still at most `max_backoff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    retries: u32,
    first_backoff: Duration,
    max_backoff: Duration,
}

impl Default for RetryPolicy {
    /// Two retries, after 500 ms and 1 s, `Retry-After` honoured up to 8 s.
    fn default() -> Self {
        Self::new(2, Duration::from_millis(500), Duration::from_secs(8))
    }
}

impl RetryPolicy {
    /// Never retry.
    pub const NONE: RetryPolicy = RetryPolicy {
        retries: 0,
        first_backoff: Duration::ZERO,
        max_backoff: Duration::ZERO,
    };

    /// Up to `retries` retries, the first after `first_backoff`, none waiting more than
    /// `max_backoff`.
    pub const fn new(retries: u32, first_backoff: Duration, max_backoff: Duration) -> Self {
        Self {
            retries,
            first_backoff,
            max_backoff,
        }
    }

    /// The most retries (requests sent: one more).
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// Whether a request that has been sent `attempts` times may be sent again.
    pub(crate) fn allows(&self, attempts: u32) -> bool {
        attempts <= self.retries
    }

    /// The wait before the request is sent for the `attempts + 1`-th time.
    pub(crate) fn backoff(&self, attempts: u32, retry_after: Option<Duration>) -> Duration {
        let exponential = self
            .first_backoff
            .saturating_mul(2u32.saturating_pow(attempts.saturating_sub(1)));
        retry_after.unwrap_or(exponential).min(self.max_backoff)
    }
}

/// Whether a response status means "send it again later": too many requests, or the
/// server's error (Anthropic's 529 "overloaded" included).
pub(crate) fn retriable_status(status: u16) -> bool {
    status == 429 || (500..600).contains(&status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_retry_after_replaces_it_within_the_cap() {
        let p = RetryPolicy::new(5, Duration::from_millis(100), Duration::from_millis(350));
        let waits: Vec<u128> = (1..=4).map(|a| p.backoff(a, None).as_millis()).collect();
        assert_eq!(waits, [100, 200, 350, 350]);
        assert_eq!(
            p.backoff(1, Some(Duration::from_secs(60))),
            Duration::from_millis(350)
        );
        assert!(p.allows(5) && !p.allows(6));
        assert!(!RetryPolicy::NONE.allows(1));
        assert!(retriable_status(429) && retriable_status(503) && retriable_status(529));
        assert!(!retriable_status(400) && !retriable_status(401) && !retriable_status(200));
    }
}
