"""A secured cluster through pymongo and mongosh: `myriad cluster --auth --tlsMode requireTLS`
starts every member with a keyfile (members authenticate to each other as the internal user)
and TLS (between members too). Users are created through the router, kept on the config
server, and enforced by the router with the node's own authorization code."""

import pathlib
import shutil
import subprocess
import tempfile
import threading

import pymongo
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from pymongo.errors import OperationFailure, ServerSelectionTimeoutError

from certificates import certificate, name, pem
from conftest import Cluster

UNAUTHORIZED = 13
AUTHENTICATION_FAILED = 18


@pytest.fixture(scope="module")
def member_files():
    """A CA, and one certificate for every member: a server for clients, a client of the others."""
    with tempfile.TemporaryDirectory(prefix="myriad-cluster-tls-") as directory:
        path = pathlib.Path(directory)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = name("Myriad cluster test CA")
        member_key = ec.generate_private_key(ec.SECP256R1())
        member = certificate(name("member"), ca_name, member_key.public_key(), ca_key, names=("localhost", "127.0.0.1"),
                             purposes=(ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH))
        (path / "ca.pem").write_bytes(pem(certificate(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)))
        (path / "member.pem").write_bytes(pem(member, member_key))
        yield {"ca": str(path / "ca.pem"), "member": str(path / "member.pem")}


@pytest.fixture(scope="module")
def secured_cluster(member_files):
    with tempfile.TemporaryDirectory(prefix="myriad-cluster-secured-") as directory:
        running = Cluster(directory, ("--auth", "--tlsMode", "requireTLS", "--tlsCertificateKeyFile", member_files["member"],
                                      "--tlsCAFile", member_files["ca"], "--tlsAllowConnectionsWithoutCertificates"))
        try:
            yield running
        finally:
            running.stop()


def connect(cluster, files, **options):
    return cluster.client(tls=True, tlsCAFile=files["ca"], **options)


def test_users_created_through_the_router_are_enforced_by_it(secured_cluster, member_files):
    with connect(secured_cluster, member_files) as anonymous:
        assert anonymous.admin.command("hello")["msg"] == "isdbgrid"
        with pytest.raises(OperationFailure) as refused:
            anonymous.shop.orders.find_one()
        assert refused.value.code == UNAUTHORIZED
        # The localhost exception: the first user, created through the router.
        anonymous.admin.command("createUser", "root", pwd="root-password", roles=["root"])
        with pytest.raises(OperationFailure) as second:
            anonymous.admin.command("createUser", "another", pwd="x", roles=["root"])
        assert second.value.code == UNAUTHORIZED

    with connect(secured_cluster, member_files, username="root", password="root-password") as root:
        root.admin.command("enableSharding", "shop")
        root.admin.command("shardCollection", "shop.orders", key={"_id": "hashed"})
        root.shop.orders.insert_many([{"_id": i, "total": i} for i in range(200)])
        assert root.shop.orders.count_documents({}) == 200
        root.shop.command("createUser", "clerk", pwd="clerk-password", roles=["readWrite"])
        users = root.shop.command("usersInfo", "clerk")["users"]
        assert [(user["user"], [role["role"] for role in user["roles"]]) for user in users] == [("clerk", ["readWrite"])]
        assert root.admin.command("connectionStatus")["authInfo"]["authenticatedUsers"] == [{"user": "root", "db": "admin"}]
        assert root.admin.command("serverStatus")["process"] == "mongos"

    with connect(secured_cluster, member_files, username="clerk", password="clerk-password", authSource="shop") as clerk:
        clerk.shop.orders.insert_one({"_id": 1000, "total": 5})
        assert clerk.shop.orders.find_one({"_id": 1000}) == {"_id": 1000, "total": 5}
        for command in ({"shardCollection": "shop.other", "key": {"_id": 1}}, {"addShard": "127.0.0.1:1"}, {"listShards": 1}):
            with pytest.raises(OperationFailure) as refused:
                clerk.admin.command(command)
            assert refused.value.code == UNAUTHORIZED, command
        with pytest.raises(OperationFailure) as refused:
            clerk.other.things.insert_one({"x": 1})
        assert refused.value.code == UNAUTHORIZED

    with pytest.raises(OperationFailure) as wrong:
        with connect(secured_cluster, member_files, username="clerk", password="guess", authSource="shop") as guessing:
            guessing.shop.orders.find_one()
    assert wrong.value.code == AUTHENTICATION_FAILED


def test_many_clients_write_through_a_secured_router(secured_cluster, member_files):
    with connect(secured_cluster, member_files, username="root", password="root-password") as root:
        root.admin.command("shardCollection", "shop.counters", key={"_id": 1})
        root.shop.counters.insert_many([{"_id": k, "n": 0} for k in range(4)])
    errors = []

    def increment(worker):
        try:
            with connect(secured_cluster, member_files, username="clerk", password="clerk-password", authSource="shop") as clerk:
                for step in range(50):
                    clerk.shop.counters.update_one({"_id": (worker + step) % 4}, {"$inc": {"n": 1}})
        except Exception as error:  # reported below: a thread's failure must fail the test
            errors.append(error)

    threads = [threading.Thread(target=increment, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with connect(secured_cluster, member_files, username="root", password="root-password") as root:
        assert sum(document["n"] for document in root.shop.counters.find()) == 8 * 50


def test_users_live_on_the_config_server_and_plain_connections_are_refused(secured_cluster, member_files):
    with pytest.raises(ServerSelectionTimeoutError):
        with pymongo.MongoClient(secured_cluster.uri, serverSelectionTimeoutMS=2000) as plain:
            plain.admin.command("ping")
    config_port = int(secured_cluster.config_address.rsplit(":", 1)[1])
    direct = f"mongodb://127.0.0.1:{config_port}/?directConnection=true"
    with pymongo.MongoClient(direct, tls=True, tlsCAFile=member_files["ca"], username="root", password="root-password",
                             serverSelectionTimeoutMS=20_000) as config:
        stored = config.admin["system.users"].find_one({"_id": "shop.clerk"})
        assert stored is not None and "SCRAM-SHA-256" in stored["credentials"]


@pytest.mark.skipif(shutil.which("mongosh") is None, reason="mongosh is not installed")
def test_mongosh_authenticates_through_the_secured_router(secured_cluster, member_files):
    script = "const s = db.getSiblingDB('shop').orders.countDocuments({}); print(JSON.stringify({count: s}))"
    ran = subprocess.run(
        ["mongosh", secured_cluster.uri, "--tls", "--tlsCAFile", member_files["ca"], "--username", "root", "--password", "root-password",
         "--authenticationDatabase", "admin", "--quiet", "--eval", script],
        capture_output=True, text=True, timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert '"count":201' in ran.stdout.replace(" ", ""), ran.stdout
