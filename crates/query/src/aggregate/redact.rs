//! `$redact`: an expression decides, for the document and then for each embedded document it
//! descends into, whether to keep it whole (`$$KEEP`), drop it (`$$PRUNE`) or keep its
//! fields and look at each embedded document in turn (`$$DESCEND`). Descending is iterative
//! (an explicit stack), so a deep document costs no native stack.

use bson::{Bson, Document};

use super::context::{RunContext, TransformStage};
use crate::error::{QueryError, QueryResult};
use crate::expression::Expression;

/// The values `$$DESCEND`, `$$PRUNE` and `$$KEEP` evaluate to: deprecated symbol values no
/// document holds in practice, so a string "keep" is not taken for `$$KEEP`.
const DESCEND: &str = "$$DESCEND";
const PRUNE: &str = "$$PRUNE";
const KEEP: &str = "$$KEEP";

#[derive(Debug)]
pub(crate) struct Redact {
    expression: Expression,
    variables: std::sync::Arc<Vec<(String, Bson)>>,
}

enum Decision {
    Keep,
    Prune,
    Descend,
}

impl Redact {
    pub(crate) fn parse(argument: &Bson) -> QueryResult<Redact> {
        let names = ["DESCEND", "PRUNE", "KEEP"].map(str::to_string);
        let expression = crate::expression::with_declared_variables(&names, || Expression::parse(argument))?;
        let variables = std::sync::Arc::new(vec![
            ("DESCEND".to_string(), Bson::Symbol(DESCEND.into())),
            ("PRUNE".to_string(), Bson::Symbol(PRUNE.into())),
            ("KEEP".to_string(), Bson::Symbol(KEEP.into())),
        ]);
        Ok(Redact { expression, variables })
    }

    fn decide(&self, document: &Document, context: &RunContext) -> QueryResult<Decision> {
        let mut variables = (*context.variables).clone();
        variables.extend(self.variables.iter().cloned());
        let variables = std::sync::Arc::new(variables);
        let value = crate::expression::with_bound_variables(&variables, || self.expression.evaluate_optional(document))?;
        match &value {
            Some(Bson::Symbol(text)) if text == DESCEND => Ok(Decision::Descend),
            Some(Bson::Symbol(text)) if text == PRUNE => Ok(Decision::Prune),
            Some(Bson::Symbol(text)) if text == KEEP => Ok(Decision::Keep),
            other => Err(QueryError::Location(
                17053,
                format!(
                    "$redact's expression should not return anything aside from the variables $$KEEP, $$DESCEND, and $$PRUNE, but returned {}",
                    other.as_ref().map_or("MISSING".to_string(), ToString::to_string)
                ),
            )),
        }
    }

    /// The redacted document, or None when it is pruned.
    fn redact(&self, document: Document, context: &RunContext) -> QueryResult<Option<Document>> {
        match self.decide(&document, context)? {
            Decision::Keep => return Ok(Some(document)),
            Decision::Prune => return Ok(None),
            Decision::Descend => {}
        }
        // Each frame: the fields still to look at, and the document being rebuilt.
        let mut stack: Vec<Frame> = vec![Frame::new(document)];
        loop {
            let Some(frame) = stack.last_mut() else { return Ok(None) };
            let Some((name, value)) = frame.pending.next() else {
                let Some(finished) = stack.pop() else { return Ok(None) };
                let rebuilt = finished.output;
                match stack.last_mut() {
                    None => return Ok(Some(rebuilt)),
                    Some(parent) => parent.place(finished.slot, Bson::Document(rebuilt)),
                }
                continue;
            };
            match value {
                Bson::Document(inner) => match self.decide(&inner, context)? {
                    Decision::Keep => {
                        frame.output.insert(name, Bson::Document(inner));
                    }
                    Decision::Prune => {}
                    Decision::Descend => stack.push(Frame::nested(inner, Slot::Field(name))),
                },
                Bson::Array(items) => {
                    let redacted = self.redact_array(items, context)?;
                    frame.output.insert(name, Bson::Array(redacted));
                }
                other => {
                    frame.output.insert(name, other);
                }
            }
        }
    }

    /// An array's elements: documents are redacted (one level of arrays of arrays is kept as
    /// is beyond their documents' decisions), other values kept.
    fn redact_array(&self, items: Vec<Bson>, context: &RunContext) -> QueryResult<Vec<Bson>> {
        let mut kept = Vec::with_capacity(items.len());
        for item in items {
            match item {
                Bson::Document(inner) => {
                    if let Some(redacted) = self.redact(inner, context)? {
                        kept.push(Bson::Document(redacted));
                    }
                }
                Bson::Array(nested) => kept.push(Bson::Array(self.redact_array(nested, context)?)),
                other => kept.push(other),
            }
        }
        Ok(kept)
    }
}

enum Slot {
    Root,
    Field(String),
}

struct Frame {
    pending: bson::document::IntoIter,
    output: Document,
    slot: Slot,
}

impl Frame {
    fn new(document: Document) -> Frame {
        Frame { pending: document.into_iter(), output: Document::new(), slot: Slot::Root }
    }

    fn nested(document: Document, slot: Slot) -> Frame {
        Frame { pending: document.into_iter(), output: Document::new(), slot }
    }

    fn place(&mut self, slot: Slot, value: Bson) {
        if let Slot::Field(name) = slot {
            self.output.insert(name, value);
        }
    }
}

impl TransformStage for Redact {
    fn apply(&self, document: Document, context: &RunContext) -> QueryResult<Option<Document>> {
        self.redact(document, context)
    }
}
