//! The phase kinds, one module each.
pub mod adaptation;
pub mod feasibility;
pub mod generation;
pub mod tokenization;
