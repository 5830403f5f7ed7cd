//! CRD conversion webhooks: the embedded API server converting custom resources between
//! served versions through a `strategy: Webhook` CRD's webhook, on every verb.
//!
//! The test CRD `widgets.conv.example.com` serves two versions whose schemas differ: `v1`
//! holds `spec.size`, `v2` holds `spec.replicas` and a `spec.colour` that `v1` cannot hold (it
//! travels in the annotation `conv.example.com/colour`, as Kubernetes' own conversions keep
//! what an older version lacks). Each test runs a small HTTPS conversion webhook of its own
//! (rustls, a test CA minted by rcgen, the CA in the CRD's `caBundle`) that converts with
//! [`convert_widget`] or misbehaves on purpose.

use crate::support;
use crate::support::cluster;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use embedded_cluster::{Cluster, ClusterHandle};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use support::apiserver::*;
use tokio_util::sync::CancellationToken;

const GROUP: &str = "conv.example.com";
const STORAGE: &str = "conv.example.com/widgets";
const COLOUR: &str = "conv.example.com/colour";
const MERGE: &str = "application/merge-patch+json";

fn widgets(version: &str) -> String {
    format!("/apis/{GROUP}/{version}/namespaces/default/widgets")
}

fn widget(version: &str, name: &str) -> String {
    format!("{}/{name}", widgets(version))
}

/// The conversion the webhook performs: `v1 spec.size` ↔ `v2 spec.replicas`, `v2
/// spec.colour` ↔ the `conv.example.com/colour` annotation in `v1`. Lossless both ways.
fn convert_widget(obj: &Value, desired: &str) -> Value {
    let mut out = obj.clone();
    out["apiVersion"] = json!(desired);
    let spec = obj["spec"].clone();
    if desired.ends_with("/v2") && obj["apiVersion"].as_str() != Some(desired) {
        let mut s = json!({});
        if let Some(n) = spec.get("size") {
            s["replicas"] = n.clone();
        }
        if let Some(c) = obj["metadata"]["annotations"].get(COLOUR) {
            s["colour"] = c.clone();
            if let Some(a) = out["metadata"]["annotations"].as_object_mut() {
                a.remove(COLOUR);
                if a.is_empty() {
                    out["metadata"]
                        .as_object_mut()
                        .unwrap()
                        .remove("annotations");
                }
            }
        }
        out["spec"] = s;
    } else if desired.ends_with("/v1") && obj["apiVersion"].as_str() != Some(desired) {
        let mut s = json!({});
        if let Some(n) = spec.get("replicas") {
            s["size"] = n.clone();
        }
        if let Some(c) = spec.get("colour") {
            out["metadata"]["annotations"][COLOUR] = c.clone();
        }
        out["spec"] = s;
    }
    out
}

/// How the webhook behaves.
#[derive(Clone, Debug, PartialEq)]
enum Mode {
    Convert,
    Fail(&'static str),
    ExtraObject,
    WrongVersion,
    Slow(u64),
}

/// A running conversion webhook: every `request` it got.
struct Hook {
    addr: SocketAddr,
    ca_pem: String,
    seen: Arc<Mutex<Vec<Value>>>,
    mode: Arc<Mutex<Mode>>,
    stop: CancellationToken,
}

impl Drop for Hook {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Hook {
    fn url(&self) -> String {
        format!("https://127.0.0.1:{}/convert", self.addr.port())
    }
    fn client_config(&self) -> Value {
        json!({"url": self.url(),
               "caBundle": base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)})
    }
    fn calls(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
    fn last(&self) -> Value {
        self.seen
            .lock()
            .unwrap()
            .last()
            .cloned()
            .unwrap_or(Value::Null)
    }
    fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }
}

fn mint() -> (String, String, String) {
    crate::support::apiserver::mint_serving_cert(
        "conversion-test-ca",
        &["localhost", "127.0.0.1", "conv.default.svc"],
    )
}

async fn hook() -> Hook {
    sample_client_go::install_crypto_provider();
    let (ca_pem, cert_pem, key_pem) = mint();
    let chain = vec![CertificateDer::from_pem_slice(cert_pem.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let mode = Arc::new(Mutex::new(Mode::Convert));
    let stop = CancellationToken::new();
    let (seen2, mode2, stop2) = (seen.clone(), mode.clone(), stop.clone());
    tokio::spawn(async move {
        loop {
            let tcp = tokio::select! {
                _ = stop2.cancelled() => return,
                r = listener.accept() => match r { Ok((t, _)) => t, Err(_) => continue },
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, seen, mode) = (acceptor.clone(), seen2.clone(), mode2.clone());
            let stop = stop2.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (seen, mode) = (seen.clone(), mode.clone());
                        async move {
                            let path = req.uri().path().to_owned();
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let review: Value = serde_json::from_slice(&body).unwrap();
                            let request = review["request"].clone();
                            seen.lock().unwrap().push(request.clone());
                            if path == "/mutate" {
                                // An admission webhook: paints the widget if it has no colour.
                                let ops = if request["object"]["spec"].get("colour").is_none() {
                                    json!([{"op": "add", "path": "/spec/colour", "value": "painted"}])
                                } else {
                                    json!([])
                                };
                                let answer = json!({
                                    "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                    "response": {"uid": request["uid"], "allowed": true,
                                        "patchType": "JSONPatch",
                                        "patch": base64::engine::general_purpose::STANDARD
                                            .encode(ops.to_string())}});
                                return Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                    Full::new(Bytes::from(serde_json::to_vec(&answer).unwrap())),
                                ));
                            }
                            let mode = mode.lock().unwrap().clone();
                            let desired = request["desiredAPIVersion"].as_str().unwrap_or("");
                            let mut converted: Vec<Value> = request["objects"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .map(|o| convert_widget(o, desired))
                                .collect();
                            let mut result = json!({"status": "Success"});
                            match mode {
                                Mode::Convert => {}
                                Mode::Fail(m) => {
                                    result = json!({"status": "Failure", "message": m});
                                    converted.clear();
                                }
                                Mode::ExtraObject => converted.push(converted[0].clone()),
                                Mode::WrongVersion => {
                                    for c in &mut converted {
                                        c["apiVersion"] = json!("conv.example.com/v3");
                                    }
                                }
                                Mode::Slow(s) => tokio::time::sleep(Duration::from_secs(s)).await,
                            }
                            let answer = json!({
                                "apiVersion": "apiextensions.k8s.io/v1",
                                "kind": "ConversionReview",
                                "response": {"uid": request["uid"], "result": result,
                                             "convertedObjects": converted}});
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                Bytes::from(serde_json::to_vec(&answer).unwrap()),
                            )))
                        }
                    },
                );
                let conn = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let serve = conn.serve_connection(TokioIo::new(tls), svc);
                tokio::select! {
                    _ = serve => {}
                    _ = stop.cancelled() => {}
                }
            });
        }
    });
    Hook {
        addr,
        ca_pem,
        seen,
        mode,
        stop,
    }
}

fn version(name: &str, storage: bool, spec: Value) -> Value {
    json!({"name": name, "served": true, "storage": storage,
           "subresources": {"status": {}},
           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
               "spec": {"type": "object", "properties": spec},
               "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}}}})
}

/// The two-version CRD, storing `storage`, converting through `client_config`.
fn crd(storage: &str, client_config: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.conv.example.com"},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                      "listKind": "WidgetList"},
            "versions": [
                version("v1", storage == "v1", json!({"size": {"type": "integer", "minimum": 0}})),
                version("v2", storage == "v2", json!({"replicas": {"type": "integer"},
                                                      "colour": {"type": "string"}})),
            ],
            "conversion": {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"], "clientConfig": client_config}},
        }
    })
}

async fn setup(storage: &str) -> (Hook, ClusterHandle, TestClient) {
    let h = hook().await;
    let server = start().await;
    let api = TestClient::new(&server);
    let r = api.post(CRDS, &crd(storage, h.client_config())).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    (h, server, api)
}

fn v1_widget(name: &str, size: i64) -> Value {
    json!({"apiVersion": "conv.example.com/v1", "kind": "Widget",
           "metadata": {"name": name}, "spec": {"size": size}})
}

fn v2_widget(name: &str, replicas: i64, colour: &str) -> Value {
    json!({"apiVersion": "conv.example.com/v2", "kind": "Widget",
           "metadata": {"name": name}, "spec": {"replicas": replicas, "colour": colour}})
}

#[tokio::test]
async fn every_verb_in_the_other_version_goes_through_the_webhook() {
    let (hook, server, api) = setup("v2").await;

    // Create in v1: stored as v2, answered as v1.
    let r = api.post(&widgets("v1"), &v1_widget("a", 3)).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    assert_eq!(r.body["apiVersion"], "conv.example.com/v1");
    assert_eq!(r.body["spec"], json!({"size": 3}));
    let stored = cluster::get(&server, STORAGE, "default", "a").unwrap();
    assert_eq!(stored["apiVersion"], "conv.example.com/v2");
    assert_eq!(stored["spec"], json!({"replicas": 3}));
    assert_eq!(stored["metadata"]["uid"], r.body["metadata"]["uid"]);
    assert_eq!(
        stored["metadata"]["resourceVersion"],
        r.body["metadata"]["resourceVersion"]
    );

    // The v1 schema validates a v1 write before anything is converted.
    let calls = hook.calls();
    let r = api.post(&widgets("v1"), &v1_widget("negative", -1)).await;
    assert_eq!(r.code, 422, "{:?}", r.body);
    assert_eq!(hook.calls(), calls, "an invalid object is not converted");

    // A dry run in v1 is computed in v1 and stores (and converts) nothing.
    let calls = hook.calls();
    let r = api
        .post(
            &format!("{}?dryRun=All", widgets("v1")),
            &v1_widget("dry", 1),
        )
        .await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    assert_eq!(r.body["spec"], json!({"size": 1}));
    assert!(cluster::get(&server, STORAGE, "default", "dry").is_none());
    assert_eq!(hook.calls(), calls);

    // Read in the storage version: no webhook call.
    let calls = hook.calls();
    let r = api.get(&widget("v2", "a")).await;
    assert_eq!(r.body["spec"], json!({"replicas": 3}));
    assert_eq!(hook.calls(), calls, "no conversion when the versions match");

    // Write in v2 what v1 cannot hold; v1 shows it in the annotation and keeps it through a v1
    // update.
    let r = api.post(&widgets("v2"), &v2_widget("b", 2, "blue")).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    let r = api.get(&widget("v1", "b")).await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    assert_eq!(r.body["apiVersion"], "conv.example.com/v1");
    assert_eq!(r.body["spec"], json!({"size": 2}));
    assert_eq!(r.body["metadata"]["annotations"][COLOUR], "blue");
    let r = api
        .patch(&widget("v1", "b"), MERGE, &json!({"spec": {"size": 5}}))
        .await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    assert_eq!(r.body["spec"], json!({"size": 5}));
    assert_eq!(r.body["metadata"]["generation"], 2);
    let r = api.get(&widget("v2", "b")).await;
    assert_eq!(r.body["spec"], json!({"replicas": 5, "colour": "blue"}));
    assert!(r.body["metadata"]["annotations"].get(COLOUR).is_none());

    // PUT in v1 (the object read in v1, changed, written back).
    let mut a = api.get(&widget("v1", "a")).await.body;
    a["spec"]["size"] = json!(7);
    let r = api.put(&widget("v1", "a"), &a).await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    assert_eq!(r.body["spec"], json!({"size": 7}));
    let stored = cluster::get(&server, STORAGE, "default", "a").unwrap();
    assert_eq!(stored["spec"], json!({"replicas": 7}));
    // A stale resourceVersion is still a conflict.
    a["spec"]["size"] = json!(8);
    let r = api.put(&widget("v1", "a"), &a).await;
    assert_eq!(r.code, 409, "{:?}", r.body);

    // The status subresource in v1.
    let mut s = api.get(&widget("v1", "a")).await.body;
    s["status"] = json!({"ready": true});
    let r = api.put(&format!("{}/status", widget("v1", "a")), &s).await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    assert_eq!(r.body["status"], json!({"ready": true}));
    assert_eq!(r.body["apiVersion"], "conv.example.com/v1");
    let r = api.get(&widget("v2", "a")).await;
    assert_eq!(r.body["status"], json!({"ready": true}));
    assert_eq!(r.body["spec"], json!({"replicas": 7}));

    // LIST in v1: both items in one ConversionReview.
    let calls = hook.calls();
    let r = api.get(&widgets("v1")).await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    assert_eq!(r.body["apiVersion"], "conv.example.com/v1");
    let sizes: Vec<&Value> = r.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["spec"]["size"])
        .collect();
    assert_eq!(sizes, [&json!(7), &json!(5)]);
    assert_eq!(hook.calls(), calls + 1, "one review for the whole list");
    let review = hook.last();
    assert_eq!(review["desiredAPIVersion"], "conv.example.com/v1");
    assert_eq!(review["objects"].as_array().unwrap().len(), 2);

    // DELETE in v1.
    let r = api.delete(&widget("v1", "a"), None).await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    assert!(cluster::get(&server, STORAGE, "default", "a").is_none());
    server.shutdown().await;
}

#[tokio::test]
async fn a_watch_in_the_other_version_sees_storage_writes_converted() {
    let (_hook, server, api) = setup("v2").await;
    let mut w = api.watch(&format!("{}?watch=true", widgets("v1"))).await;
    let r = api.post(&widgets("v2"), &v2_widget("w", 4, "red")).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    let e = w.next_change().await.expect("an event");
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"]["apiVersion"], "conv.example.com/v1");
    assert_eq!(e["object"]["spec"], json!({"size": 4}));
    assert_eq!(e["object"]["metadata"]["annotations"][COLOUR], "red");
    let r = api
        .patch(&widget("v2", "w"), MERGE, &json!({"spec": {"replicas": 6}}))
        .await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    let e = w.next_change().await.expect("an event");
    assert_eq!(e["type"], "MODIFIED");
    assert_eq!(e["object"]["spec"], json!({"size": 6}));
    server.shutdown().await;
}

#[tokio::test]
async fn objects_stored_before_the_storage_switch_still_read_back() {
    let (hook, server, api) = setup("v1").await;
    let r = api.post(&widgets("v1"), &v1_widget("old", 2)).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    assert_eq!(
        hook.calls(),
        0,
        "written in the storage version: no conversion"
    );

    // Switch the storage version to v2.
    let mut c = api
        .get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.conv.example.com")
        .await
        .body;
    assert_eq!(c["status"]["storedVersions"], json!(["v1"]));
    c["spec"]["versions"][0]["storage"] = json!(false);
    c["spec"]["versions"][1]["storage"] = json!(true);
    let r = api
        .put(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.conv.example.com",
            &c,
        )
        .await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    assert_eq!(r.body["status"]["storedVersions"], json!(["v1", "v2"]));

    // The old object is still stored as v1 and reads back in both versions.
    let stored = cluster::get(&server, STORAGE, "default", "old").unwrap();
    assert_eq!(stored["apiVersion"], "conv.example.com/v1");
    let r = api.get(&widget("v1", "old")).await;
    assert_eq!(r.body["spec"], json!({"size": 2}));
    assert_eq!(hook.calls(), 0);
    let r = api.get(&widget("v2", "old")).await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    assert_eq!(r.body["spec"], json!({"replicas": 2}));
    assert_eq!(hook.calls(), 1);

    // A new object in v1 is now stored as v2; a v2 list converts only the old one.
    let r = api.post(&widgets("v1"), &v1_widget("new", 9)).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    let stored = cluster::get(&server, STORAGE, "default", "new").unwrap();
    assert_eq!(stored["apiVersion"], "conv.example.com/v2");
    let r = api.get(&widgets("v2")).await;
    let items = r.body["items"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert!(
        items
            .iter()
            .all(|i| i["apiVersion"] == "conv.example.com/v2")
    );
    assert_eq!(hook.last()["objects"].as_array().unwrap().len(), 1);
    assert_eq!(hook.last()["objects"][0]["metadata"]["name"], "old");

    // Writing the old object moves it to the storage version.
    let r = api
        .patch(&widget("v1", "old"), MERGE, &json!({"spec": {"size": 3}}))
        .await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    let stored = cluster::get(&server, STORAGE, "default", "old").unwrap();
    assert_eq!(stored["apiVersion"], "conv.example.com/v2");
    assert_eq!(stored["spec"], json!({"replicas": 3}));

    // A version still in storedVersions cannot leave spec.versions.
    let mut c = r_crd(&api).await;
    c["spec"]["versions"] = json!([c["spec"]["versions"][1].clone()]);
    let r = api
        .put(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.conv.example.com",
            &c,
        )
        .await;
    assert_eq!(r.code, 422, "{:?}", r.body);
    assert!(
        r.body["message"].as_str().unwrap().contains(
            "status.storedVersions[0]: Invalid value: \"v1\": must appear in spec.versions"
        ),
        "{:?}",
        r.body
    );
    server.shutdown().await;
}

async fn r_crd(api: &TestClient) -> Value {
    api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.conv.example.com")
        .await
        .body
}

#[tokio::test]
async fn a_failing_webhook_gives_the_real_servers_errors() {
    let (hook, server, api) = setup("v2").await;
    assert_eq!(
        api.post(&widgets("v2"), &v2_widget("x", 1, "green"))
            .await
            .code,
        201
    );

    hook.set(Mode::Fail("spec.replicas cannot be shown in v1"));
    let r = api.get(&widget("v1", "x")).await;
    assert_eq!(r.code, 500, "{:?}", r.body);
    assert_eq!(
        r.body["message"],
        "conversion webhook for conv.example.com/v2, Kind=Widget failed: spec.replicas cannot be shown in v1"
    );
    let r = api.post(&widgets("v1"), &v1_widget("y", 1)).await;
    assert_eq!(r.code, 500, "{:?}", r.body);
    assert_eq!(
        r.body["message"],
        "conversion webhook for conv.example.com/v1, Kind=Widget failed: spec.replicas cannot be shown in v1"
    );
    assert!(cluster::get(&server, STORAGE, "default", "y").is_none());

    hook.set(Mode::ExtraObject);
    let r = api.get(&widget("v1", "x")).await;
    assert_eq!(r.code, 500);
    assert_eq!(
        r.body["message"],
        "conversion webhook for conv.example.com/v2, Kind=Widget returned 2 objects, expected 1"
    );
    // A LIST of one item is still a list.
    let r = api.get(&widgets("v1")).await;
    assert_eq!(r.code, 500, "{:?}", r.body);
    assert_eq!(
        r.body["message"],
        "conversion webhook for conv.example.com/v2, Kind=WidgetList returned 2 objects, expected 1"
    );
    hook.set(Mode::WrongVersion);
    let r = api.get(&widget("v1", "x")).await;
    assert_eq!(
        r.body["message"],
        "conversion webhook for conv.example.com/v2, Kind=Widget returned invalid object at index 0: invalid groupVersion (expected conv.example.com/v1, received conv.example.com/v3)"
    );

    // A watch whose event cannot be converted ends.
    hook.set(Mode::Convert);
    let mut w = api.watch(&format!("{}?watch=true", widgets("v1"))).await;
    let e = w.next_change().await.expect("the initial ADDED");
    assert_eq!(e["object"]["spec"], json!({"size": 1}));
    hook.set(Mode::Fail("no"));
    assert_eq!(
        api.post(&widgets("v2"), &v2_widget("z", 1, "red"))
            .await
            .code,
        201
    );
    assert!(w.next().await.is_none(), "the watch ends");

    // The webhook gone: Go's dial error inside the real message.
    let url = hook.url();
    let port = hook.addr.port();
    drop(hook);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = api.get(&widget("v1", "x")).await;
    assert_eq!(r.code, 500, "{:?}", r.body);
    assert_eq!(
        r.body["message"],
        format!(
            "conversion webhook for conv.example.com/v2, Kind=Widget failed: Post \"{url}?timeout=30s\": dial tcp 127.0.0.1:{port}: connect: connection refused"
        )
    );
    // Reads in the storage version need no webhook.
    assert_eq!(api.get(&widget("v2", "x")).await.code, 200);
    server.shutdown().await;
}

#[tokio::test]
async fn an_admission_webhook_on_the_other_version_sees_the_object_converted() {
    let (hook, server, api) = setup("v2").await;
    let mwc = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration", "metadata": {"name": "paint"},
        "webhooks": [{"name": "paint.conv.example.com",
            "clientConfig": {"url": format!("https://127.0.0.1:{}/mutate", hook.addr.port()),
                             "caBundle": hook.client_config()["caBundle"]},
            "rules": [{"operations": ["CREATE"], "apiGroups": [GROUP], "apiVersions": ["v2"],
                       "resources": ["widgets"]}],
            "sideEffects": "None", "admissionReviewVersions": ["v1"]}]});
    let r = api
        .post(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            &mwc,
        )
        .await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    // Created in v1; the webhook's rule names v2 (matchPolicy Equivalent): it is shown the v2
    // object, and its v2 patch lands in the v1 answer through the annotation.
    let r = api.post(&widgets("v1"), &v1_widget("m", 1)).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    assert_eq!(r.body["apiVersion"], "conv.example.com/v1");
    assert_eq!(r.body["metadata"]["annotations"][COLOUR], "painted");
    let review = hook
        .seen
        .lock()
        .unwrap()
        .iter()
        .find(|r| r.get("object").is_some())
        .cloned()
        .expect("an admission review");
    assert_eq!(review["object"]["apiVersion"], "conv.example.com/v2");
    assert_eq!(review["object"]["spec"], json!({"replicas": 1}));
    assert_eq!(review["kind"]["version"], "v2");
    assert_eq!(review["requestKind"]["version"], "v1");
    let stored = cluster::get(&server, STORAGE, "default", "m").unwrap();
    assert_eq!(stored["spec"], json!({"replicas": 1, "colour": "painted"}));
    server.shutdown().await;
}

#[tokio::test]
async fn a_service_reference_is_dialled_through_the_service_endpoints() {
    let hook = hook().await;
    let server = Cluster::builder()
        .service_endpoint("default/conv", &format!("127.0.0.1:{}", hook.addr.port()))
        .start()
        .await
        .unwrap();
    let api = TestClient::new(&server);
    let service = json!({"service": {"namespace": "default", "name": "conv", "path": "/convert"},
                         "caBundle": hook.client_config()["caBundle"]});
    let r = api.post(CRDS, &crd("v2", service)).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    let r = api.post(&widgets("v1"), &v1_widget("svc", 2)).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    assert_eq!(r.body["spec"], json!({"size": 2}));
    let stored = cluster::get(&server, STORAGE, "default", "svc").unwrap();
    assert_eq!(stored["spec"], json!({"replicas": 2}));
    let port = hook.addr.port();
    drop(hook);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let r = api.get(&widget("v1", "svc")).await;
    assert_eq!(r.code, 500, "{:?}", r.body);
    assert_eq!(
        r.body["message"],
        format!(
            "conversion webhook for conv.example.com/v2, Kind=Widget failed: Post \"https://conv.default.svc:443/convert?timeout=30s\": dial tcp 127.0.0.1:{port}: connect: connection refused"
        )
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_slow_webhook_times_out() {
    let hook = hook().await;
    let server = Cluster::builder()
        .conversion_webhook_timeout(Duration::from_secs(1))
        .start()
        .await
        .unwrap();
    let api = TestClient::new(&server);
    assert_eq!(
        api.post(CRDS, &crd("v2", hook.client_config())).await.code,
        201
    );
    assert_eq!(
        api.post(&widgets("v2"), &v2_widget("s", 1, "red"))
            .await
            .code,
        201
    );
    hook.set(Mode::Slow(5));
    let r = api.get(&widget("v1", "s")).await;
    assert_eq!(r.code, 500, "{:?}", r.body);
    assert_eq!(
        r.body["message"],
        format!(
            "conversion webhook for conv.example.com/v2, Kind=Widget failed: Post \"{}?timeout=1s\": context deadline exceeded",
            hook.url()
        )
    );
    server.shutdown().await;
}

#[tokio::test]
async fn the_conversion_stanza_is_validated_like_the_real_server() {
    let server = start().await;
    let api = TestClient::new(&server);
    let mut c = crd("v2", json!({"url": "http://127.0.0.1:1/convert"}));
    c["spec"]["conversion"]["webhook"]["conversionReviewVersions"] = json!(["v9"]);
    let r = api.post(CRDS, &c).await;
    assert_eq!(r.code, 422, "{:?}", r.body);
    let m = r.body["message"].as_str().unwrap();
    assert!(
        m.contains("spec.conversion.webhookClientConfig.url: Invalid value: \"http://127.0.0.1:1/convert\": 'https' is the only allowed URL scheme"),
        "{m}"
    );
    assert!(
        m.contains("spec.conversion.conversionReviewVersions: Invalid value: []string{\"v9\"}: must include at least one of v1, v1beta1"),
        "{m}"
    );
    let mut c = crd("v2", json!({"url": "https://127.0.0.1:1/convert"}));
    c["spec"]["conversion"]["strategy"] = json!("None");
    let r = api.post(CRDS, &c).await;
    assert_eq!(r.code, 422, "{:?}", r.body);
    assert!(
        r.body["message"].as_str().unwrap().contains(
            "spec.conversion.webhookClientConfig: Forbidden: should not be set when strategy is not set to Webhook"
        ),
        "{:?}",
        r.body
    );
    // A service reference gets its default port.
    let c = crd(
        "v2",
        json!({"service": {"namespace": "default", "name": "conv", "path": "/convert"}}),
    );
    let r = api.post(CRDS, &c).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    assert_eq!(
        r.body["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["port"],
        443
    );
    server.shutdown().await;
}

/// kubectl creating in one version and reading in the other.
async fn kubectl_reads_both_versions(version: &str) {
    let Some(bin) = cluster::kubectl_bin(Some(version)) else {
        eprintln!("SKIPPED: kubectl {version} not found (looked beside the kubectl on the PATH)");
        return;
    };
    let (_hook, server, _api) = setup("v2").await;
    let k = cluster::Kubectl::with_bin(bin, &server);
    let manifest = "apiVersion: conv.example.com/v1\nkind: Widget\nmetadata:\n  name: kc\n  annotations:\n    conv.example.com/colour: teal\nspec:\n  size: 4\n";
    let out = k
        .run_with_input(&["apply", "-f", "-"], Some(manifest))
        .await;
    assert!(out.ok, "{}", out.stderr);
    let v2: Value = k.json(&["get", "widgets.v2.conv.example.com", "kc"]).await;
    assert_eq!(v2["apiVersion"], "conv.example.com/v2");
    assert_eq!(v2["spec"], json!({"replicas": 4, "colour": "teal"}));
    let v1: Value = k.json(&["get", "widgets.v1.conv.example.com", "kc"]).await;
    assert_eq!(v1["apiVersion"], "conv.example.com/v1");
    assert_eq!(v1["spec"], json!({"size": 4}));
    // apply again in v1 (kubectl's three-way merge against the v1 view) changes the size.
    let out = k
        .run_with_input(
            &["apply", "-f", "-"],
            Some(&manifest.replace("size: 4", "size: 6")),
        )
        .await;
    assert!(out.ok, "{}", out.stderr);
    let table = k.ok(&["get", "widgets.v2.conv.example.com"]).await;
    assert!(table.contains("kc"), "{table}");
    let v2: Value = k.json(&["get", "widgets.v2.conv.example.com", "kc"]).await;
    assert_eq!(v2["spec"], json!({"replicas": 6, "colour": "teal"}));
    // Server-side apply in v1 merges against the object converted to v1.
    let ssa =
        "apiVersion: conv.example.com/v1\nkind: Widget\nmetadata:\n  name: ssa\nspec:\n  size: 1\n";
    let out = k
        .run_with_input(&["apply", "--server-side", "-f", "-"], Some(ssa))
        .await;
    assert!(out.ok, "{}", out.stderr);
    let out = k
        .run_with_input(
            &["apply", "--server-side", "-f", "-"],
            Some(&ssa.replace("size: 1", "size: 2")),
        )
        .await;
    assert!(out.ok, "{}", out.stderr);
    let stored = cluster::get(&server, STORAGE, "default", "ssa").unwrap();
    assert_eq!(stored["apiVersion"], "conv.example.com/v2");
    assert_eq!(stored["spec"], json!({"replicas": 2}));
    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_1_28_creates_in_one_version_and_reads_in_the_other() {
    kubectl_reads_both_versions("1.28").await;
}

#[tokio::test]
async fn kubectl_1_33_creates_in_one_version_and_reads_in_the_other() {
    kubectl_reads_both_versions("1.33").await;
}
