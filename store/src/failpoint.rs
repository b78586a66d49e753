//! Named places where a test can make the daemon fail on purpose, the way a
//! bug would: `TODOD_FAILPOINTS=pipeline.write=panic@5` panics at the fifth
//! time a phase writes a record; `abort` ends the process on the spot, as
//! kill -9 would, and `stall2000` blocks the thread for 2 s, as a disk that
//! stops answering would. Read once, at the first hit; with the
//! variable unset a hit costs one atomic load.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

#[derive(Clone, Copy)]
enum Action {
    Panic,
    /// End the process on the spot (as kill -9 would: nothing cleaned up).
    Abort,
    /// Block the thread this long (a disk that stops answering).
    Stall(std::time::Duration),
}

struct Point {
    /// Act at this hit (1-based); 0 means every hit.
    at: u64,
    what: Action,
    hits: AtomicU64,
}

fn points() -> &'static HashMap<String, Point> {
    static POINTS: OnceLock<HashMap<String, Point>> = OnceLock::new();
    POINTS.get_or_init(|| {
        let spec = std::env::var("TODOD_FAILPOINTS").unwrap_or_default();
        spec.split(',')
            .filter_map(|entry| {
                let (name, action) = entry.trim().split_once('=')?;
                let (word, at) = action.split_once('@').unwrap_or((action, "0"));
                let at = at.parse().ok()?;
                let what = match word {
                    "panic" => Action::Panic,
                    "abort" => Action::Abort,
                    stall => Action::Stall(std::time::Duration::from_millis(
                        stall.strip_prefix("stall")?.parse().ok()?,
                    )),
                };
                Some((
                    name.to_string(),
                    Point {
                        at,
                        what,
                        hits: AtomicU64::new(0),
                    },
                ))
            })
            .collect()
    })
}

/// Acts (panics, aborts or stalls) if the failpoint `name` is armed for this hit.
pub fn hit(name: &str) {
    let points = points();
    if points.is_empty() {
        return;
    }
    if let Some(point) = points.get(name) {
        let n = point.hits.fetch_add(1, Ordering::Relaxed) + 1;
        if point.at == 0 || point.at == n {
            match point.what {
                Action::Panic => panic!("failpoint {name} (hit {n})"),
                Action::Abort => {
                    eprintln!("failpoint {name} (hit {n}): aborting");
                    std::process::abort();
                }
                Action::Stall(how_long) => {
                    eprintln!("failpoint {name} (hit {n}): stalling {how_long:?}");
                    std::thread::sleep(how_long);
                }
            }
        }
    }
}
