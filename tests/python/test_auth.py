"""Authentication through pymongo and mongosh against `myriad --auth`: both SCRAM mechanisms,
wrong passwords, unauthenticated refusals, and the shapes of usersInfo and connectionStatus."""

import json
import shutil
import subprocess

import pymongo
import pytest
from pymongo.errors import OperationFailure

MONGOSH = shutil.which("mongosh")
ROOT_PASSWORD = "root-secret"


def connect(server, **options):
    return pymongo.MongoClient(server.uri(), serverSelectionTimeoutMS=10_000, **options)


@pytest.fixture(scope="module")
def root(auth_server):
    """Creates the first user through the localhost exception, then logs in as it."""
    anonymous = connect(auth_server)
    anonymous.admin.command("createUser", "root", pwd=ROOT_PASSWORD, roles=["root"])
    anonymous.close()
    client = connect(auth_server, username="root", password=ROOT_PASSWORD, authSource="admin")
    yield client
    client.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-1", "SCRAM-SHA-256"])
def test_both_mechanisms_log_in(auth_server, root, mechanism):
    user = "pat_" + mechanism.replace("-", "_").lower()
    root.shop.command("createUser", user, pwd="pencil", roles=["readWrite"])
    client = connect(auth_server, username=user, password="pencil", authSource="shop", authMechanism=mechanism)
    client.shop.items.insert_one({"by": user})
    assert client.shop.items.count_documents({"by": user}) == 1
    status = client.shop.command("connectionStatus")
    assert status["authInfo"]["authenticatedUsers"] == [{"user": user, "db": "shop"}]
    assert status["authInfo"]["authenticatedUserRoles"] == [{"role": "readWrite", "db": "shop"}]
    client.close()
    wrong = connect(auth_server, username=user, password="crayon", authSource="shop", authMechanism=mechanism)
    with pytest.raises(OperationFailure) as failure:
        wrong.shop.command("ping")
    assert failure.value.code == 18
    assert "Authentication failed" in str(failure.value)
    wrong.close()


def test_unauthenticated_commands_are_refused(auth_server, root):
    anonymous = connect(auth_server)
    assert anonymous.admin.command("ping")["ok"] == 1
    assert anonymous.admin.command("hello")["isWritablePrimary"] is True
    with pytest.raises(OperationFailure) as failure:
        anonymous.shop.items.find_one()
    assert failure.value.code == 13
    assert failure.value.details["errmsg"] == "Command find requires authentication"
    anonymous.close()


def test_users_info_shapes(auth_server, root):
    root.reports.command("createUser", "quinn", pwd="secret", roles=["read", {"role": "readWrite", "db": "shop"}],
                         customData={"team": "blue"})
    info = root.reports.command("usersInfo", "quinn")
    assert info["ok"] == 1
    (user,) = info["users"]
    assert sorted(user) == ["_id", "customData", "db", "mechanisms", "roles", "user", "userId"]
    assert user["_id"] == "reports.quinn"
    assert (user["user"], user["db"]) == ("quinn", "reports")
    assert user["roles"] == [{"role": "read", "db": "reports"}, {"role": "readWrite", "db": "shop"}]
    assert user["mechanisms"] == ["SCRAM-SHA-1", "SCRAM-SHA-256"]
    assert user["customData"] == {"team": "blue"}
    with_credentials = root.reports.command("usersInfo", {"user": "quinn", "db": "reports"}, showCredentials=True)
    credentials = with_credentials["users"][0]["credentials"]
    assert sorted(credentials) == ["SCRAM-SHA-1", "SCRAM-SHA-256"]
    assert credentials["SCRAM-SHA-1"]["iterationCount"] == 10000
    assert credentials["SCRAM-SHA-256"]["iterationCount"] == 15000
    assert sorted(credentials["SCRAM-SHA-256"]) == ["iterationCount", "salt", "serverKey", "storedKey"]
    stored = root.admin["system.users"].find_one({"_id": "reports.quinn"})
    assert "secret" not in json.dumps(stored, default=str)
    with pytest.raises(OperationFailure) as failure:
        root.reports.command("createUser", "quinn", pwd="again", roles=[])
    assert failure.value.code == 51003
    assert root.reports.command("dropUser", "quinn")["ok"] == 1
    assert root.reports.command("usersInfo", 1)["users"] == []


@pytest.mark.skipif(MONGOSH is None, reason="mongosh is optional and not installed")
def test_mongosh_logs_in_with_user_and_password(auth_server, root):
    root.admin.command("createUser", "shelly", pwd="shell-secret", roles=[{"role": "readWrite", "db": "shellshop"}])
    script = 'db.getSiblingDB("shellshop").notes.insertOne({ n: 1 }); ' \
             'print(JSON.stringify({ count: db.getSiblingDB("shellshop").notes.countDocuments(), ' \
             'user: db.runCommand({ connectionStatus: 1 }).authInfo.authenticatedUsers }));'
    completed = subprocess.run(
        [MONGOSH, "--quiet", "--norc", auth_server.uri(), "-u", "shelly", "-p", "shell-secret",
         "--authenticationDatabase", "admin", "--eval", script],
        capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result == {"count": 1, "user": [{"user": "shelly", "db": "admin"}]}
    refused = subprocess.run(
        [MONGOSH, "--quiet", "--norc", auth_server.uri(), "-u", "shelly", "-p", "wrong",
         "--authenticationDatabase", "admin", "--eval", "print(1)"],
        capture_output=True, text=True, timeout=120,
    )
    assert refused.returncode != 0
    assert "Authentication failed" in refused.stdout + refused.stderr


def test_iteration_counts_are_server_parameters(auth_server, root):
    assert root.admin.command("getParameter", 1, scramIterationCount=1)["scramIterationCount"] == 10000
    assert root.admin.command("getParameter", 1, scramSHA256IterationCount=1)["scramSHA256IterationCount"] == 15000
    with pytest.raises(OperationFailure) as failure:
        root.admin.command("setParameter", 1, scramSHA256IterationCount=4999)
    assert failure.value.code == 2
    root.admin.command("setParameter", 1, scramSHA256IterationCount=20000)
    try:
        root.counts.command("createUser", "iris", pwd="pencil", roles=[])
        credentials = root.counts.command("usersInfo", "iris", showCredentials=True)["users"][0]["credentials"]
        assert credentials["SCRAM-SHA-256"]["iterationCount"] == 20000
        assert credentials["SCRAM-SHA-1"]["iterationCount"] == 10000
        login = connect(auth_server, username="iris", password="pencil", authSource="counts", authMechanism="SCRAM-SHA-256")
        assert login.counts.command("connectionStatus")["authInfo"]["authenticatedUsers"] == [{"user": "iris", "db": "counts"}]
        login.close()
    finally:
        root.admin.command("setParameter", 1, scramSHA256IterationCount=15000)
