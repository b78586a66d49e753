//! The prompt-adaptation phase: a prompt set made for one model (in any of
//! the shapes prompt sets arrive in) turned into the prompts another model
//! needs: messages for a chat API, Batch API lines, or text rendered with the
//! target's own chat template exactly as Hugging Face transformers renders
//! it. What cannot work is refused line by line, with the reason, before any
//! GPU time is spent; a rejected share over the spec's limit fails the phase,
//! so the pipeline stops before generation.
//!
//! It stands on the record pipeline with CPU processing: its output keeps the
//! input's order and is byte-identical however often the run is killed.
pub mod formats;
pub mod kind;
pub mod rendered;
pub mod spec;

use todod_proto::results::ProgressCounts;
use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use todod_format::chat_template::Clock;
use todod_format::messages::{self, Request};
use crate::phase::cursor::Line;
use crate::phase::model::Templates;
use crate::phase::record_pipeline::{self, Files, RecordPhase};
use crate::phase::state::{InputState, PassCounts, PhaseState};
use crate::phase::shards::{self, Role};
use crate::phase::{cpu_pass, Ended, RunContext};
use todod_proto::results::{
    AdaptationResult, AdaptationSample, LengthQuantiles, ToolCounts, TrailingCounts,
};
use todod_format::tokenizer::Tokenizer;
use formats::{Conversation, Reading};
pub use spec::AdaptationSpec;
use spec::{OutputFormat, SystemPrompt, TrailingAssistant};

const OUTPUT: usize = 0;
const REJECTS: usize = 1;

/// What the system prompts of the set came to.
pub use todod_proto::results::SystemCounts;

/// Counters of an adaptation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stats {
    pub records: u64,
    pub rejected: u64,
    /// Lines read, by input format.
    pub formats: BTreeMap<String, u64>,
    /// Messages written, by role.
    pub roles: BTreeMap<String, u64>,
    pub system: SystemCounts,
    pub trailing_dropped: u64,
    pub trailing_prefilled: u64,
    #[serde(default)]
    pub trailing_kept: u64,
    /// Records with a list of tools, and the tool calls in their messages.
    #[serde(default)]
    pub with_tools: u64,
    #[serde(default)]
    pub tool_calls: u64,
    /// Prompts by length in the target's tokens (when it has a tokenizer).
    pub lengths: BTreeMap<u64, u64>,
    /// Lines left out by the spec's `sample`.
    #[serde(default)]
    pub not_sampled: u64,
}

fn add_counts(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (key, n) in from {
        *into.entry(key.clone()).or_default() += n;
    }
}

impl crate::phase::shards::Counters for Stats {
    fn add(&mut self, other: &Stats) {
        self.records += other.records;
        self.rejected += other.rejected;
        add_counts(&mut self.formats, &other.formats);
        add_counts(&mut self.roles, &other.roles);
        self.system.kept += other.system.kept;
        self.system.dropped += other.system.dropped;
        self.system.folded += other.system.folded;
        self.system.replaced += other.system.replaced;
        self.trailing_dropped += other.trailing_dropped;
        self.trailing_prefilled += other.trailing_prefilled;
        self.trailing_kept += other.trailing_kept;
        self.with_tools += other.with_tools;
        self.tool_calls += other.tool_calls;
        for (len, n) in &other.lengths {
            *self.lengths.entry(*len).or_default() += n;
        }
        self.not_sampled += other.not_sampled;
    }
}

impl Stats {
    /// The length at quantile `q` (0..=1) of the prompts measured.
    fn quantile(&self, q: f64) -> Option<u64> {
        let total: u64 = self.lengths.values().sum();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64 * q).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (&len, &n) in &self.lengths {
            seen += n;
            if seen >= rank {
                return Some(len);
            }
        }
        self.lengths.keys().next_back().copied()
    }
}

/// One prompt as written, and what it did to the counters.
pub struct Adapted {
    line: Value,
    format: formats::Format,
    roles: Vec<String>,
    system: Option<&'static str>,
    trailing: Option<&'static str>,
    tokens: Option<u64>,
    /// The line has a (non-empty) list of tools.
    with_tools: bool,
    /// Tool calls in its messages.
    tool_calls: u64,
}

/// How the pass was set up, fixed for its resumes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Setup {
    now: i64,
    template: Option<String>,
}

struct Adaptation {
    spec: AdaptationSpec,
    reading: Reading,
    template: Option<Templates>,
    variables: Map<String, Value>,
    now: Clock,
    tokenizer: Option<Arc<dyn Tokenizer>>,
    /// Whether the target template renders a system message.
    takes_system: bool,
    /// The line numbers the spec's `sample` keeps (a bit per line);
    /// `None`: every line.
    sample: Option<LineSet>,
}

impl Adaptation {
    fn sampled_out(&self, number: u64) -> bool {
        self.sample
            .as_ref()
            .is_some_and(|keep| !keep.contains(number))
    }
}

/// A set of line numbers, a bit each: a sample of 100M lines is 12.5 MB.
struct LineSet(Vec<u64>);

impl LineSet {
    fn new(lines: u64) -> LineSet {
        LineSet(vec![0; (lines / 64 + 1) as usize])
    }

    /// Adds `n`; false if it was there.
    fn insert(&mut self, n: u64) -> bool {
        let (word, bit) = ((n / 64) as usize, n % 64);
        let was = self.0[word] & (1 << bit) != 0;
        self.0[word] |= 1 << bit;
        !was
    }

    fn contains(&self, n: u64) -> bool {
        self.0
            .get((n / 64) as usize)
            .is_some_and(|w| w & (1 << (n % 64)) != 0)
    }
}

/// `count` distinct line numbers of `1..=lines`, chosen by `seed` (Floyd's
/// algorithm): the same numbers for the same file and seed, on every run.
fn sample_lines(lines: u64, count: u64, seed: u64) -> LineSet {
    let mut rng = crate::phase::sample::SplitMix(seed);
    let mut chosen = LineSet::new(lines);
    for j in (lines - count + 1)..=lines {
        let t = 1 + rng.next_u64() % j;
        if !chosen.insert(t) {
            chosen.insert(j);
        }
    }
    chosen
}

impl Adaptation {
    /// Renders messages with the target's template (`model::Templates::render`).
    fn render(
        &self,
        messages: &[Value],
        request: &Request,
        add_generation_prompt: bool,
    ) -> Result<String, String> {
        let templates = self.template.as_ref().expect("checked by the caller");
        let conversation = crate::phase::model::Conversation {
            messages,
            request,
            add_generation_prompt,
        };
        templates
            .render(
                conversation,
                self.spec.tool_arguments,
                &self.variables,
                self.now,
            )
            .map_err(|e| format!("the target's chat template refuses it: {e}"))
    }

    fn adapt(&self, conversation: Conversation) -> Result<Adapted, String> {
        let Conversation {
            id,
            format,
            mut messages,
            request,
        } = conversation;
        let role = |m: &Value| m["role"].as_str().unwrap_or_default().to_string();
        let mut trailing = None;
        if messages.last().is_some_and(|m| m["role"] == "assistant") {
            match self.spec.trailing_assistant {
                TrailingAssistant::Drop => {
                    messages.pop();
                    trailing = Some("dropped");
                }
                TrailingAssistant::Prefill => trailing = Some("prefilled"),
                TrailingAssistant::Keep => trailing = Some("kept"),
            }
        }
        let mut system = None;
        let policy = match &self.spec.system_prompt {
            SystemPrompt::Auto if self.takes_system => &SystemPrompt::Keep,
            SystemPrompt::Auto => &SystemPrompt::Fold,
            other => other,
        };
        let has_system = messages.first().is_some_and(|m| m["role"] == "system");
        match policy {
            SystemPrompt::Keep if has_system => system = Some("kept"),
            SystemPrompt::Drop if has_system => {
                messages.remove(0);
                system = Some("dropped");
            }
            SystemPrompt::Replace { text } => {
                let replacement = json!({"role": "system", "content": text});
                if has_system {
                    messages[0] = replacement;
                } else {
                    messages.insert(0, replacement);
                }
                system = Some("replaced");
            }
            SystemPrompt::Fold if has_system => {
                let folded = messages.remove(0);
                let user = messages
                    .iter_mut()
                    .find(|m| m["role"] == "user")
                    .ok_or("a system prompt to fold, and no user turn to fold it into")?;
                let joined = format!(
                    "{}\n\n{}",
                    messages::text(folded.get("content")),
                    messages::text(user.get("content"))
                );
                user["content"] = Value::String(joined);
                system = Some("folded");
            }
            _ => {}
        }
        if messages.is_empty() {
            return Err("no turn left once the trailing assistant turn was dropped".into());
        }
        if self.spec.reject_empty {
            for (i, m) in messages.iter().enumerate() {
                if messages::text(m.get("content")).trim().is_empty()
                    && !messages::has_tool_calls(m)
                {
                    return Err(format!(
                        "messages[{i}].content: empty, and reject_empty is set"
                    ));
                }
            }
        }
        let add_generation_prompt = self.spec.add_generation_prompt && trailing.is_none();
        let rendered = match &self.template {
            None => None,
            Some(_) => {
                let text = self.render(&messages, &request, add_generation_prompt)?;
                Some(if trailing == Some("prefilled") {
                    continue_final(&text, &messages)?
                } else {
                    text
                })
            }
        };
        let tokens = match (&self.tokenizer, &rendered) {
            (Some(tokenizer), Some(text)) => Some(
                tokenizer
                    .encode(text, false)
                    .map_err(|e| format!("the target's tokenizer refuses it: {e}"))?
                    .ids
                    .len() as u64,
            ),
            _ => None,
        };
        if let (Some(max), Some(n)) = (self.spec.max_prompt_tokens, tokens) {
            if n as usize > max {
                return Err(format!(
                    "over the token limit: {n} tokens of the target's tokenizer, at most {max}"
                ));
            }
        }
        let roles = messages.iter().map(role).collect();
        let tool_calls = messages
            .iter()
            .filter_map(|m| m.get("tool_calls").and_then(Value::as_array))
            .map(|c| c.len() as u64)
            .sum();
        let with_tools = request
            .tools
            .as_ref()
            .is_some_and(|t| t.as_array().is_some_and(|t| !t.is_empty()));
        if self.spec.output_format != OutputFormat::Rendered {
            // What goes to a chat API must be a request it takes (a ShareGPT
            // tool turn that answers no call has no tool_call_id to send).
            let as_sent = Value::Array(messages);
            messages::check_messages(&as_sent, "messages", self.spec.tool_arguments)
                .map_err(|e| format!("{e}; a chat API would refuse this request"))?;
            messages = match as_sent {
                Value::Array(messages) => messages,
                _ => Vec::new(),
            };
        }
        let line = match self.spec.output_format {
            OutputFormat::Messages => {
                let mut line = Map::new();
                line.insert("id".into(), json!(id));
                line.insert("messages".into(), Value::Array(messages));
                request.insert_into(&mut line);
                Value::Object(line)
            }
            OutputFormat::Batch => {
                let batch = self.spec.batch.as_ref().expect("checked at creation");
                let mut body = batch.params.clone();
                body.insert("model".into(), json!(batch.model));
                body.insert("messages".into(), Value::Array(messages));
                request.insert_into(&mut body);
                json!({"custom_id": id, "method": "POST", "url": batch.url, "body": body})
            }
            OutputFormat::Rendered => json!({"id": id, "prompt": rendered}),
        };
        Ok(Adapted {
            line,
            format,
            roles,
            system,
            trailing,
            tokens,
            with_tools,
            tool_calls,
        })
    }
}

/// A rendering cut right after the final message's content, as
/// transformers' `continue_final_message` does: the answer starts there.
fn continue_final(text: &str, messages: &[Value]) -> Result<String, String> {
    let last = messages
        .last()
        .map(|m| messages::text(m.get("content")))
        .unwrap_or_default();
    let last = last.trim();
    match text.rfind(last) {
        Some(at) if !last.is_empty() => Ok(text[..at + last.len()].to_string()),
        _ => Err("the prefilled answer does not appear in the rendered prompt".into()),
    }
}

/// The parse "error" of a line the sample leaves out; never written.
const NOT_SAMPLED: &str = "not in the sample";

impl RecordPhase for Adaptation {
    type Item = Conversation;
    type Output = Result<Adapted, String>;
    type Stats = Stats;

    /// The generation that takes these prompts refuses longer lines, so
    /// they are refused here, before any GPU time is spent.
    fn max_line_bytes(&self) -> usize {
        crate::phase::lines::MAX_PROMPT_LINE_BYTES
    }

    /// A line the sample leaves out has no id here: it cannot make a
    /// sampled line with the same id a duplicate.
    fn record_id(&self, line: &[u8], number: u64) -> Option<String> {
        if self.sampled_out(number) {
            return None;
        }
        formats::line_id(line, &self.reading)
    }

    fn parse(&self, bytes: &[u8], number: u64) -> Result<Conversation, String> {
        if self.sampled_out(number) {
            return Err(NOT_SAMPLED.into());
        }
        formats::read(bytes, number, &self.reading)
    }

    fn write(
        &self,
        line: Line,
        output: Result<Adapted, String>,
        files: &mut Files<'_>,
        stats: &mut Stats,
    ) -> io::Result<()> {
        match output {
            Ok(adapted) => {
                stats.records += 1;
                *stats
                    .formats
                    .entry(adapted.format.name().to_string())
                    .or_default() += 1;
                for role in adapted.roles {
                    *stats.roles.entry(role).or_default() += 1;
                }
                match adapted.system {
                    Some("kept") => stats.system.kept += 1,
                    Some("dropped") => stats.system.dropped += 1,
                    Some("folded") => stats.system.folded += 1,
                    Some("replaced") => stats.system.replaced += 1,
                    _ => {}
                }
                match adapted.trailing {
                    Some("dropped") => stats.trailing_dropped += 1,
                    Some("prefilled") => stats.trailing_prefilled += 1,
                    Some("kept") => stats.trailing_kept += 1,
                    _ => {}
                }
                stats.with_tools += u64::from(adapted.with_tools);
                stats.tool_calls += adapted.tool_calls;
                if let Some(n) = adapted.tokens {
                    *stats.lengths.entry(n).or_default() += 1;
                }
                files.line(OUTPUT, &adapted.line)
            }
            Err(reason) => self.reject(line, &reason, files, stats),
        }
    }

    fn reject(
        &self,
        line: Line,
        reason: &str,
        files: &mut Files<'_>,
        stats: &mut Stats,
    ) -> io::Result<()> {
        // A line the sample leaves out is neither adapted nor rejected,
        // whatever else is wrong with it (a bad line, a duplicate id).
        if self.sampled_out(line.number) {
            stats.not_sampled += 1;
            return Ok(());
        }
        stats.rejected += 1;
        record_pipeline::reject_line(files, REJECTS, line, None, reason)
    }

    fn progress(&self, stats: &Stats, _pass: &PassCounts, input: &InputState) -> Value {
        let mut progress = ProgressCounts {
            done: Some(stats.records),
            failed: Some(0),
            rejected: Some(stats.rejected),
            total: Some(input.lines.saturating_sub(stats.rejected + stats.not_sampled)),
            ..ProgressCounts::default()
        }
        .to_json();
        progress["not_sampled"] = json!(stats.not_sampled);
        progress
    }
}

/// Loads the template, variables and tokenizer, and probes whether the
/// template takes a system message.
fn prepare(spec: &AdaptationSpec, now: i64) -> Result<Adaptation, String> {
    let config = match &spec.target {
        Some(dir) => crate::phase::model::config(dir)?,
        None => None,
    };
    let template = if spec.target.is_some() || spec.chat_template.is_some() {
        Some(crate::phase::model::templates(
            spec.target.as_deref(),
            spec.chat_template.as_deref(),
            spec.template_name.as_deref(),
        )?)
    } else {
        None
    };
    let tokenizer = match &spec.target {
        Some(dir) if todod_format::tokenizer::has_tokenizer(dir) => Some(
            todod_format::tokenizer::load_dir(dir)
                .map_err(|e| format!("cannot load the tokenizer in {}: {e}", dir.display()))?
                .tokenizer,
        ),
        _ => None,
    };
    let mut adaptation = Adaptation {
        reading: Reading {
            format: spec.input_format,
            role_map: spec.role_map.clone(),
            family: spec.rendered_family,
            tool_arguments: spec.tool_arguments,
        },
        variables: crate::phase::model::variables(config.as_ref(), &spec.template_variables),
        template,
        now: Clock::at_unix(now),
        tokenizer,
        takes_system: true,
        sample: match spec.sample {
            Some(s) => {
                let lines = crate::phase::lines::count_lines(&spec.input)
                    .map_err(|e| format!("cannot read {}: {e}", spec.input.display()))?;
                (s.count < lines).then(|| sample_lines(lines, s.count, s.seed))
            }
            None => None,
        },
        spec: spec.clone(),
    };
    if adaptation.template.is_some() {
        const PROBE: &str = "todod-system-probe";
        let probe = [
            json!({"role": "system", "content": PROBE}),
            json!({"role": "user", "content": "hello"}),
        ];
        adaptation.takes_system = adaptation
            .render(&probe, &Request::default(), true)
            .is_ok_and(|text| text.contains(PROBE));
    }
    Ok(adaptation)
}

fn verdict(spec: &AdaptationSpec, mut state: PhaseState, template: Option<&str>) -> Ended {
    let sharded = spec.shards > 1;
    let stats: Stats = match state.stats() {
        Ok(s) => s,
        Err(e) => return Ended::broke_off(e),
    };
    state.closed = true;
    let lines = state
        .input
        .as_ref()
        .map_or(0, |i| i.lines)
        .saturating_sub(stats.not_sampled);
    if stats.records == 0 {
        return Ended::Failed {
            error: format!(
                "no prompt was adapted: all {lines} lines were rejected (see {})",
                spec.rejects.display()
            ),
            state: Some(state),
        };
    }
    if let Some(error) = cpu_pass::too_many_rejected(
        stats.rejected,
        lines,
        spec.max_rejected_share,
        &spec.rejects,
    ) {
        return Ended::Failed {
            error,
            state: Some(state),
        };
    }
    let result = AdaptationResult {
        records: stats.records,
        rejected: stats.rejected,
        formats: stats.formats.clone(),
        roles: stats.roles.clone(),
        system_prompts: stats.system.clone(),
        trailing_assistant: TrailingCounts {
            dropped: stats.trailing_dropped,
            prefilled: stats.trailing_prefilled,
            kept: stats.trailing_kept,
        },
        tools: ToolCounts {
            records_with_tools: stats.with_tools,
            tool_calls: stats.tool_calls,
        },
        prompt_tokens: (!stats.lengths.is_empty()).then(|| LengthQuantiles {
            p50: stats.quantile(0.5),
            p99: stats.quantile(0.99),
            max: stats.lengths.keys().next_back().copied(),
        }),
        template_sha256: template.map(str::to_string),
        output: spec.output.display().to_string(),
        rejects: spec.rejects.display().to_string(),
        sample: spec.sample.map(|s| AdaptationSample {
            count: s.count,
            seed: s.seed,
            not_sampled: stats.not_sampled,
        }),
        shards: sharded.then_some(spec.shards),
        parts: sharded.then(|| spec.parts().display().to_string()),
    };
    Ended::Completed {
        result: serde_json::to_string(&result).unwrap_or_default(),
        state: Some(state),
    }
}

/// Runs (or resumes) one attempt; `Err` breaks it off (see `kind.rs`).
async fn run_inner(run: &RunContext, spec: AdaptationSpec) -> Result<Ended, String> {
    let role = Role::of(run, spec.shards);
    let mut state = shards::resume(run).await?;
    if let (Role::PutTogether(of), false) = (role, state.closed) {
        // Every shard is done: the output and rejects put together from
        // their parts, set up as the shards were, judged as one run's.
        let finals = vec![spec.output.clone(), spec.rejects.clone()];
        state = shards::join::<Stats>(run, of, finals, spec.parts(), spec.overwrite).await?;
    }
    let mut setup: Setup = serde_json::from_value(state.setup.clone()).unwrap_or_default();
    if state.closed {
        return Ok(verdict(&spec, state, setup.template.as_deref()));
    }
    if state.input.is_none() {
        setup.now = match spec.now {
            Some(now) => now,
            None => shards::pass_clock(run).await?,
        };
    }
    let (spec2, now) = (spec.clone(), setup.now);
    let phase = tokio::task::spawn_blocking(move || prepare(&spec2, now))
        .await
        .map_err(|e| format!("loading the target model failed: {e}"))??;
    let template = phase.template.as_ref().map(Templates::identity);
    if state.input.is_none() {
        setup.template = template.clone();
        state.setup = json!(setup);
    } else if setup.template != template {
        return Err(format!(
            "the target's chat template changed since this pass started (sha256 {} then, {} \
             now); its output would no longer be one adaptation. Restore it, or start a new task",
            setup.template.as_deref().unwrap_or("none"),
            template.as_deref().unwrap_or("none")
        ));
    }
    let phase = Arc::new(phase);
    if !state.complete {
        let worker = phase.clone();
        let files = vec![spec.output.clone(), spec.rejects.clone()];
        let plan = cpu_pass::plan(&spec.input, files, spec.overwrite, role.shard());
        let pass = cpu_pass::run(
            run,
            phase,
            state,
            &plan,
            spec.threads,
            Arc::new(move |c: Conversation| worker.adapt(c)),
        );
        state = match pass.await? {
            Some(state) => state,
            None => return Ok(Ended::Stopped),
        };
    }
    if role.shard().is_some() {
        // A shard's share is judged with the others', once all are done.
        return Ok(shards::share_done(state));
    }
    Ok(verdict(&spec, state, template.as_deref()))
}
