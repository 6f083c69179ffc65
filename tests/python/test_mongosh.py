"""A mongosh session against Myriad (runs when mongosh is installed: npm install -g mongosh)."""

import json
import shutil
import subprocess

import pytest

MONGOSH = shutil.which("mongosh")

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
    completed = subprocess.run(
        [MONGOSH, "--quiet", "--norc", server.uri(), "--eval", SCRIPT],
        capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    results = json.loads(completed.stdout.strip().splitlines()[-1])
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
