//! What the writer connection is doing, for the daemon's liveness: who
//! holds it and since when, and since when the oldest write has waited for
//! it. A write that waits past a bound means calls cannot be served, and
//! health must say so (`server` turns it NOT_SERVING); the holder is named
//! by the store method that took the writer.
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Default)]
pub(super) struct WriterWatch {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next: u64,
    waiting: BTreeMap<u64, Instant>,
    holder: Option<(Instant, &'static std::panic::Location<'static>)>,
}

/// A write that has waited too long for the writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterStall {
    /// How long the oldest waiting write has waited.
    pub waited: Duration,
    /// How many writes wait.
    pub waiting: usize,
    /// The store method holding the writer (file:line), and for how long.
    pub holder: Option<(String, Duration)>,
}

impl std::fmt::Display for WriterStall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} write(s) have waited up to {:.1}s for the database writer",
            self.waiting,
            self.waited.as_secs_f64()
        )?;
        match &self.holder {
            Some((at, held)) => write!(f, ", held for {:.1}s by {at}", held.as_secs_f64()),
            None => Ok(()),
        }
    }
}

/// Counts a write as waiting until it is dropped or has the writer.
pub(super) struct Waiting<'a> {
    watch: &'a WriterWatch,
    ticket: Option<u64>,
}

/// Marks the writer held until dropped.
pub(super) struct Holding<'a>(&'a WriterWatch);

impl WriterWatch {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn wait(&self) -> Waiting<'_> {
        let mut state = self.lock();
        state.next += 1;
        let ticket = state.next;
        state.waiting.insert(ticket, Instant::now());
        Waiting {
            watch: self,
            ticket: Some(ticket),
        }
    }

    /// The stall, if the oldest waiting write has waited longer than
    /// `bound`, or one write has held the writer that long (a write is
    /// milliseconds: one that takes seconds is stuck, whether or not another
    /// waits yet).
    pub(super) fn stall(&self, bound: Duration) -> Option<WriterStall> {
        let state = self.lock();
        let waited = state
            .waiting
            .values()
            .next()
            .map_or(Duration::ZERO, |oldest| oldest.elapsed());
        let held = state
            .holder
            .map_or(Duration::ZERO, |(since, _)| since.elapsed());
        (waited > bound || held > bound).then(|| WriterStall {
            waited,
            waiting: state.waiting.len(),
            holder: state
                .holder
                .map(|(since, at)| (format!("{}:{}", at.file(), at.line()), since.elapsed())),
        })
    }
}

impl<'a> Waiting<'a> {
    /// The write has the writer now; `at` is the store method that took it.
    pub(super) fn acquired(mut self, at: &'static std::panic::Location<'static>) -> Holding<'a> {
        let mut state = self.watch.lock();
        if let Some(ticket) = self.ticket.take() {
            state.waiting.remove(&ticket);
        }
        state.holder = Some((Instant::now(), at));
        Holding(self.watch)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.watch.lock().waiting.remove(&ticket);
        }
    }
}

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.lock().holder = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_waiting_past_the_bound_is_a_stall_naming_the_holder() {
        let watch = WriterWatch::default();
        assert_eq!(watch.stall(Duration::ZERO), None, "nobody waits");
        let holding = watch.wait().acquired(std::panic::Location::caller());
        let waiting = watch.wait();
        std::thread::sleep(Duration::from_millis(5));
        let stall = watch.stall(Duration::from_millis(1)).expect("a stall");
        assert_eq!(stall.waiting, 1);
        assert!(stall.holder.as_ref().unwrap().0.contains("writer_watch.rs"));
        assert!(stall.to_string().contains("held for"), "{stall}");
        assert_eq!(
            watch.stall(Duration::from_secs(60)),
            None,
            "not past this bound"
        );
        drop(holding);
        drop(waiting);
        assert_eq!(watch.stall(Duration::ZERO), None);
    }
}
