//! `distinct`: the distinct values of a field among matching documents; arrays contribute
//! their elements.

use bson::{doc, Bson, Document};
use myriad_keystring::compare_values;
use myriad_query::path::{split_path, visit_match_values, LeafArrays};

use crate::error::{CommandError, CommandResult};
use crate::plan::{Execution, BLOCKING_SORT_MEMORY_LIMIT_BYTES};
use crate::{CommandRequest, ServerContext};

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let name = request.collection_name()?;
    let key = match request.body.get("key") {
        Some(Bson::String(key)) => key.clone(),
        Some(other) => return Err(crate::request::field_type_error("key", "string", other)),
        None => return Err(CommandError::new(crate::error::FAILED_TO_PARSE, "BSON field 'distinct.key' is missing but a required field")),
    };
    let components = split_path(&key)?;
    let spec = super::find::parse_query_spec(request, "query")?;
    let Some(collection) = context.engine.collection(&request.db, &name)? else {
        return Ok(doc! { "values": Bson::Array(Vec::new()), "ok": 1.0 });
    };
    let mut execution = Execution::new(collection, spec)?;
    let mut values: Vec<Bson> = Vec::new();
    for (_, document) in execution.drain_unprojected(&context.engine, BLOCKING_SORT_MEMORY_LIMIT_BYTES)? {
        // Leaf arrays contribute their elements, not themselves; missing fields nothing.
        visit_match_values(&document, &components, LeafArrays::ExpandAndWhole, &mut |reached| {
            match reached.value {
                Some(Bson::Array(_)) if !reached.from_leaf_expansion => {}
                Some(value) => values.push(value.clone()),
                None => {}
            }
            false
        });
    }
    values.sort_by(compare_values);
    values.dedup_by(|right, left| compare_values(left, right).is_eq());
    Ok(doc! { "values": values, "ok": 1.0 })
}
