//! `--config FILE`: mongod's YAML configuration file, for the options Myriad has. Nested
//! sections and dotted keys both name an option (`net: {port: 1}` and `net.port: 1`); a flag
//! given on the command line overrides the file; an option Myriad does not know is an error
//! naming it, as mongod's "Unrecognized option".

use clap::parser::ValueSource;
use clap::ArgMatches;
use serde_yaml_ng::Value;

use crate::cli::ServerArguments;
use crate::tls::TlsMode;

/// The most nested sections followed: a deeper file is refused rather than walked.
const MAX_SECTION_DEPTH: usize = 16;

/// Reads the file and sets every option it names that the command line did not.
pub fn apply_file(path: &str, arguments: &mut ServerArguments, matches: &ArgMatches) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|error| format!("cannot read config file {path}: {error}"))?;
    apply_text(&text, arguments, matches).map_err(|error| format!("config file {path}: {error}"))
}

/// Applies the YAML `text` (see [`apply_file`]).
pub fn apply_text(text: &str, arguments: &mut ServerArguments, matches: &ArgMatches) -> Result<(), String> {
    let document: Value = serde_yaml_ng::from_str(text).map_err(|error| format!("not valid YAML: {error}"))?;
    let mut options = Vec::new();
    flatten(String::new(), &document, 0, &mut options)?;
    for (name, value) in options {
        apply_option(&name, &value, arguments, matches)?;
    }
    Ok(())
}

/// Collects every leaf of the document as (dotted name, value). Empty sections (`net:` alone)
/// name nothing.
fn flatten(prefix: String, value: &Value, depth: usize, options: &mut Vec<(String, Value)>) -> Result<(), String> {
    if depth > MAX_SECTION_DEPTH {
        return Err(format!("sections nest deeper than {MAX_SECTION_DEPTH} levels at {prefix}"));
    }
    match value {
        Value::Mapping(mapping) => {
            for (key, inner) in mapping {
                let Value::String(key) = key else {
                    return Err(format!("option names must be strings, found {key:?} under '{prefix}'"));
                };
                let name = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
                flatten(name, inner, depth + 1, options)?;
            }
            Ok(())
        }
        Value::Null if depth <= 1 => Ok(()),
        Value::Tagged(tagged) => flatten(prefix, &tagged.value, depth, options),
        leaf if prefix.is_empty() => Err(format!("the file must be a mapping of options, found {leaf:?}")),
        leaf => {
            options.push((prefix, leaf.clone()));
            Ok(())
        }
    }
}

/// How many `--setParameter` flags the command line gave (they sit at the end of the list).
fn command_line_parameters(matches: &ArgMatches) -> usize {
    if from_command_line(matches, "set_parameters") {
        matches.get_many::<String>("set_parameters").map_or(0, |values| values.len())
    } else {
        0
    }
}

/// True when `argument` (a field of [`ServerArguments`]) was given on the command line.
fn from_command_line(matches: &ArgMatches, argument: &str) -> bool {
    matches!(matches.value_source(argument), Some(ValueSource::CommandLine))
}

/// Sets one option. Every value is checked, even one a flag overrides.
fn apply_option(name: &str, value: &Value, arguments: &mut ServerArguments, matches: &ArgMatches) -> Result<(), String> {
    let set = |argument: &str| !from_command_line(matches, argument);
    match name {
        "storage.dbPath" => {
            let text = string(name, value)?;
            if set("dbpath") {
                arguments.dbpath = text;
            }
        }
        "storage.wiredTiger.collectionConfig.blockCompressor" => {
            let text = string(name, value)?;
            let compressor = crate::cli::parse_block_compressor(&text).map_err(|error| format!("{name}: {error}"))?;
            if set("storage_block_compressor") {
                arguments.storage_block_compressor = compressor;
            }
        }
        "net.port" => {
            let port = integer(name, value, 0, i64::from(u16::MAX))?;
            if set("port") {
                arguments.port = u16::try_from(port).unwrap_or(arguments.port);
            }
        }
        "net.bindIp" => {
            let text = string(name, value)?;
            if set("bind_ip") {
                arguments.bind_ip = text;
            }
        }
        "net.maxIncomingConnections" => {
            let count = integer(name, value, 1, i64::from(u32::MAX))?;
            if set("max_connections") {
                arguments.max_connections = usize::try_from(count).unwrap_or(arguments.max_connections);
            }
        }
        "replication.replSetName" => {
            let text = string(name, value)?;
            if set("replica_set") {
                arguments.replica_set = Some(text);
            }
        }
        "replication.oplogSizeMB" => {
            let size = integer(name, value, 1, i64::from(u32::MAX))?;
            if set("oplog_size_mebibytes") {
                arguments.oplog_size_mebibytes = u32::try_from(size).unwrap_or(u32::MAX);
            }
        }
        "security.keyFile" => {
            let text = string(name, value)?;
            if set("key_file") {
                arguments.key_file = Some(text);
            }
        }
        "net.tls.mode" => {
            let text = string(name, value)?;
            let mode = TlsMode::parse(&text).ok_or_else(|| format!("{name}: '{text}' is not one of disabled, allowTLS, preferTLS, requireTLS"))?;
            if set("tls_mode") {
                arguments.tls.tls_mode = Some(mode);
            }
        }
        "net.tls.certificateKeyFile" => {
            let text = string(name, value)?;
            if set("tls_certificate_key_file") {
                arguments.tls.tls_certificate_key_file = Some(text);
            }
        }
        "net.tls.CAFile" => {
            let text = string(name, value)?;
            if set("tls_ca_file") {
                arguments.tls.tls_ca_file = Some(text);
            }
        }
        "net.tls.allowInvalidCertificates" => {
            let flag = boolean(name, value)?;
            if set("tls_allow_invalid_certificates") {
                arguments.tls.tls_allow_invalid_certificates = flag;
            }
        }
        "net.tls.allowConnectionsWithoutCertificates" => {
            let flag = boolean(name, value)?;
            if set("tls_allow_connections_without_certificates") {
                arguments.tls.tls_allow_connections_without_certificates = flag;
            }
        }
        "security.authorization" => {
            let enabled = match string(name, value)?.as_str() {
                "enabled" => true,
                "disabled" => false,
                other => return Err(format!("{name}: '{other}' is not one of enabled, disabled")),
            };
            if set("auth") {
                arguments.auth = enabled;
            }
        }
        _ if name.starts_with("setParameter.") => {
            // The file's parameters come before the command line's, so a flag overrides them.
            let parameter = &name["setParameter.".len()..];
            let text = match value {
                Value::Bool(flag) => flag.to_string(),
                other => string(name, other)?,
            };
            let position = arguments.set_parameters.len() - command_line_parameters(matches);
            arguments.set_parameters.insert(position, format!("{parameter}={text}"));
        }
        _ => return apply_log_or_profiler_option(name, value, arguments, matches),
    }
    Ok(())
}

fn apply_log_or_profiler_option(name: &str, value: &Value, arguments: &mut ServerArguments, matches: &ArgMatches) -> Result<(), String> {
    let set = |argument: &str| !from_command_line(matches, argument);
    match name {
        "systemLog.path" => {
            let text = string(name, value)?;
            if set("logpath") {
                arguments.logpath = Some(text);
            }
        }
        "systemLog.destination" => {
            // Myriad logs to a file (systemLog.path) or, without one, to stderr: "file" is what
            // a file naming a path says; syslog is not available.
            let text = string(name, value)?;
            if text != "file" {
                return Err(format!("{name}: '{text}' is not supported (only 'file', with systemLog.path)"));
            }
        }
        "systemLog.logAppend" => {
            let flag = boolean(name, value)?;
            if set("logappend") {
                arguments.logappend = flag;
            }
        }
        "systemLog.quiet" => {
            let flag = boolean(name, value)?;
            if set("quiet") {
                arguments.quiet = flag;
            }
        }
        "systemLog.verbosity" => {
            // Accepted as mongod accepts it; Myriad writes no debug-level lines, so every level
            // logs the same.
            integer(name, value, 0, 5)?;
        }
        "operationProfiling.mode" => {
            let level = match string(name, value)?.as_str() {
                "off" => 0,
                "slowOp" => 1,
                "all" => 2,
                other => return Err(format!("{name}: '{other}' is not one of off, slowOp, all")),
            };
            if set("profile") {
                arguments.profile = level;
            }
        }
        "operationProfiling.slowOpThresholdMs" => {
            let milliseconds = integer(name, value, i64::from(i32::MIN), i64::from(i32::MAX))?;
            if set("slowms") {
                arguments.slowms = i32::try_from(milliseconds).unwrap_or(arguments.slowms);
            }
        }
        "operationProfiling.slowOpSampleRate" => {
            let rate = number(name, value)?;
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!("{name}: {rate} is not between 0.0 and 1.0"));
            }
            if set("slow_operation_sample_rate") {
                arguments.slow_operation_sample_rate = rate;
            }
        }
        _ => return Err(format!("Unrecognized option: {name}")),
    }
    Ok(())
}

fn string(name: &str, value: &Value) -> Result<String, String> {
    match value {
        Value::String(text) => Ok(text.clone()),
        Value::Number(number) => Ok(number.to_string()),
        other => Err(format!("{name} must be a string, found {}", describe(other))),
    }
}

fn integer(name: &str, value: &Value, minimum: i64, maximum: i64) -> Result<i64, String> {
    let parsed = match value {
        Value::Number(number) => number.as_i64(),
        Value::String(text) => text.trim().parse::<i64>().ok(),
        _ => None,
    };
    match parsed {
        Some(number) if (minimum..=maximum).contains(&number) => Ok(number),
        Some(number) => Err(format!("{name}: {number} is not between {minimum} and {maximum}")),
        None => Err(format!("{name} must be an integer, found {}", describe(value))),
    }
}

fn number(name: &str, value: &Value) -> Result<f64, String> {
    let parsed = match value {
        Value::Number(number) => number.as_f64(),
        Value::String(text) => text.trim().parse::<f64>().ok(),
        _ => None,
    };
    parsed.ok_or_else(|| format!("{name} must be a number, found {}", describe(value)))
}

fn boolean(name: &str, value: &Value) -> Result<bool, String> {
    match value {
        Value::Bool(flag) => Ok(*flag),
        Value::String(text) if text == "true" => Ok(true),
        Value::String(text) if text == "false" => Ok(false),
        other => Err(format!("{name} must be true or false, found {}", describe(other))),
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::Null => "nothing".to_string(),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => number.to_string(),
        Value::String(text) => format!("'{text}'"),
        Value::Sequence(_) => "a list".to_string(),
        Value::Mapping(_) => "a section".to_string(),
        Value::Tagged(tagged) => describe(&tagged.value),
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, FromArgMatches};

    use myriad_storage::BlockCompressor;

    use super::*;
    use crate::cli::Arguments;

    fn parsed(flags: &[&str], yaml: &str) -> Result<ServerArguments, String> {
        let matches = Arguments::command().try_get_matches_from(std::iter::once("myriad").chain(flags.iter().copied())).map_err(|error| error.to_string())?;
        let mut arguments = Arguments::from_arg_matches(&matches).map_err(|error| error.to_string())?;
        apply_text(yaml, &mut arguments.server, &matches)?;
        Ok(arguments.server)
    }

    #[test]
    fn nested_and_dotted_options_are_read() {
        let yaml = "storage:\n  dbPath: /data/x\nnet:\n  port: 28000\n  tls:\n    mode: requireTLS\n    CAFile: ca.pem\nsecurity.authorization: enabled\noperationProfiling:\n  mode: slowOp\n  slowOpThresholdMs: 5\n";
        let arguments = parsed(&[], yaml).expect("parses");
        assert_eq!(arguments.dbpath, "/data/x");
        assert_eq!(arguments.port, 28000);
        assert_eq!(arguments.tls.tls_mode, Some(TlsMode::RequireTls));
        assert_eq!(arguments.tls.tls_ca_file.as_deref(), Some("ca.pem"));
        assert!(arguments.auth);
        assert_eq!((arguments.profile, arguments.slowms), (1, 5));
    }

    #[test]
    fn flags_override_the_file() {
        let arguments = parsed(&["--port", "29000", "--quiet"], "net:\n  port: 28000\nsystemLog:\n  quiet: false\n  path: /tmp/x.log\n").expect("parses");
        assert_eq!(arguments.port, 29000);
        assert!(arguments.quiet);
        assert_eq!(arguments.logpath.as_deref(), Some("/tmp/x.log"));
    }

    #[test]
    fn an_unknown_option_is_named() {
        let error = parsed(&[], "net:\n  port: 1\n  colour: blue\n").expect_err("refused");
        assert_eq!(error, "Unrecognized option: net.colour");
        let error = parsed(&[], "processManagement:\n  fork: true\n").expect_err("refused");
        assert_eq!(error, "Unrecognized option: processManagement.fork");
    }

    #[test]
    fn set_parameter_sections_come_before_the_flags() {
        let yaml = "setParameter:\n  idleConnectionTimeoutMillis: 5000\n  notablescan: true\n";
        let arguments = parsed(&["--setParameter", "idleConnectionTimeoutMillis=7000"], yaml).expect("parses");
        assert_eq!(arguments.set_parameters, vec!["idleConnectionTimeoutMillis=5000", "notablescan=true", "idleConnectionTimeoutMillis=7000"]);
    }

    #[test]
    fn the_block_compressor_comes_from_mongodb_s_option() {
        let yaml = "storage:\n  wiredTiger:\n    collectionConfig:\n      blockCompressor: zstd\n";
        assert_eq!(parsed(&[], yaml).expect("parses").storage_block_compressor, BlockCompressor::Zstd);
        let overridden = parsed(&["--storageBlockCompressor", "none"], yaml).expect("parses");
        assert_eq!(overridden.storage_block_compressor, BlockCompressor::None);
        assert_eq!(parsed(&[], "").expect("parses").storage_block_compressor, myriad_storage::DEFAULT_BLOCK_COMPRESSOR);
        let error = parsed(&[], "storage.wiredTiger.collectionConfig.blockCompressor: brotli\n").expect_err("refused");
        assert!(error.contains("blockCompressor") && error.contains("brotli"), "{error}");
        assert!(parsed(&["--storageBlockCompressor", "brotli"], "").is_err());
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(parsed(&[], "net:\n  port: 70000\n").expect_err("refused").contains("net.port"));
        assert!(parsed(&[], "net:\n  tls:\n    mode: sometimes\n").expect_err("refused").contains("net.tls.mode"));
        assert!(parsed(&[], "security:\n  authorization: yes please\n").expect_err("refused").contains("security.authorization"));
        assert!(parsed(&[], "- a\n- b\n").expect_err("refused").contains("mapping"));
        assert!(parsed(&[], "net: [\n").expect_err("refused").contains("YAML"));
    }
}
