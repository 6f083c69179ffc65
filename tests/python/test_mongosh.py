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
