//! Splitting an aggregation pipeline between the shards and the router.
//!
//! The shards run the longest prefix of per-document stages, then the first stage that needs
//! every document is split:
//! - `$sort`: sorted on each shard (with a following `$limit`), merged by the router;
//! - `$limit`: applied on each shard and again on the router;
//! - `$group` with decomposable accumulators (`$sum`, `$count`, `$min`, `$max`, `$avg`,
//!   `$push`, `$addToSet`): a partial group on each shard, the merge on the router;
//! - `$count`: counted on each shard, summed on the router;
//! - anything else runs on the router from there on.
//!
//! `$lookup` and `$unionWith` always run on the router, reading their collections through it
//! (`foreign.rs`), wherever those collections live; `$graphLookup`, `$out` and `$merge` are not
//! supported across several shards.

use bson::{doc, Bson, Document};

use crate::error::{ClusterError, ClusterResult, ILLEGAL_OPERATION};

/// Stages a shard can run on its own documents without changing the result.
const PER_DOCUMENT_STAGES: &[&str] = &["$match", "$project", "$addFields", "$set", "$unset", "$unwind", "$replaceRoot", "$replaceWith"];
/// Stages that need other collections or write: not run across shards.
const UNSUPPORTED_ACROSS_SHARDS: &[&str] = &["$graphLookup", "$out", "$merge"];
/// Stages the router runs itself, reading other collections through its own routing.
const READ_THROUGH_ROUTER: &[&str] = &["$lookup", "$unionWith"];

/// Where each part of a pipeline runs.
#[derive(Debug, Default, PartialEq)]
pub struct SplitPipeline {
    pub shard_stages: Vec<Document>,
    pub router_stages: Vec<Document>,
    /// The order the router merges the shards' streams in.
    pub merge_sort: Option<Document>,
}

fn stage_name(stage: &Document) -> &str {
    stage.keys().next().map(String::as_str).unwrap_or_default()
}

/// True when a top-level stage reads another collection through the router.
pub fn reads_through_router(stages: &[Document]) -> bool {
    stages.iter().any(|stage| READ_THROUGH_ROUTER.contains(&stage_name(stage)))
}

/// True when any stage (at the top level) needs other collections or writes.
pub fn uses_other_collections(stages: &[Document]) -> bool {
    stages.iter().any(|stage| UNSUPPORTED_ACROSS_SHARDS.contains(&stage_name(stage)))
}

pub fn split(stages: &[Document]) -> ClusterResult<SplitPipeline> {
    if let Some(stage) = stages.iter().find(|stage| UNSUPPORTED_ACROSS_SHARDS.contains(&stage_name(stage))) {
        return Err(ClusterError::coded(
            ILLEGAL_OPERATION,
            format!("{} is not supported through the router on a collection spread over several shards yet", stage_name(stage)),
        ));
    }
    let mut split = SplitPipeline::default();
    let mut position = 0;
    while position < stages.len() && PER_DOCUMENT_STAGES.contains(&stage_name(&stages[position])) {
        split.shard_stages.push(stages[position].clone());
        position += 1;
    }
    let Some(stage) = stages.get(position) else { return Ok(split) };
    let rest = &stages[position + 1..];
    match stage_name(stage) {
        "$sort" => {
            let Ok(sort) = stage.get_document("$sort") else { return Err(ClusterError::coded(15973, "the $sort key specification must be an object")) };
            split.shard_stages.push(stage.clone());
            if let Some(limit) = rest.first().filter(|next| stage_name(next) == "$limit") {
                split.shard_stages.push(limit.clone());
            }
            split.merge_sort = Some(sort.clone());
            split.router_stages.extend(rest.iter().cloned());
        }
        "$limit" => {
            split.shard_stages.push(stage.clone());
            split.router_stages.push(stage.clone());
            split.router_stages.extend(rest.iter().cloned());
        }
        "$group" => match stage.get_document("$group").ok().and_then(decompose_group) {
            Some((partial, merge)) => {
                split.shard_stages.push(doc! { "$group": partial });
                split.router_stages.extend(merge);
                split.router_stages.extend(rest.iter().cloned());
            }
            None => split.router_stages.extend(stages[position..].iter().cloned()),
        },
        "$count" => match stage.get_str("$count") {
            Ok(name) if !name.is_empty() && !name.starts_with('$') && !name.contains('.') => {
                split.shard_stages.push(doc! { "$group": { "_id": Bson::Null, name: { "$sum": 1 } } });
                split.router_stages.push(doc! { "$group": { "_id": Bson::Null, name: { "$sum": format!("${name}") } } });
                split.router_stages.push(doc! { "$project": { "_id": 0, name: 1 } });
                split.router_stages.extend(rest.iter().cloned());
            }
            _ => split.router_stages.extend(stages[position..].iter().cloned()),
        },
        _ => split.router_stages.extend(stages[position..].iter().cloned()),
    }
    Ok(split)
}

/// A `$group` as a partial group for the shards and the stages that merge the partials, or
/// None when an accumulator does not decompose.
fn decompose_group(group: &Document) -> Option<(Document, Vec<Document>)> {
    let id = group.get("_id")?.clone();
    let mut partial = doc! { "_id": id };
    let mut merge = doc! { "_id": "$_id" };
    let mut finish = doc! { "_id": 1 };
    for (field, accumulator) in group.iter().filter(|(field, _)| field.as_str() != "_id") {
        let Bson::Document(accumulator) = accumulator else { return None };
        if accumulator.len() != 1 {
            return None;
        }
        let (operator, argument) = accumulator.iter().next()?;
        let own = format!("${field}");
        match operator.as_str() {
            "$sum" | "$count" => {
                let argument = if operator == "$count" { Bson::Int32(1) } else { argument.clone() };
                partial.insert(field, doc! { "$sum": argument });
                merge.insert(field, doc! { "$sum": &own });
                finish.insert(field, &own);
            }
            "$min" | "$max" => {
                partial.insert(field, doc! { operator: argument.clone() });
                merge.insert(field, doc! { operator: &own });
                finish.insert(field, &own);
            }
            "$avg" => {
                let sum = format!("__myriad_sum_{field}");
                let count = format!("__myriad_count_{field}");
                partial.insert(&sum, doc! { "$sum": argument.clone() });
                partial.insert(&count, doc! { "$sum": { "$cond": [{ "$isNumber": argument.clone() }, 1, 0] } });
                merge.insert(&sum, doc! { "$sum": format!("${sum}") });
                merge.insert(&count, doc! { "$sum": format!("${count}") });
                finish.insert(field, doc! { "$cond": [{ "$eq": [format!("${count}"), 0] }, Bson::Null, { "$divide": [format!("${sum}"), format!("${count}")] }] });
            }
            "$push" | "$addToSet" => {
                partial.insert(field, doc! { operator: argument.clone() });
                merge.insert(field, doc! { "$push": &own });
                let combine = if operator == "$push" { "$concatArrays" } else { "$setUnion" };
                finish.insert(field, doc! { "$reduce": { "input": &own, "initialValue": [], "in": { combine: ["$$value", "$$this"] } } });
            }
            _ => return None,
        }
    }
    Some((partial, vec![doc! { "$group": merge }, doc! { "$project": finish }]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use myriad_query::Pipeline;

    fn run(stages: &[Document], input: Vec<Document>) -> Vec<Document> {
        Pipeline::parse(stages).expect("parses").run(input.into_iter()).expect("runs")
    }

    /// Running the split on two "shards" and merging gives what the whole pipeline gives.
    fn same_result(stages: Vec<Document>) {
        let documents: Vec<Document> = (0..40).map(|index| doc! { "_id": index, "g": index % 3, "v": index, "t": format!("t{}", index % 5) }).collect();
        let expected = run(&stages, documents.clone());
        let split = split(&stages).expect("splits");
        let (left, right): (Vec<_>, Vec<_>) = documents.into_iter().partition(|document| document.get_i32("_id").unwrap_or(0) % 2 == 0);
        let mut merged = run(&split.shard_stages, left);
        merged.extend(run(&split.shard_stages, right));
        if let Some(sort) = &split.merge_sort {
            myriad_query::SortSpec::parse(sort).expect("sort").sort_documents(&mut merged);
        }
        let mut actual = run(&split.router_stages, merged);
        let mut expected = expected;
        let by_id = |left: &Document, right: &Document| format!("{:?}", left.get("_id")).cmp(&format!("{:?}", right.get("_id")));
        if split.merge_sort.is_none() {
            actual.sort_by(by_id);
            expected.sort_by(by_id);
        }
        assert_eq!(actual, expected, "{stages:?}");
    }

    #[test]
    fn split_pipelines_merge_to_the_single_node_result() {
        same_result(vec![doc! { "$match": { "v": { "$gte": 5 } } }, doc! { "$group": { "_id": "$g", "n": { "$sum": 1 }, "total": { "$sum": "$v" }, "low": { "$min": "$v" }, "high": { "$max": "$v" }, "mean": { "$avg": "$v" } } }]);
        same_result(vec![doc! { "$group": { "_id": "$g", "tags": { "$addToSet": "$t" } } }, doc! { "$project": { "count": { "$size": "$tags" } } }]);
        same_result(vec![doc! { "$sort": { "v": -1 } }, doc! { "$limit": 7 }, doc! { "$project": { "v": 1 } }]);
        same_result(vec![doc! { "$match": { "g": 1 } }, doc! { "$count": "ones" }]);
        same_result(vec![doc! { "$group": { "_id": null, "spread": { "$stdDevPop": "$v" } } }]);
        same_result(vec![doc! { "$project": { "v": 1 } }, doc! { "$sort": { "v": 1 } }, doc! { "$skip": 3 }]);
    }

    #[test]
    fn lookups_run_on_the_router_and_writing_stages_are_refused() {
        let lookup = doc! { "$lookup": { "from": "x", "localField": "a", "foreignField": "b", "as": "c" } };
        let stages = vec![doc! { "$match": { "a": 1 } }, lookup.clone()];
        let parts = split(&stages).unwrap();
        assert_eq!((parts.shard_stages, parts.router_stages), (vec![doc! { "$match": { "a": 1 } }], vec![lookup]));
        assert!(reads_through_router(&stages) && !uses_other_collections(&stages));
        for writing in [doc! { "$out": "y" }, doc! { "$merge": { "into": "y" } }, doc! { "$graphLookup": { "from": "x" } }] {
            assert!(split(&[writing.clone()]).is_err());
            assert!(uses_other_collections(&[writing]));
        }
    }
}
