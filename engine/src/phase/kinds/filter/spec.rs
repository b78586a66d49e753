//! The spec of a filter task, checked on arrival: which completions to keep
//! and by which rules the others go to the rejects file.
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::minhash::Params;
use todod_domain::{Claim, Error};
use crate::phase::spec::{self as check, Boundaries};

/// Spec fields whose change would change what a filter writes.
pub const OUTPUT_FIELDS: &[&str] = &[
    "input",
    "output",
    "rejects",
    "exact_duplicates",
    "near_duplicates",
    "tokenizer",
    "min_tokens",
    "max_tokens",
    "drop_length_finishes",
    "drop_empty",
    "refusal_patterns",
    "decontaminate",
];

/// Answers that open like this are refusals, unless the spec says otherwise
/// (case-insensitive, at the start of the answer; an apostrophe may be
/// straight or typographic, as models write both). The unit test
/// `each_default_refusal_pattern_holds_its_table` holds each to sentences
/// it must and must not match.
pub const REFUSALS: &[&str] = &[
    r"(?i)^\s*(i['’]m|i am) (sorry|afraid),? (but )?(i|as an ai)",
    r"(?i)^\s*i apologi[sz]e,? but",
    r"(?i)^\s*as an ai( language model)?,? i",
    r"(?i)^\s*(i (cannot|can['’]t|am unable to|am not able to|won['’]t|will not)|i['’]m (unable|not able) to) (help|assist|provide|comply|do that|fulfil)",
];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNear {
    #[serde(default)]
    threshold: Option<f64>,
    #[serde(default)]
    shingle_words: Option<i64>,
    #[serde(default)]
    permutations: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDecontaminate {
    path: PathBuf,
    #[serde(default)]
    ngram: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    input: PathBuf,
    output: PathBuf,
    #[serde(default)]
    rejects: Option<PathBuf>,
    #[serde(default)]
    exact_duplicates: Option<bool>,
    /// `false` turns it off; an object sets it.
    #[serde(default)]
    near_duplicates: Option<Value>,
    #[serde(default)]
    tokenizer: Option<PathBuf>,
    #[serde(default)]
    min_tokens: Option<i64>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    drop_length_finishes: Option<bool>,
    #[serde(default)]
    drop_empty: Option<bool>,
    #[serde(default)]
    refusal_patterns: Option<Vec<String>>,
    #[serde(default)]
    decontaminate: Option<RawDecontaminate>,
    #[serde(default)]
    threads: Option<i64>,
    #[serde(default)]
    shards: Option<i64>,
    #[serde(default)]
    overwrite: Option<bool>,
    // Read from the stored JSON by `kinds::auto_start`; accepted here.
    #[allow(dead_code)]
    #[serde(default)]
    auto_start: Option<bool>,
    #[serde(default)]
    max_rejected_share: Option<f64>,
}

/// Benchmark items whose word n-grams no kept record may share.
#[derive(Debug, Clone, PartialEq)]
pub struct Decontaminate {
    pub path: PathBuf,
    pub ngram: usize,
}

/// A checked filter spec.
#[derive(Debug, Clone)]
pub struct FilterSpec {
    pub input: PathBuf,
    pub output: PathBuf,
    pub rejects: PathBuf,
    pub exact_duplicates: bool,
    pub near_duplicates: Option<Params>,
    pub tokenizer: Option<PathBuf>,
    pub min_tokens: Option<usize>,
    pub max_tokens: Option<usize>,
    pub drop_length_finishes: bool,
    pub drop_empty: bool,
    pub refusal_patterns: Vec<String>,
    pub decontaminate: Option<Decontaminate>,
    pub threads: usize,
    pub overwrite: bool,
    /// The share of unreadable lines over which the pass fails.
    pub max_rejected_share: f64,
}

/// `x.jsonl` → `x.rejects.jsonl`.
pub fn rejects_beside(output: &Path) -> PathBuf {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".jsonl").unwrap_or(&name);
    output.with_file_name(format!("{stem}.rejects.jsonl"))
}

/// The near-duplicate threshold a spec that names none gets: from the
/// table of words changed against what each threshold catches (README,
/// the filter's section; `minhash::tests` prints it), the lowest at which
/// every answer of 60 words or more with one word changed is caught, and
/// two changed in 200; 0.8 missed two changed words in 60 nine times in
/// ten. Lower thresholds catch more edits (0.6: two in 60, five in 200)
/// and begin to reach answers that share most of a template. A pass
/// resumed after an upgrade keeps the threshold it started with.
pub const DEFAULT_THRESHOLD: f64 = 0.7;

fn near(raw: Option<Value>) -> Result<Option<Params>, Error> {
    let given = match raw {
        None | Some(Value::Bool(true)) => RawNear {
            threshold: None,
            shingle_words: None,
            permutations: None,
        },
        Some(Value::Bool(false)) | Some(Value::Null) => return Ok(None),
        Some(value @ Value::Object(_)) => serde_json::from_value(value).map_err(|e| {
            Error::invalid(
                "spec.near_duplicates",
                format!("{e}; give {{threshold, shingle_words, permutations}} or false"),
            )
        })?,
        Some(_) => {
            return Err(Error::invalid(
                "spec.near_duplicates",
                "give {threshold, shingle_words, permutations} or false",
            ))
        }
    };
    let threshold = given.threshold.unwrap_or(DEFAULT_THRESHOLD);
    if !(threshold > 0.0 && threshold <= 1.0) {
        return Err(Error::invalid(
            "spec.near_duplicates.threshold",
            "must be a similarity above 0 and at most 1",
        ));
    }
    let shingle_words =
        check::int_in("near_duplicates.shingle_words", given.shingle_words.unwrap_or(5), 1..=64)?
            as usize;
    let permutations =
        check::int_in("near_duplicates.permutations", given.permutations.unwrap_or(128), 16..=1024)?
            as usize;
    if !permutations.is_power_of_two() {
        return Err(Error::invalid(
            "spec.near_duplicates.permutations",
            "must be a power of two (16 to 1024), so that it splits into bands",
        ));
    }
    Ok(Some(Params {
        threshold,
        shingle_words,
        permutations,
        bands: Params::bands_for(threshold, permutations),
    }))
}

fn typed(raw: Raw) -> Result<FilterSpec, Error> {
    let tokens = |name: &str, n: Option<i64>| -> Result<Option<usize>, Error> {
        n.map(|n| check::int_in(name, n, 0..=100_000_000).map(|n| n as usize))
            .transpose()
    };
    let min_tokens = tokens("min_tokens", raw.min_tokens)?;
    let max_tokens = tokens("max_tokens", raw.max_tokens)?;
    if (min_tokens.is_some() || max_tokens.is_some()) && raw.tokenizer.is_none() {
        return Err(Error::invalid(
            "spec.tokenizer",
            "is required with min_tokens or max_tokens: lengths are counted in the target \
             model's tokens",
        ));
    }
    if let (Some(lo), Some(hi)) = (min_tokens, max_tokens) {
        if lo > hi {
            return Err(Error::invalid(
                "spec.min_tokens",
                format!("{lo} is over max_tokens {hi}"),
            ));
        }
    }
    let refusal_patterns = raw
        .refusal_patterns
        .unwrap_or_else(|| REFUSALS.iter().map(|p| p.to_string()).collect());
    for (i, pattern) in refusal_patterns.iter().enumerate() {
        fancy_regex::Regex::new(pattern).map_err(|e| {
            Error::invalid(format!("spec.refusal_patterns[{i}]"), format!("not a pattern: {e}"))
        })?;
    }
    let decontaminate = raw
        .decontaminate
        .map(|d| -> Result<Decontaminate, Error> {
            Ok(Decontaminate {
                path: d.path,
                ngram: check::int_in("decontaminate.ngram", d.ngram.unwrap_or(13), 3..=64)?
                    as usize,
            })
        })
        .transpose()?;
    let threads = match raw.threads {
        Some(n) => check::int_in("threads", n, 1..=256)? as usize,
        None => std::thread::available_parallelism().map_or(2, |n| n.get()),
    };
    if check::shards(raw.shards)? > 1 {
        return Err(Error::invalid(
            "spec.shards",
            "a filter is not split into shards: whether an answer duplicates another (exactly \
             or nearly) is decided against every answer kept before it, in the whole corpus",
        ));
    }
    Ok(FilterSpec {
        rejects: raw.rejects.unwrap_or_else(|| rejects_beside(&raw.output)),
        input: raw.input,
        output: raw.output,
        exact_duplicates: raw.exact_duplicates.unwrap_or(true),
        near_duplicates: near(raw.near_duplicates)?,
        tokenizer: raw.tokenizer,
        min_tokens,
        max_tokens,
        drop_length_finishes: raw.drop_length_finishes.unwrap_or(true),
        drop_empty: raw.drop_empty.unwrap_or(true),
        refusal_patterns,
        decontaminate,
        threads,
        overwrite: raw.overwrite.unwrap_or(false),
        max_rejected_share: check::share(
            "max_rejected_share",
            raw.max_rejected_share.unwrap_or(0.01),
        )?,
    })
}

impl FilterSpec {
    /// Parses a stored spec (checked at creation).
    pub fn parse(json: &str) -> Result<FilterSpec, Error> {
        typed(check::parse(json)?)
    }

    /// Checks a spec a client sent; returns it with canonical paths, the
    /// stored JSON and the claims. `own` are paths the task already claims.
    pub fn check(
        json: &str,
        bounds: &Boundaries,
        own: &[String],
    ) -> Result<(FilterSpec, String, Vec<Claim>), Error> {
        let mut spec = typed(check::parse(json)?)?;
        spec.input = check::input_file("input", &spec.input, bounds)?;
        if let Some(dir) = &spec.tokenizer {
            spec.tokenizer = Some(check::input_dir("tokenizer", dir, bounds)?);
        }
        if let Some(d) = &mut spec.decontaminate {
            d.path = check::input_file("decontaminate.path", &d.path, bounds)?;
        }
        let overwrite = spec.overwrite;
        let claims = check::claim_outputs(
            &mut [("output", &mut spec.output), ("rejects", &mut spec.rejects)],
            overwrite,
            own,
            bounds,
        )?;
        let mut inputs = vec![("spec.input".to_string(), spec.input.clone())];
        if let Some(d) = &spec.decontaminate {
            inputs.push(("spec.decontaminate.path".into(), d.path.clone()));
        }
        check::distinct(&claims, &inputs)?;
        let mut value: Value = serde_json::from_str(json).expect("parsed above");
        value["input"] = Value::String(spec.input.display().to_string());
        value["output"] = Value::String(spec.output.display().to_string());
        value["rejects"] = Value::String(spec.rejects.display().to_string());
        if let Some(dir) = &spec.tokenizer {
            value["tokenizer"] = Value::String(dir.display().to_string());
        }
        if let Some(d) = &spec.decontaminate {
            value["decontaminate"]["path"] = Value::String(d.path.display().to_string());
        }
        Ok((spec, value.to_string(), claims))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(extra: Value) -> Result<FilterSpec, Error> {
        let mut v = json!({"input": "/in.jsonl", "output": "/out/kept.jsonl"});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        FilterSpec::parse(&v.to_string())
    }

    #[test]
    fn defaults_keep_the_common_rules_on() {
        let s = spec(json!({})).unwrap();
        assert_eq!(s.rejects, Path::new("/out/kept.rejects.jsonl"));
        assert!(s.exact_duplicates && s.drop_length_finishes && s.drop_empty);
        let near = s.near_duplicates.unwrap();
        assert_eq!((near.threshold, near.shingle_words, near.permutations), (DEFAULT_THRESHOLD, 5, 128));
        assert_eq!(s.refusal_patterns.len(), REFUSALS.len());
        assert!(spec(json!({"near_duplicates": false})).unwrap().near_duplicates.is_none());
    }

    /// Each default pattern against sentences it must match and sentences
    /// it must not: the first pattern that matches, or none.
    #[test]
    fn each_default_refusal_pattern_holds_its_table() {
        let patterns: Vec<fancy_regex::Regex> = REFUSALS
            .iter()
            .map(|p| fancy_regex::Regex::new(p).unwrap())
            .collect();
        let table: &[(&str, Option<usize>)] = &[
            // 0: sorry or afraid, then the refusal.
            ("I'm sorry, but I can't help with that.", Some(0)),
            ("I’m sorry, but as an AI I cannot browse.", Some(0)),
            ("I am afraid I cannot do that.", Some(0)),
            ("  i'm SORRY but i won't", Some(0)),
            // 1: an apology, then "but".
            ("I apologize, but I cannot provide that.", Some(1)),
            ("I apologise but that is not something I do.", Some(1)),
            // 2: as an AI.
            ("As an AI language model, I cannot have opinions.", Some(2)),
            ("As an AI, I don't browse the web.", Some(2)),
            // 3: cannot, unable, won't, then what.
            ("I can't help with that.", Some(3)),
            ("I cannot assist with this request.", Some(3)),
            ("I'm unable to provide that information.", Some(3)),
            ("I’m unable to help with this.", Some(3)),
            ("I'm not able to comply with that.", Some(3)),
            ("I am unable to fulfil this request.", Some(3)),
            ("I am not able to do that.", Some(3)),
            ("I won't provide instructions for that.", Some(3)),
            ("I won’t help with that.", Some(3)),
            ("I will not assist with that.", Some(3)),
            ("\n  I CANNOT HELP", Some(3)),
            // Answers, not refusals.
            ("I'm sorry to hear your build failed. Here is the fix.", None),
            ("I can help with that: run cargo test.", None),
            ("I can't wait to help! Here is the plan.", None),
            ("I'm able to provide that: 42.", None),
            ("As an aside, I think the test is flaky.", None),
            ("The model said: I'm unable to help.", None),
            ("Unable to reproduce: I can't help noticing the seed.", None),
            ("I apologized to my team, then fixed it.", None),
        ];
        for (sentence, want) in table {
            let got = patterns.iter().position(|p| p.is_match(sentence).unwrap());
            assert_eq!(got, *want, "{sentence:?}");
        }
        for (i, _) in REFUSALS.iter().enumerate() {
            assert!(
                table.iter().any(|(_, want)| *want == Some(i)),
                "pattern {i} has no sentence of its own in the table"
            );
        }
    }

    #[test]
    fn every_refusal_names_its_field() {
        for (extra, field) in [
            (json!({"min_tokens": 5}), "spec.tokenizer"),
            (json!({"tokenizer": "/m", "min_tokens": 9, "max_tokens": 5}), "spec.min_tokens"),
            (json!({"near_duplicates": {"threshold": 1.5}}), "spec.near_duplicates.threshold"),
            (json!({"near_duplicates": {"permutations": 100}}), "spec.near_duplicates.permutations"),
            (json!({"near_duplicates": "yes"}), "spec.near_duplicates"),
            (json!({"refusal_patterns": ["ok", "(unclosed"]}), "spec.refusal_patterns[1]"),
            (json!({"decontaminate": {"path": "/b", "ngram": 1}}), "spec.decontaminate.ngram"),
            (json!({"colour": "red"}), "spec.colour"),
        ] {
            let e = spec(extra.clone()).unwrap_err().to_string();
            assert!(e.starts_with(field), "{extra}: {e}");
        }
    }
}
