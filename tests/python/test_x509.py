"""MONGODB-X509 through pymongo: a client certificate signed by the server's CA logs in as the
user of $external named by the certificate's subject (RFC 2253, last RDN first), with
authMechanism=MONGODB-X509 and tlsCertificateKeyFile (and mongosh's --authenticationMechanism);
a certificate without a user, a user name other than the subject, and another database are
refused as mongod refuses them."""

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

SUBJECT = "CN=pymongo client,OU=Clients,O=Myriad Tests,C=US"
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
    for file_name, common_name in (("client", "pymongo client"), ("stranger", "stranger")):
        key = ec.generate_private_key(ec.SECP256R1())
        written[file_name] = pem(certificate(name(common_name, organisation=True), ca_name, key.public_key(), ca_key, purposes=(ExtendedKeyUsageOID.CLIENT_AUTH,)), key)
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
