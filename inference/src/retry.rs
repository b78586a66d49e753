//! Why a request failed, whether that is worth another attempt, and how long
//! to wait first: exponential backoff with full jitter, Retry-After honoured up
//! to a cap, attempts bounded. Plain logic, no I/O.
use std::time::Duration;

/// How an attempt failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    #[error("cannot connect: {0}")]
    Connect(String),
    /// `which` says which limit: "connect", "deadline" or "idle".
    #[error("timed out ({which})")]
    Timeout { which: &'static str },
    #[error("HTTP {code}: {message}")]
    Status {
        code: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    /// A stream that ended without a finish_reason or without `[DONE]`.
    #[error("incomplete response: {0}")]
    Incomplete(String),
    /// A body that is not the JSON an OpenAI-compatible server sends.
    #[error("malformed response: {0}")]
    Malformed(String),
}

impl Failure {
    /// Connect errors, timeouts, 408, 429, 5xx, cut streams and bad bodies are
    /// worth another attempt; other 4xx say the request itself is wrong.
    pub fn is_retryable(&self) -> bool {
        match self {
            Failure::Status { code, .. } => matches!(code, 408 | 429 | 500..=599),
            _ => true,
        }
    }

    /// The failure's class, as `/metrics` counts it.
    pub fn class(&self) -> todod_telemetry::Outcome {
        use todod_telemetry::Outcome;
        match self {
            Failure::Connect(_) => Outcome::connect,
            Failure::Timeout { .. } => Outcome::timeout,
            Failure::Status { code: 429, .. } => Outcome::rate_limited,
            Failure::Status { code, .. } if *code >= 500 => Outcome::server_error,
            Failure::Status { .. } => Outcome::client_error,
            Failure::Incomplete(_) => Outcome::incomplete,
            Failure::Malformed(_) => Outcome::malformed,
        }
    }

    /// Whether the failure says the endpoint itself is unwell (as opposed to
    /// busy or given a bad request): counts toward setting it aside.
    pub fn blames_endpoint(&self) -> bool {
        match self {
            Failure::Status { code, .. } => *code >= 500,
            Failure::Connect(_) | Failure::Timeout { .. } => true,
            Failure::Incomplete(_) | Failure::Malformed(_) => true,
        }
    }
}

/// Backoff policy for one request.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// The first retry waits up to this long.
    pub base: Duration,
    /// No computed wait exceeds this.
    pub cap: Duration,
    /// A server's Retry-After is honoured up to this long.
    pub retry_after_cap: Duration,
    /// Attempts in all, the first included.
    pub max_attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(60),
            retry_after_cap: Duration::from_secs(120),
            max_attempts: 8,
        }
    }
}

impl Backoff {
    /// The wait before attempt `attempt + 1`, after `failure` on attempt
    /// `attempt` (1-based); `None` when no attempt is left or it is pointless.
    /// `unit` is a uniform random number in [0, 1): full jitter.
    pub fn next_delay(&self, attempt: u32, failure: &Failure, unit: f64) -> Option<Duration> {
        if attempt >= self.max_attempts || !failure.is_retryable() {
            return None;
        }
        if let Failure::Status {
            retry_after: Some(wait),
            ..
        } = failure
        {
            return Some((*wait).min(self.retry_after_cap));
        }
        let exponent = attempt.saturating_sub(1).min(30);
        let ceiling = self.base.saturating_mul(1u32 << exponent).min(self.cap);
        Some(ceiling.mul_f64(unit.clamp(0.0, 1.0)))
    }
}

/// A uniform number in [0, 1) from the standard library's per-process random
/// keys; enough for jitter, which only needs to spread clients apart.
pub fn unit_random() -> f64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, retry_after: Option<u64>) -> Failure {
        Failure::Status {
            code,
            message: String::new(),
            retry_after: retry_after.map(Duration::from_secs),
        }
    }

    #[test]
    fn retryable_failures_are_the_transient_ones() {
        for code in [408, 429, 500, 502, 503, 504] {
            assert!(status(code, None).is_retryable(), "{code}");
        }
        for code in [400, 401, 403, 404, 422] {
            assert!(!status(code, None).is_retryable(), "{code}");
        }
        assert!(Failure::Incomplete("cut".into()).is_retryable());
        assert!(Failure::Timeout { which: "idle" }.is_retryable());
        assert!(!status(429, None).blames_endpoint());
        assert!(status(503, None).blames_endpoint());
    }

    #[test]
    fn backoff_grows_is_capped_jittered_and_bounded() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_secs(1),
            retry_after_cap: Duration::from_secs(5),
            max_attempts: 5,
        };
        let f = status(500, None);
        assert_eq!(b.next_delay(1, &f, 0.999_999).unwrap().as_millis(), 99);
        assert_eq!(
            b.next_delay(3, &f, 0.5).unwrap(),
            Duration::from_millis(200)
        );
        assert_eq!(
            b.next_delay(4, &f, 1.0).unwrap(),
            Duration::from_millis(800)
        );
        assert_eq!(b.next_delay(1, &f, 0.0).unwrap(), Duration::ZERO);
        assert_eq!(b.next_delay(5, &f, 0.5), None, "attempts are bounded");
        assert_eq!(b.next_delay(1, &status(400, None), 0.5), None);
        assert_eq!(
            b.next_delay(1, &status(429, Some(2)), 0.1),
            Some(Duration::from_secs(2)),
            "Retry-After is honoured"
        );
        assert_eq!(
            b.next_delay(1, &status(429, Some(600)), 0.1),
            Some(Duration::from_secs(5)),
            "up to its cap"
        );
    }

    #[test]
    fn random_units_are_in_range_and_vary() {
        let draws: Vec<f64> = (0..100).map(|_| unit_random()).collect();
        assert!(draws.iter().all(|u| (0.0..1.0).contains(u)));
        assert!(draws.windows(2).any(|w| w[0] != w[1]));
    }
}
