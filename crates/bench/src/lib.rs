//! Benchmark programs behind `myriad bench ...`. Each prints a table and, on request, one JSON
//! line of figures; none of them asserts timings. Baselines live here, never on the product path.

pub mod many_collections;
pub mod routing;
