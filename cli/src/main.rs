//! `todoctl`: the command-line client of the todod daemon.
//!
//! `main` only parses the arguments, runs the command and turns the outcome
//! into an exit code; errors go to stderr as one line, `todoctl: <message>`.
//!
//! Exit codes:
//!
//! | code | meaning                                                              |
//! |------|----------------------------------------------------------------------|
//! | 0    | success                                                              |
//! | 1    | other error                                                          |
//! | 2    | usage error or invalid input, including INVALID_ARGUMENT / OUT_OF_RANGE from the daemon |
//! | 3    | not found (NOT_FOUND)                                                |
//! | 4    | failed precondition or conflict (FAILED_PRECONDITION, ALREADY_EXISTS, ABORTED) |
//! | 5    | daemon unreachable (connection failure, UNAVAILABLE)                 |
//! | 6    | UNAUTHENTICATED or PERMISSION_DENIED                                 |
mod cli;
mod client;
mod commands;
mod error;
mod graph;
mod json;
mod mcp;
mod phase_view;
mod render;
mod safe;
mod screens;
mod style;
mod todo_input;

use std::process::ExitCode;

use clap::Parser;

use crate::error::{classify, Exit, ReportCtx};

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    style::init(if cli.global.json {
        "never"
    } else {
        &cli.global.color
    });
    let addr = cli.global.addr.clone();
    let token_set = cli
        .global
        .token
        .as_deref()
        .is_some_and(|t| !t.trim().is_empty());
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("todoctl: cannot start the async runtime: {e}");
            return ExitCode::from(Exit::Other as u8);
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => match classify(
            &err,
            &ReportCtx {
                addr: &addr,
                token_set,
            },
        ) {
            None => ExitCode::SUCCESS,
            Some((exit, message)) => {
                // `wait` has printed its outcome; its exit code alone says it.
                if !message.is_empty() {
                    eprintln!("todoctl: {}", safe::escape(&message));
                }
                ExitCode::from(exit as u8)
            }
        },
    }
}
