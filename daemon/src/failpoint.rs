//! Named places where a test can make the daemon fail on purpose, the way a
//! bug would: `TODOD_FAILPOINTS=pipeline.write=panic@5` panics at the fifth
//! time a phase writes a record; `abort` instead of `panic` ends the process
//! on the spot, as kill -9 would. Read once, at the first hit; with the
//! variable unset a hit costs one atomic load.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

struct Point {
    /// Act at this hit (1-based); 0 means every hit.
    at: u64,
    /// Abort the process (as kill -9 would end it: nothing cleaned up)
    /// rather than panic.
    abort: bool,
    hits: AtomicU64,
}

fn points() -> &'static HashMap<String, Point> {
    static POINTS: OnceLock<HashMap<String, Point>> = OnceLock::new();
    POINTS.get_or_init(|| {
        let spec = std::env::var("TODOD_FAILPOINTS").unwrap_or_default();
        spec.split(',')
            .filter_map(|entry| {
                let (name, action) = entry.trim().split_once('=')?;
                let (abort, rest) =
                    match (action.strip_prefix("panic"), action.strip_prefix("abort")) {
                        (Some(rest), _) => (false, rest),
                        (_, Some(rest)) => (true, rest),
                        _ => return None,
                    };
                let at = match rest {
                    "" => 0,
                    rest => rest.strip_prefix('@')?.parse().ok()?,
                };
                Some((
                    name.to_string(),
                    Point {
                        at,
                        abort,
                        hits: AtomicU64::new(0),
                    },
                ))
            })
            .collect()
    })
}

/// Panics if the failpoint `name` is armed for this hit.
pub fn hit(name: &str) {
    let points = points();
    if points.is_empty() {
        return;
    }
    if let Some(point) = points.get(name) {
        let n = point.hits.fetch_add(1, Ordering::Relaxed) + 1;
        if point.at == 0 || point.at == n {
            if point.abort {
                eprintln!("failpoint {name} (hit {n}): aborting");
                std::process::abort();
            }
            panic!("failpoint {name} (hit {n})");
        }
    }
}
