//! A phase lease's holder as people read it. The daemon names an attempt
//! `HOST-PID-NANOS.N`: the daemon run (its host, its process id, and the
//! nanoseconds that tell two runs of one process id apart), then the
//! attempt's number in that run. `todoctl status` and the status page show
//! `HOST-PID` and `N`.

/// The daemon run an attempt belongs to: `node-3-4121-18a2b3c4d5e6f` for
/// `node-3-4121-18a2b3c4d5e6f.2` (the whole text if it has no `.N`).
pub fn run_of(holder: &str) -> &str {
    holder.rsplit_once('.').map_or(holder, |(run, _)| run)
}

/// `(daemon, attempt)`: `("node-3-4121", "2")` for
/// `node-3-4121-18a2b3c4d5e6f.2`. A holder of another form is shown whole.
pub fn holder_parts(holder: &str) -> (&str, &str) {
    let run = run_of(holder);
    let attempt = holder.get(run.len() + 1..).unwrap_or("");
    let daemon = run.rsplit_once('-').map_or(run, |(daemon, _)| daemon);
    (daemon, attempt)
}

#[cfg(test)]
mod tests {
    use super::holder_parts;

    #[test]
    fn a_holder_splits_into_its_daemon_and_attempt() {
        assert_eq!(
            holder_parts("node-3.cluster-4121-18a2b3c4d5e6f.2"),
            ("node-3.cluster-4121", "2")
        );
        assert_eq!(holder_parts("odd"), ("odd", ""));
    }
}
