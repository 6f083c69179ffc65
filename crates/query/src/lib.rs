//! MongoDB's query language over BSON documents: filters, update operators, projections,
//! sorts, aggregation expressions and pipelines, and index bounds for the planner.
//!
//! A pure library: BSON in, BSON out, no I/O. Every ordering and equality between BSON values
//! goes through `myriad_keystring::compare`, so query results agree with index key order.
//!
//! Invariants:
//! - Parsing validates everything it can up front, so evaluation only fails on data errors.
//! - Applying an update never leaves a document half-modified (it works on a copy).
//! - Every error carries MongoDB's own code and code name (see [`QueryError::code`]).
//! - Recursion over user input (filters, expressions, projections) is depth-bounded.
//!
//! Modules: [`limits`] (path and nesting bounds, [`limits::decode_stored`]), [`path`] (dotted paths), [`filter`], [`json_schema`] (`$jsonSchema`), [`expression`], [`update`], [`projection`],
//! [`sort`], [`aggregate`], [`bounds`] (index intervals), [`bson_types`] (`$type` aliases).

pub mod aggregate;
pub mod external_sort;
pub mod bounds;
pub mod dates;
pub mod bson_types;
pub mod error;
pub mod expression;
pub mod filter;
pub mod json_schema;
pub mod limits;
pub mod memory;
pub mod numeric;
pub mod path;
pub mod projection;
pub mod regex;
pub mod sort;
pub mod timeseries;
pub mod update;
pub mod validation_error;

pub use aggregate::Pipeline;
pub use bounds::{field_intervals, field_intervals_non_multikey, parsed_field_intervals, parsed_field_intervals_non_multikey, Interval};
pub use error::{QueryError, QueryResult};
pub use expression::Expression;
pub use filter::{Filter, MatchDetails};
pub use limits::decode_stored;
pub use projection::Projection;
pub use sort::SortSpec;
pub use update::{upsert_seed, Update, UpdateContext};
