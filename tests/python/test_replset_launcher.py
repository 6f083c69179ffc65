"""`myriad replset` through pymongo: a local replica set of child processes started from the
command line with free ports, the printed connection string used as it is (the driver
discovers the primary), a majority write read back from every member, a clean stop, and a
restart over the same directory that keeps the set's config and data."""

import subprocess
import tempfile
import threading

import pymongo
import pytest
from pymongo.read_preferences import ReadPreference
from pymongo.write_concern import WriteConcern

from conftest import server_binary, wait_until

STARTUP_TIMEOUT_SECONDS = 120


class LaunchedReplicaSet:
    """`myriad replset --members 3 --dir DIR --port 0`; `uri` is the first line it prints."""

    def __init__(self, directory: str) -> None:
        self.process = subprocess.Popen(
            [server_binary(), "replset", "--members", "3", "--dir", directory, "--port", "0", "--cacheSizeMB", "64"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines = []
        ready = threading.Event()

        def read_stdout() -> None:
            for line in self.process.stdout:
                self.lines.append(line.strip())
                ready.set()

        threading.Thread(target=read_stdout, daemon=True).start()
        threading.Thread(target=lambda: [None for _ in self.process.stderr], daemon=True).start()
        if not ready.wait(STARTUP_TIMEOUT_SECONDS):
            self.process.kill()
            raise RuntimeError("myriad replset did not print its connection string")
        self.uri = self.lines[0]

    def hosts(self) -> list:
        return self.uri[len("mongodb://"):].split("/")[0].split(",")

    def stop(self) -> int:
        self.process.terminate()
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise


@pytest.fixture()
def replset_directory():
    with tempfile.TemporaryDirectory(prefix="myriad-replset-") as directory:
        yield directory


def member_ports_answer(hosts: list) -> bool:
    for host in hosts:
        try:
            with pymongo.MongoClient(f"mongodb://{host}/?directConnection=true", serverSelectionTimeoutMS=500) as client:
                client.admin.command("ping")
                return True
        except pymongo.errors.PyMongoError:
            continue
    return False


def test_launch_write_read_stop_and_restart(replset_directory):
    replica_set = LaunchedReplicaSet(replset_directory)
    try:
        assert replica_set.uri.startswith("mongodb://127.0.0.1:") and replica_set.uri.endswith("/?replicaSet=rs0"), replica_set.uri
        hosts = replica_set.hosts()
        assert len(hosts) == 3 and len(set(hosts)) == 3, hosts
        with pymongo.MongoClient(replica_set.uri, serverSelectionTimeoutMS=30_000) as client:
            hello = client.admin.command("hello")
            assert hello["setName"] == "rs0" and sorted(hello["hosts"]) == sorted(hosts), hello
            orders = client.shop.get_collection("orders", write_concern=WriteConcern(w="majority"))
            orders.insert_many([{"_id": index, "qty": index * 2} for index in range(100)])
            assert orders.count_documents({}) == 100
            assert orders.find_one({"_id": 7}) == {"_id": 7, "qty": 14}
        # A majority write is on a majority of members; every member applies it soon after.
        for host in hosts:
            with pymongo.MongoClient(f"mongodb://{host}/?directConnection=true", serverSelectionTimeoutMS=10_000,
                                     read_preference=ReadPreference.SECONDARY_PREFERRED) as member:
                wait_until(lambda: member.shop.orders.count_documents({}) == 100, f"100 orders on {host}")
    finally:
        code = replica_set.stop()
    assert code == 0
    assert not member_ports_answer(hosts), "every member stopped with the launcher"

    restarted = LaunchedReplicaSet(replset_directory)
    try:
        assert restarted.uri == replica_set.uri, "the same ports and set name after a restart"
        with pymongo.MongoClient(restarted.uri, serverSelectionTimeoutMS=30_000) as client:
            assert client.shop.orders.count_documents({}) == 100
            client.shop.orders.insert_one({"_id": 100, "qty": 200})
            assert client.shop.orders.find_one({"_id": 100})["qty"] == 200
    finally:
        assert restarted.stop() == 0
