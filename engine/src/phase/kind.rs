//! The seam a phase kind implements: [`PhaseKind`]. A kind says its name,
//! parses and checks its spec once (into the type its run receives), names
//! the spec fields whose change would change what it writes and the
//! schedule actions it takes, gives its step in the plan file, sums its
//! typed result up for `status`, and runs. Everything else (the runtime,
//! the API, the plan file, the scheduler, the status page) asks the table
//! in [`super::kinds`], through [`AnyKind`], and never names a kind.
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::plan_step::PlanStep;
use super::{Boundaries, Ended, RunContext};
use crate::phase::PhaseStore;
use todod_domain::schedule::Action;
use todod_domain::{Claim, Error, Kind, TaskId};

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Requests in flight that one thread of a run keeps up with: about 16k
/// streamed answers a second at 1 s each, measured (BENCHMARKS.md, the
/// cluster benchmark), with room left for answers that come faster.
const REQUESTS_PER_THREAD: usize = 4096;

/// The threads a run with `in_flight` requests at once gets: one up to
/// [`REQUESTS_PER_THREAD`], one more for each more, at most the machine's
/// cores.
pub fn threads_for(in_flight: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    in_flight
        .div_ceil(REQUESTS_PER_THREAD)
        .clamp(1, cores.max(1))
}

/// A spec as its kind accepted it.
#[derive(Debug, Clone)]
pub struct Checked<S> {
    /// What the run will receive.
    pub spec: S,
    /// The spec to store (paths made canonical).
    pub json: String,
    /// Paths the task will write.
    pub claims: Vec<Claim>,
    /// A kind the task must depend on, if its spec needs one.
    pub requires: Option<Kind>,
    /// A task the spec names (its field, the task, the kind it must be).
    pub refers: Option<(String, TaskId, Kind)>,
}

impl<S> Checked<S> {
    /// The same check without its typed spec (what the API stores).
    pub fn untyped(self) -> Checked<()> {
        Checked {
            spec: (),
            json: self.json,
            claims: self.claims,
            requires: self.requires,
            refers: self.refers,
        }
    }
}

/// What `status` and the status page show of a finished phase task.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    /// The result in one line (`go: 4m29s (4m03s to 4m59s) at concurrency 8`).
    pub summary: String,
    /// Lines that say why (a no-go's reasons).
    pub notes: Vec<String>,
    /// The run's time against the projection it was held to.
    pub held: Option<todod_proto::results::HeldOutcome>,
    /// The summary without what `held` says, for a reader that shows
    /// `held` in full beside it (the status page): said once, not twice.
    pub summary_apart_from_held: Option<String>,
    /// Records that failed, by class.
    pub failures_by_class: std::collections::BTreeMap<String, u64>,
    /// Whether the kind renders a report of the task (`PhaseKind::report`).
    pub report: bool,
}

/// A phase kind. Implemented by one type in each module of `kinds/`.
pub trait PhaseKind: Send + Sync + 'static {
    /// The name in the store, the API and the plan file (`generation`).
    const NAME: &'static str;
    /// What a task of this kind does, in one line (for people and agents).
    const SUMMARY: &'static str;
    /// Whether its progress counts records (`done` of `total`), so that a
    /// rate and an ETA mean something; a sweep's counts levels.
    const PROGRESS_IN_RECORDS: bool = true;
    /// Spec fields whose change would change what the task writes: a
    /// started task refuses an update of them.
    const OUTPUT_FIELDS: &'static [&'static str];
    /// The schedule actions a task of this kind takes.
    const ACTIONS: &'static [Action] = &[];
    /// The step in the plan file, if the kind has one.
    const STEP: Option<PlanStep> = None;

    /// The spec its run receives.
    type Spec: Send + Sync + 'static;
    /// What its task's `result_json` holds (`todod_proto::results`).
    type Result: Serialize + DeserializeOwned;

    /// Parses and checks a client's spec (every refusal names its field,
    /// `spec.concurrency`); `own` lists the paths the task already claims.
    /// Runs on a blocking thread: it may read the files the spec names.
    fn check(json: &str, bounds: &Boundaries, own: &[String])
        -> Result<Checked<Self::Spec>, Error>;

    /// A stored spec (checked when it was stored) as the run receives it.
    fn parse(json: &str) -> Result<Self::Spec, Error>;

    /// Runs (or resumes) one attempt: `Err` breaks it off, resumable from
    /// its checkpoint.
    fn run(
        context: &RunContext,
        spec: Self::Spec,
    ) -> impl Future<Output = Result<Ended, String>> + Send;

    /// How many threads the run's runtime gets. One, the default, lets a
    /// request, its connection and the committer wake each other without
    /// crossing threads (the cheapest per record); a run with more requests
    /// in flight than a core keeps up with asks for more ([`threads_for`]).
    fn threads(_context: &RunContext, _spec: &Self::Spec) -> impl Future<Output = usize> + Send {
        async { 1 }
    }

    /// What `status` and the status page show of a finished task.
    fn view(result: &Self::Result) -> View;

    /// A task that depends on one of this kind completed with `result`
    /// (a feasibility writes its report again with how the generation it
    /// vouched for went).
    fn dependent_completed(
        _store: &PhaseStore,
        _fs: &dyn super::files::Fs,
        _task: TaskId,
        _dependent: (TaskId, Kind, &str),
    ) -> impl Future<Output = Result<(), String>> + Send {
        async { Ok(()) }
    }

    /// The task's report as a page, if the kind writes one.
    fn report(
        _store: &PhaseStore,
        _task: TaskId,
    ) -> impl Future<Output = Result<Option<String>, String>> + Send {
        async { Ok(None) }
    }
}

/// A phase kind as the table holds it: the same seam, object-safe.
pub trait AnyKind: Send + Sync {
    fn name(&self) -> &'static str;
    fn kind(&self) -> Kind;
    fn summary_line(&self) -> &'static str;
    fn output_fields(&self) -> &'static [&'static str];
    fn actions(&self) -> &'static [Action];
    fn step(&self) -> Option<PlanStep>;
    fn check(&self, json: &str, bounds: &Boundaries, own: &[String]) -> Result<Checked<()>, Error>;
    /// The run of one attempt, with the stored spec parsed first.
    fn run(&self, context: RunContext) -> BoxFuture<'static, Ended>;
    /// The threads its run's runtime gets (1 if the stored spec is not valid:
    /// the run then breaks off at once anyway).
    fn threads<'a>(&'a self, context: &'a RunContext) -> BoxFuture<'a, usize>;
    fn progress_in_records(&self) -> bool;
    /// What to show of a finished task; `None` when its result is not this
    /// kind's.
    fn view(&self, result_json: &str) -> Option<View>;
    fn dependent_completed<'a>(
        &'a self,
        store: &'a PhaseStore,
        fs: &'a dyn super::files::Fs,
        task: TaskId,
        dependent: (TaskId, Kind, &'a str),
    ) -> BoxFuture<'a, Result<(), String>>;
    fn report<'a>(
        &'a self,
        store: &'a PhaseStore,
        task: TaskId,
    ) -> BoxFuture<'a, Result<Option<String>, String>>;
}

/// The table's entry for `K`.
pub struct Entry<K>(PhantomData<fn() -> K>);

impl<K> Entry<K> {
    pub const NEW: Entry<K> = Entry(PhantomData);
}

impl<K: PhaseKind> AnyKind for Entry<K> {
    fn name(&self) -> &'static str {
        K::NAME
    }

    fn kind(&self) -> Kind {
        Kind::named(K::NAME)
    }

    fn summary_line(&self) -> &'static str {
        K::SUMMARY
    }

    fn output_fields(&self) -> &'static [&'static str] {
        K::OUTPUT_FIELDS
    }

    fn actions(&self) -> &'static [Action] {
        K::ACTIONS
    }

    fn step(&self) -> Option<PlanStep> {
        K::STEP
    }

    fn check(&self, json: &str, bounds: &Boundaries, own: &[String]) -> Result<Checked<()>, Error> {
        K::check(json, bounds, own).map(Checked::untyped)
    }

    fn run(&self, context: RunContext) -> BoxFuture<'static, Ended> {
        Box::pin(async move {
            let spec = match K::parse(&context.spec) {
                Ok(spec) => spec,
                Err(error) => {
                    return Ended::broke_off(format!("the stored spec is not valid: {error}"))
                }
            };
            match K::run(&context, spec).await {
                Ok(ended) => ended,
                Err(error) => Ended::broke_off(error),
            }
        })
    }

    fn threads<'a>(&'a self, context: &'a RunContext) -> BoxFuture<'a, usize> {
        Box::pin(async move {
            match K::parse(&context.spec) {
                Ok(spec) => K::threads(context, &spec).await.max(1),
                Err(_) => 1,
            }
        })
    }

    fn progress_in_records(&self) -> bool {
        K::PROGRESS_IN_RECORDS
    }

    fn view(&self, result_json: &str) -> Option<View> {
        todod_proto::results::parse::<K::Result>(result_json).map(|r| K::view(&r))
    }

    fn dependent_completed<'a>(
        &'a self,
        store: &'a PhaseStore,
        fs: &'a dyn super::files::Fs,
        task: TaskId,
        dependent: (TaskId, Kind, &'a str),
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(K::dependent_completed(store, fs, task, dependent))
    }

    fn report<'a>(
        &'a self,
        store: &'a PhaseStore,
        task: TaskId,
    ) -> BoxFuture<'a, Result<Option<String>, String>> {
        Box::pin(K::report(store, task))
    }
}

#[cfg(test)]
mod tests {
    use super::threads_for;

    #[test]
    fn a_run_gets_a_thread_for_each_few_thousand_requests_in_flight_up_to_the_cores() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(threads_for(0), 1);
        assert_eq!(threads_for(64), 1);
        assert_eq!(threads_for(4096), 1);
        assert_eq!(threads_for(4097), 2.min(cores));
        assert_eq!(threads_for(16_384), 4.min(cores));
        assert_eq!(threads_for(1 << 20), cores);
    }
}
