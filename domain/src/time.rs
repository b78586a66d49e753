//! Times as the daemon writes them: one formatter for the API, the
//! scheduler, the status page and every phase.
use std::time::UNIX_EPOCH;

/// A unix time in ms as every part of the daemon writes times: RFC 3339,
/// UTC, to the millisecond.
pub fn rfc3339(ms: i64) -> String {
    let at = UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(at).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_are_utc_to_the_millisecond() {
        assert_eq!(
            super::rfc3339(1_764_720_000_123),
            "2025-12-03T00:00:00.123Z"
        );
        assert_eq!(super::rfc3339(-5), "1970-01-01T00:00:00.000Z");
    }
}
