//! Command-line definitions (clap derive). Parsing only: no I/O happens here.
use clap::{Args, Parser, Subcommand};

use crate::error::EXIT_CODES_HELP;

/// Default daemon address.
pub const DEFAULT_ADDR: &str = "http://127.0.0.1:50710";

/// Task statuses accepted by the daemon.
pub const STATUSES: [&str; 5] = ["pending", "in_progress", "completed", "cancelled", "failed"];
/// Task priorities accepted by the daemon.
pub const PRIORITIES: [&str; 3] = ["high", "medium", "low"];

#[derive(Debug, Parser)]
#[command(
    name = "todoctl",
    version,
    about = "Command-line client for the todod daemon: plans, tasks, dependencies and their history",
    after_help = EXIT_CODES_HELP
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalOpts,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Args)]
pub struct GlobalOpts {
    /// Daemon address: http://HOST:PORT or unix:/path/to/todod.sock
    #[arg(long, global = true, help_heading = "Global options", env = "TODOD_ADDR", default_value = DEFAULT_ADDR)]
    pub addr: String,
    /// Bearer token sent as `authorization: Bearer <token>` on every call
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "TODOD_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// The daemon's state directory, where todoctl finds the token for TCP
    /// [default: $XDG_STATE_HOME/todod or ~/.local/state/todod]
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "TODOD_STATE_DIR",
        value_name = "DIR"
    )]
    pub state_dir: Option<std::path::PathBuf>,
    /// Print machine-readable JSON instead of text
    #[arg(long, global = true, help_heading = "Global options")]
    pub json: bool,
    /// Name recorded as the actor of the changes this client makes (x-todod-client)
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "TODOD_CLIENT",
        default_value = "todoctl"
    )]
    pub client_name: String,
    /// Colour: auto (only on a terminal, and not under NO_COLOR), always or
    /// never
    #[arg(
        long,
        global = true,
        help_heading = "Global options",
        env = "TODOCTL_COLOR",
        value_parser = ["auto", "always", "never"],
        default_value = "auto"
    )]
    pub color: String,
}

/// `--plan/-p`, shared by every command that works on one plan.
#[derive(Debug, Clone, Args)]
pub struct PlanArg {
    /// Plan name
    #[arg(short = 'p', long = "plan", env = "TODOD_PLAN")]
    pub plan: String,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// One screen per plan: counts, in progress, ready next, blocked
    Status {
        /// Only this plan (default: every plan)
        #[arg(value_name = "PLAN")]
        plan: Option<String>,
        /// Only this plan (same as the positional PLAN)
        #[arg(
            short = 'p',
            long = "plan",
            value_name = "PLAN",
            conflicts_with = "plan"
        )]
        plan_flag: Option<String>,
        /// How many tasks to show in each of in progress / ready / blocked
        #[arg(long, default_value_t = 5)]
        limit: i32,
        /// Keep the screen live until every task of the plan has ended
        /// (redrawn in place on a terminal; a line per event when piped);
        /// exit code as `wait`'s
        #[arg(long, short = 'w')]
        watch: bool,
    },
    /// List the tasks of a plan (all pages)
    List(ListArgs),
    /// Show one task with all its fields and its history
    Show {
        /// Task id, e.g. t42
        task: String,
        /// Every progress sample in the history, not only a few
        #[arg(long)]
        all_events: bool,
    },
    /// Create a task
    Add(AddArgs),
    /// Mark a task in progress
    Start(TransitionArgs),
    /// Mark a task completed
    Done(TransitionArgs),
    /// Cancel a task
    Cancel(TransitionArgs),
    /// Mark a plain task in progress failed (--reason says why); phase tasks fail by their runs
    Fail(TransitionArgs),
    /// Change a task's content, priority or spec
    Edit(EditArgs),
    /// Send a failed task back to pending
    Retry(TransitionArgs),
    /// Send a completed or cancelled task back to pending
    Reopen(TransitionArgs),
    /// Add or remove a dependency edge
    #[command(subcommand)]
    Dep(DepCommand),
    /// Show the dependency graph of a plan as a tree, or as Graphviz
    Graph {
        #[command(flatten)]
        plan: PlanArg,
        /// Print Graphviz dot (edges go from a dependency to its dependent)
        #[arg(long, conflicts_with = "json")]
        dot: bool,
        /// Include archived tasks
        #[arg(long)]
        all: bool,
    },
    /// Print a shell completion script: `todoctl completions bash > /etc/bash_completion.d/todoctl`
    Completions {
        /// bash, zsh, fish, elvish or powershell
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff): `todoctl man | man -l -`
    Man,
    /// Serve MCP on stdin/stdout: todod as a coding agent's todo tool
    /// (opencode, Claude Code, Codex CLI, Gemini CLI shapes; see README)
    Mcp(McpArgs),
    /// Block until a task (or every task of a plan) has ended; the exit code says how
    ///
    /// 0 completed, 10 failed (or can no longer run: a dependency failed), 11 cancelled,
    /// 124 the timeout passed first. A plan has ended when none of its tasks can still
    /// make progress on its own.
    Wait {
        /// Task id, e.g. t42
        #[arg(required_unless_present = "plan", conflicts_with = "plan")]
        task: Option<String>,
        /// Wait for every task of this plan instead
        #[arg(short = 'p', long = "plan", value_name = "PLAN")]
        plan: Option<String>,
        /// Give up after this long (e.g. 90s, 2h; default: no limit)
        #[arg(long, value_parser = humantime::parse_duration)]
        timeout: Option<std::time::Duration>,
    },
    /// Ask whether the daemon serves calls (it answers a real read); exit 0 if it does
    ///
    /// With --wait, keep asking until it does or the time is up (then exit 5,
    /// unreachable): for scripts that start the daemon and go on once it serves.
    Ping {
        /// Keep asking for up to this long (e.g. 30s, 10m)
        #[arg(long, value_parser = humantime::parse_duration)]
        wait: Option<std::time::Duration>,
    },
    /// The kinds a task may be: todo, and the phase kinds the daemon runs
    ///
    /// Each with what it does, its section in a plan file and the schedule
    /// actions its tasks take.
    Kinds,
    /// The inference servers the daemon runs for phase tasks
    ///
    /// Each server a spec names (`servers.NAME`, an endpoint
    /// "server:NAME"): its state (starting, ready, restarting, given_up),
    /// pid, URL, uptime, restarts, the tasks that use it and how its last
    /// process ended. Each daemon lists its own.
    Servers,
    /// Print a one-time login URL for the daemon's status page
    ///
    /// The page shows the plans, their phases and a running phase's progress,
    /// rates, ETA and throughput against its projection, live. The code in
    /// the URL works once, for five minutes; the browser keeps a session
    /// cookie (12 hours, until the daemon restarts).
    Open {
        /// Open at this plan's page (default: the overview)
        plan: Option<String>,
        /// Also open it, with $BROWSER or xdg-open
        #[arg(long)]
        browser: bool,
    },
    /// Back the graph up into FILE while the daemon runs (a consistent copy)
    ///
    /// FILE must not exist, and must be outside the daemon's state directory
    /// (and within its data roots, if it has any). Restore it, with the
    /// daemon stopped, with `todod restore FILE --state-dir DIR`.
    Backup {
        /// The file to create (a relative path is taken from here)
        file: std::path::PathBuf,
    },
    /// Give a task a cron schedule, or take it away
    ///
    /// reopen: a completed plain task goes back to pending at each firing (a
    /// recurring chore). probe: a generation or feasibility task's endpoints
    /// are asked whether they answer. remeasure: a running generation is held
    /// while its server is measured again at its level (as its feasibility
    /// task measured it); the figures are recorded and its drift check is
    /// held against them. Slots missed while the daemon was down fire once
    /// when it starts.
    Schedule {
        /// Task id, e.g. t42
        task: String,
        /// Five crontab fields, e.g. "*/15 * * * *" or "0 9 * * 1-5" (0 or 7 is
        /// Sunday; Mon-Fri works too), or six with seconds first
        #[arg(required_unless_present = "clear")]
        cron: Option<String>,
        /// IANA time zone the expression is read in, e.g. Europe/Berlin
        #[arg(long = "tz", default_value = "UTC")]
        timezone: String,
        /// What a firing does
        #[arg(long, value_parser = ["reopen", "probe", "remeasure"], default_value = "reopen")]
        action: String,
        /// Remove the task's schedule
        #[arg(long, conflicts_with = "cron")]
        clear: bool,
    },
    /// Follow events as they happen, a line each: a task's or a plan's until it
    /// has ended (exit code as `wait`'s; on a terminal, the plan's screen
    /// redrawn in place), or every plan's until Ctrl-C
    Watch {
        /// Follow this task only; the watch ends when it has
        task: Option<String>,
        /// Only this plan; the watch ends when nothing in it can move any more
        /// (default: every plan, until Ctrl-C)
        #[arg(short = 'p', long = "plan", env = "TODOD_PLAN")]
        plan: Option<String>,
        /// Start after this event sequence number (default: from now)
        #[arg(long, value_name = "SEQ", conflicts_with = "from_start")]
        after: Option<i64>,
        /// Replay the history first
        #[arg(long)]
        from_start: bool,
    },
    /// Replace a plan's todo list with a JSON list read from stdin (an agent's todo-write)
    #[command(after_help = WRITE_HELP)]
    Write {
        #[command(flatten)]
        plan: PlanArg,
        /// Refuse the write (exit 4) unless the plan is at this revision
        #[arg(long, value_name = "N")]
        expected_revision: Option<i64>,
        /// Reason recorded on every event of this write
        #[arg(long)]
        reason: Option<String>,
    },
    /// Print a plan's live todo list (with --json: the shape `write` accepts)
    Read {
        #[command(flatten)]
        plan: PlanArg,
    },
    /// Create, list and show plans
    #[command(subcommand)]
    Plan(PlanCommand),
}

const WRITE_HELP: &str = "\
Input: a JSON array of items, or an object {\"todos\": [...]}. Each item:
  {\"id\"?: \"t3\", \"content\": \"...\", \"status\"?: \"pending\", \"priority\"?: \"medium\",
   \"depends_on\"?: [\"t1\"]}        (\"dependsOn\" is accepted too)
An item with an id updates that task; without one it matches a live task with the
same content or creates a task. Plain tasks missing from the list are archived.";

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub plan: PlanArg,
    /// Only these statuses (repeatable or comma-separated)
    #[arg(short = 's', long = "status", value_delimiter = ',', value_parser = STATUSES)]
    pub statuses: Vec<String>,
    /// Only these kinds, e.g. todo, generation (repeatable or comma-separated)
    #[arg(short = 'k', long = "kind", value_delimiter = ',')]
    pub kinds: Vec<String>,
    /// Only pending tasks whose dependencies are all completed
    #[arg(long)]
    pub ready: bool,
    /// Only pending tasks waiting on a dependency (including blocked by a failure)
    #[arg(long)]
    pub blocked: bool,
    /// Include archived tasks
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// What the task is about
    pub content: String,
    #[command(flatten)]
    pub plan: PlanArg,
    /// Priority (default: medium)
    #[arg(long, value_parser = PRIORITIES)]
    pub priority: Option<String>,
    /// Kind: todo (default) or a phase kind such as generation
    #[arg(long)]
    pub kind: Option<String>,
    /// Phase spec: a JSON object, or @FILE to read it from a file (@- for stdin)
    #[arg(long, value_name = "JSON|@FILE")]
    pub spec: Option<String>,
    /// A task this one depends on (repeatable or comma-separated)
    #[arg(long = "after", value_name = "TASK", value_delimiter = ',')]
    pub after: Vec<String>,
    /// Refuse (exit 4) unless the plan is at this revision
    #[arg(long, value_name = "N")]
    pub expected_revision: Option<i64>,
    /// Reason recorded on the event
    #[arg(long)]
    pub reason: Option<String>,
}

#[derive(Debug, Args)]
pub struct TransitionArgs {
    /// Task id, e.g. t42
    pub task: String,
    /// Reason recorded on the event
    #[arg(long)]
    pub reason: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum DepCommand {
    /// TASK comes to depend on DEPENDS_ON
    Add(DepArgs),
    /// TASK no longer depends on DEPENDS_ON
    #[command(alias = "remove")]
    Rm(DepArgs),
}

#[derive(Debug, Args)]
pub struct DepArgs {
    /// The dependent task
    pub task: String,
    /// The task it depends on
    pub depends_on: String,
    /// Reason recorded on the event
    #[arg(long)]
    pub reason: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Create a plan
    Create {
        /// Plan name: 1-128 letters, digits and `._:-`
        name: String,
        /// Human-readable title
        #[arg(long)]
        title: Option<String>,
    },
    /// List every plan with its counts
    List {
        /// Archived plans too
        #[arg(long)]
        all: bool,
    },
    /// Put a plan away: kept whole with its history, left out of `status` and
    /// `plan list`, closed to changes, its phases and schedules stopped, until
    /// it is restored. Refused while a task of it is in progress.
    Archive {
        name: String,
        /// Why, recorded in the history
        #[arg(long)]
        reason: Option<String>,
    },
    /// Bring an archived plan back
    Restore {
        name: String,
        /// Why, recorded in the history
        #[arg(long)]
        reason: Option<String>,
    },
    /// Create or update a plan's phase tasks from a pipeline file (TOML)
    ///
    /// The daemon's phase steps the file names (`todoctl kinds` lists them),
    /// chained, with their files derived from the file's output_dir. Applying the same file
    /// again changes nothing; a changed file updates the steps that have not
    /// started and is refused if it would change one that has.
    Apply {
        /// The pipeline file (see examples/datagen.toml)
        file: std::path::PathBuf,
        /// The plan (default: the file's `plan`)
        #[arg(short = 'p', long = "plan", value_name = "PLAN")]
        plan: Option<String>,
        /// Show what would change; change nothing
        #[arg(long)]
        dry_run: bool,
        /// Why, recorded in the history
        #[arg(long)]
        reason: Option<String>,
    },
    /// Show one plan's summary (same as `status PLAN`)
    Show {
        name: String,
        /// How many tasks to show in each of in progress / ready / blocked
        #[arg(long, default_value_t = 5)]
        limit: i32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn list_accepts_comma_separated_statuses() {
        let cli = Cli::try_parse_from([
            "todoctl",
            "list",
            "-p",
            "x",
            "--status",
            "pending,failed",
            "-s",
            "completed",
        ])
        .expect("parses");
        match cli.command {
            Command::List(a) => assert_eq!(a.statuses, ["pending", "failed", "completed"]),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn unknown_status_is_a_usage_error() {
        let err = Cli::try_parse_from(["todoctl", "list", "-p", "x", "--status", "done"])
            .expect_err("rejects");
        assert_eq!(err.exit_code(), 2);
    }
}

/// What `edit` changes; each flag left out stays as it is.
#[derive(Args, Debug)]
pub struct EditArgs {
    /// Task id, e.g. t42
    pub task: String,
    /// New content
    #[arg(long)]
    pub content: Option<String>,
    /// New priority
    #[arg(long, value_parser = ["high", "medium", "low"])]
    pub priority: Option<String>,
    /// New phase spec: inline JSON, @FILE, or @- for stdin
    #[arg(long)]
    pub spec: Option<String>,
    /// Who works on it ("" for nobody)
    #[arg(long)]
    pub owner: Option<String>,
    /// A JSON object merged into the task's metadata; a key set to null is removed
    #[arg(long, value_name = "JSON")]
    pub metadata: Option<String>,
    /// Reason recorded on the event
    #[arg(long)]
    pub reason: Option<String>,
}

/// `todoctl mcp`: which plan an agent's list goes to, and which tools it sees.
#[derive(Args, Debug)]
pub struct McpArgs {
    /// Plan to keep the list in [default: named after the project directory:
    /// the nearest one above --dir holding .git, else --dir]
    #[arg(short = 'p', long = "plan", env = "TODOD_PLAN")]
    pub plan: Option<String>,
    /// The project directory [default: the working directory]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<std::path::PathBuf>,
    /// Tool groups to offer, comma-separated: opencode, claude, codex, gemini,
    /// plan, or all
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "all",
        value_parser = ["all", "opencode", "claude", "codex", "gemini", "plan"]
    )]
    pub tools: Vec<String>,
}
