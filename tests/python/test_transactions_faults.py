"""Transactions across failovers (issue 26, item 4), through pymongo: a bank workload of
concurrent clients moving money between accounts in two databases with with_transaction
(w:"majority" commits), while the primary is killed (SIGKILL) and restarted and then cut off
by a network partition and healed. Whatever the faults: the total never changes, no read
inside a transaction sees a transfer half done, every acknowledged commit is stored on every
member, and no transfer whose outcome the client never learned is stored twice."""

import random
import threading

import pytest
from pymongo import WriteConcern
from pymongo.client_session import TransactionOptions
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern

from conftest import ReplicaSet, wait_until
from test_replica_set_partitions import heal, isolate, writable

TEST_COMMANDS = ("--setParameter", "enableTestCommands=1")
ACCOUNTS_COUNT, INITIAL_BALANCE, WORKERS_COUNT = 12, 1000, 4
PLACES = [("failover_bank_one", "accounts"), ("failover_bank_two", "accounts")]
MAJORITY = TransactionOptions(read_concern=ReadConcern("snapshot"), write_concern=WriteConcern("majority"))


@pytest.fixture(scope="module")
def replica_set():
    running = ReplicaSet(members=3, extra_arguments=TEST_COMMANDS)
    yield running
    running.stop()


class Bank:
    """The accounts, the workers moving money and the reader summing it, with what each
    learned: transfers committed (with_transaction returned), transfers whose outcome is
    unknown (it raised), and every sum read inside a transaction."""

    def __init__(self, client) -> None:
        self.client = client
        self.place = {account: client[PLACES[account % 2][0]][PLACES[account % 2][1]] for account in range(ACCOUNTS_COUNT)}
        self.committed, self.unknown, self.sums, self.errors = [], [], [], []
        self.stop = threading.Event()
        self.threads = []

    def open(self) -> None:
        for database_name, collection_name in PLACES:
            self.client[database_name].drop_collection(collection_name)
        self.client.failover_bank_one.drop_collection("log")
        self.client.failover_bank_one.create_collection("log")
        for account in range(ACCOUNTS_COUNT):
            self.place[account].insert_one({"_id": account, "balance": INITIAL_BALANCE})
        self.threads = [threading.Thread(target=self.transfers, args=(seed,)) for seed in range(WORKERS_COUNT)]
        self.threads.append(threading.Thread(target=self.reads))
        for thread in self.threads:
            thread.start()

    def transfers(self, seed: int) -> None:
        generator, number = random.Random(seed), 0
        while not self.stop.is_set():
            source, target = generator.sample(range(ACCOUNTS_COUNT), 2)
            amount, transfer_id = generator.randint(1, 50), f"{seed}-{number}"
            number += 1

            def transfer(session):
                self.place[source].update_one({"_id": source}, {"$inc": {"balance": -amount}}, session=session)
                self.place[target].update_one({"_id": target}, {"$inc": {"balance": amount}}, session=session)
                self.client.failover_bank_one.log.insert_one({"_id": transfer_id, "amount": amount}, session=session)

            try:
                with self.client.start_session(default_transaction_options=MAJORITY) as session:
                    session.with_transaction(transfer)
                self.committed.append(transfer_id)
            except PyMongoError as error:
                self.unknown.append(transfer_id)
                self.errors.append(repr(error))

    def reads(self) -> None:
        while not self.stop.is_set():
            def read_all(session):
                return sum(
                    document["balance"]
                    for database_name, collection_name in PLACES
                    for document in self.client[database_name][collection_name].find({}, session=session)
                )

            try:
                with self.client.start_session(default_transaction_options=MAJORITY) as session:
                    self.sums.append(session.with_transaction(read_all))
            except PyMongoError:
                continue

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def progress(self) -> int:
        return len(self.committed)


def test_bank_keeps_its_total_through_kills_and_partitions(replica_set):
    with replica_set.client(retryWrites=True) as client:
        bank = Bank(client)
        bank.open()
        try:
            for _ in range(2):
                before = bank.progress()
                wait_until(lambda: bank.progress() >= before + 20, "transfers before the kill")
                victim = replica_set.wait_for_primary()
                replica_set.kill(victim)
                before = bank.progress()
                wait_until(lambda: bank.progress() >= before + 20, "transfers committed by a new primary", timeout=90)
                replica_set.restart(victim)
            victim = replica_set.wait_for_primary()
            isolate(replica_set, victim)
            wait_until(lambda: not writable(replica_set, victim), "the isolated primary stepping down", timeout=90)
            before = bank.progress()
            wait_until(lambda: bank.progress() >= before + 20, "transfers committed beside the partition", timeout=90)
            heal(replica_set)
        finally:
            bank.close()
        total = ACCOUNTS_COUNT * INITIAL_BALANCE
        assert bank.sums and all(value == total for value in bank.sums), [value for value in bank.sums if value != total][:5]
        balances = {account: bank.place[account].find_one({"_id": account})["balance"] for account in range(ACCOUNTS_COUNT)}
        assert sum(balances.values()) == total
        logged = [document["_id"] for document in client.failover_bank_one.log.find({}, {"_id": 1})]
        assert len(logged) == len(set(logged))
        assert set(bank.committed) <= set(logged), sorted(set(bank.committed) - set(logged))[:5]
        assert set(logged) <= set(bank.committed) | set(bank.unknown)
    for index in range(3):
        with replica_set.member_client(index, readPreference="secondaryPreferred") as member:
            def member_balances():
                return {document["_id"]: document["balance"] for database_name, collection_name in PLACES for document in member[database_name][collection_name].find()}

            wait_until(lambda: member_balances() == balances, f"member {index} applied every commit")


def fail_once(client, command: str, **data) -> None:
    client.admin.command("configureFailPoint", "failCommand", mode={"times": 1}, data={"failCommands": [command], **data})


@pytest.mark.parametrize(
    ("command", "data"),
    [
        ("insert", {"errorCode": 112}),
        ("update", {"closeConnection": True}),
        ("commitTransaction", {"errorCode": 91}),
        ("commitTransaction", {"closeConnection": True}),
        ("commitTransaction", {"writeConcernError": {"code": 64, "codeName": "WriteConcernFailed", "errmsg": "injected", "errInfo": {"wtimeout": True}}}),
    ],
)
def test_with_transaction_retries_injected_faults_and_commits_once(replica_set, command, data):
    """The driver's with_transaction loop under a fault injected once (failCommand): a
    transient error in a statement reruns the transaction, an unknown commit result retries the
    commit; either way the counter moves exactly once and the log has one entry."""
    primary = replica_set.wait_for_primary()
    with replica_set.client() as client, replica_set.member_client(primary) as direct:
        database = client.transactions_faults
        database.drop_collection("counter")
        database.drop_collection("log")
        database.counter.insert_one({"_id": 1, "value": 0})
        database.create_collection("log")
        attempts = []

        def increment(session):
            attempts.append(1)
            database.log.insert_one({"attempt": len(attempts)}, session=session)
            database.counter.update_one({"_id": 1}, {"$inc": {"value": 1}}, session=session)

        fail_once(direct, command, **data)
        try:
            with client.start_session(default_transaction_options=MAJORITY) as session:
                session.with_transaction(increment)
        finally:
            direct.admin.command("configureFailPoint", "failCommand", mode="off")
        assert database.counter.find_one({"_id": 1})["value"] == 1
        assert database.log.count_documents({}) == 1
        expected_attempts = 2 if command in ("insert", "update") else 1
        assert len(attempts) == expected_attempts


def test_a_prepared_transaction_survives_the_failover_of_its_primary(replica_set):
    """A transaction prepared (`prepareTransaction`, as a two-phase commit's coordinator sends
    it) on the primary, which is then killed: the new primary prepares it again from its
    replicated record before it takes writes, so a write of the same document outside the
    transaction still waits for the decision, and the commit sent to the new primary writes the
    transaction once, on every member."""
    victim = replica_set.wait_for_primary()
    with replica_set.client(retryWrites=False) as client:
        items = client.prepared_failover.items
        items.drop()
        items.insert_many([{"_id": 1, "n": 0}, {"_id": 2, "n": 0}], session=None)
        wait_until(lambda: all(member_count(replica_set, index) == 2 for index in range(3)), "every member holds the documents")
        with client.start_session() as session:
            session.start_transaction(write_concern=WriteConcern("majority"))
            items.update_one({"_id": 1}, {"$set": {"n": 10}}, session=session)
            items.insert_one({"_id": 3, "n": 30}, session=session)
            prepared = client.admin.command("prepareTransaction", session=session)
            assert "prepareTimestamp" in prepared
            replica_set.kill(victim)
            replica_set.wait_for_primary()
            # The collection is held by the prepared transaction: a plain write waits for the
            # decision, then runs after it.
            waiting = threading.Thread(target=lambda: items.update_one({"_id": 2}, {"$set": {"n": -1}}))
            waiting.start()
            waiting.join(timeout=1.5)
            assert waiting.is_alive(), "a write of the prepared transaction's collection waits for its decision"
            session.commit_transaction()
            waiting.join(timeout=60)
            assert not waiting.is_alive()
        replica_set.restart(victim)
        expected = {1: 10, 2: -1, 3: 30}
        for index in range(3):
            wait_until(lambda: member_documents(replica_set, index) == expected, f"member {index} holds the committed transaction once")


def member_count(replica_set, index):
    with replica_set.member_client(index) as client:
        return client.prepared_failover.items.count_documents({})


def member_documents(replica_set, index):
    try:
        with replica_set.member_client(index, readPreference="secondaryPreferred") as client:
            return {document["_id"]: document["n"] for document in client.prepared_failover.items.find({})}
    except PyMongoError:
        return None


def test_reads_of_a_prepared_transactions_collection_wait_for_its_decision(replica_set):
    """MongoDB's prepare conflicts: once a transaction is prepared, a read outside transactions
    of a document it wrote (updated, or inserted) waits for the decision and then sees the
    outcome (never the data from before a commit that has been decided), and so does a scan
    of its collection; maxTimeMS ends such a wait with MaxTimeMSExpired; a read of another
    document by `_id`, or of another collection, does not wait."""
    with replica_set.client(retryWrites=False) as client:
        database = client.prepare_conflicts
        database.items.drop()
        database.others.drop()
        database.items.insert_many([{"_id": 1, "n": 0}, {"_id": 2, "n": 0}])
        database.others.insert_one({"_id": 1})
        with client.start_session() as session:
            session.start_transaction(write_concern=WriteConcern("majority"))
            database.items.update_one({"_id": 1}, {"$set": {"n": 10}}, session=session)
            database.items.insert_one({"_id": 3, "n": 30}, session=session)
            client.admin.command("prepareTransaction", session=session)
            assert database.others.find_one({"_id": 1}) == {"_id": 1}
            assert database.items.find_one({"_id": 2}, max_time_ms=300) == {"_id": 2, "n": 0}, "a document it did not write"
            for written in (1, 3):
                with pytest.raises(PyMongoError) as raised:
                    database.items.find_one({"_id": written}, max_time_ms=300)
                assert getattr(raised.value, "code", None) == 50, written
            seen = {}
            readers = [
                threading.Thread(target=lambda: seen.update(by_id=database.items.find_one({"_id": 1}))),
                threading.Thread(target=lambda: seen.update(scanned=sorted(document["_id"] for document in database.items.find({})))),
                threading.Thread(target=lambda: seen.update(counted=database.items.count_documents({"n": {"$gt": 5}}))),
            ]
            for reader in readers:
                reader.start()
            for reader in readers:
                reader.join(timeout=1.0)
            assert all(reader.is_alive() for reader in readers), "reads of the prepared collection wait for the decision"
            session.commit_transaction()
            for reader in readers:
                reader.join(timeout=60)
            assert not any(reader.is_alive() for reader in readers)
        assert seen == {"by_id": {"_id": 1, "n": 10}, "scanned": [1, 2, 3], "counted": 2}


def test_a_member_stopped_with_a_prepared_transaction_exits_cleanly_and_prepares_it_again():
    """SIGTERM to a primary holding a prepared transaction: its thread lets go of the engine
    before the process exits (exit code 0, where a thread left inside RocksDB at exit could
    crash it), the record stays, and the restarted member prepares the transaction again, so
    the commit sent after the restart writes it."""
    single = ReplicaSet(members=1)
    try:
        single.wait_for_primary()
        with single.client(retryWrites=False) as client:
            items = client.prepared_shutdown.items
            items.insert_many([{"_id": 1, "n": 0}])
            session = client.start_session()
            session.start_transaction(write_concern=WriteConcern("majority"))
            items.update_one({"_id": 1}, {"$set": {"n": 7}}, session=session)
            client.admin.command("prepareTransaction", session=session)
            member = single.servers[0]
            member.process.terminate()
            assert member.process.wait(timeout=60) == 0, "a member stopped with a prepared transaction exits cleanly"
            single.restart(0)
            single.wait_for_primary()
            session.commit_transaction()
            session.end_session()
            assert items.find_one({"_id": 1}) == {"_id": 1, "n": 7}
    finally:
        single.stop()
