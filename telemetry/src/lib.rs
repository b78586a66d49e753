//! What the daemon exports for monitoring: the instruments its workers
//! update as they go (requests, latencies, checkpoint commits, the inference
//! servers' own figures) and the rendering of a scrape in the OpenMetrics
//! text format, together with figures read from the store at scrape time
//! (tasks and each phase's counts: those are the committed truth, so they
//! survive a kill -9 and restart from the checkpoint, never from zero).
//!
//! `prometheus-client` rather than `metrics` + its exporter: no process-wide
//! recorder (several daemons in one test process keep their own figures), no
//! upkeep task, typed label sets that cannot grow by accident.
//!
//! A leaf: it knows no store, no HTTP and no phase; callers hand it plain
//! figures.
pub mod process;
pub mod render;
pub mod server_metrics;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

/// A phase task, as a label set: the task's id and its kind. Bounded by
/// the tasks a daemon runs, never by the records.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaskLabels {
    pub task: String,
    pub kind: String,
}

/// An inference server the daemon runs: its name in the spec, and the key
/// that tells two specs of that name apart.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunServerLabels {
    pub server: String,
    pub id: String,
}

/// What a server the daemon runs updates.
#[derive(Clone)]
pub struct ServerInstruments {
    /// 1 while it answers the deep probe, else 0.
    pub up: Gauge,
    /// Each restart after a failure.
    pub restarts: Counter,
}

/// How one request attempt ended.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Outcome {
    ok,
    connect,
    timeout,
    rate_limited,
    server_error,
    client_error,
    incomplete,
    malformed,
}

impl Outcome {
    /// Every outcome, in the order of the enum.
    pub const ALL: [Outcome; 8] = [
        Outcome::ok,
        Outcome::connect,
        Outcome::timeout,
        Outcome::rate_limited,
        Outcome::server_error,
        Outcome::client_error,
        Outcome::incomplete,
        Outcome::malformed,
    ];

    /// The label value, as `/metrics` and the status page name the class.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::ok => "ok",
            Outcome::connect => "connect",
            Outcome::timeout => "timeout",
            Outcome::rate_limited => "rate_limited",
            Outcome::server_error => "server_error",
            Outcome::client_error => "client_error",
            Outcome::incomplete => "incomplete",
            Outcome::malformed => "malformed",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub task: String,
    pub kind: String,
    pub outcome: Outcome,
}

/// One figure an inference server reports about itself.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerLabels {
    pub endpoint: String,
}

/// A gauge holding a float.
pub type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// Request latencies, in seconds: 50 ms to about 27 minutes (a long
/// reasoning answer), doubling.
fn latency_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.05, 2.0, 16)
}

/// Time to first token and between tokens: 1 ms to about 65 s.
fn token_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 17)
}

/// A store write or a checkpoint commit: 0.1 ms to about 6.5 s.
pub fn commit_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.0001, 2.0, 17)
}

/// The instruments of one daemon. Cheap to clone (all shared).
#[derive(Clone)]
pub struct Telemetry {
    inner: Arc<Instruments>,
}

pub(crate) struct Instruments {
    pub requests: Family<RequestLabels, Counter>,
    pub retries: Family<TaskLabels, Counter>,
    pub in_flight: Family<TaskLabels, Gauge>,
    pub duration: Family<TaskLabels, Histogram>,
    pub first_token: Family<TaskLabels, Histogram>,
    pub per_token: Family<TaskLabels, Histogram>,
    pub checkpoint: Family<TaskLabels, Histogram>,
    /// From an answer's last byte (its record handed to the committer) to
    /// the commit of the checkpoint that holds it.
    pub record_commit: Family<TaskLabels, Histogram>,
    pub server: server_metrics::Exported,
    pub server_up: Family<RunServerLabels, Gauge>,
    pub server_restarts: Family<RunServerLabels, Counter>,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry::new()
    }
}

impl Telemetry {
    pub fn new() -> Telemetry {
        fn latency() -> Histogram {
            Histogram::new(latency_buckets())
        }
        fn token() -> Histogram {
            Histogram::new(token_buckets())
        }
        fn commit() -> Histogram {
            Histogram::new(commit_buckets())
        }
        Telemetry {
            inner: Arc::new(Instruments {
                requests: Family::default(),
                retries: Family::default(),
                in_flight: Family::default(),
                duration: Family::new_with_constructor(latency),
                first_token: Family::new_with_constructor(token),
                per_token: Family::new_with_constructor(token),
                checkpoint: Family::new_with_constructor(commit),
                record_commit: Family::new_with_constructor(token),
                server: server_metrics::Exported::default(),
                server_up: Family::default(),
                server_restarts: Family::default(),
            }),
        }
    }

    /// The handles a phase task's inference client updates.
    pub fn requests(&self, task: impl ToString, kind: &str) -> RequestMetrics {
        let labels = TaskLabels {
            task: task.to_string(),
            kind: kind.to_string(),
        };
        let i = &self.inner;
        RequestMetrics {
            telemetry: self.clone(),
            ok: i.requests.get_or_create_owned(&RequestLabels {
                task: labels.task.clone(),
                kind: labels.kind.clone(),
                outcome: Outcome::ok,
            }),
            in_flight: i.in_flight.get_or_create_owned(&labels),
            retries: i.retries.get_or_create_owned(&labels),
            duration: i.duration.get_or_create_owned(&labels),
            first_token: i.first_token.get_or_create_owned(&labels),
            per_token: i.per_token.get_or_create_owned(&labels),
            tally: Arc::default(),
            labels,
        }
    }

    /// The histogram a phase task's checkpoint commits go into.
    pub fn checkpoints(&self, task: impl ToString, kind: &str) -> Histogram {
        self.inner.checkpoint.get_or_create_owned(&TaskLabels {
            task: task.to_string(),
            kind: kind.to_string(),
        })
    }

    /// The histogram of a phase task's records' waits for their commit.
    pub fn record_commits(&self, task: impl ToString, kind: &str) -> Histogram {
        self.inner.record_commit.get_or_create_owned(&TaskLabels {
            task: task.to_string(),
            kind: kind.to_string(),
        })
    }

    /// What the server `name` (key `id`) the daemon runs updates.
    pub fn server(&self, name: &str, id: &str) -> ServerInstruments {
        let labels = RunServerLabels {
            server: name.to_string(),
            id: id.to_string(),
        };
        ServerInstruments {
            up: self.inner.server_up.get_or_create_owned(&labels),
            restarts: self.inner.server_restarts.get_or_create_owned(&labels),
        }
    }

    /// Where the inference servers' own figures are kept.
    pub fn servers(&self) -> &server_metrics::Exported {
        &self.inner.server
    }

    pub(crate) fn instruments(&self) -> &Instruments {
        &self.inner
    }
}

/// What one phase task's requests update.
#[derive(Clone)]
pub struct RequestMetrics {
    telemetry: Telemetry,
    labels: TaskLabels,
    /// The answered requests' counter, taken once: the common case looks
    /// up no label set.
    ok: Counter,
    in_flight: Gauge,
    retries: Counter,
    duration: Histogram,
    first_token: Histogram,
    per_token: Histogram,
    /// The same increments as the counters above, for this handle alone:
    /// one run's (or one shard's) requests, where the exported counters add
    /// up every run of the task in this daemon.
    tally: Arc<Tally>,
}

/// A run's attempts: sent, retried, and failed by outcome.
#[derive(Default)]
struct Tally {
    sent: AtomicU64,
    retried: AtomicU64,
    by_outcome: [AtomicU64; Outcome::ALL.len()],
}

impl std::fmt::Debug for RequestMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestMetrics")
            .field("labels", &self.labels)
            .finish()
    }
}

/// Counts a request attempt in flight until dropped.
pub struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl RequestMetrics {
    pub fn started(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }

    /// One attempt ended: how, after how long, and for an answer, its time
    /// to first token and the output tokens it made.
    pub fn attempt(
        &self,
        outcome: Outcome,
        took: Duration,
        first_token: Option<Duration>,
        output_tokens: Option<u64>,
    ) {
        self.tally.sent.fetch_add(1, Ordering::Relaxed);
        self.tally.by_outcome[outcome as usize].fetch_add(1, Ordering::Relaxed);
        if outcome == Outcome::ok {
            self.ok.inc();
        } else {
            self.telemetry
                .inner
                .requests
                .get_or_create(&RequestLabels {
                    task: self.labels.task.clone(),
                    kind: self.labels.kind.clone(),
                    outcome,
                })
                .inc();
        }
        self.duration.observe(took.as_secs_f64());
        if let Some(first) = first_token {
            self.first_token.observe(first.as_secs_f64());
            // The time between tokens, as servers report it: the decode
            // time spread over the tokens after the first.
            if let Some(tokens) = output_tokens.filter(|n| *n > 1) {
                let decode = took.saturating_sub(first).as_secs_f64();
                self.per_token.observe(decode / (tokens - 1) as f64);
            }
        }
    }

    pub fn retried(&self) {
        self.retries.inc();
        self.tally.retried.fetch_add(1, Ordering::Relaxed);
    }

    /// What this handle counted so far: attempts sent, retried, and failed
    /// by outcome.
    pub fn counts(&self) -> todod_proto::results::RequestCounts {
        let t = &self.tally;
        let errors = Outcome::ALL
            .iter()
            .filter(|o| **o != Outcome::ok)
            .map(|o| {
                (
                    o.as_str().to_string(),
                    t.by_outcome[*o as usize].load(Ordering::Relaxed),
                )
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        todod_proto::results::RequestCounts {
            sent: t.sent.load(Ordering::Relaxed),
            retried: t.retried.load(Ordering::Relaxed),
            errors,
        }
    }
}
