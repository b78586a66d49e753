//! Changes the rules decided on. The store persists each one and records it as an
//! event, so the history is exactly the list of accepted changes.
use super::model::{Kind, Priority, Status, TaskId};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `id` is provisional (negative) until the store assigns the real one.
    Created {
        id: TaskId,
        content: String,
        priority: Priority,
        kind: Kind,
        position: i64,
        spec: Option<String>,
    },
    ContentChanged {
        id: TaskId,
        old: String,
        new: String,
    },
    PriorityChanged {
        id: TaskId,
        old: Priority,
        new: Priority,
    },
    SpecChanged {
        id: TaskId,
        old: Option<String>,
        new: Option<String>,
    },
    OwnerChanged {
        id: TaskId,
        old: Option<String>,
        new: Option<String>,
    },
    /// Each side is the whole metadata object as JSON, or none.
    MetadataChanged {
        id: TaskId,
        old: Option<String>,
        new: Option<String>,
    },
    /// Position in the list.
    Moved {
        id: TaskId,
        from: i64,
        to: i64,
    },
    StatusChanged {
        id: TaskId,
        from: Status,
        to: Status,
    },
    DependencyAdded {
        id: TaskId,
        depends_on: TaskId,
    },
    DependencyRemoved {
        id: TaskId,
        depends_on: TaskId,
    },
    Archived {
        id: TaskId,
    },
    Restored {
        id: TaskId,
    },
    /// A schedule set, changed or cleared; each side is the schedule as a
    /// JSON object (`cron`, `timezone`, `action`, `next_fire_at`), or none.
    ScheduleChanged {
        id: TaskId,
        old: Option<String>,
        new: Option<String>,
    },
}

impl Change {
    /// The task the change is about.
    pub fn task(&self) -> TaskId {
        match self {
            Change::Created { id, .. }
            | Change::ContentChanged { id, .. }
            | Change::PriorityChanged { id, .. }
            | Change::SpecChanged { id, .. }
            | Change::OwnerChanged { id, .. }
            | Change::MetadataChanged { id, .. }
            | Change::Moved { id, .. }
            | Change::StatusChanged { id, .. }
            | Change::DependencyAdded { id, .. }
            | Change::DependencyRemoved { id, .. }
            | Change::Archived { id }
            | Change::Restored { id }
            | Change::ScheduleChanged { id, .. } => *id,
        }
    }
}
