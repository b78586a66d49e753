//! Keeps this daemon's phase leases alive: renews every lease its runs hold
//! every third of the term, on a task of its own, so that no other await of
//! the runtime (a slow listing, a start waiting for the write lock) delays a
//! renewal past the lease's end. Each renewal is given a third of the term;
//! a renewal that fails or does not answer in time is tried at the next
//! tick, and the runtime stops the runs whose lease may have lapsed. On a
//! shared database it also renews the daemon's presence, runs or none,
//! which the others count to share sharded tasks out.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use crate::phase::PhaseStore;

/// How often the leases of running runs are renewed: a third of their term,
/// so that two renewals may fail before one expires.
pub fn renew_every(store: &PhaseStore) -> std::time::Duration {
    store.lease() / 3
}

pub struct LeaseKeeper {
    /// When the last renewal that succeeded was sent (the database counts
    /// the new term from inside its transaction, after that).
    renewed: Arc<Mutex<Instant>>,
    /// How many runs this daemon has: no renewal is written while none.
    runs: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl LeaseKeeper {
    /// Starts renewing the leases of daemon run `run_id`'s attempts.
    pub fn start(store: PhaseStore, run_id: String) -> LeaseKeeper {
        let renewed = Arc::new(Mutex::new(Instant::now()));
        let runs = Arc::new(AtomicUsize::new(0));
        let (stamp, count) = (renewed.clone(), runs.clone());
        let task = tokio::spawn(async move {
            // On a shared database the first renewal is at once: it says
            // this daemon is alive, and the others then leave it its share
            // of sharded tasks.
            let mut first = store.is_shared();
            loop {
                let every = renew_every(&store);
                if !first {
                    tokio::time::sleep(every).await;
                }
                first = false;
                // Alone on a database, nobody counts the daemons alive:
                // nothing to renew while no run holds a lease.
                if count.load(Ordering::Relaxed) == 0 && !store.is_shared() {
                    continue;
                }
                let sent = Instant::now();
                match tokio::time::timeout(every, store.renew_leases(&run_id)).await {
                    Ok(Ok(_)) => *stamp.lock().unwrap_or_else(|p| p.into_inner()) = sent,
                    Ok(Err(error)) => tracing::warn!(%error, "cannot renew the runs' leases"),
                    Err(_) => tracing::warn!(
                        waited = ?every,
                        "renewing the runs' leases did not finish in time"
                    ),
                }
            }
        });
        LeaseKeeper {
            renewed,
            runs,
            task,
        }
    }

    /// How many runs the daemon has now.
    pub fn set_runs(&self, runs: usize) {
        self.runs.store(runs, Ordering::Relaxed);
    }

    /// Whether the lease taken at `taken` (sent then) may have lapsed:
    /// neither taken nor renewed within 90 % of the term.
    pub fn lapsed(&self, store: &PhaseStore, taken: Instant) -> bool {
        let renewed = *self.renewed.lock().unwrap_or_else(|p| p.into_inner());
        renewed.max(taken).elapsed() >= store.lease().mul_f64(0.9)
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}
