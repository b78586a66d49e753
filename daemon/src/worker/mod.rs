//! Phase workers: the daemon runs tasks of the phase kinds itself. So far this
//! holds the exactly-once output files; the runtime and the phases build on it.
pub mod generation;
pub mod output;
pub mod prompts;
pub mod runtime;
