//! Calling one webhook: an `AdmissionReview` POSTed over HTTPS, the answer checked.
//!
//! This is `webhook.ClientManager` and the `callHook` half of the real dispatchers
//! (`pkg/admission/plugin/webhook/{validating,mutating}/dispatcher.go`,
//! `pkg/admission/plugin/webhook/request/admissionreview.go`):
//!
//! * **Where.** A `clientConfig.url` is dialled as written. A `clientConfig.service` is
//!   addressed as `https://NAME.NAMESPACE.svc:PORT/PATH` (the name its certificate must carry,
//!   as in a cluster); since this server has no cluster network, the name resolves to the
//!   `HOST:PORT` given for `NAMESPACE/NAME` by `--service-endpoint` or
//!   [`crate::ApiServerBuilder::service_endpoint`]. Without one, the call fails like a DNS
//!   miss (`dial tcp: lookup NAME.NAMESPACE.svc: no such host`).
//! * **Trust.** The server certificate is verified against `caBundle` alone (or the system
//!   roots when it is empty), with rustls, and as Go does a self-signed `CA:TRUE` certificate
//!   that is itself in the bundle is accepted as the server's ([`crate::auth::x509`]). One client, with its connection pool, per CA
//!   bundle: calls to the same webhook reuse their connections.
//! * **Time.** `timeoutSeconds` bounds the whole call (connect, request, response), and is
//!   sent as `?timeout=Ns` as client-go does. Past it: `context deadline exceeded`.
//! * **Size.** The response body is read up to [`MAX_RESPONSE_BYTES`]; a larger one fails the
//!   call. (kube-apiserver reads webhook answers whole, bounded only by the timeout; the bound
//!   here is this server's own request-body limit, so a broken webhook cannot make the server
//!   buffer without end.)
//! * **Answer checks** (`VerifyAdmissionResponse`): a `response` must be present, carry the
//!   request's `uid`, come as `admission.k8s.io/v1, Kind=AdmissionReview` (or `v1beta1` when that
//!   was sent); a `patch` needs `patchType: JSONPatch`, and a validating webhook may not patch.
//!   Each failure is a *calling* failure (`received invalid webhook response: ...`), which
//!   `failurePolicy` decides about, not a denial.
//!
//! Errors read as the real server's: [`crate::admission::CallError::Calling`] renders as
//! `failed calling webhook "NAME": failed to call webhook: Post "URL?timeout=10s": REASON`, where
//! REASON is Go's text for the common cases (`dial tcp ADDR: connect: connection refused`,
//! `tls: failed to verify certificate: x509: certificate signed by unknown authority`,
//! `context deadline exceeded`).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use serde_json::Value;

use crate::webhook::endpoint::Endpoint;

/// The most bytes of a webhook's response that are read (16 MiB).
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;

/// Resolves `NAME.NAMESPACE.svc` through the service endpoints, everything else through the
/// system resolver.
#[derive(Clone, Debug)]
struct Resolver {
    services: Arc<RwLock<HashMap<String, String>>>,
}

impl tower_service::Service<Name> for Resolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let host = name.as_str().to_owned();
        let mapped = self
            .services
            .read()
            .ok()
            .and_then(|services| services.get(&host).cloned());
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = match mapped {
                Some(hp) => tokio::net::lookup_host(hp).await?.collect(),
                None if host.ends_with(".svc") => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!("lookup {host}: no such host"),
                    ));
                }
                None => tokio::net::lookup_host((host.as_str(), 0)).await?.collect(),
            };
            Ok(addrs.into_iter())
        })
    }
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector<Resolver>>, Full<Bytes>>;

/// The webhook client manager: service endpoints and one pooled client per CA bundle.
#[derive(Default)]
pub struct ClientManager {
    /// `NAMESPACE/NAME` → `HOST:PORT`.
    endpoints: RwLock<HashMap<String, String>>,
    /// `NAME.NAMESPACE.svc` → `HOST:PORT` (what the resolver looks up), shared with every
    /// pooled client's resolver, so an endpoint set later reaches clients already made.
    hosts: Arc<RwLock<HashMap<String, String>>>,
    clients: Mutex<HashMap<Vec<u8>, HttpsClient>>,
}

impl std::fmt::Debug for ClientManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientManager")
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

impl ClientManager {
    /// A manager resolving services through `endpoints` (`NAMESPACE/NAME` → `HOST:PORT`).
    pub fn new(endpoints: HashMap<String, String>) -> Self {
        let manager = ClientManager::default();
        for (namespace_name, host_port) in endpoints {
            manager.set_endpoint(&namespace_name, &host_port);
        }
        manager
    }

    /// Maps the Service `NAMESPACE/NAME` to `HOST:PORT` from now on (a name without `/` is
    /// ignored). Webhook calls already under way keep the address they dialled.
    pub fn set_endpoint(&self, namespace_name: &str, host_port: &str) {
        let Some((ns, name)) = namespace_name.split_once('/') else {
            return;
        };
        if let Ok(mut hosts) = self.hosts.write() {
            hosts.insert(format!("{name}.{ns}.svc"), host_port.to_owned());
        }
        if let Ok(mut endpoints) = self.endpoints.write() {
            endpoints.insert(namespace_name.to_owned(), host_port.to_owned());
        }
    }

    fn client(&self, ca: &[u8]) -> Result<HttpsClient, String> {
        if let Ok(clients) = self.clients.lock()
            && let Some(c) = clients.get(ca)
        {
            return Ok(c.clone());
        }
        apimachinery::crypto::install_provider();
        let roots = if ca.is_empty() {
            rustls_native_certs::load_native_certs().certs
        } else {
            let mut reader = std::io::BufReader::new(ca);
            let certs = rustls_pemfile_certs(&mut reader)?;
            if certs.is_empty() {
                return Err(
                    "unable to load root certificates: caBundle holds no PEM certificate".into(),
                );
            }
            certs
        };
        // Go's trust rules: a self-signed CA certificate that is its own caBundle is accepted
        // ([`crate::auth::x509::GoServerVerifier`]).
        let verifier = crate::auth::x509::GoServerVerifier::new(roots, !ca.is_empty())?;
        let tls = rustls::ClientConfig::builder()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        let mut http = HttpConnector::new_with_resolver(Resolver {
            services: self.hosts.clone(),
        });
        http.enforce_http(false);
        http.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(16)
            .build(https);
        if let Ok(mut clients) = self.clients.lock() {
            clients.insert(ca.to_vec(), client.clone());
        }
        Ok(client)
    }

    /// Where a webhook is dialled (`HOST:PORT`), for messages.
    fn dial_address(&self, endpoint: &Endpoint) -> String {
        match endpoint {
            Endpoint::Url(u) => {
                let authority = u
                    .trim_start_matches("https://")
                    .split('/')
                    .next()
                    .unwrap_or_default();
                if authority
                    .rsplit_once(':')
                    .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
                    && !authority.ends_with(']')
                {
                    authority.to_owned()
                } else {
                    format!("{authority}:443")
                }
            }
            Endpoint::Service {
                namespace, name, ..
            } => self
                .endpoints
                .read()
                .ok()
                .and_then(|endpoints| endpoints.get(&format!("{namespace}/{name}")).cloned())
                .unwrap_or_else(|| format!("{name}.{namespace}.svc")),
        }
    }

    /// POSTs `body` as JSON to `endpoint` (trusting `ca`, empty for the system roots) and
    /// decodes the JSON answer: the transport every webhook caller of this server shares
    /// (admission here, CRD conversion in [`crate::apiextensions::conversion`]). `timeout` bounds the whole
    /// exchange and is sent as `?timeout=Ns`; the answer is read up to
    /// [`MAX_RESPONSE_BYTES`]; a non-2xx answer is an error worded as client-go's.
    pub async fn post_json(
        &self,
        endpoint: &Endpoint,
        ca: &[u8],
        timeout: Duration,
        body: &Value,
    ) -> Result<Value, PostError> {
        let secs = timeout.as_secs().max(1);
        let shown = format!("{}?timeout={secs}s", endpoint.url());
        // A service is dialled by its cluster name without an explicit port, so the resolver's
        // HOST:PORT is used as is (an explicit port would replace it).
        let uri = match endpoint {
            Endpoint::Url(_) => shown.clone(),
            Endpoint::Service {
                namespace,
                name,
                path,
                ..
            } => format!("https://{name}.{namespace}.svc{path}?timeout={secs}s"),
        };
        let post = |why: String| PostError::Call(format!("Post \"{shown}\": {why}"));
        let client = self.client(ca).map_err(PostError::Client)?;
        let body = serde_json::to_vec(body).map_err(|e| PostError::Client(e.to_string()))?;
        let req = http::Request::post(&uri)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, */*")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| post(e.to_string()))?;
        let exchange = async {
            let resp = client
                .request(req)
                .await
                .map_err(|e| go_error_text(&e, &self.dial_address(endpoint)))?;
            let status = resp.status();
            let bytes = Limited::new(resp.into_body(), MAX_RESPONSE_BYTES)
                .collect()
                .await
                .map_err(|e| format!("reading the response body: {e}"))?
                .to_bytes();
            Ok::<_, String>((status, bytes))
        };
        let (status, bytes) = match tokio::time::timeout(timeout, exchange).await {
            Err(_) => return Err(post("context deadline exceeded".into())),
            Ok(Err(e)) => return Err(post(e)),
            Ok(Ok(x)) => x,
        };
        if !status.is_success() {
            return Err(PostError::Call(unstructured_error(status.as_u16(), &bytes)));
        }
        serde_json::from_slice(&bytes).map_err(|e| PostError::Call(e.to_string()))
    }
}

/// Why [`ClientManager::post_json`] produced no answer.
#[derive(Clone, Debug)]
pub enum PostError {
    /// No client could be built (an unusable `caBundle`): the text as is.
    Client(String),
    /// The call failed or answered something that is not JSON: Go's text, e.g.
    /// `Post "https://...?timeout=10s": dial tcp 127.0.0.1:1: connect: connection refused`.
    Call(String),
}

fn rustls_pemfile_certs(
    reader: &mut dyn std::io::BufRead,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    let mut out = vec![];
    let mut all = vec![];
    reader
        .read_to_end(&mut all)
        .map_err(|e| format!("reading caBundle: {e}"))?;
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(&all) {
        out.push(c.map_err(|e| format!("unable to load root certificates: {e}"))?);
    }
    Ok(out)
}

/// Go's wording for the usual transport failures; the error chain otherwise.
fn go_error_text(e: &(dyn std::error::Error + 'static), addr: &str) -> String {
    let mut chain = vec![];
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        let tls = err.downcast_ref::<rustls::Error>();
        // An io::Error's source() skips the error it wraps (often another io::Error around
        // rustls' error); follow get_ref() instead.
        let mut next = err.source();
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    return format!("dial tcp {addr}: connect: connection refused");
                }
                std::io::ErrorKind::NotFound => return format!("dial tcp: {io}"),
                _ => {}
            }
            if let Some(inner) = io.get_ref() {
                next = Some(inner);
            }
        }
        if let Some(tls) = tls {
            use rustls::CertificateError as C;
            return match tls {
                rustls::Error::InvalidCertificate(C::UnknownIssuer | C::BadSignature) => {
                    "tls: failed to verify certificate: x509: certificate signed by unknown authority".into()
                }
                rustls::Error::InvalidCertificate(
                    C::NotValidForName | C::NotValidForNameContext { .. },
                ) => format!("tls: failed to verify certificate: x509: certificate is not valid for {addr}"),
                rustls::Error::InvalidCertificate(C::Expired | C::ExpiredContext { .. }) => {
                    "tls: failed to verify certificate: x509: certificate has expired or is not yet valid".into()
                }
                other => format!("tls: {other}"),
            };
        }
        chain.push(err.to_string());
        cur = next;
    }
    chain.dedup();
    chain.join(": ")
}

/// client-go's error for a non-2xx answer: the Status's message if the body is one, else the
/// per-code text of `newUnstructuredResponseError`.
fn unstructured_error(code: u16, body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<Value>(body)
        && v["kind"] == "Status"
        && let Some(m) = v["message"].as_str()
    {
        return m.to_owned();
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(1024)]).into_owned();
    match code {
        400 => "the server rejected our request for an unknown reason".into(),
        401 => "the server has asked for the client to provide credentials".into(),
        403 => format!("{text:?}"),
        404 => "the server could not find the requested resource".into(),
        409 => "the server reported a conflict".into(),
        500 => {
            format!("an error on the server ({text:?}) has prevented the request from succeeding")
        }
        _ => format!(
            "the server responded with the status code {code} but did not return more information"
        ),
    }
}
