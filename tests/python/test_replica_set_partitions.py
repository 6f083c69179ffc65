"""Network partitions and linearizability (issue 23, item 9), through pymongo. Partitions are
made with the `replicationNetworkPartition` test fail point, set on both sides: a member then
sends nothing to the others (as dropped packets). An isolated primary stops being writable
and a majority elects another; an isolated secondary never becomes primary and catches up once
healed; and a register read, written and compare-and-set by several clients while the primary
is isolated, healed and killed stays linearizable (checked by linearizability.py, a Wing-Gong
search with Lowe's memoisation)."""

import math
import random
import threading
import time

import pymongo
import pytest
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from conftest import ReplicaSet, wait_until
from linearizability import Operation, is_linearizable

TEST_COMMANDS = ("--setParameter", "enableTestCommands=1")


@pytest.fixture(scope="module")
def replica_set():
    running = ReplicaSet(members=3, extra_arguments=TEST_COMMANDS)
    yield running
    running.stop()


def hosts(replica_set, indexes):
    return [f"127.0.0.1:{replica_set.ports[index]}" for index in indexes]


def isolate(replica_set, isolated: int) -> None:
    others = [index for index in range(3) if index != isolated]
    set_partition(replica_set, isolated, hosts(replica_set, others))
    for index in others:
        set_partition(replica_set, index, hosts(replica_set, [isolated]))


def heal(replica_set) -> None:
    for index in range(3):
        if replica_set.servers[index] is not None and replica_set.servers[index].process.poll() is None:
            with replica_set.member_client(index) as client:
                client.admin.command("configureFailPoint", "replicationNetworkPartition", mode="off")


def set_partition(replica_set, index: int, cut) -> None:
    with replica_set.member_client(index) as client:
        client.admin.command("configureFailPoint", "replicationNetworkPartition", mode="alwaysOn", data={"hosts": cut})


def writable(replica_set, index: int) -> bool:
    with replica_set.member_client(index) as client:
        return client.admin.command("hello")["isWritablePrimary"]


def test_an_isolated_primary_steps_down_and_a_majority_elects_another(replica_set):
    old = replica_set.wait_for_primary()
    isolate(replica_set, old)
    try:
        wait_until(lambda: not writable(replica_set, old), "the isolated primary stops being writable", timeout=20)
        new = replica_set.wait_for_primary()
        assert new != old
        with replica_set.client() as client:
            client.partitions.items.insert_one({"_id": "during"})
            majority = client.partitions.items.with_options(write_concern=WriteConcern("majority"))
            majority.insert_one({"_id": "majority during"})
        with replica_set.member_client(old) as direct:
            with pytest.raises(PyMongoError):
                direct.partitions.items.insert_one({"_id": "on the isolated one"})
    finally:
        heal(replica_set)
    with replica_set.member_client(old, readPreference="secondaryPreferred") as direct:
        wait_until(lambda: direct.partitions.items.count_documents({"_id": {"$in": ["during", "majority during"]}}) == 2, "the old primary catches up")
        assert direct.partitions.items.count_documents({"_id": "on the isolated one"}) == 0


def test_an_isolated_secondary_never_becomes_primary_and_catches_up(replica_set):
    primary = replica_set.wait_for_primary()
    isolated = (primary + 1) % 3
    isolate(replica_set, isolated)
    try:
        with replica_set.client() as client:
            for number in range(20):
                client.partitions.minority.insert_one({"_id": number})
                assert not writable(replica_set, isolated)
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                assert writable(replica_set, primary) and not writable(replica_set, isolated)
                time.sleep(0.1)
    finally:
        heal(replica_set)
    with replica_set.member_client(isolated, readPreference="secondaryPreferred") as direct:
        wait_until(lambda: direct.partitions.minority.count_documents({}) == 20, "the isolated secondary catches up")
    assert replica_set.wait_for_primary() == primary


def test_the_checker_rejects_what_is_not_linearizable():
    write = Operation("write", 1, call=0, returned=1)
    assert not is_linearizable([write, Operation("read", None, call=2, returned=3, output=None)])
    assert is_linearizable([write, Operation("read", None, call=0.5, returned=3, output=None)])
    assert not is_linearizable([write, Operation("cas", (1, 2), call=2, returned=3, output=False)])


def run_register_workload(replica_set, duration_seconds: float, clients: int, nemesis) -> list:
    """Clients read (linearizable), write and compare-and-set one register until the
    nemesis is done; returns the history."""
    history, lock, stop = [], threading.Lock(), threading.Event()
    with replica_set.client(serverSelectionTimeoutMS=3000, retryWrites=True) as client:
        majority = WriteConcern("majority", wtimeout=5000)
        register = client.partitions.get_collection("register", write_concern=majority, read_concern=ReadConcern("linearizable"))
        register.replace_one({"_id": "r"}, {"_id": "r", "value": 0}, upsert=True)

        def work(worker: int) -> None:
            generator = random.Random(worker)
            sequence = 0
            while not stop.is_set():
                sequence += 1
                kind = generator.choice(["read", "write", "cas"])
                start = time.monotonic()
                try:
                    if kind == "read":
                        found = register.find_one({"_id": "r"})
                        operation = Operation("read", None, start, time.monotonic(), found["value"])
                    elif kind == "write":
                        value = worker * 100_000 + sequence
                        operation = Operation("write", value, start)
                        register.update_one({"_id": "r"}, {"$set": {"value": value}})
                        operation.returned = time.monotonic()
                    else:
                        expected, value = generator.choice([0, *range(1, 4)]), worker * 100_000 + sequence
                        with lock:
                            known_values = [op.argument for op in history if op.kind == "write"][-3:]
                        if known_values:
                            expected = generator.choice(known_values)
                        operation = Operation("cas", (expected, value), start)
                        before = register.find_one_and_update({"_id": "r", "value": expected}, {"$set": {"value": value}})
                        operation.output, operation.returned = before is not None, time.monotonic()
                except PyMongoError:
                    if kind == "read":
                        continue  # a failed read has no effect
                    operation.known, operation.returned = False, math.inf
                with lock:
                    history.append(operation)

        workers = [threading.Thread(target=work, args=(worker,)) for worker in range(clients)]
        for worker in workers:
            worker.start()
        try:
            nemesis()
            time.sleep(duration_seconds)
        finally:
            stop.set()
            for worker in workers:
                worker.join()
    return history


def test_a_register_stays_linearizable_under_partitions_and_a_kill(replica_set):
    """Last in the module: it kills the primary (and restarts it)."""

    def nemesis():
        for _ in range(2):
            primary = replica_set.wait_for_primary()
            isolate(replica_set, primary)
            time.sleep(2.0)
            heal(replica_set)
            time.sleep(0.5)
        victim = replica_set.wait_for_primary()
        replica_set.kill(victim)
        replica_set.wait_for_primary()
        time.sleep(0.5)
        replica_set.restart(victim)

    history = run_register_workload(replica_set, duration_seconds=1.0, clients=3, nemesis=nemesis)
    known = [operation for operation in history if operation.known]
    print(f"register history: {len(history)} operations, {len(known)} with known outcomes, {sum(op.kind == 'cas' and op.output is True for op in known)} successful compare-and-sets")
    assert len(known) >= 30, f"too few operations completed: {len(known)} of {len(history)}"
    assert is_linearizable(history, initial=0), f"not linearizable: {len(history)} operations"
