//! The domain core: the todo graph, the status state machine and the dependency
//! rules, as plain Rust with no I/O. The store loads a view of a plan, asks these
//! rules what a request changes, and persists only what they accept.
pub mod annotations;
pub mod change;
pub mod error;
pub mod graph;
pub mod kind;
pub mod model;
pub mod schedule;
pub mod shards;
pub mod spec;
pub mod time;
pub mod todo_list;
pub mod transition;

pub use change::Change;
pub use error::Error;
pub use graph::{readiness, Graph};
pub use model::{Kind, Priority, Readiness, Status, TaskId};
pub use spec::Claim;
