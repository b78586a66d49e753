//! One scrape: the instruments and the figures read from the store, encoded
//! in the OpenMetrics text format. A fresh registry per scrape holds the
//! store's figures as they are now (a task archived since is gone, not left
//! at its last value) beside clones of the live instruments.
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use todod_proto::results::{ProgressCounts, ResultCounts};

use super::process::Usage;
use super::{FloatGauge, TaskLabels, Telemetry};

/// How many tasks of a plan are of a kind and in a status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskCount {
    pub plan: String,
    pub kind: String,
    pub status: String,
    pub count: u64,
}

/// A phase task's committed figures, as its stored progress and result
/// say them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PhaseFigures {
    pub task: String,
    pub kind: String,
    pub records: Option<u64>,
    pub failed: Option<u64>,
    pub rejected: Option<u64>,
    pub output_tokens: Option<u64>,
    pub input_tokens: Option<u64>,
    pub records_per_second: Option<f64>,
    pub seconds_left: Option<f64>,
    pub projected_seconds_left: Option<f64>,
    /// The projection's records/s: value, low, high.
    pub projected_records_per_second: Option<(f64, f64, f64)>,
    pub drift_events: u64,
    /// A running task: the daemon run holding its lease (`HOST-PID-NANOS`)
    /// and when the lease expires (Unix ms, on the database's clock).
    pub lease: Option<(String, Option<i64>)>,
    /// Times another daemon run took the task over (`resumed` events).
    pub takeovers: u64,
    /// A sharded task's running shards: the shard, its holder and when its
    /// lease expires.
    pub shard_leases: Vec<(u32, String, Option<i64>)>,
}

impl PhaseFigures {
    /// Reads the figures from a task's progress and, once it has ended, its
    /// result (which wins: it is the final count). The rates and the time
    /// left are a running task's only.
    pub fn read(task: String, kind: String, running: bool, progress: &str, result: &str) -> Self {
        let progress = ProgressCounts::parse(progress).unwrap_or_default();
        let result = ResultCounts::parse(result).unwrap_or_default();
        let records = result.records.or(progress.done);
        let live = |figure: Option<f64>| figure.filter(|_| running);
        PhaseFigures {
            records,
            failed: records.map(|_| result.failed.or(progress.failed).unwrap_or(0)),
            rejected: result.rejected.or(progress.rejected),
            output_tokens: result.tokens.or(progress.tokens),
            input_tokens: result.prompt_tokens.or(progress.prompt_tokens),
            records_per_second: live(progress.rate_per_second),
            seconds_left: live(progress.eta_seconds.map(|s| s as f64)),
            projected_seconds_left: live(progress.projected_eta_seconds.map(|s| s as f64)),
            projected_records_per_second: progress
                .projected_records_per_second
                .filter(|_| running)
                .map(|e| (e.value, e.low, e.high)),
            drift_events: 0,
            lease: None,
            takeovers: 0,
            shard_leases: Vec::new(),
            task,
            kind,
        }
    }
}

/// Everything a scrape shows besides the live instruments.
#[derive(Debug, Default)]
pub struct Scrape {
    pub tasks: Vec<TaskCount>,
    pub phases: Vec<PhaseFigures>,
    pub process: Usage,
    /// Seconds since the epoch when the daemon started.
    pub start_time_seconds: f64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskCountLabels {
    plan: String,
    kind: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RecordLabels {
    task: String,
    kind: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HolderLabels {
    task: String,
    kind: String,
    holder: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardHolderLabels {
    task: String,
    kind: String,
    shard: String,
    holder: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BoundLabels {
    task: String,
    kind: String,
    bound: &'static str,
}

impl Telemetry {
    /// The scrape's text, with the store's write latencies.
    pub fn render(&self, scrape: &Scrape, store_writes: &Histogram) -> String {
        let mut r = Registry::default();
        self.register_store_figures(&mut r, scrape);
        let i = self.instruments();
        r.register(
            "todod_requests",
            "Inference request attempts, by how they ended",
            i.requests.clone(),
        );
        r.register(
            "todod_server_up",
            "1 while a server the daemon runs answers its deep probe (/v1/models and one token)",
            i.server_up.clone(),
        );
        r.register(
            "todod_server_restarts",
            "Restarts of a server the daemon runs, after it exited or stopped answering",
            i.server_restarts.clone(),
        );
        r.register(
            "todod_request_retries",
            "Request attempts made again after a failure",
            i.retries.clone(),
        );
        r.register(
            "todod_requests_in_flight",
            "Inference requests sent and not yet answered",
            i.in_flight.clone(),
        );
        r.register_with_unit(
            "todod_request_duration",
            "Time from sending an attempt to its last byte",
            Unit::Seconds,
            i.duration.clone(),
        );
        r.register_with_unit(
            "todod_request_time_to_first_token",
            "Time from sending a streamed request to its first token",
            Unit::Seconds,
            i.first_token.clone(),
        );
        r.register_with_unit(
            "todod_request_time_per_output_token",
            "Decode time per output token after the first, of streamed answers",
            Unit::Seconds,
            i.per_token.clone(),
        );
        r.register_with_unit(
            "todod_checkpoint_commit",
            "Time to commit a batch of records: files synced, then the checkpoint",
            Unit::Seconds,
            i.checkpoint.clone(),
        );
        r.register_with_unit(
            "todod_record_commit_delay",
            "Time from a record's answer (its last byte) to the commit that holds it",
            Unit::Seconds,
            i.record_commit.clone(),
        );
        r.register_with_unit(
            "todod_store_write",
            "Time a store write took, waiting for the writer included",
            Unit::Seconds,
            store_writes.clone(),
        );
        let s = &i.server;
        r.register(
            "todod_server_requests_running",
            "Requests the inference server says it is running",
            s.running.clone(),
        );
        r.register(
            "todod_server_requests_waiting",
            "Requests the inference server says are queued",
            s.waiting.clone(),
        );
        r.register_with_unit(
            "todod_server_kv_cache_usage",
            "The share of the inference server's KV cache in use",
            Unit::Other("ratio".into()),
            s.kv_cache_usage.clone(),
        );
        r.register(
            "todod_server_generation_tokens_per_second",
            "Output tokens per second the inference server made",
            s.generation_tokens_per_second.clone(),
        );
        r.register(
            "todod_server_prompt_tokens_per_second",
            "Prompt tokens per second the inference server read",
            s.prompt_tokens_per_second.clone(),
        );
        r.register(
            "todod_server_metrics_scrapes",
            "Reads of the inference servers' /metrics, by how they went",
            s.scrapes.clone(),
        );
        register_process(&mut r, scrape);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).expect("writing to a String");
        text
    }

    fn register_store_figures(&self, r: &mut Registry, scrape: &Scrape) {
        let tasks = Family::<TaskCountLabels, Gauge>::default();
        for t in &scrape.tasks {
            tasks
                .get_or_create(&TaskCountLabels {
                    plan: t.plan.clone(),
                    kind: t.kind.clone(),
                    status: t.status.clone(),
                })
                .set(t.count as i64);
        }
        r.register("todod_tasks", "Live tasks by plan, kind and status", tasks);

        let records = Family::<RecordLabels, Counter>::default();
        let output = Family::<TaskLabels, Counter>::default();
        let input = Family::<TaskLabels, Counter>::default();
        let drifts = Family::<TaskLabels, Counter>::default();
        let rate = Family::<TaskLabels, FloatGauge>::default();
        let left = Family::<TaskLabels, FloatGauge>::default();
        let projected_left = Family::<TaskLabels, FloatGauge>::default();
        let projected_rate = Family::<BoundLabels, FloatGauge>::default();
        let lease_expiry = Family::<HolderLabels, FloatGauge>::default();
        let shard_expiry = Family::<ShardHolderLabels, FloatGauge>::default();
        let takeovers = Family::<TaskLabels, Counter>::default();
        for p in &scrape.phases {
            for (shard, holder, expires) in &p.shard_leases {
                shard_expiry
                    .get_or_create(&ShardHolderLabels {
                        task: p.task.clone(),
                        kind: p.kind.clone(),
                        shard: shard.to_string(),
                        holder: todod_proto::lease::run_of(holder).to_string(),
                    })
                    .set(expires.map_or(0.0, |ms| ms as f64 / 1000.0));
            }
            if let Some((holder, expires)) = &p.lease {
                // The daemon run, not the attempt: one series per holder.
                let run = todod_proto::lease::run_of(holder);
                lease_expiry
                    .get_or_create(&HolderLabels {
                        task: p.task.clone(),
                        kind: p.kind.clone(),
                        holder: run.to_string(),
                    })
                    .set(expires.map_or(0.0, |ms| ms as f64 / 1000.0));
            }
            let labels = TaskLabels {
                task: p.task.clone(),
                kind: p.kind.clone(),
            };
            for (outcome, n) in [
                ("written", p.records),
                ("failed", p.failed),
                ("rejected", p.rejected),
            ] {
                if let Some(n) = n {
                    records
                        .get_or_create(&RecordLabels {
                            task: p.task.clone(),
                            kind: p.kind.clone(),
                            outcome,
                        })
                        .inc_by(n);
                }
            }
            let put = |family: &Family<TaskLabels, Counter>, n: Option<u64>| {
                if let Some(n) = n {
                    family.get_or_create(&labels).inc_by(n);
                }
            };
            put(&output, p.output_tokens);
            put(&input, p.input_tokens);
            if p.kind == "generation" {
                drifts.get_or_create(&labels).inc_by(p.drift_events);
            }
            takeovers.get_or_create(&labels).inc_by(p.takeovers);
            let set = |family: &Family<TaskLabels, FloatGauge>, v: Option<f64>| {
                if let Some(v) = v {
                    family.get_or_create(&labels).set(v);
                }
            };
            set(&rate, p.records_per_second);
            set(&left, p.seconds_left);
            set(&projected_left, p.projected_seconds_left);
            if let Some((value, low, high)) = p.projected_records_per_second {
                for (bound, v) in [("value", value), ("low", low), ("high", high)] {
                    projected_rate
                        .get_or_create(&BoundLabels {
                            task: p.task.clone(),
                            kind: p.kind.clone(),
                            bound,
                        })
                        .set(v);
                }
            }
        }
        r.register(
            "todod_phase_records",
            "A phase task's records, as committed: written, failed, rejected",
            records,
        );
        r.register(
            "todod_phase_output_tokens",
            "Output tokens a phase task's committed records hold",
            output,
        );
        r.register(
            "todod_phase_input_tokens",
            "Prompt tokens a generation's committed records were sent",
            input,
        );
        r.register(
            "todod_phase_drift_events",
            "Times a generation's throughput left its projection",
            drifts,
        );
        r.register(
            "todod_phase_records_per_second",
            "A running phase task's rate this run",
            rate,
        );
        r.register_with_unit(
            "todod_phase_time_left",
            "A running phase task's time left at its own rate",
            Unit::Seconds,
            left,
        );
        r.register_with_unit(
            "todod_phase_projected_time_left",
            "A running generation's time left at the feasibility projection's rate",
            Unit::Seconds,
            projected_left,
        );
        r.register(
            "todod_phase_lease_expiry_timestamp",
            "A running phase task's lease: the daemon run holding it (label) and when it expires \
             unless renewed, Unix seconds on the database's clock (0: not known)",
            lease_expiry,
        );
        r.register(
            "todod_phase_shard_lease_expiry_timestamp",
            "A running shard of a sharded phase task: the daemon run holding it (label) and when \
             its lease expires unless renewed, Unix seconds on the database's clock",
            shard_expiry,
        );
        r.register(
            "todod_phase_takeovers",
            "Times a daemon run took a phase task over from another (resumed events)",
            takeovers,
        );
        r.register(
            "todod_phase_projected_records_per_second",
            "The feasibility projection a generation is held against, with its interval",
            projected_rate,
        );
    }
}

/// The standard process metrics, under the names Prometheus' own clients
/// give them (dashboards know them).
fn register_process(r: &mut Registry, scrape: &Scrape) {
    let u = &scrape.process;
    let float = |r: &mut Registry, name: &str, help: &str, unit: Option<Unit>, v: Option<f64>| {
        if let Some(v) = v {
            let gauge = FloatGauge::default();
            gauge.set(v);
            match unit {
                Some(unit) => r.register_with_unit(name, help, unit, gauge),
                None => r.register(name, help, gauge),
            }
        }
    };
    float(
        r,
        "process_resident_memory",
        "Resident memory size",
        Some(Unit::Bytes),
        u.resident_bytes.map(|v| v as f64),
    );
    float(
        r,
        "process_open_fds",
        "Open file descriptors",
        None,
        u.open_fds.map(|v| v as f64),
    );
    float(
        r,
        "process_max_fds",
        "The most file descriptors the process may open",
        None,
        u.max_fds.map(|v| v as f64),
    );
    float(
        r,
        "process_start_time",
        "Start time of the process since the epoch",
        Some(Unit::Seconds),
        Some(scrape.start_time_seconds),
    );
    if let Some(cpu) = u.cpu_seconds {
        let counter = Counter::<f64, std::sync::atomic::AtomicU64>::default();
        counter.inc_by(cpu);
        r.register_with_unit(
            "process_cpu",
            "User and system CPU time spent",
            Unit::Seconds,
            counter,
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Outcome;

    #[test]
    fn figures_come_from_the_result_once_ended() {
        let running = PhaseFigures::read(
            "t3".into(),
            "generation".into(),
            true,
            r#"{"done": 10, "failed": 1, "rejected": 2, "tokens": 500, "rate_per_second": 2.5,
                "eta_seconds": 40, "projected_eta_seconds": 44,
                "projected_records_per_second": {"value": 2.0, "low": 1.5, "high": 2.5}}"#,
            "",
        );
        assert_eq!(running.records, Some(10));
        assert_eq!(running.failed, Some(1));
        assert_eq!(running.records_per_second, Some(2.5));
        assert_eq!(running.projected_records_per_second, Some((2.0, 1.5, 2.5)));
        let ended = PhaseFigures::read(
            "t3".into(),
            "prompt_adaptation".into(),
            false,
            r#"{"done": 10, "rate_per_second": 2.5}"#,
            r#"{"records": 12, "rejected": 0}"#,
        );
        assert_eq!(
            (ended.records, ended.failed, ended.rejected),
            (Some(12), Some(0), Some(0))
        );
        assert_eq!(ended.records_per_second, None);
        let feasibility = PhaseFigures::read("t1".into(), "feasibility".into(), false, "", "{}");
        assert_eq!((feasibility.records, feasibility.failed), (None, None));
    }

    #[test]
    fn renders_openmetrics_with_conventional_names() {
        let t = Telemetry::new();
        let r = t.requests(7, "generation");
        {
            let _flight = r.started();
        }
        r.attempt(
            Outcome::ok,
            Duration::from_millis(300),
            Some(Duration::from_millis(100)),
            Some(11),
        );
        r.attempt(Outcome::rate_limited, Duration::from_millis(5), None, None);
        let scrape = Scrape {
            tasks: vec![TaskCount {
                plan: "p\"lan\n".into(),
                kind: "todo".into(),
                status: "pending".into(),
                count: 3,
            }],
            phases: vec![PhaseFigures {
                task: "7".into(),
                kind: "generation".into(),
                records: Some(5),
                failed: Some(0),
                ..Default::default()
            }],
            process: Usage::default(),
            start_time_seconds: 1.0,
        };
        let text = t.render(&scrape, &Histogram::new(super::super::commit_buckets()));
        for line in [
            r#"todod_requests_total{task="7",kind="generation",outcome="ok"} 1"#,
            r#"todod_requests_total{task="7",kind="generation",outcome="rate_limited"} 1"#,
            r#"todod_request_duration_seconds_count{task="7",kind="generation"} 2"#,
            r#"todod_request_time_to_first_token_seconds_count{task="7",kind="generation"} 1"#,
            r#"todod_requests_in_flight{task="7",kind="generation"} 0"#,
            r#"todod_phase_records_total{task="7",kind="generation",outcome="written"} 5"#,
            // A hostile plan name stays inside its quotes.
            r#"todod_tasks{plan="p\"lan\n",kind="todo",status="pending"} 3"#,
            "# EOF",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }

    #[test]
    fn a_runs_counts_are_the_exported_counters_own_increments() {
        let t = Telemetry::new();
        let earlier_run = t.requests(7, "generation");
        earlier_run.attempt(Outcome::server_error, Duration::ZERO, None, None);
        let run = t.requests(7, "generation");
        for outcome in [
            Outcome::ok,
            Outcome::server_error,
            Outcome::incomplete,
            Outcome::ok,
        ] {
            run.attempt(outcome, Duration::ZERO, None, None);
        }
        run.retried();
        run.retried();
        let counts = run.counts();
        assert_eq!((counts.sent, counts.retried, counts.errored()), (4, 2, 2));
        assert_eq!(
            counts.errors,
            [
                ("incomplete".to_string(), 1),
                ("server_error".to_string(), 1)
            ]
            .into()
        );
        assert_eq!(counts.error_share(), Some(0.5));
        // The exported counters hold both runs of the task.
        let text = t.render(
            &Scrape {
                tasks: vec![],
                phases: vec![],
                process: Usage::default(),
                start_time_seconds: 1.0,
            },
            &Histogram::new(super::super::commit_buckets()),
        );
        for line in [
            r#"todod_requests_total{task="7",kind="generation",outcome="server_error"} 2"#,
            r#"todod_requests_total{task="7",kind="generation",outcome="incomplete"} 1"#,
            r#"todod_request_retries_total{task="7",kind="generation"} 2"#,
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }
}
