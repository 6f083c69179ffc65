//! Sort specifications (`{a: 1, "b.c": -1}`) and MongoDB's document ordering for them.
//!
//! A path that reaches an array sorts by its smallest element ascending and its largest
//! descending; a missing field sorts as null; an empty array sorts before null.

use std::cmp::Ordering;

use std::sync::Arc;

use bson::{Bson, Document};
use myriad_collation::Collator;
use myriad_keystring::compare::{compare_values_collated, StringComparator};

use crate::error::{QueryError, QueryResult};
use crate::numeric::integral_value;
use crate::path::{split_path, visit_match_values, LeafArrays};

/// A parsed sort specification, and the collation strings sort by (None: bytewise).
#[derive(Clone, Debug, Default)]
pub struct SortSpec {
    fields: Vec<SortField>,
    collator: Option<Arc<Collator>>,
}

impl PartialEq for SortSpec {
    fn eq(&self, other: &SortSpec) -> bool {
        self.fields == other.fields && myriad_collation::same_collation(self.collator.as_deref(), other.collator.as_deref())
    }
}

#[derive(Clone, Debug, PartialEq)]
struct SortField {
    path: Vec<String>,
    ascending: bool,
}

/// One field's sort key for one document.
#[derive(Clone, Debug, PartialEq)]
pub enum SortKey {
    /// An empty array: below every value, including null.
    EmptyArray,
    Value(Bson),
}

impl SortKey {
    fn compare(&self, other: &SortKey, collation: Option<&dyn StringComparator>) -> Ordering {
        match (self, other) {
            (SortKey::EmptyArray, SortKey::EmptyArray) => Ordering::Equal,
            (SortKey::EmptyArray, SortKey::Value(_)) => Ordering::Less,
            (SortKey::Value(_), SortKey::EmptyArray) => Ordering::Greater,
            (SortKey::Value(left), SortKey::Value(right)) => compare_values_collated(left, right, collation),
        }
    }
}

impl SortSpec {
    /// Parses `{field: 1 | -1, ...}`. An empty specification means "no sort".
    pub fn parse(specification: &Document) -> QueryResult<SortSpec> {
        let mut fields = Vec::with_capacity(specification.len());
        for (key, value) in specification {
            crate::limits::check_field_path_length(key)?;
            let path = split_path(key).map_err(|_| QueryError::BadValue(format!("Bad sort specification: invalid field path '{key}'")))?;
            let ascending = match value {
                Bson::Document(meta) if meta.contains_key("$meta") => {
                    return Err(QueryError::BadValue("$meta sort keys are not supported".into()));
                }
                number => match integral_value(number) {
                    Some(1) => true,
                    Some(-1) => false,
                    _ => {
                        return Err(QueryError::Location(15975, "$sort key ordering must be 1 (for ascending) or -1 (for descending)".into()));
                    }
                },
            };
            fields.push(SortField { path, ascending });
        }
        Ok(SortSpec { fields, collator: None })
    }

    /// The same specification sorting strings by `collator` (None: bytewise).
    pub fn with_collator(mut self, collator: Option<Arc<Collator>>) -> SortSpec {
        self.collator = collator;
        self
    }

    /// The collation strings sort by (None: simple).
    pub fn collator(&self) -> Option<&Arc<Collator>> {
        self.collator.as_ref()
    }

    fn collation(&self) -> Option<&dyn StringComparator> {
        self.collator.as_deref().map(|collator| collator as &dyn StringComparator)
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The specification as a document (`{path: 1 | -1, ...}`), as explain shows it.
    pub fn pattern(&self) -> Document {
        self.fields
            .iter()
            .map(|field| (field.path.join("."), Bson::Int32(if field.ascending { 1 } else { -1 })))
            .collect()
    }

    /// The sort keys of a document, one per field (compute once, then use [`SortSpec::compare_keys`]).
    pub fn sort_key(&self, document: &Document) -> Vec<SortKey> {
        self.fields.iter().map(|field| field_key(document, &field.path, field.ascending, self.collation())).collect()
    }

    /// Compares precomputed keys from [`SortSpec::sort_key`].
    pub fn compare_keys(&self, left: &[SortKey], right: &[SortKey]) -> Ordering {
        for ((field, left), right) in self.fields.iter().zip(left).zip(right) {
            let ordering = left.compare(right, self.collation());
            let ordering = if field.ascending { ordering } else { ordering.reverse() };
            if ordering != Ordering::Equal {
                return ordering;
            }
        }
        Ordering::Equal
    }

    /// Orders two documents by this specification.
    pub fn compare(&self, left: &Document, right: &Document) -> Ordering {
        self.compare_keys(&self.sort_key(left), &self.sort_key(right))
    }

    /// Sorts documents in place (stable), computing each key once.
    pub fn sort_documents(&self, documents: &mut Vec<Document>) {
        if self.is_empty() {
            return;
        }
        let mut keyed: Vec<(Vec<SortKey>, Document)> = documents.drain(..).map(|document| (self.sort_key(&document), document)).collect();
        keyed.sort_by(|left, right| self.compare_keys(&left.0, &right.0));
        documents.extend(keyed.into_iter().map(|(_, document)| document));
    }
}

fn field_key(document: &Document, path: &[String], ascending: bool, collation: Option<&dyn StringComparator>) -> SortKey {
    let mut best: Option<SortKey> = None;
    let wanted = if ascending { Ordering::Less } else { Ordering::Greater };
    visit_match_values(document, path, LeafArrays::ExpandAndWhole, &mut |visit| {
        let candidate = match visit.value {
            None => SortKey::Value(Bson::Null),
            Some(Bson::Array(items)) if !visit.from_leaf_expansion => {
                if !items.is_empty() {
                    // Its elements were visited already.
                    return false;
                }
                SortKey::EmptyArray
            }
            Some(value) => SortKey::Value(value.clone()),
        };
        if !matches!(best.as_ref(), Some(current) if candidate.compare(current, collation) != wanted) {
            best = Some(candidate);
        }
        false
    });
    best.unwrap_or(SortKey::Value(Bson::Null))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn sorted(specification: Document, documents: Vec<Document>) -> Vec<Bson> {
        let spec = SortSpec::parse(&specification).unwrap_or_default();
        let mut documents = documents;
        spec.sort_documents(&mut documents);
        documents.iter().map(|document| document.get("_id").cloned().unwrap_or(Bson::Null)).collect()
    }

    #[test]
    fn scalar_sorts_across_types() {
        let documents = vec![
            doc! {"_id": 1, "a": "x"},
            doc! {"_id": 2, "a": 5},
            doc! {"_id": 3},
            doc! {"_id": 4, "a": null},
            doc! {"_id": 5, "a": 2.5},
        ];
        assert_eq!(sorted(doc! {"a": 1}, documents.clone()), vec![3.into(), 4.into(), 5.into(), 2.into(), 1.into()]);
        assert_eq!(sorted(doc! {"a": -1}, documents), vec![1.into(), 2.into(), 5.into(), 3.into(), 4.into()]);
    }

    #[test]
    fn arrays_sort_by_min_ascending_and_max_descending() {
        let documents = vec![
            doc! {"_id": 1, "a": [1, 10]},
            doc! {"_id": 2, "a": [5]},
            doc! {"_id": 3, "a": []},
            doc! {"_id": 4, "a": null},
        ];
        assert_eq!(sorted(doc! {"a": 1}, documents.clone()), vec![3.into(), 4.into(), 1.into(), 2.into()]);
        assert_eq!(sorted(doc! {"a": -1}, documents), vec![1.into(), 2.into(), 4.into(), 3.into()]);
    }

    #[test]
    fn compound_and_dotted_keys() {
        let documents = vec![
            doc! {"_id": 1, "a": 1, "b": {"c": 2}},
            doc! {"_id": 2, "a": 1, "b": {"c": 1}},
            doc! {"_id": 3, "a": 0, "b": [{"c": 9}, {"c": 0}]},
        ];
        assert_eq!(sorted(doc! {"a": -1, "b.c": 1}, documents.clone()), vec![2.into(), 1.into(), 3.into()]);
        assert_eq!(sorted(doc! {"b.c": 1}, documents), vec![3.into(), 2.into(), 1.into()]);
    }

    #[test]
    fn invalid_specifications() {
        for specification in [doc! {"a": 2}, doc! {"a": "x"}, doc! {"a": 0}, doc! {"a": {"$meta": "textScore"}}, doc! {"": 1}] {
            assert!(SortSpec::parse(&specification).is_err(), "{specification}");
        }
        assert!(SortSpec::parse(&doc! {"a": 1.0, "b": -1_i64}).is_ok());
        let spec = SortSpec::parse(&doc! {}).unwrap_or_default();
        assert_eq!(spec.compare(&doc! {"a": 1}, &doc! {"a": 2}), Ordering::Equal);
    }
}
