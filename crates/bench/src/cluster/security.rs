//! A secured benchmark cluster's files: a keyfile (members authenticate to each other as the
//! internal user `__system`) and, with TLS, a CA and one member certificate (for the server
//! and the client side, since members connect to each other) made with rcgen, all in a
//! temporary directory removed on drop.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};

use crate::error::{BenchError, BenchResult};

/// `--security` of the cluster benchmarks.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityMode {
    /// No authentication, plain TCP.
    None,
    /// Members authenticate with a keyfile; clients authenticate (SCRAM-SHA-256).
    Keyfile,
    /// As keyfile, and TLS everywhere: between members and to the driver.
    Tls,
}

impl SecurityMode {
    pub fn name(self) -> &'static str {
        match self {
            SecurityMode::None => "none",
            SecurityMode::Keyfile => "keyfile",
            SecurityMode::Tls => "tls",
        }
    }
}

/// A user a driver authenticates as.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub user: String,
    pub password: String,
    /// The database that holds the user.
    pub source: String,
}

#[derive(Debug)]
pub struct ClusterSecurity {
    directory: tempfile::TempDir,
    key: String,
    tls: bool,
}

impl ClusterSecurity {
    /// What `mode` needs: nothing, a keyfile, or a keyfile and certificates.
    pub fn for_mode(mode: SecurityMode) -> BenchResult<Option<ClusterSecurity>> {
        match mode {
            SecurityMode::None => Ok(None),
            SecurityMode::Keyfile => ClusterSecurity::create(false).map(Some),
            SecurityMode::Tls => ClusterSecurity::create(true).map(Some),
        }
    }

    /// The keyfile and, with `tls`, the certificates.
    pub fn create(tls: bool) -> BenchResult<ClusterSecurity> {
        let directory = tempfile::Builder::new().prefix("myriad-bench-security-").tempdir().map_err(|error| BenchError::io("making the security directory", error))?;
        // 64 hexadecimal digits: base64 characters, as a keyfile must hold.
        let key: String = (0..64).map(|_| char::from_digit(rand::random::<u32>() % 16, 16).unwrap_or('0')).collect();
        let mut keyfile = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(directory.path().join("keyfile"))
            .map_err(|error| BenchError::io("writing the keyfile", error))?;
        keyfile.write_all(key.as_bytes()).map_err(|error| BenchError::io("writing the keyfile", error))?;
        if tls {
            write_certificates(directory.path())?;
        }
        Ok(ClusterSecurity { directory, key, tls })
    }

    /// The flags every member gets.
    pub fn member_arguments(&self) -> Vec<OsString> {
        let path = |name: &str| self.directory.path().join(name).into_os_string();
        let mut arguments: Vec<OsString> = vec!["--keyFile".into(), path("keyfile")];
        if self.tls {
            arguments.extend([
                "--tlsMode".into(),
                "requireTLS".into(),
                "--tlsCertificateKeyFile".into(),
                path("member.pem"),
                "--tlsCAFile".into(),
                path("ca.pem"),
                "--tlsAllowConnectionsWithoutCertificates".into(),
            ]);
        }
        arguments
    }

    /// The CA drivers verify members against, with TLS.
    pub fn ca_file(&self) -> Option<PathBuf> {
        self.tls.then(|| self.directory.path().join("ca.pem"))
    }

    /// The internal user, which every member accepts (a shard has no users of its own).
    pub fn internal_user(&self) -> Credentials {
        Credentials { user: "__system".to_string(), password: self.key.clone(), source: "local".to_string() }
    }
}

fn write_certificates(directory: &Path) -> BenchResult<()> {
    let failed = |error: rcgen::Error| BenchError::Server(format!("making the test certificates: {error}"));
    let ca_key = KeyPair::generate().map_err(failed)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "myriad-bench CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
    let ca_pem = ca.self_signed(&ca_key).map_err(failed)?.pem();
    let issuer = Issuer::new(ca, ca_key);
    let member_key = KeyPair::generate().map_err(failed)?;
    let mut member = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).map_err(failed)?;
    member.distinguished_name.push(DnType::CommonName, "myriad-bench member");
    member.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    member.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    let member_pem = format!("{}{}", member.signed_by(&member_key, &issuer).map_err(failed)?.pem(), member_key.serialize_pem());
    for (name, contents) in [("ca.pem", ca_pem), ("member.pem", member_pem)] {
        std::fs::write(directory.join(name), contents).map_err(|error| BenchError::io(format!("writing {name}"), error))?;
    }
    Ok(())
}
