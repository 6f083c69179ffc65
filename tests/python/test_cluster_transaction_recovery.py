"""A two-phase commit across shards survives the crash of its coordinator or of a participant
(issue 26, item 3), through pymongo and a router: a cluster whose two shards `rca` and `rcb`
are replica sets of one member each, a collection of accounts sharded over both, and every
transfer a transaction writing on both shards.

The coordinator is the shard the transaction touched first; participants prepare in the order
of their names (`rca`, then `rcb`). A `failCommand` fail point on `rcb` holds the coordination
at a chosen step while a shard is killed (SIGKILL) and restarted on its files:
- the coordinator, after the participants' list is recorded and before a decision: the
  restarted coordinator decides abort, and both shards end as before the transfer;
- a participant, after it prepared and before the decision: restarted, it prepares the
  transaction again from its record and commits it when the decision arrives;
- the coordinator, after it recorded a commit that a participant has not acknowledged: the
  restarted coordinator sends the decision again until the participant commits.
In every case the total of the balances is unchanged and each account is exactly as the
transfers that committed say, and no coordinator record is left."""

import threading
import time

import pytest
from bson.son import SON
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern

from conftest import wait_until
from test_cluster_transactions import ACCOUNTS, INITIAL_BALANCE, reset, two_shard_bank


@pytest.fixture(scope="module")
def cluster():
    yield from two_shard_bank(("rca", "rcb"), ("--setParameter", "enableTestCommands=1"))


def fail_point(shard, mode, data=None):
    command = SON([("configureFailPoint", "failCommand"), ("mode", mode)])
    if data is not None:
        command["data"] = data
    with shard.member_client(0) as client:
        client.admin.command(command)


def coordinator_records(shard):
    with shard.member_client(0) as client:
        return client.config.transaction_coordinators.count_documents({})


def restart(shard):
    shard.kill(0)
    shard.restart(0)
    shard.wait_for_primary()


def balances(client):
    return {document["_id"]: document["balance"] for document in client.bank.accounts.find({})}


def expected(transfers):
    model = {number: INITIAL_BALANCE for number in range(ACCOUNTS)}
    for source, target, amount in transfers:
        model[source] -= amount
        model[target] += amount
    return model


def commit_in_background(client, source, target, amount):
    """Runs the transfer's statements, then commits on a thread; returns the thread and the
    dict its outcome lands in ("committed" or "error")."""
    outcome = {}
    session = client.start_session()
    session.start_transaction()
    accounts = client.bank.accounts
    accounts.update_one({"_id": source}, {"$inc": {"balance": -amount}}, session=session)
    accounts.update_one({"_id": target}, {"$inc": {"balance": amount}}, session=session)

    def commit():
        try:
            session.commit_transaction()
            outcome["committed"] = True
        except PyMongoError as error:
            outcome["error"] = error
        finally:
            session.end_session()

    thread = threading.Thread(target=commit)
    thread.start()
    return thread, outcome


def settled(cluster, client, model):
    """Waits until no coordinator record is left and the balances are the model's (the
    decision reaches a restarted shard through the coordinator's recovery)."""
    wait_until(lambda: all(coordinator_records(shard) == 0 for shard in cluster.shards.values()), "no coordinator record left", timeout=90, interval=0.5)
    wait_until(lambda: balances(client) == model, f"balances as the model says: {model}", timeout=60, interval=0.5)
    assert sum(balances(client).values()) == ACCOUNTS * INITIAL_BALANCE
    # The prepared transactions let go of their collections: plain writes on both shards pass.
    accounts = client.bank.accounts
    for number in (0, ACCOUNTS - 1):
        accounts.update_one({"_id": number}, {"$inc": {"balance": 0}})


def test_a_coordinator_killed_before_its_decision_leaves_both_shards_as_before(cluster):
    shard_a, shard_b = cluster.shards["rca"], cluster.shards["rcb"]
    with cluster.client() as client:
        reset(client)
        # rcb's prepare waits, so the coordinator (rca, touched first) has recorded the
        # participants and prepared itself, and has no decision yet.
        fail_point(shard_b, {"times": 1}, {"failCommands": ["prepareTransaction"], "blockConnection": True, "blockTimeMS": 6000})
        thread, outcome = commit_in_background(client, 1, ACCOUNTS - 2, 10)
        wait_until(lambda: coordinator_records(shard_a) == 1, "the coordinator recorded its participants", timeout=30, interval=0.05)
        time.sleep(1.0)
        restart(shard_a)
        thread.join(timeout=120)
        assert not thread.is_alive()
        assert "committed" not in outcome, "a transaction whose coordinator died undecided is aborted"
        settled(cluster, client, expected([]))


def test_a_participant_killed_after_preparing_commits_once_restarted(cluster):
    shard_a, shard_b = cluster.shards["rca"], cluster.shards["rcb"]
    with cluster.client() as client:
        reset(client)
        # The coordinator is rcb (touched first); rca prepares first, then rcb's own prepare
        # waits while rca is killed and restarted.
        fail_point(shard_b, {"times": 1}, {"failCommands": ["prepareTransaction"], "blockConnection": True, "blockTimeMS": 8000})
        thread, outcome = commit_in_background(client, ACCOUNTS - 3, 2, 15)
        wait_until(lambda: coordinator_records(shard_b) == 1, "the coordinator recorded its participants", timeout=30, interval=0.05)
        time.sleep(1.5)
        restart(shard_a)
        thread.join(timeout=120)
        assert not thread.is_alive()
        assert outcome.get("committed"), outcome
        settled(cluster, client, expected([(ACCOUNTS - 3, 2, 15)]))


def test_a_coordinator_killed_after_deciding_commit_delivers_it_once_restarted(cluster):
    shard_a, shard_b = cluster.shards["rca"], cluster.shards["rcb"]
    with cluster.client() as client:
        reset(client)
        # rcb refuses the decision (as a shard shutting down would), so the coordinator (rca)
        # answers the commit, which is durable, and keeps its record for rcb.
        fail_point(shard_b, "alwaysOn", {"failCommands": ["commitTransaction"], "errorCode": 91})
        try:
            thread, outcome = commit_in_background(client, 3, ACCOUNTS - 4, 20)
            thread.join(timeout=120)
            assert outcome.get("committed"), outcome
            assert coordinator_records(shard_a) == 1, "the decision is kept until every participant has it"
            restart(shard_a)
        finally:
            fail_point(shard_b, "off")
        settled(cluster, client, expected([(3, ACCOUNTS - 4, 20)]))


def test_a_bank_workload_across_shards_keeps_its_ledger_through_kills_of_each_shard(cluster):
    """Each shard in turn is killed (SIGKILL) and restarted during the bank workload."""

    def kill_each_shard():
        for name in ("rca", "rcb"):
            time.sleep(3)
            restart(cluster.shards[name])
        time.sleep(3)

    bank_workload(cluster, kill_each_shard)


def test_a_bank_workload_across_shards_keeps_its_ledger_through_partitions_between_shards(cluster):
    """The two shards stop reaching each other (the `clusterNetworkPartition` fail point on
    both: a coordinator's prepares and decisions, and recovery, fail as to an unreachable host)
    for 3 s, twice, during the bank workload; prepared participants hold their transactions
    until the decision reaches them after the partition heals."""
    shard_a, shard_b = cluster.shards["rca"], cluster.shards["rcb"]

    def cut(shard, other):
        command = SON([("configureFailPoint", "clusterNetworkPartition"), ("mode", "alwaysOn"), ("data", {"hosts": [other.hosts()]})])
        with shard.member_client(0) as client:
            client.admin.command(command)

    def heal():
        for shard in (shard_a, shard_b):
            with shard.member_client(0) as client:
                client.admin.command("configureFailPoint", "clusterNetworkPartition", mode="off")

    probes = []

    def probe():
        # A transfer across the shards, without the driver's retries, while they are cut apart:
        # its two-phase commit cannot reach the other shard, so it does not commit.
        with cluster.client() as client:
            try:
                with client.start_session() as session:
                    with session.start_transaction():
                        transfer_across(client, session)
                probes.append("committed")
            except PyMongoError as error:
                probes.append(repr(error))

    def partition_twice():
        try:
            for _ in range(2):
                time.sleep(2)
                cut(shard_a, shard_b)
                cut(shard_b, shard_a)
                probe()
                time.sleep(1)
                heal()
            time.sleep(2)
        finally:
            heal()

    bank_workload(cluster, partition_twice)
    assert probes and "committed" not in probes, probes


def transfer_across(client, session):
    accounts = client.bank.accounts
    accounts.update_one({"_id": 0}, {"$inc": {"balance": -1}}, session=session)
    accounts.update_one({"_id": ACCOUNTS - 1}, {"$inc": {"balance": 1}}, session=session)


def bank_workload(cluster, disturb):
    """Four clients move amounts between random accounts, each transfer writing its ledger
    entry (an unsharded collection on rca) in the same transaction, and a reader sums every
    balance in snapshot transactions, while `disturb` runs. After the run every account is
    exactly its initial balance plus the ledger's transfers (all of a transaction or none of
    it, on both shards), every transfer a client saw committed is in the ledger, the total is
    unchanged, and no snapshot read saw part of a transfer. Returns the transfers' errors."""
    import random

    with cluster.client() as client:
        reset(client)
        client.bank.ledger.delete_many({})
    acknowledged = []
    failures = []
    stop = threading.Event()
    lock = threading.Lock()

    def run(seed):
        generator = random.Random(seed)
        with cluster.client(retryWrites=True) as client:
            accounts, ledger = client.bank.accounts, client.bank.ledger
            number = 0
            while not stop.is_set():
                number += 1
                transfer_id = f"{seed}-{number}"
                source, target = generator.sample(range(ACCOUNTS), 2)
                amount = generator.randint(1, 10)

                def body(session):
                    accounts.update_one({"_id": source}, {"$inc": {"balance": -amount}}, session=session)
                    accounts.update_one({"_id": target}, {"$inc": {"balance": amount}}, session=session)
                    ledger.insert_one({"_id": transfer_id, "source": source, "target": target, "amount": amount}, session=session)

                try:
                    with client.start_session() as session:
                        session.with_transaction(body)
                    with lock:
                        acknowledged.append(transfer_id)
                except PyMongoError as error:  # an outcome the client does not know: the ledger says
                    with lock:
                        failures.append(repr(error))
                    time.sleep(0.2)

    sums = []

    def read():
        # Snapshot transactions at the router's one cluster time: every sum is the total, even
        # while a shard is killed and prepares its transactions again on restart.
        with cluster.client() as client:
            accounts = client.bank.accounts
            while not stop.is_set():
                try:
                    with client.start_session() as session:
                        with session.start_transaction(read_concern=ReadConcern("snapshot")):
                            balances = [document["balance"] for document in accounts.find({}, session=session)]
                    with lock:
                        sums.append((len(balances), sum(balances)))
                except PyMongoError:  # a shard being killed: the read is tried again
                    time.sleep(0.2)

    threads = [threading.Thread(target=run, args=(seed,)) for seed in range(4)] + [threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    try:
        disturb()
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=180)
    assert not any(thread.is_alive() for thread in threads)
    with cluster.client() as client:
        wait_until(lambda: all(coordinator_records(shard) == 0 for shard in cluster.shards.values()), "no coordinator record left", timeout=90, interval=0.5)
        transfers = [(entry["source"], entry["target"], entry["amount"]) for entry in client.bank.ledger.find({})]
        recorded = {entry["_id"] for entry in client.bank.ledger.find({}, {"_id": 1})}
        assert len(acknowledged) > 20, (len(acknowledged), failures[:3])
        partial = [entry for entry in sums if entry != (ACCOUNTS, ACCOUNTS * INITIAL_BALANCE)]
        assert len(sums) > 10 and not partial, f"{len(partial)} of {len(sums)} snapshot reads saw part of a transfer: {partial[:5]}"
        assert set(acknowledged) <= recorded, "every acknowledged transfer is durable"
        wait_until(lambda: balances(client) == expected(transfers), "balances as the ledger says", timeout=60, interval=0.5)
        assert sum(balances(client).values()) == ACCOUNTS * INITIAL_BALANCE
    return failures
