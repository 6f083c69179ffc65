//! First-stage sources the command layer answers from server state: `$collStats`,
//! `$indexStats`, `$listSessions` and `$currentOp`. The query crate parses and validates
//! their arguments (MongoDB's codes) and checks that they come first; the documents come from
//! the caller, as the pipeline's input.

use bson::{doc, Bson, Document};

use crate::bson_types::type_name;
use crate::error::{QueryError, QueryResult};

/// The stage names handled here.
pub fn is_source_stage(name: &str) -> bool {
    matches!(name, "$collStats" | "$indexStats" | "$listSessions" | "$listLocalSessions" | "$currentOp")
}

/// A parsed source stage.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceStage {
    CollStats {
        /// `latencyStats`, with `histograms`.
        latency_stats: Option<bool>,
        /// `storageStats`, with its `scale`.
        storage_stats: Option<i64>,
        count: bool,
        query_exec_stats: bool,
        specification: Document,
    },
    IndexStats,
    /// `$listSessions`, or `$listLocalSessions` (`local`: the process's own session cache).
    ListSessions {
        local: bool,
        all_users: bool,
        users: Vec<Document>,
        specification: Document,
    },
    CurrentOp {
        all_users: bool,
        idle_connections: bool,
        idle_cursors: bool,
        idle_sessions: bool,
        local_ops: bool,
        specification: Document,
    },
}

fn unknown_field(stage: &str, field: &str) -> QueryError {
    QueryError::unknown_field(&format!("{stage}.{field}"))
}

fn wrong_type(stage: &str, field: &str, value: &Bson, expected: &str) -> QueryError {
    QueryError::TypeMismatch(format!("BSON field '{stage}.{field}' is the wrong type '{}', expected type '{expected}'", type_name(value)))
}

fn boolean(stage: &str, field: &str, value: &Bson) -> QueryResult<bool> {
    match value {
        Bson::Boolean(flag) => Ok(*flag),
        other => Err(wrong_type(stage, field, other, "bool")),
    }
}

impl SourceStage {
    pub fn parse(name: &str, argument: &Bson) -> QueryResult<SourceStage> {
        match name {
            "$collStats" => parse_coll_stats(argument),
            "$indexStats" => match argument {
                Bson::Document(empty) if empty.is_empty() => Ok(SourceStage::IndexStats),
                _ => Err(QueryError::Location(28803, "The $indexStats stage specification must be an empty object".into())),
            },
            "$listSessions" => parse_list_sessions(argument, false),
            "$listLocalSessions" => parse_list_sessions(argument, true),
            _ => parse_current_op(argument),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            SourceStage::CollStats { .. } => "$collStats",
            SourceStage::IndexStats => "$indexStats",
            SourceStage::ListSessions { local: false, .. } => "$listSessions",
            SourceStage::ListSessions { local: true, .. } => "$listLocalSessions",
            SourceStage::CurrentOp { .. } => "$currentOp",
        }
    }

    /// The stage as explain shows it.
    pub fn describe(&self) -> Document {
        let specification = match self {
            SourceStage::CollStats { specification, .. } | SourceStage::ListSessions { specification, .. } | SourceStage::CurrentOp { specification, .. } => {
                specification.clone()
            }
            SourceStage::IndexStats => Document::new(),
        };
        doc! { self.name(): specification }
    }
}

fn parse_coll_stats(argument: &Bson) -> QueryResult<SourceStage> {
    const STAGE: &str = "$collStats";
    let Bson::Document(specification) = argument else {
        return Err(QueryError::Location(5447000, format!("$collStats must take a nested object but found: {argument}")));
    };
    let (mut latency_stats, mut storage_stats, mut count, mut query_exec_stats) = (None, None, false, false);
    for (key, value) in specification {
        let Bson::Document(options) = value else {
            return Err(wrong_type(STAGE, key, value, "object"));
        };
        match key.as_str() {
            "latencyStats" => {
                let mut histograms = false;
                for (option, option_value) in options {
                    match option.as_str() {
                        "histograms" => histograms = boolean("$collStats.latencyStats", option, option_value)?,
                        other => return Err(unknown_field("$collStats.latencyStats", other)),
                    }
                }
                latency_stats = Some(histograms);
            }
            "storageStats" => {
                let mut scale = 1;
                for (option, option_value) in options {
                    match option.as_str() {
                        "scale" => {
                            scale = crate::expression::integral_value(option_value).ok_or_else(|| wrong_type("$collStats.storageStats", option, option_value, "int"))?;
                            if scale < 1 {
                                return Err(QueryError::Location(51024, format!("BSON field 'scale' value must be >= 1, actual value '{scale}'")));
                            }
                        }
                        "verbose" | "waitForLock" | "numericOnly" => {
                            boolean("$collStats.storageStats", option, option_value)?;
                        }
                        other => return Err(unknown_field("$collStats.storageStats", other)),
                    }
                }
                storage_stats = Some(scale);
            }
            "count" => {
                if !options.is_empty() {
                    return Err(unknown_field("$collStats.count", options.keys().next().map(String::as_str).unwrap_or_default()));
                }
                count = true;
            }
            "queryExecStats" => {
                if !options.is_empty() {
                    return Err(unknown_field("$collStats.queryExecStats", options.keys().next().map(String::as_str).unwrap_or_default()));
                }
                query_exec_stats = true;
            }
            other => return Err(unknown_field(STAGE, other)),
        }
    }
    Ok(SourceStage::CollStats { latency_stats, storage_stats, count, query_exec_stats, specification: specification.clone() })
}

fn parse_list_sessions(argument: &Bson, local: bool) -> QueryResult<SourceStage> {
    let stage = if local { "$listLocalSessions" } else { "$listSessions" };
    let Bson::Document(specification) = argument else {
        return Err(QueryError::TypeMismatch(format!("{stage} options must be specified in an object, but found: {}", type_name(argument))));
    };
    let (mut all_users, mut users) = (false, Vec::new());
    for (key, value) in specification {
        match key.as_str() {
            "allUsers" => all_users = boolean(stage, key, value)?,
            "users" => {
                let Bson::Array(items) = value else { return Err(wrong_type(stage, key, value, "array")) };
                for item in items {
                    let Bson::Document(user) = item else { return Err(wrong_type(stage, key, item, "object")) };
                    users.push(user.clone());
                }
            }
            "$_internalPredicate" => {}
            other => return Err(unknown_field(stage, other)),
        }
    }
    if all_users && !users.is_empty() {
        return Err(QueryError::Location(ErrorCodeFor::INVALID_OPTIONS, "Must specify only one of 'allUsers' or 'users'".into()));
    }
    Ok(SourceStage::ListSessions { local, all_users, users, specification: specification.clone() })
}

/// Codes used here that have no variant of their own.
struct ErrorCodeFor;

impl ErrorCodeFor {
    const INVALID_OPTIONS: i32 = 72;
}

fn parse_current_op(argument: &Bson) -> QueryResult<SourceStage> {
    const STAGE: &str = "$currentOp";
    let Bson::Document(specification) = argument else {
        return Err(QueryError::FailedToParse(format!("$currentOp options must be specified in an object, but found: {}", type_name(argument))));
    };
    let (mut all_users, mut idle_connections, mut idle_cursors, mut idle_sessions, mut local_ops) = (false, false, false, true, false);
    for (key, value) in specification {
        match key.as_str() {
            "allUsers" => all_users = boolean(STAGE, key, value)?,
            "idleConnections" => idle_connections = boolean(STAGE, key, value)?,
            "idleCursors" => idle_cursors = boolean(STAGE, key, value)?,
            "idleSessions" => idle_sessions = boolean(STAGE, key, value)?,
            "localOps" => local_ops = boolean(STAGE, key, value)?,
            "backtrace" | "truncateOps" => {
                boolean(STAGE, key, value)?;
            }
            "targetAllNodes" => {
                if boolean(STAGE, key, value)? {
                    return Err(QueryError::FailedToParse("The 'targetAllNodes' option is only valid on a sharded cluster".into()));
                }
            }
            other => return Err(QueryError::FailedToParse(format!("Unrecognized option '{other}' in $currentOp stage."))),
        }
    }
    Ok(SourceStage::CurrentOp { all_users, idle_connections, idle_cursors, idle_sessions, local_ops, specification: specification.clone() })
}
