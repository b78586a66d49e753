//! The repository's fixtures (`fixtures/` at its root: a clone from anywhere
//! carries them).
//! A test that needs them and cannot find them fails, saying so: it never
//! passes quietly without them.
pub use todod_fixtures::fixture;
