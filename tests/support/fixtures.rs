//! The repository's fixtures (`fixtures/` at its root: a clone from anywhere
//! carries them).
//! A test that needs them and cannot find them fails, saying so: it never
//! passes quietly without them.
use std::path::PathBuf;

/// The path of `relative` under the repository's `fixtures/`.
pub fn fixture(relative: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(relative);
    assert!(
        root.exists(),
        "FIXTURES MISSING: {} does not exist (the repository's fixtures/ folder)",
        root.display()
    );
    root.canonicalize().expect("canonical fixture path")
}
