"""Authentication and user management through pymongo and mongosh against `myriad --auth`:
both SCRAM mechanisms, wrong passwords and their log lines, saslStart's refusals, hello's
saslSupportedMechs and speculativeAuthenticate, the commands an unauthenticated connection may
run, many clients logging in at once, user and role commands (custom roles with inherited
privileges, grantRole on the role's database), and the shapes of usersInfo and
connectionStatus. Role-by-role authorization is test_authorization.py's."""

import json
import shutil
import subprocess
import threading

import pymongo
import pytest
from bson import Binary
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


def code_of(call):
    with pytest.raises(OperationFailure) as failure:
        call()
    return failure.value.code


def test_sasl_refusals_log_lines_and_supported_mechanisms(auth_server, root):
    root.admin.command("createUser", "ann", pwd="pencil", roles=[{"role": "readWrite", "db": "shop"}])
    for mechanism in ("SCRAM-SHA-1", "SCRAM-SHA-256"):
        with connect(auth_server, username="ann", password="pencil", authMechanism=mechanism) as ann:
            status = ann.admin.command("connectionStatus")["authInfo"]
            assert status["authenticatedUsers"] == [{"user": "ann", "db": "admin"}]
            assert status["authenticatedUserRoles"] == [{"role": "readWrite", "db": "shop"}]
        with connect(auth_server, username="ann", password="crayon", authMechanism=mechanism) as wrong:
            assert code_of(lambda: wrong.shop.command("ping")) == 18
    with connect(auth_server) as anonymous:
        # A raw conversation for an unknown user answers AuthenticationFailed; an unknown
        # mechanism MechanismUnavailable.
        payload = Binary(b"n,,n=nobody,r=abcdefgh")
        assert code_of(lambda: anonymous.admin.command("saslStart", 1, mechanism="SCRAM-SHA-256", payload=payload)) == 18
        assert code_of(lambda: anonymous.admin.command("saslStart", 1, mechanism="PLAIN", payload="x")) == 334
        hello = anonymous.admin.command("hello", saslSupportedMechs="admin.ann")
        assert hello["saslSupportedMechs"] == ["SCRAM-SHA-1", "SCRAM-SHA-256"]
    lines = [json.loads(line) for line in root.admin.command("getLog", "global")["log"]]
    failures = [line for line in lines if line["id"] == 20249 and line["attr"].get("principalName") == "ann"]
    assert failures, "a 20249 line for ann"
    assert failures[0]["msg"] == "Authentication failed"
    assert failures[0]["attr"]["authenticationDatabase"] == "admin"
    assert failures[0]["attr"]["mechanism"].startswith("SCRAM-SHA-")
    assert "AuthenticationFailed" in failures[0]["attr"]["error"]


def test_unauthenticated_connections_run_only_the_handshake_commands(auth_server, root):
    with connect(auth_server) as anonymous:
        for allowed in ("hello", "ping", "buildInfo", "connectionStatus", "listCommands", "logout"):
            anonymous.admin.command(allowed)
        for refused in ({"insert": "items", "documents": [{}]}, {"listDatabases": 1}, {"serverStatus": 1}):
            assert code_of(lambda: anonymous.admin.command(refused)) == 13, refused
        commands = anonymous.admin.command("listCommands")["commands"]
        assert commands["find"]["requiresAuth"] is True
        assert commands["hello"]["requiresAuth"] is False


def test_many_clients_log_in_at_once(auth_server, root):
    root.admin.command("createUser", "crowd", pwd="p", roles=[{"role": "readWrite", "db": "crowd"}])
    errors = []

    def log_in_and_insert(index):
        mechanism = "SCRAM-SHA-1" if index % 2 == 0 else "SCRAM-SHA-256"
        try:
            with connect(auth_server, username="crowd", password="p", authMechanism=mechanism) as client:
                client.crowd.logins.insert_one({"index": index})
        except Exception as error:  # reported below
            errors.append((index, error))

    threads = [threading.Thread(target=log_in_and_insert, args=(index,)) for index in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert root.crowd.logins.count_documents({}) == 24


def test_user_commands_manage_users(auth_server, root):
    users = root.usershop
    users.command("createUser", "bob", pwd="one", roles=["read"], customData={"team": "blue"})
    assert code_of(lambda: users.command("createUser", "carl", pwd="one", roles=["noSuchRole"])) == 31
    (bob,) = users.command("usersInfo", "bob")["users"]
    assert "credentials" not in bob
    assert isinstance(bob["userId"], Binary) and bob["userId"].subtype == 4
    users.command("updateUser", "bob", pwd="two")
    users.command("grantRolesToUser", "bob", roles=["readWrite"])
    users.command("revokeRolesFromUser", "bob", roles=["read"])
    with connect(auth_server, username="bob", password="two", authSource="usershop") as bob_client:
        bob_client.usershop.items.insert_one({})
        assert len(bob_client.usershop.command("usersInfo", "bob")["users"]) == 1, "a user may see itself"
        assert code_of(lambda: bob_client.usershop.command("usersInfo", 1)) == 13
    users.command("createUser", "dave", pwd="x", roles=[])
    assert code_of(lambda: users.command("dropUser", "nobody")) == 11
    users.command("dropUser", "dave")
    assert users.command("dropAllUsersFromDatabase", 1)["n"] == 1
    assert users.command("usersInfo", 1)["users"] == []


def test_custom_roles_grant_their_privileges_and_inherited_ones(auth_server, root):
    shop = root.roleshop
    orders = {"db": "roleshop", "collection": "orders"}
    shop.command("createRole", "orderReader", privileges=[{"resource": orders, "actions": ["find"]}], roles=[])
    shop.command("createRole", "orderClerk", privileges=[{"resource": orders, "actions": ["insert"]}], roles=["orderReader"])
    assert code_of(lambda: shop.command("createRole", "orderClerk", privileges=[], roles=[])) == 51002
    assert code_of(lambda: shop.command("createRole", "odd", privileges=[{"resource": orders, "actions": ["fly"]}], roles=[])) == 9
    elsewhere = {"db": "other", "collection": ""}
    assert code_of(lambda: shop.command("createRole", "wide", privileges=[{"resource": elsewhere, "actions": ["find"]}], roles=[])) == 2
    shop.command("createUser", "clerk", pwd="p", roles=["orderClerk"])
    with connect(auth_server, username="clerk", password="p", authSource="roleshop") as clerk:
        clerk.roleshop.orders.insert_one({"n": 1})
        clerk.roleshop.orders.find_one()
        assert code_of(lambda: clerk.roleshop.items.find_one()) == 13
        assert code_of(lambda: clerk.roleshop.items.insert_one({})) == 13
        (clerk_role,) = shop.command("rolesInfo", "orderClerk", showPrivileges=True)["roles"]
        assert clerk_role["isBuiltin"] is False
        assert clerk_role["inheritedRoles"] == [{"role": "orderReader", "db": "roleshop"}]
        assert len(clerk_role["inheritedPrivileges"]) == 2
        shop.command("revokePrivilegesFromRole", "orderReader", privileges=[{"resource": orders, "actions": ["find"]}])
        assert code_of(lambda: clerk.roleshop.orders.find_one()) == 13
        shop.command("grantPrivilegesToRole", "orderReader", privileges=[{"resource": orders, "actions": ["find"]}])
        clerk.roleshop.orders.find_one()
        assert code_of(lambda: shop.command("grantRolesToRole", "orderReader", roles=["orderClerk"])) == 49
        assert code_of(lambda: shop.command("updateRole", "orderClerk", roles=["orderClerk"])) == 49
        shop.command("dropRole", "orderReader")
        assert code_of(lambda: shop.command("dropRole", "orderReader")) == 31
        assert code_of(lambda: clerk.roleshop.orders.find_one()) == 13
    assert shop.command("rolesInfo", "orderClerk")["roles"][0]["roles"] == []
    assert shop.command("rolesInfo", "read")["roles"][0]["isBuiltin"] is True


def test_hello_answers_speculative_authentication(auth_server, root):
    with connect(auth_server) as anonymous:
        first = {"saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": Binary(b"n,,n=root,r=clientnonce"), "db": "admin"}
        answer = anonymous.admin.command("hello", speculativeAuthenticate=first)["speculativeAuthenticate"]
        assert answer["conversationId"] == 1 and answer["done"] is False
        server_first = bytes(answer["payload"])
        assert server_first.startswith(b"r=clientnonce") and server_first.endswith(b",i=15000"), server_first
        unknown = {"saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": Binary(b"n,,n=nobody,r=x"), "db": "admin"}
        assert "speculativeAuthenticate" not in anonymous.admin.command("hello", speculativeAuthenticate=unknown)


def test_granting_a_role_needs_grant_role_on_its_database(auth_server, root):
    root.admin.command("createUser", "keeper", pwd="p", roles=[{"role": "userAdmin", "db": "keptshop"}])
    with connect(auth_server, username="keeper", password="p") as keeper:
        kept = keeper.keptshop
        kept.command("createUser", "local", pwd="p", roles=["read"])
        assert code_of(lambda: kept.command("createUser", "foreign", pwd="p", roles=[{"role": "read", "db": "other"}])) == 13
        assert code_of(lambda: kept.command("grantRolesToUser", "local", roles=[{"role": "readWrite", "db": "other"}])) == 13
        kept.command("grantRolesToUser", "local", roles=["readWrite"])
        kept.command("updateUser", "local", pwd="q")
