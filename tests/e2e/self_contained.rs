//! The repository carries what it reads: no file of it names a path outside
//! it. Tests, benchmarks, scripts, the example and the docs once read the
//! fixtures from a folder beside the project root, which only the machines
//! it was written on have; a clone from anywhere failed. This test fails
//! when any file (docs included) names such a place again.
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root (this crate is `tests/` under it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the repository root")
}

/// Every file of the checkout: tracked, and untracked but not ignored (what
/// the next commit may hold). Outside a git checkout (a source tarball), every
/// file below the root but `target/`.
fn files(root: &Path) -> Vec<PathBuf> {
    let git = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root)
        .output();
    if let Some(out) = git.ok().filter(|o| o.status.success()) {
        return out
            .stdout
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| root.join(String::from_utf8_lossy(p).as_ref()))
            .filter(|p| p.is_file())
            .collect();
    }
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a readable folder") {
            let path = entry.expect("an entry").path();
            let name = path.file_name().unwrap_or_default();
            if path.is_dir() {
                if name != "target" && name != ".git" {
                    dirs.push(path);
                }
            } else {
                found.push(path);
            }
        }
    }
    found
}

/// The spellings of "the fixtures folder beside the project root", built
/// here so that this file does not name them itself.
fn outside_spellings() -> Vec<String> {
    let shared = ["sh", "ared"].concat();
    vec![
        format!("../{shared}"),
        format!("{shared}/fixtures"),
        format!("/work/{shared}"),
    ]
}

#[test]
fn no_file_names_a_path_outside_the_repository() {
    let root = root();
    let files = files(&root);
    assert!(
        files.len() > 100 && files.iter().any(|f| f.ends_with("README.md")),
        "the file listing found only {} files under {}",
        files.len(),
        root.display()
    );
    let spellings = outside_spellings();
    let mut offenders = Vec::new();
    for file in &files {
        let bytes = std::fs::read(file).expect("a readable file");
        for spelling in &spellings {
            if let Some(at) = find(&bytes, spelling.as_bytes()) {
                let line = bytes[..at].iter().filter(|b| **b == b'\n').count() + 1;
                let shown = file.strip_prefix(&root).unwrap_or(file).display();
                offenders.push(format!("{shown}:{line}: {spelling}"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "these files name a path outside the repository; the repository must carry \
         what it reads (fixtures/):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_fixture_folders_say_where_their_files_come_from() {
    let fixtures = root().join("fixtures");
    let mut folders = 0;
    for entry in std::fs::read_dir(&fixtures).expect("fixtures/") {
        let path = entry.expect("an entry").path();
        // The folder's own crate (`todod-fixtures`, which finds the files
        // for every crate's tests) is code, not a fixture.
        let is_crate_source = path.ends_with("src") && fixtures.join("Cargo.toml").is_file();
        if path.is_dir() && !is_crate_source {
            folders += 1;
            let sources = path.join("SOURCES.md");
            let text = std::fs::read_to_string(&sources)
                .unwrap_or_else(|e| panic!("{}: {e}", sources.display()));
            assert!(
                text.to_lowercase().contains("licen"),
                "{} names no licence",
                sources.display()
            );
        }
    }
    assert!(folders >= 4, "only {folders} fixture folders");
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}
