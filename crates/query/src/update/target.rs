//! Update paths: parsing (`a.b`, `a.$`, `a.$[]`, `a.$[elem]`) and navigation of a document
//! to the slots an operator reads and writes, creating intermediate documents when asked.

use bson::{Bson, Document};

use crate::error::{QueryError, QueryResult};
use crate::filter::Filter;
use crate::path::parse_array_index;

/// One component of an update path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Component {
    /// A field name, or an array index when the container is an array.
    Field(String),
    /// `$`: the array position the query matched.
    Positional,
    /// `$[]`: every element.
    AllPositional,
    /// `$[identifier]`: elements matching that array filter.
    Filtered(String),
}

impl Component {
    pub(crate) fn text(&self) -> String {
        match self {
            Component::Field(name) => name.clone(),
            Component::Positional => "$".into(),
            Component::AllPositional => "$[]".into(),
            Component::Filtered(identifier) => format!("$[{identifier}]"),
        }
    }
}

/// A parsed update path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UpdatePath {
    pub dotted: String,
    pub components: Vec<Component>,
}

impl UpdatePath {
    pub(crate) fn parse(dotted: &str) -> QueryResult<UpdatePath> {
        if dotted.is_empty() {
            return Err(QueryError::EmptyFieldName("An empty update path is not valid.".into()));
        }
        // Before anything is built: applying a path recurses once per component.
        crate::limits::check_field_path_length(dotted)?;
        let mut components = Vec::new();
        let mut positional_count = 0;
        for part in dotted.split('.') {
            if part.is_empty() {
                return Err(QueryError::EmptyFieldName(format!(
                    "The update path '{dotted}' contains an empty field name, which is not allowed."
                )));
            }
            let component = if part == "$" {
                positional_count += 1;
                Component::Positional
            } else if part == "$[]" {
                Component::AllPositional
            } else if let Some(identifier) = part.strip_prefix("$[").and_then(|rest| rest.strip_suffix(']')) {
                Component::Filtered(identifier.to_string())
            } else if part.starts_with('$') {
                return Err(QueryError::DollarPrefixedFieldName(format!(
                    "The dollar ($) prefixed field '{part}' in '{dotted}' is not valid for storage."
                )));
            } else {
                Component::Field(part.to_string())
            };
            components.push(component);
        }
        if positional_count > 1 {
            return Err(QueryError::BadValue(format!(
                "Too many positional (i.e. '$') elements found in path '{dotted}'"
            )));
        }
        Ok(UpdatePath { dotted: dotted.to_string(), components })
    }

    pub(crate) fn is_dynamic(&self) -> bool {
        self.components.iter().any(|component| !matches!(component, Component::Field(_)))
    }

    pub(crate) fn texts(&self) -> Vec<String> {
        self.components.iter().map(Component::text).collect()
    }
}

/// What an operator does at one slot.
pub(crate) enum LeafAction {
    Keep,
    Set(Bson),
    Remove,
}

/// Inputs for navigation that do not change while one update is applied.
pub(crate) struct Navigation<'a> {
    pub matched_array_position: Option<usize>,
    pub array_filters: &'a [(String, Filter)],
    /// Create missing intermediate documents (and allow writes) when true.
    pub creating: bool,
}

impl Navigation<'_> {
    fn filter_for(&self, identifier: &str) -> QueryResult<&Filter> {
        self.array_filters
            .iter()
            .find(|(name, _)| name == identifier)
            .map(|(_, filter)| filter)
            .ok_or_else(|| QueryError::BadValue(format!("No array filter found for identifier '{identifier}'")))
    }
}

/// Applies `leaf` at every slot `components` reaches under `root`. The leaf receives the
/// current value (`None` if missing) and the slot's dotted path.
pub(crate) fn apply_at_path(
    root: &mut Document,
    components: &[Component],
    navigation: &Navigation<'_>,
    leaf: &mut dyn FnMut(Option<&Bson>, &str) -> QueryResult<LeafAction>,
) -> QueryResult<()> {
    let mut container = Bson::Document(std::mem::take(root));
    let result = descend(&mut container, components, navigation, String::new(), leaf);
    if let Bson::Document(document) = container {
        *root = document;
    }
    result
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() { key.to_string() } else { format!("{prefix}.{key}") }
}

/// Expands one component against the container into concrete keys.
fn resolve_keys(container: &Bson, component: &Component, navigation: &Navigation<'_>, prefix: &str) -> QueryResult<Vec<String>> {
    match component {
        Component::Field(name) => Ok(vec![name.clone()]),
        Component::Positional => match navigation.matched_array_position {
            Some(position) => Ok(vec![position.to_string()]),
            None => Err(QueryError::BadValue("The positional operator did not find the match needed from the query.".into())),
        },
        Component::AllPositional | Component::Filtered(_) => {
            let Bson::Array(items) = container else {
                return Err(QueryError::BadValue(format!(
                    "The path '{prefix}' must exist in the document in order to apply array updates."
                )));
            };
            let mut keys = Vec::with_capacity(items.len());
            let filter = match component {
                Component::Filtered(identifier) => Some((identifier, navigation.filter_for(identifier)?)),
                _ => None,
            };
            for (index, item) in items.iter().enumerate() {
                let selected = match &filter {
                    None => true,
                    Some((identifier, filter)) => {
                        let mut wrapper = Document::new();
                        wrapper.insert(identifier.as_str(), item.clone());
                        filter.matches(&wrapper)
                    }
                };
                if selected {
                    keys.push(index.to_string());
                }
            }
            Ok(keys)
        }
    }
}

fn describe_element(prefix: &str, value: &Bson) -> String {
    let name = prefix.rsplit('.').next().unwrap_or(prefix);
    format!("{{{name}: {value}}}")
}

fn descend(
    container: &mut Bson,
    components: &[Component],
    navigation: &Navigation<'_>,
    prefix: String,
    leaf: &mut dyn FnMut(Option<&Bson>, &str) -> QueryResult<LeafAction>,
) -> QueryResult<()> {
    let Some((component, rest)) = components.split_first() else {
        return Ok(());
    };
    let keys = resolve_keys(container, component, navigation, &prefix)?;
    for key in keys {
        let path = join(&prefix, &key);
        if rest.is_empty() {
            apply_leaf(container, &key, &path, &prefix, navigation, leaf)?;
            continue;
        }
        let blocked = match &*container {
            Bson::Document(_) => false,
            Bson::Array(_) => parse_array_index(&key).is_none(),
            _ => true,
        };
        if blocked {
            if !navigation.creating {
                continue;
            }
            return Err(QueryError::PathNotViable(format!(
                "Cannot create field '{key}' in element {}",
                describe_element(&prefix, container)
            )));
        }
        let child: Option<&mut Bson> = match &mut *container {
            Bson::Document(document) => {
                if !document.contains_key(&key) {
                    if !navigation.creating {
                        continue;
                    }
                    document.insert(key.clone(), Bson::Document(Document::new()));
                }
                document.get_mut(&key)
            }
            Bson::Array(items) => {
                let Some(index) = parse_array_index(&key) else { continue };
                if index >= items.len() {
                    if !navigation.creating {
                        continue;
                    }
                    pad_array(items, index)?;
                    items.push(Bson::Document(Document::new()));
                }
                items.get_mut(index)
            }
            _ => None,
        };
        let Some(child) = child else { continue };
        if !matches!(child, Bson::Document(_) | Bson::Array(_)) {
            // A scalar in the middle of the path: reading finds nothing, writing cannot proceed,
            // unless the next component is dynamic (which reports its own error).
            if !navigation.creating {
                continue;
            }
            if let Some(Component::Field(next)) = rest.first() {
                return Err(QueryError::PathNotViable(format!(
                    "Cannot create field '{next}' in element {}",
                    describe_element(&path, child)
                )));
            }
        }
        descend(child, rest, navigation, path, leaf)?;
    }
    Ok(())
}

/// Bound on padding an array with nulls when writing past its end (MongoDB allows 1,500,000).
const MAX_ARRAY_PADDING: usize = 1_500_000;

fn pad_array(items: &mut Vec<Bson>, index: usize) -> QueryResult<()> {
    if index > items.len().saturating_add(MAX_ARRAY_PADDING) {
        return Err(QueryError::BadValue(format!(
            "can't backfill array to larger than {MAX_ARRAY_PADDING} elements"
        )));
    }
    while items.len() < index {
        items.push(Bson::Null);
    }
    Ok(())
}

fn apply_leaf(
    container: &mut Bson,
    key: &str,
    path: &str,
    prefix: &str,
    navigation: &Navigation<'_>,
    leaf: &mut dyn FnMut(Option<&Bson>, &str) -> QueryResult<LeafAction>,
) -> QueryResult<()> {
    match container {
        Bson::Document(document) => match leaf(document.get(key), path)? {
            LeafAction::Keep => Ok(()),
            LeafAction::Set(value) => {
                // Insert keeps an existing field's position; a new field is appended.
                document.insert(key.to_string(), value);
                Ok(())
            }
            LeafAction::Remove => {
                document.remove(key);
                Ok(())
            }
        },
        Bson::Array(items) => {
            let Some(index) = parse_array_index(key) else {
                return match leaf(None, path)? {
                    LeafAction::Set(_) => Err(QueryError::PathNotViable(format!(
                        "Cannot create field '{key}' in element {}",
                        describe_element(prefix, container)
                    ))),
                    _ => Ok(()),
                };
            };
            match leaf(items.get(index), path)? {
                LeafAction::Keep => Ok(()),
                LeafAction::Set(value) => {
                    if let Some(slot) = items.get_mut(index) {
                        *slot = value;
                    } else {
                        pad_array(items, index)?;
                        items.push(value);
                    }
                    Ok(())
                }
                LeafAction::Remove => {
                    // $unset on an array element leaves a null hole, as MongoDB does.
                    if let Some(slot) = items.get_mut(index) {
                        *slot = Bson::Null;
                    }
                    Ok(())
                }
            }
        }
        scalar => match leaf(None, path)? {
            LeafAction::Set(_) if navigation.creating => Err(QueryError::PathNotViable(format!(
                "Cannot create field '{key}' in element {}",
                describe_element(prefix, scalar)
            ))),
            _ => Ok(()),
        },
    }
}
