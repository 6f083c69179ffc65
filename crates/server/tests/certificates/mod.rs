//! Test certificates made with rcgen: a CA, a server certificate for localhost and 127.0.0.1,
//! and a client certificate, written as PEM files into a temporary directory.

#![allow(dead_code)]

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

pub struct Certificates {
    directory: tempfile::TempDir,
    /// The CA's certificate (what `tlsCAFile` names, on either side).
    pub ca_file: PathBuf,
    /// The server's certificate and key in one file (`--tlsCertificateKeyFile`).
    pub server_file: PathBuf,
    /// A client certificate signed by the CA, with its key.
    pub client_file: PathBuf,
    /// A client certificate signed by a CA the server does not know, with its key.
    pub untrusted_client_file: PathBuf,
    /// A client certificate from the CA whose subject has several RDNs, for MONGODB-X509.
    pub x509_client_file: PathBuf,
    /// Its subject as MongoDB writes it (RFC 2253: the last RDN first).
    pub x509_subject: String,
    /// Another CA-signed client certificate, whose subject is [`OTHER_X509_SUBJECT`].
    pub other_x509_client_file: PathBuf,
    /// A certificate like `x509_client_file` (same subject) from the unknown CA.
    pub untrusted_x509_client_file: PathBuf,
}

/// The subject of `other_x509_client_file`.
pub const OTHER_X509_SUBJECT: &str = "CN=second client,OU=Clients,O=Myriad Tests,C=US";

impl Certificates {
    pub fn generate() -> Certificates {
        let directory = tempfile::tempdir().expect("temp dir");
        let (ca_pem, issuer) = certificate_authority("Myriad test CA");
        let (_, other_issuer) = certificate_authority("Unknown CA");
        let server_pem = leaf(&issuer, "localhost", &["localhost", "127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
        let client_pem = leaf(&issuer, "test client", &[], ExtendedKeyUsagePurpose::ClientAuth);
        let untrusted_pem = leaf(&other_issuer, "stranger", &[], ExtendedKeyUsagePurpose::ClientAuth);
        let x509_pem = x509_client(&issuer, "x509 client, first");
        let other_x509_pem = x509_client(&issuer, "second client");
        let untrusted_x509_pem = x509_client(&other_issuer, "x509 client, first");
        let write = |name: &str, contents: &str| {
            let path = directory.path().join(name);
            std::fs::write(&path, contents).expect("write PEM");
            path
        };
        Certificates {
            ca_file: write("ca.pem", &ca_pem),
            server_file: write("server.pem", &server_pem),
            client_file: write("client.pem", &client_pem),
            untrusted_client_file: write("untrusted.pem", &untrusted_pem),
            x509_client_file: write("x509-client.pem", &x509_pem),
            x509_subject: "CN=x509 client\\, first,OU=Clients,O=Myriad Tests,C=US".to_string(),
            other_x509_client_file: write("x509-other.pem", &other_x509_pem),
            untrusted_x509_client_file: write("x509-untrusted.pem", &untrusted_x509_pem),
            directory,
        }
    }

    pub fn directory(&self) -> &std::path::Path {
        self.directory.path()
    }
}

fn certificate_authority(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().expect("CA key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let certificate = params.self_signed(&key).expect("self-signed CA");
    (certificate.pem(), Issuer::new(params, key))
}

/// A certificate and its key, PEM, signed by `issuer`.
fn leaf(issuer: &Issuer<'static, KeyPair>, common_name: &str, names: &[&str], purpose: ExtendedKeyUsagePurpose) -> String {
    let key = KeyPair::generate().expect("key");
    let names: Vec<String> = names.iter().map(|name| name.to_string()).collect();
    let mut params = CertificateParams::new(names).expect("parameters");
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.extended_key_usages = vec![purpose];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    let certificate = params.signed_by(&key, issuer).expect("signed certificate");
    format!("{}{}", certificate.pem(), key.serialize_pem())
}

/// A client certificate with subject C=US, O=Myriad Tests, OU=Clients, CN=`common_name` (in
/// that order in the certificate), and its key.
fn x509_client(issuer: &Issuer<'static, KeyPair>, common_name: &str) -> String {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("parameters");
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CountryName, "US");
    params.distinguished_name.push(DnType::OrganizationName, "Myriad Tests");
    params.distinguished_name.push(DnType::OrganizationalUnitName, "Clients");
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    let certificate = params.signed_by(&key, issuer).expect("signed certificate");
    format!("{}{}", certificate.pem(), key.serialize_pem())
}
