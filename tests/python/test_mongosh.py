"""A mongosh session against Myriad (runs when mongosh is installed: npm install -g mongosh)."""

import json
import shutil
import subprocess

import pytest

MONGOSH = shutil.which("mongosh")


def run_script(uri, script):
    """Runs `script` in mongosh against `uri`; the JSON its last line prints."""
    completed = subprocess.run([MONGOSH, "--quiet", "--norc", uri, "--eval", script], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])

SCRIPT = r"""
const shop = db.getSiblingDB("mongosh_session");
shop.dropDatabase();
const results = {};
results.insert = shop.orders.insertOne({ item: "apple", qty: 5 }).acknowledged;
results.insertMany = Object.keys(shop.orders.insertMany([{ item: "pear", qty: 10 }, { item: "kale", qty: 1 }]).insertedIds).length;
results.index = shop.orders.createIndex({ qty: -1 });
results.found = shop.orders.find({ qty: { $gte: 5 } }, { _id: 0 }).sort({ qty: 1 }).toArray();
results.updated = shop.orders.updateMany({}, { $set: { checked: true } }).modifiedCount;
results.deleted = shop.orders.deleteOne({ item: "kale" }).deletedCount;
results.collections = shop.getCollectionNames();
results.indexes = shop.orders.getIndexes().map(index => index.name);
results.count = shop.orders.countDocuments();
results.dropped = shop.orders.drop();
results.after = shop.getCollectionNames();
print(JSON.stringify(results));
"""


@pytest.mark.skipif(MONGOSH is None, reason="mongosh is optional and not installed")
def test_mongosh_session(server):
    results = run_script(server.uri(), SCRIPT)
    assert results == {
        "insert": True,
        "insertMany": 2,
        "index": "qty_-1",
        "found": [{"item": "apple", "qty": 5}, {"item": "pear", "qty": 10}],
        "updated": 3,
        "deleted": 1,
        "collections": ["orders"],
        "indexes": ["_id_", "qty_-1"],
        "count": 2,
        "dropped": True,
        "after": [],
    }


# A time-series collection as mongosh users make and read one.
TIMESERIES = r"""
const weather = db.getSiblingDB("mongosh_timeseries");
weather.dropDatabase();
weather.createCollection("readings", { timeseries: { timeField: "t", metaField: "sensor", granularity: "minutes" }, expireAfterSeconds: 86400 * 365 * 60 });
const start = new Date("2026-11-01T00:00:00Z");
weather.readings.insertMany([...Array(30).keys()].map(i => ({ t: new Date(start.getTime() + i * 60000), sensor: { id: i % 3 }, temp: i })));
const results = {};
results.info = weather.getCollectionInfos({ name: "readings" }).map(info => ({ type: info.type, timeseries: info.options.timeseries }));
results.count = weather.readings.countDocuments({ "sensor.id": 1 });
results.first = weather.readings.find({ "sensor.id": 2 }, { _id: 0 }).sort({ t: 1 }).limit(1).toArray();
results.averages = weather.readings.aggregate([{ $group: { _id: "$sensor.id", avg: { $avg: "$temp" } } }, { $sort: { _id: 1 } }]).toArray();
results.indexes = weather.readings.getIndexes().map(index => index.key);
results.deleted = weather.readings.deleteMany({ temp: { $lt: 10 } }).deletedCount;
results.buckets = weather.getCollection("system.buckets.readings").countDocuments() > 0;
print(JSON.stringify(results));
"""


@pytest.mark.skipif(MONGOSH is None, reason="mongosh is optional and not installed")
def test_mongosh_timeseries_session(server):
    results = run_script(server.uri(), TIMESERIES)
    assert results == {
        "info": [{"type": "timeseries", "timeseries": {"timeField": "t", "metaField": "sensor", "granularity": "minutes", "bucketMaxSpanSeconds": 86400}}],
        "count": 10,
        "first": [{"t": "2026-11-01T00:02:00.000Z", "sensor": {"id": 2}, "temp": 2}],
        "averages": [{"_id": 0, "avg": 13.5}, {"_id": 1, "avg": 14.5}, {"_id": 2, "avg": 15.5}],
        "indexes": [{"sensor": 1, "t": 1}],
        "deleted": 10,
        "buckets": True,
    }


# The diagnostic tools of the idealo write-up, as a user types them: explain with execution
# statistics, the profiler's shell helpers, system.profile and currentOp. Level 1 with
# slowms -1 makes every operation "slow" without depending on timing.
DIAGNOSTICS = r"""
const shop = db.getSiblingDB("mongosh_diagnostics");
shop.dropDatabase();
shop.products.insertMany([...Array(20).keys()].map(i => ({ _id: i, productId: i % 4, siteId: i % 2 })));
shop.products.createIndex({ productId: 1 });
const results = {};
const explained = shop.products.find({ productId: 2, siteId: 0 }).explain("executionStats");
results.explain = {
    stage: explained.queryPlanner.winningPlan.stage,
    inputStage: explained.queryPlanner.winningPlan.inputStage.stage,
    indexName: explained.queryPlanner.winningPlan.inputStage.indexName,
    nReturned: Number(explained.executionStats.nReturned),
    totalKeysExamined: Number(explained.executionStats.totalKeysExamined),
    totalDocsExamined: Number(explained.executionStats.totalDocsExamined),
};
results.setLevel = shop.setProfilingLevel(1);
results.status = shop.getProfilingStatus();
results.slowOn = shop.setProfilingLevel(1, { slowms: -1 });
results.found = shop.products.find({ productId: 3 }, { _id: 1 }).sort({ _id: 1 }).toArray().map(d => d._id);
results.profiled = shop.system.profile.find({ op: "query", ns: "mongosh_diagnostics.products" }).toArray().map(entry => ({
    filter: entry.command.filter,
    keysExamined: entry.keysExamined,
    docsExamined: entry.docsExamined,
    nreturned: entry.nreturned,
    planSummary: entry.planSummary,
    appName: entry.appName.startsWith("mongosh"),
    millis: typeof entry.millis,
    ts: entry.ts instanceof Date,
}));
results.restored = shop.setProfilingLevel(0, { slowms: 100 });
// mongosh 2 reads currentOp through the $currentOp stage; until the server has that stage, the
// shell's error is recorded and the command form (what mongosh 1 sent) is read instead.
let operations;
try {
    operations = db.currentOp();
    results.currentOpThrough = "$currentOp";
} catch (error) {
    results.currentOpThrough = String(error.message);
    operations = db.adminCommand({ currentOp: 1 });
}
results.currentOp = {
    ok: operations.ok,
    listsItself: operations.inprog.some(op => op.active && typeof op.opid === "number" && op.ns.startsWith("admin.")),
};
shop.dropDatabase();
print(JSON.stringify(results));
"""


@pytest.mark.skipif(MONGOSH is None, reason="mongosh is optional and not installed")
def test_mongosh_diagnostics_session(server):
    results = run_script(server.uri(), DIAGNOSTICS)
    assert results["explain"] == {
        "stage": "FETCH",
        "inputStage": "IXSCAN",
        "indexName": "productId_1",
        "nReturned": 5,
        "totalKeysExamined": 5,
        "totalDocsExamined": 5,
    }
    assert results["setLevel"] == {"was": 0, "slowms": 100, "sampleRate": 1, "ok": 1}
    assert results["status"]["was"] == 1 and results["status"]["slowms"] == 100 and results["status"]["sampleRate"] == 1
    assert results["slowOn"]["was"] == 1
    assert results["found"] == [3, 7, 11, 15, 19]
    assert results["profiled"] == [{
        "filter": {"productId": 3},
        "keysExamined": 5,
        "docsExamined": 5,
        "nreturned": 5,
        "planSummary": "IXSCAN { productId: 1 }",
        "appName": True,
        "millis": "number",
        "ts": True,
    }]
    assert results["restored"]["slowms"] == -1, "the reply holds the settings before the change"
    assert results["currentOpThrough"] in ["$currentOp", "Unrecognized pipeline stage name: '$currentOp'"]
    assert results["currentOp"] == {"ok": 1, "listsItself": True}


# Inserts for a few seconds while the shell's driver monitors the server with the streaming
# (exhaust) hello every 500 ms; prints how many inserts it made.
INSERT_LOOP = r"""
const loop = db.getSiblingDB("mongosh_monitoring").ticks;
loop.drop();
const end = Date.now() + 4000;
let inserted = 0;
while (Date.now() < end) {
    loop.insertOne({ n: inserted });
    inserted += 1;
    sleep(50);
}
print(JSON.stringify({ inserted, count: loop.countDocuments() }));
"""
# Beyond the loop's own inserts: the shell's startup commands, handshakes, streamed hellos and
# RTT checks. A polling hello loop (a reply without moreToCome) cost thousands a second.
MAX_EXTRA_COMMANDS = 80


@pytest.mark.skipif(MONGOSH is None, reason="mongosh is optional and not installed")
def test_mongosh_streaming_monitor_stays_quiet(server, client):
    before = client.admin.command("serverStatus")["opcounters"]["command"]
    completed = subprocess.run(
        [MONGOSH, "--quiet", "--norc", server.uri() + "&heartbeatFrequencyMS=500", "--eval", INSERT_LOOP],
        capture_output=True, text=True, timeout=120,
    )
    after = client.admin.command("serverStatus")["opcounters"]["command"]
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "moreToCome" not in output, output
    results = json.loads(completed.stdout.strip().splitlines()[-1])
    assert results["inserted"] > 0 and results["count"] == results["inserted"]
    extra = after - before - 1 - results["inserted"]
    assert extra <= MAX_EXTRA_COMMANDS, f"mongosh cost {extra} commands beyond its {results['inserted']} inserts"
