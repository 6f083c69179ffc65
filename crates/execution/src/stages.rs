//! The stages of a query execution and their counters, shaped like MongoDB's explain output
//! (`executionStats.executionStages`): an access stage (IDHACK, COLLSCAN, or IXSCAN under a
//! FETCH), then SORT, SKIP, LIMIT and PROJECTION_DEFAULT as the query asks for them, each with
//! `works` (units of work it did), `advanced` (documents it passed up, MongoDB's `nReturned`)
//! and its own figures (keys and documents examined, spilled bytes).
//!
//! [`crate::execution::Execution`] pulls documents through these stages a batch at a time and
//! records every stage's counters as it goes; [`ExecutionCounters::plan_tree`] renders them as
//! the nested tree `explain` prints.

use bson::{doc, Bson, Document};

use crate::plan::{Access, IndexScan};

/// Work done and documents passed up by one stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageCounters {
    pub works: u64,
    pub advanced: u64,
}

/// Every stage's counters for one execution.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecutionCounters {
    /// The access stage: entries or records read (works), candidates produced (advanced).
    pub access: StageCounters,
    pub keys_examined: u64,
    pub documents_examined: u64,
    /// The filter, applied where the documents are fetched: candidates seen, matches.
    pub filter: StageCounters,
    pub sort: StageCounters,
    pub sort_spilled_bytes: u64,
    pub skip: StageCounters,
    pub limit: StageCounters,
    pub projection: StageCounters,
}

/// What the query asked for, to label the stages.
pub struct StageShape<'a> {
    pub access: &'a Access,
    pub filter: &'a Document,
    pub sort: Option<Document>,
    pub skip: u64,
    pub limit: Option<u64>,
    pub projection: bool,
    /// The sort runs as a SORT stage (false when the index scan's order is the sort's).
    pub blocking_sort: bool,
}

impl ExecutionCounters {
    /// The stage tree with its counters, outermost stage first (`inputStage` nests inward).
    pub fn plan_tree(&self, shape: &StageShape<'_>) -> Document {
        let mut stage = self.access_stage(shape);
        if let (Some(pattern), true) = (&shape.sort, shape.blocking_sort) {
            let mut sort = doc! { "stage": "SORT", "sortPattern": pattern.clone() };
            if let Some(limit) = shape.limit {
                sort.insert("limitAmount", to_count(limit.saturating_add(shape.skip)));
            }
            sort.insert("usedDisk", self.sort_spilled_bytes > 0);
            sort.insert("spilledDataStorageSize", to_count(self.sort_spilled_bytes));
            stage = wrap(sort, self.sort, stage);
        }
        if shape.skip > 0 {
            stage = wrap(doc! { "stage": "SKIP", "skipAmount": to_count(shape.skip) }, self.skip, stage);
        }
        if let Some(limit) = shape.limit {
            stage = wrap(doc! { "stage": "LIMIT", "limitAmount": to_count(limit) }, self.limit, stage);
        }
        if shape.projection {
            let covered = matches!(shape.access, Access::IndexScan(scan) if scan.covered);
            let name = if covered { "PROJECTION_COVERED" } else { "PROJECTION_DEFAULT" };
            stage = wrap(doc! { "stage": name }, self.projection, stage);
        }
        stage
    }

    fn access_stage(&self, shape: &StageShape<'_>) -> Document {
        let filter_counters = StageCounters { works: self.filter.works, advanced: self.filter.advanced };
        match shape.access {
            Access::IdLookup { .. } => with_counters(
                doc! { "stage": "IDHACK", "keysExamined": to_count(self.keys_examined), "docsExamined": to_count(self.documents_examined) },
                filter_counters,
            ),
            Access::CollectionScan { .. } => {
                let mut scan = doc! { "stage": "COLLSCAN", "direction": "forward", "docsExamined": to_count(self.documents_examined) };
                if !shape.filter.is_empty() {
                    scan.insert("filter", shape.filter.clone());
                }
                with_counters(scan, filter_counters)
            }
            Access::Or(union) => {
                let branches: Vec<Bson> = union
                    .branches
                    .iter()
                    .map(|scan| {
                        let counters = StageCounters { works: scan.keys_examined, advanced: scan.keys_examined };
                        Bson::Document(with_counters(index_scan_stage(scan, scan.keys_examined), counters))
                    })
                    .collect();
                let mut or = with_counters(doc! { "stage": "OR", "dupsTested": to_count(self.access.works) }, self.access);
                or.insert("inputStages", branches);
                let mut fetch = doc! { "stage": "FETCH", "docsExamined": to_count(self.documents_examined) };
                if !shape.filter.is_empty() {
                    fetch.insert("filter", shape.filter.clone());
                }
                wrap(fetch, filter_counters, or)
            }
            // Covered: the filter applies on the scan itself and nothing is fetched.
            Access::IndexScan(scan) if scan.covered => {
                let mut index_scan = index_scan_stage(scan, self.keys_examined);
                if !shape.filter.is_empty() {
                    index_scan.insert("filter", shape.filter.clone());
                }
                with_counters(index_scan, filter_counters)
            }
            Access::IndexScan(scan) => {
                let index_scan = with_counters(
                    index_scan_stage(scan, self.keys_examined),
                    self.access,
                );
                let mut fetch = doc! { "stage": "FETCH", "docsExamined": to_count(self.documents_examined) };
                if !shape.filter.is_empty() {
                    fetch.insert("filter", shape.filter.clone());
                }
                wrap(fetch, filter_counters, index_scan)
            }
        }
    }
}

/// An IXSCAN stage's own fields.
fn index_scan_stage(scan: &IndexScan, keys_examined: u64) -> Document {
    let mut stage = doc! {
        "stage": "IXSCAN",
        "keyPattern": scan.key_pattern.clone(),
        "indexName": &scan.index_name,
        "isMultiKey": scan.multikey.unwrap_or(true),
    };
    if let Some(paths) = &scan.multikey_paths {
        stage.insert("multiKeyPaths", paths.clone());
    }
    if let Some(collation) = &scan.collation {
        stage.insert("collation", collation.clone());
    }
    stage.extend(doc! {
        "isUnique": scan.unique,
        "isSparse": scan.sparse,
        "isPartial": scan.partial,
        "indexVersion": 2,
        "direction": if scan.reverse { "backward" } else { "forward" },
        "indexBounds": scan.bounds.clone(),
        "keysExamined": to_count(keys_examined),
        "seeks": to_count(scan.ranges.len() as u64),
    });
    stage
}

/// A count as MongoDB appends numbers: int32 when it fits, else int64.
pub fn to_count(value: u64) -> Bson {
    match i32::try_from(value) {
        Ok(small) => Bson::Int32(small),
        Err(_) => Bson::Int64(i64::try_from(value).unwrap_or(i64::MAX)),
    }
}

fn with_counters(mut stage: Document, counters: StageCounters) -> Document {
    stage.insert("works", to_count(counters.works));
    stage.insert("advanced", to_count(counters.advanced));
    stage.insert("nReturned", to_count(counters.advanced));
    stage
}

fn wrap(stage: Document, counters: StageCounters, input: Document) -> Document {
    let mut stage = with_counters(stage, counters);
    stage.insert("inputStage", Bson::Document(input));
    stage
}
