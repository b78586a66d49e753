//! What Cargo cannot hold. Cargo keeps the layers (a crate cannot name a
//! crate above it: that is a compile error), but inside one crate any file
//! may use any other. Two rules are checked here, over the source of every
//! crate of the workspace:
//!
//! - no loop of files, however many files it passes through: `a` uses `b`,
//!   `b` uses `c`, `c` uses `a` is one module cut in three (a parent and
//!   may use the children it declares, and the crate root is everyone's,
//!   but a child's use of its parent counts: `commands` uses `mcp`, which
//!   uses `commands::plans`, which uses `commands`, is a loop);
//! - no phase kinds use each other in a loop: a kind is one module that says
//!   how to read, process and write a record, standing on the seam; one may
//!   build on another (feasibility measures a generation), never both ways;
//! - the engine sees the store through its facade
//!   (`engine/src/phase/phase_store.rs`, `PhaseStore`) only: no other file
//!   of the engine names `todod_store::Store`, so what runs may ask of the
//!   store is that file's list.
//!
//! Uses are read as `crate::`, `super::` and `self::` paths, grouped imports
//! (`use super::{a, b::{c, d}}`) expanded, each resolved to the file that
//! holds it. Test code (`#[cfg(test)] mod tests`, `tests.rs`) is left out:
//! a test may reach anywhere.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The `src` directory of every library and binary crate of the workspace.
fn crate_sources() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("the workspace lists its members");
    let sources: Vec<PathBuf> = members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| root.join(m).join("src"))
        .filter(|src| src.is_dir())
        .collect();
    assert!(sources.len() >= 8, "too few crates found: {sources:?}");
    sources
}

/// Every `.rs` file under `src`, by its module path (`phase::kinds::filter`).
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
            // A binary (`main.rs`, `bin/`) is a crate of its own over the library.
            if parts == ["main"] || parts[0] == "bin" || parts.last().is_some_and(|p| p == "tests")
            {
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

/// The source without comments and without its test module.
fn code_of(source: &str) -> String {
    let source = match source.find("#[cfg(test)]\nmod tests") {
        Some(at) => &source[..at],
        None => source,
    };
    source
        .lines()
        .map(|l| match l.find("//") {
            Some(at) => &l[..at],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads a use tree at the start of `text` below `prefix`, pushing every
/// full path it names (`{a, b::{c, d}}` gives `a`, `b::c`, `b::d`).
/// Returns the bytes read.
fn read_tree(text: &str, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let bytes = text.as_bytes();
    let mut at = 0;
    let mut path = prefix.to_vec();
    let skip_space = |at: &mut usize| {
        while *at < bytes.len() && bytes[*at].is_ascii_whitespace() {
            *at += 1;
        }
    };
    loop {
        skip_space(&mut at);
        if bytes.get(at) == Some(&b'{') {
            at += 1;
            loop {
                skip_space(&mut at);
                match bytes.get(at) {
                    None => return at,
                    Some(b'}') => return at + 1,
                    Some(b',') => at += 1,
                    Some(_) => {
                        let read = read_tree(&text[at..], &path, out);
                        at += read.max(1);
                    }
                }
            }
        }
        let start = at;
        while at < bytes.len() && (bytes[at].is_ascii_alphanumeric() || bytes[at] == b'_') {
            at += 1;
        }
        let ident = &text[start..at];
        if !ident.is_empty() && ident != "self" {
            path.push(ident.to_string());
        }
        if text[at..].starts_with("::") && !ident.is_empty() && ident != "self" {
            at += 2;
            continue;
        }
        out.push(path);
        // Past `as name`, up to the `,` or `}` that ends the item.
        while at < bytes.len() && !matches!(bytes[at], b',' | b'}' | b';') {
            at += 1;
        }
        return at;
    }
}

/// Where `start` (`crate::`, `todod_store::`) begins a path in `code`: not
/// the tail of a longer name or path.
fn path_starts<'a>(code: &'a str, start: &'a str) -> impl Iterator<Item = usize> + 'a {
    code.match_indices(start)
        .map(|(at, _)| at)
        .filter(move |&at| {
            !code[..at]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
        })
}

/// The module paths that `source` (the file of module `me`) names.
fn uses(me: &str, source: &str) -> BTreeSet<String> {
    let code = code_of(source);
    let me: Vec<String> = me
        .split("::")
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let mut paths = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        for at in path_starts(&code, start) {
            let mut rest = &code[at..];
            let mut base: Vec<String> = match start {
                "crate::" => {
                    rest = &rest["crate::".len()..];
                    Vec::new()
                }
                "self::" => {
                    rest = &rest["self::".len()..];
                    me.clone()
                }
                _ => me.clone(),
            };
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            read_tree(rest, &base, &mut paths);
        }
    }
    paths
        .into_iter()
        .map(|p| p.join("::"))
        .filter(|p| !p.is_empty())
        .collect()
}

/// The module of `modules` that holds path `p`: its longest prefix.
fn owner<'a>(p: &str, modules: &'a BTreeMap<String, PathBuf>) -> Option<&'a str> {
    let parts: Vec<&str> = p.split("::").collect();
    (0..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find_map(|m| modules.get_key_value(&m).map(|(k, _)| k.as_str()))
}

/// `parent` declares `child`, and may use what it declares: only the edge
/// from parent to child is not counted (the crate root is everyone's).
/// A child's use of its parent counts, so a loop that goes out of a module
/// and comes back through one of its children is found.
fn declares(parent: &str, child: &str) -> bool {
    child.is_empty() || child.rsplit_once("::").map_or("", |(p, _)| p) == parent
}

/// File → the files it uses, within one crate.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules(src);
    let mut edges = BTreeMap::new();
    for (m, path) in &modules {
        let source = std::fs::read_to_string(path).unwrap();
        let used: BTreeSet<String> = uses(m, &source)
            .iter()
            .filter_map(|p| owner(p, &modules))
            .filter(|o| *o != m && !declares(m, o))
            .map(String::from)
            .collect();
        edges.insert(m.clone(), used);
    }
    edges
}

/// The loops of `edges`: its strongly connected parts of two files or more
/// (Tarjan's algorithm).
fn loops(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            let edges = self.edges;
            for w in edges.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut part = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    part.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if part.len() > 1 {
                    part.sort();
                    self.found.push(part);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

#[test]
fn no_files_use_each_other_in_a_loop() {
    let mut found = Vec::new();
    for src in crate_sources() {
        for part in loops(&graph(&src)) {
            found.push(format!("{}: {}", src.display(), part.join(" -> ")));
        }
    }
    assert!(found.is_empty(), "loops of files:\n{}", found.join("\n"));
}

#[test]
fn no_kinds_use_each_other_in_a_loop() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/src");
    let kind = |m: &str| -> Option<String> {
        let rest = m.strip_prefix("phase::kinds::")?;
        Some(rest.split("::").next()?.to_string())
    };
    let mut between: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, used) in graph(&src) {
        let Some(a) = kind(&m) else { continue };
        let theirs = between.entry(a.clone()).or_default();
        theirs.extend(used.iter().filter_map(|u| kind(u)).filter(|b| *b != a));
    }
    assert!(
        between.len() >= 5,
        "the kinds are where this test looks: {between:?}"
    );
    let found = loops(&between);
    assert!(found.is_empty(), "kinds that use each other: {found:?}");
}

/// The paths below crate `krate` (`todod_store`) that `source` names,
/// grouped imports expanded (`todod_store::{Error, Store}` gives both).
fn names_in(krate: &str, source: &str) -> Vec<String> {
    let code = code_of(source);
    let start = format!("{krate}::");
    let mut paths = Vec::new();
    for at in path_starts(&code, &start) {
        read_tree(&code[at + start.len()..], &[], &mut paths);
    }
    paths.into_iter().map(|p| p.join("::")).collect()
}

#[test]
fn the_engine_sees_the_store_through_its_facade_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/src");
    let facade = "phase::phase_store";
    let modules = modules(&src);
    assert!(
        modules.contains_key(facade),
        "the facade moved: {modules:?}"
    );
    let mut found = Vec::new();
    for (module, path) in &modules {
        let names = names_in("todod_store", &std::fs::read_to_string(path).unwrap());
        if module == facade {
            assert!(
                names.iter().any(|n| n == "Store"),
                "the facade wraps the store"
            );
            continue;
        }
        found.extend(
            names
                .iter()
                .filter(|n| *n == "Store" || n.starts_with("Store::") || n.is_empty())
                .map(|n| {
                    format!(
                        "{module}: todod_store::{}",
                        if n.is_empty() { "*" } else { n }
                    )
                }),
        );
    }
    assert!(
        found.is_empty(),
        "the engine names the store's own type outside its facade (add what it needs to \
         PhaseStore instead):\n{}",
        found.join("\n")
    );
    assert_eq!(
        names_in(
            "todod_store",
            "use todod_store::{Error as E, Store};\nuse todod_store::*;\nfn f() { todod_store::Store::open(); }"
        ),
        ["Error", "Store", "", "Store::open"],
        "the reader sees grouped imports and paths in code"
    );
}

#[test]
fn the_checker_sees_grouped_imports_and_long_loops() {
    let used = uses(
        "phase::kinds::filter::kind",
        "use super::{FilterSpec, rules::{Rule, Other as O}};\nuse crate::phase::{kind::{Checked}, cursor};\n\
         fn f() { crate::store::now_ms(); }\n#[cfg(test)]\nmod tests { use crate::api::x; }",
    );
    for want in [
        "phase::kinds::filter::FilterSpec",
        "phase::kinds::filter::rules::Rule",
        "phase::kinds::filter::rules::Other",
        "phase::kind::Checked",
        "phase::cursor",
        "store::now_ms",
    ] {
        assert!(used.contains(want), "{want} not in {used:?}");
    }
    assert!(
        !used.iter().any(|u| u.starts_with("api")),
        "tests may reach anywhere"
    );

    let edges: BTreeMap<String, BTreeSet<String>> =
        [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]
            .iter()
            .fold(BTreeMap::new(), |mut m, (from, to)| {
                m.entry(from.to_string())
                    .or_insert_with(BTreeSet::new)
                    .insert(to.to_string());
                m
            });
    assert_eq!(loops(&edges), [["a", "b", "c"]]);
    assert!(declares("store", "store::sql"));
    assert!(!declares("store::sql", "store"));
    assert!(!declares("store::sql", "store::sqlite"));
    assert!(!declares("phase", "phase::kinds::filter"));
}
