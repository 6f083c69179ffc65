"""Transactions through the router (issue 26, item 3), through pymongo: a cluster whose two
shards are replica sets (one member each), a collection of accounts sharded over both. A
transaction that touches one shard commits there; one that writes on both commits through the
two-phase commit the first participant coordinates. Many clients move amounts between
accounts with the driver's `with_transaction`; every account ends exactly as the model of the
committed transfers says, and the total never changes."""

import random
import tempfile
import threading

import pymongo
import pytest
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


def test_a_transaction_through_a_stale_router_retries_its_first_statement(bank):
    """A chunk moved through another router: this router's first statement of a transaction
    goes to the shard that owned it, which refuses it with StaleConfig. As mongos, the router
    refreshes, aborts and forgets the participants that statement added, and sends it again,
    starting the transaction where the chunk lives now; the transfer commits once. (Placed last:
    it moves a chunk of the module's cluster, and moves it back.)"""
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
