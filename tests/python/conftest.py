"""Starts a real myriad server for the pymongo suite: its own temp dir, a free port, and a
clean stop at the end of the session. Tests wait for a condition with `wait_until` (poll until
it holds, fail after a deadline), never for a fixed time."""

import collections
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
import time

import pymongo
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_SECONDS = 60


def server_binary() -> str:
    explicit = os.environ.get("MYRIAD_BIN")
    if explicit:
        return explicit
    return str(ROOT / "target" / "debug" / "myriad")


def wait_until(check, what: str, timeout: float = 60.0, interval: float = 0.02):
    """Polls `check` until it returns something truthy, and returns that; fails naming `what`
    after `timeout` seconds (a bound on waiting for background work, not a speed assertion)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"still not true after {timeout} s: {what}")
        time.sleep(interval)


def start_up_failure(*arguments, timeout: float = 60.0) -> subprocess.CompletedProcess:
    """Runs `myriad ARGUMENTS` expecting it to stop during start-up (a bad flag, file or option)."""
    return subprocess.run([server_binary(), *arguments], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


class Server:
    def __init__(self, extra_arguments: tuple = (), data_directory=None, selection_timeout_ms: int = 10_000, port: int = 0) -> None:
        self.selection_timeout_ms = selection_timeout_ms
        # A given data_directory (a TemporaryDirectory) outlives this server, so a test can
        # start another one on the same files; otherwise the server owns its directory.
        self.owns_directory = data_directory is None
        self.directory = data_directory or tempfile.TemporaryDirectory(prefix="myriad-pytest-")
        self.process = subprocess.Popen(
            [server_binary(), "--dbpath", self.directory.name, "--port", str(port), "--bind_ip", "127.0.0.1",
             "--cacheSizeMB", "64", *extra_arguments],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        ready = threading.Event()
        self.port = None
        # The last log lines, printed by `stop` when the server had exited on its own.
        self.log_tail = collections.deque(maxlen=40)

        # MYRIAD_TEST_LOG_DIR keeps each server's log lines in a file there (for debugging).
        log_directory = os.environ.get("MYRIAD_TEST_LOG_DIR")
        log_file = open(os.path.join(log_directory, f"server-{self.process.pid}.log"), "w") if log_directory else None

        def drain() -> None:
            # Keep reading stderr for the server's whole life so it never blocks on a full pipe.
            for line in self.process.stderr:
                self.log_tail.append(line)
                if log_file is not None:
                    log_file.write(line)
                    log_file.flush()
                if self.port is None and "Waiting for connections" in line:
                    self.port = json.loads(line)["attr"]["port"]
                    ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(STARTUP_TIMEOUT_SECONDS):
            self.process.kill()
            raise RuntimeError("myriad did not start")

    def uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?directConnection=true"

    def client(self, **options) -> pymongo.MongoClient:
        """A client of this server alone, failing after `selection_timeout_ms` when refused."""
        return pymongo.MongoClient(self.uri(), serverSelectionTimeoutMS=self.selection_timeout_ms, **options)

    def stop(self) -> None:
        if self.process.poll() is not None:
            print(f"myriad (pid {self.process.pid}) had exited with {self.process.returncode}; its last log lines:",
                  *self.log_tail, sep="\n", file=sys.stderr)
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.owns_directory:
            self.directory.cleanup()


class ReplicaSet:
    """`members` nodes started with `--replSet NAME`, each on its own temp dir and free port,
    initiated as one set; a member can be killed (SIGKILL) and restarted on its port and files."""

    def __init__(self, members: int = 3, name: str = "rs0", extra_arguments: tuple = (), directories: dict = None,
                 member_options: dict = None) -> None:
        """`directories` and `member_options` map a member's index to its data directory (in the
        shape of a TemporaryDirectory, which the set cleans up) and to more fields of its entry in
        the configuration."""
        self.name = name
        self.extra_arguments = ("--replSet", name, *extra_arguments)
        self.directories = [(directories or {}).get(index) or tempfile.TemporaryDirectory(prefix="myriad-rs-") for index in range(members)]
        self.servers = [Server(self.extra_arguments, data_directory=directory) for directory in self.directories]
        self.ports = [member.port for member in self.servers]
        config = {"_id": name, "members": [{"_id": index, "host": f"127.0.0.1:{port}", **(member_options or {}).get(index, {})}
                                           for index, port in enumerate(self.ports)]}
        self.servers[0].client().admin.command("replSetInitiate", config)
        self.wait_for_primary()

    def hosts(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def uri(self) -> str:
        return f"mongodb://{self.hosts()}/?replicaSet={self.name}"

    def client(self, **options) -> pymongo.MongoClient:
        options.setdefault("serverSelectionTimeoutMS", 30_000)
        return pymongo.MongoClient(self.uri(), **options)

    def member_client(self, index: int, **options) -> pymongo.MongoClient:
        options.setdefault("serverSelectionTimeoutMS", 10_000)
        return pymongo.MongoClient(f"mongodb://127.0.0.1:{self.ports[index]}/?directConnection=true", **options)

    def primary_index(self):
        """The index of the member that says it is the writable primary, or None."""
        for index, member in enumerate(self.servers):
            if member.process.poll() is not None:
                continue
            try:
                with self.member_client(index, serverSelectionTimeoutMS=2_000) as client:
                    if client.admin.command("hello").get("isWritablePrimary"):
                        return index
            except pymongo.errors.PyMongoError:
                continue
        return None

    def wait_for_primary(self, timeout: float = 60.0) -> int:
        def found():
            index = self.primary_index()
            return None if index is None else (index,)

        return wait_until(found, "a writable primary", timeout=timeout, interval=0.1)[0]

    def kill(self, index: int) -> None:
        self.servers[index].process.kill()
        self.servers[index].process.wait()

    def restart(self, index: int) -> None:
        self.servers[index] = Server(self.extra_arguments, data_directory=self.directories[index], port=self.ports[index])

    def stop(self) -> None:
        for member in self.servers:
            if member.process.poll() is None:
                member.stop()
        for directory in self.directories:
            directory.cleanup()


CLUSTER_STARTUP_TIMEOUT_SECONDS = 120


class Cluster:
    """`myriad cluster` (config server, shards, router as child processes) over `directory`;
    `uri` is the router's connection string as the launcher prints it."""

    def __init__(self, directory: str, extra_arguments: tuple = (), shards: int = 2) -> None:
        self.process = subprocess.Popen(
            [server_binary(), "cluster", "--shards", str(shards), "--dir", directory, "--port", "0", "--cacheSizeMB", "64", *extra_arguments],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.uri = None
        ready = threading.Event()

        self.config_address = None

        def read_stdout() -> None:
            # The launcher prints the router's URI, then "config server HOST:PORT, shards ...".
            for line in self.process.stdout:
                if self.uri is None and line.startswith("mongodb://"):
                    self.uri = line.strip()
                elif self.config_address is None and line.startswith("config server "):
                    self.config_address = line[len("config server "):].split(",")[0].strip()
                    ready.set()

        errors = collections.deque(maxlen=40)

        def read_stdout_then_wake() -> None:
            read_stdout()
            ready.set()  # the launcher exited: stop waiting, report its errors

        threading.Thread(target=read_stdout_then_wake, daemon=True).start()
        threading.Thread(target=lambda: errors.extend(self.process.stderr), daemon=True).start()
        if not ready.wait(CLUSTER_STARTUP_TIMEOUT_SECONDS) or self.config_address is None:
            self.process.kill()
            self.process.wait()
            raise RuntimeError("myriad cluster did not print its connection string; its last errors:\n" + "".join(errors))

    def client(self, **options) -> pymongo.MongoClient:
        return pymongo.MongoClient(self.uri, serverSelectionTimeoutMS=20_000, **options)

    def stop(self) -> int:
        self.process.terminate()
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise



def start_router(config_address: str, *extra_arguments: str):
    """Another router (`myriad router`) of the cluster whose config server is at
    `config_address`; returns its process (the caller stops it) and its URI."""
    process = subprocess.Popen(
        [server_binary(), "router", "--configdb", config_address, "--port", "0", "--bind_ip", "127.0.0.1", *extra_arguments],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ready = threading.Event()
    port = {}

    def drain() -> None:
        for line in process.stderr:
            if "port" not in port and "Waiting for connections" in line:
                port["port"] = json.loads(line)["attr"]["port"]
                ready.set()

    threading.Thread(target=drain, daemon=True).start()
    if not ready.wait(120):
        process.kill()
        raise RuntimeError("the router did not start")
    return process, f"mongodb://127.0.0.1:{port['port']}/"


class AcknowledgedInserts:
    """`threads` clients inserting unique `_id`s (`prefix-thread-sequence`) into `collection`
    until stopped, keeping the ids whose insert was acknowledged: a failover test's exact model
    (every acknowledged id must be stored afterwards). A DuplicateKeyError is a retry of an
    insert that had committed, so its id counts; any other error leaves the outcome unknown."""

    def __init__(self, collection, threads: int, prefix: str = "") -> None:
        self.acknowledged, self.errors = set(), []
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._writers = [threading.Thread(target=self._write, args=(collection, f"{prefix}{thread}")) for thread in range(threads)]
        for writer in self._writers:
            writer.start()

    def _write(self, collection, name: str) -> None:
        sequence = 0
        while not self._stop.is_set():
            identifier = f"{name}-{sequence}"
            sequence += 1
            try:
                collection.insert_one({"_id": identifier})
            except pymongo.errors.DuplicateKeyError:
                pass
            except pymongo.errors.PyMongoError as error:
                self.errors.append(repr(error))
                continue
            with self._lock:
                self.acknowledged.add(identifier)

    def count(self) -> int:
        with self._lock:
            return len(self.acknowledged)

    def stop(self) -> set:
        self._stop.set()
        for writer in self._writers:
            writer.join()
        return self.acknowledged


@pytest.fixture(scope="module")
def replica_set():
    """A 3-member replica set per test module (a module that kills members restarts them)."""
    running = ReplicaSet(members=3)
    yield running
    running.stop()


@pytest.fixture(scope="session")
def server():
    running = Server()
    yield running
    running.stop()


@pytest.fixture(scope="session")
def auth_server():
    """A second server, started with --auth (no user yet: the localhost exception applies)."""
    running = Server(("--auth",))
    yield running
    running.stop()


@pytest.fixture()
def client(server):
    connection = pymongo.MongoClient(server.uri(), serverSelectionTimeoutMS=10_000)
    yield connection
    connection.close()


@pytest.fixture()
def db(client, request):
    name = "pytest_" + request.node.name[:40].replace("[", "_").replace("]", "_").replace("-", "_")
    client.drop_database(name)
    yield client[name]
    client.drop_database(name)
