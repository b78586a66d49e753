//! The layers of ARCHITECTURE.md ("Layers and boundaries") hold in the
//! code: a module of the daemon uses only modules of its own layer or of
//! the layers below it, and no two files of either crate use each other
//! (a parent and the child it declares excepted: they are one unit).
//!
//! The layers are read from ARCHITECTURE.md itself, so the document and the
//! test cannot drift apart; every module of the daemon must be placed in
//! one. Uses are found as `crate::a::b` paths (in `use` and inline) and
//! `super::` paths, resolved to the file that holds the module; test
//! modules (`#[cfg(test)] mod tests`, `tests.rs`) are left out: a test may
//! reach anywhere.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each layer's modules (`phase::kinds`), lowest first.
fn layers() -> Vec<Vec<String>> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../ARCHITECTURE.md"))
            .unwrap();
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Layers and boundaries"))
        .expect("ARCHITECTURE.md has a section \"Layers and boundaries\"");
    section
        .lines()
        .filter(|l| {
            l.split_once(". ")
                .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
        .map(|l| {
            l.split('`')
                .skip(1)
                .step_by(2)
                .map(|m| m.trim_start_matches("crate::").to_string())
                .collect()
        })
        .collect()
}

/// Every `.rs` file under `src`, with its module path (`phase::kinds::filter`).
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            // The binary is a crate of its own, over the library.
            if parts == ["main"] || parts.last().is_some_and(|p| p == "tests") {
                continue;
            }
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            out.insert(parts.join("::"), path);
        }
    }
    out
}

/// The source without its test module.
fn without_tests(source: &str) -> &str {
    match source.find("#[cfg(test)]\nmod tests") {
        Some(at) => &source[..at],
        None => source,
    }
}

/// The module paths `source` (of module `me`) uses, as written after
/// `crate::` or resolved from `super::`.
fn uses(me: &str, source: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let code: String = without_tests(source)
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let path_at = |rest: &str| -> String {
        rest.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect::<String>()
            .trim_end_matches(':')
            .to_string()
    };
    for (at, _) in code.match_indices("crate::") {
        let before = code[..at].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        out.insert(path_at(&code[at + "crate::".len()..]));
    }
    // `super::` is the parent module's, whether the module is a file or a
    // directory's `mod.rs`.
    let parent: Vec<&str> = me.split("::").filter(|s| !s.is_empty()).collect();
    for (at, _) in code.match_indices("super::") {
        let before = code[..at].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut rest = &code[at..];
        let mut base = parent.clone();
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        let tail = path_at(rest);
        if tail.starts_with('{') || tail.is_empty() {
            out.insert(base.join("::"));
        } else {
            let mut full = base.clone();
            full.push(&tail);
            out.insert(full.join("::").trim_start_matches("::").to_string());
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

/// The module of `modules` that holds path `p`: its longest prefix.
fn owner<'a>(p: &str, modules: &'a BTreeMap<String, PathBuf>) -> Option<&'a str> {
    let parts: Vec<&str> = p.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find_map(|m| modules.get_key_value(&m).map(|(k, _)| k.as_str()))
}

/// The layer of module `m`: the layer naming its longest prefix.
fn layer_of(m: &str, layers: &[Vec<String>]) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (i, layer) in layers.iter().enumerate() {
        for name in layer {
            let hit =
                m == name || m.starts_with(&format!("{name}::")) || name == "lib" && m.is_empty();
            if hit && best.is_none_or(|(_, len)| name.len() > len) {
                best = Some((i, name.len()));
            }
        }
    }
    best.map(|(i, _)| i)
}

fn related(a: &str, b: &str) -> bool {
    a.is_empty()
        || b.is_empty()
        || a.starts_with(&format!("{b}::"))
        || b.starts_with(&format!("{a}::"))
}

/// Edges between the files of `src`: module → the modules it uses.
fn graph(
    src: &Path,
) -> (
    BTreeMap<String, PathBuf>,
    BTreeMap<String, BTreeSet<String>>,
) {
    let modules = modules(src);
    let mut edges = BTreeMap::new();
    for (m, path) in &modules {
        let source = std::fs::read_to_string(path).unwrap();
        let used: BTreeSet<String> = uses(m, &source)
            .iter()
            .filter_map(|p| owner(p, &modules))
            .filter(|o| o != m)
            .map(String::from)
            .collect();
        edges.insert(m.clone(), used);
    }
    (modules, edges)
}

fn two_file_cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut cycles = Vec::new();
    for (a, used) in edges {
        for b in used {
            if a < b && !related(a, b) && edges.get(b).is_some_and(|u| u.contains(a)) {
                cycles.push(format!("{a} <-> {b}"));
            }
        }
    }
    cycles
}

#[test]
fn each_module_uses_only_its_layer_and_those_below() {
    let layers = layers();
    assert!(layers.len() >= 5, "{layers:?}");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (modules, edges) = graph(&src);
    let mut unplaced = Vec::new();
    let mut upward = Vec::new();
    for m in modules.keys() {
        let Some(mine) = layer_of(m, &layers) else {
            unplaced.push(m.clone());
            continue;
        };
        for used in &edges[m] {
            if related(m, used) {
                continue;
            }
            if let Some(theirs) = layer_of(used, &layers) {
                if theirs > mine {
                    upward.push(format!(
                        "{m} (layer {}) uses {used} (layer {})",
                        mine + 1,
                        theirs + 1
                    ));
                }
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules in no layer of ARCHITECTURE.md: {unplaced:?}"
    );
    assert!(
        upward.is_empty(),
        "uses up the layers:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_two_kinds_use_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (_, edges) = graph(&src);
    let kind = |m: &str| -> Option<String> {
        let rest = m.strip_prefix("phase::kinds::")?;
        Some(rest.split("::").next()?.to_string())
    };
    let mut between: BTreeSet<(String, String)> = BTreeSet::new();
    for (m, used) in &edges {
        let Some(a) = kind(m) else { continue };
        for u in used {
            if let Some(b) = kind(u).filter(|b| *b != a) {
                between.insert((a.clone(), b));
            }
        }
    }
    let mutual: Vec<_> = between
        .iter()
        .filter(|(a, b)| a < b && between.contains(&(b.clone(), a.clone())))
        .collect();
    assert!(mutual.is_empty(), "kinds that use each other: {mutual:?}");
}

#[test]
fn no_two_files_use_each_other() {
    for src in ["src", "../cli/src"] {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
        let (_, edges) = graph(&src);
        let cycles = two_file_cycles(&edges);
        assert!(cycles.is_empty(), "{}: {cycles:?}", src.display());
    }
}

#[test]
fn the_checker_sees_what_it_must() {
    let (uses_of, me) = (
        uses(
            "phase::kinds::filter::kind",
            "use super::FilterSpec;\nuse crate::phase::kind::{Checked};\nfn f() { crate::store::now_ms(); }\n#[cfg(test)]\nmod tests { use crate::api::x; }",
        ),
        "phase::kinds::filter::kind",
    );
    assert!(
        uses_of.contains("phase::kinds::filter::FilterSpec"),
        "{uses_of:?}"
    );
    assert!(uses_of.contains("phase::kind"), "{uses_of:?}");
    assert!(uses_of.contains("store::now_ms"), "{uses_of:?}");
    assert!(
        !uses_of.iter().any(|u| u.starts_with("api")),
        "tests may reach anywhere"
    );
    let layers = vec![
        vec!["domain".to_string()],
        vec!["phase".into()],
        vec!["phase::kinds".into()],
    ];
    assert_eq!(layer_of(me, &layers), Some(2));
    assert_eq!(layer_of("phase::runtime", &layers), Some(1));
    let mut edges = BTreeMap::new();
    edges.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    edges.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(two_file_cycles(&edges), ["a <-> b"]);
}
