use super::*;

const GOOD: &str = r#"
plan = "datagen"
output_dir = "/data/out"

[model]
name = "smollm2"
endpoints = ["http://127.0.0.1:8080/v1"]
dir = "/models/smollm2"

[prompts]
path = "/data/sharegpt.jsonl"
format = "sharegpt"

[sampling]
temperature = 0.7

[budget]
max_hours = 2.0

[generation]
max_tokens = 128
"#;

fn refusal(text: &str) -> SpecError {
    parse(text, None).expect_err("must be refused")
}

fn with(extra: &str) -> String {
    format!("{GOOD}\n{extra}")
}

#[test]
fn a_whole_file_gives_the_four_steps_chained() {
    let p = parse(GOOD, None).unwrap();
    let steps = derive(&p);
    let sections: Vec<_> = steps.iter().map(|s| s.section).collect();
    assert_eq!(
        sections,
        ["adaptation", "feasibility", "generation", "tokenization"]
    );
    assert!(steps[0].depends_on.is_empty());
    for pair in steps.windows(2) {
        assert_eq!(pair[1].depends_on, [pair[0].section]);
    }
    let (adapt, gen, tok) = (&steps[0].spec, &steps[2].spec, &steps[3].spec);
    // One step's output is the next one's input.
    assert_eq!(adapt["output"], gen["prompts"]);
    assert_eq!(gen["output"], tok["input"]);
    assert_eq!(gen["concurrency"], "auto");
    assert_eq!(gen["max_tokens"], 128);
    assert_eq!(gen["params"]["temperature"], 0.7);
    assert_eq!(steps[1].spec["budget"]["max_hours"], 2.0);
    assert_eq!(tok["mode"], "conversation");
    assert_eq!(adapt["input_format"], "sharegpt");
    assert!(adapt.get("sample").is_none());
    let p = parse(
        &GOOD.replace("format = \"sharegpt\"", "sample = 100\nseed = 9"),
        None,
    )
    .unwrap();
    assert_eq!(
        derive(&p)[0].spec["sample"],
        serde_json::json!({"count": 100, "seed": 9})
    );
}

#[test]
fn without_adaptation_the_generation_reads_the_prompt_set() {
    let text = GOOD.replace(
        "output_dir =",
        "phases = [\"generation\", \"tokenization\"]\noutput_dir =",
    );
    let p = parse(&text.replace("[budget]\nmax_hours = 2.0", ""), None).unwrap();
    let steps = derive(&p);
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0].spec["prompts"], "/data/sharegpt.jsonl");
    assert!(steps[0].spec.get("concurrency").is_none());
    assert_eq!(steps[1].depends_on, ["generation"]);
}

#[test]
fn a_filter_section_puts_the_filter_between_generation_and_tokenization() {
    let p = parse(
        &with("[filter]\nnear_duplicates = { threshold = 0.9 }"),
        None,
    )
    .unwrap();
    let steps = derive(&p);
    let sections: Vec<_> = steps.iter().map(|s| s.section).collect();
    assert_eq!(
        sections,
        [
            "adaptation",
            "feasibility",
            "generation",
            "filter",
            "tokenization"
        ]
    );
    let (gen, filter, tok) = (&steps[2].spec, &steps[3].spec, &steps[4].spec);
    assert_eq!(gen["output"], filter["input"]);
    assert_eq!(filter["output"], tok["input"]);
    assert_eq!(filter["near_duplicates"]["threshold"], 0.9);
    assert!(
        filter.get("tokenizer").is_none(),
        "no token bounds, no tokenizer"
    );
    assert_eq!(steps[3].depends_on, ["generation"]);
    assert_eq!(steps[4].depends_on, ["filter"]);
    assert_eq!(steps[4].file_path("spec.input"), "filter (its output)");
    // Token bounds count in the model's tokenizer.
    let p = parse(&with("[filter]\nmax_tokens = 512"), None).unwrap();
    assert_eq!(derive(&p)[3].spec["tokenizer"], "/models/smollm2");
    // Named in `phases`, it runs without a section of its own; left out of
    // them, its section is refused.
    let named = GOOD.replace(
        "output_dir =",
        "phases = [\"generation\", \"filter\"]\noutput_dir =",
    );
    let p = parse(&named.replace("[budget]\nmax_hours = 2.0", ""), None).unwrap();
    let sections: Vec<_> = derive(&p).iter().map(|s| s.section).collect();
    assert_eq!(sections, ["generation", "filter"]);
    let e = refusal(&with("[filter]\ninput = \"/x\""));
    assert_eq!(e.path, "filter.input");
    let unnamed = GOOD.replace("output_dir =", "phases = [\"generation\"]\noutput_dir =");
    let e = refusal(&format!(
        "{}\n[filter]\nexact_duplicates = false",
        unnamed.replace("[budget]\nmax_hours = 2.0", "")
    ));
    assert_eq!(e.path, "filter", "{e}");
    // Without it, the tokenization reads the generation's output.
    let steps = derive(&parse(GOOD, None).unwrap());
    assert_eq!(steps.len(), 4);
    assert_eq!(steps[2].spec["output"], steps[3].spec["input"]);
}

#[test]
fn rendered_prompts_go_to_the_completions_api() {
    let p = parse(&with("[adaptation]\noutput_format = \"rendered\""), None).unwrap();
    let steps = derive(&p);
    assert_eq!(steps[2].spec["api"], "completions");
    assert_eq!(steps[3].spec["mode"], "completion");
}

#[test]
fn every_refusal_names_its_path() {
    let cases: Vec<(String, &str)> = vec![
        (
            GOOD.replace("max_tokens = 128", "max_tokens = 0"),
            "generation.max_tokens",
        ),
        (
            GOOD.replace("max_tokens = 128", "max_tokens = \"many\""),
            "generation.max_tokens",
        ),
        (GOOD.replace("output_dir = \"/data/out\"", ""), "output_dir"),
        (GOOD.replace("\"/data/out\"", "\"out\""), "output_dir"),
        (GOOD.replace("name = \"smollm2\"", ""), "model.name"),
        (
            GOOD.replace("endpoints = [\"http://127.0.0.1:8080/v1\"]", ""),
            "model.endpoints",
        ),
        (GOOD.replace("dir = \"/models/smollm2\"", ""), "model.dir"),
        (
            GOOD.replace("path = \"/data/sharegpt.jsonl\"", ""),
            "prompts.path",
        ),
        (
            GOOD.replace("plan = \"datagen\"", "plan = \"no spaces\""),
            "plan",
        ),
        (with("[tokenization]\ninput = \"/x\""), "tokenization.input"),
        (with("[adaptation]\noutput = \"/x\""), "adaptation.output"),
        (
            GOOD.replace("temperature = 0.7", "max_tokens = 5"),
            "sampling.max_tokens",
        ),
        (
            GOOD.replace("temperature = 0.7", "model = \"x\""),
            "sampling.model",
        ),
        (
            GOOD.replace("output_dir =", "phases = [\"feasibility\"]\noutput_dir ="),
            "phases",
        ),
        (
            GOOD.replace(
                "output_dir =",
                "phases = [\"generation\", \"baking\"]\noutput_dir =",
            ),
            "phases[1]",
        ),
        (
            GOOD.replace("output_dir =", "phases = [\"generation\"]\noutput_dir ="),
            "budget",
        ),
    ];
    for (text, path) in cases {
        let e = refusal(&text);
        assert_eq!(e.path, path, "{e}\n--- in ---\n{text}");
        assert!(!e.reason.is_empty());
    }
}

#[test]
fn unknown_keys_and_bad_toml_say_where() {
    let e = refusal(&GOOD.replace("[model]", "[model]\nnmae = \"x\""));
    assert_eq!(e.path, "file");
    assert!(
        e.reason.contains("nmae") && e.reason.contains("line"),
        "{e}"
    );
    let e = refusal("output_dir = ");
    assert_eq!(e.path, "file");
}

#[test]
fn a_refused_spec_field_maps_back_to_the_file() {
    let p = parse(GOOD, None).unwrap();
    let steps = derive(&p);
    let gen = &steps[2];
    assert_eq!(gen.file_path("spec.endpoints[0]"), "model.endpoints");
    assert_eq!(gen.file_path("spec.params.top_p"), "sampling.top_p");
    assert_eq!(gen.file_path("spec.max_tokens"), "generation.max_tokens");
    assert_eq!(steps[3].file_path("spec.tokenizer"), "model.dir");
    assert_eq!(
        steps[1].file_path("spec.budget.max_hours"),
        "budget.max_hours"
    );
    // A field the section sets itself is blamed on the section.
    let p = parse(&with("[adaptation]\ninput_format = \"alpaca\""), None).unwrap();
    assert_eq!(
        derive(&p)[0].file_path("spec.input_format"),
        "adaptation.input_format"
    );
}

#[test]
fn the_same_file_derives_the_same_specs() {
    let a = derive(&parse(GOOD, None).unwrap());
    let b = derive(&parse(GOOD, None).unwrap());
    assert_eq!(a, b);
}

#[test]
fn relative_paths_are_taken_from_the_files_directory() {
    let text = GOOD
        .replace("\"/data/out\"", "\"out\"")
        .replace("\"/data/sharegpt.jsonl\"", "\"../prompts/sharegpt.jsonl\"");
    let p = parse(&text, Some(Path::new("/home/me/plans"))).unwrap();
    assert_eq!(p.output_dir, Path::new("/home/me/plans/out"));
    assert_eq!(
        p.prompts,
        Path::new("/home/me/plans/../prompts/sharegpt.jsonl")
    );
}

#[test]
fn the_published_schema_is_the_one_the_table_makes() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/pipeline.schema.json");
    let made = serde_json::to_string_pretty(&schema::schema()).unwrap() + "\n";
    if std::env::var_os("TODOD_BLESS").is_some() {
        std::fs::write(path, &made).unwrap();
    }
    let published = std::fs::read_to_string(path).unwrap();
    assert!(
        published == made,
        "docs/pipeline.schema.json is not the schema the phase table makes; \
         run `TODOD_BLESS=1 cargo test -p todod-engine --lib plan_file` to write it"
    );
    let schema: Value = serde_json::from_str(&published).unwrap();
    // Every step's section, in `phases` and as a section refusing what the
    // file derives.
    let names: Vec<&str> = schema["properties"]["phases"]["items"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for (_, step) in crate::phase::kinds::steps() {
        assert!(names.contains(&step.section), "{}", step.section);
        let refused: Vec<&str> = schema["properties"][step.section]["not"]["anyOf"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| r["required"][0].as_str().unwrap())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(refused, step.derived_fields, "{}", step.section);
    }
    // Every example in the repository parses.
    let example = include_str!("../../../examples/datagen.toml");
    parse(example, Some(Path::new("/x/examples"))).unwrap();
}

#[test]
fn a_sharded_generation_is_asked_for_in_its_section_and_checked_there() {
    let p = parse(
        &GOOD.replace("max_tokens = 128", "max_tokens = 128\nshards = 3"),
        None,
    )
    .unwrap();
    let steps = derive(&p);
    let gen = &steps[2];
    assert_eq!(gen.spec["shards"], 3);
    // The generation kind accepts the spec the file made.
    let spec = crate::phase::kinds::generation::GenerationSpec::parse(
        &serde_json::Value::Object(gen.spec.clone()).to_string(),
    )
    .unwrap();
    assert_eq!(spec.shards, 3);
    assert_eq!(gen.file_path("spec.shards"), "generation.shards");
}

#[test]
fn adaptation_and_tokenization_shard_from_their_sections_too() {
    let text = format!("{GOOD}\n[adaptation]\nshards = 2\n\n[tokenization]\nshards = 4\n");
    let p = parse(&text, None).unwrap();
    let steps = derive(&p);
    let json = |i: usize| serde_json::Value::Object(steps[i].spec.clone()).to_string();
    let adaptation = crate::phase::kinds::adaptation::AdaptationSpec::parse(&json(0)).unwrap();
    assert_eq!(adaptation.shards, 2);
    let tokenization =
        crate::phase::kinds::tokenization::TokenizationSpec::parse(&json(3)).unwrap();
    assert_eq!(tokenization.shards, 4);
    // Unsharded unless asked.
    let steps = derive(&parse(GOOD, None).unwrap());
    assert!(steps[0].spec.get("shards").is_none());
}

#[test]
fn a_server_section_goes_to_the_generation_that_names_it() {
    let text = GOOD.replace(
        "endpoints = [\"http://127.0.0.1:8080/v1\"]",
        "endpoints = [\"server:local\"]",
    ) + "\n[servers.local]\ncommand = [\"../scripts/serve\", \"--port\", \"{port}\"]\nmax_restarts = 2\n";
    let p = parse(&text, Some(Path::new("/home/me/plans"))).unwrap();
    let steps = derive(&p);
    let gen = steps.iter().find(|s| s.section == "generation").unwrap();
    let server = &gen.spec["servers"]["local"];
    assert_eq!(server["command"][0], "/home/me/plans/../scripts/serve");
    assert_eq!(server["max_restarts"], 2);
    assert_eq!(gen.spec["endpoints"][0], "server:local");
    // A refusal of the server's spec is blamed on its section.
    assert_eq!(
        gen.file_path("spec.servers.local.command[0]"),
        "servers.local.command[0]"
    );

    // An endpoint naming no server, a server no endpoint names, a server
    // without {port}: each refused where it is.
    let unnamed = text.replace("\"server:local\"", "\"server:other\"");
    let base = Some(Path::new("/home/me/plans"));
    let e = parse(&unnamed, base).unwrap_err();
    assert_eq!(e.path, "model.endpoints[0]", "{e}");
    let unused = GOOD.to_string() + "\n[servers.local]\ncommand = [\"/bin/serve\", \"{port}\"]\n";
    assert_eq!(refusal(&unused).path, "servers.local");
    let no_port = text.replace(", \"--port\", \"{port}\"", "");
    let e = parse(&no_port, base).unwrap_err();
    assert_eq!(e.path, "servers.local.command", "{e}");
    assert!(e.reason.contains("{port}"), "{e}");
}
