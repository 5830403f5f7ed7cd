//! A minimal raw-HTTP client for the embedded API server tests: hyper + rustls trusting the
//! server's CA, bearer token, JSON in and out, and a line reader for watch streams. It is
//! deliberately independent of the crate's own client so the server is tested on its own.

#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use embedded_cluster::{Cluster, ClusterHandle};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};

pub type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// A test client for one server.
pub struct TestClient {
    pub base: String,
    pub token: String,
    client: Client<Https, Full<Bytes>>,
}

/// An answer: status code, headers and JSON (or `Value::String` for non-JSON) body.
#[derive(Debug)]
pub struct Answer {
    pub code: u16,
    pub headers: http::HeaderMap,
    pub body: Value,
}

pub async fn start() -> ClusterHandle {
    Cluster::builder().start().await.unwrap()
}

impl TestClient {
    pub fn new(h: &ClusterHandle) -> Self {
        Self::with_http2(h, false)
    }

    pub fn with_http2(h: &ClusterHandle, http2_only: bool) -> Self {
        Self::from_parts(h.url(), h.token(), h.ca_pem(), http2_only)
    }

    /// A client of `url` that trusts `ca_pem` and authenticates with a client certificate
    /// (`cert_pem`, `key_pem`) and no token.
    pub fn with_client_cert(url: &str, ca_pem: &str, cert_pem: &str, key_pem: &str) -> Self {
        use rustls::pki_types::PrivateKeyDer;
        sample_client_go::install_crypto_provider();
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
            .unwrap();
        let chain = vec![CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
        let tls = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .unwrap();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_all_versions()
            .wrap_connector(crate::support::net::http_connector());
        TestClient {
            base: url.to_owned(),
            token: String::new(),
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }

    pub fn from_parts(url: &str, token: &str, ca_pem: Option<&str>, http2_only: bool) -> Self {
        sample_client_go::install_crypto_provider();
        let mut roots = rustls::RootCertStore::empty();
        if let Some(pem) = ca_pem {
            roots
                .add(CertificateDer::from_pem_slice(pem.as_bytes()).unwrap())
                .unwrap();
        }
        let tls = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let b = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http();
        let connector = if http2_only {
            b.enable_http2()
                .wrap_connector(crate::support::net::http_connector())
        } else {
            b.enable_all_versions()
                .wrap_connector(crate::support::net::http_connector())
        };
        let mut cb = Client::builder(TokioExecutor::new());
        if http2_only {
            cb.http2_only(true);
        }
        TestClient {
            base: url.to_owned(),
            token: token.to_owned(),
            client: cb.build(connector),
        }
    }

    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
        with_token: bool,
    ) -> hyper::Response<Incoming> {
        self.try_raw(method, path, headers, body, with_token)
            .await
            .unwrap()
    }

    /// A GET of `path` whose connection may fail (a refused handshake): the error as text.
    pub async fn try_get(&self, path: &str) -> Result<Answer, String> {
        let resp = self.try_raw("GET", path, &[], vec![], true).await;
        Ok(read_answer(resp.map_err(|e| e.to_string())?).await)
    }

    /// [`TestClient::raw`], with the connection's error handed back.
    pub async fn try_raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
        with_token: bool,
    ) -> Result<hyper::Response<Incoming>, hyper_util::client::legacy::Error> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{}", self.base, path));
        if with_token && !self.token.is_empty() {
            req = req.header("authorization", format!("Bearer {}", self.token));
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.client
            .request(req.body(Full::new(Bytes::from(body))).unwrap())
            .await
    }

    pub async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Answer {
        let bytes = body
            .map(|b| serde_json::to_vec(b).unwrap())
            .unwrap_or_default();
        let mut hs: Vec<(&str, &str)> = headers.to_vec();
        if body.is_some()
            && !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        {
            hs.push(("content-type", "application/json"));
        }
        let resp = self.raw(method, path, &hs, bytes, true).await;
        read_answer(resp).await
    }

    /// Creates the [`at_crd`] and checks that the server accepted it.
    pub async fn install_at_crd(&self) -> Answer {
        let crd = self.post(CRDS, &at_crd()).await;
        assert_eq!(crd.code, 201, "creating the At CRD: {:?}", crd.body);
        crd
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send("GET", path, &[], None).await
    }
    pub async fn post(&self, path: &str, body: &Value) -> Answer {
        self.send("POST", path, &[], Some(body)).await
    }
    pub async fn put(&self, path: &str, body: &Value) -> Answer {
        self.send("PUT", path, &[], Some(body)).await
    }
    pub async fn patch(&self, path: &str, ct: &str, body: &Value) -> Answer {
        self.send("PATCH", path, &[("content-type", ct)], Some(body))
            .await
    }
    pub async fn delete(&self, path: &str, body: Option<&Value>) -> Answer {
        self.send("DELETE", path, &[], body).await
    }

    /// Opens a watch and returns a reader of its events.
    pub async fn watch(&self, path: &str) -> WatchReader {
        let resp = self.raw("GET", path, &[], vec![], true).await;
        assert_eq!(resp.status(), 200, "watch {path} did not start");
        WatchReader {
            body: resp.into_body(),
            buf: Vec::new(),
        }
    }
}

pub async fn read_answer(resp: hyper::Response<Incoming>) -> Answer {
    let code = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Answer {
        code,
        headers,
        body,
    }
}

/// A reader over an already-started watch response.
pub fn reader(resp: hyper::Response<Incoming>) -> WatchReader {
    WatchReader {
        body: resp.into_body(),
        buf: Vec::new(),
    }
}

/// Reads newline-delimited watch events.
pub struct WatchReader {
    body: Incoming,
    buf: Vec<u8>,
}

impl WatchReader {
    /// The next event, or `None` when the stream ended. Panics after 10 s of silence, so a
    /// missing event fails the test instead of hanging it.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Some(serde_json::from_slice(&line).unwrap());
            }
            let frame = tokio::time::timeout(Duration::from_secs(10), self.body.frame())
                .await
                .expect("no watch event within 10 s");
            match frame {
                None => return None,
                Some(f) => {
                    if let Ok(data) = f.unwrap().into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// The next event that is not a BOOKMARK.
    pub async fn next_change(&mut self) -> Option<Value> {
        loop {
            let e = self.next().await?;
            if e["type"] != "BOOKMARK" {
                return Some(e);
            }
        }
    }
}

pub fn cm(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "labels": labels}, "data": {"k": "v"}})
}

/// The `ats.cnat.programming-kubernetes.info` CRD, inline.
pub fn at_crd() -> Value {
    json!({
      "apiVersion": "apiextensions.k8s.io/v1",
      "kind": "CustomResourceDefinition",
      "metadata": {"name": "ats.cnat.programming-kubernetes.info"},
      "spec": {
        "group": "cnat.programming-kubernetes.info",
        "names": {"plural": "ats", "singular": "at", "kind": "At", "listKind": "AtList"},
        "scope": "Namespaced",
        "versions": [{
          "name": "v1alpha1", "served": true, "storage": true,
          "subresources": {"status": {}},
          "additionalPrinterColumns": [
            {"name": "Schedule", "type": "string", "jsonPath": ".spec.schedule"},
            {"name": "Command", "type": "string", "jsonPath": ".spec.command"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
          ],
          "schema": {"openAPIV3Schema": {
            "type": "object",
            "properties": {
              "apiVersion": {"type": "string"},
              "kind": {"type": "string"},
              "metadata": {"type": "object"},
              "spec": {"type": "object", "required": ["schedule", "command"],
                "properties": {
                  "schedule": {"type": "string", "format": "date-time"},
                  "command": {"type": "string", "minLength": 1}
                }},
              "status": {"type": "object", "properties": {
                  "phase": {"type": "string", "enum": ["PENDING", "RUNNING", "DONE"]}
              }}
            }
          }}
        }]
      }
    })
}

pub fn at(name: &str) -> Value {
    json!({"apiVersion": "cnat.programming-kubernetes.info/v1alpha1", "kind": "At",
           "metadata": {"name": name},
           "spec": {"schedule": "2019-04-12T10:12:00Z", "command": "echo YAY"}})
}

pub const ATS: &str = "/apis/cnat.programming-kubernetes.info/v1alpha1/namespaces/default/ats";
pub const CMS: &str = "/api/v1/namespaces/default/configmaps";
pub const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

/// A test CA named `ca_name` and a serving certificate it signed for `names`: the PEMs of the
/// CA, the certificate and its key (the part of cert-manager a webhook test plays).
pub fn mint_serving_cert(ca_name: &str, names: &[&str]) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.distinguished_name.push(DnType::CommonName, ca_name);
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let cert = CertificateParams::new(names)
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}
