//! A purpose-built HTTP(S) server for the client tests: it answers with whatever a test's
//! handler returns, and logs every request it saw (method, URI, HTTP version, headers, body,
//! virtual arrival time, whether a client certificate was presented).
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, Version};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Logged {
    pub method: Method,
    pub uri: String,
    pub version: Version,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub at: tokio::time::Instant,
    pub client_cert: bool,
    /// How many requests came before this one.
    pub index: usize,
    /// Which accepted connection carried it (0, 1, ...).
    pub conn: usize,
}

impl Logged {
    pub fn path(&self) -> &str {
        self.uri.split('?').next().unwrap_or("")
    }
    pub fn query(&self) -> &str {
        self.uri.split_once('?').map(|(_, q)| q).unwrap_or("")
    }
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub type Body = BoxBody<Bytes, Infallible>;
pub type Reply = Response<Body>;
pub type Handler = Arc<dyn Fn(&Logged) -> Reply + Send + Sync>;

/// A reflector backoff of 50 ms doubling to at most 400 ms, so recoveries take fractions of a
/// second on the real clock. client-go's schedule (800 ms doubling to 30 s, with full jitter,
/// reset only after 2 min; `cache_reflector` checks it) would make a test that injects a few
/// faults wait 10-20 s for the same recoveries.
pub fn fast_backoff() -> sample_client_go::cache::reflector::BackoffConfig {
    sample_client_go::cache::reflector::BackoffConfig {
        initial: std::time::Duration::from_millis(50),
        factor: 2.0,
        cap: std::time::Duration::from_millis(400),
        jitter: 0.5,
        reset_after: std::time::Duration::from_secs(120),
    }
}

pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed()
}

pub fn json(code: u16, v: serde_json::Value) -> Reply {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(full(v.to_string()))
        .unwrap()
}

pub fn status(code: u16, reason: &str, msg: &str) -> Reply {
    json(
        code,
        serde_json::json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
            "message": msg, "reason": reason, "code": code}),
    )
}

/// A streamed body made of these chunks, exactly as given.
pub fn chunked(chunks: Vec<Bytes>) -> Reply {
    let s = futures_util::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, Infallible>(Frame::data(c))),
    );
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(StreamBody::new(s).boxed())
        .unwrap()
}

/// Certificates of a throwaway PKI: a CA, a server certificate for 127.0.0.1/localhost, and a
/// client certificate, all as PEM.
pub struct Pki {
    pub ca_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
}

pub fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "test-ca");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server_params =
        CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    let server_cert = server_params.signed_by(&server_key, &issuer).unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    client_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "alice");
    let client_cert = client_params.signed_by(&client_key, &issuer).unwrap();
    Pki {
        ca_pem: ca_cert.pem(),
        server_cert_pem: server_cert.pem(),
        server_key_pem: server_key.serialize_pem(),
        client_cert_pem: client_cert.pem(),
        client_key_pem: client_key.serialize_pem(),
    }
}

/// A running test server; stops when dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    pub log: Arc<Mutex<Vec<Logged>>>,
    pub pki: Option<Arc<Pki>>,
    stop: CancellationToken,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl TestServer {
    pub fn url(&self) -> String {
        let scheme = if self.pki.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }
    pub fn requests(&self) -> Vec<Logged> {
        self.log.lock().unwrap().clone()
    }
    /// A client config for this server (CA trusted when TLS), qps/burst off unless changed.
    pub fn config(&self) -> sample_client_go::client::Config {
        let mut c = sample_client_go::client::Config::new(self.url().parse().unwrap());
        if let Some(p) = &self.pki {
            c.tls.ca_pem = Some(p.ca_pem.clone().into_bytes());
        }
        c
    }
}

/// Plain HTTP (HTTP/1.1 and h2c prior knowledge via hyper's auto builder).
pub async fn serve_http(handler: Handler) -> TestServer {
    serve(handler, None).await
}

/// HTTPS with ALPN h2 + http/1.1; client certificates are requested, not required.
pub async fn serve_https(handler: Handler) -> TestServer {
    serve(handler, Some(Arc::new(pki()))).await
}

pub async fn serve(handler: Handler, pki: Option<Arc<Pki>>) -> TestServer {
    sample_client_go::install_crypto_provider();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log: Arc<Mutex<Vec<Logged>>> = Arc::default();
    let stop = CancellationToken::new();
    let acceptor = pki.as_ref().map(|p| tls_acceptor(p));
    let (log2, stop2) = (log.clone(), stop.clone());
    tokio::spawn(async move {
        let mut conn_id = 0usize;
        loop {
            let (tcp, _) = tokio::select! {
                _ = stop2.cancelled() => return,
                r = listener.accept() => match r { Ok(x) => x, Err(_) => return },
            };
            let _ = tcp.set_nodelay(true);
            let (handler, log, acceptor, stop) = (
                handler.clone(),
                log2.clone(),
                acceptor.clone(),
                stop2.clone(),
            );
            let conn_no = conn_id;
            conn_id += 1;
            tokio::spawn(async move {
                let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                match acceptor {
                    Some(acc) => {
                        let Ok(tls) = acc.accept(tcp).await else {
                            return;
                        };
                        let client_cert = tls.get_ref().1.peer_certificates().is_some();
                        let svc = service(handler, log, client_cert, conn_no);
                        let conn = builder.serve_connection(TokioIo::new(tls), svc);
                        tokio::select! { _ = stop.cancelled() => {}, _ = conn => {} }
                    }
                    None => {
                        let svc = service(handler, log, false, conn_no);
                        let conn = builder.serve_connection(TokioIo::new(tcp), svc);
                        tokio::select! { _ = stop.cancelled() => {}, _ = conn => {} }
                    }
                }
            });
        }
    });
    TestServer {
        addr,
        log,
        pki,
        stop,
    }
}

fn service(
    handler: Handler,
    log: Arc<Mutex<Vec<Logged>>>,
    client_cert: bool,
    conn: usize,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Reply,
    Error = Infallible,
    Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Reply, Infallible>> + Send>>,
> + Clone {
    hyper::service::service_fn(move |req: Request<Incoming>| {
        let (handler, log) = (handler.clone(), log.clone());
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let body = body
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            let logged = {
                let mut l = log.lock().unwrap();
                let logged = Logged {
                    method: parts.method,
                    uri: parts.uri.to_string(),
                    version: parts.version,
                    headers: parts.headers,
                    body,
                    at: tokio::time::Instant::now(),
                    client_cert,
                    index: l.len(),
                    conn,
                };
                l.push(logged.clone());
                logged
            };
            Ok(handler(&logged))
        }) as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
    })
}

fn tls_acceptor(p: &Pki) -> tokio_rustls::TlsAcceptor {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(p.ca_pem.as_bytes()).unwrap())
        .unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
        .allow_unauthenticated()
        .build()
        .unwrap();
    let certs = vec![CertificateDer::from_pem_slice(p.server_cert_pem.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(p.server_key_pem.as_bytes()).unwrap();
    let mut cfg = rustls::ServerConfig::builder()
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    tokio_rustls::TlsAcceptor::from(Arc::new(cfg))
}

/// A minimal HTTP CONNECT proxy; returns its address and the CONNECT targets it was asked for.
pub async fn connect_proxy() -> (SocketAddr, Arc<Mutex<Vec<String>>>, CancellationToken) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = CancellationToken::new();
    let (seen2, stop2) = (seen.clone(), stop.clone());
    tokio::spawn(async move {
        loop {
            let (mut tcp, _) = tokio::select! {
                _ = stop2.cancelled() => return,
                r = listener.accept() => match r { Ok(x) => x, Err(_) => return },
            };
            let (seen, stop) = (seen2.clone(), stop2.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if tcp.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_string();
                let target = head
                    .lines()
                    .next()
                    .and_then(|l| l.strip_prefix("CONNECT "))
                    .and_then(|l| l.split(' ').next())
                    .map(str::to_owned);
                let Some(target) = target else {
                    let _ = tcp
                        .write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
                        .await;
                    return;
                };
                seen.lock().unwrap().push(target.clone());
                let _ = tcp.set_nodelay(true);
                let Ok(mut upstream) = tokio::net::TcpStream::connect(&target).await else {
                    let _ = tcp.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
                    return;
                };
                let _ = upstream.set_nodelay(true);
                let _ = tcp
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await;
                tokio::select! {
                    _ = stop.cancelled() => {},
                    _ = tokio::io::copy_bidirectional(&mut tcp, &mut upstream) => {},
                }
            });
        }
    });
    (addr, seen, stop)
}

/// A 200 body that sends `first` and then never ends (a hung server, or a quiet watch).
pub fn stalled(first: Bytes) -> Reply {
    use futures_util::StreamExt;
    let s = futures_util::stream::iter(vec![Ok::<_, Infallible>(Frame::data(first))])
        .chain(futures_util::stream::pending());
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/json")
        .body(BodyExt::boxed(StreamBody::new(s)))
        .unwrap()
}
