//! TLS: a certificate authority and a serving certificate made at start-up.
//!
//! kubectl and client-go refuse to talk to an HTTPS server they cannot verify, so the server
//! mints its own little PKI, as `kube-apiserver` does with `--cert-dir` when no certificate is
//! given: a self-signed CA, and a serving certificate signed by it for `127.0.0.1`, `::1` and
//! `localhost`. The CA's PEM goes into the kubeconfig as `certificate-authority-data`, so any
//! client that reads the kubeconfig verifies the server without `--insecure-skip-tls-verify`.
//! Both keys live only in memory and are never logged.
//!
//! The rustls server configuration advertises ALPN `h2` and `http/1.1`; hyper-util's "auto"
//! connection builder then speaks whichever the client picked.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
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

    let chain = vec![
        CertificateDer::from(cert.der().to_vec()),
        CertificateDer::from(ca_cert.der().to_vec()),
    ];
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
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
}
