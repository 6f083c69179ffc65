"""Certificates for the TLS tests, made here with the cryptography package: one helper for
every test module (a CA, servers, clients and cluster members)."""

import datetime
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import NameOID


def name(common_name, organisation=False):
    """`CN=common_name`, with `OU=Clients,O=Myriad Tests,C=US` before it when `organisation`."""
    attributes = []
    if organisation:
        attributes = [
            x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Myriad Tests"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "Clients"),
        ]
    return x509.Name(attributes + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def certificate(subject, issuer, public_key, signing_key, *, ca=False, names=(), purposes=()):
    """A certificate valid from yesterday for 30 days; `names` become DNS or IP alternative
    names, `purposes` its extended key usages."""
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if names:
        alternatives = [x509.DNSName(n) if not n[0].isdigit() else x509.IPAddress(ipaddress.ip_address(n)) for n in names]
        builder = builder.add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
    if purposes:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(purposes)), critical=False)
    return builder.sign(signing_key, hashes.SHA256())


def pem(certificate_, key=None):
    """The certificate in PEM, followed by its private key (PKCS#8) when given."""
    text = certificate_.public_bytes(serialization.Encoding.PEM)
    if key is not None:
        text += key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return text
