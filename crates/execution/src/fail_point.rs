//! Fail points, as mongod's `configureFailPoint` sets them (a test command: only with
//! `--setParameter enableTestCommands=1`). Myriad has one, `failCommand`, the one the drivers'
//! specifications use: it makes chosen commands fail with an error code, close the connection
//! without a reply, wait before they run (`blockConnection`), or report a write concern error.
//!
//! The registry lives in the [`crate::ServerContext`] of a node or a router; both check it where
//! every command from the network is dispatched, with the same code. When no fail point is set
//! the check is one relaxed atomic load ([`FailPoints::fail_command`]).
//!
//! What follows mongod (`CommandHelpers::shouldActivateFailCommandFailPoint`,
//! `evaluateFailCommandFailPoint`, `FailPoint::parseBSON`):
//! - `configureFailPoint` itself is never failed; internal clients only with
//!   `failInternalCommands`; `appName` matches the client metadata of the connection's
//!   handshake; `namespace` the command's namespace.
//! - A command activates the fail point when it matches and the data asks for something it can
//!   do to it: close, block, fail, or (for a command that takes a write concern) report a write
//!   concern error. Only then does the mode count: `{times: n}` is used up, `{skip: n}` skips,
//!   `{activationProbability: p}` draws, and `timesEntered` grows.
//! - Order: block (bounded by the command's maxTimeMS), then close, then fail; otherwise the
//!   command runs and its reply gets the write concern error.
//! - Error labels: the data's `errorLabels` when given, else `RetryableWriteError` for a
//!   retryable error of a retryable write (a write command with a `txnNumber`, outside a
//!   transaction, or a transaction's commit or abort), as the retryable-writes specification
//!   says, and `TransientTransactionError` for a transient error of a transaction's statement.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bson::{doc, Bson, Document};
use parking_lot::Mutex;

use myriad_reply::error::{CommandError, CommandResult, ErrorCode, ILLEGAL_OPERATION, INVALID_OPTIONS, MAX_TIME_MS_EXPIRED, TYPE_MISMATCH};
use myriad_reply::reply::Reply;

use crate::request::CommandRequest;

/// The fail points a process knows: only `failCommand`.
pub const FAIL_COMMAND: &str = "failCommand";
/// mongod's FailPointSetFailed: an unknown fail point name.
const FAIL_POINT_SET_FAILED: ErrorCode = ErrorCode::new(266);
/// The commands that are retryable writes when they carry a `txnNumber`.
const RETRYABLE_WRITE_COMMANDS: &[&str] =
    &["insert", "update", "delete", "findAndModify", "findandmodify", "bulkWrite", "commitTransaction", "abortTransaction"];
/// mongod's message for a command failed by the fail point.
const FAIL_MESSAGE: &str = "Failing command via 'failCommand' failpoint";

/// How often a set fail point fires.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Off,
    AlwaysOn,
    /// Fires this many more times, then turns off.
    Times(i64),
    /// Lets this many activations pass, then fires every time.
    Skip(i64),
    /// Fires with this probability.
    Probability(f64),
}

/// `failCommand`'s `data`, parsed once when the fail point is set.
#[derive(Debug, Default)]
pub struct FailCommandData {
    commands: Vec<String>,
    error_code: Option<i32>,
    close_connection: bool,
    block_milliseconds: Option<i64>,
    write_concern_error: Option<Document>,
    error_labels: Option<Vec<Bson>>,
    app_name: Option<String>,
    namespace: Option<String>,
    fail_internal_commands: bool,
    /// The data as given (configureFailPoint's reply to `mode`-less calls would show it).
    raw: Document,
}

struct FailCommandState {
    mode: Mode,
    data: Arc<FailCommandData>,
    times_entered: i64,
}

/// A process's fail points.
pub struct FailPoints {
    /// True while `failCommand` is set to anything but `off`: the hot path reads only this.
    armed: AtomicBool,
    fail_command: Mutex<FailCommandState>,
}

impl Default for FailPoints {
    fn default() -> FailPoints {
        FailPoints {
            armed: AtomicBool::new(false),
            fail_command: Mutex::new(FailCommandState { mode: Mode::Off, data: Arc::default(), times_entered: 0 }),
        }
    }
}

/// What the command table knows of a command that the fail point needs: whether it takes a
/// write concern (only those get a `writeConcernError`).
pub struct CommandTraits {
    pub supports_write_concern: bool,
}

/// `failCommand` fired for a command: what to do with it ([`Triggered::before`], then
/// [`Triggered::after`] when it runs).
pub struct Triggered {
    data: Arc<FailCommandData>,
    supports_write_concern: bool,
    /// What the command is, for the labels of its errors.
    kind: LabelledKind,
}

/// What happens to the command once its wait (if any) is over.
pub enum BeforeCommand {
    /// Run it.
    Run,
    /// Answer this instead of running it.
    Answer(Reply),
    /// Close the connection without a reply.
    CloseConnection,
}

impl FailPoints {
    /// `failCommand` for this command, when it fires. One atomic load when no fail point is set.
    /// `describe` is asked only then: it returns what the fail point needs to know of the
    /// command, or None when the command is refused before the fail point would see it.
    pub fn fail_command(&self, request: &CommandRequest, describe: impl FnOnce() -> Option<CommandTraits>) -> Option<Triggered> {
        if !self.armed.load(Ordering::Relaxed) {
            return None;
        }
        self.evaluate(request, describe()?)
    }

    fn evaluate(&self, request: &CommandRequest, traits: CommandTraits) -> Option<Triggered> {
        let mut state = self.fail_command.lock();
        let data = Arc::clone(&state.data);
        let acts = data.close_connection
            || data.block_milliseconds.is_some()
            || data.error_code.is_some()
            || (data.write_concern_error.is_some() && traits.supports_write_concern);
        if state.mode == Mode::Off || !acts || !data.matches(request) {
            return None;
        }
        let fires = match &mut state.mode {
            Mode::Off => false,
            Mode::AlwaysOn => true,
            Mode::Times(remaining) => {
                *remaining -= 1;
                if *remaining <= 0 {
                    state.mode = Mode::Off;
                    self.armed.store(false, Ordering::Relaxed);
                }
                true
            }
            Mode::Skip(remaining) => {
                if *remaining > 0 {
                    *remaining -= 1;
                    false
                } else {
                    true
                }
            }
            Mode::Probability(probability) => rand::random::<f64>() < *probability,
        };
        if !fires {
            return None;
        }
        state.times_entered += 1;
        Some(Triggered { data, supports_write_concern: traits.supports_write_concern, kind: LabelledKind::of(request) })
    }

    /// `configureFailPoint`: sets `name` from the command's `mode` and `data`; returns the
    /// times the fail point was entered before (mongod's `count`).
    pub fn configure(&self, name: &str, command: &Document) -> CommandResult<i64> {
        if name != FAIL_COMMAND {
            return Err(CommandError::new(FAIL_POINT_SET_FAILED, format!("{name} not found")));
        }
        let mode = parse_mode(command)?;
        let data = match command.get("data") {
            None => Document::new(),
            Some(Bson::Document(data)) => data.clone(),
            Some(_) => return Err(CommandError::new(TYPE_MISMATCH, "the 'data' option must be a JSON object")),
        };
        let data = FailCommandData::parse(data)?;
        let mut state = self.fail_command.lock();
        let previous = state.times_entered;
        state.mode = mode;
        state.data = Arc::new(data);
        self.armed.store(mode != Mode::Off, Ordering::Relaxed);
        Ok(previous)
    }
}

/// `mode`: "off", "alwaysOn", `{times: n}`, `{skip: n}` or `{activationProbability: p}`.
fn parse_mode(command: &Document) -> CommandResult<Mode> {
    let count = |options: &Document, name: &str| -> CommandResult<i64> {
        let value = options.get(name).and_then(crate::request::integer_value);
        let value = value.ok_or_else(|| CommandError::new(TYPE_MISMATCH, format!("'{name}' option to 'mode' must be a number")))?;
        if value < 0 {
            return Err(CommandError::bad_value(format!("'{name}' option to 'mode' must be positive")));
        }
        if value > i64::from(i32::MAX) {
            return Err(CommandError::bad_value(format!("'{name}' option to 'mode' is too large")));
        }
        Ok(value)
    };
    match command.get("mode") {
        None => Err(CommandError::new(ILLEGAL_OPERATION, "When setting a failpoint, you must supply a 'mode'")),
        Some(Bson::String(mode)) => match mode.as_str() {
            "off" => Ok(Mode::Off),
            "alwaysOn" => Ok(Mode::AlwaysOn),
            other => Err(CommandError::bad_value(format!("unknown mode: {other}"))),
        },
        Some(Bson::Document(options)) if options.contains_key("times") => {
            let times = count(options, "times")?;
            Ok(if times == 0 { Mode::Off } else { Mode::Times(times) })
        }
        Some(Bson::Document(options)) if options.contains_key("skip") => Ok(Mode::Skip(count(options, "skip")?)),
        Some(Bson::Document(options)) if options.contains_key("activationProbability") => {
            let probability = match options.get("activationProbability") {
                Some(Bson::Double(number)) => *number,
                Some(Bson::Int32(number)) => f64::from(*number),
                Some(Bson::Int64(number)) => *number as f64,
                _ => {
                    return Err(CommandError::new(
                        TYPE_MISMATCH,
                        "the 'activationProbability' option to 'mode' must be a double between 0 and 1",
                    ))
                }
            };
            if !(0.0..=1.0).contains(&probability) {
                return Err(CommandError::bad_value(format!("activationProbability must be between 0.0 and 1.0; found {probability}")));
            }
            Ok(Mode::Probability(probability))
        }
        Some(Bson::Document(_)) => Err(CommandError::bad_value(
            "'mode' must be one of 'off', 'alwaysOn', '{times:n}', '{skip:n}' or '{activationProbability:p}'",
        )),
        Some(_) => Err(CommandError::new(TYPE_MISMATCH, "'mode' must be a string or JSON object")),
    }
}

impl FailCommandData {
    /// Reads the fields `failCommand` acts on. Fields of the wrong type are ignored, as mongod's
    /// `bsonExtract*` calls ignore them, except `blockTimeMS`, which mongod checks when it blocks
    /// and Myriad checks here.
    fn parse(raw: Document) -> CommandResult<FailCommandData> {
        let flag = |name: &str| matches!(raw.get(name), Some(Bson::Boolean(true)));
        let text = |name: &str| match raw.get(name) {
            Some(Bson::String(value)) => Some(value.clone()),
            _ => None,
        };
        let block_milliseconds = if flag("blockConnection") {
            let milliseconds = raw
                .get("blockTimeMS")
                .and_then(crate::request::integer_value)
                .ok_or_else(|| CommandError::new(INVALID_OPTIONS, "must specify 'blockTimeMS' when 'blockConnection' is true"))?;
            if milliseconds < 0 {
                return Err(CommandError::new(INVALID_OPTIONS, "'blockTimeMS' must be non-negative"));
            }
            Some(milliseconds)
        } else {
            None
        };
        let commands = match raw.get("failCommands") {
            Some(Bson::Array(names)) => names.iter().filter_map(|name| name.as_str().map(str::to_string)).collect(),
            _ => Vec::new(),
        };
        Ok(FailCommandData {
            commands,
            error_code: raw.get("errorCode").and_then(crate::request::integer_value).and_then(|code| i32::try_from(code).ok()),
            close_connection: flag("closeConnection"),
            block_milliseconds,
            write_concern_error: raw.get_document("writeConcernError").ok().cloned(),
            error_labels: raw.get_array("errorLabels").ok().cloned(),
            app_name: text("appName"),
            namespace: text("namespace"),
            fail_internal_commands: flag("failInternalCommands"),
            raw,
        })
    }

    /// Whether the fail point applies to this command (mongod's
    /// `shouldActivateFailCommandFailPoint`).
    fn matches(&self, request: &CommandRequest) -> bool {
        if request.name == "configureFailPoint" {
            return false;
        }
        let session = &request.connection.session;
        if let Some(app_name) = &self.app_name {
            let connection_app = session.client_metadata().and_then(|client| client.get_document("application").ok()).and_then(|application| application.get_str("name").ok());
            if connection_app != Some(app_name.as_str()) {
                return false;
            }
        }
        if let Some(namespace) = &self.namespace {
            if command_namespace(request).as_deref() != Some(namespace.as_str()) {
                return false;
            }
        }
        let internal = session.is_internal()
            || session.authenticated_user_names().iter().any(|user| user.user == myriad_auth::INTERNAL_USER && user.db == myriad_auth::INTERNAL_DATABASE);
        if internal && !self.fail_internal_commands {
            return false;
        }
        self.commands.iter().any(|name| command_has_name(&request.name, name))
    }
}

/// Whether `name` names the command `command` (mongod matches any of a command's aliases).
fn command_has_name(command: &str, name: &str) -> bool {
    const ALIASES: &[&[&str]] = &[&["hello", "isMaster", "ismaster"], &["findAndModify", "findandmodify"], &["buildInfo", "buildinfo"], &["dbStats", "dbstats"], &["dataSize", "datasize"], &["dropIndexes", "deleteIndexes"]];
    command == name || ALIASES.iter().any(|names| names.contains(&command) && names.contains(&name))
}

/// `db.collection` of a command on a collection (its first value, or getMore's `collection`).
fn command_namespace(request: &CommandRequest) -> Option<String> {
    let collection = match request.name.as_str() {
        "getMore" => request.body.get_str("collection").ok(),
        _ => request.body.iter().next().and_then(|(_, value)| value.as_str()),
    };
    collection.map(|collection| format!("{}.{collection}", request.db))
}

impl Triggered {
    /// How long to hold the command before it runs (`blockConnection`), and whether that wait
    /// ends at its maxTimeMS rather than at `blockTimeMS` (then it fails with
    /// MaxTimeMSExpired). The caller waits without holding a thread.
    pub fn block(&self, request: &CommandRequest) -> Option<(Duration, bool)> {
        let block = Duration::from_millis(u64::try_from(self.data.block_milliseconds?).unwrap_or(0));
        match crate::operation::max_time(&request.body) {
            Ok(Some(limit)) if limit < block => Some((limit, true)),
            _ => Some((block, false)),
        }
    }

    /// What happens after the block: `expired` is true when the command's maxTimeMS ran out
    /// during it.
    pub fn before(&self, expired: bool) -> BeforeCommand {
        if expired {
            let error = CommandError::new(MAX_TIME_MS_EXPIRED, "operation exceeded time limit");
            return BeforeCommand::Answer(Reply::Document(self.labelled(error.to_reply())));
        }
        if self.data.close_connection {
            return BeforeCommand::CloseConnection;
        }
        match self.data.error_code {
            Some(code) => {
                let error = CommandError::new(ErrorCode::new(code), FAIL_MESSAGE);
                BeforeCommand::Answer(Reply::Document(self.labelled(error.to_reply())))
            }
            None => BeforeCommand::Run,
        }
    }

    /// The reply of a command the fail point let run: with `writeConcernError` for a command
    /// that takes a write concern, and its error labels.
    pub fn after(&self, reply: Reply) -> Reply {
        let write_concern_error = self.data.write_concern_error.as_ref().filter(|_| self.supports_write_concern);
        let failed = !reply.is_ok();
        if write_concern_error.is_none() && !failed {
            return reply;
        }
        let mut document = reply.into_document();
        if let Some(write_concern_error) = write_concern_error {
            document.insert("writeConcernError", write_concern_error.clone());
        }
        Reply::Document(self.labelled(document))
    }

    /// The data as the fail point was set with it.
    pub fn data(&self) -> &Document {
        &self.data.raw
    }

    /// Adds `errorLabels` to an error reply (or one with a write concern error).
    fn labelled(&self, mut reply: Document) -> Document {
        let labels = match &self.data.error_labels {
            Some(labels) => labels.clone(),
            None => labels_for(self.kind, &reply),
        };
        if !labels.is_empty() {
            reply.insert("errorLabels", labels);
        }
        reply
    }
}

/// `RetryableWriteError` when the reply's error or write concern error is retryable and the
/// command is a retryable write (a write command with a `txnNumber`, outside a transaction).
pub fn retryable_write_labels(request: &CommandRequest, reply: &Document) -> Vec<Bson> {
    labels_for(LabelledKind::of(request), reply)
}

/// What a command is, as far as the labels of its errors go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LabelledKind {
    /// A write command with a `txnNumber` outside a transaction, or a transaction's commit or
    /// abort (which mongod retries as writes): retryable errors get `RetryableWriteError`.
    RetryableWrite,
    /// A statement of a transaction: transient errors get `TransientTransactionError`.
    TransactionStatement,
    Other,
}

impl LabelledKind {
    fn of(request: &CommandRequest) -> LabelledKind {
        let name = request.name.as_str();
        let in_transaction = request.body.contains_key("autocommit");
        let ends_transaction = name == "commitTransaction" || name == "abortTransaction";
        if RETRYABLE_WRITE_COMMANDS.contains(&name) && request.body.contains_key("txnNumber") && (!in_transaction || ends_transaction) {
            LabelledKind::RetryableWrite
        } else if in_transaction && !ends_transaction {
            LabelledKind::TransactionStatement
        } else {
            LabelledKind::Other
        }
    }
}

fn labels_for(kind: LabelledKind, reply: &Document) -> Vec<Bson> {
    let code = |document: &Document| document.get("code").and_then(crate::request::integer_value);
    let listed = |codes: &[i32], code: Option<i64>| code.is_some_and(|code| codes.iter().any(|listed| i64::from(*listed) == code));
    let failed_code = if matches!(reply.get("ok"), Some(Bson::Double(ok)) if *ok == 1.0) { None } else { code(reply) };
    let write_concern_code = reply.get_document("writeConcernError").ok().and_then(code);
    let retryable = |code: Option<i64>| code.and_then(|code| i32::try_from(code).ok()).is_some_and(myriad_error_codes::is_retryable_write_error);
    if kind == LabelledKind::RetryableWrite && (retryable(failed_code) || retryable(write_concern_code)) {
        vec![Bson::String("RetryableWriteError".into())]
    } else if kind == LabelledKind::TransactionStatement && listed(crate::transactions::TRANSIENT_CODES, failed_code) {
        vec![Bson::String("TransientTransactionError".into())]
    } else {
        Vec::new()
    }
}

/// configureFailPoint's reply: `{count}` (the times entered before this call).
pub fn configured_reply(count: i64) -> Document {
    doc! { "count": count, "ok": 1.0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::ConnectionInfo;
    use myriad_reply::error::BAD_VALUE;

    fn request(body: Document) -> CommandRequest {
        CommandRequest::new("test".to_string(), body, ConnectionInfo::detached(1)).expect("request")
    }

    fn insert() -> CommandRequest {
        request(doc! { "insert": "c", "documents": [{}] })
    }

    const WRITE: CommandTraits = CommandTraits { supports_write_concern: true };


    #[test]
    fn times_fires_that_many_times_then_turns_off() {
        let points = FailPoints::default();
        let configured = points.configure(FAIL_COMMAND, &doc! { "mode": { "times": 2 }, "data": { "failCommands": ["insert"], "errorCode": 2 } });
        assert_eq!(configured.expect("set"), 0);
        assert!(points.fail_command(&insert(), || Some(WRITE)).is_some());
        assert!(points.fail_command(&insert(), || Some(WRITE)).is_some());
        assert!(points.fail_command(&insert(), || Some(WRITE)).is_none());
        assert!(!points.armed.load(Ordering::Relaxed), "used up, the check is one load again");
        assert_eq!(points.configure(FAIL_COMMAND, &doc! { "mode": "off" }).expect("off"), 2);
    }

    #[test]
    fn skip_lets_activations_pass_and_other_commands_never_count() {
        let points = FailPoints::default();
        points.configure(FAIL_COMMAND, &doc! { "mode": { "skip": 1 }, "data": { "failCommands": ["insert"], "errorCode": 2 } }).expect("set");
        assert!(points.fail_command(&request(doc! { "find": "c" }), || Some(CommandTraits { supports_write_concern: false })).is_none());
        assert!(points.fail_command(&insert(), || Some(WRITE)).is_none(), "skipped");
        assert!(points.fail_command(&insert(), || Some(WRITE)).is_some());
    }

    #[test]
    fn unknown_fail_points_and_bad_modes_are_refused() {
        let points = FailPoints::default();
        assert_eq!(points.configure("noSuchFailPoint", &doc! { "mode": "off" }).unwrap_err().code, 266);
        assert_eq!(points.configure(FAIL_COMMAND, &doc! {}).unwrap_err().code, ILLEGAL_OPERATION.code);
        assert_eq!(points.configure(FAIL_COMMAND, &doc! { "mode": "sometimes" }).unwrap_err().code, BAD_VALUE.code);
        assert_eq!(points.configure(FAIL_COMMAND, &doc! { "mode": 1 }).unwrap_err().code, TYPE_MISMATCH.code);
        let no_block_time = doc! { "mode": "alwaysOn", "data": { "blockConnection": true } };
        assert_eq!(points.configure(FAIL_COMMAND, &no_block_time).unwrap_err().code, INVALID_OPTIONS.code);
    }

    #[test]
    fn retryable_errors_of_retryable_writes_are_labelled() {
        let retryable = request(doc! { "insert": "c", "txnNumber": 1i64, "lsid": { "id": 1 } });
        assert_eq!(retryable_write_labels(&retryable, &doc! { "ok": 0.0, "code": 91 }), vec![Bson::String("RetryableWriteError".into())]);
        assert!(retryable_write_labels(&retryable, &doc! { "ok": 0.0, "code": 2 }).is_empty());
        assert!(retryable_write_labels(&insert(), &doc! { "ok": 0.0, "code": 91 }).is_empty(), "no txnNumber");
        let write_concern = doc! { "ok": 1.0, "writeConcernError": { "code": 91, "errmsg": "" } };
        assert_eq!(retryable_write_labels(&retryable, &write_concern).len(), 1);
    }
}

/// The hosts this process's calls to other cluster members do not reach: a test's network
/// partition between a router and a shard, or between shards (the `clusterNetworkPartition`
/// fail point, `myriad_cluster`'s client checks it). Empty outside tests: then the check is one
/// relaxed atomic load.
static CLUSTER_PARTITION: parking_lot::RwLock<Vec<String>> = parking_lot::RwLock::new(Vec::new());
static CLUSTER_PARTITION_SET: AtomicBool = AtomicBool::new(false);

/// Cuts this process's calls to `hosts` (`host:port`); an empty list heals.
pub fn set_cluster_partition(hosts: Vec<String>) {
    let mut partition = CLUSTER_PARTITION.write();
    CLUSTER_PARTITION_SET.store(!hosts.is_empty(), Ordering::Release);
    *partition = hosts;
}

/// True when a call of this process to `host` is cut by the test's partition.
pub fn cluster_partition_cuts(host: &str) -> bool {
    CLUSTER_PARTITION_SET.load(Ordering::Acquire) && CLUSTER_PARTITION.read().iter().any(|cut| cut == host)
}
