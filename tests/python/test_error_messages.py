"""MongoDB's messages (issue 24, item 9): refused commands answer with mongod 7.0's error code
AND its exact errmsg. One table per family, each row a command and what mongod answers:

  1. command parsing (the IDL parser: wrong type 14, missing field 40414, unknown field 40415,
     and command checks),
  2. aggregation stages and expressions,
  3. query (filter) operators,
  4. update operators (answered as a write error of the update command),
  5. namespaces and indexes.

The expected codes and texts are MongoDB 7.0's (mongod), taken from its source:
src/mongo/idl/idl_parser.cpp (the 'BSON field ...' sentences), src/mongo/db/query/*.idl and
query_request_helper.cpp (find's parser context is 'FindCommandRequest'),
src/mongo/db/pipeline/ (document_source_*.cpp, expression.cpp, accumulator parsing),
src/mongo/db/matcher/expression_parser.cpp, src/mongo/util/regex_util.cpp, src/mongo/db/update/
(*_node.cpp, update_object_node.cpp, storage_validation.cpp), src/mongo/db/catalog/
(drop_indexes.cpp, rename_collection.cpp, create_collection.cpp, index_catalog_impl.cpp,
index_key_validate.cpp) and the commands' IDL files (find_command.idl, aggregate_command.idl,
write_ops.idl... for the fields strict parsers take, generic_argument.idl for those every
command takes). A message is compared whole
unless it embeds a rendering of a document, where only the fixed part is compared (noted on
the row)."""

import pytest
from bson.int64 import Int64
from bson.objectid import ObjectId
from pymongo.errors import OperationFailure

EXACT, PREFIX = "exact", "prefix"


def refusal(db, command):
    """The (code, errmsg) with which `command` fails: the command's own error or, for a write
    command, its first write error."""
    try:
        reply = db.command(command)
    except OperationFailure as failure:
        return failure.code, failure.details.get("errmsg")
    errors = reply.get("writeErrors") or []
    assert errors, f"{command} was not refused: {reply}"
    return errors[0]["code"], errors[0]["errmsg"]


def check(db, command, code, message, match=EXACT):
    got_code, got_message = refusal(db, command)
    assert got_code == code, (got_code, got_message)
    if match == EXACT:
        assert got_message == message
    else:
        assert got_message.startswith(message), got_message


# --- 1. Command parsing ----------------------------------------------------------------------

SAFE_INT64 = "expected types '[long, int, decimal, double']"  # toCommaDelimitedList, sic

PARSING = [
    ("find_batchSize_type", {"find": "c", "batchSize": "x"}, 14,
     f"BSON field 'FindCommandRequest.batchSize' is the wrong type 'string', {SAFE_INT64}"),
    ("find_batchSize_negative", {"find": "c", "batchSize": -1}, 51024,
     "BSON field 'batchSize' value must be >= 0, actual value '-1'"),
    ("aggregate_pipeline_missing", {"aggregate": "c", "cursor": {}}, 40414,
     "BSON field 'aggregate.pipeline' is missing but a required field"),
    ("aggregate_pipeline_type", {"aggregate": "c", "pipeline": 1, "cursor": {}}, 14,
     "BSON field 'aggregate.pipeline' is the wrong type 'int', expected type 'array'"),
    ("aggregate_cursor_missing", {"aggregate": "c", "pipeline": []}, 9,
     "The 'cursor' option is required, except for aggregate with the explain argument"),
    ("aggregate_cursor_type", {"aggregate": "c", "pipeline": [], "cursor": 1}, 14,
     "BSON field 'aggregate.cursor' is the wrong type 'int', expected type 'object'"),
    ("insert_documents_missing", {"insert": "c"}, 40414,
     "BSON field 'insert.documents' is missing but a required field"),
    ("insert_ordered_type", {"insert": "c", "documents": [{}], "ordered": "x"}, 14,
     "BSON field 'insert.ordered' is the wrong type 'string', expected type 'bool'"),
    ("update_updates_missing", {"update": "c"}, 40414,
     "BSON field 'update.updates' is missing but a required field"),
    ("update_q_missing", {"update": "c", "updates": [{"u": {}}]}, 40414,
     "BSON field 'update.updates.q' is missing but a required field"),
    ("update_u_missing", {"update": "c", "updates": [{"q": {}}]}, 40414,
     "BSON field 'update.updates.u' is missing but a required field"),
    ("update_multi_type", {"update": "c", "updates": [{"q": {}, "u": {}, "multi": "x"}]}, 14,
     "BSON field 'update.updates.multi' is the wrong type 'string', expected type 'bool'"),
    ("delete_deletes_missing", {"delete": "c"}, 40414,
     "BSON field 'delete.deletes' is missing but a required field"),
    ("delete_q_missing", {"delete": "c", "deletes": [{"limit": 0}]}, 40414,
     "BSON field 'delete.deletes.q' is missing but a required field"),
    ("delete_limit_missing", {"delete": "c", "deletes": [{"q": {}}]}, 40414,
     "BSON field 'delete.deletes.limit' is missing but a required field"),
    ("count_query_type", {"count": "c", "query": 1}, 14,
     "BSON field 'count.query' is the wrong type 'int', expected type 'object'"),
    ("distinct_key_missing", {"distinct": "c"}, 40414,
     "BSON field 'distinct.key' is missing but a required field"),
    ("distinct_query_type", {"distinct": "c", "key": "a", "query": 1}, 14,
     "BSON field 'distinct.query' is the wrong type 'int', expected type 'object'"),
    ("createIndexes_indexes_missing", {"createIndexes": "c"}, 40414,
     "BSON field 'createIndexes.indexes' is missing but a required field"),
    ("createIndexes_indexes_type", {"createIndexes": "c", "indexes": 1}, 14,
     "BSON field 'createIndexes.indexes' is the wrong type 'int', expected type 'array'"),
    ("createIndexes_indexes_empty", {"createIndexes": "c", "indexes": []}, 2,
     "Must specify at least one index to create"),
    ("listCollections_filter_type", {"listCollections": 1, "filter": 1}, 14,
     "BSON field 'listCollections.filter' is the wrong type 'int', expected type 'object'"),
    ("killCursors_cursors_missing", {"killCursors": "c"}, 40414,
     "BSON field 'killCursors.cursors' is missing but a required field"),
    ("findAndModify_query_type", {"findAndModify": "c", "query": 1, "remove": True}, 14,
     "BSON field 'findAndModify.query' is the wrong type 'int', expected type 'object'"),
    ("findAndModify_neither", {"findAndModify": "c", "query": {}}, 9,
     "Either an update or remove=true must be specified"),
    ("find_filter_type", {"find": "c", "filter": 1}, 14,
     "BSON field 'FindCommandRequest.filter' is the wrong type 'int', expected type 'object'"),
    ("find_sort_type", {"find": "c", "sort": 1}, 14,
     "BSON field 'FindCommandRequest.sort' is the wrong type 'int', expected type 'object'"),
    ("find_limit_type", {"find": "c", "limit": "x"}, 14,
     f"BSON field 'FindCommandRequest.limit' is the wrong type 'string', {SAFE_INT64}"),
    ("find_skip_type", {"find": "c", "skip": "x"}, 14,
     f"BSON field 'FindCommandRequest.skip' is the wrong type 'string', {SAFE_INT64}"),
    ("find_skip_negative", {"find": "c", "skip": -1}, 51024, "BSON field 'skip' value must be >= 0, actual value '-1'"),
    ("find_limit_negative", {"find": "c", "limit": -1}, 51024, "BSON field 'limit' value must be >= 0, actual value '-1'"),
    ("distinct_key_type", {"distinct": "c", "key": 1}, 14,
     "BSON field 'distinct.key' is the wrong type 'int', expected type 'string'"),
    ("create_capped_type", {"create": "capped_type", "capped": "x"}, 14,
     "BSON field 'create.capped' is the wrong type 'string', expected types '[bool, long, int, decimal, double']"),
]


@pytest.mark.parametrize("command, code, message", [row[1:] for row in PARSING], ids=[row[0] for row in PARSING])
def test_parsing(db, command, code, message):
    check(db, command, code, message)


# mongod's IDL parsers are strict: a top-level field that is neither the command's own nor a
# generic argument is 40415, named with the parser's context (find's is FindCommandRequest).
UNKNOWN_FIELDS = [
    ("hello_topologyVersion", {"isMaster": 1, "topologyVersion": {"processId": ObjectId(), "counter": Int64(0), "bogus": 1},
                               "maxAwaitTimeMS": 1}, "hello.topologyVersion.bogus"),
    ("find", {"find": "c", "filter": {}, "bogus": 1}, "FindCommandRequest.bogus"),
    ("aggregate", {"aggregate": "c", "pipeline": [], "cursor": {}, "bogus": 1}, "aggregate.bogus"),
    ("insert", {"insert": "c", "documents": [{}], "bogus": 1}, "insert.bogus"),
    ("update", {"update": "c", "updates": [{"q": {}, "u": {}}], "bogus": 1}, "update.bogus"),
    ("delete", {"delete": "c", "deletes": [{"q": {}, "limit": 0}], "bogus": 1}, "delete.bogus"),
    ("update_statement", {"update": "c", "updates": [{"q": {}, "u": {"$set": {"a": 2}}, "bogus": 1}]}, "update.updates.bogus"),
    ("delete_statement", {"delete": "c", "deletes": [{"q": {}, "limit": 0, "bogus": 1}]}, "delete.deletes.bogus"),
    ("findAndModify", {"findAndModify": "c", "query": {}, "remove": True, "bogus": 1}, "findAndModify.bogus"),
    ("count", {"count": "c", "query": {}, "bogus": 1}, "count.bogus"),
    ("distinct", {"distinct": "c", "key": "a", "bogus": 1}, "distinct.bogus"),
    ("createIndexes", {"createIndexes": "c", "indexes": [{"key": {"b": 1}, "name": "b_1"}], "bogus": 1}, "createIndexes.bogus"),
    ("listCollections", {"listCollections": 1, "bogus": 1}, "listCollections.bogus"),
    ("listIndexes", {"listIndexes": "c", "bogus": 1}, "listIndexes.bogus"),
    ("getMore", {"getMore": Int64(1), "collection": "c", "bogus": 1}, "getMore.bogus"),
    ("killCursors", {"killCursors": "c", "cursors": [], "bogus": 1}, "killCursors.bogus"),
    ("create", {"create": "unknown_option", "bogus": 1}, "create.bogus"),
    ("drop", {"drop": "c", "bogus": 1}, "drop.bogus"),
    ("dropIndexes", {"dropIndexes": "c", "index": "*", "bogus": 1}, "dropIndexes.bogus"),
    ("deleteIndexes", {"deleteIndexes": "c", "index": "*", "bogus": 1}, "dropIndexes.bogus"),
    ("dropDatabase", {"dropDatabase": 1, "bogus": 1}, "dropDatabase.bogus"),
    ("explained_find", {"explain": {"find": "c", "bogus": 1}}, "FindCommandRequest.bogus"),
    # The other 40415 parsers answer in the same words.
    ("collMod", {"collMod": "c", "bogus": 1}, "collMod.bogus"),
    ("bulkWrite_cursor", {"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": [{"ns": "elsewhere.c"}],
                          "cursor": {"bogus": 1}}, "bulkWrite.cursor.bogus"),
]


@pytest.mark.parametrize("command, path", [row[1:] for row in UNKNOWN_FIELDS], ids=[row[0] for row in UNKNOWN_FIELDS])
def test_unknown_fields(db, command, path):
    db.c.insert_one({"_id": 1, "a": 1})
    target = db.client.admin if "bulkWrite" in command else db
    check(target, command, 40415, f"BSON field '{path}' is an unknown field.")
    # Refused before anything ran: the collection and its documents are as they were.
    assert list(db.c.find()) == [{"_id": 1, "a": 1}]
    assert "unknown_option" not in db.list_collection_names()


def test_hello_takes_unknown_fields(db):
    """mongod's hello parser is not strict: drivers add handshake fields (pymongo's backpressure)."""
    assert db.command({"hello": 1, "bogus": 1})["ok"] == 1.0


def test_an_unknown_field_of_renameCollection(db):
    db.c.insert_one({"_id": 1})
    command = {"renameCollection": f"{db.name}.c", "to": f"{db.name}.d", "bogus": 1}
    check(db.client.admin, command, 40415, "BSON field 'renameCollection.bogus' is an unknown field.")
    assert db.list_collection_names() == ["c"]


def test_what_mongod_takes_is_not_refused(db):
    """The commands' own fields, internal ones included, and the generic arguments pass."""
    db.c.insert_one({"_id": 1, "a": 1})
    generic = {"comment": "c", "maxTimeMS": 10000, "readConcern": {"level": "local"}, "$readPreference": {"mode": "primary"}}
    find = {"find": "c", "filter": {"a": 1}, "projection": {"a": 1}, "sort": {"a": 1}, "hint": {"_id": 1}, "skip": 0,
            "limit": 5, "batchSize": 5, "singleBatch": False, "allowDiskUse": True, "let": {"x": 1}, "collation": {"locale": "simple"},
            "noCursorTimeout": False, "allowPartialResults": False, "returnKey": False, "showRecordId": False, "tailable": False,
            "awaitData": False, "readOnce": False, "mirrored": False, **generic}
    assert db.command(find)["cursor"]["firstBatch"] == [{"_id": 1, "a": 1}]
    write = {"ordered": True, "bypassDocumentValidation": False, "writeConcern": {"w": 1}, "comment": "c"}
    assert db.command({"insert": "c", "documents": [{"_id": 2}], **write})["n"] == 1
    assert db.command({"update": "c", "updates": [{"q": {"_id": 2}, "u": {"$set": {"a": 2}}}], "let": {}, **write})["nModified"] == 1
    assert db.command({"delete": "c", "deletes": [{"q": {"_id": 2}, "limit": 1}], "let": {}, **write})["n"] == 1
    assert db.command({"count": "c", "query": {}, "fields": {"a": 1}, "limit": 10, "skip": 0, **generic})["n"] == 1
    assert db.command({"distinct": "c", "key": "a", "query": {}, **generic})["values"] == [1]
    aggregate = {"aggregate": "c", "pipeline": [], "cursor": {}, "allowDiskUse": False, "let": {}, **generic}
    assert db.command(aggregate)["cursor"]["firstBatch"] == [{"_id": 1, "a": 1}]


# --- 2. Aggregation stages and expressions ---------------------------------------------------

INVALID_PROJECT = "Invalid $project :: caused by :: "

AGGREGATION = [
    ("unknown_stage", [{"$foo": 1}], 40324, "Unrecognized pipeline stage name: '$foo'"),
    ("stage_two_fields", [{"$match": {}, "$limit": 1}], 40323,
     "A pipeline stage specification object must contain exactly one field."),
    ("limit_zero", [{"$limit": 0}], 15958, "the limit must be positive"),
    ("limit_negative", [{"$limit": -1}], 5107201, "invalid argument to $limit stage: Expected a non-negative number in: $limit: -1"),
    ("limit_string", [{"$limit": "a"}], 5107201, 'invalid argument to $limit stage: Expected a number in: $limit: "a"'),
    ("limit_fraction", [{"$limit": 1.5}], 5107201, "invalid argument to $limit stage: Expected an integer: $limit: 1.5"),
    ("skip_negative", [{"$skip": -1}], 5107200, "invalid argument to $skip stage: Expected a non-negative number in: $skip: -1"),
    ("skip_string", [{"$skip": "a"}], 5107200, 'invalid argument to $skip stage: Expected a number in: $skip: "a"'),
    ("skip_fraction", [{"$skip": 1.5}], 5107200, "invalid argument to $skip stage: Expected an integer: $skip: 1.5"),
    ("group_without_id", [{"$group": {"n": {"$sum": 1}}}], 15955, "a group specification must include an _id"),
    ("group_not_object", [{"$group": 1}], 15947, "a group's fields must be specified in an object"),
    ("group_field_not_accumulator", [{"$group": {"_id": None, "n": 1}}], 40234,
     "The field 'n' must be an accumulator object"),
    ("group_unknown_accumulator", [{"$group": {"_id": None, "n": {"$foo": 1}}}], 15952,
     "unknown group operator '$foo'"),
    ("project_exclusion_in_inclusion", [{"$project": {"a": 1, "b": 0}}], 31254,
     INVALID_PROJECT + "Cannot do exclusion on field b in inclusion projection"),
    ("project_inclusion_in_exclusion", [{"$project": {"a": 0, "b": 1}}], 31253,
     INVALID_PROJECT + "Cannot do inclusion on field b in exclusion projection"),
    ("project_empty", [{"$project": {}}], 51272,
     INVALID_PROJECT + "projection specification must have at least one field"),
    ("project_unknown_expression", [{"$project": {"a": {"$foo": 1}}}], 31325,
     INVALID_PROJECT + "Unknown expression $foo"),
    ("unknown_expression", [{"$match": {"$expr": {"$foo": 1}}}], 168, "Unrecognized expression '$foo'"),
    ("divide_by_zero", [{"$project": {"x": {"$divide": ["$a", 0]}}}], 2, "can't $divide by zero"),
    ("mod_by_zero", [{"$project": {"x": {"$mod": ["$a", 0]}}}], 16610, "can't $mod by zero"),
    ("concat_non_string", [{"$project": {"x": {"$concat": ["a", "$a"]}}}], 16702,
     "$concat only supports strings, not int"),
    ("add_string", [{"$project": {"x": {"$add": ["$s", 1]}}}], 14,
     "$add only supports numeric or date types, not string"),
    ("unwind_without_dollar", [{"$unwind": "a"}], 28818,
     "path option to $unwind stage should be prefixed with a '$': a"),
    ("unwind_not_string", [{"$unwind": 1}], 15981,
     "expected either a string or an object as specification for $unwind stage, got int"),
    ("sort_bad_order", [{"$sort": {"a": 2}}], 15975,
     "$sort key ordering must be 1 (for ascending) or -1 (for descending)"),
    ("match_not_object", [{"$match": 1}], 15959, "the match filter must be an expression in an object"),
    ("count_dollar", [{"$count": "$a"}], 40158, "the count field cannot be a $-prefixed path"),
    ("out_not_last", [{"$out": "x"}, {"$match": {}}], 40601, "$out can only be the final stage in the pipeline"),
    ("arrayElemAt_arity", [{"$project": {"x": {"$arrayElemAt": ["$arr"]}}}], 16020,
     INVALID_PROJECT + "Expression $arrayElemAt takes exactly 2 arguments. 1 were passed in."),
    ("dollar_alone", [{"$project": {"x": "$"}}], 16872, INVALID_PROJECT + "'$' by itself is not a valid FieldPath"),
    ("undefined_variable", [{"$project": {"x": "$$foo"}}], 17276, INVALID_PROJECT + "Use of undefined variable: foo"),
]


@pytest.mark.parametrize("pipeline, code, message", [row[1:] for row in AGGREGATION], ids=[row[0] for row in AGGREGATION])
def test_aggregation(db, pipeline, code, message):
    db.c.insert_one({"_id": 1, "a": 1, "s": "x", "arr": [1, 2]})
    check(db, {"aggregate": "c", "pipeline": pipeline, "cursor": {}}, code, message)


# --- 3. Query operators ----------------------------------------------------------------------

TOP_LEVEL_HINT = ". If you have a field name that starts with a '$' symbol, consider using $getField or $setField."

QUERY = [
    ("unknown_operator", {"a": {"$foo": 1}}, 2, "unknown operator: $foo"),
    ("size_fraction", {"a": {"$size": 1.5}}, 2, "Failed to parse $size. Expected an integer: $size: 1.5"),
    ("unknown_top_level_operator", {"$foo": 1}, 2, "unknown top level operator: $foo" + TOP_LEVEL_HINT),
    ("operator_then_field", {"a": {"$eq": 1, "b": 1}}, 2, "unknown operator: b"),
    ("in_not_array", {"a": {"$in": 1}}, 2, "$in needs an array"),
    ("nin_not_array", {"a": {"$nin": 1}}, 2, "$nin needs an array"),
    ("all_not_array", {"a": {"$all": 1}}, 2, "$all needs an array"),
    ("in_with_operator", {"a": {"$in": [{"$gt": 1}]}}, 2, "cannot nest $ under $in"),
    # regex_util::flagsToPcreOptions is called with an empty operator name: hence the space.
    ("regex_bad_option", {"a": {"$regex": "a", "$options": "z"}}, 51108, " invalid flag in regex options: z"),
    ("options_without_regex", {"a": {"$options": "i"}}, 2, "$options needs a $regex"),
    ("regex_not_string", {"a": {"$regex": 1}}, 2, "$regex has to be a string"),
    ("elemMatch_not_object", {"a": {"$elemMatch": 1}}, 2, "$elemMatch needs an Object"),
    ("size_not_number", {"a": {"$size": "a"}}, 2, 'Failed to parse $size. Expected a number in: $size: "a"'),
    ("size_negative", {"a": {"$size": -1}}, 2, "Failed to parse $size. Expected a non-negative number in: $size: -1"),
    ("type_unknown_alias", {"a": {"$type": "foo"}}, 2, "Unknown type name alias: foo"),
    ("type_bad_code", {"a": {"$type": 100}}, 2, "Invalid numerical type code: 100"),
    ("mod_too_few", {"a": {"$mod": [1]}}, 2, "malformed mod, not enough elements"),
    ("mod_too_many", {"a": {"$mod": [1, 2, 3]}}, 2, "malformed mod, too many elements"),
    ("mod_not_array", {"a": {"$mod": 5}}, 2, "malformed mod, needs to be an array"),
    ("mod_zero_divisor", {"a": {"$mod": [0, 1]}}, 2, "divisor cannot be 0"),
    ("and_empty", {"$and": []}, 2, "$and/$or/$nor must be a nonempty array"),
    ("and_not_array", {"$and": 1}, 2, "$and must be an array"),
    ("or_entry_not_object", {"$or": [1]}, 2, "$or/$and/$nor entries need to be full objects"),
    ("not_empty", {"a": {"$not": {}}}, 2, "$not cannot be empty"),
    ("all_elemMatch_mixed", {"a": {"$all": [{"$elemMatch": {"b": 1}}, 1]}}, 2, "$all/$elemMatch has to be consistent"),
    ("expr_unknown_expression", {"$expr": {"$foo": 1}}, 168, "Unrecognized expression '$foo'"),
]


@pytest.mark.parametrize("query, code, message", [row[1:] for row in QUERY], ids=[row[0] for row in QUERY])
def test_query(db, query, code, message):
    db.c.insert_one({"_id": 1, "a": 1})
    check(db, {"find": "c", "filter": query}, code, message)


# --- 4. Update operators ---------------------------------------------------------------------

UPDATE = [
    ("unknown_modifier", {"$foo": {"a": 1}}, 9,
     "Unknown modifier: $foo. Expected a valid update modifier or pipeline-style update specified as an array", EXACT),
    # The argument document is rendered by BSONObj::toString: only the fixed part is compared.
    ("inc_non_numeric", {"$inc": {"a": "x"}}, 14, "Cannot increment with non-numeric argument: {", PREFIX),
    ("modifier_not_object", {"$set": 1}, 9,
     "Modifiers operate on fields but we found type int instead. For example: {$mod: {<field>: ...}} not {$set: 1}", EXACT),
    ("conflicting_paths", {"$set": {"a": 1}, "$inc": {"a": 1}}, 40, "Updating the path 'a' would create a conflict at 'a'", EXACT),
    ("conflicting_later_prefix", {"$set": {"a.b": 1}, "$unset": {"a": 1}}, 40, "Updating the path 'a' would create a conflict at 'a'", EXACT),
    ("conflicting_prefix", {"$set": {"a": 1}, "$unset": {"a.b": 1}}, 40,
     "Updating the path 'a.b' would create a conflict at 'a'", EXACT),
    ("set_id", {"$set": {"_id": 2}}, 66, "Performing an update on the path '_id' would modify the immutable field '_id'", EXACT),
    ("replacement_changes_id", {"_id": 2, "x": 1}, 66,
     "After applying the update, the (immutable) field '_id' was found to have been altered to _id: 2", EXACT),
    ("push_each_not_array", {"$push": {"arr": {"$each": 1}}}, 2,
     "The argument to $each in $push must be an array but it was of type: int", EXACT),
    ("addToSet_each_not_array", {"$addToSet": {"arr": {"$each": 1}}}, 14,
     "The argument to $each in $addToSet must be an array but it was of type int", EXACT),
    ("push_unknown_clause", {"$push": {"arr": {"$each": [1], "$foo": 1}}}, 2, "Unrecognized clause in $push: $foo", EXACT),
    ("push_position_not_integer", {"$push": {"arr": {"$each": [1], "$position": "x"}}}, 2,
     "The value for $position must be an integer value, not of type: string", EXACT),
    # The document is rendered by BSONObj::toString: only the fixed part is compared.
    ("inc_on_string", {"$inc": {"s": 1}}, 14, "Cannot apply $inc to a value of non-numeric type. {", PREFIX),
    ("push_on_scalar", {"$push": {"a": 1}}, 2, "The field 'a' must be an array but is of type int in document {", PREFIX),
    ("addToSet_on_scalar", {"$addToSet": {"a": 1}}, 2,
     "Cannot apply $addToSet to non-array field. Field named 'a' has non-array type int", EXACT),
    ("empty_path", {"$set": {"": 1}}, 56, "An empty update path is not valid.", EXACT),
    ("empty_path_component", {"$set": {"a.": 1}}, 56,
     "The update path 'a.' contains an empty field name, which is not allowed.", EXACT),
    ("dollar_field", {"$set": {"$a": 1}}, 52, "The dollar ($) prefixed field '$a' in '$a' is not valid for storage.", EXACT),
    ("rename_to_itself", {"$rename": {"a": "a"}}, 2, 'The source and target field for $rename must differ: a: "a"', EXACT),
    ("rename_not_string", {"$rename": {"a": 1}}, 2, "The 'to' field for $rename must be a string: a: 1", EXACT),
    ("rename_same_path", {"$rename": {"a": "a.b"}}, 2,
     'The source and target field for $rename must not be on the same path: a: "a.b"', EXACT),
    ("bit_not_object", {"$bit": {"a": 1}}, 2,
     "The $bit modifier is not compatible with a int. You must pass in an embedded document: {$bit: {field: {and/or/xor: #}}", EXACT),
    ("create_field_in_scalar", {"$set": {"a.b": 1}}, 28, "Cannot create field 'b' in element {a: 1}", EXACT),
    ("positional_without_match", {"$set": {"arr.$": 1}}, 2,
     "The positional operator did not find the match needed from the query.", EXACT),
    ("array_filter_missing", {"$set": {"arr.$[x]": 1}}, 2, "No array filter found for identifier 'x' in path 'arr.$[x]'", EXACT),
    ("pipeline_stage_not_allowed", [{"$match": {}}], 72, "$match is not allowed to be used within an update", EXACT),
]


@pytest.mark.parametrize("update, code, message, match", [row[1:] for row in UPDATE], ids=[row[0] for row in UPDATE])
def test_update(db, update, code, message, match):
    db.c.insert_one({"_id": 1, "a": 1, "s": "x", "arr": [1, 2]})
    check(db, {"update": "c", "updates": [{"q": {"_id": 1}, "u": update}]}, code, message, match)


# --- 5. Namespaces and indexes ---------------------------------------------------------------

# Messages naming a namespace hold "{db}", the test's database.
NAMESPACES = [
    ("drop_id_index_by_name", {"dropIndexes": "c", "index": "_id_"}, 72, "cannot drop _id index"),
    ("drop_id_index_by_key", {"dropIndexes": "c", "index": {"_id": 1}}, 72, "cannot drop _id index"),
    ("drop_index_missing_collection", {"dropIndexes": "nope", "index": "x"}, 26, "ns not found {db}.nope"),
    ("list_indexes_missing_collection", {"listIndexes": "nope"}, 26, "ns does not exist: {db}.nope"),
    ("capped_without_size", {"create": "capped", "capped": True}, 72, "the 'size' field is required when 'capped' is true"),
    ("create_system_collection", {"create": "system.foo"}, 73, "Invalid system namespace: {db}.system.foo"),
    ("drop_missing_index_by_name", {"dropIndexes": "c", "index": "x"}, 27, "index not found with name [x]"),
]


@pytest.mark.parametrize("command, code, message", [row[1:] for row in NAMESPACES], ids=[row[0] for row in NAMESPACES])
def test_namespaces(db, command, code, message):
    db.c.insert_one({"_id": 1, "a": 1})
    check(db, command, code, message.format(db=db.name))


INDEX_SPECS = [
    ("key_zero", {"key": {"z": 0}, "name": "z_0"}, 67,
     'Error in specification { key: { z: 0 }, name: "z_0" } :: caused by :: Values in the index key pattern cannot be 0.'),
    ("key_empty_field", {"key": {"": 1}, "name": "ef"}, 67,
     'Error in specification { key: { : 1 }, name: "ef" } :: caused by :: Index keys cannot be an empty field.'),
    ("key_dollar_field", {"key": {"$x": 1}, "name": "dx"}, 67,
     "Error in specification { key: { $x: 1 }, name: \"dx\" } :: caused by :: "
     "Index key contains an illegal field name: field name starts with '$'."),
    ("key_empty", {"key": {}, "name": "e"}, 67, 'Error in specification { key: {}, name: "e" } :: caused by :: Index keys cannot be empty.'),
    ("unknown_plugin", {"key": {"a": "foo"}, "name": "a_foo"}, 67,
     "Error in specification { key: { a: \"foo\" }, name: \"a_foo\" } :: caused by :: Unknown index plugin 'foo'"),
    ("unknown_field", {"key": {"u": 1}, "bogus": True, "name": "u_1"}, 197,
     "Error in specification { key: { u: 1 }, bogus: true, name: \"u_1\" } :: caused by :: The field 'bogus' is not valid "
     "for an index specification. Specification: { key: { u: 1 }, bogus: true, name: \"u_1\" }"),
    # Checked once mongod has given the spec its version: `v: 2` shows.
    ("empty_name", {"key": {"n": 1}, "name": ""}, 67,
     'Error in specification { key: { n: 1 }, name: "", v: 2 } :: caused by :: index name cannot be empty'),
    ("partial_and_sparse", {"key": {"p": 1}, "sparse": True, "partialFilterExpression": {"a": 1}, "name": "p_1"}, 67,
     'Error in specification { key: { p: 1 }, sparse: true, partialFilterExpression: { a: 1 }, name: "p_1", v: 2 } '
     ':: caused by :: cannot mix "partialFilterExpression" and "sparse" options'),
    # index_key_validate::validateIndexSpecTTL: the spec as sent is the context of a bad value
    # (mongod's type message closes no quote), and ends the compound-key refusal.
    ("ttl_not_a_number", {"key": {"t": 1}, "name": "t_1", "expireAfterSeconds": "x"}, 67,
     '. Index spec: { key: { t: 1 }, name: "t_1", expireAfterSeconds: "x" } :: caused by :: '
     "TTL index 'expireAfterSeconds' option must be numeric, but received a type of 'string"),
    ("ttl_negative", {"key": {"t": 1}, "name": "t_1", "expireAfterSeconds": -1}, 67,
     '. Index spec: { key: { t: 1 }, name: "t_1", expireAfterSeconds: -1 } :: caused by :: '
     "TTL index 'expireAfterSeconds' option cannot be less than 0"),
    ("ttl_beyond_32_bits", {"key": {"t": 1}, "name": "t_1", "expireAfterSeconds": 2**31}, 67,
     '. Index spec: { key: { t: 1 }, name: "t_1", expireAfterSeconds: 2147483648 } :: caused by :: '
     "TTL index 'expireAfterSeconds' must be within the range of a 32-bit integer"),
    ("ttl_compound", {"key": {"t": 1, "u": 1}, "name": "t_1_u_1", "expireAfterSeconds": 10}, 67,
     "TTL indexes are single-field indexes, compound indexes do not support TTL. "
     'Index spec: { key: { t: 1, u: 1 }, name: "t_1_u_1", expireAfterSeconds: 10 }'),
]


@pytest.mark.parametrize("spec, code, message", [row[1:] for row in INDEX_SPECS], ids=[row[0] for row in INDEX_SPECS])
def test_index_specs(db, spec, code, message):
    db.c.insert_one({"_id": 1, "a": 1})
    check(db, {"createIndexes": "c", "indexes": [spec]}, code, message)


def test_keys_in_messages_print_as_mongod_prints_them(db):
    """BSONObj::toString: a double keeps its `.0`, field names are bare."""
    db.c.insert_one({"_id": 1.0})
    check(db, {"insert": "c", "documents": [{"_id": 1.0}]}, 11000, f"E11000 duplicate key error collection: {db.name}.c index: _id_ dup key: {{ _id: 1.0 }}")
    check(db, {"insert": "c", "documents": [{"_id": 1}]}, 11000, f"E11000 duplicate key error collection: {db.name}.c index: _id_ dup key: {{ _id: 1 }}")
    check(db, {"dropIndexes": "c", "index": {"a": 1}}, 27, "can't find index with key: { a: 1 }")


# index_catalog_impl.cpp: an index of the requested name is looked for first (86 when the key
# or an identifying option differs: unique, sparse, partialFilterExpression, collation; 85 when
# only other options do), then one of the same key and identifying options under another name
# (85). Specs print as mongod stores them: v, unique and hidden when set, key, name, the rest.
SAME_NAME = ("An existing index has the same name as the requested index. When index names are not specified, they are "
             "auto generated and can cause conflicts. Please refer to our documentation. ")
EXISTING_A_1 = 'existing index: { v: 2, key: { a: 1 }, name: "a_1" }'

INDEX_CONFLICTS = [
    ("same_name_other_key", {"key": {"b": 1}, "name": "a_1"}, 86,
     SAME_NAME + 'Requested index: { v: 2, key: { b: 1 }, name: "a_1" }, ' + EXISTING_A_1),
    ("same_name_unique_added", {"key": {"a": 1}, "name": "a_1", "unique": True}, 86,
     SAME_NAME + 'Requested index: { v: 2, unique: true, key: { a: 1 }, name: "a_1" }, ' + EXISTING_A_1),
    ("same_name_sparse_added", {"key": {"a": 1}, "name": "a_1", "sparse": True}, 86,
     SAME_NAME + 'Requested index: { v: 2, key: { a: 1 }, name: "a_1", sparse: true }, ' + EXISTING_A_1),
    ("same_name_ttl_added", {"key": {"a": 1}, "name": "a_1", "expireAfterSeconds": 10}, 85,
     "An equivalent index already exists with the same name but different options. "
     'Requested index: { v: 2, key: { a: 1 }, name: "a_1", expireAfterSeconds: 10 }, ' + EXISTING_A_1),
    ("other_name_identical", {"key": {"a": 1}, "name": "a_second"}, 85, "Index already exists with a different name: a_1"),
    ("other_name_ttl_added", {"key": {"a": 1}, "name": "a_ttl", "expireAfterSeconds": 10}, 85,
     "An equivalent index already exists with a different name and options. "
     'Requested index: { v: 2, key: { a: 1 }, name: "a_ttl", expireAfterSeconds: 10 }, ' + EXISTING_A_1),
]


@pytest.mark.parametrize("spec, code, message", [row[1:] for row in INDEX_CONFLICTS], ids=[row[0] for row in INDEX_CONFLICTS])
def test_index_conflicts(db, spec, code, message):
    db.c.create_index("a")
    check(db, {"createIndexes": "c", "indexes": [spec]}, code, message)
    assert sorted(index["name"] for index in db.c.list_indexes()) == ["_id_", "a_1"]


def test_another_identifying_option_is_another_index(db):
    db.c.create_index("a")
    db.c.create_index("a", name="a_sparse", sparse=True)
    assert sorted(index["name"] for index in db.c.list_indexes()) == ["_id_", "a_1", "a_sparse"]


def test_specs_are_listed_as_mongod_stores_them(db):
    db.command({"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1", "sparse": True, "unique": 1, "hidden": False}]})
    listed = [index for index in db.c.list_indexes() if index["name"] == "a_1"]
    assert [list(index.items()) for index in listed] == [[("v", 2), ("unique", True), ("key", {"a": 1}), ("name", "a_1"), ("sparse", True)]]


RENAMES = [
    ("rename_to_itself", "c", "c", 20, "Can't rename a collection to itself"),
    ("rename_missing_source", "nope", "d", 26, "Source collection {db}.nope does not exist"),
    ("rename_onto_existing", "c", "d", 48, "target namespace exists"),
]


@pytest.mark.parametrize("source, target, code, message", [row[1:] for row in RENAMES], ids=[row[0] for row in RENAMES])
def test_renames(db, source, target, code, message):
    db.c.insert_one({"_id": 1})
    db.d.insert_one({"_id": 1})
    command = {"renameCollection": f"{db.name}.{source}", "to": f"{db.name}.{target}"}
    check(db.client.admin, command, code, message.format(db=db.name))
