//! The phase kinds: the one place that knows them. For each kind it checks a
//! spec on arrival (every refusal names the field), says which paths the task
//! will write and which spec fields change what it writes, whether it starts
//! on its own, and runs it. The API and the runtime both ask here; adding a
//! kind means a module of its own and an arm in each function below.
use serde_json::Value;

use super::generation::{self, GenerationSpec};
use super::{Boundaries, Ended, RunContext};
use crate::domain::{Error, Kind};
use crate::store::Claim;

/// A spec as the registry accepted it.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The spec to store (paths made canonical).
    pub json: String,
    /// Paths the task will write.
    pub claims: Vec<Claim>,
    /// A kind the task must depend on, if its spec needs one.
    pub requires: Option<Kind>,
}

/// Checks `json` as the spec of a `kind` task. `own` lists the paths the task
/// already claims (for an update).
pub fn check(
    kind: Kind,
    json: &str,
    bounds: &Boundaries,
    own: &[String],
) -> Result<Checked, Error> {
    match kind {
        Kind::Todo => Ok(Checked {
            json: json.to_string(),
            claims: Vec::new(),
            requires: None,
        }),
        Kind::Generation => {
            let checked = GenerationSpec::check(json, bounds, own)?;
            Ok(Checked {
                json: checked.json,
                claims: checked.claims,
                requires: checked.requires,
            })
        }
        other => Err(Error::invalid(
            "kind",
            format!("{other} tasks cannot be run by this version of todod yet"),
        )),
    }
}

/// The spec fields whose change between `old` and `new` would change what a
/// task of `kind` writes.
pub fn output_fields_changed(kind: Kind, old: &str, new: &str) -> Vec<String> {
    let fields: &[&str] = match kind {
        Kind::Generation => generation::spec::OUTPUT_FIELDS,
        _ => &[],
    };
    let parse = |s: &str| serde_json::from_str::<Value>(s).unwrap_or(Value::Null);
    let (old, new) = (parse(old), parse(new));
    fields
        .iter()
        .filter(|f| old.get(**f) != new.get(**f))
        .map(|f| format!("spec.{f}"))
        .collect()
}

/// Whether the runtime runs tasks of `kind`.
pub fn runs(kind: Kind) -> bool {
    matches!(kind, Kind::Generation)
}

/// Whether a ready task starts by itself (`"auto_start": false` waits for a
/// start).
pub fn auto_start(_kind: Kind, spec: &str) -> bool {
    serde_json::from_str::<Value>(spec)
        .ok()
        .and_then(|v| v.get("auto_start").and_then(Value::as_bool))
        .unwrap_or(true)
}

/// Runs one attempt of a task of `kind`.
pub async fn run(kind: Kind, context: RunContext) -> Ended {
    match kind {
        Kind::Generation => match GenerationSpec::parse(&context.spec) {
            Ok(spec) => generation::run(context, spec).await,
            Err(error) => Ended::broke_off(format!("the stored spec is not valid: {error}")),
        },
        other => Ended::broke_off(format!(
            "{other} tasks are not run by this version of todod"
        )),
    }
}
