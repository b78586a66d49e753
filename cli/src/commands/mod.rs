//! One function per command. Local input (stdin, --spec) is checked before the
//! daemon is dialled, so invalid input never reaches the server.
mod live;
mod open;
mod ping;
pub mod plans;
mod servers;
pub mod tasks;
mod wait;
mod watch;
mod write;

use std::io::Write as _;

use anyhow::Result;

use crate::cli::{Cli, Command, DepCommand, PlanCommand};
use crate::client::{Client, Connector};
use crate::error::CliError;

/// What every command needs: how to connect and how to print.
pub struct Ctx {
    pub connector: Connector,
    pub json: bool,
    /// Where the token is read from when none was given (`ping --wait`
    /// reads it again: a daemon that starts after it writes a new one).
    pub token_source: Option<TokenSource>,
}

/// No token was given: it is read from the daemon's state directory.
pub struct TokenSource {
    pub state_dir: Option<std::path::PathBuf>,
}

impl Ctx {
    pub async fn client(&self) -> Result<Client, CliError> {
        self.connector.connect().await
    }

    /// Sends a mutating call with a fresh `request_id`, once more over a
    /// new connection if its answer was lost (`client::send_once`).
    pub async fn mutate<Req, Resp, Fut>(
        &self,
        req: Req,
        set_id: impl FnOnce(&mut Req, String),
        call: impl Fn(Client, Req) -> Fut,
    ) -> Result<Resp>
    where
        Req: Clone,
        Fut: std::future::Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let first = self.client().await?;
        crate::client::send_once(
            first,
            || async { self.client().await.map_err(anyhow::Error::from) },
            req,
            set_id,
            call,
        )
        .await
    }
}

/// Writes text to stdout; a closed pipe surfaces as an io error that `main`
/// ignores. Control characters that reached the text are shown escaped.
pub fn emit(text: &str) -> Result<()> {
    let text = crate::safe::for_terminal(text);
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// Pretty JSON document on stdout, with every text exactly as stored.
pub fn emit_json(value: &serde_json::Value) -> Result<()> {
    emit_raw(&serde_json::to_string_pretty(value)?)
}

/// One JSON line on stdout, exact.
pub fn emit_raw(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

/// The API fields each command's flags and arguments fill, so that the
/// daemon's complaint about a field names what the person typed.
fn words(command: &Command) -> &'static [(&'static str, &'static str)] {
    const TASK: &[(&str, &str)] = &[("id", "TASK"), ("task_id", "TASK")];
    match command {
        Command::Show { .. }
        | Command::Start(_)
        | Command::Done(_)
        | Command::Cancel(_)
        | Command::Fail(_)
        | Command::Retry(_)
        | Command::Reopen(_)
        | Command::Wait { .. } => TASK,
        Command::Watch { .. } => &[("id", "TASK"), ("plan", "--plan"), ("after_seq", "--after")],
        Command::Edit(_) => &[
            ("id", "TASK"),
            ("content", "--content"),
            ("priority", "--priority"),
            ("spec_json", "--spec"),
            ("owner", "--owner"),
            ("metadata_patch_json", "--metadata"),
        ],
        Command::Add(_) => &[
            ("plan", "--plan"),
            ("content", "CONTENT"),
            ("priority", "--priority"),
            ("kind", "--kind"),
            ("spec_json", "--spec"),
            ("depends_on", "--after"),
            ("expected_revision", "--expected-revision"),
        ],
        Command::Dep(_) => &[("task_id", "TASK"), ("depends_on", "DEPENDS_ON")],
        Command::Schedule { .. } => &[
            ("task_id", "TASK"),
            ("cron", "CRON"),
            ("timezone", "--tz"),
            ("action", "--action"),
        ],
        Command::Plan(PlanCommand::Create { .. }) => &[("name", "NAME"), ("title", "--title")],
        Command::Plan(PlanCommand::Archive { .. } | PlanCommand::Restore { .. }) => {
            &[("name", "NAME"), ("reason", "--reason")]
        }
        Command::Plan(PlanCommand::Apply { .. }) => &[("plan", "--plan")],
        Command::Status { .. } | Command::Plan(_) => &[("plan", "PLAN"), ("name", "PLAN")],
        Command::List(_) | Command::Graph { .. } | Command::Read { .. } | Command::Write { .. } => {
            &[
                ("plan", "--plan"),
                ("statuses", "--status"),
                ("kinds", "--kind"),
                ("expected_revision", "--expected-revision"),
            ]
        }
        _ => &[],
    }
}

pub async fn run(cli: Cli) -> Result<()> {
    crate::error::use_words(words(&cli.command));
    let g = &cli.global;
    // Over TCP the daemon wants its token: given, or read from its state
    // directory, which the daemon's own user can read.
    let token = g
        .token
        .clone()
        .filter(|t| !t.trim().is_empty())
        .or_else(|| crate::client::token_from_state_dir(&g.addr, g.state_dir.as_deref()));
    // An agent's changes are recorded as the MCP server's unless named.
    let client_name = match (&cli.command, g.client_name.as_str()) {
        (Command::Mcp(_), "todoctl") => "todoctl-mcp",
        (_, name) => name,
    };
    let connector = Connector::new(&g.addr, token.as_deref(), client_name)?;
    let token_given = g.token.as_deref().is_some_and(|t| !t.trim().is_empty());
    let ctx = Ctx {
        connector,
        json: g.json,
        token_source: (!token_given).then(|| TokenSource {
            state_dir: g.state_dir.clone(),
        }),
    };
    match cli.command {
        Command::Status {
            plan,
            plan_flag,
            limit,
            watch,
        } => match (plan.or(plan_flag), watch) {
            (Some(_), true) if ctx.json => Err(crate::error::CliError::usage(
                "--watch draws a screen for people; for JSON follow `todoctl --json watch -p PLAN` \
                 or end with `todoctl --json wait -p PLAN`",
            )
            .into()),
            (Some(plan), true) => live::live(&ctx, plan, limit.max(1), &[]).await,
            (None, true) => Err(crate::error::CliError::usage(
                "--watch follows one plan: name it (todoctl status PLAN --watch)",
            )
            .into()),
            (plan, false) => plans::status(&ctx, plan, limit).await,
        },
        Command::List(args) => tasks::list(&ctx, args).await,
        Command::Show { task, all_events } => tasks::show(&ctx, &task, all_events).await,
        Command::Add(args) => tasks::add(&ctx, args).await,
        Command::Start(a) => tasks::transition(&ctx, tasks::Verb::Start, a).await,
        Command::Done(a) => tasks::transition(&ctx, tasks::Verb::Done, a).await,
        Command::Cancel(a) => tasks::transition(&ctx, tasks::Verb::Cancel, a).await,
        Command::Fail(a) => tasks::transition(&ctx, tasks::Verb::Fail, a).await,
        Command::Edit(args) => tasks::edit(&ctx, args).await,
        Command::Retry(a) => tasks::transition(&ctx, tasks::Verb::Retry, a).await,
        Command::Reopen(a) => tasks::transition(&ctx, tasks::Verb::Reopen, a).await,
        Command::Dep(DepCommand::Add(a)) => tasks::dependency(&ctx, true, a).await,
        Command::Dep(DepCommand::Rm(a)) => tasks::dependency(&ctx, false, a).await,
        Command::Graph { plan, dot, all } => tasks::graph(&ctx, &plan.plan, dot, all).await,
        Command::Watch {
            task,
            plan,
            after,
            from_start,
        } => {
            let start = match (after, from_start) {
                (Some(seq), _) => watch::Start::After(seq),
                (None, true) => watch::Start::After(0),
                (None, false) => watch::Start::Now,
            };
            watch::watch(&ctx, task, plan, start, 10).await
        }
        Command::Write {
            plan,
            expected_revision,
            reason,
        } => write::write(&ctx, &plan.plan, expected_revision, reason).await,
        Command::Read { plan } => write::read(&ctx, &plan.plan).await,
        Command::Plan(PlanCommand::Create { name, title }) => {
            plans::create(&ctx, name, title).await
        }
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut command = Cli::command();
            clap_complete::generate(shell, &mut command, "todoctl", &mut std::io::stdout());
            Ok(())
        }
        Command::Mcp(args) => {
            let plan = args.plan.filter(|p| !p.trim().is_empty());
            let choice = match (plan, args.dir) {
                (Some(plan), _) => crate::mcp::PlanChoice::Named(plan),
                (None, dir) => {
                    // Absolute and resolved: the plan is named and titled
                    // after the directory itself, not how it was spelled.
                    let cwd = std::env::current_dir()?;
                    let dir = cwd.join(dir.unwrap_or_else(|| cwd.clone()));
                    let dir = std::fs::canonicalize(&dir).map_err(|e| {
                        CliError::usage(format!("--dir {}: {e}", dir.display()))
                    })?;
                    crate::mcp::PlanChoice::Project(crate::mcp::project_dir(&dir))
                }
            };
            let named = g.client_name != "todoctl";
            crate::mcp::serve(ctx.connector, named, choice, &args.tools).await
        }
        Command::Man => {
            use clap::CommandFactory;
            let mut page = Vec::new();
            clap_mangen::Man::new(Cli::command()).render(&mut page)?;
            super::commands::emit_raw(&String::from_utf8_lossy(&page))
        }
        Command::Wait {
            task,
            plan,
            timeout,
        } => wait::wait(&ctx, task, plan, timeout).await,
        Command::Ping { wait } => ping::ping(&ctx, wait).await,
        Command::Backup { file } => plans::backup(&ctx, &file).await,
        Command::Open { plan, browser } => open::open(&ctx, plan, browser).await,
        Command::Kinds => open::kinds(&ctx).await,
        Command::Servers => servers::servers(&ctx).await,
        Command::Schedule {
            task,
            cron,
            timezone,
            action,
            clear,
        } => tasks::schedule(&ctx, &task, cron, timezone, action, clear).await,
        Command::Plan(PlanCommand::List { all }) => plans::list(&ctx, all).await,
        Command::Plan(PlanCommand::Archive { name, reason }) => {
            plans::archive(&ctx, name, reason, false).await
        }
        Command::Plan(PlanCommand::Restore { name, reason }) => {
            plans::archive(&ctx, name, reason, true).await
        }
        Command::Plan(PlanCommand::Apply {
            file,
            plan,
            dry_run,
            reason,
        }) => plans::apply(&ctx, &file, plan, dry_run, reason).await,
        Command::Plan(PlanCommand::Show { name, limit }) => {
            plans::status(&ctx, Some(name), limit).await
        }
    }
}
