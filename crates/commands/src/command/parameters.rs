//! `getParameter` / `setParameter`. Every parameter that setParameter accepts takes effect at
//! the next operation (see [`crate::knobs`]); read-only ones are reported by getParameter and
//! refused by setParameter; unknown names are refused, as mongod refuses them.

use std::sync::atomic::Ordering;

use bson::{doc, Bson, Document};

use crate::error::{CommandError, CommandResult, INVALID_OPTIONS};
use crate::knobs;
use crate::{CommandRequest, ServerContext};

/// How a parameter is read and, when settable at runtime, written.
enum Kind {
    ReadOnly(fn() -> Bson),
    Settable { read: fn() -> Bson, write: fn(i64) -> CommandResult<()>, boolean: bool },
}

struct Parameter {
    name: &'static str,
    kind: Kind,
}

const PARAMETERS: &[Parameter] = &[
    Parameter { name: "featureCompatibilityVersion", kind: Kind::ReadOnly(|| Bson::Document(doc! { "version": "7.0" })) },
    Parameter { name: "authenticationMechanisms", kind: Kind::ReadOnly(|| Bson::Array(vec![Bson::String("SCRAM-SHA-256".into())])) },
    Parameter { name: "maxBSONDepth", kind: Kind::ReadOnly(|| Bson::Int32(100)) },
    Parameter {
        name: "logLevel",
        kind: Kind::Settable {
            read: || Bson::Int32(knobs::log_level()),
            write: |value| {
                let level = i32::try_from(value).ok().filter(|level| (0..=5).contains(level));
                let level = level.ok_or_else(|| CommandError::bad_value("logLevel must be between 0 and 5"))?;
                knobs::LOG_LEVEL.store(level, Ordering::Relaxed);
                Ok(())
            },
            boolean: false,
        },
    },
    Parameter {
        name: "cursorTimeoutMillis",
        kind: Kind::Settable {
            read: || Bson::Int64(knobs::CURSOR_TIMEOUT_MILLIS.load(Ordering::Relaxed) as i64),
            write: |value| store_positive(&knobs::CURSOR_TIMEOUT_MILLIS, "cursorTimeoutMillis", value),
            boolean: false,
        },
    },
    Parameter {
        name: "cursorMemoryLimitBytes",
        kind: Kind::Settable {
            read: || Bson::Int64(knobs::CURSOR_MEMORY_LIMIT_BYTES.load(Ordering::Relaxed) as i64),
            write: |value| store_positive(&knobs::CURSOR_MEMORY_LIMIT_BYTES, "cursorMemoryLimitBytes", value),
            boolean: false,
        },
    },
    Parameter {
        name: "allowDiskUseByDefault",
        kind: Kind::Settable {
            read: || Bson::Boolean(knobs::ALLOW_DISK_USE_BY_DEFAULT.load(Ordering::Relaxed)),
            write: |value| {
                knobs::ALLOW_DISK_USE_BY_DEFAULT.store(value != 0, Ordering::Relaxed);
                Ok(())
            },
            boolean: true,
        },
    },
    Parameter {
        name: "notablescan",
        kind: Kind::Settable {
            read: || Bson::Boolean(knobs::no_table_scan()),
            write: |value| {
                knobs::NO_TABLE_SCAN.store(value != 0, Ordering::Relaxed);
                Ok(())
            },
            boolean: true,
        },
    },
    Parameter {
        name: "internalQueryExecMaxBlockingSortBytes",
        kind: Kind::Settable {
            read: || Bson::Int64(knobs::MAX_BLOCKING_SORT_BYTES.load(Ordering::Relaxed) as i64),
            write: |value| store_positive(&knobs::MAX_BLOCKING_SORT_BYTES, "internalQueryExecMaxBlockingSortBytes", value),
            boolean: false,
        },
    },
];

fn store_positive(target: &std::sync::atomic::AtomicU64, name: &str, value: i64) -> CommandResult<()> {
    let value = u64::try_from(value).ok().filter(|value| *value > 0);
    let value = value.ok_or_else(|| CommandError::bad_value(format!("{name} must be a positive integer")))?;
    target.store(value, Ordering::Relaxed);
    Ok(())
}

fn find_parameter(name: &str) -> Option<&'static Parameter> {
    PARAMETERS.iter().find(|parameter| parameter.name == name)
}

fn read(parameter: &Parameter) -> Bson {
    match &parameter.kind {
        Kind::ReadOnly(read) | Kind::Settable { read, .. } => read(),
    }
}

/// Fields of the command that are not parameter names.
const COMMAND_FIELDS: &[&str] = &["getParameter", "setParameter", "$db", "lsid", "$clusterTime", "comment", "$readPreference", "apiVersion", "maxTimeMS"];

pub fn get(_context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let mut reply = Document::new();
    let all = matches!(request.first_value(), Some(Bson::String(star)) if star == "*")
        || matches!(request.first_value(), Some(Bson::Document(options)) if options.get_bool("allParameters").unwrap_or(false));
    if all {
        for parameter in PARAMETERS {
            reply.insert(parameter.name, read(parameter));
        }
    } else {
        for (name, _) in request.body.iter().filter(|(name, _)| !COMMAND_FIELDS.contains(&name.as_str())) {
            if let Some(parameter) = find_parameter(name) {
                reply.insert(name.clone(), read(parameter));
            }
        }
        if reply.is_empty() {
            return Err(CommandError::new(INVALID_OPTIONS, "no option found to get"));
        }
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}

pub fn set(_context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    // Validate every field before changing any, so a refused command changes nothing.
    let mut changes = Vec::new();
    for (name, value) in request.body.iter().filter(|(name, _)| !COMMAND_FIELDS.contains(&name.as_str())) {
        let Some(parameter) = find_parameter(name) else {
            return Err(CommandError::new(
                INVALID_OPTIONS,
                format!("attempted to set unrecognized parameter [{name}], use help:true to see options "),
            ));
        };
        let Kind::Settable { write, boolean, .. } = &parameter.kind else {
            return Err(CommandError::bad_value(format!("parameter [{name}] cannot be set at runtime")));
        };
        let number = match (value, boolean) {
            (Bson::Boolean(flag), true) => i64::from(*flag),
            (Bson::Boolean(_), false) => None.ok_or_else(|| CommandError::bad_value(format!("Invalid value for parameter {name}: {value}")))?,
            (other, _) => match crate::request::integer_value(other) {
                Some(number) => number,
                None => return Err(CommandError::bad_value(format!("Invalid value for parameter {name}: {value}"))),
            },
        };
        changes.push((parameter, *write, number));
    }
    if changes.is_empty() {
        return Err(CommandError::new(INVALID_OPTIONS, "no option found to set, use help:true to see options "));
    }
    let mut reply = Document::new();
    for (parameter, write, number) in changes {
        reply.insert("was", read(parameter));
        write(number)?;
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}
