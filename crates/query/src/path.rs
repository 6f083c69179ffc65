//! Dotted field paths: splitting, array-index components, and the three ways MongoDB walks a
//! path through a document.
//!
//! - Query matching ([`visit_match_values`]): arrays met before the last component are walked
//!   element by element (documents only), numeric components also index into arrays, and an
//!   array at the end yields each element and then the array itself.
//! - Aggregation ([`expression_path_value`]): arrays of documents map to arrays of values;
//!   numeric components are plain field names.
//! - Exact lookup ([`get_path`]): numeric components index arrays, nothing else is traversed.

use bson::{Bson, Document};

use crate::error::{QueryError, QueryResult};

/// Splits a dotted path into components. Empty components are rejected, and so (before
/// anything is allocated) are paths longer than [`crate::limits::MAX_FIELD_PATH_COMPONENTS`].
pub fn split_path(path: &str) -> QueryResult<Vec<String>> {
    crate::limits::check_field_path_length(path)?;
    if path.is_empty() {
        return Err(QueryError::BadValue("FieldPath cannot be constructed with empty string".into()));
    }
    let components: Vec<String> = path.split('.').map(str::to_string).collect();
    if components.iter().any(String::is_empty) {
        return Err(QueryError::BadValue(format!(
            "FieldPath field names may not be empty strings: '{path}'"
        )));
    }
    Ok(components)
}

/// A component that can index an array: ASCII digits without a leading zero (except "0").
pub fn parse_array_index(component: &str) -> Option<usize> {
    let bytes = component.as_bytes();
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if bytes.len() > 1 && bytes.first() == Some(&b'0') {
        return None;
    }
    component.parse::<usize>().ok()
}

/// Exact lookup: documents by field name, arrays by numeric index; no implicit traversal.
pub fn get_path<'a>(document: &'a Document, path: &str) -> Option<&'a Bson> {
    let mut components = path.split('.');
    let first = components.next()?;
    let mut current = document.get(first)?;
    for component in components {
        current = match current {
            Bson::Document(inner) => inner.get(component)?,
            Bson::Array(items) => items.get(parse_array_index(component)?)?,
            _ => return None,
        };
    }
    Some(current)
}

/// How the last component treats an array value while matching.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeafArrays {
    /// Yield each element (with its index), then the array itself.
    ExpandAndWhole,
    /// Yield the array itself only (for $size, $elemMatch).
    WholeOnly,
}

/// One value reached by a path while matching. `value` is `None` for a missing field.
/// `array_position` is the index in the first array the walk went through, if any.
#[derive(Clone, Copy, Debug)]
pub struct PathValue<'a> {
    pub value: Option<&'a Bson>,
    pub array_position: Option<usize>,
    /// True for elements yielded by expanding the array at the end of the path.
    pub from_leaf_expansion: bool,
}

/// Visits every value the path reaches under MongoDB's query traversal rules. The visitor
/// returns true to stop; the function returns true if any visit stopped the walk.
pub fn visit_match_values<'a>(
    document: &'a Document,
    components: &[String],
    leaf_arrays: LeafArrays,
    visitor: &mut dyn FnMut(PathValue<'a>) -> bool,
) -> bool {
    // The walk recurses once per component. Every parser bounds paths (see limits.rs); a
    // longer one from elsewhere reaches nothing rather than risking the stack.
    if components.len() > crate::limits::MAX_FIELD_PATH_COMPONENTS {
        return visitor(PathValue { value: None, array_position: None, from_leaf_expansion: false });
    }
    match components.split_first() {
        None => false,
        Some((first, rest)) => walk(document.get(first.as_str()), rest, leaf_arrays, None, visitor),
    }
}

fn walk<'a>(
    current: Option<&'a Bson>,
    rest: &[String],
    leaf_arrays: LeafArrays,
    position: Option<usize>,
    visitor: &mut dyn FnMut(PathValue<'a>) -> bool,
) -> bool {
    let Some((next, remaining)) = rest.split_first() else {
        if let (Some(Bson::Array(items)), LeafArrays::ExpandAndWhole) = (current, leaf_arrays) {
            for (index, item) in items.iter().enumerate() {
                let visit = PathValue {
                    value: Some(item),
                    array_position: position.or(Some(index)),
                    from_leaf_expansion: true,
                };
                if visitor(visit) {
                    return true;
                }
            }
        }
        return visitor(PathValue { value: current, array_position: position, from_leaf_expansion: false });
    };
    match current {
        Some(Bson::Document(inner)) => walk(inner.get(next.as_str()), remaining, leaf_arrays, position, visitor),
        Some(Bson::Array(items)) => {
            // A numeric component indexes the array; documents in it that really have a field
            // of that name are walked too, but their missing fields do not count as null.
            let numeric = parse_array_index(next);
            if let Some(index) = numeric {
                match items.get(index) {
                    Some(item) => {
                        if walk(Some(item), remaining, leaf_arrays, position, visitor) {
                            return true;
                        }
                    }
                    None => {
                        let missing = PathValue { value: None, array_position: position, from_leaf_expansion: false };
                        if visitor(missing) {
                            return true;
                        }
                    }
                }
            }
            for (index, item) in items.iter().enumerate() {
                if let Bson::Document(inner) = item {
                    let field = inner.get(next.as_str());
                    if numeric.is_some() && field.is_none() {
                        continue;
                    }
                    let element_position = position.or(Some(index));
                    if walk(field, remaining, leaf_arrays, element_position, visitor) {
                        return true;
                    }
                }
            }
            false
        }
        _ => visitor(PathValue { value: None, array_position: position, from_leaf_expansion: false }),
    }
}

/// Aggregation field-path semantics: `None` when missing; arrays of documents map to arrays
/// of the values found (missing values dropped, nested arrays kept nested).
///
/// Recursion is bounded: once per component (at most
/// [`crate::limits::MAX_FIELD_PATH_COMPONENTS`], longer paths reach nothing) and once per
/// nested array, which the document's own nesting bounds.
pub fn expression_path_value(value: &Bson, components: &[String]) -> Option<Bson> {
    if components.len() > crate::limits::MAX_FIELD_PATH_COMPONENTS {
        return None;
    }
    expression_path_value_bounded(value, components, 0)
}

/// `depth` counts the values descended through; past the BSON depth limit (which no document
/// reaching here exceeds) nothing more is found, so the recursion is bounded by construction.
fn expression_path_value_bounded(value: &Bson, components: &[String], depth: usize) -> Option<Bson> {
    let Some((first, rest)) = components.split_first() else {
        return Some(value.clone());
    };
    if depth > crate::limits::MAX_BSON_DEPTH + crate::limits::MAX_FIELD_PATH_COMPONENTS {
        return None;
    }
    match value {
        Bson::Document(document) => expression_path_value_bounded(document.get(first.as_str())?, rest, depth + 1),
        Bson::Array(items) => {
            let mapped: Vec<Bson> = items
                .iter()
                .filter(|item| matches!(item, Bson::Document(_) | Bson::Array(_)))
                .filter_map(|item| expression_path_value_bounded(item, components, depth + 1))
                .collect();
            Some(Bson::Array(mapped))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn components(path: &str) -> Vec<String> {
        split_path(path).unwrap_or_default()
    }

    fn collect(document: &Document, path: &str, leaf_arrays: LeafArrays) -> Vec<(Option<Bson>, Option<usize>)> {
        let mut seen = Vec::new();
        visit_match_values(document, &components(path), leaf_arrays, &mut |visit| {
            seen.push((visit.value.cloned(), visit.array_position));
            false
        });
        seen
    }

    #[test]
    fn split_rejects_empty_components() {
        assert!(split_path("a..b").is_err());
        assert!(split_path("").is_err());
        assert_eq!(split_path("a.b").ok(), Some(vec!["a".to_string(), "b".to_string()]));
    }

    #[test]
    fn array_index_components() {
        assert_eq!(parse_array_index("0"), Some(0));
        assert_eq!(parse_array_index("12"), Some(12));
        assert_eq!(parse_array_index("01"), None);
        assert_eq!(parse_array_index("-1"), None);
        assert_eq!(parse_array_index("a"), None);
    }

    #[test]
    fn exact_lookup_indexes_arrays() {
        let document = doc! {"a": {"b": [10, {"c": 5}]}};
        assert_eq!(get_path(&document, "a.b.0"), Some(&Bson::Int32(10)));
        assert_eq!(get_path(&document, "a.b.1.c"), Some(&Bson::Int32(5)));
        assert_eq!(get_path(&document, "a.b.c"), None);
        assert_eq!(get_path(&document, "x"), None);
    }

    #[test]
    fn match_walk_expands_leaf_arrays_and_yields_whole() {
        let document = doc! {"a": [1, 5]};
        let seen = collect(&document, "a", LeafArrays::ExpandAndWhole);
        assert_eq!(
            seen,
            vec![
                (Some(Bson::Int32(1)), Some(0)),
                (Some(Bson::Int32(5)), Some(1)),
                (Some(Bson::Array(vec![Bson::Int32(1), Bson::Int32(5)])), None),
            ]
        );
        assert_eq!(collect(&document, "a", LeafArrays::WholeOnly).len(), 1);
    }

    #[test]
    fn match_walk_through_arrays_of_documents() {
        let document = doc! {"a": [{"b": 1}, {"c": 2}, 7]};
        let seen = collect(&document, "a.b", LeafArrays::ExpandAndWhole);
        assert_eq!(seen, vec![(Some(Bson::Int32(1)), Some(0)), (None, Some(1))]);
        let indexed = collect(&document, "a.1.c", LeafArrays::ExpandAndWhole);
        assert_eq!(indexed, vec![(Some(Bson::Int32(2)), None)]);
        let missing = collect(&doc! {"a": 5}, "a.b", LeafArrays::ExpandAndWhole);
        assert_eq!(missing, vec![(None, None)]);
    }

    #[test]
    fn expression_paths_map_over_arrays() {
        let root = Bson::Document(doc! {"a": [{"b": 1}, {"c": 2}, {"b": [3]}, 4]});
        assert_eq!(
            expression_path_value(&root, &components("a.b")),
            Some(Bson::Array(vec![Bson::Int32(1), Bson::Array(vec![Bson::Int32(3)])]))
        );
        assert_eq!(expression_path_value(&root, &components("x.y")), None);
        let numeric = Bson::Document(doc! {"a": [{"0": "x"}]});
        assert_eq!(
            expression_path_value(&numeric, &components("a.0")),
            Some(Bson::Array(vec![Bson::String("x".into())]))
        );
    }
}
