//! TLS: a certificate authority and a serving certificate made at start-up.
//!
//! kubectl and client-go refuse to talk to an HTTPS server they cannot verify, so the server
//! mints its own little PKI, as `kube-apiserver` does with `--cert-dir` when no certificate is
//! given: a self-signed CA, and a serving certificate signed by it for `127.0.0.1`, `::1` and
//! `localhost`. The CA's PEM goes into the kubeconfig as `certificate-authority-data`, so any
//! client that reads the kubeconfig verifies the server without `--insecure-skip-tls-verify`.
//! Both keys live only in memory and are never logged.
//!
//! ## `--cert-dir`: certificates that survive a restart
//!
//! A new CA at every start means every client that trusted the old one fails for ever with
//! `invalid peer certificate: BadSignature` after a restart. With a certificate directory
//! ([`load_or_generate`], the builder's `cert_dir`, kube-apiserver's `--cert-dir`), the first
//! start writes `ca.crt`, `apiserver.crt` (the serving certificate followed by the CA) and
//! `apiserver.key` (mode 0600), and later starts load them, so clients keep verifying. The CA's
//! private key is not kept anywhere: once the serving certificate is signed it is not needed
//! (delete the directory to mint a new pair). Files that exist but cannot be parsed are an error
//! naming the file, never silently replaced.
//!
//! The rustls server configuration advertises ALPN `h2` and `http/1.1`; hyper-util's "auto"
//! connection builder then speaks whichever the client picked.

use std::path::Path;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Something went wrong creating certificates or the TLS configuration.
#[derive(Debug, thiserror::Error)]
#[error("TLS setup: {0}")]
pub struct TlsError(String);

/// The generated CA and the server's TLS configuration.
pub struct ServerTls {
    /// PEM of the CA certificate clients should trust.
    pub ca_pem: String,
    /// rustls configuration for the listener.
    pub config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").finish_non_exhaustive()
    }
}

fn err(e: impl std::fmt::Display) -> TlsError {
    TlsError(e.to_string())
}

/// Creates a fresh CA and serving certificate and the rustls configuration using them.
pub fn generate() -> Result<ServerTls, TlsError> {
    let minted = mint()?;
    let chain = vec![
        CertificateDer::from(minted.cert_der),
        CertificateDer::from(minted.ca_der),
    ];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(minted.key_der));
    server_tls(minted.ca_pem, chain, key)
}

/// Loads the CA and serving certificate from `dir` (see the module docs), or mints them and
/// writes them there when `dir` holds none.
pub fn load_or_generate(dir: &Path) -> Result<ServerTls, TlsError> {
    apimachinery::crypto::install_provider();
    let (ca_path, cert_path, key_path) = (
        dir.join("ca.crt"),
        dir.join("apiserver.crt"),
        dir.join("apiserver.key"),
    );
    let in_file = |path: &Path, e: &dyn std::fmt::Display| {
        TlsError(format!("certificate directory: {}: {e}", path.display()))
    };
    if !ca_path.exists() && !cert_path.exists() && !key_path.exists() {
        let minted = mint()?;
        std::fs::create_dir_all(dir).map_err(|e| in_file(dir, &e))?;
        let chain_pem = format!("{}{}", minted.cert_pem, minted.ca_pem);
        write_file(&key_path, minted.key_pem.as_bytes(), true)
            .map_err(|e| in_file(&key_path, &e))?;
        write_file(&cert_path, chain_pem.as_bytes(), false).map_err(|e| in_file(&cert_path, &e))?;
        write_file(&ca_path, minted.ca_pem.as_bytes(), false).map_err(|e| in_file(&ca_path, &e))?;
        tracing::info!(dir = %dir.display(), "wrote a new CA and serving certificate");
    }
    let ca_pem = std::fs::read_to_string(&ca_path).map_err(|e| in_file(&ca_path, &e))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .map_err(|e| in_file(&cert_path, &e))?
        .collect::<Result<_, _>>()
        .map_err(|e| in_file(&cert_path, &e))?;
    if chain.is_empty() {
        return Err(in_file(&cert_path, &"no certificate in the file"));
    }
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|e| in_file(&key_path, &e))?;
    if CertificateDer::from_pem_slice(ca_pem.as_bytes()).is_err() {
        return Err(in_file(&ca_path, &"no certificate in the file"));
    }
    server_tls(ca_pem, chain, key)
}

/// Writes `bytes` to `path` via a temporary file and a rename, so a crash leaves either no
/// file or a whole one; `private` files are readable by their owner only.
fn write_file(path: &Path, bytes: &[u8], private: bool) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut f = options.open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

struct Minted {
    ca_pem: String,
    ca_der: Vec<u8>,
    cert_pem: String,
    cert_der: Vec<u8>,
    key_pem: String,
    key_der: Vec<u8>,
}

fn mint() -> Result<Minted, TlsError> {
    apimachinery::crypto::install_provider();
    let ca_key = KeyPair::generate().map_err(err)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "sample-controller-apiserver-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).map_err(err)?;
    let ca_pem = ca_cert.pem();
    let issuer = Issuer::new(ca_params, ca_key);

    let key = KeyPair::generate().map_err(err)?;
    let mut params = CertificateParams::new(vec![
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
        "localhost".to_owned(),
    ])
    .map_err(err)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "sample-controller-apiserver");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer).map_err(err)?;
    Ok(Minted {
        ca_pem,
        ca_der: ca_cert.der().to_vec(),
        cert_pem: cert.pem(),
        cert_der: cert.der().to_vec(),
        key_pem: key.serialize_pem(),
        key_der: key.serialize_der(),
    })
}

fn server_tls(
    ca_pem: String,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<ServerTls, TlsError> {
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(err)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(ServerTls {
        ca_pem,
        config: Arc::new(config),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn generates_a_ca_and_advertises_h2_and_http11() {
        let tls = super::generate().unwrap();
        assert!(tls.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(
            tls.config.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
    }

    #[test]
    fn a_cert_dir_keeps_the_ca_across_starts_and_refuses_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let first = super::load_or_generate(dir.path()).unwrap();
        let second = super::load_or_generate(dir.path()).unwrap();
        assert_eq!(first.ca_pem, second.ca_pem);
        assert_ne!(first.ca_pem, super::generate().unwrap().ca_pem);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("apiserver.key"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(dir.path().join("apiserver.key"), "garbage").unwrap();
        let e = super::load_or_generate(dir.path()).unwrap_err().to_string();
        assert!(e.contains("apiserver.key"), "{e}");
    }
}
