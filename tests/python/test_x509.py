"""MONGODB-X509 through pymongo: a client certificate signed by the server's CA logs in as the
user of $external named by the certificate's subject (RFC 2253, last RDN first), with
authMechanism=MONGODB-X509 and tlsCertificateKeyFile (and mongosh's --authenticationMechanism);
a certificate without a user, a user name other than the subject, and another database are
refused as mongod refuses them; authenticate's and speculativeAuthenticate's replies and errors;
$external holding users without passwords and no data; only a certificate the CA vouches for
authenticating, whatever the TLS flags."""

import json
import pathlib
import shutil
import subprocess
import tempfile

import pymongo
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from pymongo.errors import OperationFailure


from certificates import certificate, name, pem
from conftest import Server
from test_tls import SELECTION_TIMEOUT_MS

# A comma in the common name: RFC 2253 escapes it in the user name.
SUBJECT = "CN=pymongo client\\, first,OU=Clients,O=Myriad Tests,C=US"
STRANGER = "CN=stranger,OU=Clients,O=Myriad Tests,C=US"


@pytest.fixture(scope="module")
def files():
    directory = tempfile.TemporaryDirectory(prefix="myriad-x509-")
    path = pathlib.Path(directory.name)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name("Myriad x509 test CA")
    ca = certificate(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)
    written = {"ca": pem(ca)}
    server_key = ec.generate_private_key(ec.SECP256R1())
    written["server"] = pem(certificate(name("localhost"), ca_name, server_key.public_key(), ca_key, names=("localhost", "127.0.0.1"), purposes=(ExtendedKeyUsageOID.SERVER_AUTH,)), server_key)
    for file_name, common_name in (("client", "pymongo client, first"), ("stranger", "stranger")):
        key = ec.generate_private_key(ec.SECP256R1())
        written[file_name] = pem(certificate(name(common_name, organisation=True), ca_name, key.public_key(), ca_key, purposes=(ExtendedKeyUsageOID.CLIENT_AUTH,)), key)
    # A certificate with the subject of "client", signed by a CA the server does not know.
    other_ca_key = ec.generate_private_key(ec.SECP256R1())
    untrusted_key = ec.generate_private_key(ec.SECP256R1())
    written["untrusted"] = pem(certificate(name("pymongo client, first", organisation=True), name("Unknown CA"), untrusted_key.public_key(), other_ca_key,
                                           purposes=(ExtendedKeyUsageOID.CLIENT_AUTH,)), untrusted_key)
    for file_name, text in written.items():
        (path / f"{file_name}.pem").write_bytes(text)
    yield {file_name: str(path / f"{file_name}.pem") for file_name in written}
    directory.cleanup()


@pytest.fixture(scope="module")
def server(files):
    running = Server(("--auth", "--tlsMode", "requireTLS", "--tlsCertificateKeyFile", files["server"], "--tlsCAFile", files["ca"]),
                     selection_timeout_ms=SELECTION_TIMEOUT_MS)
    tls = {"tls": True, "tlsCAFile": files["ca"], "tlsCertificateKeyFile": files["client"]}
    with running.client(**tls) as anonymous:
        anonymous.admin.command("createUser", "root", pwd="root-secret", roles=["root"])
    with running.client(username="root", password="root-secret", **tls) as root:
        root["$external"].command("createUser", SUBJECT, roles=[{"role": "readWrite", "db": "x509shop"}])
    yield running
    running.stop()


def test_a_certificate_logs_in_as_its_subject(server, files):
    with server.client(tls=True, tlsCAFile=files["ca"], tlsCertificateKeyFile=files["client"],
                       authMechanism="MONGODB-X509") as client:
        client.x509shop.items.insert_one({"by": "pymongo"})
        assert client.x509shop.items.count_documents({}) == 1
        status = client.admin.command("connectionStatus")["authInfo"]
        assert status["authenticatedUsers"] == [{"user": SUBJECT, "db": "$external"}]
        assert status["authenticatedUserRoles"] == [{"role": "readWrite", "db": "x509shop"}]
        with pytest.raises(OperationFailure) as refused:
            client.elsewhere.items.find_one()
        assert refused.value.code == 13
    # Naming the subject explicitly works too.
    with server.client(tls=True, tlsCAFile=files["ca"], tlsCertificateKeyFile=files["client"],
                       authMechanism="MONGODB-X509", username=SUBJECT) as named:
        assert named.x509shop.items.count_documents({}) == 1


def test_refusals(server, files):
    with server.client(tls=True, tlsCAFile=files["ca"], tlsCertificateKeyFile=files["stranger"],
                       authMechanism="MONGODB-X509") as stranger:
        with pytest.raises(OperationFailure) as unknown:
            stranger.x509shop.items.find_one()
        assert unknown.value.code == 11
        assert f'Could not find user "{STRANGER}" for db "$external"' in str(unknown.value)
    with server.client(tls=True, tlsCAFile=files["ca"], tlsCertificateKeyFile=files["stranger"],
                       authMechanism="MONGODB-X509", username=SUBJECT) as impostor:
        with pytest.raises(OperationFailure) as mismatch:
            impostor.x509shop.items.find_one()
        assert mismatch.value.code == 18
        assert "Authentication failed" in str(mismatch.value)
    with server.client(tls=True, tlsCAFile=files["ca"], tlsCertificateKeyFile=files["client"]) as raw:
        with pytest.raises(OperationFailure) as elsewhere:
            raw.admin.command({"authenticate": 1, "mechanism": "MONGODB-X509"})
        assert elsewhere.value.code == 17
        reply = raw["$external"].command({"authenticate": 1, "mechanism": "MONGODB-X509"})
        assert (reply["user"], reply["dbname"]) == (SUBJECT, "$external")


MONGOSH = shutil.which("mongosh")


@pytest.mark.skipif(MONGOSH is None, reason="mongosh is optional and not installed")
def test_mongosh_logs_in_with_its_certificate(server, files):
    script = 'print(JSON.stringify(db.runCommand({ connectionStatus: 1 }).authInfo.authenticatedUsers));'
    completed = subprocess.run(
        [MONGOSH, "--quiet", "--norc", f"mongodb://127.0.0.1:{server.port}/?directConnection=true",
         "--tls", "--tlsCAFile", files["ca"], "--tlsCertificateKeyFile", files["client"],
         "--authenticationMechanism", "MONGODB-X509", "--authenticationDatabase", "$external", "--eval", script],
        capture_output=True, text=True, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout.strip().splitlines()[-1]) == [{"user": SUBJECT, "db": "$external"}]


def code_of(call):
    with pytest.raises(OperationFailure) as failure:
        call()
    return failure.value.code


def tls(files, certificate="client"):
    options = {"tls": True, "tlsCAFile": files["ca"]}
    if certificate:
        options["tlsCertificateKeyFile"] = files[certificate]
    return options


def test_the_external_user_and_its_login_as_mongod_shows_them(server, files):
    with server.client(username="root", password="root-secret", **tls(files)) as root:
        with server.client(authMechanism="MONGODB-X509", **tls(files)) as client:
            client.admin.command("ping")
        (user,) = root["$external"].command("usersInfo", SUBJECT, showCredentials=True)["users"]
        assert user["_id"] == f"$external.{SUBJECT}"
        assert user["mechanisms"] == ["external"]
        assert user["credentials"] == {"external": True}
        lines = [json.loads(line) for line in root.admin.command("getLog", "global")["log"]]
        assert any(line["id"] == 20250 and line["attr"].get("mechanism") == "MONGODB-X509" and line["attr"].get("principalName") == SUBJECT
                   for line in lines), "a 20250 line for the certificate's user"
        mechanisms = root.admin.command("getParameter", 1, authenticationMechanisms=1)["authenticationMechanisms"]
        assert "MONGODB-X509" in mechanisms


def test_authenticate_and_speculative_authenticate_answer_as_mongod(server, files):
    with server.client(**tls(files)) as connected:
        speculative = {"authenticate": 1, "mechanism": "MONGODB-X509", "db": "$external"}
        hello = connected.admin.command("hello", speculativeAuthenticate=speculative)
        assert hello["speculativeAuthenticate"] == {"dbname": "$external", "user": SUBJECT}
        mismatched = {"authenticate": 1, "mechanism": "MONGODB-X509", "user": STRANGER}
        assert "speculativeAuthenticate" not in connected.admin.command("hello", speculativeAuthenticate=mismatched), \
            "a failed speculative attempt is silent"
        named = connected["$external"].command({"authenticate": 1, "mechanism": "MONGODB-X509", "user": SUBJECT})
        assert (named["user"], named["dbname"]) == (SUBJECT, "$external")
        external = connected["$external"]
        assert code_of(lambda: external.command(mismatched)) == 18
        assert code_of(lambda: external.command({"authenticate": 1, "mechanism": "SCRAM-SHA-256"})) == 18
        assert code_of(lambda: external.command({"authenticate": 1, "mechanism": "MONGODB-X509", "colour": "blue"})) == 40415
        assert code_of(lambda: external.command({"authenticate": 1})) == 40414
    with server.client(**tls(files, "stranger")) as stranger:
        assert code_of(lambda: stranger["$external"].command({"authenticate": 1, "mechanism": "MONGODB-X509"})) == 11


def test_external_holds_users_without_passwords_and_no_data(server, files):
    with server.client(username="root", password="root-secret", **tls(files)) as root:
        external = root["$external"]
        assert code_of(lambda: external.command("createUser", STRANGER, pwd="p", roles=[])) == 2
        assert code_of(lambda: external.command("createUser", STRANGER, roles=["read"])) == 31, "no role is built into $external"
        external.command("createUser", STRANGER, roles=[])
        try:
            assert code_of(lambda: external.command("updateUser", STRANGER, pwd="p")) == 2
            external.command("grantRolesToUser", STRANGER, roles=[{"role": "read", "db": "x509shop"}])
            assert code_of(lambda: external.command("insert", "items", documents=[{}])) == 73
            assert code_of(lambda: external.command("find", "items")) == 73
            # A SCRAM conversation for an external user fails: it has no SCRAM credentials.
            with server.client(username=STRANGER, password="p", authSource="$external", authMechanism="SCRAM-SHA-256", **tls(files)) as scram:
                with pytest.raises(OperationFailure):
                    scram.x509shop.command("ping")
        finally:
            external.command("dropUser", STRANGER)


def _x509_server(files, *extra):
    running = Server(("--auth", "--tlsMode", "requireTLS", "--tlsCertificateKeyFile", files["server"], "--tlsCAFile", files["ca"], *extra),
                     selection_timeout_ms=SELECTION_TIMEOUT_MS)
    with running.client(**tls(files)) as anonymous:
        anonymous.admin.command("createUser", "root", pwd="root-secret", roles=["root"])
    with running.client(username="root", password="root-secret", **tls(files)) as root:
        root["$external"].command("createUser", SUBJECT, roles=[{"role": "read", "db": "x509shop"}])
    return running


def test_only_a_certificate_the_ca_vouches_for_authenticates(files):
    # Certificates optional: a TLS client without one has no subject to log in as.
    running = _x509_server(files, "--tlsAllowConnectionsWithoutCertificates")
    try:
        with running.client(**tls(files, None)) as without:
            assert code_of(lambda: without["$external"].command({"authenticate": 1, "mechanism": "MONGODB-X509"})) == 18
    finally:
        running.stop()
    # Invalid certificates allowed: one from an unknown CA connects but names no user, even one
    # whose subject exists; one from the CA still logs in.
    running = _x509_server(files, "--tlsAllowInvalidCertificates")
    try:
        with running.client(**tls(files, "untrusted")) as untrusted:
            untrusted.admin.command("ping")
            assert code_of(lambda: untrusted["$external"].command({"authenticate": 1, "mechanism": "MONGODB-X509"})) == 18
        with running.client(authMechanism="MONGODB-X509", **tls(files)) as trusted:
            trusted.x509shop.items.find_one()
    finally:
        running.stop()
    # A plain connection (preferTLS) has no certificate at all.
    running = Server(("--auth", "--tlsMode", "preferTLS", "--tlsCertificateKeyFile", files["server"]), selection_timeout_ms=SELECTION_TIMEOUT_MS)
    try:
        with running.client() as plain:
            assert code_of(lambda: plain["$external"].command({"authenticate": 1, "mechanism": "MONGODB-X509"})) == 18
    finally:
        running.stop()
