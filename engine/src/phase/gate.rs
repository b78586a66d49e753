//! The gate of a running generation: each of its requests passes the gate
//! with one permit, so that a re-measurement can hold the run (take every
//! permit: the requests out finish, no new one starts), measure the server
//! alone at the same level, and let the run go on. The gate also carries
//! what the measurement found to the run's drift check, which must not judge
//! the held minutes as a drift and, afterwards, judges against the fresh
//! figures.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use todod_domain::TaskId;
use todod_proto::results::Projection;

/// The gates of the runs that have one, by task.
#[derive(Clone, Default)]
pub struct Gates(Arc<Mutex<HashMap<TaskId, Arc<Gate>>>>);

/// One run's gate.
pub struct Gate {
    permits: Arc<Semaphore>,
    size: u32,
    held: AtomicBool,
    /// Counts the holds that ended: the drift check starts afresh after each.
    holds_ended: AtomicU64,
    /// Milliseconds the run was held, over the holds that ended.
    held_ms: AtomicU64,
    /// What a re-measurement found, for the rest of the run.
    rebase: Mutex<Option<Projection>>,
    /// Woken when the run ends.
    ended: tokio::sync::Notify,
}

/// Keeps a gate registered while its run lives.
pub struct Registration {
    gates: Gates,
    task: TaskId,
    gate: Arc<Gate>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        // The run is over: a hold waiting for it, or measuring for it, must
        // learn so (it would measure for a run that is not there, or beside
        // the next run of the task).
        self.gate.permits.close();
        self.gate.ended.notify_waiters();
        let mut map = self.gates.0.lock().unwrap_or_else(|p| p.into_inner());
        // A newer run of the same task may have put its own gate there.
        if map
            .get(&self.task)
            .is_some_and(|g| Arc::ptr_eq(g, &self.gate))
        {
            map.remove(&self.task);
        }
    }
}

impl Registration {
    pub fn gate(&self) -> Arc<Gate> {
        self.gate.clone()
    }
}

/// A run held: every permit taken. Dropping it lets the run go on.
pub struct Hold {
    gate: Arc<Gate>,
    since: std::time::Instant,
    _permits: OwnedSemaphorePermit,
}

impl Drop for Hold {
    fn drop(&mut self) {
        let ms = self.since.elapsed().as_millis() as u64;
        self.gate.held_ms.fetch_add(ms, Ordering::AcqRel);
        // Counted as ended before it stops being held: a progress report in
        // between must not judge the held minutes as a drift.
        self.gate.holds_ended.fetch_add(1, Ordering::AcqRel);
        self.gate.held.store(false, Ordering::Release);
    }
}

impl Hold {
    /// Hands the run what to hold the rest of it against.
    pub fn rebase(&self, projection: Projection) {
        *self.gate.rebase.lock().unwrap_or_else(|p| p.into_inner()) = Some(projection);
    }
}

impl Gates {
    /// Registers the gate of a run of `task` with `concurrency` requests
    /// in flight at most.
    pub fn open(&self, task: TaskId, concurrency: usize) -> Registration {
        let gate = Gate::alone(concurrency);
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(task, gate.clone());
        Registration {
            gates: self.clone(),
            task,
            gate,
        }
    }

    pub fn get(&self, task: TaskId) -> Option<Arc<Gate>> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&task)
            .cloned()
    }
}

impl Gate {
    /// A gate no re-measurement can find (a shard's run: a re-measurement
    /// holds a whole task's run, which a sharded task does not have).
    pub fn alone(concurrency: usize) -> Arc<Gate> {
        let size = concurrency.clamp(1, Semaphore::MAX_PERMITS) as u32;
        Arc::new(Gate {
            permits: Arc::new(Semaphore::new(size as usize)),
            size,
            held: AtomicBool::new(false),
            holds_ended: AtomicU64::new(0),
            held_ms: AtomicU64::new(0),
            rebase: Mutex::new(None),
            ended: tokio::sync::Notify::new(),
        })
    }

    /// One request's pass; waits while the run is held.
    pub async fn pass(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().acquire_owned().await.ok()
    }

    /// Holds the run: waits for the requests out to finish (at most
    /// `drain`), while new ones queue behind the hold (the semaphore is
    /// fair). `None` if they did not finish in time; the run goes on.
    pub async fn hold(self: &Arc<Self>, drain: Duration) -> Option<Hold> {
        self.held.store(true, Ordering::Release);
        let since = std::time::Instant::now();
        let taken = tokio::time::timeout(drain, self.permits.clone().acquire_many_owned(self.size))
            .await
            .ok()
            .and_then(Result::ok);
        match taken {
            Some(permits) => Some(Hold {
                gate: self.clone(),
                since,
                _permits: permits,
            }),
            None => {
                let ms = since.elapsed().as_millis() as u64;
                self.held_ms.fetch_add(ms, Ordering::AcqRel);
                self.holds_ended.fetch_add(1, Ordering::AcqRel);
                self.held.store(false, Ordering::Release);
                None
            }
        }
    }

    /// Whether the run this gate is for has ended.
    pub fn run_ended(&self) -> bool {
        self.permits.is_closed()
    }

    /// Resolves when the run ends (at once if it has).
    pub async fn until_run_ends(&self) {
        let woken = self.ended.notified();
        if self.run_ended() {
            return;
        }
        woken.await;
    }

    /// The level the run sends at.
    pub fn concurrency(&self) -> usize {
        self.size as usize
    }

    pub fn is_held(&self) -> bool {
        self.held.load(Ordering::Acquire)
    }

    /// Milliseconds the run was held (or waited for a hold), over the holds
    /// that ended.
    pub fn held_ms(&self) -> u64 {
        self.held_ms.load(Ordering::Acquire)
    }

    pub fn holds_ended(&self) -> u64 {
        self.holds_ended.load(Ordering::Acquire)
    }

    /// What a re-measurement left, once.
    pub fn take_rebase(&self) -> Option<Projection> {
        self.rebase.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    #[tokio::test]
    async fn a_hold_waits_for_the_requests_out_and_stops_new_ones() {
        let gates = Gates::default();
        let registration = gates.open(TaskId(1), 2);
        let gate = gates.get(TaskId(1)).unwrap();
        let out = gate.pass().await.unwrap();
        // The hold cannot be had while a request is out.
        assert!(gate.hold(Duration::from_millis(20)).await.is_none());
        assert!(!gate.is_held());
        assert_eq!(gate.holds_ended(), 1);
        drop(out);
        let hold = gate.hold(Duration::from_secs(5)).await.unwrap();
        assert!(gate.is_held());
        // A new request waits behind it (it cannot pass, however long it
        // is given), and passes once the hold is let go.
        let mut waiting = Box::pin(gate.pass());
        assert!((&mut waiting).now_or_never().is_none(), "passed a hold");
        drop(hold);
        assert!(!gate.is_held());
        assert_eq!(gate.holds_ended(), 2);
        assert!(waiting.await.is_some());
        assert!(gate.pass().await.is_some());
        drop(registration);
        assert!(gates.get(TaskId(1)).is_none());
        // A hold asked for after the run ended does not wait for it.
        assert!(gate.run_ended());
        assert!(gate.hold(Duration::from_secs(5)).await.is_none());
        tokio::time::timeout(Duration::from_secs(1), gate.until_run_ends())
            .await
            .expect("ended");
    }

    #[test]
    fn a_newer_run_keeps_its_gate_when_the_older_one_ends() {
        let gates = Gates::default();
        let old = gates.open(TaskId(7), 1);
        let new = gates.open(TaskId(7), 4);
        drop(old);
        assert_eq!(gates.get(TaskId(7)).unwrap().concurrency(), 4);
        drop(new);
        assert!(gates.get(TaskId(7)).is_none());
    }
}
