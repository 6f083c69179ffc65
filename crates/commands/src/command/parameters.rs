//! `getParameter` / `setParameter`. Every parameter that setParameter accepts takes effect at
//! the next operation (see [`crate::knobs`]); read-only ones are reported by getParameter and
//! refused by setParameter; unknown names are refused, as mongod refuses them.

use std::sync::atomic::Ordering;

use bson::{doc, Bson, Document};

use crate::error::{CommandError, CommandResult, INVALID_OPTIONS};
use crate::knobs;
use myriad_storage::disk_space;
use crate::{CommandRequest, ServerContext};

/// How a parameter is read and, when settable at runtime, written.
enum Kind {
    ReadOnly(fn(&ServerContext) -> Bson),
    Settable { read: fn(&ServerContext) -> Bson, write: fn(&ServerContext, i64) -> CommandResult<()>, boolean: bool },
    /// Set only by `--setParameter` (mongod's `startup` parameters); refused at runtime.
    StartupOnly { read: fn(&ServerContext) -> Bson, write: fn(&ServerContext, i64) -> CommandResult<()>, boolean: bool },
}

struct Parameter {
    name: &'static str,
    kind: Kind,
    /// MongoDB's `settableAtStartup` for the parameter (getParameter's `showDetails`).
    startup: bool,
}

const PARAMETERS: &[Parameter] = &[
    Parameter {
        name: "enableTestCommands",
        kind: Kind::StartupOnly {
            read: |_| Bson::Boolean(knobs::test_commands_enabled()),
            write: |_, value| {
                knobs::ENABLE_TEST_COMMANDS.store(value != 0, Ordering::Relaxed);
                Ok(())
            },
            boolean: true,
        },
        startup: true,
    },
    Parameter { name: "featureCompatibilityVersion", kind: Kind::ReadOnly(|_| Bson::Document(doc! { "version": crate::system_databases::FEATURE_COMPATIBILITY_VERSION })), startup: false },
    Parameter { name: "authenticationMechanisms", kind: Kind::ReadOnly(|_| Bson::Array(vec![Bson::String("MONGODB-X509".into()), Bson::String("SCRAM-SHA-1".into()), Bson::String("SCRAM-SHA-256".into())])), startup: true },
    Parameter {
        name: "scramIterationCount",
        kind: Kind::Settable {
            read: |_| Bson::Int32(crate::auth::scram::SHA1_ITERATIONS.load(Ordering::Relaxed) as i32),
            write: |_, value| store_iteration_count(&crate::auth::scram::SHA1_ITERATIONS, "scramIterationCount", value),
            boolean: false,
        },
        startup: true,
    },
    Parameter {
        name: "scramSHA256IterationCount",
        kind: Kind::Settable {
            read: |_| Bson::Int32(crate::auth::scram::SHA256_ITERATIONS.load(Ordering::Relaxed) as i32),
            write: |_, value| store_iteration_count(&crate::auth::scram::SHA256_ITERATIONS, "scramSHA256IterationCount", value),
            boolean: false,
        },
        startup: true,
    },
    Parameter { name: "maxBSONDepth", kind: Kind::ReadOnly(|_| Bson::Int32(100)), startup: true },
    Parameter {
        name: "logLevel",
        kind: Kind::Settable {
            read: |_| Bson::Int32(knobs::log_level()),
            write: |_, value| {
                let level = i32::try_from(value).ok().filter(|level| (0..=5).contains(level));
                let level = level.ok_or_else(|| CommandError::bad_value("logLevel must be between 0 and 5"))?;
                knobs::LOG_LEVEL.store(level, Ordering::Relaxed);
                Ok(())
            },
            boolean: false,
        },
        startup: true,
    },
    Parameter {
        name: "cursorTimeoutMillis",
        kind: Kind::Settable {
            read: |_| Bson::Int64(knobs::CURSOR_TIMEOUT_MILLIS.load(Ordering::Relaxed) as i64),
            write: |_, value| store_positive(&knobs::CURSOR_TIMEOUT_MILLIS, "cursorTimeoutMillis", value),
            boolean: false,
        },
        startup: true,
    },
    Parameter {
        name: "cursorMemoryLimitBytes",
        kind: Kind::Settable {
            read: |_| Bson::Int64(knobs::CURSOR_MEMORY_LIMIT_BYTES.load(Ordering::Relaxed) as i64),
            write: |_, value| store_positive(&knobs::CURSOR_MEMORY_LIMIT_BYTES, "cursorMemoryLimitBytes", value),
            boolean: false,
        },
        startup: true,
    },
    Parameter {
        name: "transactionLifetimeLimitSeconds",
        kind: Kind::Settable {
            read: |_| {
                Bson::Int32(
                    crate::transactions::LIFETIME_LIMIT_SECONDS.load(Ordering::Relaxed) as i32,
                )
            },
            write: |_, value| {
                store_in_range(
                    &crate::transactions::LIFETIME_LIMIT_SECONDS,
                    "transactionLifetimeLimitSeconds",
                    value,
                    1,
                )
            },
            boolean: false,
        },
        startup: true,
    },
    Parameter {
        name: "minSnapshotHistoryWindowInSeconds",
        kind: Kind::Settable {
            read: |_| Bson::Int32(myriad_storage::SNAPSHOT_HISTORY_WINDOW_SECONDS.load(Ordering::Relaxed) as i32),
            write: |_, value| store_in_range(&myriad_storage::SNAPSHOT_HISTORY_WINDOW_SECONDS, "minSnapshotHistoryWindowInSeconds", value, 0),
            boolean: false,
        },
        startup: true,
    },
    Parameter {
        name: "indexScanDedupMaxBytes",
        kind: Kind::Settable {
            read: |_| Bson::Int64(knobs::INDEX_SCAN_DEDUP_MAX_BYTES.load(Ordering::Relaxed) as i64),
            write: |_, value| store_positive(&knobs::INDEX_SCAN_DEDUP_MAX_BYTES, "indexScanDedupMaxBytes", value),
            boolean: false,
        },
        startup: true,
    },
    Parameter {
        name: "idleConnectionTimeoutMillis",
        kind: Kind::Settable {
            read: |_| Bson::Int64(knobs::IDLE_CONNECTION_TIMEOUT_MILLIS.load(Ordering::Relaxed) as i64),
            write: |_, value| store_positive(&knobs::IDLE_CONNECTION_TIMEOUT_MILLIS, "idleConnectionTimeoutMillis", value),
            boolean: false,
        },
        startup: true,
    },
    Parameter {
        name: "unauthenticatedConnectionTimeoutMillis",
        kind: Kind::Settable {
            read: |_| Bson::Int64(knobs::UNAUTHENTICATED_CONNECTION_TIMEOUT_MILLIS.load(Ordering::Relaxed) as i64),
            write: |_, value| store_positive(&knobs::UNAUTHENTICATED_CONNECTION_TIMEOUT_MILLIS, "unauthenticatedConnectionTimeoutMillis", value),
            boolean: false,
        },
        startup: true,
    },
    Parameter {
        name: "messageReadTimeoutMillis",
        kind: Kind::Settable {
            read: |_| Bson::Int64(knobs::MESSAGE_READ_TIMEOUT_MILLIS.load(Ordering::Relaxed) as i64),
            write: |_, value| store_positive(&knobs::MESSAGE_READ_TIMEOUT_MILLIS, "messageReadTimeoutMillis", value),
            boolean: false,
        },
        startup: true,
    },
    Parameter {
        name: "allowDiskUseByDefault",
        kind: Kind::Settable {
            read: |_| Bson::Boolean(knobs::ALLOW_DISK_USE_BY_DEFAULT.load(Ordering::Relaxed)),
            write: |_, value| {
                knobs::ALLOW_DISK_USE_BY_DEFAULT.store(value != 0, Ordering::Relaxed);
                Ok(())
            },
            boolean: true,
        },
        startup: true,
    },
    Parameter {
        name: "notablescan",
        kind: Kind::Settable {
            read: |_| Bson::Boolean(knobs::no_table_scan()),
            write: |_, value| {
                knobs::NO_TABLE_SCAN.store(value != 0, Ordering::Relaxed);
                Ok(())
            },
            boolean: true,
        },
        startup: true,
    },
    Parameter {
        name: "internalQueryExecMaxBlockingSortBytes",
        kind: Kind::Settable {
            read: |_| Bson::Int64(knobs::MAX_BLOCKING_SORT_BYTES.load(Ordering::Relaxed) as i64),
            write: |_, value| store_positive(&knobs::MAX_BLOCKING_SORT_BYTES, "internalQueryExecMaxBlockingSortBytes", value),
            boolean: false,
        },
        startup: true,
    },
    Parameter {
        name: "ttlMonitorEnabled",
        kind: Kind::Settable {
            read: |_| Bson::Boolean(knobs::ttl_monitor_enabled()),
            write: |_, value| {
                knobs::TTL_MONITOR_ENABLED.store(value != 0, Ordering::Relaxed);
                Ok(())
            },
            boolean: true,
        },
        startup: true,
    },
    Parameter {
        name: "ttlMonitorSleepSecs",
        kind: Kind::Settable {
            read: |_| Bson::Int32(i32::try_from(knobs::TTL_MONITOR_SLEEP_SECS.load(Ordering::Relaxed)).unwrap_or(i32::MAX)),
            write: |_, value| store_in_range(&knobs::TTL_MONITOR_SLEEP_SECS, "ttlMonitorSleepSecs", value, 1),
            boolean: false,
        },
        startup: true,
    },
    Parameter {
        name: "ttlMonitorMaxDeletesPerSecond",
        kind: Kind::Settable {
            read: |_| Bson::Int64(i64::try_from(knobs::ttl_monitor_max_deletes_per_second()).unwrap_or(i64::MAX)),
            write: |_, value| store_in_range(&knobs::TTL_MONITOR_MAX_DELETES_PER_SECOND, "ttlMonitorMaxDeletesPerSecond", value, 0),
            boolean: false,
        },
        startup: true,
    },
    Parameter {
        name: "diskSpaceReserveBytes",
        kind: Kind::Settable {
            read: |_| Bson::Int64(disk_space::RESERVE_BYTES.load(Ordering::Relaxed)),
            write: |_, value| store_disk_space("diskSpaceReserveBytes", value),
            boolean: false,
        },
        startup: true,
    },
    Parameter {
        name: "diskSpaceBallastBytes",
        kind: Kind::Settable {
            read: |_| Bson::Int64(disk_space::BALLAST_BYTES.load(Ordering::Relaxed)),
            write: |_, value| store_disk_space("diskSpaceBallastBytes", value),
            boolean: false,
        },
        startup: true,
    },
    Parameter {
        name: "quiet",
        kind: Kind::Settable {
            read: |context| Bson::Boolean(context.logger.is_quiet()),
            write: |context, value| {
                context.logger.set_quiet(value != 0);
                Ok(())
            },
            boolean: true,
        },
        startup: true,
    },
];

fn store_positive(target: &std::sync::atomic::AtomicU64, name: &str, value: i64) -> CommandResult<()> {
    let value = u64::try_from(value).ok().filter(|value| *value > 0);
    let value = value.ok_or_else(|| CommandError::bad_value(format!("{name} must be a positive integer")))?;
    target.store(value, Ordering::Relaxed);
    Ok(())
}

/// An integer parameter from `minimum` to i32::MAX (the range of MongoDB's int parameters), with
/// its validator's message.
fn store_in_range(target: &std::sync::atomic::AtomicU64, name: &str, value: i64, minimum: i64) -> CommandResult<()> {
    if value < minimum {
        return Err(CommandError::bad_value(format!(
            "Invalid value for parameter {name}: {value} is not greater than or equal to {minimum}"
        )));
    }
    let value = u64::try_from(value.min(i64::from(i32::MAX))).unwrap_or(0);
    target.store(value, Ordering::Relaxed);
    Ok(())
}

/// The free-space guard's parameters (`myriad_storage::disk_space`): bytes, or -1 for the
/// automatic size.
fn store_disk_space(name: &str, value: i64) -> CommandResult<()> {
    let target = match name {
        "diskSpaceReserveBytes" => &disk_space::RESERVE_BYTES,
        _ => &disk_space::BALLAST_BYTES,
    };
    if value < disk_space::AUTOMATIC {
        return Err(CommandError::bad_value(format!(
            "Invalid value for parameter {name}: {value} is not greater than or equal to {}",
            disk_space::AUTOMATIC
        )));
    }
    target.store(value, Ordering::Relaxed);
    Ok(())
}

/// Applies the `--setParameter` assignments that the storage engine's open reads (the
/// free-space guard's, which decide whether the ballast is released before recovery). The
/// others, and these again, are applied by [`set_at_startup`] once the server context exists.
pub fn set_storage_at_startup(assignments: &[String]) -> Result<(), String> {
    for assignment in assignments {
        let Some((name, text)) = assignment.split_once('=') else { continue };
        if name == "diskSpaceReserveBytes" || name == "diskSpaceBallastBytes" {
            let value = text.trim().parse::<i64>().map_err(|_| format!("--setParameter {name}: invalid value '{text}'"))?;
            store_disk_space(name, value).map_err(|error| format!("--setParameter {name}: {}", error.message))?;
        }
    }
    Ok(())
}

fn find_parameter(name: &str) -> Option<&'static Parameter> {
    PARAMETERS.iter().find(|parameter| parameter.name == name)
}

fn read(context: &ServerContext, parameter: &Parameter) -> Bson {
    match &parameter.kind {
        Kind::ReadOnly(read) | Kind::Settable { read, .. } | Kind::StartupOnly { read, .. } => read(context),
    }
}

/// A parameter's value, or with `showDetails` `{value, settableAtRuntime, settableAtStartup}`.
fn describe(context: &ServerContext, parameter: &Parameter, show_details: bool) -> Bson {
    let value = read(context, parameter);
    if !show_details {
        return value;
    }
    Bson::Document(doc! {
        "value": value,
        "settableAtRuntime": matches!(parameter.kind, Kind::Settable { .. }),
        "settableAtStartup": parameter.startup,
    })
}

/// getParameter's first field: `1` (or any non-string, non-object), `"*"` for every
/// parameter, or `{allParameters, showDetails}`.
struct GetOptions {
    all: bool,
    show_details: bool,
}

fn get_options(request: &CommandRequest) -> CommandResult<GetOptions> {
    match request.first_value() {
        Some(Bson::String(star)) if star == "*" => Ok(GetOptions { all: true, show_details: false }),
        Some(Bson::Document(options)) => {
            let mut parsed = GetOptions { all: false, show_details: false };
            for (key, value) in options {
                let flag = crate::request::truthy(value).ok_or_else(|| {
                    crate::request::field_type_error(&format!("getParameter.{key}"), "bool", value)
                })?;
                match key.as_str() {
                    "allParameters" => parsed.all = flag,
                    "showDetails" => parsed.show_details = flag,
                    "setAt" => {}
                    other => {
                        return Err(CommandError::unknown_field(&format!("getParameter.{other}")))
                    }
                }
            }
            Ok(parsed)
        }
        _ => Ok(GetOptions { all: false, show_details: false }),
    }
}

/// Fields of the command that are not parameter names.
const COMMAND_FIELDS: &[&str] = &["getParameter", "setParameter", "$db", "lsid", "$clusterTime", "comment", "$readPreference", "apiVersion", "maxTimeMS"];

pub fn get(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let mut reply = Document::new();
    let options = get_options(request)?;
    if options.all {
        for parameter in PARAMETERS {
            reply.insert(parameter.name, describe(context, parameter, options.show_details));
        }
    } else {
        for (name, _) in request.body.iter().filter(|(name, _)| !COMMAND_FIELDS.contains(&name.as_str())) {
            if let Some(parameter) = find_parameter(name) {
                reply.insert(name.clone(), describe(context, parameter, options.show_details));
            }
        }
        if reply.is_empty() {
            return Err(CommandError::new(INVALID_OPTIONS, "no option found to get"));
        }
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}

pub fn set(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
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
        reply.insert("was", read(context, parameter));
        write(context, number)?;
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}

/// SCRAM iteration counts: at least 5000, as MongoDB's validator (and bounded above).
fn store_iteration_count(target: &std::sync::atomic::AtomicU32, name: &str, value: i64) -> CommandResult<()> {
    if value < crate::auth::scram::MIN_ITERATIONS {
        return Err(CommandError::bad_value(format!("Invalid value for parameter {name}: {value} is not greater than or equal to {}", crate::auth::scram::MIN_ITERATIONS)));
    }
    let count = u32::try_from(value.min(crate::auth::scram::MAX_ITERATIONS)).unwrap_or(u32::MAX);
    target.store(count, Ordering::Relaxed);
    Ok(())
}

/// `--setParameter name=value` (and a config file's `setParameter` section): sets a parameter
/// before the server listens. Only parameters settable at runtime are accepted; booleans are
/// `true`/`false` (or 1/0), the rest whole numbers. Errors name the parameter.
pub fn set_at_startup(context: &ServerContext, assignment: &str) -> Result<(), String> {
    let Some((name, text)) = assignment.split_once('=') else {
        return Err(format!("--setParameter {assignment}: expected name=value"));
    };
    let Some(parameter) = find_parameter(name) else {
        return Err(format!("Unknown --setParameter '{name}'"));
    };
    let (Kind::Settable { write, boolean, .. } | Kind::StartupOnly { write, boolean, .. }) = &parameter.kind else {
        return Err(format!("--setParameter {name}: the parameter cannot be set"));
    };
    let number = match (text.trim(), boolean) {
        ("true", true) => 1,
        ("false", true) => 0,
        (other, _) => other.parse::<i64>().map_err(|_| format!("--setParameter {name}: invalid value '{text}'"))?,
    };
    write(context, number).map_err(|error| format!("--setParameter {name}: {}", error.message))
}
