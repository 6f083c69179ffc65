"""Transactions through the router (issue 26, item 3), through pymongo: a cluster whose two
shards are replica sets (one member each), a collection of accounts sharded over both. A
transaction that touches one shard commits there; one that writes on both commits through the
two-phase commit the first participant coordinates. Many clients move amounts between
accounts with the driver's `with_transaction`; every account ends exactly as the model of the
committed transfers says, and the total never changes."""

import random
import socket
import struct
import tempfile
import threading
import time
import uuid

import bson
import pymongo
import pytest
from bson import Binary, Int64
from pymongo.errors import OperationFailure
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from conftest import Cluster, ReplicaSet, start_router

ACCOUNTS = 40
INITIAL_BALANCE = 100


def two_shard_bank(names, shard_arguments=()):
    """A cluster (config server and router) with two one-member replica-set shards named
    `names`, `bank.accounts` sharded over them (the first half of the ids on the first); yields
    the cluster, its `shards` attribute mapping each name to its replica set."""
    directory = tempfile.TemporaryDirectory(prefix="myriad-pytest-cluster-")
    cluster = Cluster(directory.name, shards=1)
    cluster.shards = {name: ReplicaSet(members=1, name=name, extra_arguments=("--shardsvr", *shard_arguments)) for name in names}
    try:
        with cluster.client() as client:
            for shard in cluster.shards.values():
                client.admin.command("addShard", f"{shard.name}/{shard.hosts()}")
            client.admin.command("enableSharding", "bank", primaryShard=names[0])
            client.admin.command("shardCollection", "bank.accounts", key={"_id": 1})
            client.admin.command("split", "bank.accounts", middle={"_id": ACCOUNTS // 2})
            client.admin.command("moveChunk", "bank.accounts", find={"_id": ACCOUNTS // 2}, to=names[1], _waitForDelete=True)
        yield cluster
    finally:
        for shard in cluster.shards.values():
            shard.stop()
        cluster.stop()
        directory.cleanup()


@pytest.fixture(scope="module")
def bank():
    yield from two_shard_bank(("txa", "txb"))


def reset(client):
    accounts = client.bank.accounts
    accounts.delete_many({})
    accounts.insert_many([{"_id": number, "balance": INITIAL_BALANCE} for number in range(ACCOUNTS)])
    return accounts


def transfer(session, accounts, source, target, amount):
    accounts.update_one({"_id": source}, {"$inc": {"balance": -amount}}, session=session)
    accounts.update_one({"_id": target}, {"$inc": {"balance": amount}}, session=session)


def test_a_single_shard_transaction_commits_and_aborts_through_the_router(bank):
    with bank.client() as client:
        accounts = reset(client)
        with client.start_session() as session:
            session.with_transaction(lambda session: transfer(session, accounts, 1, 2, 30))
        assert accounts.find_one({"_id": 1})["balance"] == 70 and accounts.find_one({"_id": 2})["balance"] == 130

        with client.start_session() as session:
            session.start_transaction()
            transfer(session, accounts, 3, 4, 50)
            # Inside, the transaction sees its own writes; outside, nobody does.
            assert accounts.find_one({"_id": 3}, session=session)["balance"] == 50
            assert accounts.find_one({"_id": 3})["balance"] == INITIAL_BALANCE
            session.abort_transaction()
        assert accounts.find_one({"_id": 3})["balance"] == INITIAL_BALANCE


def test_a_transaction_writing_on_two_shards_commits_on_both_or_neither(bank):
    source, target = 1, ACCOUNTS - 1  # one on each shard
    with bank.client() as client:
        accounts = reset(client)
        with client.start_session() as session:
            session.with_transaction(lambda session: transfer(session, accounts, source, target, 25))
        assert accounts.find_one({"_id": source})["balance"] == 75
        assert accounts.find_one({"_id": target})["balance"] == 125

        # A write error on the second shard aborts the transaction on both.
        with client.start_session() as session:
            session.start_transaction()
            accounts.update_one({"_id": source}, {"$inc": {"balance": -10}}, session=session)
            with pytest.raises(OperationFailure):
                accounts.insert_one({"_id": target, "balance": 0}, session=session)
            with pytest.raises(OperationFailure) as aborted:
                session.commit_transaction()
            assert aborted.value.code == 251, aborted.value.details
        assert accounts.find_one({"_id": source})["balance"] == 75


def test_reads_in_a_transaction_span_both_shards_and_its_own_writes(bank):
    with bank.client() as client:
        accounts = reset(client)
        with client.start_session() as session:
            with session.start_transaction(read_concern=ReadConcern("snapshot"), write_concern=WriteConcern("majority")):
                transfer(session, accounts, 0, ACCOUNTS - 1, 40)
                balances = {document["_id"]: document["balance"] for document in accounts.find({}, session=session)}
                assert len(balances) == ACCOUNTS and sum(balances.values()) == ACCOUNTS * INITIAL_BALANCE
                assert balances[0] == 60 and balances[ACCOUNTS - 1] == 140
                assert accounts.count_documents({"balance": {"$gt": INITIAL_BALANCE}}, session=session) == 1
        assert accounts.find_one({"_id": ACCOUNTS - 1})["balance"] == 140


def test_concurrent_transfers_keep_every_balance_as_the_model_says(bank):
    """Six clients, each with its own sessions, move random amounts between random accounts
    (half of the transfers cross the shards); a transfer counts in the model only once its
    `with_transaction` returned. Write conflicts are retried by the driver's helper."""
    with bank.client() as client:
        reset(client)
    model = [INITIAL_BALANCE] * ACCOUNTS
    model_lock = threading.Lock()
    failures = []
    transfers_per_client = 25

    def run(seed):
        generator = random.Random(seed)
        try:
            with bank.client() as client:
                accounts = client.bank.accounts
                for _ in range(transfers_per_client):
                    source, target = generator.sample(range(ACCOUNTS), 2)
                    amount = generator.randint(1, 20)
                    with client.start_session() as session:
                        session.with_transaction(lambda session: transfer(session, accounts, source, target, amount))
                    with model_lock:
                        model[source] -= amount
                        model[target] += amount
        except Exception as error:  # reported below with its cause
            failures.append(repr(error))

    threads = [threading.Thread(target=run, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not failures, failures[:3]
    with bank.client() as client:
        stored = {document["_id"]: document["balance"] for document in client.bank.accounts.find({})}
    assert stored == dict(enumerate(model))
    assert sum(stored.values()) == ACCOUNTS * INITIAL_BALANCE


def test_readers_at_one_cluster_time_never_see_part_of_a_transfer_across_shards(bank):
    """Four clients move amounts between an account on each shard (every transfer a two-phase
    commit) while four readers sum every balance, two in snapshot transactions and two with
    snapshot sessions (snapshot reads outside transactions): the router gives each read one
    cluster time for both shards, so every sum is the total, never a transfer seen on one shard
    and not on the other."""
    with bank.client() as client:
        reset(client)
    stop = threading.Event()
    failures, sums, transfers = [], [], [0]
    lock = threading.Lock()
    half = ACCOUNTS // 2

    def move(seed):
        generator = random.Random(seed)
        try:
            with bank.client() as client:
                accounts = client.bank.accounts
                while not stop.is_set():
                    source, target = generator.randrange(half), half + generator.randrange(half)
                    if generator.random() < 0.5:
                        source, target = target, source
                    amount = generator.randint(1, 5)
                    with client.start_session() as session:
                        session.with_transaction(lambda session: transfer(session, accounts, source, target, amount))
                    with lock:
                        transfers[0] += 1
        except Exception as error:  # reported below with its cause
            failures.append(repr(error))

    def read(in_transaction):
        try:
            with bank.client() as client:
                accounts = client.bank.accounts
                while not stop.is_set():
                    if in_transaction:
                        with client.start_session() as session:
                            with session.start_transaction(read_concern=ReadConcern("snapshot")):
                                balances = [document["balance"] for document in accounts.find({}, session=session)]
                    else:
                        # A snapshot session: the first read's reply names the time, and the
                        # second reads at it too.
                        with client.start_session(snapshot=True, causal_consistency=False) as session:
                            balances = [document["balance"] for document in accounts.find({}, session=session)]
                            again = [document["balance"] for document in accounts.find({}, session=session)]
                            assert again == balances, "a snapshot session's reads see one time"
                    with lock:
                        sums.append((len(balances), sum(balances)))
        except Exception as error:  # reported below with its cause
            failures.append(repr(error))

    readers = [threading.Thread(target=read, args=(in_transaction,)) for in_transaction in (True, True, False, False)]
    threads = [threading.Thread(target=move, args=(seed,)) for seed in range(4)] + readers
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (transfers[0] < 150 or len(sums) < 150) and not failures:
            time.sleep(0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
    assert not failures, failures[:3]
    assert transfers[0] >= 20 and len(sums) >= 20, (transfers[0], len(sums))
    partial = [entry for entry in sums if entry != (ACCOUNTS, ACCOUNTS * INITIAL_BALANCE)]
    assert not partial, f"{len(partial)} of {len(sums)} snapshot reads saw part of a transfer: {partial[:5]}"
    with bank.client() as client:
        assert sum(document["balance"] for document in client.bank.accounts.find({})) == ACCOUNTS * INITIAL_BALANCE


def test_a_snapshot_read_after_a_later_cluster_time_reads_at_it(bank):
    """A snapshot read through the router carrying `afterClusterTime` (a causally consistent
    session's time) reads every shard at that time when it is later than the router's own,
    and answers the time it read at."""
    with bank.client() as client:
        reset(client)
        first = client.bank.command({"find": "accounts", "filter": {}, "readConcern": {"level": "snapshot"}})
        read_at = first["cursor"]["atClusterTime"]
        later = bson.Timestamp(read_at.time, read_at.inc + 1000)
        reply = client.bank.command({"find": "accounts", "filter": {}, "batchSize": 100, "readConcern": {"level": "snapshot", "afterClusterTime": later}})
        assert reply["cursor"]["atClusterTime"] == later
        assert len(reply["cursor"]["firstBatch"]) == ACCOUNTS


def test_a_transaction_through_a_stale_router_retries_its_first_statement(bank):
    """A chunk moved through another router: this router's first statement of a transaction
    goes to the shard that owned it, which refuses it with StaleConfig. As mongos, the router
    refreshes, aborts and forgets the participants that statement added, and sends it again,
    starting the transaction where the chunk lives now; the transfer commits once. (It moves
    chunks of the module's cluster, and moves them back.)"""
    process, uri = start_router(bank.config_address)
    other = pymongo.MongoClient(uri, serverSelectionTimeoutMS=20_000)
    try:
        with bank.client() as client:
            accounts = reset(client)
            for source, target in ((0, 30), (25, 5)):
                # The source's chunk moves away behind this router's back, between transfers.
                source_shard = "txa" if source < ACCOUNTS // 2 else "txb"
                destination = "txb" if source_shard == "txa" else "txa"
                other.admin.command("moveChunk", "bank.accounts", find={"_id": source}, to=destination, _waitForDelete=True)
                with client.start_session() as session:
                    with session.start_transaction(read_concern=ReadConcern("snapshot"), write_concern=WriteConcern(w="majority")):
                        transfer(session, accounts, source, target, 10)
            balances = {document["_id"]: document["balance"] for document in accounts.find()}
            assert balances[0] == INITIAL_BALANCE - 10 and balances[30] == INITIAL_BALANCE + 10, balances
            assert balances[25] == INITIAL_BALANCE - 10 and balances[5] == INITIAL_BALANCE + 10, balances
            assert sum(balances.values()) == ACCOUNTS * INITIAL_BALANCE
        # Back as the module's other tests found it: each half on its own shard.
        other.admin.command("moveChunk", "bank.accounts", find={"_id": 0}, to="txa", _waitForDelete=True)
        other.admin.command("moveChunk", "bank.accounts", find={"_id": ACCOUNTS // 2}, to="txb", _waitForDelete=True)
    finally:
        other.close()
        process.terminate()
        process.wait()


class RawConnection:
    """One connection sending OP_MSG commands as given (pymongo would put its own session's
    `lsid` on them): a transaction's statements through one router, its commit through another."""

    def __init__(self, uri: str) -> None:
        host, port = uri.split("//", 1)[1].split("/", 1)[0].split(",")[0].split(":")
        self.socket = socket.create_connection((host, int(port)), timeout=60)
        self.request_id = 0

    def command(self, document: dict) -> dict:
        payload = struct.pack("<I", 0) + b"\x00" + bson.encode(document)
        self.request_id += 1
        self.socket.sendall(struct.pack("<iiii", 16 + len(payload), self.request_id, 0, 2013) + payload)
        (length,) = struct.unpack("<i", self._read(4))
        # requestID, responseTo, opCode, flagBits, then section kind 0 and its document.
        return bson.decode(self._read(length - 4)[17:])

    def _read(self, count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = self.socket.recv(count - len(data))
            assert chunk, "the router closed the connection"
            data += chunk
        return data

    def close(self) -> None:
        self.socket.close()


def test_a_commit_retried_through_another_router_recovers_the_decision(bank):
    """Each statement's reply carries a recovery token; a router that never saw the transaction
    asks the shard it names: a committed transaction answers ok, one whose router never committed
    is aborted there (nothing of it ever becomes visible), and a read-only one's empty token
    answers NoSuchTransaction, as mongos recovers."""
    process, uri = start_router(bank.config_address)
    first, second = RawConnection(bank.uri), RawConnection(uri)
    session = {"id": Binary(uuid.uuid4().bytes, 4)}

    def in_transaction(number: int, command: dict, start: bool = False) -> dict:
        command = {**command, "lsid": session, "txnNumber": Int64(number), "autocommit": False, "$db": "bank"}
        if start:
            command["startTransaction"] = True
        return first.command(command)

    def move(number: int, source: int, target: int) -> dict:
        for index, (account, amount) in enumerate(((source, -10), (target, 10))):
            update = {"update": "accounts", "updates": [{"q": {"_id": account}, "u": {"$inc": {"balance": amount}}}]}
            reply = in_transaction(number, update, start=index == 0)
            assert reply["ok"] == 1 and reply["nModified"] == 1, reply
        return reply["recoveryToken"]

    def commit(connection, number: int, token: dict = None) -> dict:
        command = {"commitTransaction": 1, "lsid": session, "txnNumber": Int64(number), "autocommit": False, "$db": "admin"}
        if token is not None:
            command["recoveryToken"] = token
        return connection.command(command)

    try:
        with bank.client() as client:
            accounts = reset(client)
            # Committed through the first router: the second recovers the commit.
            token = move(1, 0, 30)
            assert token.get("recoveryShardId") in ("txa", "txb"), token
            assert commit(first, 1)["ok"] == 1
            assert commit(second, 1, token)["ok"] == 1
            # Never committed by its router: the second's commit finds no decision and aborts.
            token = move(2, 1, 31)
            refused = commit(second, 2, token)
            assert refused["ok"] == 0 and refused["code"] == 251, refused
            assert commit(first, 2)["ok"] == 0
            # Read only: an empty token.
            reply = in_transaction(3, {"find": "accounts", "filter": {"_id": 2}}, start=True)
            assert reply["ok"] == 1 and reply["recoveryToken"] == {}, reply
            refused = commit(second, 3, reply["recoveryToken"])
            assert refused["code"] == 251 and "only performed reads" in refused["errmsg"], refused
            # Without a token, a router that does not know the transaction knows nothing.
            assert commit(second, 2)["code"] == 251
            balances = {document["_id"]: document["balance"] for document in accounts.find()}
            expected = {account: INITIAL_BALANCE for account in range(ACCOUNTS)} | {0: INITIAL_BALANCE - 10, 30: INITIAL_BALANCE + 10}
            assert balances == expected
    finally:
        first.close()
        second.close()
        process.terminate()
        process.wait()
