//! MongoDB's query language over BSON documents: filters, update operators, projections,
//! sorts, aggregation expressions and pipelines, and index bounds for the planner.
//!
//! A pure library: BSON in, BSON out, no I/O. Every ordering and equality between BSON values
//! goes through `myriad_keystring::compare`, so query results agree with index key order.
//! Invariants: parsing validates everything it can up front (so evaluation errors are data
//! errors only); applying an update never leaves a document half-modified (it works on a copy);
//! every error carries MongoDB's own code (see [`QueryError::code`]).

pub mod aggregate;
pub mod bounds;
pub mod bson_types;
pub mod error;
pub mod expression;
pub mod filter;
pub mod path;
pub mod projection;
pub mod sort;
pub mod update;

pub use error::{QueryError, QueryResult};
