//! Admission webhooks: the embedded API server calling validating and mutating webhooks over
//! HTTPS, with the real server's matching rules, policies and messages.
//!
//! Each test runs a small webhook server of its own (rustls with a test CA minted by rcgen,
//! answering `AdmissionReview`s with a closure), registers a configuration pointing at it, and
//! writes through the API as a client would.

use crate::support;
use crate::support::cluster;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{Value, json};
use support::apiserver::*;
use tokio_util::sync::CancellationToken;

const VWCS: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
const MWCS: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";

/// What a handler answers: the `response` (without `uid`, which the server fills in), after
/// an optional delay.
type Handler = dyn Fn(&str, &Value) -> (Value, u64) + Send + Sync;

/// A test CA and a serving certificate for `localhost`, `127.0.0.1` and `hook.test.svc`.
struct Pki {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

fn mint() -> Pki {
    let (ca_pem, cert_pem, key_pem) = crate::support::apiserver::mint_serving_cert(
        "webhook-test-ca",
        &["localhost", "127.0.0.1", "hook.test.svc"],
    );
    Pki {
        ca_pem,
        cert_pem,
        key_pem,
    }
}

/// A running webhook server: every request it got, by path.
struct HookServer {
    addr: SocketAddr,
    ca_pem: String,
    seen: Arc<Mutex<Vec<(String, Value)>>>,
    stop: CancellationToken,
}

impl Drop for HookServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl HookServer {
    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.addr.port())
    }
    fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }
    fn seen(&self, path: &str) -> Vec<Value> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, r)| r.clone())
            .collect()
    }
}

async fn hook_server(
    handler: impl Fn(&str, &Value) -> (Value, u64) + Send + Sync + 'static,
) -> HookServer {
    hook_server_with(mint(), handler).await
}

/// A self-signed certificate with `CA:TRUE` for `names`, its own CA (`openssl req -x509
/// -newkey ec ... -addext subjectAltName=IP:127.0.0.1` makes such a certificate).
fn self_signed_ca(names: &[&str]) -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(DnType::CommonName, "hook");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    Pki {
        ca_pem: cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

async fn hook_server_with(
    pki: Pki,
    handler: impl Fn(&str, &Value) -> (Value, u64) + Send + Sync + 'static,
) -> HookServer {
    sample_client_go::install_crypto_provider();
    let chain = vec![CertificateDer::from_pem_slice(pki.cert_pem.as_bytes()).unwrap()];
    let key = PrivateKeyDer::from_pem_slice(pki.key_pem.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let stop = CancellationToken::new();
    let handler: Arc<Handler> = Arc::new(handler);
    let (seen2, stop2) = (seen.clone(), stop.clone());
    tokio::spawn(async move {
        loop {
            let tcp = tokio::select! {
                _ = stop2.cancelled() => return,
                r = listener.accept() => match r { Ok((t, _)) => t, Err(_) => continue },
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, seen, handler) = (acceptor.clone(), seen2.clone(), handler.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (seen, handler) = (seen.clone(), handler.clone());
                        async move {
                            let path = req.uri().path().to_owned();
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let review: Value = serde_json::from_slice(&body).unwrap();
                            let request = review["request"].clone();
                            seen.lock().unwrap().push((path.clone(), request.clone()));
                            let (mut response, delay) = handler(&path, &request);
                            if delay > 0 {
                                tokio::time::sleep(std::time::Duration::from_secs(delay)).await;
                            }
                            if response.get("uid").is_none() {
                                response["uid"] = request["uid"].clone();
                            }
                            let answer = json!({"apiVersion": "admission.k8s.io/v1",
                            "kind": "AdmissionReview", "response": response});
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                Bytes::from(serde_json::to_vec(&answer).unwrap()),
                            )))
                        }
                    },
                );
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    HookServer {
        addr,
        ca_pem: pki.ca_pem,
        seen,
        stop,
    }
}

fn allow() -> Value {
    json!({"allowed": true})
}

fn patch_response(ops: Value) -> Value {
    json!({"allowed": true, "patchType": "JSONPatch",
           "patch": base64::engine::general_purpose::STANDARD.encode(ops.to_string())})
}

/// A configuration with one webhook on configmaps.
fn config(kind: &str, name: &str, client_config: Value, extra: Value) -> Value {
    let mut hook = json!({
        "name": name,
        "clientConfig": client_config,
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                   "resources": ["configmaps"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        hook[k] = v;
    }
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
           "metadata": {"name": name.split('.').next().unwrap()}, "webhooks": [hook]})
}

fn url_config(hooks: &HookServer, path: &str) -> Value {
    json!({"url": hooks.url(path), "caBundle": hooks.ca_bundle()})
}

#[tokio::test]
async fn a_validating_webhook_denies_with_its_message_code_and_causes() {
    let hooks = hook_server(|_, req| {
        if req["object"]["data"]["k"] == "bad" {
            (
                json!({"allowed": false, "status": {"code": 422, "reason": "Invalid",
                    "message": "data.k: Invalid value: \"bad\": must not be bad",
                    "details": {"causes": [{"reason": "FieldValueInvalid", "field": "data.k",
                        "message": "Invalid value: \"bad\": must not be bad"}]}}}),
                0,
            )
        } else if req["object"]["data"]["k"] == "silent" {
            (json!({"allowed": false}), 0)
        } else {
            (
                json!({"allowed": true, "warnings": ["k is fine, but consider v2"]}),
                0,
            )
        }
    })
    .await;
    let server = start().await;
    let api = TestClient::new(&server);
    let c = api
        .post(
            VWCS,
            &config(
                "ValidatingWebhookConfiguration",
                "deny.test.io",
                url_config(&hooks, "/validate"),
                json!({}),
            ),
        )
        .await;
    assert_eq!(c.code, 201, "{:?}", c.body);
    // Defaults are stored.
    let w = &c.body["webhooks"][0];
    assert_eq!(w["failurePolicy"], "Fail");
    assert_eq!(w["matchPolicy"], "Equivalent");
    assert_eq!(w["timeoutSeconds"], 10);
    assert_eq!(w["namespaceSelector"], json!({}));

    let mut bad = cm("bad", json!({}));
    bad["data"]["k"] = json!("bad");
    let r = api.post(CMS, &bad).await;
    assert_eq!(r.code, 422, "{:?}", r.body);
    assert_eq!(
        r.body["message"],
        "admission webhook \"deny.test.io\" denied the request: data.k: Invalid value: \"bad\": must not be bad"
    );
    assert_eq!(r.body["reason"], "Invalid");
    assert_eq!(r.body["details"]["causes"][0]["field"], "data.k");
    assert_eq!(
        api.get(&format!("{CMS}/bad")).await.code,
        404,
        "nothing stored"
    );

    // A denial without a status: 400 and "without explanation".
    let mut silent = cm("silent", json!({}));
    silent["data"]["k"] = json!("silent");
    let r = api.post(CMS, &silent).await;
    assert_eq!(r.code, 400, "{:?}", r.body);
    assert_eq!(
        r.body["message"],
        "admission webhook \"deny.test.io\" denied the request without explanation"
    );

    // Allowed: stored, and the webhook's warning reaches the client.
    let r = api.post(CMS, &cm("good", json!({}))).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    let warning = r.headers.get("warning").unwrap().to_str().unwrap();
    assert_eq!(warning, "299 - \"k is fine, but consider v2\"");

    // What the webhook was told.
    let seen = hooks.seen("/validate");
    let req = seen.last().unwrap();
    assert_eq!(req["operation"], "CREATE");
    assert_eq!(
        req["kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(
        req["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(req["namespace"], "default");
    assert_eq!(req["name"], "good");
    assert_eq!(req["userInfo"]["username"], "admin");
    assert_eq!(req["dryRun"], false);
    assert_eq!(req["options"]["kind"], "CreateOptions");
    // Validating webhooks see the object as it would be stored.
    assert!(req["object"]["metadata"]["uid"].is_string(), "{req}");
    assert!(req["oldObject"].is_null());

    // An update is UPDATE with the old object; DELETE is not in the rules.
    let mut upd = api.get(&format!("{CMS}/good")).await.body;
    upd["data"]["k"] = json!("bad");
    assert_eq!(api.put(&format!("{CMS}/good"), &upd).await.code, 422);
    let last = hooks.seen("/validate").pop().unwrap();
    assert_eq!(last["operation"], "UPDATE");
    assert_eq!(last["oldObject"]["data"]["k"], "v");
    // Both objects carry their field sets as JSON objects, as a client reads them.
    for which in ["object", "oldObject"] {
        let set = &last[which]["metadata"]["managedFields"][0]["fieldsV1"];
        assert!(set["f:data"].is_object(), "{which}: {set}");
    }
    let r = api
        .patch(
            &format!("{CMS}/good"),
            "application/merge-patch+json",
            &json!({"data": {"k": "bad"}}),
        )
        .await;
    assert_eq!(
        r.code, 422,
        "a patch is admitted as the patched object: {:?}",
        r.body
    );
    let before = hooks.seen("/validate").len();
    assert_eq!(api.delete(&format!("{CMS}/good"), None).await.code, 200);
    assert_eq!(
        hooks.seen("/validate").len(),
        before,
        "DELETE is not in the rules"
    );

    // kubectl shows the webhook's message, and lists the configuration with its printer columns.
    if let Some(k) = cluster::Kubectl::new(&server) {
        let manifest =
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: viakubectl\ndata:\n  k: bad\n";
        let out = k
            .run_with_input(&["apply", "-f", "-"], Some(manifest))
            .await;
        assert!(!out.ok);
        // A 422 with causes: kubectl prints the causes, field first.
        assert!(
            out.stderr
                .contains("data.k: Invalid value: \"bad\": must not be bad"),
            "{}",
            out.stderr
        );
        let out = k
            .run_with_input(
                &["apply", "-f", "-"],
                Some(&manifest.replace("k: bad", "k: silent")),
            )
            .await;
        assert!(!out.ok);
        assert!(
            out.stderr.contains(
                "Error from server: error when creating \"STDIN\": admission webhook \"deny.test.io\" denied the request without explanation"
            ),
            "{}",
            out.stderr
        );
        let out = k.ok(&["get", "validatingwebhookconfigurations"]).await;
        let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(header, ["NAME", "WEBHOOKS", "AGE"], "{out}");
        assert!(out.lines().nth(1).unwrap().starts_with("deny "), "{out}");
        let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
        assert_eq!(row[1], "1", "{out}");
    }
}

#[tokio::test]
async fn mutating_webhooks_patch_in_order_and_reinvoke_if_needed() {
    let hooks = hook_server(|path, req| match path {
        // First: labels the object (again whenever called).
        "/label" => {
            let n = req["object"]["metadata"]["annotations"]["stamped"].as_str().unwrap_or("no");
            (
                patch_response(json!([{"op": "add", "path": "/metadata/labels",
                    "value": {"labelled": "yes", "saw-stamp": n}}])),
                0,
            )
        }
        // Second: stamps an annotation, which the first has not seen.
        _ => (
            json!({"allowed": true, "patchType": "JSONPatch", "warnings": ["stamped"],
                "patch": base64::engine::general_purpose::STANDARD.encode(
                    json!([{"op": "add", "path": "/metadata/annotations", "value": {"stamped": "yes"}}]).to_string())}),
            0,
        ),
    })
    .await;
    let server = start().await;
    let api = TestClient::new(&server);
    let first = config(
        "MutatingWebhookConfiguration",
        "a-label.test.io",
        url_config(&hooks, "/label"),
        json!({"reinvocationPolicy": "IfNeeded"}),
    );
    let second = config(
        "MutatingWebhookConfiguration",
        "b-stamp.test.io",
        url_config(&hooks, "/stamp"),
        json!({}),
    );
    assert_eq!(api.post(MWCS, &first).await.code, 201);
    let c = api.post(MWCS, &second).await;
    assert_eq!(c.code, 201);
    assert_eq!(c.body["webhooks"][0]["reinvocationPolicy"], "Never");

    let r = api.post(CMS, &cm("m", json!({}))).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    assert_eq!(r.body["metadata"]["annotations"]["stamped"], "yes");
    // The reinvocation saw the stamp the later webhook added.
    assert_eq!(r.body["metadata"]["labels"]["saw-stamp"], "yes");
    assert_eq!(hooks.seen("/label").len(), 2, "IfNeeded: called again once");
    assert_eq!(hooks.seen("/stamp").len(), 1);
    assert_eq!(r.headers.get("warning").unwrap(), "299 - \"stamped\"");
    // Mutating webhooks see the object before the server fills in its own fields.
    assert!(hooks.seen("/stamp")[0]["object"]["metadata"]["uid"].is_null());
    let stored = api.get(&format!("{CMS}/m")).await.body;
    assert_eq!(stored["metadata"]["labels"]["labelled"], "yes");

    // A patch request is mutated too and stored as the mutated object.
    let r = api
        .patch(
            &format!("{CMS}/m"),
            "application/merge-patch+json",
            &json!({"metadata": {"labels": null}, "data": {"x": "1"}}),
        )
        .await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    assert_eq!(r.body["metadata"]["labels"]["labelled"], "yes");
    assert_eq!(r.body["data"]["x"], "1");
}

#[tokio::test]
async fn an_unreachable_webhook_fails_writes_under_fail_and_not_under_ignore() {
    // A port nothing listens on, held for the test.
    let closed = crate::support::net::closed_port();
    let port = closed.local_addr().unwrap().port();
    let hooks = hook_server(|_, _| (allow(), 0)).await;
    let server = start().await;
    let api = TestClient::new(&server);
    let cc =
        json!({"url": format!("https://127.0.0.1:{port}/validate"), "caBundle": hooks.ca_bundle()});
    let c = api
        .post(
            VWCS,
            &config(
                "ValidatingWebhookConfiguration",
                "down.test.io",
                cc,
                json!({}),
            ),
        )
        .await;
    assert_eq!(c.code, 201);
    let r = api.post(CMS, &cm("x", json!({}))).await;
    assert_eq!(r.code, 500, "{:?}", r.body);
    assert_eq!(r.body["reason"], "InternalError");
    assert_eq!(
        r.body["message"],
        format!(
            "Internal error occurred: failed calling webhook \"down.test.io\": failed to call webhook: Post \"https://127.0.0.1:{port}/validate?timeout=10s\": dial tcp 127.0.0.1:{port}: connect: connection refused"
        )
    );
    let r = api
        .patch(
            &format!("{VWCS}/down"),
            "application/json-patch+json",
            &json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]),
        )
        .await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    assert_eq!(
        api.post(CMS, &cm("x", json!({}))).await.code,
        201,
        "Ignore: the write goes through"
    );
}

#[tokio::test]
async fn a_slow_webhook_times_out_and_a_foreign_certificate_is_refused() {
    let hooks = hook_server(|path, _| (allow(), if path == "/slow" { 3 } else { 0 })).await;
    let server = start().await;
    let api = TestClient::new(&server);
    let slow = config(
        "ValidatingWebhookConfiguration",
        "slow.test.io",
        url_config(&hooks, "/slow"),
        json!({"timeoutSeconds": 1}),
    );
    assert_eq!(api.post(VWCS, &slow).await.code, 201);
    let r = api.post(CMS, &cm("x", json!({}))).await;
    assert_eq!(r.code, 500, "{:?}", r.body);
    let want = format!(
        "Internal error occurred: failed calling webhook \"slow.test.io\": failed to call webhook: Post \"{}?timeout=1s\": context deadline exceeded",
        hooks.url("/slow")
    );
    assert_eq!(r.body["message"], want);
    assert_eq!(api.delete(&format!("{VWCS}/slow"), None).await.code, 200);

    // A caBundle of another CA: the webhook's certificate is not trusted.
    let other = base64::engine::general_purpose::STANDARD.encode(mint().ca_pem);
    let cc = json!({"url": hooks.url("/fast"), "caBundle": other});
    assert_eq!(
        api.post(
            VWCS,
            &config(
                "ValidatingWebhookConfiguration",
                "trust.test.io",
                cc,
                json!({})
            )
        )
        .await
        .code,
        201
    );
    let r = api.post(CMS, &cm("y", json!({}))).await;
    assert_eq!(r.code, 500, "{:?}", r.body);
    assert_eq!(
        r.body["message"],
        format!(
            "Internal error occurred: failed calling webhook \"trust.test.io\": failed to call webhook: Post \"{}?timeout=10s\": tls: failed to verify certificate: x509: certificate signed by unknown authority",
            hooks.url("/fast")
        )
    );
    assert!(hooks.seen("/fast").is_empty());
}

#[tokio::test]
async fn a_self_signed_ca_certificate_that_is_its_own_ca_bundle_is_trusted_as_go_trusts_it() {
    let hooks = hook_server_with(self_signed_ca(&["127.0.0.1"]), |_, _| {
        (json!({"allowed": false, "status": {"message": "seen"}}), 0)
    })
    .await;
    let server = start().await;
    let api = TestClient::new(&server);
    let cfg = config(
        "ValidatingWebhookConfiguration",
        "selfsigned.test.io",
        url_config(&hooks, "/v"),
        json!({}),
    );
    assert_eq!(api.post(VWCS, &cfg).await.code, 201);
    let r = api.post(CMS, &cm("x", json!({}))).await;
    assert_eq!(r.code, 400, "{:?}", r.body);
    assert_eq!(
        r.body["message"],
        "admission webhook \"selfsigned.test.io\" denied the request: seen"
    );
    assert_eq!(hooks.seen("/v").len(), 1);

    // The same kind of certificate for another name is still refused for its name.
    assert_eq!(
        api.delete(&format!("{VWCS}/selfsigned"), None).await.code,
        200
    );
    let elsewhere = hook_server_with(self_signed_ca(&["hook.example"]), |_, _| (allow(), 0)).await;
    let cfg = config(
        "ValidatingWebhookConfiguration",
        "other.test.io",
        url_config(&elsewhere, "/v"),
        json!({}),
    );
    assert_eq!(api.post(VWCS, &cfg).await.code, 201);
    let r = api.post(CMS, &cm("y", json!({}))).await;
    assert_eq!(r.code, 500, "{:?}", r.body);
    let want = format!(
        "tls: failed to verify certificate: x509: certificate is not valid for 127.0.0.1:{}",
        elsewhere.addr.port()
    );
    assert!(
        r.body["message"].as_str().unwrap().ends_with(&want),
        "{:?}",
        r.body
    );
    assert!(elsewhere.seen("/v").is_empty());
}

#[tokio::test]
async fn a_service_reference_is_dialled_through_the_service_endpoints() {
    let hooks = hook_server(|_, _| {
        (
            json!({"allowed": false, "status": {"message": "via service"}}),
            0,
        )
    })
    .await;
    let server = embedded_cluster::Cluster::builder()
        .service_endpoint("test/hook", &format!("127.0.0.1:{}", hooks.addr.port()))
        .start()
        .await
        .unwrap();
    let api = TestClient::new(&server);
    let cc = json!({"service": {"namespace": "test", "name": "hook", "path": "/svc"},
                    "caBundle": hooks.ca_bundle()});
    let c = api
        .post(
            VWCS,
            &config(
                "ValidatingWebhookConfiguration",
                "svc.test.io",
                cc,
                json!({}),
            ),
        )
        .await;
    assert_eq!(c.code, 201);
    assert_eq!(
        c.body["webhooks"][0]["clientConfig"]["service"]["port"],
        443
    );
    let r = api.post(CMS, &cm("x", json!({}))).await;
    assert_eq!(r.code, 400, "{:?}", r.body);
    assert_eq!(
        r.body["message"],
        "admission webhook \"svc.test.io\" denied the request: via service"
    );
    assert_eq!(hooks.seen("/svc").len(), 1);

    // A service without an endpoint fails like a DNS miss.
    let cc = json!({"service": {"namespace": "test", "name": "nowhere", "path": "/svc"}, "caBundle": hooks.ca_bundle()});
    let c = api
        .put(
            &format!("{VWCS}/svc"),
            &config(
                "ValidatingWebhookConfiguration",
                "svc.test.io",
                cc,
                json!({}),
            ),
        )
        .await;
    assert_eq!(c.code, 200, "{:?}", c.body);
    let r = api.post(CMS, &cm("y", json!({}))).await;
    assert_eq!(
        r.body["message"],
        "Internal error occurred: failed calling webhook \"svc.test.io\": failed to call webhook: Post \"https://nowhere.test.svc:443/svc?timeout=10s\": dial tcp: lookup nowhere.test.svc: no such host"
    );
}

/// A webhook server started after the API server, on port 0, is wired in once it knows its
/// port (`ClusterHandle::set_service_endpoint`): before, the Service is a DNS miss; after,
/// the same configuration reaches it, through the client already pooled for its CA bundle.
#[tokio::test]
async fn a_service_endpoint_set_while_the_server_runs_is_dialled_from_then_on() {
    let hooks = hook_server(|_, _| {
        (
            json!({"allowed": false, "status": {"message": "via service"}}),
            0,
        )
    })
    .await;
    let server = embedded_cluster::Cluster::builder().start().await.unwrap();
    let api = TestClient::new(&server);
    let cc = json!({"service": {"namespace": "test", "name": "hook", "path": "/svc"},
                    "caBundle": hooks.ca_bundle()});
    let c = api
        .post(
            VWCS,
            &config(
                "ValidatingWebhookConfiguration",
                "svc.test.io",
                cc,
                json!({}),
            ),
        )
        .await;
    assert_eq!(c.code, 201);
    let r = api.post(CMS, &cm("before", json!({}))).await;
    assert_eq!(r.code, 500, "{:?}", r.body);
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .ends_with("dial tcp: lookup hook.test.svc: no such host"),
        "{:?}",
        r.body
    );

    server.set_service_endpoint("test/hook", &format!("127.0.0.1:{}", hooks.addr.port()));
    let r = api.post(CMS, &cm("after", json!({}))).await;
    assert_eq!(r.code, 400, "{:?}", r.body);
    assert_eq!(
        r.body["message"],
        "admission webhook \"svc.test.io\" denied the request: via service"
    );
    assert_eq!(hooks.seen("/svc").len(), 1);
}

#[tokio::test]
async fn selectors_scope_the_webhook_and_dry_runs_store_nothing() {
    let hooks = hook_server(|_, _| {
        (
            patch_response(json!([{"op": "add", "path": "/data/seen", "value": "yes"}])),
            0,
        )
    })
    .await;
    let server = start().await;
    let api = TestClient::new(&server);
    let c = config(
        "MutatingWebhookConfiguration",
        "sel.test.io",
        url_config(&hooks, "/m"),
        json!({"namespaceSelector": {"matchLabels": {"team": "a"}},
               "objectSelector": {"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]}}),
    );
    assert_eq!(api.post(MWCS, &c).await.code, 201);
    // default has no team label: not called.
    let r = api.post(CMS, &cm("plain", json!({}))).await;
    assert_eq!(r.code, 201);
    assert!(r.body["data"]["seen"].is_null());
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": {"team": "a"}}});
    assert_eq!(api.post("/api/v1/namespaces", &ns).await.code, 201);
    let team_cms = "/api/v1/namespaces/team-a/configmaps";
    let r = api.post(team_cms, &cm("called", json!({}))).await;
    assert_eq!(r.body["data"]["seen"], "yes", "{:?}", r.body);
    let r = api
        .post(team_cms, &cm("skipped", json!({"skip": "1"})))
        .await;
    assert!(
        r.body["data"]["seen"].is_null(),
        "objectSelector exempts it"
    );
    assert_eq!(hooks.seen("/m").len(), 1);

    // A dry run is sent with dryRun: true and stores nothing, mutated or not.
    let r = api
        .post(&format!("{team_cms}?dryRun=All"), &cm("dry", json!({})))
        .await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    assert_eq!(r.body["data"]["seen"], "yes");
    let last = hooks.seen("/m").pop().unwrap();
    assert_eq!(last["dryRun"], true);
    assert_eq!(last["options"]["dryRun"], json!(["All"]));
    assert_eq!(api.get(&format!("{team_cms}/dry")).await.code, 404);
}

#[tokio::test]
async fn configurations_are_validated_like_the_real_server() {
    let server = start().await;
    let api = TestClient::new(&server);
    let bad = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "bad"},
        "webhooks": [{"name": "short", "clientConfig": {"url": "http://127.0.0.1/x"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "sideEffects": "Some", "admissionReviewVersions": ["v1"], "timeoutSeconds": 31}]});
    let r = api.post(VWCS, &bad).await;
    assert_eq!(r.code, 422, "{:?}", r.body);
    let fields: Vec<&str> = r.body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    for f in [
        "webhooks[0].name",
        "webhooks[0].clientConfig.url",
        "webhooks[0].sideEffects",
        "webhooks[0].timeoutSeconds",
    ] {
        assert!(fields.contains(&f), "{f} missing from {fields:?}");
    }
    assert!(
        r.body["message"].as_str().unwrap().starts_with(
            "ValidatingWebhookConfiguration.admissionregistration.k8s.io \"bad\" is invalid: "
        ),
        "{}",
        r.body["message"]
    );
    // Served in discovery.
    let d = api.get("/apis/admissionregistration.k8s.io/v1").await;
    let names: Vec<&str> = d.body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"validatingwebhookconfigurations"),
        "{names:?}"
    );
    assert!(
        names.contains(&"mutatingwebhookconfigurations"),
        "{names:?}"
    );
}
