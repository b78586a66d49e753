//! Golden tests against `fixtures/{smollm2,kimi_style}`: ids from
//! llama.cpp and from Python tiktoken run the way Kimi's code runs it. These
//! tests fail, loudly, when the fixtures are not found.

use std::path::{Path, PathBuf};

use super::*;

/// The repository's `fixtures/<name>`.
fn fixture_dir(name: &str) -> PathBuf {
    todod_fixtures::fixture(name)
}

struct Case {
    text: String,
    ids: Vec<u32>,
}

fn cases(dir: &Path) -> Vec<Case> {
    let path = dir.join("tokenize_cases.jsonl");
    let content = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("FIXTURES MISSING: {}: {e}", path.display()));
    let cases: Vec<Case> = content
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("fixture line is JSON");
            Case {
                text: v["text"].as_str().expect("text").to_string(),
                ids: serde_json::from_value(v["ids"].clone()).expect("ids"),
            }
        })
        .collect();
    assert!(!cases.is_empty(), "{} has no cases", path.display());
    cases
}

/// Encodes every case with and without offsets; panics listing mismatches.
fn assert_cases_match(loaded: &Loaded, cases: &[Case], label: &str) {
    let tk = &loaded.tokenizer;
    let mut bad = Vec::new();
    for (n, case) in cases.iter().enumerate() {
        let fast = tk.encode(&case.text, false).expect("encode");
        let full = tk.encode(&case.text, true).expect("encode with offsets");
        assert!(fast.offsets.is_empty());
        assert_eq!(
            full.ids, fast.ids,
            "{label} case {n}: offsets changed the ids"
        );
        assert_eq!(full.offsets.len(), full.ids.len(), "{label} case {n}");
        if fast.ids != case.ids {
            let first = fast.ids.iter().zip(&case.ids).position(|(a, b)| a != b);
            bad.push(format!(
                "case {n} ({} chars, starts {:?}): got {} ids, want {}, first difference at {first:?}",
                case.text.chars().count(),
                case.text.chars().take(40).collect::<String>(),
                fast.ids.len(),
                case.ids.len()
            ));
        }
    }
    eprintln!(
        "{label}: {}/{} cases match",
        cases.len() - bad.len(),
        cases.len()
    );
    assert!(
        bad.is_empty(),
        "{label}: {} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn smollm2_tokenizer_json_matches_llama_cpp() {
    let dir = fixture_dir("smollm2");
    let loaded = load_dir(&dir).expect("load smollm2");
    assert_eq!(loaded.tokenizer.kind(), "tokenizer.json");
    assert_cases_match(&loaded, &cases(&dir), "smollm2");
}

#[test]
fn kimi_style_tiktoken_matches_python_tiktoken() {
    let dir = fixture_dir("kimi_style");
    let loaded = load_dir(&dir).expect("load kimi_style");
    assert_eq!(loaded.tokenizer.kind(), "tiktoken");
    assert_cases_match(&loaded, &cases(&dir), "kimi_style");
}

#[test]
fn tiktoken_offsets_tile_every_text() {
    let dir = fixture_dir("kimi_style");
    let tk = load_dir(&dir).expect("load kimi_style").tokenizer;
    for (n, case) in cases(&dir).iter().enumerate() {
        let enc = tk.encode(&case.text, true).unwrap();
        let mut pos = 0;
        let mut rebuilt = Vec::new();
        for &(start, end) in &enc.offsets {
            assert_eq!(start, pos, "case {n}: offsets leave a gap");
            assert!(end > start, "case {n}: an empty token");
            rebuilt.extend_from_slice(&case.text.as_bytes()[start..end]);
            pos = end;
        }
        assert_eq!(pos, case.text.len(), "case {n}: offsets stop short");
        assert_eq!(rebuilt, case.text.as_bytes(), "case {n}");
    }
}

#[test]
fn hf_offsets_are_byte_offsets_and_tile_texts_with_specials() {
    let tk = load_dir(&fixture_dir("smollm2")).unwrap().tokenizer;
    // Checked in Python tokenizers (its char offsets equal bytes here).
    let enc = tk.encode("<|im_start|>user\nhi<|im_end|>", true).unwrap();
    assert_eq!(enc.ids, [1, 4093, 198, 6004, 2]);
    assert_eq!(
        enc.offsets,
        [(0, 12), (12, 16), (16, 17), (17, 19), (19, 29)]
    );

    for text in [
        "<|im_start|>system\nYou are a concise expert.<|im_end|>\n<|im_start|>user\nSum 12345 up!<|im_end|>\n",
        "<|endoftext|><|endoftext|>  two  spaces\t\ttabs\n\n\n<|im_end|>",
        "no specials at all, just text: 3.14159 and 'quotes' we'll keep",
    ] {
        let enc = tk.encode(text, true).unwrap();
        let rebuilt: String = enc.offsets.iter().map(|&(s, e)| &text[s..e]).collect();
        assert_eq!(rebuilt, text);
    }

    // Byte offsets, not char offsets: after "é" (2 bytes) they are ahead of
    // the char count. A byte-level token holding part of a character gets
    // the whole character's span.
    let text = "café 東京";
    let enc = tk.encode(text, true).unwrap();
    assert_eq!(enc.offsets.last().unwrap().1, text.len());
    for &(s, e) in &enc.offsets {
        assert!(
            s <= e && text.is_char_boundary(s) && text.is_char_boundary(e),
            "{s}..{e}"
        );
    }
}

#[test]
fn loaded_metadata() {
    let smol = load_dir(&fixture_dir("smollm2")).unwrap();
    assert_eq!(smol.bos_token.as_deref(), Some("<|im_start|>"));
    assert_eq!(smol.eos_token.as_deref(), Some("<|im_end|>"));
    assert_eq!(smol.eos_id, Some(2));
    assert_eq!(smol.tokenizer.vocab_size(), 49152);
    assert_eq!(smol.tokenizer.token_id("<|endoftext|>"), Some(0));
    assert!(smol.chat_template.as_ref().is_some_and(|t| t.is_string()));
    let names: Vec<&str> = smol.files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["tokenizer.json", "tokenizer_config.json"]);

    let kimi = load_dir(&fixture_dir("kimi_style")).unwrap();
    assert_eq!(kimi.bos_token.as_deref(), Some("[BOS]"));
    assert_eq!(kimi.eos_token.as_deref(), Some("[EOS]"));
    assert_eq!(kimi.eos_id, Some(49157));
    // 49156 ranks + 258 special slots.
    assert_eq!(kimi.tokenizer.vocab_size(), 49414);
    // Named reserved tokens keep their (relative) names; unnamed slots are
    // named by their absolute id.
    assert_eq!(kimi.tokenizer.token_id("<|reserved_token_5|>"), Some(49161));
    assert_eq!(
        kimi.tokenizer.token_id("<|reserved_token_49200|>"),
        Some(49200)
    );
    assert_eq!(
        kimi.tokenizer.token_id("<|reserved_token_49413|>"),
        Some(49413)
    );
    assert_eq!(kimi.tokenizer.token_id("<|reserved_token_49414|>"), None);
    assert_eq!(
        kimi.tokenizer
            .encode("<|reserved_token_49200|>", false)
            .unwrap()
            .ids,
        [49200]
    );
    assert!(kimi.chat_template.as_ref().is_some_and(|t| t.is_string()));
    let names: Vec<&str> = kimi.files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["tiktoken.model", "tokenizer_config.json"]);

    for loaded in [&smol, &kimi] {
        for (_, sha) in &loaded.files {
            assert_eq!(sha.len(), 64);
        }
        assert_eq!(loaded.identity, identity(&loaded.files));
    }
    assert_ne!(smol.identity, kimi.identity);
}

#[test]
fn fixture_pat_str_is_kimis() {
    let path = fixture_dir("kimi_style").join("tokenizer_config.json");
    let config: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert_eq!(config["pat_str"].as_str(), Some(tiktoken::KIMI_PAT_STR));
}

#[test]
fn identity_ignores_order_but_not_content() {
    let a = ("a".to_string(), "11".to_string());
    let b = ("b".to_string(), "22".to_string());
    assert_eq!(
        identity(&[a.clone(), b.clone()]),
        identity(&[b.clone(), a.clone()])
    );
    assert_ne!(
        identity(&[a.clone(), b]),
        identity(&[a, ("b".into(), "23".into())])
    );
}

/// A fresh empty directory under the system temp dir.
fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tokenizer-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn directory_layout_errors() {
    let empty = scratch_dir("empty");
    let err = load_dir(&empty).unwrap_err();
    assert!(matches!(err, TokenizeError::NotFound { .. }), "{err}");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");

    // tiktoken.model alone: its specials need the config.
    let lone = scratch_dir("lone");
    std::fs::copy(
        fixture_dir("kimi_style").join("tiktoken.model"),
        lone.join("tiktoken.model"),
    )
    .unwrap();
    let err = load_dir(&lone).unwrap_err();
    assert!(err.to_string().contains("tokenizer_config.json"), "{err}");

    // A broken config is an error, not a silent default.
    std::fs::write(lone.join("tokenizer_config.json"), b"{not json").unwrap();
    let err = load_dir(&lone).unwrap_err();
    assert!(err.to_string().contains("invalid JSON"), "{err}");

    // Both files: tokenizer_class picks tiktoken, otherwise tokenizer.json.
    std::fs::copy(
        fixture_dir("smollm2").join("tokenizer.json"),
        lone.join("tokenizer.json"),
    )
    .unwrap();
    std::fs::write(
        lone.join("tokenizer_config.json"),
        br#"{"tokenizer_class": "TikTokenTokenizer"}"#,
    )
    .unwrap();
    assert_eq!(load_dir(&lone).unwrap().tokenizer.kind(), "tiktoken");
    std::fs::write(
        lone.join("tokenizer_config.json"),
        br#"{"bos_token": {"content": "<s>"}}"#,
    )
    .unwrap();
    let both = load_dir(&lone).unwrap();
    assert_eq!(both.tokenizer.kind(), "tokenizer.json");
    assert_eq!(both.bos_token.as_deref(), Some("<s>"));
    assert_eq!(both.eos_id, None);

    for dir in [empty, lone] {
        std::fs::remove_dir_all(dir).unwrap();
    }
}

#[test]
fn empty_text_gives_no_ids() {
    for name in ["smollm2", "kimi_style"] {
        let tk = load_dir(&fixture_dir(name)).unwrap().tokenizer;
        assert_eq!(tk.encode("", true).unwrap(), Encoded::default(), "{name}");
    }
}

#[test]
fn kimi_chunks_at_400k_code_points_even_inside_a_special() {
    let tk = load_dir(&fixture_dir("kimi_style")).unwrap().tokenizer;
    let eos = tk.token_id("[EOS]").unwrap();
    // No run is long enough to be cut; only the chunk boundary matters.
    // 399,995 code points then "[EOS]": it ends the first chunk exactly.
    let filler: String = "ab ".repeat(200_000).chars().take(399_995).collect();
    let whole = format!("{filler}[EOS]");
    assert_eq!(tk.encode(&whole, false).unwrap().ids.last(), Some(&eos));
    // One code point more before it, and "[EOS" ends the first chunk and
    // "]" starts the next: plain text, as in Kimi's Python.
    let straddling = format!("{filler}x[EOS]");
    let ids = tk.encode(&straddling, true).unwrap();
    assert!(!ids.ids.contains(&eos));
    let mut expected = tk.encode(&format!("{filler}x[EOS"), false).unwrap().ids;
    expected.extend(tk.encode("]", false).unwrap().ids);
    assert_eq!(ids.ids, expected);
    assert_eq!(ids.offsets.last().unwrap().1, straddling.len());
}
