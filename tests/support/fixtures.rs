//! The shared fixtures (`../shared/` beside the project root, as CI has it).
//! A test that needs them and cannot find them fails, saying so: it never
//! passes quietly without them.
use std::path::PathBuf;

/// The path of `relative` under `../shared/fixtures/`.
pub fn fixture(relative: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/fixtures")
        .join(relative);
    assert!(
        root.exists(),
        "FIXTURES MISSING: {} does not exist. These tests read the shared fixtures at \
         ../shared/ beside the project root (CI has them there).",
        root.display()
    );
    root.canonicalize().expect("canonical fixture path")
}
