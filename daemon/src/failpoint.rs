//! Named places where a test can make the daemon fail on purpose, the way a
//! bug would: `TODOD_FAILPOINTS=pipeline.write=panic@5` panics at the fifth
//! time a phase writes a record. Read once, at the first hit; with the
//! variable unset a hit costs one atomic load.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

struct Point {
    /// Panic at this hit (1-based); 0 means every hit.
    at: u64,
    hits: AtomicU64,
}

fn points() -> &'static HashMap<String, Point> {
    static POINTS: OnceLock<HashMap<String, Point>> = OnceLock::new();
    POINTS.get_or_init(|| {
        let spec = std::env::var("TODOD_FAILPOINTS").unwrap_or_default();
        spec.split(',')
            .filter_map(|entry| {
                let (name, action) = entry.trim().split_once('=')?;
                let at = match action.strip_prefix("panic") {
                    Some("") => 0,
                    Some(rest) => rest.strip_prefix('@')?.parse().ok()?,
                    None => return None,
                };
                Some((
                    name.to_string(),
                    Point {
                        at,
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
            panic!("failpoint {name} (hit {n})");
        }
    }
}
