"""Test commands: `enableTestCommands` and `configureFailPoint`'s `failCommand`, as the
drivers' specifications use them (modes, data options, labels), on a node and a router."""

import json
import subprocess
import threading

import pymongo
import pytest
from bson import Int64
from bson.son import SON
from pymongo.errors import AutoReconnect, OperationFailure

from conftest import Cluster, Server, server_binary, start_router


@pytest.fixture(scope="module")
def test_server():
    running = Server(("--setParameter", "enableTestCommands=1"))
    yield running
    running.stop()


@pytest.fixture()
def admin(test_server):
    client = test_server.client()
    yield client.admin
    client.admin.command("configureFailPoint", "failCommand", mode="off")
    client.close()


@pytest.fixture()
def collection(admin):
    collection = admin.client["fail_points"]["things"]
    collection.drop()
    return collection


def fail_command(admin, mode, **data):
    return admin.command(SON([("configureFailPoint", "failCommand"), ("mode", mode), ("data", data)]))


def test_test_commands_are_off_by_default(client):
    assert client.admin.command("getParameter", "*")["enableTestCommands"] is False
    assert client.admin.command("getParameter", 1, enableTestCommands=1)["enableTestCommands"] is False
    with pytest.raises(OperationFailure) as failure:
        client.admin.command("configureFailPoint", "failCommand", mode="alwaysOn")
    assert failure.value.code == 59
    assert failure.value.details["codeName"] == "CommandNotFound"
    assert failure.value.details["errmsg"] == "no such command: 'configureFailPoint'"
    assert "configureFailPoint" not in client.admin.command("listCommands")["commands"]


def test_enable_test_commands_is_reported_and_set_only_at_start_up(admin):
    assert admin.command("getParameter", 1, enableTestCommands=1)["enableTestCommands"] is True
    assert admin.command("getParameter", "*")["enableTestCommands"] is True
    details = admin.command("getParameter", {"showDetails": True}, enableTestCommands=1)["enableTestCommands"]
    assert details == {"value": True, "settableAtRuntime": False, "settableAtStartup": True}
    with pytest.raises(OperationFailure) as failure:
        admin.command("setParameter", 1, enableTestCommands=False)
    assert failure.value.code == 2
    assert "configureFailPoint" in admin.command("listCommands")["commands"]


def test_bad_configurations_get_mongods_errors(admin):
    cases = [
        (SON([("configureFailPoint", "noSuchFailPoint"), ("mode", "alwaysOn")]), 266, "noSuchFailPoint not found"),
        (SON([("configureFailPoint", "failCommand")]), 20, "When setting a failpoint, you must supply a 'mode'"),
        (SON([("configureFailPoint", "failCommand"), ("mode", "sometimes")]), 2, "unknown mode: sometimes"),
        (SON([("configureFailPoint", "failCommand"), ("mode", 3)]), 14, "'mode' must be a string or JSON object"),
        (SON([("configureFailPoint", "failCommand"), ("mode", {"times": -1})]), 2, "'times' option to 'mode' must be positive"),
        (SON([("configureFailPoint", "failCommand"), ("mode", {"often": 1})]), 2,
         "'mode' must be one of 'off', 'alwaysOn', '{times:n}', '{skip:n}' or '{activationProbability:p}'"),
        (SON([("configureFailPoint", "failCommand"), ("mode", {"activationProbability": 2.0})]), 2,
         "activationProbability must be between 0.0 and 1.0; found 2"),
        (SON([("configureFailPoint", "failCommand"), ("mode", "alwaysOn"), ("data", 1)]), 14, "the 'data' option must be a JSON object"),
        (SON([("configureFailPoint", "failCommand"), ("mode", "alwaysOn"), ("data", {"blockConnection": True})]), 72,
         "must specify 'blockTimeMS' when 'blockConnection' is true"),
    ]
    for command, code, message in cases:
        with pytest.raises(OperationFailure) as failure:
            admin.command(command)
        assert (failure.value.code, failure.value.details["errmsg"]) == (code, message), command


def test_always_on_fails_the_named_commands_and_count_reports_entries(admin, collection):
    collection.insert_one({"_id": 1})
    previous = fail_command(admin, "alwaysOn", failCommands=["find"], errorCode=2)["count"]
    for _ in range(3):
        with pytest.raises(OperationFailure) as failure:
            collection.find_one()
        assert failure.value.code == 2
        assert failure.value.details["errmsg"] == "Failing command via 'failCommand' failpoint"
    assert collection.count_documents({}) == 1, "commands not named run as usual"
    assert admin.command("configureFailPoint", "failCommand", mode="off")["count"] == previous + 3
    assert collection.find_one() == {"_id": 1}


def test_times_fails_that_many_commands_then_turns_off(admin, collection):
    fail_command(admin, {"times": 2}, failCommands=["insert"], errorCode=11000)
    for index in range(2):
        with pytest.raises(OperationFailure):
            collection.insert_one({"_id": index})
    collection.insert_one({"_id": 5})
    assert [document["_id"] for document in collection.find()] == [5]


def test_skip_lets_the_first_commands_through(admin, collection):
    fail_command(admin, {"skip": 2}, failCommands=["insert"], errorCode=2)
    collection.insert_one({"_id": 1})
    collection.insert_one({"_id": 2})
    for index in range(3, 5):
        with pytest.raises(OperationFailure):
            collection.insert_one({"_id": index})
    assert collection.count_documents({}) == 2


def test_activation_probability_zero_never_fires_and_one_always_does(admin, collection):
    fail_command(admin, {"activationProbability": 0}, failCommands=["insert"], errorCode=2)
    for index in range(5):
        collection.insert_one({"_id": index})
    fail_command(admin, {"activationProbability": 1}, failCommands=["insert"], errorCode=2)
    for index in range(5, 10):
        with pytest.raises(OperationFailure):
            collection.insert_one({"_id": index})
    assert collection.count_documents({}) == 5


def test_close_connection_drops_the_socket_without_a_reply(admin, test_server, collection):
    fail_command(admin, {"times": 1}, failCommands=["find"], closeConnection=True)
    no_retries = test_server.client(retryReads=False)
    try:
        with pytest.raises(AutoReconnect):
            no_retries["fail_points"]["things"].find_one()
        assert no_retries["fail_points"]["things"].find_one() is None, "the next command runs on a new connection"
    finally:
        no_retries.close()
    fail_command(admin, {"times": 1}, failCommands=["find"], closeConnection=True)
    assert collection.find_one() is None, "a driver retrying reads retries the closed find"
    assert admin.command("configureFailPoint", "failCommand", mode="off")["count"] >= 2


def test_block_connection_delays_the_command_and_max_time_interrupts_it(admin, collection):
    collection.insert_one({"_id": 1})
    previous = fail_command(admin, "alwaysOn", failCommands=["find"], blockConnection=True, blockTimeMS=20)["count"]
    assert collection.find_one() == {"_id": 1}, "a blocked command runs once the block ends"
    fail_command(admin, "alwaysOn", failCommands=["find"], blockConnection=True, blockTimeMS=600_000)
    with pytest.raises(pymongo.errors.ExecutionTimeout) as failure:
        collection.find_one(max_time_ms=50)
    assert failure.value.code == 50
    assert admin.command("configureFailPoint", "failCommand", mode="off")["count"] == previous + 2


def test_a_blocked_command_holds_up_no_other_connection(admin, test_server, collection):
    fail_command(admin, "alwaysOn", failCommands=["find"], blockConnection=True, blockTimeMS=600_000, appName="blocked")
    blocked = test_server.client(appname="blocked")
    outcome = {}

    def blocked_find() -> None:
        try:
            # Turning the fail point off does not end a block already begun (as in mongod):
            # maxTimeMS does, after the other connection's work below had its chance.
            blocked["fail_points"]["things"].find_one(max_time_ms=10_000)
        except pymongo.errors.PyMongoError as error:
            outcome["error"] = error

    thread = threading.Thread(target=blocked_find)
    thread.start()
    for index in range(50):
        collection.insert_one({"_id": index})
        assert collection.find_one({"_id": index}) == {"_id": index}
    assert thread.is_alive(), "the blocked find is still waiting"
    admin.command("configureFailPoint", "failCommand", mode="off")
    thread.join(timeout=120)
    blocked.close()
    assert not thread.is_alive()
    assert getattr(outcome.get("error"), "code", None) == 50, outcome


def test_write_concern_error_is_added_to_write_commands_only(admin, collection):
    error = {"code": 100, "codeName": "UnsatisfiableWriteConcern", "errmsg": "Not enough data-bearing nodes"}
    fail_command(admin, "alwaysOn", failCommands=["insert", "find"], writeConcernError=error)
    reply = collection.database.command("insert", "things", documents=[{"_id": 1}])
    assert reply["n"] == 1 and reply["writeConcernError"] == error
    with pytest.raises(pymongo.errors.WriteConcernError) as failure:
        collection.insert_one({"_id": 2})
    assert failure.value.code == 100
    assert collection.find_one({"_id": 1}) == {"_id": 1}, "a read gets no write concern error"
    admin.command("configureFailPoint", "failCommand", mode="off")
    assert collection.count_documents({}) == 2, "the writes ran"


def test_error_labels_come_from_the_data(admin, collection):
    fail_command(admin, "alwaysOn", failCommands=["insert"], errorCode=112, errorLabels=["TransientTransactionError", "Custom"])
    with pytest.raises(OperationFailure) as failure:
        collection.insert_one({"_id": 1})
    assert failure.value.details["errorLabels"] == ["TransientTransactionError", "Custom"]
    fail_command(admin, "alwaysOn", failCommands=["insert"], errorCode=262)
    with pytest.raises(OperationFailure) as failure:
        collection.database.command("insert", "things", documents=[{"_id": 1}])
    assert failure.value.code == 262
    assert "errorLabels" not in failure.value.details, "no txnNumber: not a retryable write"


def test_a_node_refuses_a_transaction_number_before_the_fail_point(admin, collection):
    previous = fail_command(admin, "alwaysOn", failCommands=["insert"], errorCode=262)["count"]
    with admin.client.start_session() as session:
        with pytest.raises(OperationFailure) as failure:
            collection.database.command(SON([("insert", "things"), ("documents", [{}]), ("txnNumber", Int64(1))]), session=session)
    assert failure.value.code == 20
    assert admin.command("configureFailPoint", "failCommand", mode="off")["count"] == previous


def test_app_name_namespace_and_internal_commands_select_the_commands(admin, test_server, collection):
    other = collection.database["other"]
    other.drop()
    fail_command(admin, "alwaysOn", failCommands=["insert"], errorCode=2, appName="chosen", namespace="fail_points.things",
                 failInternalCommands=True)
    chosen = test_server.client(appname="chosen")
    try:
        with pytest.raises(OperationFailure):
            chosen["fail_points"]["things"].insert_one({"_id": 1})
        chosen["fail_points"]["other"].insert_one({"_id": 1})
        collection.insert_one({"_id": 2})
    finally:
        chosen.close()
    assert [document["_id"] for document in collection.find()] == [2]
    assert other.count_documents({}) == 1


def test_configure_fail_point_itself_is_never_failed(admin):
    fail_command(admin, "alwaysOn", failCommands=["configureFailPoint", "ping"], errorCode=2)
    with pytest.raises(OperationFailure):
        admin.command("ping")
    assert admin.command("configureFailPoint", "failCommand", mode="off")["ok"] == 1.0


def test_concurrent_inserts_fail_exactly_times_commands(admin, test_server, collection):
    threads, per_thread, times = 8, 25, 20
    fail_command(admin, {"times": times}, failCommands=["insert"], errorCode=2)
    failures = []
    lock = threading.Lock()

    def insert(worker: int) -> None:
        client = test_server.client()
        try:
            for index in range(per_thread):
                try:
                    client["fail_points"]["things"].insert_one({"_id": worker * 1000 + index})
                except OperationFailure as error:
                    assert error.code == 2
                    with lock:
                        failures.append(worker * 1000 + index)
        finally:
            client.close()

    workers = [threading.Thread(target=insert, args=(worker,)) for worker in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(failures) == times
    stored = {document["_id"] for document in collection.find()}
    expected = {worker * 1000 + index for worker in range(threads) for index in range(per_thread)} - set(failures)
    assert stored == expected


def test_a_router_honours_fail_points_and_labels_retryable_writes(tmp_path):
    cluster = Cluster(str(tmp_path), shards=1)
    process = None
    try:
        plain = cluster.client()
        with pytest.raises(OperationFailure) as failure:
            plain.admin.command("configureFailPoint", "failCommand", mode="off")
        assert failure.value.code == 59
        plain.close()
        process, uri = start_router(cluster.config_address, "--setParameter", "enableTestCommands=1")
        client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=20_000)
        things = client["fail_points"]["things"]
        fail_command(client.admin, {"times": 1}, failCommands=["insert"], errorCode=262)
        with client.start_session() as session:
            with pytest.raises(OperationFailure) as failure:
                things.database.command(SON([("insert", "things"), ("documents", [{"_id": 1}]), ("txnNumber", Int64(1))]),
                                        session=session)
        assert failure.value.details["errorLabels"] == ["RetryableWriteError"]
        fail_command(client.admin, {"times": 1}, failCommands=["insert"], errorCode=262)
        things.insert_one({"_id": 2})
        assert admin_count(client) == 2, "the driver retried the labelled write once"
        assert [document["_id"] for document in things.find()] == [2]
        client.close()
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=60)
        cluster.stop()


def admin_count(client) -> int:
    return client.admin.command("configureFailPoint", "failCommand", mode="off")["count"]
