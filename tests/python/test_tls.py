"""TLS through pymongo: a server in each TLS mode, with a CA and certificates made here (the
cryptography package), connected with tls=true and tlsCAFile."""

import tempfile
import pathlib

import pymongo
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from certificates import certificate, name, pem

from conftest import Server, start_up_failure

# A refused client fails within this; the failure is what the tests check, not the time.
SELECTION_TIMEOUT_MS = 3000


@pytest.fixture(scope="module")
def certificates():
    directory = tempfile.TemporaryDirectory(prefix="myriad-tls-")
    path = pathlib.Path(directory.name)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = certificate(name("Myriad test CA"), name("Myriad test CA"), ca_key.public_key(), ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = certificate(name("localhost"), name("Myriad test CA"), server_key.public_key(), ca_key,
                          names=("localhost", "127.0.0.1"), purposes=(ExtendedKeyUsageOID.SERVER_AUTH,))
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = certificate(name("test client"), name("Myriad test CA"), client_key.public_key(), ca_key,
                          purposes=(ExtendedKeyUsageOID.CLIENT_AUTH,))
    other_ca_key = ec.generate_private_key(ec.SECP256R1())
    untrusted_key = ec.generate_private_key(ec.SECP256R1())
    untrusted = certificate(name("stranger"), name("Unknown CA"), untrusted_key.public_key(), other_ca_key,
                             purposes=(ExtendedKeyUsageOID.CLIENT_AUTH,))
    (path / "ca.pem").write_bytes(pem(ca))
    (path / "server.pem").write_bytes(pem(server, server_key))
    (path / "client.pem").write_bytes(pem(client, client_key))
    (path / "untrusted.pem").write_bytes(pem(untrusted, untrusted_key))
    yield {name: str(path / f"{name}.pem") for name in ("ca", "server", "client", "untrusted")}
    directory.cleanup()


def _server(certificates, mode, *extra):
    return Server(("--tlsMode", mode, "--tlsCertificateKeyFile", certificates["server"], *extra), selection_timeout_ms=SELECTION_TIMEOUT_MS)


def _round_trip(client):
    collection = client.tls_test.items
    collection.insert_one({"n": 1})
    assert collection.find_one({"n": 1})["n"] == 1
    collection.drop()


def test_require_tls_serves_tls_and_refuses_plain(certificates):
    server = _server(certificates, "requireTLS")
    try:
        with server.client(tls=True, tlsCAFile=certificates["ca"]) as client:
            _round_trip(client)
            assert client.admin.command("ping")["ok"] == 1
        with server.client() as plain:
            with pytest.raises(pymongo.errors.ServerSelectionTimeoutError):
                plain.admin.command("ping")
    finally:
        server.stop()


def test_prefer_tls_serves_both_on_one_port(certificates):
    server = _server(certificates, "preferTLS")
    try:
        with server.client(tls=True, tlsCAFile=certificates["ca"]) as client:
            _round_trip(client)
        with server.client() as plain:
            _round_trip(plain)
    finally:
        server.stop()


def test_a_ca_file_requires_a_client_certificate(certificates):
    server = _server(certificates, "requireTLS", "--tlsCAFile", certificates["ca"])
    try:
        with server.client(tls=True, tlsCAFile=certificates["ca"], tlsCertificateKeyFile=certificates["client"]) as client:
            _round_trip(client)
        with server.client(tls=True, tlsCAFile=certificates["ca"]) as anonymous:
            with pytest.raises(pymongo.errors.ServerSelectionTimeoutError):
                anonymous.admin.command("ping")
        with server.client(tls=True, tlsCAFile=certificates["ca"], tlsCertificateKeyFile=certificates["untrusted"]) as stranger:
            with pytest.raises(pymongo.errors.ServerSelectionTimeoutError):
                stranger.admin.command("ping")
    finally:
        server.stop()


def test_allow_tls_serves_both_on_one_port(certificates):
    server = _server(certificates, "allowTLS")
    try:
        with server.client() as plain:
            _round_trip(plain)
        with server.client(tls=True, tlsCAFile=certificates["ca"]) as client:
            _round_trip(client)
    finally:
        server.stop()


def test_certificates_optional_or_unchecked_when_the_flags_say_so(certificates):
    server = _server(certificates, "requireTLS", "--tlsCAFile", certificates["ca"],
                     "--tlsAllowConnectionsWithoutCertificates")
    try:
        with server.client(tls=True, tlsCAFile=certificates["ca"]) as anonymous:
            _round_trip(anonymous)
        with server.client(tls=True, tlsCAFile=certificates["ca"], tlsCertificateKeyFile=certificates["untrusted"]) as stranger:
            with pytest.raises(pymongo.errors.ServerSelectionTimeoutError):
                stranger.admin.command("ping")
    finally:
        server.stop()
    server = _server(certificates, "requireTLS", "--tlsCAFile", certificates["ca"], "--tlsAllowInvalidCertificates")
    try:
        with server.client(tls=True, tlsCAFile=certificates["ca"], tlsCertificateKeyFile=certificates["untrusted"]) as stranger:
            _round_trip(stranger)
    finally:
        server.stop()


def test_disabled_refuses_tls(certificates):
    server = Server(selection_timeout_ms=SELECTION_TIMEOUT_MS)
    try:
        with server.client(tls=True, tlsCAFile=certificates["ca"]) as client:
            with pytest.raises(pymongo.errors.ServerSelectionTimeoutError):
                client.admin.command("ping")
        with server.client() as plain:
            _round_trip(plain)
    finally:
        server.stop()


def test_a_missing_certificate_file_stops_start_up_with_a_message(tmp_path):
    stopped = start_up_failure("--dbpath", str(tmp_path), "--port", "0", "--tlsMode", "requireTLS",
                               "--tlsCertificateKeyFile", "/nonexistent/server.pem")
    assert stopped.returncode != 0
    assert "tlsCertificateKeyFile /nonexistent/server.pem" in stopped.stderr, stopped.stderr
