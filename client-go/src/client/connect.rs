//! Connections: the pooled hyper client, TLS through rustls, and the HTTP `CONNECT` proxy
//! (client-go's `transport` package: `transport.New`, `TLSConfigFor`, the proxy dialer).
//!
//! Data in: the server's scheme, a [`TlsConfig`], an optional `proxy-url`, the connect
//! timeout. Data out: a `hyper_util` pooled client that every clone of a [`super::Client`]
//! shares.
//!
//! One `hyper_util` pooled client per [`super::Client`], shared by every clone and
//! every `Api<K>`. TLS is rustls (ring provider, TLS 1.2 minimum) and offers ALPN `h2` and
//! `http/1.1`: against a real API server all requests, watches included, multiplex over one
//! HTTP/2 connection, as with client-go. `proxy-url` tunnels every connection through an HTTP
//! `CONNECT` proxy (plain-http destinations too). Unlike client-go, the `HTTPS_PROXY` /
//! `NO_PROXY` environment variables are not consulted: set `proxy-url` in the kubeconfig.
//! TCP keep-alive is 30 s, `TCP_NODELAY` is set, idle pooled connections close after 90 s and
//! HTTP/2 connections are pinged every 30 s (client-go's `ReadIdleTimeout`). A plain-`http`
//! server (tests) is spoken to in HTTP/1.1, one request per pooled connection at a time, and
//! no system roots are loaded for it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderValue, Uri};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use super::config::TlsConfig;
use super::{Error, Result};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The pooled client a [`super::Client`] sends through.
pub(super) type HyperClient =
    hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<Connector>, Full<Bytes>>;

/// Dials the server directly or through an HTTP CONNECT proxy.
#[derive(Clone)]
pub struct Connector(ConnectorKind);

#[derive(Clone)]
enum ConnectorKind {
    Direct(HttpConnector),
    Proxied(Tunnel<HttpConnector>),
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<tokio::net::TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match &mut self.0 {
            ConnectorKind::Direct(c) => c.poll_ready(cx).map_err(Into::into),
            ConnectorKind::Proxied(t) => t.poll_ready(cx).map_err(Into::into),
        }
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        match &mut self.0 {
            ConnectorKind::Direct(c) => {
                let f = c.call(dst);
                Box::pin(async move { f.await.map_err(Into::into) })
            }
            ConnectorKind::Proxied(t) => {
                let f = t.call(dst);
                Box::pin(async move { f.await.map_err(Into::into) })
            }
        }
    }
}

/// Builds the pool for `https` or plain-http servers, through `proxy` when given.
pub(super) fn build_http_client(
    https: bool,
    tls: &TlsConfig,
    proxy: Option<&Uri>,
    connect_timeout: Duration,
) -> Result<HyperClient> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_keepalive(Some(Duration::from_secs(30)));
    http.set_nodelay(true);
    let connector = match proxy {
        None => Connector(ConnectorKind::Direct(http)),
        Some(p) => {
            let mut tunnel = Tunnel::new(p.clone(), http);
            if let Some(auth) = proxy_authorization(p)? {
                tunnel = tunnel.with_auth(auth);
            }
            Connector(ConnectorKind::Proxied(tunnel))
        }
    };
    // A plain-http server never does TLS: skip loading the system roots for it.
    let rustls_config = if https {
        rustls_client_config(tls)?
    } else {
        crate::install_crypto_provider();
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| Error::Config(format!("TLS versions: {e}")))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth()
    };
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(rustls_config)
        .https_or_http();
    let builder = match tls.server_name.as_deref() {
        Some(name) => {
            let name = rustls_pki_types::ServerName::try_from(name.to_owned()).map_err(|e| {
                Error::Config(format!("tls-server-name {name:?} is not a valid name: {e}"))
            })?;
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => builder,
    };
    let https = builder.enable_all_versions().wrap_connector(connector);
    Ok(
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .http2_keep_alive_interval(Duration::from_secs(30))
            .build(https),
    )
}

fn proxy_authorization(proxy: &Uri) -> Result<Option<HeaderValue>> {
    let Some(auth) = proxy.authority() else {
        return Ok(None);
    };
    let Some((userinfo, _)) = auth.as_str().rsplit_once('@') else {
        return Ok(None);
    };
    let encoded = base64::engine::general_purpose::STANDARD.encode(userinfo);
    let mut v = HeaderValue::from_str(&format!("Basic {encoded}"))
        .map_err(|e| Error::Config(format!("proxy-url credentials: {e}")))?;
    v.set_sensitive(true);
    Ok(Some(v))
}

/// Builds the rustls configuration: TLS 1.2 and 1.3, the CA bundle (or the system roots), an
/// optional client certificate, or no verification at all when asked to.
pub fn rustls_client_config(tls: &TlsConfig) -> Result<rustls::ClientConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    crate::install_crypto_provider();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| Error::Config(format!("TLS versions: {e}")))?;
    let builder = if tls.insecure_skip_tls_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match &tls.ca_pem {
            Some(pem) => {
                let mut n = 0;
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| {
                        Error::Config(format!("certificate-authority: bad PEM: {e}"))
                    })?;
                    roots.add(cert).map_err(|e| {
                        Error::Config(format!("certificate-authority: unusable certificate: {e}"))
                    })?;
                    n += 1;
                }
                if n == 0 {
                    return Err(Error::Config(
                        "certificate-authority: no PEM certificate found".into(),
                    ));
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                for e in &native.errors {
                    tracing::debug!(error = %e, "loading a system CA certificate failed");
                }
                let (added, _ignored) = roots.add_parsable_certificates(native.certs);
                if added == 0 {
                    tracing::warn!(
                        "no system CA certificates found; TLS connections will fail unless a CA is configured"
                    );
                }
            }
        }
        builder.with_root_certificates(roots)
    };
    let config = match (&tls.client_cert_pem, &tls.client_key_pem) {
        (Some(cert), Some(key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| Error::Config(format!("client-certificate: bad PEM: {e}")))?;
            if chain.is_empty() {
                return Err(Error::Config(
                    "client-certificate: no PEM certificate found".into(),
                ));
            }
            let key = PrivateKeyDer::from_pem_slice(key.expose().as_bytes()).map_err(|e| {
                Error::Config(format!(
                    "client-key: no usable PEM private key (RSA, EC or PKCS#8): {e}"
                ))
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| Error::Config(format!("client certificate and key: {e}")))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(Error::Config(
                "client certificate and key must be given together".into(),
            ));
        }
    };
    Ok(config)
}

/// `insecure-skip-tls-verify`: accepts any certificate, but still checks the handshake
/// signatures so the connection is at least to whoever holds the presented key.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> std::result::Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> std::result::Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
