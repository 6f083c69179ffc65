//! `distinct`: the distinct values of a field among matching documents; arrays contribute
//! their elements.

use bson::{doc, Bson, Document};
use myriad_keystring::{compare_values_collated, StringComparator};
use myriad_query::path::{split_path, visit_match_values, LeafArrays};

use crate::error::{CommandError, CommandResult};
use crate::execution::{Execution, MAX_BATCH_BYTES};
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = request.collection_name()?;
    if let Some(timeseries) = super::timeseries::resolve(context, &request.db, &name)? {
        return super::timeseries::distinct(context, request, &name, &timeseries);
    }
    let key = match request.body.get("key") {
        Some(Bson::String(key)) => key.clone(),
        Some(other) => return Err(crate::request::field_type_error("distinct.key", "string", other)),
        None => return Err(CommandError::new(crate::error::MISSING_FIELD, "BSON field 'distinct.key' is missing but a required field")),
    };
    let components = split_path(&key)?;
    let spec = super::find::parse_query_spec(request, "query")?;
    let Some(collection) = context.backend.collection(&request.db, &name)? else {
        return Ok(doc! { "values": Bson::Array(Vec::new()), "ok": 1.0 });
    };
    let mut execution = Execution::new(context.backend.as_ref(), collection, spec)?;
    // Values equal under the query's collation are one distinct value.
    let mut values = DistinctValues { collator: execution.collator().cloned(), ..DistinctValues::default() };
    while let Some(document) = execution.next_filtered(context.backend.as_ref())? {
        let mut reached_values = Vec::new();
        visit_match_values(&document, &components, LeafArrays::ExpandAndWhole, &mut |reached| {
            match reached.value {
                Some(Bson::Array(_)) if !reached.from_leaf_expansion => {}
                Some(value) => reached_values.push(value.clone()),
                None => {}
            }
            false
        });
        for value in reached_values {
            values.add(value)?;
        }
    }
    crate::operation::note_examined_amounts(execution.counters.keys_examined, execution.counters.documents_examined);
    let values = values.finish();
    Ok(doc! { "values": values, "ok": 1.0 })
}

/// The distinct values seen so far: sorted and deduplicated whenever the list doubles, so it
/// holds at most twice the distinct values; their total size is bounded by the 16 MiB reply,
/// as MongoDB's "distinct too big" (17217).
#[derive(Default)]
struct DistinctValues {
    values: Vec<Bson>,
    compacted_length: usize,
    collator: Option<std::sync::Arc<myriad_collation::Collator>>,
}

impl DistinctValues {
    fn add(&mut self, value: Bson) -> CommandResult<()> {
        self.values.push(value);
        if self.values.len() >= (2 * self.compacted_length).max(1024) {
            self.compact();
            let bytes: usize = self.values.iter().map(crate::execution::value_size_bytes).sum();
            if bytes > MAX_BATCH_BYTES {
                return Err(CommandError::new(
                    crate::error::ErrorCode::new(17217),
                    "distinct too big, 16mb cap",
                ));
            }
        }
        Ok(())
    }

    fn compact(&mut self) {
        let collation = self.collator.as_deref().map(|collator| collator as &dyn StringComparator);
        self.values.sort_by(|left, right| compare_values_collated(left, right, collation));
        self.values.dedup_by(|right, left| compare_values_collated(left, right, collation).is_eq());
        self.compacted_length = self.values.len();
    }

    fn finish(mut self) -> Vec<Bson> {
        self.compact();
        self.values
    }
}
