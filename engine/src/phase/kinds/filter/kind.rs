//! The filter at the seam: its spec, its step in the plan file (after the
//! generation, before the tokenization, when the file has a `[filter]`
//! section or names it in `phases`), its summary.
use serde_json::{Map, Value};

use super::FilterSpec;
use todod_domain::{Error, Kind};
use crate::phase::kind::{Checked, PhaseKind, View};
use crate::phase::plan_step::{self, Derived, Flow, PlanFile, PlanStep};
use crate::phase::{Boundaries, Ended, RunContext};
use todod_proto::results::FilterResult;

pub struct Filter;

/// The kind, as tasks and the store name it.
pub const KIND: Kind = Kind::named(<Filter as PhaseKind>::NAME);

pub const FILTERED: &str = "completions.filtered.jsonl";
pub const FILTER_REJECTS: &str = "completions.filtered.rejects.jsonl";

impl PhaseKind for Filter {
    const NAME: &'static str = "filter";
    const SUMMARY: &'static str = "keeps the completions worth training on: exact and near \
                                   duplicates (MinHash), answers cut at the token limit, empty \
                                   answers, refusals, lengths out of bounds and benchmark \
                                   overlap go to a rejects file, each with its reason";
    const OUTPUT_FIELDS: &'static [&'static str] = super::spec::OUTPUT_FIELDS;
    const STEP: Option<PlanStep> = Some(PlanStep {
        section: "filter",
        by_default: false,
        needs: &["generation"],
        needs_model_dir: false,
        calls_server: false,
        takes: &[],
        derived_fields: &["input", "output", "rejects", "tokenizer"],
        describe: "Options of the filter phase, which runs between generation and tokenization \
                   when this section is given (or `phases` names it): exact_duplicates, \
                   near_duplicates ({threshold, shingle_words, permutations} or false), \
                   min_tokens and max_tokens (in model.dir's tokenizer), drop_length_finishes, \
                   drop_empty, refusal_patterns, decontaminate ({path, ngram}), threads. input, \
                   output, rejects and tokenizer are derived.",
        properties: plan_step::no_properties,
        check: plan_step::no_check,
        derive,
    });
    type Spec = FilterSpec;
    type Result = FilterResult;

    fn check(json: &str, bounds: &Boundaries, own: &[String]) -> Result<Checked<FilterSpec>, Error> {
        let (spec, json, claims) = FilterSpec::check(json, bounds, own)?;
        // The tokenizer loads now, so that a wrong directory is refused
        // here rather than when the task's turn comes.
        if let (Some(dir), true) = (
            &spec.tokenizer,
            spec.min_tokens.is_some() || spec.max_tokens.is_some(),
        ) {
            todod_format::tokenizer::load_dir(dir)
                .map_err(|e| Error::invalid("spec.tokenizer", e.to_string()))?;
        }
        Ok(Checked {
            spec,
            json,
            claims,
            requires: None,
            refers: None,
        })
    }

    fn parse(json: &str) -> Result<FilterSpec, Error> {
        FilterSpec::parse(json)
    }

    async fn run(context: &RunContext, spec: FilterSpec) -> Result<Ended, String> {
        super::run_inner(context, spec).await
    }

    fn view(r: &FilterResult) -> View {
        let mut line = format!("{} of {} records kept", r.records, r.records + r.removed);
        let reasons: Vec<String> = r
            .removed_by_reason
            .iter()
            .map(|(k, n)| format!("{n} {}", k.replace('_', " ")))
            .collect();
        if !reasons.is_empty() {
            line.push_str(&format!(" ({} left out)", reasons.join(", ")));
        }
        if r.rejected > 0 {
            line.push_str(&format!(", {} unreadable", r.rejected));
        }
        View {
            summary: line,
            ..View::default()
        }
    }
}

fn derive(p: &PlanFile, flow: &mut Flow) -> Derived {
    let (input, input_origin) = flow
        .completions
        .clone()
        .unwrap_or((Value::Null, "generation (its output)"));
    let mut spec = Map::new();
    spec.insert("input".into(), input);
    spec.insert("output".into(), p.out(FILTERED));
    spec.insert("rejects".into(), p.out(FILTER_REJECTS));
    let options = p.options("filter");
    let counts_tokens = options.contains_key("min_tokens") || options.contains_key("max_tokens");
    if counts_tokens {
        spec.insert("tokenizer".into(), p.model_dir());
    }
    flow.completions = Some((p.out(FILTERED), "filter (its output)"));
    Derived {
        content: "Filter the completions: duplicates, refusals, cut and empty answers".into(),
        spec,
        origins: vec![
            ("input", input_origin),
            ("output", "output_dir"),
            ("rejects", "output_dir"),
            ("tokenizer", "model.dir"),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_by_reason() {
        let r = FilterResult {
            records: 90,
            removed: 10,
            removed_by_reason: [("exact_duplicate".to_string(), 7), ("refusal".into(), 3)]
                .into_iter()
                .collect(),
            ..FilterResult::default()
        };
        assert_eq!(
            Filter::view(&r).summary,
            "90 of 100 records kept (7 exact duplicate, 3 refusal left out)"
        );
    }
}
