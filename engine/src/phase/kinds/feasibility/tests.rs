//! The order of a sweep's measurements: its levels, its budget, the
//! confirmation of its choice.
use super::stats::tests::level;
use super::*;

#[test]
fn a_sweep_cut_short_by_its_budget_still_confirms_its_choice() {
    let spec =
        FeasibilitySpec::parse(r#"{"max_sweep_share": 0.02, "min_sweep_seconds": 10}"#).unwrap();
    let planned = planned_levels(&spec);
    let mut sweep = Sweep::default();
    // Two levels of 8 s each: a third would pass the 10 s allowed.
    for c in [1, 2] {
        let mut l = level(c, 1.0, 100, 64);
        l.wall_seconds = 8.0;
        sweep.levels.push(l);
    }
    // Level 2 answers twice as many requests a second: the choice.
    assert_eq!(
        next_level(&spec, &mut sweep, &planned, 100),
        Some((2, Step::Confirm))
    );
    let why = sweep.cut_short.clone().unwrap();
    assert!(why.contains("budget") && why.contains("concurrency 4"), "{why}");
    sweep.confirmation = Some(level(2, 1.0, 100, 64));
    assert_eq!(next_level(&spec, &mut sweep, &planned, 100), None);
}

#[test]
fn the_confirmation_asks_the_prompts_after_the_last_one_asked() {
    let mut sweep = Sweep::default();
    assert_eq!(sweep.prompts_asked(), 0);
    sweep.levels.push(level(1, 1.0, 100, 40));
    sweep.levels.push(level(2, 1.0, 100, 70));
    assert_eq!(sweep.prompts_asked(), 70);
    let mut again = level(2, 1.0, 100, 50);
    again.first_prompt = 70;
    sweep.confirmation = Some(again);
    assert_eq!(sweep.prompts_asked(), 120);
}

#[test]
fn a_doubling_sweep_starts_at_min_concurrency_and_ends_at_the_cap() {
    let levels = |json: &str| planned_levels(&FeasibilitySpec::parse(json).unwrap());
    assert_eq!(levels(r#"{"max_concurrency": 16}"#), [1, 2, 4, 8, 16]);
    assert_eq!(
        levels(r#"{"min_concurrency": 4, "max_concurrency": 16}"#),
        [4, 8, 16]
    );
    assert_eq!(
        levels(r#"{"min_concurrency": 3, "max_concurrency": 16}"#),
        [3, 6, 12, 16]
    );
    assert_eq!(
        levels(r#"{"min_concurrency": 16, "max_concurrency": 16}"#),
        [16]
    );
}

#[test]
fn a_min_concurrency_above_the_cap_or_beside_given_levels_is_refused() {
    let refusal = |json: &str| FeasibilitySpec::parse(json).unwrap_err().to_string();
    let above = refusal(r#"{"min_concurrency": 32, "max_concurrency": 16}"#);
    assert!(
        above.contains("spec.min_concurrency") && above.contains("at most max_concurrency (16)"),
        "{above}"
    );
    let beside = refusal(r#"{"min_concurrency": 4, "concurrency": [8, 16]}"#);
    assert!(beside.contains("spec.min_concurrency"), "{beside}");
    let zero = refusal(r#"{"min_concurrency": 0}"#);
    assert!(zero.contains("min_concurrency"), "{zero}");
}
