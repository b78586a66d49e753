//! The rules of taking a lease, whether of a whole phase task or of one
//! shard: who may take it, and what the history says when it is a takeover.
use todod_proto::lease::run_of;

/// How a store takes a lease: whether other daemons share its database,
/// and for how long a lease lasts.
#[derive(Clone, Copy)]
pub(super) struct Terms {
    pub(super) shared: bool,
    pub(super) lease_ms: i64,
}

/// Whether `attempt` may take a lease (of a task or a shard) that
/// `previous` holds until `expires`, `now` on the database's clock:
/// `None` if not, else whether it is a takeover from another daemon run.
/// Another daemon's run that renews its lease is alive: not ours to take
/// on a shared database. A holder without a lease row has no lease at all
/// (started before leases were kept): nobody renews it, so it is taken.
pub(super) fn may_take(
    previous: Option<&str>,
    expires: Option<i64>,
    now: i64,
    attempt: &str,
    shared: bool,
) -> Option<bool> {
    let another_run = previous.is_some_and(|p| run_of(p) != run_of(attempt));
    if shared && another_run && expires.is_some_and(|at| at > now) {
        return None;
    }
    Some(another_run)
}

/// Why a run took over from another daemon run (the `resumed` event).
pub(super) fn resumed_reason(shared: bool) -> &'static str {
    if shared {
        "the daemon run that held it handed it back or stopped renewing its lease; the run \
         goes on from its last checkpoint"
    } else {
        "the daemon restarted; the run goes on from its last checkpoint"
    }
}

#[cfg(test)]
mod tests {
    use super::may_take;

    #[test]
    fn a_live_lease_of_another_run_is_refused_only_on_a_shared_database() {
        let (now, live, gone) = (1_000, Some(2_000), Some(500));
        assert_eq!(may_take(Some("b-1-f.3"), live, now, "a-1-e.1", true), None);
        assert_eq!(
            may_take(Some("b-1-f.3"), live, now, "a-1-e.1", false),
            Some(true)
        );
        assert_eq!(
            may_take(Some("b-1-f.3"), gone, now, "a-1-e.1", true),
            Some(true)
        );
        // No lease row: nobody renews it.
        assert_eq!(
            may_take(Some("b-1-f.3"), None, now, "a-1-e.1", true),
            Some(true)
        );
        // The same daemon run's own, or nobody's: no takeover.
        assert_eq!(
            may_take(Some("a-1-e.2"), live, now, "a-1-e.5", true),
            Some(false)
        );
        assert_eq!(may_take(None, live, now, "a-1-e.5", true), Some(false));
    }
}
