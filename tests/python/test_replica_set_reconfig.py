"""replSetReconfig (issue 23): adding and removing members, priorities, votes and hidden, with
mongod's checks and codes; mongosh's rs.add/rs.remove; and a stepped-down primary's
connections (writes refused, fire-and-forget writes closing the connection, as mongod 4.2+)."""

import shutil
import socket
import struct
import subprocess

import bson
import pytest
from pymongo.errors import NotPrimaryError, OperationFailure

from conftest import ReplicaSet, Server, wait_until

MONGOSH = shutil.which("mongosh")
OP_MSG = 2013
MORE_TO_COME = 2


def host(server) -> str:
    return f"127.0.0.1:{server.port}"


def reconfigure(client, change, force=False):
    """rs.reconfig as mongosh makes it: replSetGetConfig, version + 1, the change, replSetReconfig."""
    config = client.admin.command("replSetGetConfig")["config"]
    config["version"] += 1
    change(config)
    return client.admin.command("replSetReconfig", config, force=force)


def refused_reconfig(client, change, force=False) -> dict:
    """The error reply of a reconfig that must fail (pymongo raises NotPrimaryError for 10107)."""
    with pytest.raises((OperationFailure, NotPrimaryError)) as refused:
        reconfigure(client, change, force)
    return refused.value.details


def ordered(documents) -> list:
    return sorted(documents, key=lambda document: repr(document["_id"]))


def member_data(server, database: str):
    with server.client(readPreference="secondaryPreferred") as client:
        return ordered(client[database].items.find())


def voting_members(client) -> int:
    return client.admin.command("replSetGetStatus")["votingMembersCount"]


def test_an_added_member_catches_up_and_a_removed_one_leaves():
    running = ReplicaSet(members=3)
    extra = Server(("--replSet", running.name))
    try:
        with running.client() as client:
            client.grow.items.insert_many([{"_id": index, "value": index * index} for index in range(300)])
            client.grow.items.create_index("value", name="by_value")
            expected = ordered(client.grow.items.find())
            reconfigure(client, lambda config: config["members"].append({"_id": 3, "host": host(extra)}))
            config = client.admin.command("replSetGetConfig")["config"]
            assert config["version"] == 2 and [member["host"] for member in config["members"]][-1] == host(extra)
            assert voting_members(client) == 4
            wait_until(lambda: host(extra) in client.admin.command("hello")["hosts"], "the new member in hello's hosts")
            wait_until(lambda: member_data(extra, "grow") == expected, "the new member caught up")
            with extra.client() as direct:
                hello = direct.admin.command("hello")
                assert hello["setName"] == running.name and hello["secondary"] is True and hello["me"] == host(extra)
                assert [index["name"] for index in direct.grow.items.list_indexes()] == ["_id_", "by_value"]
            client.grow.items.insert_one({"_id": "after the add"})
            wait_until(lambda: len(member_data(extra, "grow")) == 301, "the new member follows new writes")

            reconfigure(client, lambda config: config["members"].pop())
            config = client.admin.command("replSetGetConfig")["config"]
            assert config["version"] == 3 and host(extra) not in [member["host"] for member in config["members"]]
            assert voting_members(client) == 3
            wait_until(lambda: host(extra) not in client.admin.command("hello")["hosts"], "the removed member out of hello's hosts")
            client.grow.items.insert_one({"_id": "after the removal"})
            assert client.grow.items.count_documents({}) == 302
    finally:
        extra.stop()
        running.stop()


def test_a_priority_zero_member_is_never_elected():
    running = ReplicaSet(members=3)
    try:
        primary = running.wait_for_primary()
        passive = (primary + 1) % 3
        with running.client() as client:
            reconfigure(client, lambda config: config["members"][passive].update(priority=0))
            assert client.admin.command("replSetGetConfig")["config"]["members"][passive]["priority"] == 0
        with running.member_client(passive) as client:
            hello = wait_until(lambda: (reply := client.admin.command("hello")).get("passive") and reply, "the member knows it is passive")
            assert f"127.0.0.1:{running.ports[passive]}" in hello["passives"]
            assert f"127.0.0.1:{running.ports[passive]}" not in hello["hosts"]
        for _ in range(3):
            current = running.wait_for_primary()
            with running.member_client(current) as client:
                client.admin.command("replSetStepDown", 1)

            def elected_elsewhere():
                index = running.primary_index()
                return (index,) if index is not None and index != current else None

            (elected,) = wait_until(elected_elsewhere, "a primary other than the stepped-down one")
            assert elected != passive
    finally:
        running.stop()


def test_step_down_without_an_electable_member_keeps_the_primary():
    running = ReplicaSet(members=2)
    try:
        primary = running.wait_for_primary()
        passive = 1 - primary
        with running.client() as client:
            reconfigure(client, lambda config: config["members"][passive].update(priority=0))
        with running.member_client(passive) as client:
            wait_until(lambda: client.admin.command("hello").get("passive"), "the member knows it is passive")
        with running.member_client(primary) as client:
            with pytest.raises(OperationFailure) as refused:
                client.admin.command("replSetStepDown", 60)
            assert refused.value.code == 262 and refused.value.details["codeName"] == "ExceededTimeLimit"
            assert "No electable secondaries caught up" in str(refused.value)
            assert client.admin.command("hello")["isWritablePrimary"] is True
            client.still.items.insert_one({"primary": "kept"})
    finally:
        running.stop()


def test_votes_zero_is_a_learner_with_the_data_and_hidden_is_not_in_hello():
    running = ReplicaSet(members=3)
    learner, hidden = Server(("--replSet", running.name)), Server(("--replSet", running.name))
    try:
        with running.client() as client:
            client.learn.items.insert_many([{"_id": index} for index in range(100)])
            expected = ordered(client.learn.items.find())
            reconfigure(client, lambda config: config["members"].append({"_id": 3, "host": host(learner), "votes": 0, "priority": 0}))
            reconfigure(client, lambda config: config["members"].append({"_id": 4, "host": host(hidden), "priority": 0, "hidden": True}))
            config = client.admin.command("replSetGetConfig")["config"]
            assert [(member["votes"], member["hidden"]) for member in config["members"][3:]] == [(0, False), (1, True)]
            assert voting_members(client) == 4
            status = client.admin.command("replSetGetStatus")
            assert status["majorityVoteCount"] == 3 and len(status["members"]) == 5
            hello = wait_until(lambda: (reply := client.admin.command("hello")).get("passives") and reply, "hello lists the passive member")
            assert hello["passives"] == [host(learner)] and host(hidden) not in hello["hosts"]
            for server in (learner, hidden):
                wait_until(lambda: member_data(server, "learn") == expected, f"{host(server)} holds the data")
            with hidden.client() as direct:
                assert wait_until(lambda: direct.admin.command("hello").get("hidden"), "the hidden member knows it") is True

            # An existing voter becomes a learner, then a voter again.
            secondary = next(index for index in range(3) if index != running.primary_index())
            reconfigure(client, lambda config: config["members"][secondary].update(votes=0, priority=0))
            assert voting_members(client) == 3
            reconfigure(client, lambda config: config["members"][secondary].update(votes=1, priority=1))
            assert voting_members(client) == 4
            client.learn.items.insert_one({"_id": "still writable"})
    finally:
        learner.stop()
        hidden.stop()
        running.stop()


def test_reconfig_checks_and_errors(replica_set):
    primary = replica_set.wait_for_primary()
    with replica_set.member_client(primary) as client:
        config = client.admin.command("replSetGetConfig")["config"]
        with pytest.raises(OperationFailure) as stale:
            client.admin.command("replSetReconfig", config)
        assert stale.value.code == 103 and stale.value.details["codeName"] == "NewReplicaSetConfigurationIncompatible"
        assert "must be greater than old" in str(stale.value)

        two_voters = refused_reconfig(client, lambda config: config["members"].extend(
            [{"_id": 7, "host": "127.0.0.1:1"}, {"_id": 8, "host": "127.0.0.1:2"}]))
        assert two_voters["code"] == 93 and "at most 1 voting member" in two_voters["errmsg"]

        renamed = refused_reconfig(client, lambda config: config.update(_id="another"))
        assert renamed["code"] == 103 and "differ in replica set name" in renamed["errmsg"]

        moved = refused_reconfig(client, lambda config: config["members"][(primary + 1) % 3].update(_id=9))
        assert moved["code"] == 103 and "the _id field is 9" in moved["errmsg"]

        without_primary = refused_reconfig(client, lambda config: config["members"].pop(primary))
        assert without_primary["code"] == 74 and without_primary["codeName"] == "NodeNotFound"

        unelectable = refused_reconfig(client, lambda config: config["members"][primary].update(priority=0))
        assert unelectable["code"] == 104 and unelectable["codeName"] == "NodeNotElectable"

        invalid = refused_reconfig(client, lambda config: config["members"][0].update(votes=3))
        assert invalid["code"] == 93

        assert client.admin.command("replSetGetConfig")["config"]["version"] == config["version"]
    secondary = (primary + 1) % 3
    with replica_set.member_client(secondary) as client:
        not_primary = refused_reconfig(client, lambda config: None)
        assert not_primary["code"] == 10107 and "should only be run on a writable PRIMARY" in not_primary["errmsg"]
        forced = refused_reconfig(client, lambda config: None, force=True)
        assert forced["code"] == 10107 and "force replSetReconfig is not supported" in forced["errmsg"]


@pytest.mark.skipif(MONGOSH is None, reason="mongosh is optional and not installed")
def test_mongosh_rs_add_and_rs_remove(replica_set):
    extra = Server(("--replSet", replica_set.name))
    try:
        def mongosh(script: str) -> str:
            completed = subprocess.run([MONGOSH, "--quiet", "--norc", replica_set.uri(), "--eval", script],
                                       capture_output=True, text=True, timeout=180)
            assert completed.returncode == 0, completed.stderr + completed.stdout
            return completed.stdout.strip().splitlines()[-1]

        hosts = "print(rs.conf().members.map(m => m.host).join(','))"
        added = mongosh(f"rs.add('{host(extra)}'); {hosts}")
        assert added.split(",")[-1] == host(extra) and len(added.split(",")) == 4
        with replica_set.client() as client:
            wait_until(lambda: host(extra) in client.admin.command("hello")["hosts"], "rs.add's member in hello's hosts")
        removed = mongosh(f"rs.remove('{host(extra)}'); {hosts}")
        assert host(extra) not in removed.split(",") and len(removed.split(",")) == 3
        with replica_set.client() as client:
            assert voting_members(client) == 3
    finally:
        extra.stop()


def unacknowledged_insert(port: int) -> socket.socket:
    """Sends an insert with moreToCome (a fire-and-forget write, w: 0) on a new raw connection."""
    body = bson.encode({"insert": "items", "documents": [{"note": "fire and forget"}], "writeConcern": {"w": 0}, "$db": "stepdown"})
    message = struct.pack("<I", MORE_TO_COME) + b"\x00" + body
    connection = socket.create_connection(("127.0.0.1", port), timeout=30)
    connection.sendall(struct.pack("<iiii", 16 + len(message), 1, 0, OP_MSG) + message)
    return connection


def hello_answers(connection: socket.socket) -> bool:
    """True when `connection` still answers a hello (False when the server closed it)."""
    body = bson.encode({"hello": 1, "$db": "admin"})
    message = struct.pack("<I", 0) + b"\x00" + body
    try:
        connection.sendall(struct.pack("<iiii", 16 + len(message), 2, 0, OP_MSG) + message)
        return len(connection.recv(16)) == 16
    except OSError:
        return False


def test_a_stepped_down_primary_refuses_writes_and_closes_fire_and_forget_writers():
    running = ReplicaSet(members=3)
    try:
        first = running.wait_for_primary()
        with running.member_client(first) as direct:
            direct.stepdown.items.insert_one({"before": True})
            accepted = unacknowledged_insert(running.ports[first])
            assert hello_answers(accepted)
            direct.admin.command("replSetStepDown", 30)
            # The connection stays open (mongod 4.2+); writes on it get NotWritablePrimary.
            with pytest.raises(NotPrimaryError) as refused:
                direct.stepdown.items.insert_one({"after": True})
            assert refused.value.details["code"] == 10107
            assert direct.admin.command("hello")["isWritablePrimary"] is False
        refused_connection = unacknowledged_insert(running.ports[first])
        assert refused_connection.recv(1) == b""
        assert not hello_answers(refused_connection)
        accepted.close()
        with running.client() as client:
            client.stepdown.items.insert_one({"on the new primary": True})
            wait_until(lambda: client.stepdown.items.count_documents({}) == 3, "the acknowledged writes and the one fire-and-forget write")
    finally:
        running.stop()
