//! Refusing fields a command does not take, where MongoDB's parser for it is strict.
//!
//! mongod parses most commands with IDL-generated parsers declared `strict: true`: a
//! top-level field that is neither one of the command's own nor a generic argument (the
//! arguments every command takes: `lsid`, `$db`, `writeConcern`, `comment`...; mongod's
//! `generic_argument.idl`) fails the command with 40415, "BSON field '<context>.<field>' is an
//! unknown field.", before anything else of the command runs. The context is the parser's
//! name: the command's canonical name, except find's, which is `FindCommandRequest`.
//!
//! [`check_command`] makes that check once for every command, before its handler, from
//! [`STRICT_COMMANDS`]: for each strictly parsed command, the fields its parser knows, as
//! MongoDB 7.0 (and the 6.0 to 8.0 releases around it) declares them, including the internal
//! ones drivers never send, so nothing mongod takes is refused. A command absent from the
//! table takes any field, as mongod's non-IDL commands do (ping, serverStatus...), and so does
//! `hello`: its parser takes unknown fields, so that drivers may add handshake fields (pymongo
//! 4.20 sends `backpressure` to every server). Commands whose parsers also check nested
//! documents or answer some known fields specially (hello's `topologyVersion`, `collMod`,
//! `bulkWrite`, `authenticate`) keep those checks in their handlers, with the same generic
//! arguments ([`GENERIC_ARGUMENTS`]) and the same text ([`CommandError::unknown_field`]).
//!
//! The statements of update and delete are parsed strictly too (mongod's `UpdateOpEntry` and
//! `DeleteOpEntry`): an unknown field of one is "BSON field 'update.updates.<field>' is an
//! unknown field." ([`STRICT_STATEMENTS`]). Fields are checked in the order they come, as
//! mongod's parser meets them.

use bson::Bson;
use myriad_reply::error::{CommandError, CommandResult};

use super::CommandRequest;

/// MongoDB's generic command arguments (`generic_argument.idl`): every command takes them,
/// whatever its own parser, and they are parsed apart from each command's own fields (so a
/// repeat of one is not the command parser's duplicate either: drivers may send `lsid` twice
/// when a caller's command already had one).
pub const GENERIC_ARGUMENTS: &[&str] = &[
    // Stable API version 1.
    "apiVersion", "apiStrict", "apiDeprecationErrors", "$db", "maxTimeMS", "readConcern", "writeConcern", "lsid",
    "clientOperationKey", "txnNumber", "autocommit", "startTransaction", "stmtId", "comment", "$readPreference",
    "$clusterTime",
    // Unstable: between members, routers and shards.
    "$audit", "$client", "$configServerState", "allowImplicitCollectionCreation", "$oplogQueryData", "$queryOptions",
    "$replData", "databaseVersion", "shardVersion", "tracking_info", "coordinator", "maxTimeMSOpOnly", "$configTime",
    "$topologyTime", "txnRetryCounter", "mayBypassWriteBlocking", "$tenant", "expectPrefix", "usesDefaultMaxTimeMS",
];

/// A command mongod parses strictly: the name its parser reports in messages and the fields
/// it takes besides the generic arguments.
struct StrictCommand {
    /// The command's name and the other spellings its parser answers to (mongod's
    /// `command_alias`), the canonical name first: the context names the canonical one.
    names: &'static [&'static str],
    /// The parser's name in "BSON field '<context>.<field>'".
    context: &'static str,
    fields: &'static [&'static str],
}

/// The fields every write command takes (mongod's `WriteCommandRequestBase`).
const WRITE_COMMAND_FIELDS: &[&str] = &[
    "bypassDocumentValidation", "ordered", "stmtId", "stmtIds", "isTimeseriesNamespace", "collectionUUID",
    "encryptionInformation", "bypassEmptyTsReplacement",
];

const STRICT_COMMANDS: &[StrictCommand] = &[
    StrictCommand {
        names: &["find"],
        context: "FindCommandRequest",
        fields: &[
            "filter", "projection", "sort", "hint", "collation", "skip", "limit", "batchSize", "ntoreturn", "singleBatch",
            "allowDiskUse", "min", "max", "returnKey", "showRecordId", "$queryOptions", "tailable", "oplogReplay",
            "noCursorTimeout", "awaitData", "allowPartialResults", "let", "options", "term", "readOnce",
            "allowSpeculativeMajorityRead", "$_requestResumeToken", "$_resumeAfter", "$_startAt", "maxTimeMS",
            "readConcern", "runtimeConstants", "collectionUUID", "encryptionInformation", "isTimeseriesNamespace",
            "mirrored", "sampleId", "includeQueryStatsMetrics",
        ],
    },
    StrictCommand {
        names: &["aggregate"],
        context: "aggregate",
        fields: &[
            "pipeline", "explain", "allowDiskUse", "cursor", "maxTimeMS", "bypassDocumentValidation", "readConcern",
            "collation", "hint", "writeConcern", "let", "needsMerge", "fromMongos", "fromRouter", "$queryOptions",
            "$_requestReshardingResumeToken", "exchange", "runtimeConstants", "isMapReduceCommand", "collectionUUID",
            "$_passthroughToShard", "encryptionInformation", "$_externalDataSources", "sampleId", "stmtId",
            "$_isClusterQueryWithoutShardKeyCmd", "$_requestResumeToken", "$_resumeAfter", "$_generateV2ResumeTokens",
            "isHybridSearch", "includeQueryStatsMetrics",
        ],
    },
    StrictCommand { names: &["insert"], context: "insert", fields: &["documents"] },
    StrictCommand { names: &["update"], context: "update", fields: &["updates", "let", "runtimeConstants"] },
    StrictCommand { names: &["delete"], context: "delete", fields: &["deletes", "let", "runtimeConstants"] },
    StrictCommand {
        names: &["findAndModify", "findandmodify"],
        context: "findAndModify",
        fields: &[
            "query", "fields", "sort", "hint", "collation", "arrayFilters", "remove", "update", "new", "upsert",
            "bypassDocumentValidation", "writeConcern", "maxTimeMS", "let", "runtimeConstants", "encryptionInformation",
            "stmtId", "sampleId", "$_originalQuery", "$_originalCollation", "$_allowShardKeyUpdatesWithoutFullShardKeyInQuery",
            "isTimeseriesNamespace", "bypassEmptyTsReplacement",
        ],
    },
    StrictCommand {
        names: &["count"],
        context: "count",
        fields: &[
            "query", "limit", "skip", "hint", "collation", "fields", "readConcern", "maxTimeMS", "$queryOptions",
            "encryptionInformation", "sampleId", "mirrored",
        ],
    },
    StrictCommand {
        names: &["distinct"],
        context: "distinct",
        fields: &["key", "query", "collation", "hint", "sampleId", "mirrored", "$queryOptions", "isTimeseriesNamespace"],
    },
    StrictCommand {
        names: &["getMore"],
        context: "getMore",
        fields: &["collection", "batchSize", "maxTimeMS", "term", "lastKnownCommittedOpTime", "includeQueryStatsMetrics"],
    },
    StrictCommand { names: &["killCursors"], context: "killCursors", fields: &["cursors"] },
    StrictCommand {
        names: &["createIndexes"],
        context: "createIndexes",
        fields: &["v", "indexes", "ignoreUnknownIndexOptions", "commitQuorum", "returnOnStart", "isTimeseriesNamespace", "collectionUUID"],
    },
    StrictCommand {
        names: &["listCollections"],
        context: "listCollections",
        fields: &["cursor", "filter", "nameOnly", "authorizedCollections", "includePendingDrops"],
    },
    StrictCommand {
        names: &["listIndexes"],
        context: "listIndexes",
        fields: &["cursor", "includeBuildUUIDs", "includeIndexBuildInfo", "isTimeseriesNamespace"],
    },
    StrictCommand {
        names: &["create"],
        context: "create",
        fields: &[
            "capped", "autoIndexId", "idIndex", "size", "max", "storageEngine", "validator", "validationLevel",
            "validationAction", "indexOptionDefaults", "viewOn", "pipeline", "collation", "changeStreamPreAndPostImages",
            "timeseries", "clusteredIndex", "recordIdsReplicated", "expireAfterSeconds", "encryptedFields",
            "recordPreImages", "temp", "flags",
        ],
    },
    StrictCommand { names: &["drop"], context: "drop", fields: &["collectionUUID"] },
    StrictCommand { names: &["dropIndexes", "deleteIndexes"], context: "dropIndexes", fields: &["index", "isTimeseriesNamespace", "collectionUUID"] },
    StrictCommand { names: &["dropDatabase"], context: "dropDatabase", fields: &[] },
    StrictCommand {
        names: &["renameCollection"],
        context: "renameCollection",
        fields: &["to", "dropTarget", "stayTemp", "collectionUUID", "targetUUID", "expectedSourceUUID", "expectedTargetUUID"],
    },
];

/// The statements of a write command, parsed strictly: the command, the array that holds
/// them and the fields a statement takes (no generic arguments inside).
struct StrictStatements {
    command: &'static str,
    array: &'static str,
    fields: &'static [&'static str],
}

const STRICT_STATEMENTS: &[StrictStatements] = &[
    StrictStatements {
        command: "update",
        array: "updates",
        fields: &[
            "q", "u", "c", "arrayFilters", "hint", "multi", "upsert", "upsertSupplied", "collation", "sampleId", "sort",
            "$_allowShardKeyUpdatesWithoutFullShardKeyInQuery",
        ],
    },
    StrictStatements { command: "delete", array: "deletes", fields: &["q", "limit", "hint", "collation", "sampleId"] },
];

/// The strict parser of the command named `command` (any of its spellings), when mongod has
/// one.
fn strict_command(command: &str) -> Option<&'static StrictCommand> {
    STRICT_COMMANDS.iter().find(|strict| strict.names.contains(&command))
}

/// Whether the command takes `field` as a write command, on top of its own fields.
fn is_write_command_field(strict: &StrictCommand, field: &str) -> bool {
    matches!(strict.names, ["insert"] | ["update"] | ["delete"]) && WRITE_COMMAND_FIELDS.contains(&field)
}

/// 40415 for the first field of `request` that its command's strict parser does not take, at
/// the top level or in a statement; nothing for a command mongod does not parse strictly. The
/// command's own first field (its name) is never checked.
pub fn check_command(request: &CommandRequest) -> CommandResult<()> {
    let Some(strict) = strict_command(&request.name) else { return Ok(()) };
    let statements = STRICT_STATEMENTS.iter().find(|statements| strict.names[0] == statements.command);
    for (field, value) in request.body.iter().skip(1) {
        let name = field.as_str();
        if !strict.fields.contains(&name) && !GENERIC_ARGUMENTS.contains(&name) && !is_write_command_field(strict, name) {
            return Err(CommandError::unknown_field(&format!("{}.{field}", strict.context)));
        }
        if let (Some(statements), Bson::Array(entries)) = (statements, value) {
            if statements.array == name {
                check_statements(strict.context, statements, entries)?;
            }
        }
    }
    Ok(())
}

/// 40415 for the first field of a statement that its parser does not take (statements that
/// are not documents are the command's own parser's to refuse).
fn check_statements(context: &str, statements: &StrictStatements, entries: &[Bson]) -> CommandResult<()> {
    for entry in entries {
        let Bson::Document(statement) = entry else { continue };
        if let Some(field) = statement.keys().find(|field| !statements.fields.contains(&field.as_str())) {
            return Err(CommandError::unknown_field(&format!("{context}.{}.{field}", statements.array)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Document};

    fn refused(body: Document) -> Option<(i32, String)> {
        let request = CommandRequest::new("db".into(), body, crate::ConnectionInfo::detached(1)).expect("a request");
        check_command(&request).err().map(|error| (error.code, error.message))
    }

    #[test]
    fn an_unknown_field_is_named_with_the_parser_context() {
        let cases: &[(Document, Option<(i32, &str)>)] = &[
            (doc! { "find": "c", "bogus": 1 }, Some((40415, "BSON field 'FindCommandRequest.bogus' is an unknown field."))),
            (doc! { "aggregate": "c", "pipeline": [], "cursor": {}, "x": 1 }, Some((40415, "BSON field 'aggregate.x' is an unknown field."))),
            (doc! { "insert": "c", "documents": [], "ordered": true, "nope": 1 }, Some((40415, "BSON field 'insert.nope' is an unknown field."))),
            (doc! { "findandmodify": "c", "query": {}, "remove": true, "z": 1 }, Some((40415, "BSON field 'findAndModify.z' is an unknown field."))),
            (doc! { "dropDatabase": 1, "force": true }, Some((40415, "BSON field 'dropDatabase.force' is an unknown field."))),
        ];
        for (body, expected) in cases {
            let expected = expected.map(|(code, message)| (code, message.to_string()));
            assert_eq!(refused(body.clone()), expected, "{body}");
        }
    }

    #[test]
    fn generic_arguments_and_the_commands_own_fields_pass() {
        let generic = doc! {
            "lsid": { "id": 1 }, "$db": "db", "$clusterTime": {}, "$readPreference": { "mode": "primary" }, "comment": "c",
            "maxTimeMS": 5, "readConcern": {}, "writeConcern": { "w": 1 }, "apiVersion": "1", "txnNumber": 1_i64,
        };
        let mut find = doc! { "find": "c", "filter": {}, "sort": {}, "projection": {}, "limit": 1, "batchSize": 2, "let": {} };
        find.extend(generic.clone());
        assert_eq!(refused(find), None);
        let mut update = doc! { "update": "c", "updates": [], "ordered": false, "bypassDocumentValidation": true, "let": {} };
        update.extend(generic);
        assert_eq!(refused(update), None);
        assert_eq!(refused(doc! { "ping": 1, "anything": 1 }), None, "ping is not parsed strictly");
        assert_eq!(refused(doc! { "deleteIndexes": "c", "index": "a_1" }), None);
        let alias = refused(doc! { "deleteIndexes": "c", "index": "a_1", "x": 1 });
        assert_eq!(alias.map(|(_, message)| message), Some("BSON field 'dropIndexes.x' is an unknown field.".to_string()));
    }

    #[test]
    fn statements_are_parsed_strictly_in_order() {
        let statement_field = refused(doc! { "update": "c", "updates": [{ "q": {}, "u": {} }, { "q": {}, "u": {}, "x": 1 }] });
        assert_eq!(statement_field.map(|(_, message)| message), Some("BSON field 'update.updates.x' is an unknown field.".to_string()));
        let delete = refused(doc! { "delete": "c", "deletes": [{ "q": {}, "limit": 0, "multi": true }] });
        assert_eq!(delete.map(|(_, message)| message), Some("BSON field 'delete.deletes.multi' is an unknown field.".to_string()));
        let first = refused(doc! { "update": "c", "bogus": 1, "updates": [{ "q": {}, "u": {}, "x": 1 }] });
        assert_eq!(first.map(|(_, message)| message), Some("BSON field 'update.bogus' is an unknown field.".to_string()));
        let full = doc! { "q": {}, "u": [], "c": {}, "arrayFilters": [], "hint": {}, "multi": true, "upsert": true, "collation": {}, "sort": {} };
        assert_eq!(refused(doc! { "update": "c", "updates": [full, 5] }), None, "a statement of another type is the parser's to refuse");
    }

    #[test]
    fn write_command_fields_belong_to_write_commands_only() {
        assert_eq!(refused(doc! { "delete": "c", "deletes": [], "stmtIds": [0] }), None);
        assert!(refused(doc! { "count": "c", "ordered": true }).is_some());
    }

    #[test]
    fn every_strict_command_is_listed_once() {
        for (position, strict) in STRICT_COMMANDS.iter().enumerate() {
            for name in strict.names {
                assert_eq!(strict_command(name).map(|found| found.names), Some(strict.names), "{name}");
                assert!(STRICT_COMMANDS[position + 1..].iter().all(|other| !other.names.contains(name)), "{name}");
            }
        }
    }
}
