use super::*;
use serde_json::json;

fn work(spec: serde_json::Value) -> Work {
    let mut v = json!({"input": "/in.jsonl", "output": "/out.jsonl"});
    for (k, x) in spec.as_object().unwrap() {
        v[k] = x.clone();
    }
    let spec = FilterSpec::parse(&v.to_string()).unwrap();
    prepare(&spec).unwrap().0
}

fn record(id: &str, content: &str) -> Vec<u8> {
    json!({"id": id, "messages": [{"role": "user", "content": "Tell me about rivers."}],
           "content": content, "finish_reason": "stop"})
    .to_string()
    .into_bytes()
}

/// Runs `lines` through the checks in order, as the pipeline's writer does:
/// the ids kept, and (id, reason) of the others.
fn decide(work: &Work, lines: &[Vec<u8>]) -> (Vec<String>, Vec<(String, &'static str)>) {
    let mut seen = Seen::new(&work.spec);
    let (mut kept, mut left) = (Vec::new(), Vec::new());
    for (i, line) in lines.iter().enumerate() {
        let c = work.check(parse(line, i as u64 + 1).unwrap());
        match c.left_out.clone().or_else(|| seen.repeats(&work.spec, &c)) {
            None => {
                seen.keep(&c);
                kept.push(c.id);
            }
            Some((reason, _)) => left.push((c.id, reason.as_str())),
        }
    }
    (kept, left)
}

const LONG: &str = "Rivers carry water from high ground to the sea, carving valleys as they go, \
    depositing silt on their floodplains and deltas, and shaping the land and the lives of the \
    people who farm beside them and fish in them for many generations.";

#[test]
fn duplicates_go_and_distinct_answers_stay() {
    let w = work(json!({}));
    let lines = vec![
        record("a", LONG),
        // The same text, other case and punctuation.
        record("b", &LONG.to_uppercase().replace(',', ";")),
        // Its last words changed: a near duplicate.
        record("c", &LONG.replace("many generations", "many, many years")),
        record("d", "Deserts are dry: less than 250 mm of rain a year falls on them, and what \
                     lives there keeps water in leaves, roots and burrows through the heat."),
        record("e", "Glaciers move slowly downhill under their own weight, grinding rock into \
                     flour and leaving moraines where they stop and melt back in warmer years."),
    ];
    let (kept, left) = decide(&w, &lines);
    assert_eq!(kept, ["a", "d", "e"]);
    assert_eq!(
        left,
        [("b".to_string(), "exact_duplicate"), ("c".into(), "near_duplicate")]
    );
    // Without the duplicate checks, all five stay.
    let off = work(json!({"exact_duplicates": false, "near_duplicates": false}));
    assert_eq!(decide(&off, &lines).0.len(), 5);
}

#[test]
fn many_distinct_answers_are_all_kept() {
    let w = work(json!({}));
    let lines: Vec<Vec<u8>> = (0..300)
        .map(|i| {
            let topic = ["rivers", "deserts", "glaciers", "forests", "oceans"][i % 5];
            record(
                &format!("r{i}"),
                &format!(
                    "Answer {i}: {topic} matter for reason {} and for reason {}, which the \
                     survey numbered {} found in region {} during season {}.",
                    i * 7 % 101,
                    i * 13 % 97,
                    i,
                    i * 3 % 89,
                    i % 11
                ),
            )
        })
        .collect();
    let (kept, left) = decide(&w, &lines);
    assert_eq!(kept.len(), 300, "{left:?}");
}

#[test]
fn each_rule_says_why() {
    let w = work(json!({}));
    let cut = json!({"id": "cut", "prompt": "p", "content": LONG, "finish_reason": "length"});
    let lines = vec![
        record("empty", "   "),
        record("sorry", "I'm sorry, but I can't help with that request."),
        record("apology", "I apologize, but I cannot provide that."),
        cut.to_string().into_bytes(),
        record("fine", "I'm glad you asked: rivers are long."),
    ];
    let (kept, left) = decide(&w, &lines);
    assert_eq!(kept, ["fine"]);
    let reasons: Vec<&str> = left.iter().map(|(_, r)| *r).collect();
    assert_eq!(reasons, ["empty", "refusal", "refusal", "length_finish"]);
    // The rules can be turned off.
    let lenient = work(json!({"drop_empty": false, "drop_length_finishes": false,
                              "refusal_patterns": []}));
    assert_eq!(decide(&lenient, &lines).0.len(), 5);
}

#[test]
fn answers_outside_the_token_bounds_are_too_short_or_too_long_in_the_models_tokens() {
    let dir = todod_fixtures::fixture("smollm2");
    let w = work(json!({"tokenizer": dir, "min_tokens": 5, "max_tokens": 40}));
    let tokens = |text: &str| w.tokenizer.as_ref().unwrap().encode(text, false).unwrap().ids.len();
    let short = "Rivers flow.";
    assert!(tokens(short) < 5, "{}", tokens(short));
    let middle = "Rivers carry water from the hills down to the sea.";
    assert!((5..=40).contains(&tokens(middle)), "{}", tokens(middle));
    assert!(tokens(LONG) > 40, "{}", tokens(LONG));
    let lines = vec![record("short", short), record("middle", middle), record("long", LONG)];
    let (kept, left) = decide(&w, &lines);
    assert_eq!(kept, ["middle"]);
    assert_eq!(
        left,
        [("short".to_string(), "too_short"), ("long".into(), "too_long")]
    );
    // The reject says how many tokens the answer had.
    let c = w.check(parse(&lines[2], 3).unwrap());
    assert_eq!(c.left_out.unwrap().1["tokens"], tokens(LONG));
    // Without bounds, the same answers all stay.
    let unbounded = work(json!({"tokenizer": dir}));
    assert_eq!(decide(&unbounded, &lines).0.len(), 3);
}

#[test]
fn a_benchmark_item_in_a_record_is_contamination() {
    let dir = tempfile::tempdir().unwrap();
    let bench = dir.path().join("bench.jsonl");
    std::fs::write(
        &bench,
        "{\"question\": \"What is the capital city of the small landlocked country of Liechtenstein in Europe?\", \"answer\": \"Vaduz\"}\n",
    )
    .unwrap();
    let w = work(json!({"decontaminate": {"path": bench, "ngram": 8}}));
    let leaked = json!({"id": "x", "messages": [{"role": "user",
        "content": "Quiz: what is the capital city of the small landlocked country of Liechtenstein in Europe?"}],
        "content": "Vaduz.", "finish_reason": "stop"});
    let lines = vec![leaked.to_string().into_bytes(), record("y", LONG)];
    let (kept, left) = decide(&w, &lines);
    assert_eq!(kept, ["y"]);
    assert_eq!(left, [("x".to_string(), "contaminated")]);
}

#[test]
fn answers_are_read_from_every_shape_and_bad_lines_say_why() {
    let tool = json!({"id": 7, "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "search", "arguments": "{\"q\": \"rivers\"}"}}]});
    let r = parse(tool.to_string().as_bytes(), 1).unwrap();
    assert_eq!(r.id, "7");
    assert!(r.answer.contains("search"), "{}", r.answer);
    let chat = json!({"messages": [{"role": "user", "content": "q"},
                                   {"role": "assistant", "content": "the answer"}]});
    let r = parse(chat.to_string().as_bytes(), 3).unwrap();
    assert_eq!((r.id.as_str(), r.answer.as_str(), r.prompt.as_str()), ("line-3", "the answer", "q\n"));
    for (bad, why) in [
        (&b"\xff"[..], "UTF-8"),
        (b"  ", "blank"),
        (b"[1]", "not a JSON object"),
        (b"{\"id\": \"x\"}", "no answer"),
        (b"{\"content\": 5}", "content: expected a string"),
    ] {
        let e = parse(bad, 1).err().unwrap();
        assert!(e.contains(why), "{e}");
    }
}

/// A pass started by a todod whose defaults differ (an upgrade between a
/// kill and the resume) goes on with the settings it started with, not
/// this version's; a pass an earlier todod started, whose state holds
/// none, takes the spec as given.
#[test]
fn a_resumed_pass_keeps_the_defaults_it_started_with() {
    let spec = |json: &str| {
        let mut v: serde_json::Value = serde_json::from_str(json).unwrap();
        v["input"] = json!("/in.jsonl");
        v["output"] = json!("/out.jsonl");
        FilterSpec::parse(&v.to_string()).unwrap()
    };
    let then = spec(r#"{"near_duplicates": {"threshold": 0.9}, "refusal_patterns": ["^no$"]}"#);
    let (_, started) = prepare(&then).unwrap();
    // Through the state's JSON, as a resume reads it.
    let started: Setup = serde_json::from_value(json!(started)).unwrap();
    let now = as_started(spec("{}"), &started);
    assert_eq!(now.near_duplicates.unwrap().threshold, 0.9);
    assert_eq!(now.refusal_patterns, ["^no$"]);
    // What the pass decides is what it started deciding.
    assert_eq!(Defaults::of(&now), Defaults::of(&then));

    let earlier: Setup = serde_json::from_value(json!({"tokenizer": null})).unwrap();
    assert_eq!(earlier.defaults, None);
    let given = spec(r#"{"near_duplicates": {"threshold": 0.7}}"#);
    assert_eq!(
        Defaults::of(&as_started(given.clone(), &earlier)),
        Defaults::of(&given)
    );
}
