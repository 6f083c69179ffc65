"""Multi-document transactions on a replica set (issue 26, item 1), through pymongo: commit and
abort, snapshot isolation (a transaction reads one snapshot and its own writes, others see
nothing before the commit), write conflicts at the write with the TransientTransactionError
label, retried commits, MongoDB's refusals, the lifetime limit and killSessions, and a bank
workload of concurrent clients moving money between accounts in several collections whose
total never changes."""

import random
import threading
import time

import pytest
from bson import Int64
from bson.son import SON
from pymongo import ReadPreference, WriteConcern
from pymongo.errors import OperationFailure, PyMongoError
from pymongo.read_concern import ReadConcern

from conftest import wait_until


def test_with_transaction_commits_every_write_at_once(replica_set):
    with replica_set.client() as client:
        database = client.transactions_commit
        database.drop_collection("left")
        database.drop_collection("right")
        database.left.insert_one({"_id": 1, "value": 10})
        database.right.insert_one({"_id": 1, "value": 0})

        def transfer(session):
            database.left.update_one({"_id": 1}, {"$inc": {"value": -3}}, session=session)
            database.right.update_one({"_id": 1}, {"$inc": {"value": 3}}, session=session)
            database.right.insert_one({"_id": 2, "note": "inserted"}, session=session)
            # Inside: the transaction's own writes, by _id, by scan and by index.
            assert database.left.find_one({"_id": 1}, session=session)["value"] == 7
            assert sorted(document["_id"] for document in database.right.find({}, session=session)) == [1, 2]
            assert database.right.count_documents({"note": "inserted"}, session=session) == 1
            # Outside: nothing yet.
            assert database.left.find_one({"_id": 1})["value"] == 10
            assert database.right.find_one({"_id": 2}) is None

        with client.start_session() as session:
            session.with_transaction(transfer)
        assert database.left.find_one({"_id": 1})["value"] == 7
        assert database.right.find_one({"_id": 1})["value"] == 3
        assert database.right.find_one({"_id": 2})["note"] == "inserted"


def test_abort_discards_every_write(replica_set):
    with replica_set.client() as client:
        database = client.transactions_abort
        database.drop_collection("items")
        database.items.insert_many([{"_id": index, "kept": True} for index in range(5)])
        with client.start_session() as session:
            session.start_transaction()
            database.items.delete_many({"_id": {"$lt": 3}}, session=session)
            database.items.insert_one({"_id": 99}, session=session)
            database.items.update_one({"_id": 4}, {"$set": {"kept": False}}, session=session)
            assert database.items.count_documents({}, session=session) == 3
            session.abort_transaction()
        assert sorted(document["_id"] for document in database.items.find()) == [0, 1, 2, 3, 4]
        assert database.items.find_one({"_id": 4})["kept"] is True


def test_a_transaction_reads_its_snapshot(replica_set):
    with replica_set.client() as client:
        database = client.transactions_snapshot
        database.drop_collection("items")
        database.items.insert_one({"_id": 1, "value": "before"})
        with client.start_session() as session:
            session.start_transaction()
            assert database.items.find_one({"_id": 1}, session=session)["value"] == "before"
            # Committed by another client after the transaction's first read.
            database.items.update_one({"_id": 1}, {"$set": {"value": "after"}})
            database.items.insert_one({"_id": 2})
            assert database.items.find_one({"_id": 1}, session=session)["value"] == "before"
            assert [document["_id"] for document in database.items.find({}, session=session)] == [1]
            session.commit_transaction()
        assert database.items.count_documents({}) == 2


def test_a_write_conflict_is_reported_at_the_write_with_the_transient_label(replica_set):
    with replica_set.client() as client:
        database = client.transactions_conflict
        database.drop_collection("items")
        database.items.insert_one({"_id": 1, "value": 0})
        with client.start_session() as first, client.start_session() as second:
            first.start_transaction()
            second.start_transaction()
            database.items.update_one({"_id": 1}, {"$inc": {"value": 1}}, session=first)
            with pytest.raises(OperationFailure) as raised:
                database.items.update_one({"_id": 1}, {"$inc": {"value": 10}}, session=second)
            assert raised.value.code == 112
            assert raised.value.has_error_label("TransientTransactionError")
            # The failed statement aborted the second transaction.
            with pytest.raises(OperationFailure) as raised:
                second.commit_transaction()
            assert raised.value.code == 251
            first.commit_transaction()
        assert database.items.find_one({"_id": 1})["value"] == 1

        # A write committed outside any transaction after the snapshot conflicts too.
        with client.start_session() as session:
            session.start_transaction()
            database.items.find_one({"_id": 1}, session=session)
            database.items.update_one({"_id": 1}, {"$set": {"value": 5}})
            with pytest.raises(OperationFailure) as raised:
                database.items.update_one({"_id": 1}, {"$inc": {"value": 1}}, session=session)
            assert raised.value.code == 112 and raised.value.has_error_label("TransientTransactionError")
        assert database.items.find_one({"_id": 1})["value"] == 5


def test_duplicate_keys_inside_a_transaction(replica_set):
    with replica_set.client() as client:
        database = client.transactions_unique
        database.drop_collection("users")
        database.users.create_index("email", unique=True)
        database.users.insert_one({"_id": 1, "email": "a@example.com"})
        with client.start_session() as session:
            session.start_transaction()
            database.users.delete_one({"_id": 1}, session=session)
            # The key its own delete freed may be taken again inside the transaction.
            database.users.insert_one({"_id": 2, "email": "a@example.com"}, session=session)
            with pytest.raises(PyMongoError) as raised:
                database.users.insert_one({"_id": 3, "email": "a@example.com"}, session=session)
            assert "E11000" in str(raised.value)
        # The duplicate aborted the transaction: nothing of it was written.
        assert [document["_id"] for document in database.users.find()] == [1]


def test_commit_is_idempotent_and_refusals_match_mongod(replica_set):
    with replica_set.client() as client:
        database = client.transactions_refusals
        database.drop_collection("items")
        database.create_collection("items")
        with client.start_session() as session:
            lsid = session.session_id
            number = Int64(7)
            start = [("insert", "items"), ("documents", [{"_id": 1}]), ("lsid", lsid), ("txnNumber", number),
                     ("startTransaction", True), ("autocommit", False)]
            database.command(SON(start))
            commit = [("commitTransaction", 1), ("lsid", lsid), ("txnNumber", number), ("autocommit", False)]
            assert client.admin.command(SON(commit))["ok"] == 1
            assert client.admin.command(SON(commit))["ok"] == 1
            abort = [("abortTransaction", 1), ("lsid", lsid), ("txnNumber", number), ("autocommit", False)]
            with pytest.raises(OperationFailure) as raised:
                client.admin.command(SON(abort))
            assert raised.value.code == 256
            # An older transaction number is refused; so is an unknown one.
            old = [("find", "items"), ("lsid", lsid), ("txnNumber", Int64(3)), ("startTransaction", True), ("autocommit", False)]
            with pytest.raises(OperationFailure) as raised:
                database.command(SON(old))
            assert raised.value.code == 225
            unknown = [("find", "items"), ("lsid", lsid), ("txnNumber", Int64(9)), ("autocommit", False)]
            with pytest.raises(OperationFailure) as raised:
                database.command(SON(unknown))
            assert raised.value.code == 251 and raised.value.has_error_label("TransientTransactionError")
            # Commands mongod does not run in a transaction, and write concerns on statements.
            count = [("count", "items"), ("lsid", lsid), ("txnNumber", Int64(10)), ("startTransaction", True), ("autocommit", False)]
            with pytest.raises(OperationFailure) as raised:
                database.command(SON(count))
            assert raised.value.code == 263
            concern = [("insert", "items"), ("documents", [{"_id": 5}]), ("lsid", lsid), ("txnNumber", Int64(11)),
                       ("startTransaction", True), ("autocommit", False), ("writeConcern", {"w": 1})]
            with pytest.raises(OperationFailure) as raised:
                database.command(SON(concern))
            assert raised.value.code == 72
            with pytest.raises(OperationFailure) as raised:
                database.command(SON([("find", "items"), ("lsid", lsid), ("txnNumber", Int64(12)), ("autocommit", True)]))
            assert raised.value.code == 72
            for number, stage in ((Int64(13), {"$out": "copy"}), (Int64(14), {"$merge": {"into": "copy"}})):
                writing = [("aggregate", "items"), ("pipeline", [stage]), ("cursor", {}), ("lsid", lsid), ("txnNumber", number),
                           ("startTransaction", True), ("autocommit", False)]
                with pytest.raises(OperationFailure) as raised:
                    database.command(SON(writing))
                assert raised.value.code == 263, raised.value.details
        assert [document["_id"] for document in database.items.find()] == [1]


def test_lifetime_limit_and_kill_sessions_abort_open_transactions(replica_set):
    with replica_set.client() as client:
        database = client.transactions_lifetime
        database.drop_collection("items")
        database.create_collection("items")
        client.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=1)
        try:
            with client.start_session() as session:
                session.start_transaction()
                database.items.insert_one({"_id": 1}, session=session)
                time.sleep(2.5)
                with pytest.raises(OperationFailure) as raised:
                    session.commit_transaction()
                assert raised.value.code == 251
        finally:
            client.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=60)
        with client.start_session() as session:
            session.start_transaction()
            database.items.insert_one({"_id": 2}, session=session)
            client.admin.command("killSessions", [session.session_id])
            with pytest.raises(OperationFailure) as raised:
                session.commit_transaction()
            assert raised.value.code == 251
        assert database.items.count_documents({}) == 0


def test_current_op_lists_open_transactions_between_statements(replica_set):
    with replica_set.client() as client:
        database = client.transactions_current_op
        database.drop_collection("items")
        database.create_collection("items")
        with client.start_session() as session:
            session_id = session.session_id["id"]
            session.start_transaction()
            database.items.insert_one({"_id": 1}, session=session)
            database.items.insert_one({"_id": 2}, session=session)
            time.sleep(0.2)
            listed = client.admin.command(SON([("currentOp", 1), ("lsid.id", session_id)]))["inprog"]
            assert len(listed) == 1, listed
            idle = listed[0]
            assert idle["type"] == "idleSession" and idle["active"] is False and idle["desc"] == "inactive transaction"
            transaction = idle["transaction"]
            assert transaction["parameters"]["autocommit"] is False
            assert transaction["numStatements"] == 2
            assert transaction["timeOpenMicros"] >= 200_000
            assert transaction["timeOpenMicros"] >= transaction["timeActiveMicros"] + transaction["timeInactiveMicros"] - 1
            assert transaction["timeInactiveMicros"] >= 200_000
            assert transaction["expiryTime"] > transaction["startWallClockTime"]
            assert client.admin.command(SON([("currentOp", 1), ("lsid.id", session_id), ("idleSessions", False)]))["inprog"] == []
            session.commit_transaction()
        assert client.admin.command(SON([("currentOp", 1), ("type", "idleSession"), ("lsid.id", session_id)]))["inprog"] == []


def test_bank_transfers_keep_the_total_under_concurrent_clients(replica_set):
    """Eight clients move random amounts between 20 accounts spread over three collections of
    two databases, through with_transaction (which retries write conflicts). Meanwhile a
    reader sums every account inside a transaction: each sum is the initial total, so no
    transaction is seen half done; afterwards the total is exact and every committed transfer
    is logged exactly once."""
    accounts_count, initial, threads_count, transfers_per_thread = 20, 1000, 8, 25
    places = [("bank_one", "accounts"), ("bank_one", "savings"), ("bank_two", "accounts")]
    with replica_set.client() as client:
        for database_name, collection_name in places:
            client[database_name].drop_collection(collection_name)
        client.bank_one.drop_collection("log")
        client.bank_one.create_collection("log")
        account_place = {}
        for account in range(accounts_count):
            database_name, collection_name = places[account % len(places)]
            account_place[account] = client[database_name][collection_name]
            account_place[account].insert_one({"_id": account, "balance": initial})
        total = accounts_count * initial
        errors, sums, committed = [], [], []
        stop = threading.Event()

        def transfer_worker(seed: int) -> None:
            generator = random.Random(seed)
            try:
                with client.start_session() as session:
                    for number in range(transfers_per_thread):
                        source, target = generator.sample(range(accounts_count), 2)
                        amount = generator.randint(1, 50)
                        transfer_id = f"{seed}-{number}"

                        def transfer(session):
                            account_place[source].update_one({"_id": source}, {"$inc": {"balance": -amount}}, session=session)
                            account_place[target].update_one({"_id": target}, {"$inc": {"balance": amount}}, session=session)
                            client.bank_one.log.insert_one({"_id": transfer_id, "amount": amount}, session=session)

                        session.with_transaction(transfer)
                        committed.append(transfer_id)
            except Exception as error:  # noqa: BLE001 - reported below
                errors.append(repr(error))

        def sum_worker() -> None:
            try:
                with client.start_session() as session:
                    while not stop.is_set():
                        def read_all(session):
                            return sum(
                                document["balance"]
                                for database_name, collection_name in places
                                for document in client[database_name][collection_name].find({}, session=session)
                            )
                        sums.append(session.with_transaction(read_all))
            except Exception as error:  # noqa: BLE001 - reported below
                errors.append(repr(error))

        reader = threading.Thread(target=sum_worker)
        reader.start()
        workers = [threading.Thread(target=transfer_worker, args=(seed,)) for seed in range(threads_count)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        stop.set()
        reader.join()
        assert errors == []
        assert sums and all(value == total for value in sums), sums
        balances = sum(document["balance"] for database_name, collection_name in places for document in client[database_name][collection_name].find())
        assert balances == total
        assert len(committed) == threads_count * transfers_per_thread
        assert sorted(document["_id"] for document in client.bank_one.log.find()) == sorted(committed)
        # Every member applied the same commits: its balances sum to the total and match the primary's.
        expected = {account: account_place[account].find_one({"_id": account})["balance"] for account in range(accounts_count)}
        for index in range(3):
            with replica_set.member_client(index, readPreference="secondaryPreferred") as member:
                def member_balances():
                    return {
                        document["_id"]: document["balance"]
                        for database_name, collection_name in places
                        for document in member[database_name][collection_name].find()
                    }
                wait_until(lambda: member_balances() == expected, f"member {index} applied every commit")


def test_a_transaction_past_sixteen_mebibytes_is_refused_and_aborted(replica_set):
    with replica_set.client() as client:
        database = client.transactions_too_large
        database.drop_collection("items")
        database.create_collection("items")
        payload = "x" * (1024 * 1024)
        with client.start_session() as session:
            session.start_transaction()
            with pytest.raises(OperationFailure) as raised:
                for number in range(20):
                    database.items.insert_one({"_id": number, "payload": payload}, session=session)
            assert raised.value.code == 334, raised.value.details
            assert database.items.count_documents({}) == 0
            with pytest.raises(OperationFailure) as raised:
                session.commit_transaction()
            assert raised.value.code == 251
        assert database.items.count_documents({}) == 0


def test_cursors_of_a_transaction_page_through_its_view(replica_set):
    """getMore inside a transaction reads the same view: scans, index scans, covered index
    scans and sorts, in batches of 1 to 3, over the snapshot with the transaction's inserts,
    update and delete laid over it, and without a concurrent outside insert."""
    with replica_set.client() as client:
        database = client.transactions_get_more
        database.drop_collection("items")
        database.items.insert_many([{"_id": number, "k": number % 3} for number in range(7)])
        database.items.create_index("k")
        with client.start_session() as session:
            session.start_transaction()
            database.items.insert_many([{"_id": 100 + number, "k": number % 3} for number in range(4)], session=session)
            database.items.delete_one({"_id": 2}, session=session)
            database.items.update_one({"_id": 3}, {"$set": {"k": 9}}, session=session)
            database.items.insert_one({"_id": 50, "k": 1})
            seen = [0, 1, 3, 4, 5, 6, 100, 101, 102, 103]
            assert sorted(document["_id"] for document in database.items.find({}, session=session, batch_size=2)) == seen
            assert sorted(document["_id"] for document in database.items.find({"k": {"$gte": 0}}, session=session, batch_size=2).hint("k_1")) == seen
            covered = database.items.find({"k": 1}, {"_id": 1, "k": 1}, session=session, batch_size=1).hint("k_1")
            assert sorted(document["_id"] for document in covered) == [1, 4, 101]
            by_key = [document["k"] for document in database.items.find({}, session=session, batch_size=3).sort("k", -1)]
            assert by_key == [9, 2, 2, 1, 1, 1, 0, 0, 0, 0]
            session.commit_transaction()
        assert sorted(document["_id"] for document in database.items.find()) == sorted(seen + [50])
