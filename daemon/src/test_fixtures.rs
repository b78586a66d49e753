//! Where the unit tests find their fixtures: `fixtures/` at the root of the
//! repository, which carries its own copy (a clone from anywhere passes). A
//! test that cannot find one fails saying so; it never passes without it.
use std::path::PathBuf;

/// The path of `relative` under the repository's `fixtures/`.
pub(crate) fn fixture(relative: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures")
        .join(relative);
    assert!(
        path.exists(),
        "FIXTURES MISSING: {} does not exist (the repository's fixtures/ folder)",
        path.display()
    );
    path
}
