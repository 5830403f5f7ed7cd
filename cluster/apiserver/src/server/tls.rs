//! TLS: a certificate authority and a serving certificate made at start-up.
//!
//! kubectl and client-go refuse to talk to an HTTPS server they cannot verify, so the server
//! mints its own little PKI, as `kube-apiserver` does with `--cert-dir` when no certificate is
//! given: a self-signed CA, and a serving certificate signed by it for `127.0.0.1`, `::1` and
//! `localhost`. The CA's PEM goes into the kubeconfig as `certificate-authority-data`, so any
//! client that reads the kubeconfig verifies the server without `--insecure-skip-tls-verify`.
//! Both keys live only in memory and are never logged.
//!
//! ## `--cert-dir` (or `--data-dir`): certificates that survive a restart
//!
//! A new CA at every start means every client that trusted the old one fails for ever with
//! `invalid peer certificate: BadSignature` after a restart. With a certificate directory
//! ([`load_or_generate`], the builder's `cert_dir`, kube-apiserver's `--cert-dir`), the first
//! start writes `ca.crt`, `apiserver.crt` (the serving certificate followed by the CA) and
//! `apiserver.key` (mode 0600), and later starts load them, so clients keep verifying. The CA's
//! private key is not kept anywhere: once the serving certificate is signed it is not needed
//! (delete the directory to mint a new pair). Files that exist but cannot be parsed are an error
//! naming the file, never silently replaced. Without a certificate directory, a server with a
//! data directory keeps its certificates there: a user who asked for durability gets a server
//! whose clients survive its restarts, as kube-apiserver's `--cert-dir` (default
//! `/var/run/kubernetes`) gives its clients.
//!
//! **Rotating the identity**: stop the server, delete `ca.crt`, `apiserver.crt` and
//! `apiserver.key` (and `client-ca.crt`/`client-ca.key` to invalidate issued client
//! certificates), start it again, and hand out the kubeconfig it writes. Clients that still
//! trust the old CA then fail verification with a clear error (client-go's transport reports
//! `invalid peer certificate`; this project's manager turns `/readyz` unready and logs it on
//! every retry, with backoff).
//!
//! The rustls server configuration advertises ALPN `h2` and `http/1.1`; hyper-util's "auto"
//! connection builder then speaks whichever the client picked.
//!
//! ## Client certificates
//!
//! As kube-apiserver with `--client-ca-file`, the server asks every client for a certificate
//! (optional: a client without one goes on to token authentication) and accepts those signed by
//! its **client CA**, a second CA minted at start ([`ClientCa`]; with `--cert-dir`, kept there as
//! `client-ca.crt` and `client-ca.key`, mode 0600, so certificates it issued stay valid across
//! restarts), plus any extra CA the builder is given
//! ([`crate::ApiServerBuilder::client_ca_pem`], `--client-ca-file`). The user is the
//! certificate's common name and its groups the organizations ([`crate::auth::x509::subject`]).
//! [`ClientCa::issue`] mints such certificates, for kubeconfigs that authenticate like kind's
//! (`kubernetes-admin` in `system:masters`).

use std::path::Path;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Something went wrong creating certificates or the TLS configuration.
#[derive(Debug, thiserror::Error)]
#[error("TLS setup: {0}")]
pub struct TlsError(String);

impl TlsError {
    /// An error with this text.
    pub fn new(message: impl Into<String>) -> Self {
        TlsError(message.into())
    }
}

/// The generated CA and the server's TLS configuration.
pub struct ServerTls {
    /// PEM of the CA certificate clients should trust.
    pub ca_pem: String,
    /// rustls configuration for the listener.
    pub config: Arc<rustls::ServerConfig>,
    /// The CA whose client certificates authenticate users.
    pub client_ca: Arc<ClientCa>,
}

/// The client CA: accepted issuer of client certificates, and their minter.
pub struct ClientCa {
    /// PEM of the CA certificate.
    pub ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCa").finish_non_exhaustive()
    }
}

impl ClientCa {
    fn mint() -> Result<(Self, String), TlsError> {
        let key = KeyPair::generate().map_err(err)?;
        let key_pem = key.serialize_pem();
        let params = client_ca_params()?;
        let cert = params.self_signed(&key).map_err(err)?;
        Ok((
            ClientCa {
                ca_pem: cert.pem(),
                issuer: Issuer::new(params, key),
            },
            key_pem,
        ))
    }

    /// The CA of `ca_pem` with its key: the issuer is rebuilt from the same parameters
    /// (name and key, hence the same authority key identifier), so what it signs verifies
    /// against the stored certificate.
    fn load(ca_pem: String, key_pem: &str) -> Result<Self, TlsError> {
        if CertificateDer::from_pem_slice(ca_pem.as_bytes()).is_err() {
            return Err(TlsError("no certificate in the file".into()));
        }
        let key = KeyPair::from_pem(key_pem).map_err(err)?;
        let issuer = Issuer::new(client_ca_params()?, key);
        Ok(ClientCa { ca_pem, issuer })
    }

    /// A client certificate for `user` in `groups` (its common name and organizations), valid
    /// for a year: `(certificate PEM, key PEM)`.
    pub fn issue(&self, user: &str, groups: &[&str]) -> Result<(String, String), TlsError> {
        let key = KeyPair::generate().map_err(err)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, user);
        // One organization per certificate is all rcgen's name type holds; more groups are
        // more RDNs, which `DistinguishedName` cannot express, so they are refused.
        match groups {
            [] => {}
            [g] => params.distinguished_name.push(DnType::OrganizationName, *g),
            _ => {
                return Err(TlsError(
                    "a minted client certificate carries at most one group".into(),
                ));
            }
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let today = jiff::Timestamp::now()
            .to_zoned(jiff::tz::TimeZone::UTC)
            .date();
        let ymd = |d: jiff::civil::Date| {
            rcgen::date_time_ymd(d.year().into(), d.month() as u8, d.day() as u8)
        };
        params.not_before = ymd(today);
        params.not_after = ymd(today.saturating_add(jiff::ToSpan::years(1)));
        let cert = params.signed_by(&key, &self.issuer).map_err(err)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

fn client_ca_params() -> Result<CertificateParams, TlsError> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "sample-controller-apiserver-client-ca");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
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
pub fn generate(extra_client_cas: &[String]) -> Result<ServerTls, TlsError> {
    let minted = mint()?;
    let chain = vec![
        CertificateDer::from(minted.cert_der),
        CertificateDer::from(minted.ca_der),
    ];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(minted.key_der));
    let (client_ca, _) = ClientCa::mint()?;
    server_tls(minted.ca_pem, chain, key, client_ca, extra_client_cas)
}

/// Loads the CA and serving certificate from `dir` (see the module docs), or mints them and
/// writes them there when `dir` holds none.
pub fn load_or_generate(dir: &Path, extra_client_cas: &[String]) -> Result<ServerTls, TlsError> {
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
    // The client CA: its own pair of files, made when missing (a directory from before client
    // certificates were served gets one on its next start).
    let (client_ca_path, client_key_path) = (dir.join("client-ca.crt"), dir.join("client-ca.key"));
    if !client_ca_path.exists() && !client_key_path.exists() {
        let (ca, key_pem) = ClientCa::mint()?;
        write_file(&client_key_path, key_pem.as_bytes(), true)
            .map_err(|e| in_file(&client_key_path, &e))?;
        write_file(&client_ca_path, ca.ca_pem.as_bytes(), false)
            .map_err(|e| in_file(&client_ca_path, &e))?;
    }
    let client_pem =
        std::fs::read_to_string(&client_ca_path).map_err(|e| in_file(&client_ca_path, &e))?;
    let client_key =
        std::fs::read_to_string(&client_key_path).map_err(|e| in_file(&client_key_path, &e))?;
    let client_ca =
        ClientCa::load(client_pem, &client_key).map_err(|e| in_file(&client_ca_path, &e))?;
    server_tls(ca_pem, chain, key, client_ca, extra_client_cas)
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
    client_ca: ClientCa,
    extra_client_cas: &[String],
) -> Result<ServerTls, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for pem in std::iter::once(&client_ca.ca_pem).chain(extra_client_cas) {
        let mut any = false;
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots
                .add(cert.map_err(|e| TlsError(format!("client CA: {e}")))?)
                .map_err(|e| TlsError(format!("client CA: {e}")))?;
            any = true;
        }
        if !any {
            return Err(TlsError("client CA: no certificate in the PEM".into()));
        }
    }
    // Optional: a client without a certificate goes on to token authentication.
    let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
        .allow_unauthenticated()
        .build()
        .map_err(err)?;
    let mut config = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(err)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(ServerTls {
        ca_pem,
        config: Arc::new(config),
        client_ca: Arc::new(client_ca),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn generates_a_ca_and_advertises_h2_and_http11() {
        let tls = super::generate(&[]).unwrap();
        assert!(tls.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(
            tls.config.alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
    }

    #[test]
    fn a_cert_dir_keeps_the_ca_across_starts_and_refuses_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let first = super::load_or_generate(dir.path(), &[]).unwrap();
        let second = super::load_or_generate(dir.path(), &[]).unwrap();
        assert_eq!(first.ca_pem, second.ca_pem);
        assert_ne!(first.ca_pem, super::generate(&[]).unwrap().ca_pem);
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
        let e = super::load_or_generate(dir.path(), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("apiserver.key"), "{e}");
    }
}
