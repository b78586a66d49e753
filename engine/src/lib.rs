//! The data-generation engine: the phase kinds the daemon runs itself and
//! the machinery they stand on.
//!
//! - [`phase`]: the `PhaseKind` seam, one module per kind, the runtime that
//!   starts and resumes phase tasks, and the exactly-once record pipeline.
//! - [`plan_file`]: the TOML plan file, checked and turned into steps.
pub mod phase;
pub mod plan_file;
