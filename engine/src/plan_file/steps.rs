//! From a plan file to the phase tasks it stands for: the table's steps
//! that run (adaptation → feasibility → generation → ... → tokenization),
//! each with its spec and files derived from the output directory by its
//! kind, so that one step's output is the next one's input, and each
//! depending on the step before it.
use serde_json::{Map, Value};

use super::PlanFile;
use crate::phase::kinds;
use crate::phase::plan_step::Flow;
use todod_domain::Kind;

/// One phase task of the plan file.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// Its section in the file, and its name as a step in the store.
    pub section: &'static str,
    pub kind: Kind,
    pub content: String,
    pub spec: Map<String, Value>,
    /// The steps it depends on (earlier in the order).
    pub depends_on: Vec<&'static str>,
    /// Spec fields that come from elsewhere in the file than the step's own
    /// section, with that place: a refusal of the spec names the file's path.
    pub origins: Vec<(&'static str, &'static str)>,
}

impl Step {
    /// The place in the file of a refused spec field (`spec.params.top_p`).
    pub fn file_path(&self, spec_field: &str) -> String {
        let field = spec_field.strip_prefix("spec.").unwrap_or(spec_field);
        let head = field.split(['.', '[']).next().unwrap_or(field);
        match self.origins.iter().find(|(f, _)| *f == head) {
            // A table of the file: the field's path inside it goes along.
            Some((_, origin)) if ["sampling", "budget", "servers"].contains(origin) => {
                format!("{origin}{}", &field[head.len()..])
            }
            Some((_, origin)) => origin.to_string(),
            None => format!("{}.{field}", self.section),
        }
    }
}

/// The steps of a checked plan file, in graph order.
pub fn derive(p: &PlanFile) -> Vec<Step> {
    let mut flow = Flow::start(p);
    let mut steps: Vec<Step> = Vec::new();
    for (kind, step) in kinds::steps() {
        if !p.runs(step.section) {
            continue;
        }
        let derived = (step.derive)(p, &mut flow);
        let own = p.options(step.section);
        let mut spec = derived.spec;
        spec.extend(own.clone());
        // A field the step's own section sets is that section's, whatever
        // the file would have derived for it.
        let mut origins = derived.origins;
        origins.retain(|(field, _)| !own.contains_key(*field));
        steps.push(Step {
            section: step.section,
            kind,
            content: derived.content,
            spec,
            depends_on: steps.last().map(|s| s.section).into_iter().collect(),
            origins,
        });
    }
    steps
}
