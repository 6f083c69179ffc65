"""Retryable writes on a replica set (issue 23, item 4), through pymongo: a write command sent
again with the same lsid and txnNumber reports the first execution's result and is applied
once (insert, update, delete, findAndModify, bulkWrite), older transaction numbers are
refused, multi-document statements are refused, concurrent clients that retry every write
keep an exact counter, and a retry sent to the new primary after a kill -9 of the old one is
applied once."""

import threading

import pytest
from bson import Int64
from bson.son import SON
from pymongo.errors import OperationFailure, PyMongoError

from conftest import wait_until


def send_twice(database, session, command):
    """Sends `command` twice under one session and transaction number: the first attempt and
    a driver's retry of it."""
    first = database.command(SON(command), session=session)
    second = database.command(SON(command), session=session)
    return first, second


def test_the_oplog_names_the_session_transaction_number_and_statement(replica_set):
    with replica_set.client(retryWrites=False) as client:
        database = client.retryable_oplog
        database.drop_collection("c")
        database.c.insert_one({"_id": 0})
        with client.start_session() as session:
            lsid_id = session.session_id["id"]
            database.command(SON([("insert", "c"), ("documents", [{"_id": 1}, {"_id": 2}]), ("txnNumber", Int64(4))]), session=session)
            database.command(SON([("update", "c"), ("updates", [{"q": {"_id": 1}, "u": {"$set": {"x": 1}}}]), ("txnNumber", Int64(5))]), session=session)
            database.command(SON([("delete", "c"), ("deletes", [{"q": {"_id": 2}, "limit": 1}]), ("txnNumber", Int64(6))]), session=session)
        entries = list(client.local["oplog.rs"].find({"ns": "retryable_oplog.c"}))
        assert [entry["op"] for entry in entries] == ["i", "i", "i", "u", "d"]
        plain, *retryable = entries
        assert "lsid" not in plain and "txnNumber" not in plain and "stmtId" not in plain
        assert [(entry["lsid"]["id"], entry["txnNumber"], entry["stmtId"]) for entry in retryable] == [
            (lsid_id, 4, 0), (lsid_id, 4, 1), (lsid_id, 5, 0), (lsid_id, 6, 0)]


def test_every_write_command_is_applied_once_and_answers_as_first(replica_set):
    with replica_set.client(retryWrites=False) as client:
        database = client.retryable_once
        with client.start_session() as session:
            first, second = send_twice(database, session, [("insert", "c"), ("documents", [{"_id": 1, "x": 0}, {"_id": 2, "x": 0}]), ("txnNumber", Int64(1))])
            assert first["n"] == 2 and "retriedStmtIds" not in first
            assert second["n"] == 2 and second["retriedStmtIds"] == [0, 1] and "writeErrors" not in second

            update = [("update", "c"), ("updates", [{"q": {"_id": 1}, "u": {"$inc": {"x": 1}}}, {"q": {"_id": 3}, "u": {"$inc": {"x": 5}}, "upsert": True}]), ("txnNumber", Int64(2))]
            first, second = send_twice(database, session, update)
            assert (first["n"], first["nModified"], first["upserted"]) == (2, 1, [{"index": 1, "_id": 3}])
            assert (second["n"], second["nModified"], second["upserted"]) == (2, 1, [{"index": 1, "_id": 3}])
            assert second["retriedStmtIds"] == [0, 1]

            modify = [("findAndModify", "c"), ("query", {"_id": 2}), ("update", {"$inc": {"x": 10}}), ("new", True), ("txnNumber", Int64(3))]
            first, second = send_twice(database, session, modify)
            assert first["value"] == {"_id": 2, "x": 10} and second["value"] == {"_id": 2, "x": 10}
            assert second["lastErrorObject"]["updatedExisting"] is True and second["retriedStmtIds"] == [0]

            remove = [("findAndModify", "c"), ("query", {"_id": 3}), ("remove", True), ("txnNumber", Int64(4))]
            first, second = send_twice(database, session, remove)
            assert first["value"] == {"_id": 3, "x": 5} and second["value"] == {"_id": 3, "x": 5}

            database.c.insert_one({"_id": 4})
            delete = [("delete", "c"), ("deletes", [{"q": {"_id": 4}, "limit": 1}]), ("txnNumber", Int64(5))]
            first, second = send_twice(database, session, delete)
            assert first["n"] == 1 and second["n"] == 1 and second["retriedStmtIds"] == [0]
            # A document inserted again after the delete is not deleted by its retry.
            database.c.insert_one({"_id": 4})
            third = database.command(SON(delete), session=session)
            assert third["n"] == 1 and database.c.count_documents({"_id": 4}) == 1

        stored = {document["_id"]: document.get("x") for document in database.c.find()}
        assert stored == {1: 1, 2: 10, 4: None}


def test_older_numbers_and_multi_statements_are_refused(replica_set):
    with replica_set.client(retryWrites=False) as client:
        database = client.retryable_refusals
        with client.start_session() as session:
            database.command(SON([("insert", "c"), ("documents", [{"_id": 1}]), ("txnNumber", Int64(7))]), session=session)
            with pytest.raises(OperationFailure) as refused:
                database.command(SON([("insert", "c"), ("documents", [{"_id": 2}]), ("txnNumber", Int64(6))]), session=session)
            assert refused.value.code == 225 and refused.value.details["codeName"] == "TransactionTooOld"
            reply = database.command(SON([("update", "c"), ("updates", [{"q": {}, "u": {"$set": {"y": 1}}, "multi": True}]), ("txnNumber", Int64(8))]), session=session)
            assert reply["n"] == 0 and reply["writeErrors"][0]["code"] == 72
            reply = database.command(SON([("delete", "c"), ("deletes", [{"q": {}, "limit": 0}]), ("txnNumber", Int64(9))]), session=session)
            assert reply["n"] == 0 and reply["writeErrors"][0]["code"] == 72
            with pytest.raises(OperationFailure) as refused:
                database.command(SON([("insert", "c"), ("documents", [{"_id": 3}]), ("txnNumber", 10)]), session=session)
            assert refused.value.code == 14
        assert database.c.count_documents({}) == 1


def test_concurrent_clients_retrying_every_write_keep_an_exact_count(replica_set):
    threads_count, rounds = 6, 25
    errors, retried_replies, retried_lock = [], [], threading.Lock()
    with replica_set.client(retryWrites=False) as client:
        database = client.retryable_concurrent
        database.counters.insert_one({"_id": "total", "value": 0})

        def work(thread: int) -> None:
            try:
                with client.start_session() as session:
                    # pymongo gives a session its server session (the lsid) on first use; two
                    # threads using it first at once would each get one, and the two "retries"
                    # would be two sessions' writes. Take the lsid before the threads share it.
                    assert session.session_id["id"]
                    for number in range(1, rounds + 1):
                        command = [
                            ("update", "counters"),
                            ("updates", [{"q": {"_id": "total"}, "u": {"$inc": {"value": 1}}}]),
                            ("txnNumber", Int64(number)),
                        ]
                        # Every write is sent twice at once, from two threads (as a driver
                        # retries on a new connection while the first attempt still runs).
                        replies = []

                        def send_retry():
                            try:
                                replies.append(database.command(SON(command), session=session))
                            except Exception as error:  # noqa: BLE001 - reported below
                                errors.append(f"the concurrent retry of {number}: {error!r}")

                        retry = threading.Thread(target=send_retry)
                        retry.start()
                        replies.append(database.command(SON(command), session=session))
                        retry.join()
                        # Both answer the one execution; which of them says it was a retry is
                        # counted (the exactly-once check is the counter).
                        assert [reply["nModified"] for reply in replies] == [1, 1], replies
                        with retried_lock:
                            retried_replies.append(sum("retriedStmtIds" in reply for reply in replies))
                        database.log.insert_one({"thread": thread, "number": number}, session=session)
            except Exception as error:  # noqa: BLE001 - reported below
                errors.append(repr(error))

        workers = [threading.Thread(target=work, args=(thread,)) for thread in range(threads_count)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert errors == []
        assert database.counters.find_one({"_id": "total"})["value"] == threads_count * rounds
        assert retried_replies == [1] * (threads_count * rounds), "one reply of each pair says it was a retry"
        assert database.log.count_documents({}) == threads_count * rounds


def test_pymongo_retries_across_a_failover_and_each_write_lands_once(replica_set):
    """Last in the module: it kills the primary (and restarts it)."""
    with replica_set.client(retryWrites=True) as client:
        database = client.retryable_failover
        with client.start_session() as session:
            command = [("update", "c"), ("updates", [{"q": {"_id": "n"}, "u": {"$inc": {"value": 1}}, "upsert": True}]), ("txnNumber", Int64(1))]
            first = database.command(SON(command), session=session)
            assert first["n"] == 1
            victim = replica_set.wait_for_primary()
            replica_set.kill(victim)
            new_primary = replica_set.wait_for_primary()
            assert new_primary != victim

            def retried():
                try:
                    return database.command(SON(command), session=session)
                except PyMongoError:
                    return None

            wait_until(lambda: retried() is not None, "the retry answered by the new primary", timeout=60)
            second = database.command(SON(command), session=session)
            assert second["n"] == 1 and second.get("upserted") == first.get("upserted") and second["retriedStmtIds"] == [0]
            assert database.c.find_one({"_id": "n"})["value"] == 1
            # pymongo's own retryable writes (retryWrites=True) through the failover: each lands once.
            for value in range(20):
                database.items.insert_one({"_id": value})
            replica_set.restart(victim)
            assert database.items.count_documents({}) == 20
