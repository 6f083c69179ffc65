"""Authorization that depends on who asks, through pymongo against `myriad --auth`:
listDatabases shows a user the databases its privileges reach (authorizedDatabases), and
currentOp/killOp let a user see and kill its own operations ($ownOps) but no one else's."""

import threading
import time

import pymongo
import pytest
from bson import Int64
from pymongo.errors import OperationFailure

from conftest import Server, wait_until

ROOT_PASSWORD = "root-secret"


def connect(server, **options):
    return pymongo.MongoClient(server.uri(), serverSelectionTimeoutMS=10_000, **options)


def login(server, user):
    return connect(server, username=user, password="pw", authSource="admin")


@pytest.fixture(scope="module")
def server():
    running = Server(("--auth",))
    with connect(running) as anonymous:
        anonymous.admin.command("createUser", "root", pwd=ROOT_PASSWORD, roles=["root"])
    with connect(running, username="root", password=ROOT_PASSWORD) as root:
        root.authz_shop.items.insert_one({"n": 1})
        root.authz_orders.orders.insert_one({"n": 1})
        root.authz_other.things.insert_one({"n": 1})
        root.authz_shop.create_collection("log", capped=True, size=65536)
        root.authz_shop.log.insert_one({"line": 1})
        root.authz_orders.command("createRole", "orderReader", roles=[],
                                  privileges=[{"resource": {"db": "authz_orders", "collection": "orders"}, "actions": ["find"]}])
        users = {
            "shopper": [{"role": "read", "db": "authz_shop"}],
            "clerk": [{"role": "orderReader", "db": "authz_orders"}],
            "monitor": [{"role": "clusterMonitor", "db": "admin"}],
            "nobody": [],
            "ann": [{"role": "read", "db": "authz_shop"}],
            "bob": [{"role": "read", "db": "authz_shop"}],
        }
        for user, roles in users.items():
            root.admin.command("createUser", user, pwd="pw", roles=roles)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def root(server):
    client = connect(server, username="root", password=ROOT_PASSWORD)
    yield client
    client.close()


def test_list_databases_shows_what_privileges_reach(server, root):
    with login(server, "shopper") as shopper:
        assert shopper.list_database_names() == ["authz_shop"]
        reply = shopper.admin.command("listDatabases")
        assert [database["name"] for database in reply["databases"]] == ["authz_shop"]
        assert reply["databases"][0]["sizeOnDisk"] >= 0 and "totalSize" in reply
        named = shopper.admin.command("listDatabases", nameOnly=True)
        assert named["databases"] == [{"name": "authz_shop"}] and "totalSize" not in named
        filtered = shopper.admin.command("listDatabases", filter={"name": {"$ne": "authz_shop"}})
        assert filtered["databases"] == []
        with pytest.raises(OperationFailure) as refused:
            shopper.admin.command("listDatabases", authorizedDatabases=False)
        assert refused.value.code == 13
        assert "Insufficient permissions to list all databases" in str(refused.value)
    with login(server, "clerk") as clerk:
        # A privilege on one collection reaches its database.
        assert clerk.list_database_names() == ["authz_orders"]
    with login(server, "nobody") as nobody:
        assert nobody.list_database_names() == []
    with login(server, "monitor") as monitor:
        # clusterMonitor holds listDatabases: everything, and authorizedDatabases: false is fine.
        everything = set(monitor.list_database_names())
        assert {"admin", "authz_shop", "authz_orders", "authz_other"} <= everything
        assert set(d["name"] for d in monitor.admin.command("listDatabases", authorizedDatabases=False)["databases"]) == everything
    assert {"authz_shop", "authz_orders", "authz_other"} <= set(root.list_database_names())
    with connect(server) as anonymous:
        with pytest.raises(OperationFailure) as unauthenticated:
            anonymous.admin.command("listDatabases")
        assert unauthenticated.value.code == 13


def _own_operations(client):
    return client.admin.command({"currentOp": 1, "$ownOps": True, "command.getMore": {"$exists": True}})["inprog"]


def test_current_op_and_kill_op_of_ones_own_operations(server, root):
    ann_waiting = login(server, "ann")
    ann = login(server, "ann")
    bob = login(server, "bob")
    outcome = {}

    def tail():
        with ann_waiting.start_session() as session:
            opened = ann_waiting.authz_shop.command("find", "log", tailable=True, awaitData=True, session=session)
            cursor = Int64(opened["cursor"]["id"])
            try:
                ann_waiting.authz_shop.command("getMore", cursor, collection="log", maxTimeMS=30_000, session=session)
                outcome["result"] = "finished"
            except OperationFailure as failure:
                outcome["result"] = failure.code

    waiter = threading.Thread(target=tail)
    waiter.start()
    try:
        mine = wait_until(lambda: _own_operations(ann), "ann's waiting getMore shows in her own operations")
        assert len(mine) == 1, mine
        operation = mine[0]
        assert operation["effectiveUsers"] == [{"user": "ann", "db": "admin"}]
        assert operation["ns"] == "authz_shop.log"
        # Without $ownOps ann needs inprog; bob sees none of ann's operations.
        with pytest.raises(OperationFailure) as refused:
            ann.admin.command("currentOp")
        assert refused.value.code == 13
        assert _own_operations(bob) == []
        # The stage agrees: allUsers false (the default) lists one's own, allUsers true needs inprog.
        staged = list(ann.admin.aggregate([{"$currentOp": {}}, {"$match": {"command.getMore": {"$exists": True}}}]))
        assert [entry["opid"] for entry in staged] == [operation["opid"]]
        with pytest.raises(OperationFailure) as all_users:
            list(ann.admin.aggregate([{"$currentOp": {"allUsers": True}}]))
        assert all_users.value.code == 13
        everyone = root.admin.command({"currentOp": 1, "command.getMore": {"$exists": True}})["inprog"]
        assert [entry["opid"] for entry in everyone] == [operation["opid"]]
        # bob may not kill it: the reply is the same, and the operation keeps running.
        assert bob.admin.command("killOp", op=operation["opid"])["info"] == "attempting to kill op"
        # Workload, not a wait: a refused kill changes nothing, so there is no condition to
        # poll; the pause gives a wrongly honoured kill time to show before looking.
        time.sleep(0.3)
        assert [entry["opid"] for entry in _own_operations(ann)] == [operation["opid"]]
        assert "result" not in outcome
        # ann may, from another connection.
        ann.admin.command("killOp", op=operation["opid"])
        waiter.join(timeout=30)
        assert outcome.get("result") == 11601, outcome
    finally:
        waiter.join(timeout=30)
        for client in (ann_waiting, ann, bob):
            client.close()
    with connect(server) as anonymous:
        with pytest.raises(OperationFailure) as unauthenticated:
            anonymous.admin.command({"currentOp": 1, "$ownOps": True})
        assert unauthenticated.value.code == 13


# (role, role database) -> the probes it may run, in PROBES order:
# find, insert, createIndexes, dbStats, createUser, serverStatus, listDatabases of all, find elsewhere.
ROLE_TABLE = {
    ("read", "authz_roles"):                 [True, False, False, True, False, False, False, False],
    ("readWrite", "authz_roles"):            [True, True, True, True, False, False, False, False],
    ("dbAdmin", "authz_roles"):              [False, False, True, True, False, False, False, False],
    ("dbOwner", "authz_roles"):              [True, True, True, True, True, False, False, False],
    ("userAdmin", "authz_roles"):            [False, False, False, False, True, False, False, False],
    ("clusterMonitor", "admin"):             [False, False, False, True, False, True, True, False],
    ("clusterAdmin", "admin"):               [False, False, False, True, False, True, True, False],
    ("readAnyDatabase", "admin"):            [True, False, False, True, False, False, True, True],
    ("readWriteAnyDatabase", "admin"):       [True, True, True, True, False, False, True, True],
    ("userAdminAnyDatabase", "admin"):       [False, False, False, False, True, False, True, False],
    ("dbAdminAnyDatabase", "admin"):         [False, False, True, True, False, False, True, False],
    ("backup", "admin"):                     [True, False, False, True, False, True, True, True],
    ("restore", "admin"):                    [False, True, True, False, True, False, True, False],
    ("root", "admin"):                       [True, True, True, True, True, True, True, True],
}


def _probes(client, role):
    here = client.authz_roles
    return [
        lambda: here.items.find_one(),
        lambda: here.items.insert_one({"by": role}),
        lambda: here.items.create_index("by"),
        lambda: here.command("dbStats"),
        lambda: here.command("createUser", f"made_by_{role}", pwd="p", roles=[]),
        lambda: client.admin.command("serverStatus"),
        lambda: client.admin.command("listDatabases", authorizedDatabases=False),
        lambda: client.authz_elsewhere.items.find_one(),
    ]


def test_each_builtin_role_allows_and_refuses_its_commands(server, root):
    root.authz_roles.items.insert_one({"seed": 1})
    root.authz_elsewhere.items.insert_one({"seed": 1})
    for (role, role_db), expected in ROLE_TABLE.items():
        user = f"role_{role}"
        root.admin.command("createUser", user, pwd="pw", roles=[{"role": role, "db": role_db}])
        with login(server, user) as client:
            for index, (probe, allowed) in enumerate(zip(_probes(client, role), expected)):
                if allowed:
                    probe()
                    continue
                with pytest.raises(OperationFailure) as refused:
                    probe()
                assert refused.value.code == 13, f"{role}: probe {index} answered {refused.value}"


def test_cursors_belong_to_the_user_that_opened_them(server, root):
    root.authz_cursors.items.insert_many([{"n": n} for n in range(5)])
    for user in ("owner", "other"):
        root.admin.command("createUser", user, pwd="pw", roles=[{"role": "read", "db": "authz_cursors"}])
    with login(server, "owner") as owner, login(server, "other") as other:
        with owner.start_session() as session:
            opened = owner.authz_cursors.command("find", "items", batchSize=1, session=session)
            cursor = Int64(opened["cursor"]["id"])
            assert cursor != 0
            for command in ({"getMore": cursor, "collection": "items"}, {"killCursors": "items", "cursors": [cursor]}):
                with pytest.raises(OperationFailure) as refused:
                    other.authz_cursors.command(command)
                assert refused.value.code == 13
            rest = owner.authz_cursors.command("getMore", cursor, collection="items", session=session)
            assert len(rest["cursor"]["nextBatch"]) == 4 and rest["cursor"]["id"] == 0


def test_the_localhost_exception_creates_the_first_admin_user_only():
    fresh = Server(("--auth",))
    try:
        with connect(fresh) as anonymous:
            with pytest.raises(OperationFailure) as elsewhere:
                anonymous.shop.command("createUser", "early", pwd="p", roles=[])
            assert elsewhere.value.code == 13
            with pytest.raises(OperationFailure) as reading:
                anonymous.shop.items.find_one()
            assert reading.value.code == 13
            anonymous.admin.command("createUser", "first", pwd="p", roles=["userAdminAnyDatabase"])
            with pytest.raises(OperationFailure) as second:
                anonymous.admin.command("createUser", "second", pwd="p", roles=[])
            assert second.value.code == 13
        with connect(fresh, username="first", password="p") as first:
            first.admin.command("createUser", "second", pwd="p", roles=[])
    finally:
        fresh.stop()
