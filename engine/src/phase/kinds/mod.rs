//! The phase kinds, one module each, and [`TABLE`], the one place that
//! lists them. Everything that needs to know the kinds asks here: the API
//! (which kinds exist, their specs), the store's `kinds` table, the runtime,
//! the plan file's sections and schema, the scheduler's actions, `ListKinds`
//! (todoctl, the MCP server). Adding a kind is a module implementing
//! [`PhaseKind`](super::kind::PhaseKind) and a line in the `table!` below.

use serde_json::Value;

use super::kind::{AnyKind, Checked, Entry};
use super::plan_step::PlanStep;
use super::Boundaries;
use todod_domain::schedule::Action;
use todod_domain::{Error, Kind};

/// Declares each kind's module and lists it in [`TABLE`]: one line a kind.
macro_rules! table {
    ($($module:ident => $kind:ident),+ $(,)?) => {
        $(pub mod $module;)+

        /// Every phase kind, in the order of a plan file's steps.
        pub static TABLE: &[&dyn AnyKind] = &[$(&Entry::<$module::kind::$kind>::NEW),+];
    };
}

table! {
    adaptation => Adaptation,
    feasibility => Feasibility,
    generation => Generation,
    filter => Filter,
    tokenization => Tokenization,
}

/// The phase kind `kind`, if it is one.
pub fn get(kind: Kind) -> Option<&'static dyn AnyKind> {
    TABLE.iter().copied().find(|k| k.kind() == kind)
}

/// Every kind the daemon knows: `todo`, then the phase kinds.
pub fn all() -> Vec<Kind> {
    std::iter::once(Kind::TODO)
        .chain(TABLE.iter().map(|k| k.kind()))
        .collect()
}

/// A client's kind: `todo` or one of the table's, naming `field` when it is
/// neither.
pub fn parse(field: &str, text: &str) -> Result<Kind, Error> {
    let known = all();
    Kind::from_name(text)
        .filter(|k| known.contains(k))
        .ok_or_else(|| {
            let names: Vec<String> = known.iter().map(Kind::to_string).collect();
            Error::invalid(
                field,
                format!(
                    "unknown kind {:?}; expected one of {}",
                    todod_domain::model::clip(text),
                    names.join(", ")
                ),
            )
        })
}

/// Checks `json` as the spec of a `kind` task (a plain task's passes as it
/// is). `own` lists the paths the task already claims (for an update).
pub fn check(
    kind: Kind,
    json: &str,
    bounds: &Boundaries,
    own: &[String],
) -> Result<Checked<()>, Error> {
    match get(kind) {
        Some(k) => k.check(json, bounds, own),
        None => Ok(Checked {
            spec: (),
            json: json.to_string(),
            claims: Vec::new(),
            requires: None,
            refers: None,
        }),
    }
}

/// The spec fields whose change between `old` and `new` would change what
/// a task of `kind` writes.
pub fn output_fields_changed(kind: Kind, old: &str, new: &str) -> Vec<String> {
    let fields = get(kind).map_or(&[][..], |k| k.output_fields());
    let parse = |s: &str| serde_json::from_str::<Value>(s).unwrap_or(Value::Null);
    let (old, new) = (parse(old), parse(new));
    fields
        .iter()
        .filter(|f| old.get(**f) != new.get(**f))
        .map(|f| format!("spec.{f}"))
        .collect()
}

/// Whether a ready task starts by itself (`"auto_start": false` in its
/// spec waits for a start).
pub fn auto_start(spec: &str) -> bool {
    serde_json::from_str::<Value>(spec)
        .ok()
        .and_then(|v| v.get("auto_start").and_then(Value::as_bool))
        .unwrap_or(true)
}

/// The kinds that take schedule action `action`: `reopen` is a plain
/// task's, the others the phase kinds that list them.
pub fn taking(action: Action) -> Vec<Kind> {
    if action == Action::Reopen {
        return vec![Kind::TODO];
    }
    TABLE
        .iter()
        .filter(|k| k.actions().contains(&action))
        .map(|k| k.kind())
        .collect()
}

/// The `remeasure` schedule action on task `task` (a running generation):
/// holds its run and measures the server again; the outcome is the
/// firing's event. The scheduler takes actions through the table, never a
/// kind's module: this says which module does it (a generation is measured
/// by the feasibility kind's machinery, which a generation must not use).
pub async fn remeasure(
    store: &super::PhaseStore,
    gates: &super::gate::Gates,
    telemetry: &todod_telemetry::Telemetry,
    task: todod_domain::TaskId,
) -> Value {
    feasibility::remeasure::remeasure(store, gates, telemetry, task).await
}

/// The plan file's steps, in order, with their kinds.
pub fn steps() -> impl Iterator<Item = (Kind, PlanStep)> {
    TABLE.iter().filter_map(|k| Some((k.kind(), k.step()?)))
}

/// The step whose section is `section`.
pub fn step(section: &str) -> Option<(Kind, PlanStep)> {
    steps().find(|(_, s)| s.section == section)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_each_kind_once_and_todo_is_not_one() {
        let names: Vec<&str> = TABLE.iter().map(|k| k.name()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "{names:?}");
        assert!(get(Kind::TODO).is_none());
        for k in TABLE {
            assert!(k.kind().is_phase());
            assert_eq!(parse("kind", k.name()).unwrap(), k.kind());
        }
        let refused = parse("kind", "Generation").unwrap_err().to_string();
        assert!(refused.contains("expected one of todo, "), "{refused}");
        assert_eq!(taking(Action::Reopen), [Kind::TODO]);
        assert!(taking(Action::Remeasure).contains(&Kind::named("generation")));
    }
}
