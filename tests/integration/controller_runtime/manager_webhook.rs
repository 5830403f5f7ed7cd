//! The manager's admission webhooks, called by the embedded API server: the whole loop a
//! cluster runs, in-process.
//!
//! The server maps the webhook Service of `artifacts/deploy/webhook/webhooks.yaml`
//! (`sample-controller/sample-controller-webhook`) to the manager's webhook port with
//! [`ClusterBuilder::service_endpoint`](embedded_cluster::ClusterBuilder::service_endpoint);
//! the test plays cert-manager: it mints a CA and a serving certificate for
//! `sample-controller-webhook.sample-controller.svc`, writes `tls.crt` / `tls.key` into the
//! manager's `--webhook-cert-dir`, and injects the CA into both configurations' `caBundle`.

use crate::support;
use crate::support::apiserver::TestClient;
use crate::support::cluster::Kubectl;
pub(crate) use crate::support::net::Forwarder;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use base64::Engine;
use embedded_cluster::{Cluster, ClusterHandle};
use sample_controller_runtime::manager::{ListenersHandle, ManagerError};
use sample_controller_runtime::webhook::WebhookServerConfig;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub(crate) const SERVICE: &str = "sample-controller/sample-controller-webhook";
const HOST: &str = "sample-controller-webhook.sample-controller.svc";
pub(crate) const ATS: &str =
    "/apis/cnat.programming-kubernetes.info/v1alpha1/namespaces/default/ats";
const ATS_V1: &str = "/apis/cnat.programming-kubernetes.info/v1/namespaces/default/ats";
const VWC: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";
pub(crate) const MWC: &str = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations";

/// A v1 At for the writes made while the manager is down.
fn down_v1() -> Value {
    json!({"apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
           "metadata": {"name": "down"},
           "spec": {"schedule": "2099-01-01T00:00:00Z", "run": {"command": "echo"}}})
}

/// Mints a CA and a serving certificate for the webhook Service into `dir`; returns the CA PEM.
pub(crate) fn issue(dir: &Path, ca_name: &str) -> String {
    let (ca, cert, key) = crate::support::apiserver::mint_serving_cert(ca_name, &[HOST]);
    // Key first, then the certificate: the watcher reloads when both are in place.
    std::fs::write(dir.join("tls.key"), key).unwrap();
    std::fs::write(dir.join("tls.crt"), cert).unwrap();
    ca
}

/// Port 0 on the loopback interface: the system picks a free port when the server binds it.
pub(crate) const ANY_PORT: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

pub(crate) struct Setup {
    pub(crate) server: ClusterHandle,
    pub(crate) api: TestClient,
    pub(crate) certs: tempfile::TempDir,
    /// The CA (PEM) that signed the serving certificate.
    pub(crate) ca: String,
    /// Where the API server reaches the webhook Service (see [`Forwarder`]).
    pub(crate) webhook_addr: SocketAddr,
    pub(crate) webhook: Forwarder,
    metrics: Arc<OnceLock<SocketAddr>>,
}

impl Setup {
    /// The manager's metrics address, once [`wait_listening`] has returned.
    fn metrics_addr(&self) -> SocketAddr {
        *self.metrics.get().expect("the manager serves metrics")
    }
}

/// The webhook configurations of the overlay, with `caBundle` injected.
fn configurations(ca_pem: &str) -> Vec<Value> {
    let text = std::fs::read_to_string("artifacts/deploy/webhook/webhooks.yaml").unwrap();
    let bundle = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| {
            let mut v: Value = serde::Deserialize::deserialize(d).unwrap();
            for h in v["webhooks"].as_array_mut().unwrap() {
                h["clientConfig"]["caBundle"] = json!(bundle);
            }
            v
        })
        .collect()
}

async fn apply_configurations(api: &TestClient, ca_pem: &str) {
    for c in configurations(ca_pem) {
        let base = if c["kind"] == "MutatingWebhookConfiguration" {
            MWC
        } else {
            VWC
        };
        let name = c["metadata"]["name"].as_str().unwrap();
        let r = if api.get(&format!("{base}/{name}")).await.code == 404 {
            api.post(base, &c).await
        } else {
            api.put(&format!("{base}/{name}"), &c).await
        };
        assert!(r.code == 200 || r.code == 201, "{:?}", r.body);
    }
}

pub(crate) async fn setup() -> Setup {
    sample_client_go::install_crypto_provider();
    let webhook = Forwarder::start().await;
    let webhook_addr = webhook.addr;
    let server = Cluster::builder()
        .service_endpoint(SERVICE, &webhook_addr.to_string())
        .start()
        .await
        .unwrap();
    let certs = tempfile::tempdir().unwrap();
    let ca = issue(certs.path(), "webhook-ca-1");
    let api = TestClient::new(&server);
    // The At CRD as the overlay installs it: v1alpha1 requests convert through /convert.
    let crd = sample_operators::apis::crds::at_crd_with_conversion_webhook(json!({
        "service": {"namespace": "sample-controller", "name": "sample-controller-webhook", "path": "/convert"},
        "caBundle": base64::engine::general_purpose::STANDARD.encode(&ca),
    }))
    .unwrap();
    let r = api
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &crd,
        )
        .await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    apply_configurations(&api, &ca).await;
    Setup {
        server,
        api,
        certs,
        ca,
        webhook_addr,
        webhook,
        metrics: Arc::default(),
    }
}

/// The manager with only its webhook server and metrics (no controllers: the test decides
/// every status).
pub(crate) fn start_manager(
    s: &Setup,
) -> (CancellationToken, JoinHandle<Result<(), ManagerError>>) {
    let mut config = support::at::manager_config();
    config.controllers = vec![];
    config.metrics_addr = Some(ANY_PORT);
    let manager =
        sample_operators::registry::manager(config, support::at::manager_client(&s.server))
            .with_webhook_server(Some(WebhookServerConfig {
                addr: ANY_PORT,
                cert_dir: s.certs.path().to_owned(),
            }));
    follow(
        &s.webhook,
        manager.listeners_handle(),
        Arc::clone(&s.metrics),
    );
    let stop = CancellationToken::new();
    let task = tokio::spawn(manager.run(stop.clone()));
    (stop, task)
}

/// Points `webhook` at the webhook server of the manager `listeners` belongs to, once it is
/// bound; `metrics` receives the manager's metrics address.
pub(crate) fn follow(
    webhook: &Forwarder,
    listeners: ListenersHandle,
    metrics: Arc<OnceLock<SocketAddr>>,
) {
    let webhook = webhook.target_setter();
    tokio::spawn(async move {
        if let Some(bound) = listeners.bound().await {
            if let Some(m) = bound.metrics {
                let _ = metrics.set(m);
            }
            if let Some(w) = bound.webhook {
                webhook.set(w);
            }
        }
    });
}

/// Waits until the manager started on `s` has bound its webhook server, and the forwarder
/// forwards to it.
pub(crate) async fn wait_listening(s: &Setup) {
    let waited = tokio::time::timeout(Duration::from_secs(60), s.webhook.target()).await;
    assert!(
        waited.is_ok(),
        "the manager's webhook server never listened"
    );
}

fn at(name: &str, schedule: Option<&str>, command: &str) -> Value {
    let mut spec = json!({"command": command});
    if let Some(s) = schedule {
        spec["schedule"] = json!(s);
    }
    json!({"apiVersion": "cnat.programming-kubernetes.info/v1alpha1", "kind": "At",
           "metadata": {"name": name}, "spec": spec})
}

#[tokio::test]
async fn the_api_server_calls_the_managers_webhooks() {
    let s = setup().await;
    let (stop, task) = start_manager(&s);
    wait_listening(&s).await;
    let api = &s.api;

    // A blank command is refused at admission, with the field.
    let r = api
        .post(ATS, &at("blank", Some("2099-01-01T00:00:00Z"), " "))
        .await;
    assert_eq!(r.code, 422, "{:?}", r.body);
    let msg = r.body["message"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "admission webhook \"vat.cnat.programming-kubernetes.info\" denied the request: At.cnat.programming-kubernetes.info \"blank\" is invalid: spec.run.command: Invalid value: \" \" is empty"
        ),
        "{msg}"
    );
    // The webhooks are registered for v1 (matchPolicy Equivalent): a v1alpha1 request is
    // shown to them converted, so the field is named as v1 names it, as on a real server.
    assert_eq!(r.body["details"]["causes"][0]["field"], "spec.run.command");
    // So is a schedule that does not parse, and a server-side dry run alike.
    let r = api
        .post(
            &format!("{ATS}?dryRun=All"),
            &at("soon", Some("tomorrow"), "echo"),
        )
        .await;
    assert_eq!(r.code, 422, "{:?}", r.body);
    assert_eq!(r.body["details"]["causes"][0]["field"], "spec.schedule");

    // Defaults: no schedule means now (the schema requires one: mutation runs first), and an
    // offset is stored in UTC.
    let r = api.post(ATS, &at("now", None, "echo YAY")).await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    let schedule = r.body["spec"]["schedule"].as_str().unwrap();
    assert!(
        schedule.ends_with('Z') && schedule.parse::<jiff::Timestamp>().is_ok(),
        "{schedule}"
    );
    let r = api
        .post(
            ATS,
            &at("utc", Some("2099-04-12T12:12:00+02:00"), "echo YAY"),
        )
        .await;
    assert_eq!(
        r.body["spec"]["schedule"], "2099-04-12T10:12:00Z",
        "{:?}",
        r.body
    );

    // Once RUNNING, the spec is frozen; labels may still change.
    let r = api
        .patch(
            &format!("{ATS}/utc/status"),
            "application/merge-patch+json",
            &json!({"status": {"phase": "RUNNING"}}),
        )
        .await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    let r = api
        .patch(
            &format!("{ATS}/utc"),
            "application/merge-patch+json",
            &json!({"spec": {"command": "echo other"}}),
        )
        .await;
    assert_eq!(r.code, 422, "{:?}", r.body);
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .contains("spec: Forbidden: the At is RUNNING"),
        "{:?}",
        r.body
    );
    let r = api
        .patch(
            &format!("{ATS}/utc"),
            "application/merge-patch+json",
            &json!({"metadata": {"labels": {"a": "b"}}}),
        )
        .await;
    assert_eq!(r.code, 200, "{:?}", r.body);

    // kubectl shows the webhook's refusal with the field. (An empty command never reaches the
    // webhook: the schema's minLength refuses it first; a blank one passes the schema.)
    if let Some(k) = Kubectl::new(&s.server) {
        let manifest = "apiVersion: cnat.programming-kubernetes.info/v1alpha1\nkind: At\nmetadata:\n  name: viakubectl\nspec:\n  schedule: \"2099-01-01T00:00:00Z\"\n  command: \" \"\n";
        let out = k
            .run_with_input(&["apply", "-f", "-"], Some(manifest))
            .await;
        assert!(!out.ok);
        assert!(
            out.stderr.contains(
                "The At \"viakubectl\" is invalid: spec.run.command: Invalid value: \" \" is empty"
            ),
            "{}",
            out.stderr
        );
    }

    // controller-runtime's webhook metrics.
    let metrics = reqwest_metrics(s.metrics_addr()).await;
    assert!(
        metrics.contains(
            "controller_runtime_webhook_requests_total{webhook=\"/validate-at\",code=\"200\"}"
        ),
        "{metrics}"
    );
    assert!(
        metrics
            .contains("controller_runtime_webhook_latency_seconds_count{webhook=\"/mutate-at\"}"),
        "{metrics}"
    );
    assert!(
        metrics
            .contains("controller_runtime_webhook_requests_in_flight{webhook=\"/validate-at\"} 0"),
        "{metrics}"
    );

    // The manager stops: writes fail under failurePolicy Fail with the real message ...
    // (In v1, the version the webhooks are registered for: a v1alpha1 write would first
    // fail its conversion, with the conversion webhook's message.)
    stop.cancel();
    task.await.unwrap().unwrap();
    s.webhook.close();
    let r = api.post(ATS_V1, &down_v1()).await;
    assert_eq!(r.code, 500, "{:?}", r.body);
    assert_eq!(
        r.body["message"],
        format!(
            "Internal error occurred: failed calling webhook \"mat.cnat.programming-kubernetes.info\": failed to call webhook: Post \"https://{HOST}:443/mutate-at?timeout=10s\": dial tcp {}: connect: connection refused",
            s.webhook_addr
        )
    );
    // ... and go through under Ignore.
    for (base, name) in [
        (MWC, "sample-controller-mutating"),
        (VWC, "sample-controller-validating"),
    ] {
        let r = api
            .patch(
                &format!("{base}/{name}"),
                "application/json-patch+json",
                &json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": "Ignore"}]),
            )
            .await;
        assert_eq!(r.code, 200, "{:?}", r.body);
    }
    assert_eq!(api.post(ATS_V1, &down_v1()).await.code, 201);
}

#[tokio::test]
async fn a_certificate_rotated_on_disk_is_served_without_a_restart() {
    let s = setup().await;
    let (stop, task) = start_manager(&s);
    wait_listening(&s).await;
    let r = s
        .api
        .post(ATS, &at("before", Some("2099-01-01T00:00:00Z"), "echo"))
        .await;
    assert_eq!(r.code, 201, "{:?}", r.body);

    // cert-manager renews: a new CA and certificate on disk, the new CA injected. The manager
    // keeps running; the API server's next connection gets the new certificate.
    let ca2 = issue(s.certs.path(), "webhook-ca-2");
    apply_configurations(&s.api, &ca2).await;
    let r = s
        .api
        .post(ATS, &at("after", Some("2099-01-01T00:00:00Z"), "echo"))
        .await;
    assert_eq!(
        r.code, 201,
        "the rotated certificate is trusted through the new caBundle: {:?}",
        r.body
    );
    let r = s
        .api
        .post(ATS, &at("blank", Some("2099-01-01T00:00:00Z"), ""))
        .await;
    assert_eq!(
        r.code, 422,
        "still the manager's webhook answering: {:?}",
        r.body
    );

    // The old CA no longer verifies what is served.
    let unrelated = issue(tempfile::tempdir().unwrap().path(), "unrelated-ca");
    apply_configurations(&s.api, &unrelated).await;
    let r = s
        .api
        .post(ATS, &at("untrusted", Some("2099-01-01T00:00:00Z"), "echo"))
        .await;
    assert_eq!(r.code, 500, "{:?}", r.body);
    assert!(
        r.body["message"]
            .as_str()
            .unwrap()
            .ends_with("x509: certificate signed by unknown authority"),
        "{:?}",
        r.body
    );
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// GET /metrics over plain HTTP.
async fn reqwest_metrics(addr: SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// POSTs `body` to `path` on the manager's webhook server over HTTPS, verifying the served
/// certificate against `ca_pem` for the Service's name, as the API server does. Returns the
/// HTTP status code and the body.
async fn post_tls(addr: SocketAddr, ca_pem: &str, path: &str, body: &str) -> (u16, String) {
    use rustls::pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from(HOST).unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    // A server closing without close_notify ends the read with an error; what was read counts.
    let _ = tls.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, body.to_owned())
}

#[tokio::test]
async fn convert_answers_conversion_reviews_over_https_with_metrics() {
    let s = setup().await;
    let ca = s.ca.clone();
    let (stop, task) = start_manager(&s);
    wait_listening(&s).await;

    let v1alpha1 = |name: &str, command: &str| {
        json!({"apiVersion": "cnat.programming-kubernetes.info/v1alpha1", "kind": "At",
               "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
               "spec": {"schedule": "2099-01-01T00:00:00Z", "command": command}})
    };
    let review = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "7f0c-review", "desiredAPIVersion": "cnat.programming-kubernetes.info/v1",
                    "objects": [v1alpha1("first", "echo 1"), v1alpha1("second", "echo 2")]}});
    let (code, body) = post_tls(s.webhook_addr, &ca, "/convert", &review.to_string()).await;
    assert_eq!(code, 200, "{body}");
    let r: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(r["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(r["kind"], "ConversionReview");
    assert_eq!(r["response"]["uid"], "7f0c-review");
    assert_eq!(r["response"]["result"]["status"], "Success");
    let converted = r["response"]["convertedObjects"].as_array().unwrap();
    let names: Vec<&str> = converted
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["first", "second"]);
    assert_eq!(
        converted[1]["apiVersion"],
        "cnat.programming-kubernetes.info/v1"
    );
    assert_eq!(converted[1]["spec"]["run"], json!({"command": "echo 2"}));
    assert_eq!(converted[1]["metadata"]["uid"], "uid-second");

    // And back to v1alpha1, with v1's fields kept in the annotation.
    let mut v1 = converted[0].clone();
    v1["spec"]["run"]["activeDeadlineSeconds"] = json!(30);
    let back = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "back", "desiredAPIVersion": "cnat.programming-kubernetes.info/v1alpha1",
                    "objects": [v1]}});
    let (code, body) = post_tls(s.webhook_addr, &ca, "/convert", &back.to_string()).await;
    assert_eq!(code, 200, "{body}");
    let r: Value = serde_json::from_str(&body).unwrap();
    let obj = &r["response"]["convertedObjects"][0];
    assert_eq!(obj["spec"]["command"], "echo 1");
    assert_eq!(
        obj["metadata"]["annotations"]["cnat.programming-kubernetes.info/v1-fields"],
        r#"{"run":{"activeDeadlineSeconds":30}}"#
    );

    // One object that cannot be converted fails the review, naming it.
    let bad = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "bad-1", "desiredAPIVersion": "cnat.programming-kubernetes.info/v1",
                    "objects": [v1alpha1("fine", "echo"),
                                {"apiVersion": "example.com/v1", "kind": "MyApp",
                                 "metadata": {"name": "wrong", "namespace": "default"}}]}});
    let (code, body) = post_tls(s.webhook_addr, &ca, "/convert", &bad.to_string()).await;
    assert_eq!(code, 200, "{body}");
    let r: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(r["response"]["uid"], "bad-1");
    assert_eq!(r["response"]["result"]["status"], "Failure");
    let message = r["response"]["result"]["message"].as_str().unwrap();
    assert!(
        message.contains("objects[1]") && message.contains("At default/wrong"),
        "{message}"
    );
    assert!(r["response"].get("convertedObjects").is_none());

    // Not a review at all: 400.
    let (code, body) = post_tls(s.webhook_addr, &ca, "/convert", "{\"hello\": 1}").await;
    assert_eq!(code, 400, "{body}");

    let metrics = reqwest_metrics(s.metrics_addr()).await;
    for line in [
        "controller_runtime_webhook_requests_total{webhook=\"/convert\",code=\"200\"} 3",
        "controller_runtime_webhook_requests_total{webhook=\"/convert\",code=\"400\"} 1",
        "controller_runtime_webhook_latency_seconds_count{webhook=\"/convert\"} 4",
        "controller_runtime_webhook_requests_in_flight{webhook=\"/convert\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
    stop.cancel();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn v1_writes_are_validated_and_defaulted_by_the_same_webhooks() {
    let s = setup().await;
    let (stop, task) = start_manager(&s);
    wait_listening(&s).await;
    let at_v1 = |name: &str, run: Value| {
        json!({"apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
               "metadata": {"name": name},
               "spec": {"schedule": "2099-01-01T00:00:00Z", "run": run}})
    };
    // A blank command, named as v1 names it.
    let r = s
        .api
        .post(ATS_V1, &at_v1("blank-v1", json!({"command": " "})))
        .await;
    assert_eq!(r.code, 422, "{:?}", r.body);
    assert_eq!(r.body["details"]["causes"][0]["field"], "spec.run.command");
    // The image is defaulted; the deadline kept.
    let r = s
        .api
        .post(
            ATS_V1,
            &at_v1(
                "defaulted",
                json!({"command": "echo", "activeDeadlineSeconds": 5}),
            ),
        )
        .await;
    assert_eq!(r.code, 201, "{:?}", r.body);
    assert_eq!(
        r.body["spec"]["run"],
        json!({"command": "echo", "image": "busybox:1.36", "activeDeadlineSeconds": 5})
    );
    // Frozen once running: the image cannot change under a running pod.
    let r = s
        .api
        .patch(
            &format!("{ATS_V1}/defaulted/status"),
            "application/merge-patch+json",
            &json!({"status": {"phase": "RUNNING"}}),
        )
        .await;
    assert_eq!(r.code, 200, "{:?}", r.body);
    let r = s
        .api
        .patch(
            &format!("{ATS_V1}/defaulted"),
            "application/merge-patch+json",
            &json!({"spec": {"run": {"image": "alpine:3.20"}}}),
        )
        .await;
    assert_eq!(r.code, 422, "{:?}", r.body);
    stop.cancel();
    task.await.unwrap().unwrap();
}

/// `kubectl kustomize` builds the entry points of `artifacts/deploy/`: the manager alone, the
/// webhook overlay on top of it, and the sharded overlay (a kustomization may not live inside its base's
/// directory, hence `base/`).
#[tokio::test]
async fn the_deploy_kustomizations_build() {
    let Some(bin) = crate::support::cluster::kubectl_bin(None) else {
        eprintln!("SKIPPED: kubectl not found on the PATH");
        return;
    };
    let build = |dir: &str| {
        let out = std::process::Command::new(&bin)
            .args(["kustomize", dir])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl kustomize {dir}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_yaml_ng::Deserializer::from_str(&String::from_utf8_lossy(&out.stdout))
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect::<Vec<Value>>()
    };
    let kinds = |docs: &[Value]| {
        let mut k: Vec<String> = docs
            .iter()
            .map(|d| d["kind"].as_str().unwrap_or_default().to_owned())
            .collect();
        k.sort();
        k
    };
    let base = build("artifacts/deploy");
    assert!(!kinds(&base).contains(&"Certificate".to_owned()));
    let overlay = build("artifacts/deploy/webhook");
    for kind in [
        "Certificate",
        "Issuer",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "Deployment",
        "ServiceAccount",
    ] {
        assert!(kinds(&overlay).contains(&kind.to_owned()), "{kind}");
    }
    // The Deployment of the base, patched: the webhook port and the certificate's Secret.
    let deployment = overlay.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert!(
        container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["containerPort"] == 9443),
        "{container}"
    );
    assert!(
        container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["mountPath"] == "/tmp/k8s-webhook-server/serving-certs"),
        "{container}"
    );
    // The Service the webhook configurations and the CRD patch name.
    assert!(overlay.iter().any(|d| d["kind"] == "Service"
        && d["metadata"]["name"] == "sample-controller-webhook"
        && d["metadata"]["namespace"] == "sample-controller"));
    // The sharded overlay: shards, the sharder, their RBAC and /mutate-shard.
    super::sharding::check_sharded_overlay(&build("artifacts/deploy/sharded"));
}
