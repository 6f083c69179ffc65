//! Test certificates made with rcgen: a CA and a server certificate for localhost and
//! 127.0.0.1, written as PEM files into a temporary directory (for the config file's TLS
//! section; TLS and MONGODB-X509 themselves are tests/python's, docs/testing.md).

use std::path::PathBuf;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};

pub struct Certificates {
    directory: tempfile::TempDir,
    /// The CA's certificate (what `tlsCAFile` names, on either side).
    pub ca_file: PathBuf,
    /// The server's certificate and key in one file (`--tlsCertificateKeyFile`).
    pub server_file: PathBuf,
}

impl Certificates {
    pub fn generate() -> Certificates {
        let directory = tempfile::tempdir().expect("temp dir");
        let (ca_pem, issuer) = certificate_authority("Myriad test CA");
        let server_pem = leaf(&issuer, "localhost", &["localhost", "127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
        let write = |name: &str, contents: &str| {
            let path = directory.path().join(name);
            std::fs::write(&path, contents).expect("write PEM");
            path
        };
        Certificates { ca_file: write("ca.pem", &ca_pem), server_file: write("server.pem", &server_pem), directory }
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
