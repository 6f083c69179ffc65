//! `profile`: reads or sets the database profiler, as MongoDB 7.0's command
//! (`{profile: <level>, slowms?, sampleRate?, filter?}`).
//!
//! A level of 0, 1 or 2 sets the database's level; any other level (-1 by convention) only
//! reads. `slowms` and `sampleRate` are server-wide; `filter` (a query over profile documents,
//! or `"unset"`) is per database. The reply holds the settings as they were before the
//! command: `{was, slowms, sampleRate, filter?, note?, ok}`. Turning profiling on creates
//! `system.profile`; every change is logged ("Profiler settings changed", 48742).

use bson::{doc, Bson, Document};

use crate::error::{CommandError, CommandResult, BAD_VALUE, TYPE_MISMATCH};
use crate::profiler::{profile_collection, DatabaseSettings, ProfileFilter, Profiler};
use crate::{CommandRequest, ServerContext};

/// What MongoDB adds to the reply when a filter is or was set.
const FILTER_NOTE: &str = "When a filter expression is set, slowms and sampleRate are not used for profiling and slow-query log lines.";

/// A change of the database's filter.
enum FilterChange {
    Set(ProfileFilter),
    Unset,
}

struct ProfileArguments {
    level: i64,
    slow_ms: Option<i64>,
    sample_rate: Option<f64>,
    filter: Option<FilterChange>,
}

impl ProfileArguments {
    fn changes_database(&self) -> bool {
        (0..=2).contains(&self.level) || self.filter.is_some()
    }

    fn changes_anything(&self) -> bool {
        self.level != -1 || self.slow_ms.is_some() || self.sample_rate.is_some() || self.filter.is_some()
    }
}

fn wrong_type(field: &str, value: &Bson, expected: &str) -> CommandError {
    CommandError::new(
        TYPE_MISMATCH,
        format!("BSON field 'profile.{field}' is the wrong type '{}', expected {expected}", crate::request::type_name(value)),
    )
}

/// A `safeInt64` field: any number, fractions truncated.
fn safe_int64(field: &str, value: &Bson) -> CommandResult<i64> {
    super::create::safe_int64(value).ok_or_else(|| wrong_type(field, value, "types '[long, int, decimal, double]'"))
}

fn parse_arguments(request: &CommandRequest) -> CommandResult<ProfileArguments> {
    let level = match request.first_value() {
        Some(value) => safe_int64("profile", value)?,
        None => -1,
    };
    let slow_ms = match request.body.get("slowms") {
        None | Some(Bson::Null) => None,
        Some(value) => Some(safe_int64("slowms", value)?),
    };
    let sample_rate = match request.body.get("sampleRate") {
        None | Some(Bson::Null) => None,
        Some(Bson::Double(rate)) => Some(*rate),
        Some(other) => return Err(wrong_type("sampleRate", other, "type 'double'")),
    };
    let filter_document = match request.body.get("filter") {
        None => None,
        Some(Bson::Document(filter)) => Some(Some(filter)),
        Some(Bson::String(unset)) if unset == "unset" => Some(None),
        Some(_) => return Err(CommandError::new(BAD_VALUE, "Expected an object, or the string 'unset'.")),
    };
    if let Some(rate) = sample_rate {
        if !(0.0..=1.0).contains(&rate) {
            return Err(CommandError::new(BAD_VALUE, "'sampleRate' must be between 0.0 and 1.0 inclusive"));
        }
    }
    let filter = match filter_document {
        None => None,
        Some(Some(document)) => Some(FilterChange::Set(ProfileFilter::parse(document)?)),
        Some(None) => Some(FilterChange::Unset),
    };
    Ok(ProfileArguments { level, slow_ms, sample_rate, filter })
}

/// The settings as the reply and the change log show them.
fn describe(settings: &DatabaseSettings, profiler: &Profiler) -> Document {
    let mut described = doc! { "level": settings.level, "slowms": profiler.slow_ms(), "sampleRate": profiler.sample_rate() };
    if let Some(filter) = &settings.filter {
        described.insert("filter", filter.document.clone());
    }
    described
}

/// mongos's refusal of a profiling level: a router only logs slow operations.
const NOT_ON_ROUTER: &str = "Profiling is not permitted on mongoS: the 'profile' field should be 0 to change 'slowms', 'sampleRate', or \
                             'filter' settings for logging, or -1 to view current values";

pub fn run(context: &ServerContext, request: &CommandRequest) -> CommandResult<Document> {
    let arguments = parse_arguments(request)?;
    if context.process == crate::context::Process::Router && (1..=2).contains(&arguments.level) {
        return Err(CommandError::new(BAD_VALUE, NOT_ON_ROUTER));
    }
    let profiler = &context.operations.profiler;
    let previous = profiler.database_settings(&request.db);
    let before = describe(&previous, profiler);
    if arguments.changes_database() {
        let mut settings = previous.clone();
        if (0..=2).contains(&arguments.level) {
            settings.level = arguments.level as i32;
        }
        match &arguments.filter {
            Some(FilterChange::Set(filter)) => settings.filter = Some(filter.clone()),
            Some(FilterChange::Unset) => settings.filter = None,
            None => {}
        }
        if settings.level > 0 {
            profile_collection(context.backend.as_ref(), &request.db)?;
        }
        profiler.set_database_settings(&request.db, settings)?;
    }
    let mut reply = doc! { "was": previous.level, "slowms": profiler.slow_ms(), "sampleRate": profiler.sample_rate() };
    if let Some(filter) = &previous.filter {
        reply.insert("filter", filter.document.clone());
    }
    if previous.filter.is_some() || arguments.filter.is_some() {
        reply.insert("note", FILTER_NOTE);
    }
    if let Some(slow_ms) = arguments.slow_ms {
        // mongod keeps slowms in an int: a larger value wraps as its conversion does.
        profiler.set_slow_ms(slow_ms as i32);
    }
    if let Some(sample_rate) = arguments.sample_rate {
        profiler.set_sample_rate(sample_rate);
    }
    if arguments.changes_anything() {
        let after = describe(&profiler.database_settings(&request.db), profiler);
        let attributes = doc! { "from": before, "to": after };
        context.logger.info(
            "COMMAND",
            48742,
            &format!("conn{}", request.connection.connection_id),
            "Profiler settings changed",
            Bson::Document(attributes).into_relaxed_extjson(),
        );
    }
    reply.insert("ok", 1.0);
    Ok(reply)
}
