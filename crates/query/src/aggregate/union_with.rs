//! `$unionWith`: passes its input through, then, when the input ends, the documents of
//! another collection run through an optional sub-pipeline, streamed a document at a time.

use bson::{doc, Bson, Document};

use super::context::{Namespace, OutputStream, RunContext};
use super::lookup::parse_sub_pipeline;
use super::parse::Nesting;
use super::sub_pipeline::SubPipelineStream;
use super::Pipeline;
use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};

#[derive(Debug)]
pub(crate) struct UnionWith {
    collection: Namespace,
    pipeline: Option<Pipeline>,
    /// The `pipeline` as given, for explain.
    pipeline_value: Option<Bson>,
}

impl UnionWith {
    pub(crate) fn parse(argument: &Bson, nesting: Nesting) -> QueryResult<UnionWith> {
        match argument {
            Bson::String(collection) => {
                nesting.enter("$unionWith")?;
                Ok(UnionWith { collection: Namespace::in_current_database(collection), pipeline: None, pipeline_value: None })
            }
            Bson::Document(specification) => {
                let mut collection = None;
                let mut pipeline_value = None;
                for (key, value) in specification {
                    match key.as_str() {
                        "coll" => match value {
                            Bson::String(name) => collection = Some(Namespace::in_current_database(name)),
                            other => {
                                return Err(QueryError::TypeMismatch(format!(
                                    "BSON field '$unionWith.coll' is the wrong type '{}', expected type 'string'",
                                    type_name(other)
                                )))
                            }
                        },
                        "pipeline" => pipeline_value = Some(value.clone()),
                        other => return Err(QueryError::unknown_field(&format!("$unionWith.{other}"))),
                    }
                }
                let collection = collection
                    .ok_or_else(|| QueryError::Location(40414, "BSON field '$unionWith.coll' is missing but a required field".into()))?;
                let pipeline = match &pipeline_value {
                    Some(value) => Some(parse_sub_pipeline("$unionWith", value, &[], nesting)?),
                    None => {
                        nesting.enter("$unionWith")?;
                        None
                    }
                };
                Ok(UnionWith { collection, pipeline, pipeline_value })
            }
            other => Err(QueryError::FailedToParse(format!(
                "the $unionWith stage specification must be an object or string, but found {}",
                type_name(other)
            ))),
        }
    }

    pub(crate) fn describe(&self) -> Document {
        let mut description = doc! { "coll": self.collection.collection.clone() };
        description.insert("pipeline", self.pipeline_value.clone().unwrap_or_else(|| Bson::Array(Vec::new())));
        description
    }

    /// The other collection's documents through the sub-pipeline.
    pub(crate) fn open(&self, context: &RunContext) -> QueryResult<Box<dyn OutputStream>> {
        let foreign = context.foreign("$unionWith")?;
        let input = foreign.read(&self.collection, &Document::new())?;
        Ok(Box::new(SubPipelineStream::new(self.pipeline.as_ref(), context, input)))
    }
}
