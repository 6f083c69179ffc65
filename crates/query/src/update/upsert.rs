//! The document an upsert starts from: the query's equality conditions.

use bson::{Bson, Document};

use crate::error::{QueryError, QueryResult};

/// Builds the seed document for an upsert from a filter: top-level equality conditions
/// (`{a: 1}`, `{a: {$eq: 1}}`, a one-element `$in`, and those inside `$and`), with dotted paths
/// expanded into embedded documents. Operator conditions and `$or` contribute nothing.
pub fn upsert_seed(filter: &Document) -> QueryResult<Document> {
    let mut equalities: Vec<(String, Bson)> = Vec::new();
    collect_equalities(filter, &mut equalities, 0)?;
    let mut seed = Document::new();
    // _id goes first, as MongoDB places it.
    equalities.sort_by_key(|(path, _)| path != "_id" && !path.starts_with("_id."));
    for (path, value) in equalities {
        insert_path(&mut seed, &path, value)?;
    }
    Ok(seed)
}

fn is_operator_document(value: &Bson) -> bool {
    matches!(value, Bson::Document(document) if document.keys().next().is_some_and(|key| key.starts_with('$')))
}

fn collect_equalities(filter: &Document, equalities: &mut Vec<(String, Bson)>, depth: usize) -> QueryResult<()> {
    if depth > 100 {
        return Err(QueryError::BadValue("filter is nested too deeply".into()));
    }
    for (key, value) in filter {
        if key == "$and" {
            if let Bson::Array(items) = value {
                for item in items {
                    if let Bson::Document(inner) = item {
                        collect_equalities(inner, equalities, depth + 1)?;
                    }
                }
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        match value {
            Bson::RegularExpression(_) => {}
            Bson::Document(operators) if is_operator_document(value) => {
                if let Some(equal) = operators.get("$eq") {
                    equalities.push((key.clone(), equal.clone()));
                } else if let Some(Bson::Array(items)) = operators.get("$in") {
                    if let [only] = items.as_slice() {
                        if !matches!(only, Bson::RegularExpression(_)) {
                            equalities.push((key.clone(), only.clone()));
                        }
                    }
                }
            }
            other => equalities.push((key.clone(), other.clone())),
        }
    }
    Ok(())
}

fn insert_path(seed: &mut Document, path: &str, value: Bson) -> QueryResult<()> {
    let conflict = || QueryError::NotSingleValueField(format!("cannot infer query fields to set, path '{path}' is matched twice"));
    crate::limits::check_match_path_length(path)?;
    let (parents, last) = match path.rsplit_once('.') {
        Some((parents, last)) => (Some(parents), last),
        None => (None, path),
    };
    let mut container = seed;
    if let Some(parents) = parents {
        for component in parents.split('.') {
            if !container.contains_key(component) {
                container.insert(component, Document::new());
            }
            container = match container.get_mut(component) {
                Some(Bson::Document(inner)) => inner,
                _ => return Err(conflict()),
            };
        }
    }
    if container.contains_key(last) {
        return Err(conflict());
    }
    container.insert(last, value);
    Ok(())
}
