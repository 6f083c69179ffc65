//! Order-preserving key encoding for BSON values (see docs/FORMAT.md), and the BSON comparison
//! order it must agree with.
//!
//! Invariant: for values `a` and `b`, `compare_values(a, b)` equals the `memcmp` order of their
//! encodings. Storage index keys and routing chunk bounds both use these bytes.

pub mod compare;

pub use compare::{compare_documents, compare_values, values_equal, Number};
