"""Node/router parity (issue 22, item 4): every command a node lists is sent, in the same
forms, to a standalone node and to the router of a one-shard cluster, and the replies must
agree once the fields that belong to a process or a moment are set aside.

- Every command `listCommands` names on the node needs cases in CASES or an entry in
  NOT_ON_ROUTER, so a new command gets parity checks (or an explicit exemption) at once.
- The fields that differ by nature are named, with their reason, in FIELDS_REMOVED,
  FIELDS_BY_TYPE, STORAGE_FIGURES and ROUTER_ADDED_FIELDS; whole replies that differ are in
  REPLY_DIFFERS, where only `ok` and the error code are compared.
- A case where the router really disagrees with the node (a driver would see it) is marked
  xfail(strict=True) with both replies in its reason: fixing the router makes it pass, and
  strict xfail then tells the developer to drop the mark.
Scalars are compared with their BSON type (an int32 is not a double), and error replies
field by field (code, codeName, errmsg, ...).
"""

import base64
import copy
import hashlib
import hmac
import re
import tempfile
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, Optional, Union

import pymongo
import pytest
from bson import Binary, Decimal128, Int64, ObjectId, Timestamp
from pymongo.database import Database
from pymongo.errors import OperationFailure

import conftest

# --- What may differ, and why ----------------------------------------------------------------

# Removed from both replies, at any depth.
FIELDS_REMOVED = {
    "$clusterTime": "gossiped by cluster members only; a standalone node has no cluster time",
    "operationTime": "as $clusterTime: only cluster members stamp replies with it",
    "msg": "hello: a router answers msg: 'isdbgrid', as mongos does (the driver's topology test)",
}

# Compared by presence and BSON type only, at any depth: their values are the process's or
# the moment's own.
FIELDS_BY_TYPE = {
    "localTime": "hello: each process's clock, read at a different moment",
    "connectionId": "hello: each process numbers its own connections",
    "topologyVersion": "hello: processId is each process's own ObjectId",
    "you": "whatsmyuri: the client's address, a different ephemeral port per connection",
    "uuid": "listCollections: each deployment gave its collection its own UUID",
    "userId": "usersInfo: each deployment gave its user its own UUID",
    "payload": "saslStart/saslContinue: SCRAM messages carry the server's random nonce and salt",
    "conversationId": "saslStart/saslContinue: each process numbers its own conversations",
    "millis": "dataSize: how long each deployment took",
}

# startSession's `id` (a new random UUID) is compared by type; a cursor's `id` (`cursor.id`,
# and the ids in killCursors' lists) only as zero or nonzero, since each process makes its own.
CURSOR_ID_LISTS = ("cursorsKilled", "cursorsNotFound", "cursorsAlive", "cursorsUnknown")

# Fields a router adds to a node's reply, as mongos does; removed from the router's reply.
ROUTER_ADDED_FIELDS = {
    "collStats": {"sharded": "mongos says whether the collection is sharded",
                  "shards": "mongos lists each shard's own collStats"},
    "dbStats": {"raw": "mongos lists each shard's own dbStats"},
    "fsync": {"all": "mongos lists each shard's own fsync reply"},
}

# Storage figures, compared by type only: sizes on disk depend on when each process flushed.
STORAGE_FIGURES = {
    "collStats": ("size", "storageSize", "freeStorageSize", "totalIndexSize", "totalSize", "indexSizes",
                  "avgObjSize", "compressionRatio", "wiredTiger", "indexDetails"),
    "dbStats": ("dataSize", "storageSize", "indexSize", "totalSize", "avgObjSize", "compressionRatio",
                "fsUsedSize", "fsTotalSize"),
}

# Commands whose whole successful reply differs by nature: only `ok`, and an error's code and
# codeName, are compared.
REPLY_DIFFERS = {
    "serverStatus": "describes the process: host, process ('mongos'), pid, uptime, counters, memory",
    "hostInfo": "describes the host the process runs on; a router may run on another machine",
    "getLog": "each process's own log lines",
    "getCmdLineOpts": "each process's own argv (a router's is `myriad router --configdb ...`)",
    "listCommands": "a router lists its own table (addShard, split, ...); checked apart below",
    "currentOp": "each process's own operations, opids and connections (a router adds its shards')",
    "explain": "a router wraps each shard's plan by shard (mongos's shape); the plans are the shard's",
}

# Commands a node answers that the router refuses with CommandNotFound (`router: NotYet` in
# crates/commands/src/table.rs).
NOT_ON_ROUTER = {
    "compact": "mongos has no compact command either (MongoDB's manual: run it on each shard), so CommandNotFound is its answer",
    **{name: "a replica-set member's command: mongos has none (rs.* helpers run on members), so CommandNotFound is its answer"
       for name in ("replSetInitiate", "replSetReconfig", "replSetGetStatus", "replSetGetConfig", "replSetStepDown", "replSetFreeze", "replSetRaft")},
    "prepareTransaction": "a shard's internal command of the two-phase commit (its coordinator sends it): mongos has none",
}

COMMAND_NOT_FOUND = 59
CLIENT_OPTIONS = dict(
    serverSelectionTimeoutMS=10_000,
    connectTimeoutMS=10_000,
    socketTimeoutMS=30_000,
    # One connection per deployment: a SASL conversation and its cursors stay on it.
    maxPoolSize=1,
)
DOCUMENTS = [{"_id": 1, "a": 1, "s": "one"}, {"_id": 2, "a": 2, "s": "two"}, {"_id": 3, "a": 2}]
SESSION_ID = Binary.from_uuid(uuid.UUID("00112233-4455-6677-8899-aabbccddeeff"))


# --- Deployments -------------------------------------------------------------------------------

@dataclass
class Deployments:
    node: pymongo.MongoClient
    router: pymongo.MongoClient


@pytest.fixture(scope="module")
def deployments():
    node = conftest.Server()
    directory = tempfile.TemporaryDirectory(prefix="myriad-parity-cluster-")
    cluster = None
    clients = []
    try:
        cluster = conftest.Cluster(directory.name, shards=1)
        clients.append(pymongo.MongoClient(node.uri(), **CLIENT_OPTIONS))
        clients.append(pymongo.MongoClient(cluster.uri, **CLIENT_OPTIONS))
        shards = clients[1].admin.command("listShards")["shards"]
        assert len(shards) == 1, shards
        yield Deployments(node=clients[0], router=clients[1])
    finally:
        for client in clients:
            client.close()
        try:
            if cluster is not None:
                cluster.stop()
        finally:
            node.stop()
            directory.cleanup()


# --- Cases -------------------------------------------------------------------------------------

Body = Union[dict, Callable[[Database], dict]]
Step = Callable[[Database], None]


@dataclass
class Case:
    """One request: `body` is the command (or makes it from the case's database, on each
    deployment); it runs against `database` ("" is the case's own fresh database) after
    `setup`, and `teardown` runs after it on the same deployment."""
    command: str
    label: str
    body: Body
    database: str = ""
    setup: tuple = ()
    teardown: tuple = ()
    disagreement: Optional[str] = None

    @property
    def id(self) -> str:
        return f"{self.command}-{self.label}"


def documents(collection: str = "c", rows=DOCUMENTS) -> Step:
    def insert(db: Database) -> None:
        db[collection].insert_many(copy.deepcopy(rows))
    return insert


def command_step(body: Body) -> Step:
    def run(db: Database) -> None:
        db.command(copy.deepcopy(body(db) if callable(body) else body))
    return run


def user(name: str = "alice", roles=()) -> Step:
    return command_step({"createUser": name, "pwd": "secret-1", "roles": list(roles)})


def drop_user(name: str = "alice") -> Step:
    return command_step({"dropUser": name})


def role(name: str = "r1", privileges=None, roles=()) -> Step:
    def run(db: Database) -> None:
        granted = privileges if privileges is not None else [{"resource": {"db": db.name, "collection": ""}, "actions": ["find"]}]
        db.command({"createRole": name, "privileges": granted, "roles": list(roles)})
    return run


def open_cursor(db: Database) -> Int64:
    """A find on `c` leaving two documents for a getMore."""
    return Int64(db.command({"find": "c", "batchSize": 1})["cursor"]["id"])


def current_log_level(db: Database) -> dict:
    """setParameter of logLevel to the value it already has: changes nothing."""
    level = db.client.admin.command({"getParameter": 1, "logLevel": 1})["logLevel"]
    return {"setParameter": 1, "logLevel": level}


SCRAM_CLIENT_NONCE = "cGFyaXR5LXRlc3Qtbm9uY2U="


def scram_start(name: str) -> dict:
    return {"saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": Binary(f"n,,n={name},r={SCRAM_CLIENT_NONCE}".encode()),
            "options": {"skipEmptyExchange": True}}


def scram_proof(name: str, password: str) -> Body:
    """saslStart on the deployment, then the saslContinue carrying the client's proof
    (RFC 5802 / 7677; the password is ASCII, so SASLprep leaves it as it is)."""
    def make(db: Database) -> dict:
        started = db.command(scram_start(name))
        client_first = f"n={name},r={SCRAM_CLIENT_NONCE}"
        server_first = bytes(started["payload"]).decode()
        fields = dict(item.split("=", 1) for item in server_first.split(","))
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
        client_key = hmac.new(salted, b"Client Key", "sha256").digest()
        stored_key = hashlib.sha256(client_key).digest()
        without_proof = f"c=biws,r={fields['r']}"
        signature = hmac.new(stored_key, f"{client_first},{server_first},{without_proof}".encode(), "sha256").digest()
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
        return {"saslContinue": 1, "conversationId": started["conversationId"], "payload": Binary(f"{without_proof},p={proof}".encode())}
    return make


def logout(db: Database) -> None:
    db.command({"logout": 1})


def ns(collection: str) -> Callable[[Database], str]:
    return lambda db: f"{db.name}.{collection}"


C = Case
CASES = [
    # Handshake and the process's own state (Local on the router).
    C("hello", "plain", {"hello": 1}),
    C("hello", "client-wrong-type", {"hello": 1, "client": 5}),
    C("hello", "sasl-supported-mechs-unknown-user", {"hello": 1, "saslSupportedMechs": "nowhere.nobody"}),
    C("buildInfo", "plain", {"buildInfo": 1}),
    C("ping", "plain", {"ping": 1}),
    C("getParameter", "one", {"getParameter": 1, "logLevel": 1}, database="admin"),
    C("getParameter", "all", {"getParameter": "*"}, database="admin"),
    C("getParameter", "unknown-parameter", {"getParameter": 1, "noSuchParameter": 1}, database="admin"),
    C("getParameter", "not-admin", {"getParameter": 1, "logLevel": 1}),
    C("setParameter", "same-value", current_log_level, database="admin"),
    C("setParameter", "unknown-parameter", {"setParameter": 1, "noSuchParameter": 0}, database="admin"),
    C("setParameter", "wrong-type", {"setParameter": 1, "logLevel": "loud"}, database="admin"),
    C("setParameter", "nothing-to-set", {"setParameter": 1}, database="admin"),
    C("setParameter", "not-admin", {"setParameter": 1, "logLevel": 0}),
    C("whatsmyuri", "plain", {"whatsmyuri": 1}),
    C("connectionStatus", "plain", {"connectionStatus": 1}),
    C("connectionStatus", "show-privileges", {"connectionStatus": 1, "showPrivileges": True}),
    C("connectionStatus", "wrong-type", {"connectionStatus": 1, "showPrivileges": "yes"}),
    C("hostInfo", "plain", {"hostInfo": 1}, database="admin"),
    C("getCmdLineOpts", "plain", {"getCmdLineOpts": 1}, database="admin"),
    C("getCmdLineOpts", "not-admin", {"getCmdLineOpts": 1}),
    C("serverStatus", "plain", {"serverStatus": 1}, database="admin"),
    C("listCommands", "plain", {"listCommands": 1}),
    C("getLog", "global", {"getLog": "global"}, database="admin"),
    C("getLog", "names", {"getLog": "*"}, database="admin"),
    C("getLog", "wrong-type", {"getLog": 5}, database="admin"),
    C("getLog", "unknown-log", {"getLog": "bogus"}, database="admin"),
    C("getLog", "not-admin", {"getLog": "global"}),
    C("currentOp", "plain", {"currentOp": 1}, database="admin"),
    C("currentOp", "own-ops", {"currentOp": 1, "$ownOps": True}, database="admin"),
    C("currentOp", "not-admin", {"currentOp": 1}),
    C("killOp", "unknown-opid", {"killOp": 1, "op": 2_000_000_000}, database="admin"),
    C("killOp", "missing-op", {"killOp": 1}, database="admin"),
    C("killOp", "wrong-type", {"killOp": 1, "op": True}, database="admin"),
    C("killOp", "not-admin", {"killOp": 1, "op": 2_000_000_000}),

    # Sessions and transactions (Local).
    C("startSession", "plain", {"startSession": 1}),
    C("endSessions", "unknown-session", {"endSessions": [{"id": SESSION_ID}]}),
    C("endSessions", "wrong-type", {"endSessions": 5}),
    C("refreshSessions", "unknown-session", {"refreshSessions": [{"id": SESSION_ID}]}),
    C("refreshSessions", "wrong-type", {"refreshSessions": 5}),
    C("killSessions", "unknown-session", {"killSessions": [{"id": SESSION_ID}]}),
    C("killSessions", "wrong-type", {"killSessions": "all"}),
    C("killAllSessions", "unknown-user", {"killAllSessions": [{"user": "nobody", "db": "nowhere"}]}),
    C("killAllSessions", "wrong-type", {"killAllSessions": 5}),
    C("commitTransaction", "no-transaction", {"commitTransaction": 1}, database="admin"),
    C("commitTransaction", "not-admin", {"commitTransaction": 1}),
    C("abortTransaction", "no-transaction", {"abortTransaction": 1}, database="admin"),
    C("abortTransaction", "not-admin", {"abortTransaction": 1}),

    # Writes (Routed).
    C("insert", "two", {"insert": "c", "documents": [{"_id": 1, "a": 1}, {"_id": 2, "a": 2}]}),
    C("insert", "duplicate-key", {"insert": "c", "documents": [{"_id": 1}]}, setup=(documents(),)),
    C("insert", "missing-documents", {"insert": "c"}),
    C("insert", "empty-documents", {"insert": "c", "documents": []}),
    C("insert", "collection-wrong-type", {"insert": 5, "documents": [{"_id": 1}]}),
    C("insert", "ordered-wrong-type", {"insert": "c", "documents": [{"_id": 1}], "ordered": "yes"}),
    C("insert", "unknown-field", {"insert": "c", "documents": [{"_id": 1}], "bogus": 1}),
    C("update", "one", {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$set": {"b": 1}}}]}, setup=(documents(),)),
    C("update", "upsert", {"update": "c", "updates": [{"q": {"_id": 7}, "u": {"$set": {"b": 1}}, "upsert": True}]}, setup=(documents(),)),
    C("update", "unknown-modifier", {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$bogus": {"b": 1}}}]}, setup=(documents(),)),
    C("update", "missing-updates", {"update": "c"}),
    C("update", "multi-wrong-type", {"update": "c", "updates": [{"q": {"_id": 1}, "u": {"$set": {"b": 1}}, "multi": "yes"}]},
      setup=(documents(),)),
    C("delete", "one", {"delete": "c", "deletes": [{"q": {"_id": 1}, "limit": 1}]}, setup=(documents(),)),
    C("delete", "all-matching", {"delete": "c", "deletes": [{"q": {"a": 2}, "limit": 0}]}, setup=(documents(),)),
    C("delete", "missing-deletes", {"delete": "c"}),
    C("delete", "bad-limit", {"delete": "c", "deletes": [{"q": {"_id": 1}, "limit": 5}]}, setup=(documents(),)),
    C("delete", "missing-limit", {"delete": "c", "deletes": [{"q": {"_id": 1}}]}, setup=(documents(),)),
    C("findAndModify", "update-new", {"findAndModify": "c", "query": {"_id": 1}, "update": {"$inc": {"a": 1}}, "new": True},
      setup=(documents(),)),
    C("findAndModify", "remove", {"findAndModify": "c", "query": {"_id": 2}, "remove": True}, setup=(documents(),)),
    C("findAndModify", "upsert", {"findAndModify": "c", "query": {"_id": 9}, "update": {"$set": {"a": 9}}, "upsert": True, "new": True},
      setup=(documents(),)),
    C("findAndModify", "neither-update-nor-remove", {"findAndModify": "c", "query": {"_id": 1}}, setup=(documents(),)),
    C("findAndModify", "both-update-and-remove", {"findAndModify": "c", "query": {"_id": 1}, "remove": True, "update": {"a": 1}},
      setup=(documents(),)),
    C("findAndModify", "query-wrong-type", {"findAndModify": "c", "query": 5, "remove": True}, setup=(documents(),)),

    # Reads (Routed).
    C("find", "filter-sort-projection", {"find": "c", "filter": {"a": {"$gte": 1}}, "sort": {"_id": -1}, "projection": {"_id": 0}},
      setup=(documents(),)),
    C("find", "open-cursor", {"find": "c", "batchSize": 1}, setup=(documents(),)),
    C("find", "single-batch", {"find": "c", "limit": -1}, setup=(documents(),)),
    C("find", "unknown-collection", {"find": "nope"}),
    C("find", "unknown-operator", {"find": "c", "filter": {"a": {"$bogus": 1}}}, setup=(documents(),)),
    C("find", "bad-max-time", {"find": "c", "maxTimeMS": "soon"}, setup=(documents(),)),
    C("find", "filter-wrong-type", {"find": "c", "filter": 5}, setup=(documents(),)),
    C("find", "unknown-field", {"find": "c", "bogus": 1}, setup=(documents(),)),
    C("getMore", "rest-of-cursor", lambda db: {"getMore": open_cursor(db), "collection": "c"}, setup=(documents(),)),
    C("getMore", "unknown-cursor", {"getMore": Int64(12345), "collection": "c"}, setup=(documents(),)),
    C("getMore", "missing-collection", {"getMore": Int64(12345)}),
    C("getMore", "id-wrong-type", {"getMore": "12345", "collection": "c"}),
    C("getMore", "collection-wrong-type", {"getMore": Int64(12345), "collection": 5}),
    C("killCursors", "open-cursor", lambda db: {"killCursors": "c", "cursors": [open_cursor(db)]}, setup=(documents(),)),
    C("killCursors", "unknown-cursor", {"killCursors": "c", "cursors": [Int64(12345)]}),
    C("killCursors", "cursors-wrong-type", {"killCursors": "c", "cursors": 5}),
    C("killCursors", "missing-cursors", {"killCursors": "c"}),
    C("killCursors", "cursor-id-wrong-type", {"killCursors": "c", "cursors": [12345]}),
    C("count", "query", {"count": "c", "query": {"a": 2}}, setup=(documents(),)),
    C("count", "unknown-collection", {"count": "nope"}),
    C("count", "query-wrong-type", {"count": "c", "query": 5}, setup=(documents(),)),
    C("count", "negative-skip", {"count": "c", "skip": -1}, setup=(documents(),)),
    C("count", "unknown-field", {"count": "c", "bogus": 1}, setup=(documents(),)),
    C("distinct", "key", {"distinct": "c", "key": "a"}, setup=(documents(),)),
    C("distinct", "unknown-collection", {"distinct": "nope", "key": "a"}),
    C("distinct", "missing-key", {"distinct": "c"}, setup=(documents(),)),
    C("distinct", "key-wrong-type", {"distinct": "c", "key": 5}, setup=(documents(),)),
    C("aggregate", "match-sort", {"aggregate": "c", "pipeline": [{"$match": {"a": 2}}, {"$sort": {"_id": 1}}], "cursor": {}},
      setup=(documents(),)),
    C("aggregate", "group-open-cursor", {"aggregate": "c", "pipeline": [{"$group": {"_id": "$a", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}],
                                         "cursor": {"batchSize": 0}}, setup=(documents(),)),
    C("aggregate", "missing-cursor", {"aggregate": "c", "pipeline": []}, setup=(documents(),)),
    C("aggregate", "unknown-stage", {"aggregate": "c", "pipeline": [{"$bogus": 1}], "cursor": {}}, setup=(documents(),)),
    C("aggregate", "pipeline-wrong-type", {"aggregate": "c", "pipeline": 5, "cursor": {}}, setup=(documents(),)),
    C("aggregate", "unknown-field", {"aggregate": "c", "pipeline": [], "cursor": {}, "bogus": 1}, setup=(documents(),)),
    C("explain", "find", {"explain": {"find": "c", "filter": {"a": 1}}}, setup=(documents(),)),
    C("explain", "count-execution-stats", {"explain": {"count": "c"}, "verbosity": "executionStats"}, setup=(documents(),)),
    C("explain", "aggregate", {"explain": {"aggregate": "c", "pipeline": [{"$match": {"a": 2}}], "cursor": {}}}, setup=(documents(),)),
    C("explain", "inner-wrong-type", {"explain": {"find": "c", "filter": 5}}, setup=(documents(),)),
    C("explain", "inner-unknown-field", {"explain": {"find": "c", "bogus": 1}}, setup=(documents(),)),
    C("explain", "explain-wrong-type", {"explain": 5}),
    C("explain", "unknown-inner-command", {"explain": {"bogus": "c"}}),
    C("explain", "bad-verbosity", {"explain": {"find": "c"}, "verbosity": "bogus"}, setup=(documents(),)),

    C("bulkWrite", "mixed", lambda db: {"bulkWrite": 1, "ops": [
        {"insert": 0, "document": {"_id": 9, "a": 9}},
        {"update": 0, "filter": {"_id": 1}, "updateMods": {"$set": {"b": 1}}},
        {"update": 0, "filter": {"_id": 50}, "updateMods": {"$set": {"b": 1}}, "upsert": True},
        {"delete": 0, "filter": {"a": 2}, "multi": True},
        {"insert": 1, "document": {"_id": 1}}], "nsInfo": [{"ns": ns("c")(db)}, {"ns": ns("d")(db)}]},
      database="admin", setup=(documents(),)),
    C("bulkWrite", "duplicate-key-ordered", lambda db: {"bulkWrite": 1, "ops": [
        {"insert": 0, "document": {"_id": 8}}, {"insert": 0, "document": {"_id": 1}}, {"insert": 0, "document": {"_id": 7}}],
        "nsInfo": [{"ns": ns("c")(db)}]}, database="admin", setup=(documents(),)),
    C("bulkWrite", "errors-only-unordered", lambda db: {"bulkWrite": 1, "ops": [
        {"insert": 0, "document": {"_id": 1}}, {"update": 0, "filter": {"_id": 2}, "updateMods": {"$bogus": {"b": 1}}},
        {"delete": 0, "filter": {"_id": 3}}], "nsInfo": [{"ns": ns("c")(db)}], "ordered": False, "errorsOnly": True},
      database="admin", setup=(documents(),)),
    C("bulkWrite", "results-cursor", lambda db: {"bulkWrite": 1, "ops": [{"insert": 0, "document": {"_id": n}} for n in range(4)],
                                                 "nsInfo": [{"ns": ns("c")(db)}], "cursor": {"batchSize": 1}}, database="admin"),
    C("bulkWrite", "missing-ops", lambda db: {"bulkWrite": 1, "nsInfo": [{"ns": ns("c")(db)}]}, database="admin"),
    C("bulkWrite", "bad-namespace-index", lambda db: {"bulkWrite": 1, "ops": [{"insert": 1, "document": {}}],
                                                      "nsInfo": [{"ns": ns("c")(db)}]}, database="admin"),
    C("bulkWrite", "bad-namespace", {"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": [{"ns": "nodot"}]},
      database="admin"),
    C("bulkWrite", "unknown-field", lambda db: {"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}],
                                                "nsInfo": [{"ns": ns("c")(db)}], "bogus": 1}, database="admin"),
    C("bulkWrite", "not-admin", lambda db: {"bulkWrite": 1, "ops": [{"insert": 0, "document": {}}], "nsInfo": [{"ns": ns("c")(db)}]}),

    # Maintenance: fsync on every shard, planCacheClear on the holders (Routed); profile on the
    # router itself (Local: mongos keeps slowms, sampleRate and filter for its own log).
    C("fsync", "plain", {"fsync": 1}, database="admin"),
    C("fsync", "lock", {"fsync": 1, "lock": True}, database="admin"),
    C("fsync", "not-admin", {"fsync": 1}),
    C("planCacheClear", "existing", {"planCacheClear": "c"}, setup=(documents(),)),
    C("planCacheClear", "query-shape", {"planCacheClear": "c", "query": {"a": 1}, "sort": {"a": 1}}, setup=(documents(),)),
    C("planCacheClear", "query-wrong-type", {"planCacheClear": "c", "query": 5}, setup=(documents(),)),
    C("planCacheClear", "unknown-collection", {"planCacheClear": "nope"}, setup=(documents(),)),
    C("planCacheClear", "unknown-database", {"planCacheClear": "nope"}),
    C("planCacheClear", "name-wrong-type", {"planCacheClear": 5}, setup=(documents(),)),
    C("profile", "read", {"profile": -1}),
    C("profile", "level-0-same-slowms", {"profile": 0, "slowms": 100}),
    C("profile", "sample-rate-wrong-type", {"profile": -1, "sampleRate": "often"}),
    C("profile", "sample-rate-out-of-range", {"profile": -1, "sampleRate": 2.0}),
    C("profile", "filter-wrong-type", {"profile": 0, "filter": 5}),

    # Catalog (Routed).
    C("create", "plain", {"create": "d"}),
    C("create", "again-same-options", {"create": "d"}, setup=(command_step({"create": "d"}),)),
    C("create", "capped-without-size", {"create": "d", "capped": True}),
    C("create", "capped-wrong-type", {"create": "d", "capped": "yes"}),
    C("create", "name-wrong-type", {"create": 5}),
    C("collMod", "validator", {"collMod": "c", "validator": {"a": {"$exists": True}}}, setup=(documents(),)),
    C("collMod", "unknown-collection", {"collMod": "nope", "validator": {}}, setup=(documents(),)),
    C("collMod", "bad-validation-level", {"collMod": "c", "validationLevel": "bogus"}, setup=(documents(),)),
    C("collMod", "unknown-field", {"collMod": "c", "bogus": 1}, setup=(documents(),)),
    C("drop", "existing", {"drop": "c"}, setup=(documents(),)),
    C("drop", "unknown-collection", {"drop": "nope"}, setup=(documents(),)),
    C("drop", "name-wrong-type", {"drop": 5}),
    C("dropDatabase", "existing", {"dropDatabase": 1}, setup=(documents(),)),
    C("dropDatabase", "unknown-database", {"dropDatabase": 1}),
    C("dropDatabase", "write-concern-wrong-type", {"dropDatabase": 1, "writeConcern": 5}, setup=(documents(),)),
    C("listCollections", "plain", {"listCollections": 1}, setup=(documents(),)),
    C("listCollections", "name-only-filter", {"listCollections": 1, "nameOnly": True, "filter": {"name": "c"}},
      setup=(documents(), documents("other"))),
    C("listCollections", "empty-database", {"listCollections": 1}),
    C("listCollections", "filter-wrong-type", {"listCollections": 1, "filter": 5}, setup=(documents(),)),
    C("listDatabases", "filter", lambda db: {"listDatabases": 1, "filter": {"name": db.name}}, database="admin", setup=(documents(),)),
    C("listDatabases", "name-only-filter", lambda db: {"listDatabases": 1, "nameOnly": True, "filter": {"name": db.name}},
      database="admin", setup=(documents(),)),
    C("listDatabases", "filter-wrong-type", {"listDatabases": 1, "filter": 5}, database="admin"),
    C("listDatabases", "not-admin", {"listDatabases": 1}),
    C("renameCollection", "plain", lambda db: {"renameCollection": ns("c")(db), "to": ns("renamed")(db)}, database="admin",
      setup=(documents(),)),
    C("renameCollection", "unknown-source", lambda db: {"renameCollection": ns("nope")(db), "to": ns("renamed")(db)}, database="admin"),
    C("renameCollection", "target-exists", lambda db: {"renameCollection": ns("c")(db), "to": ns("other")(db)}, database="admin",
      setup=(documents(), documents("other"))),
    C("renameCollection", "not-admin", lambda db: {"renameCollection": ns("c")(db), "to": ns("renamed")(db)}, setup=(documents(),)),
    C("renameCollection", "to-wrong-type", lambda db: {"renameCollection": ns("c")(db), "to": 5}, database="admin", setup=(documents(),)),
    C("renameCollection", "missing-to", lambda db: {"renameCollection": ns("c")(db)}, database="admin", setup=(documents(),)),
    C("createIndexes", "one", {"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1"}]}, setup=(documents(),)),
    C("createIndexes", "new-collection", {"createIndexes": "new", "indexes": [{"key": {"a": 1}, "name": "a_1"}]}),
    C("createIndexes", "already-exists", {"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1"}]},
      setup=(documents(), command_step({"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1"}]}))),
    C("createIndexes", "name-conflict", {"createIndexes": "c", "indexes": [{"key": {"s": 1}, "name": "a_1"}]},
      setup=(documents(), command_step({"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1"}]}))),
    C("createIndexes", "indexes-wrong-type", {"createIndexes": "c", "indexes": 5}, setup=(documents(),)),
    C("createIndexes", "missing-indexes", {"createIndexes": "c"}, setup=(documents(),)),
    C("listIndexes", "unknown-collection", {"listIndexes": "nope"}, setup=(documents(),)),
    C("listIndexes", "two-indexes", {"listIndexes": "c"},
      setup=(documents(), command_step({"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1"}]}))),
    C("dropIndexes", "by-name", {"dropIndexes": "c", "index": "a_1"},
      setup=(documents(), command_step({"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1"}]}))),
    C("dropIndexes", "all", {"dropIndexes": "c", "index": "*"},
      setup=(documents(), command_step({"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": "a_1"}]}))),
    C("dropIndexes", "unknown-index", {"dropIndexes": "c", "index": "nope"}, setup=(documents(),)),
    C("dropIndexes", "unknown-collection", {"dropIndexes": "nope", "index": "*"}, setup=(documents(),)),
    C("dropIndexes", "index-wrong-type", {"dropIndexes": "c", "index": 5}, setup=(documents(),)),
    C("validate", "existing", {"validate": "c"}, setup=(documents(),)),
    C("validate", "unknown-collection", {"validate": "nope"}, setup=(documents(),)),
    C("validate", "wrong-type", {"validate": 5}, setup=(documents(),)),
    C("dataSize", "whole", lambda db: {"dataSize": ns("c")(db)}, setup=(documents(),)),
    C("dataSize", "key-range", lambda db: {"dataSize": ns("c")(db), "keyPattern": {"_id": 1}, "min": {"_id": 1}, "max": {"_id": 3}},
      setup=(documents(),)),
    C("dataSize", "unknown-collection", lambda db: {"dataSize": ns("nope")(db)}, setup=(documents(),)),
    C("dataSize", "wrong-type", {"dataSize": 5}, setup=(documents(),)),
    C("collStats", "existing", {"collStats": "c"}, setup=(documents(),)),
    C("collStats", "scale-wrong-type", {"collStats": "c", "scale": "big"}, setup=(documents(),)),
    C("collStats", "unknown-collection", {"collStats": "nope"}, setup=(documents(),)),
    C("dbStats", "bad-scale", {"dbStats": 1, "scale": 0}, setup=(documents(),)),
    C("dbStats", "existing", {"dbStats": 1}, setup=(documents(),)),

    # A database the cluster does not know (no setup): the router answers without asking a shard.
    C("find", "filter-wrong-type-unknown-database", {"find": "c", "filter": 5}),
    C("count", "query-wrong-type-unknown-database", {"count": "c", "query": 5}),
    C("distinct", "key-wrong-type-unknown-database", {"distinct": "c", "key": 5}),
    C("aggregate", "unknown-stage-unknown-database", {"aggregate": "c", "pipeline": [{"$bogus": 1}], "cursor": {}}),
    C("listCollections", "filter-wrong-type-unknown-database", {"listCollections": 1, "filter": 5}),
    C("collStats", "unknown-database", {"collStats": "nope"}),
    C("collMod", "unknown-database", {"collMod": "nope", "validator": {}}),
    C("drop", "unknown-database", {"drop": "nope"}),
    C("listIndexes", "unknown-database", {"listIndexes": "nope"}),
    C("dropIndexes", "unknown-database", {"dropIndexes": "nope", "index": "*"}),
    C("dropDatabase", "write-concern-wrong-type-unknown-database", {"dropDatabase": 1, "writeConcern": 5}),
    C("createIndexes", "indexes-wrong-type-unknown-database", {"createIndexes": "c", "indexes": 5}),
    C("renameCollection", "unknown-database", lambda db: {"renameCollection": ns("a")(db), "to": ns("b")(db)}, database="admin"),

    # Authentication (Local).
    C("saslStart", "scram-sha-256", scram_start("alice"), setup=(user(),), teardown=(logout, drop_user())),
    C("saslStart", "unknown-mechanism", {"saslStart": 1, "mechanism": "BOGUS", "payload": Binary(b"")}),
    C("saslStart", "missing-payload", {"saslStart": 1, "mechanism": "SCRAM-SHA-256"}),
    C("saslContinue", "client-proof", scram_proof("alice", "secret-1"), setup=(user(),), teardown=(logout, drop_user())),
    C("saslContinue", "unknown-conversation", {"saslContinue": 1, "conversationId": 99, "payload": Binary(b"")}),
    C("saslContinue", "missing-payload", {"saslContinue": 1, "conversationId": 99}),
    C("authenticate", "x509-without-tls", {"authenticate": 1, "mechanism": "MONGODB-X509"}, database="$external"),
    C("authenticate", "unknown-mechanism", {"authenticate": 1, "mechanism": "PLAIN"}, database="$external"),
    C("logout", "not-logged-in", {"logout": 1}),

    # Users (Local: a router keeps them on the config server).
    C("createUser", "plain", {"createUser": "alice", "pwd": "secret-1", "roles": ["read"]}, teardown=(drop_user(),)),
    C("createUser", "exists", {"createUser": "alice", "pwd": "secret-1", "roles": []}, setup=(user(),), teardown=(drop_user(),)),
    C("createUser", "unknown-role", {"createUser": "alice", "pwd": "secret-1", "roles": ["nosuchrole"]}),
    C("createUser", "pwd-wrong-type", {"createUser": "alice", "pwd": 5, "roles": []}),
    C("createUser", "missing-roles", {"createUser": "alice", "pwd": "secret-1"}),
    C("updateUser", "custom-data", {"updateUser": "alice", "customData": {"k": 1}}, setup=(user(),), teardown=(drop_user(),)),
    C("updateUser", "unknown-user", {"updateUser": "nobody", "customData": {"k": 1}}),
    C("updateUser", "nothing-to-update", {"updateUser": "alice"}, setup=(user(),), teardown=(drop_user(),)),
    C("dropUser", "existing", {"dropUser": "alice"}, setup=(user(),)),
    C("dropUser", "unknown-user", {"dropUser": "alice"}),
    C("dropUser", "wrong-type", {"dropUser": 5}),
    C("dropAllUsersFromDatabase", "two-users", {"dropAllUsersFromDatabase": 1}, setup=(user("alice"), user("bob"))),
    C("dropAllUsersFromDatabase", "no-users", {"dropAllUsersFromDatabase": 1}),
    C("usersInfo", "one", {"usersInfo": "alice"}, setup=(user(roles=["read"]),), teardown=(drop_user(),)),
    C("usersInfo", "all", {"usersInfo": 1}, setup=(user(roles=["read"]),), teardown=(drop_user(),)),
    C("usersInfo", "unknown-user", {"usersInfo": "nobody"}),
    C("usersInfo", "bad-user-document", {"usersInfo": {"user": 5}}),
    C("grantRolesToUser", "plain", {"grantRolesToUser": "alice", "roles": ["readWrite"]}, setup=(user(),), teardown=(drop_user(),)),
    C("grantRolesToUser", "unknown-role", {"grantRolesToUser": "alice", "roles": ["nosuchrole"]}, setup=(user(),), teardown=(drop_user(),)),
    C("grantRolesToUser", "missing-roles", {"grantRolesToUser": "alice"}, setup=(user(),), teardown=(drop_user(),)),
    C("revokeRolesFromUser", "plain", {"revokeRolesFromUser": "alice", "roles": ["read"]}, setup=(user(roles=["read"]),),
      teardown=(drop_user(),)),
    C("revokeRolesFromUser", "unknown-user", {"revokeRolesFromUser": "nobody", "roles": ["read"]}),

    # Roles (Local).
    C("createRole", "plain", lambda db: {"createRole": "r1", "privileges": [{"resource": {"db": db.name, "collection": ""}, "actions": ["find"]}],
                                         "roles": []}, teardown=(command_step({"dropRole": "r1"}),)),
    C("createRole", "exists", {"createRole": "r1", "privileges": [], "roles": []}, setup=(role(),),
      teardown=(command_step({"dropRole": "r1"}),)),
    C("createRole", "unknown-action", lambda db: {"createRole": "r2", "privileges": [{"resource": {"db": db.name, "collection": ""},
                                                                                    "actions": ["bogusAction"]}], "roles": []}),
    C("createRole", "missing-privileges", {"createRole": "r2", "roles": []}),
    C("updateRole", "roles", {"updateRole": "r1", "roles": ["read"]}, setup=(role(),), teardown=(command_step({"dropRole": "r1"}),)),
    C("updateRole", "unknown-role", {"updateRole": "nope", "roles": ["read"]}),
    C("updateRole", "nothing-to-update", {"updateRole": "r1"}, setup=(role(),), teardown=(command_step({"dropRole": "r1"}),)),
    C("dropRole", "existing", {"dropRole": "r1"}, setup=(role(),)),
    C("dropRole", "unknown-role", {"dropRole": "r1"}),
    C("dropRole", "wrong-type", {"dropRole": 5}),
    C("rolesInfo", "one", {"rolesInfo": "r1"}, setup=(role(),), teardown=(command_step({"dropRole": "r1"}),)),
    C("rolesInfo", "show-privileges", {"rolesInfo": "r1", "showPrivileges": True}, setup=(role(),),
      teardown=(command_step({"dropRole": "r1"}),)),
    C("rolesInfo", "builtin", {"rolesInfo": "read", "showPrivileges": True}),
    C("rolesInfo", "unknown-role", {"rolesInfo": "nope"}),
    C("grantPrivilegesToRole", "plain", lambda db: {"grantPrivilegesToRole": "r1",
                                                    "privileges": [{"resource": {"db": db.name, "collection": "c"}, "actions": ["insert"]}]},
      setup=(role(),), teardown=(command_step({"dropRole": "r1"}),)),
    C("grantPrivilegesToRole", "wrong-type", {"grantPrivilegesToRole": "r1", "privileges": 5}, setup=(role(),),
      teardown=(command_step({"dropRole": "r1"}),)),
    C("revokePrivilegesFromRole", "plain", lambda db: {"revokePrivilegesFromRole": "r1",
                                                       "privileges": [{"resource": {"db": db.name, "collection": ""}, "actions": ["find"]}]},
      setup=(role(),), teardown=(command_step({"dropRole": "r1"}),)),
    C("revokePrivilegesFromRole", "unknown-role", {"revokePrivilegesFromRole": "nope", "privileges": []}),
    C("grantRolesToRole", "plain", {"grantRolesToRole": "r1", "roles": ["readWrite"]}, setup=(role(),),
      teardown=(command_step({"dropRole": "r1"}),)),
    C("grantRolesToRole", "cycle", {"grantRolesToRole": "r1", "roles": ["r1"]}, setup=(role(),),
      teardown=(command_step({"dropRole": "r1"}),)),
    C("revokeRolesFromRole", "plain", {"revokeRolesFromRole": "r1", "roles": ["read"]}, setup=(role(roles=["read"]),),
      teardown=(command_step({"dropRole": "r1"}),)),
    C("revokeRolesFromRole", "missing-roles", {"revokeRolesFromRole": "r1"}, setup=(role(),),
      teardown=(command_step({"dropRole": "r1"}),)),
]


# --- Comparing ---------------------------------------------------------------------------------

def bson_type(value) -> str:
    # bool and Int64 are ints in Python: test them first.
    for python_type, name in ((bool, "bool"), (Int64, "long"), (int, "int"), (float, "double"), (str, "string"),
                              (Binary, "binData"), (bytes, "binData"), (uuid.UUID, "binData"), (ObjectId, "objectId"),
                              (datetime, "date"), (Decimal128, "decimal"), (Timestamp, "timestamp"), (dict, "object"),
                              (list, "array"), (type(None), "null")):
        if isinstance(value, python_type):
            return name
    return type(value).__name__


def zero_or_not(value) -> tuple:
    return ("cursor id", bson_type(value), "zero" if value == 0 else "nonzero")


def canonical(value, command: str, path: tuple = ()):
    """The reply as compared: named fields removed or reduced to their type, and every
    scalar paired with its BSON type."""
    key = path[-1] if path else None
    if key in FIELDS_BY_TYPE or key in STORAGE_FIGURES.get(command, ()) or (command == "startSession" and path == ("id",)):
        return ("by type", bson_type(value))
    if key == "id" and len(path) >= 2 and path[-2] == "cursor":
        return zero_or_not(value)
    if key in CURSOR_ID_LISTS and isinstance(value, list):
        return [zero_or_not(item) for item in value]
    if isinstance(value, dict):
        return {name: canonical(item, command, path + (name,)) for name, item in value.items() if name not in FIELDS_REMOVED}
    if isinstance(value, list):
        return [canonical(item, command, path + ("[]",)) for item in value]
    return (bson_type(value), value)


def error_code(reply: dict) -> tuple:
    return (reply.get("ok"), reply.get("code"), reply.get("codeName"))


def ask(client: pymongo.MongoClient, case: Case, database: str) -> dict:
    """Runs the case on one deployment and returns the reply body, error or not."""
    fresh = client[database]
    for step in case.setup:
        step(fresh)
    try:
        body = case.body(fresh) if callable(case.body) else case.body
        target = client[case.database] if case.database else fresh
        try:
            return target.command(copy.deepcopy(body))
        except OperationFailure as error:
            return error.details
    finally:
        for step in case.teardown:
            step(fresh)


def database_name(case: Case) -> str:
    """A fresh database per case (the same name on both deployments)."""
    return "parity_" + re.sub(r"[^A-Za-z0-9]", "_", case.id)[:50]


def parameters() -> list:
    return [pytest.param(case, id=case.id, marks=[pytest.mark.xfail(strict=True, reason=case.disagreement)] if case.disagreement else [])
            for case in CASES]


@pytest.mark.parametrize("case", parameters())
def test_node_and_router_agree(deployments, case):
    assert case.command not in NOT_ON_ROUTER, f"{case.command} has parity cases yet is in NOT_ON_ROUTER"
    name = database_name(case)
    node = ask(deployments.node, case, name)
    router = ask(deployments.router, case, name)
    for added in ROUTER_ADDED_FIELDS.get(case.command, {}):
        router.pop(added, None)
    if case.command in REPLY_DIFFERS:
        assert error_code(router) == error_code(node), f"node: {node}\nrouter: {router}"
        return
    assert canonical(router, case.command) == canonical(node, case.command), f"node: {node}\nrouter: {router}"


# --- Coverage and the exemptions ---------------------------------------------------------------

def test_every_node_command_has_cases_or_an_exemption(deployments):
    listed = set(deployments.node.admin.command("listCommands")["commands"])
    covered = {case.command for case in CASES}
    missing = sorted(listed - covered - set(NOT_ON_ROUTER))
    assert not missing, f"node commands without parity cases (add them to CASES, or to NOT_ON_ROUTER with a reason): {missing}"
    both = sorted(covered & set(NOT_ON_ROUTER))
    assert not both, f"commands both in CASES and NOT_ON_ROUTER: {both}"
    stale = sorted((covered | set(NOT_ON_ROUTER) | set(REPLY_DIFFERS)) - listed)
    assert not stale, f"cases or exemptions for commands the node does not list: {stale}"


@pytest.mark.parametrize("command", sorted(NOT_ON_ROUTER))
def test_commands_not_yet_on_the_router_are_command_not_found(deployments, command):
    # The node lists each of them (checked above). `profile: -1` only reads, should the router
    # ever answer it.
    try:
        reply = deployments.router.admin.command({command: -1 if command == "profile" else 1})
    except OperationFailure as error:
        reply = error.details
    assert reply.get("code") == COMMAND_NOT_FOUND, (
        f"the router answers {command} now ({reply}): move it from NOT_ON_ROUTER into CASES with parity cases")
    assert reply == {"ok": 0.0, "errmsg": f"no such command: '{command}'", "code": COMMAND_NOT_FOUND, "codeName": "CommandNotFound"}


@pytest.mark.parametrize("level", [1, 2])
def test_the_router_refuses_profiling_as_mongos(deployments, level):
    # mongos only logs slow operations: levels 1 and 2 are refused (the node takes them).
    with pytest.raises(OperationFailure) as refused:
        deployments.router.parity_profile.command({"profile": level})
    assert refused.value.code == 2
    assert refused.value.details["errmsg"].startswith("Profiling is not permitted on mongoS")
    assert deployments.router.parity_profile.command({"profile": -1})["was"] == 0


def test_router_only_commands_are_command_not_found_on_a_node(deployments):
    node_commands = set(deployments.node.admin.command("listCommands")["commands"])
    router_only = sorted(set(deployments.router.admin.command("listCommands")["commands"]) - node_commands)
    assert {"addShard", "listShards", "enableSharding", "shardCollection", "split", "moveChunk"} <= set(router_only), router_only
    answered = {}
    for command in router_only:
        try:
            answered[command] = deployments.node.admin.command({command: 1})
        except OperationFailure as error:
            if error.code != COMMAND_NOT_FOUND or error.details.get("errmsg") != f"no such command: '{command}'":
                answered[command] = error.details
    assert not answered, f"a node answers router-only commands: {answered}"


def test_router_lists_every_command_it_answers(deployments):
    node_commands = set(deployments.node.admin.command("listCommands")["commands"])
    router_commands = set(deployments.router.admin.command("listCommands")["commands"])
    unlisted = sorted(node_commands - set(NOT_ON_ROUTER) - router_commands)
    assert not unlisted, f"the router answers these but does not list them: {unlisted}"
