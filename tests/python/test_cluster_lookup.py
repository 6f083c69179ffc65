"""$lookup and $unionWith through a router (issue 22): the router runs them on its merging
part and reads the other collection through its own routing, wherever its chunks live, as
mongos does. Each pipeline's result through a two-shard cluster must equal the same pipeline's
on a standalone node holding the same documents."""

import tempfile

import pytest

from conftest import Cluster

ORDERS = [{"_id": n, "k": n, "customer": n % 40, "amount": n * 3 % 17} for n in range(400)]
CUSTOMERS = [{"_id": n, "name": f"customer{n}", "region": n % 5} for n in range(40)]
REGIONS = [{"_id": n, "label": f"region{n}"} for n in range(5)]
RETURNS = [{"_id": 1000 + n, "k": n, "returned": True} for n in range(0, 400, 7)]

PIPELINES = {
    "local_and_foreign_fields": [
        {"$match": {"amount": {"$gte": 10}}},
        {"$lookup": {"from": "customers", "localField": "customer", "foreignField": "_id", "as": "buyer"}},
        {"$sort": {"_id": 1}},
    ],
    "pipeline_with_let_and_a_nested_lookup": [
        {"$lookup": {
            "from": "customers",
            "let": {"wanted": "$customer"},
            "pipeline": [
                {"$match": {"$expr": {"$eq": ["$_id", "$$wanted"]}}},
                {"$lookup": {"from": "regions", "localField": "region", "foreignField": "_id", "as": "where"}},
                {"$project": {"name": 1, "where.label": 1}},
            ],
            "as": "buyer",
        }},
        {"$group": {"_id": {"$first": "$buyer.where.label"}, "orders": {"$sum": 1}}},
        {"$sort": {"_id": 1}},
    ],
    "union_with_another_sharded_collection": [
        {"$project": {"k": 1}},
        {"$unionWith": {"coll": "returns", "pipeline": [{"$project": {"k": 1, "returned": 1}}]}},
        {"$sort": {"_id": 1}},
    ],
    "one_targeted_shard_reading_both": [
        {"$match": {"k": 39}},
        {"$lookup": {"from": "orders", "localField": "customer", "foreignField": "customer", "as": "same_customer"}},
        {"$project": {"count": {"$size": "$same_customer"}}},
    ],
}


def load(database) -> None:
    database.orders.insert_many(ORDERS)
    database.customers.insert_many(CUSTOMERS)
    database.regions.insert_many(REGIONS)
    database.returns.insert_many(RETURNS)


@pytest.fixture(scope="module")
def cluster():
    with tempfile.TemporaryDirectory(prefix="myriad-cluster-lookup-") as directory:
        running = Cluster(directory)
        try:
            with running.client() as client:
                for collection in ("orders", "customers", "returns"):
                    client.admin.command("shardCollection", f"lookups.{collection}", key={"k" if collection != "customers" else "_id": "hashed"})
                load(client.lookups)
            yield running
        finally:
            running.stop()


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_a_router_pipeline_equals_a_nodes(cluster, client, name):
    client.drop_database("lookups")
    load(client.lookups)
    expected = list(client.lookups.orders.aggregate(PIPELINES[name]))
    with cluster.client() as router:
        assert list(router.lookups.orders.aggregate(PIPELINES[name])) == expected
    assert expected, "the pipeline returns something to compare"
    client.drop_database("lookups")


def test_out_and_merge_stay_refused_across_shards(cluster):
    with cluster.client() as router:
        for stage in ({"$out": "copy"}, {"$merge": {"into": "copy"}}):
            with pytest.raises(Exception) as refused:
                list(router.lookups.orders.aggregate([stage]))
            assert getattr(refused.value, "code", None) == 20
