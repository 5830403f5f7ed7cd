//! `--metrics-secure`: the manager serves `/metrics` over HTTPS and lets a scraper in only when
//! the API server authenticates its bearer token (TokenReview) and authorizes `get /metrics`
//! for it (SubjectAccessReview), through the manager's own service-account client and the
//! RBAC of `artifacts/deploy/`. Also the embedded server's `tokenreviews`, with kubectl.

use crate::support::apiserver::TestClient;
use crate::support::at::{client_for, manager_config};
use crate::support::cluster::Kubectl;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use embedded_cluster::{Cluster, ClusterHandle};
use http_body_util::BodyExt;
use sample_client_go::client::{Client, Config};
use sample_controller_runtime::manager::{ManagerConfig, SecureServing};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const SA_TOKEN: &str = "controller-token";
const PROM_TOKEN: &str = "prom-token";
const EVE_TOKEN: &str = "eve-token";

/// Binds the scraper `prometheus` to the deploy's metrics-reader role and `eve` to its
/// trace-reader role.
const PROMETHEUS_BINDING: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: prometheus-reads-metrics}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sample-controller-metrics-reader}
subjects:
- {kind: User, name: prometheus, apiGroup: rbac.authorization.k8s.io}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: eve-traces}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: sample-controller-trace-reader}
subjects:
- {kind: User, name: eve, apiGroup: rbac.authorization.k8s.io}
"#;

/// An RBAC-enforcing server with the deploy's RBAC, the At CRD and three tokens: the
/// controller's service account, `prometheus` (bound to metrics-reader) and `eve` (bound to
/// trace-reader only).
async fn server() -> ClusterHandle {
    sample_client_go::install_crypto_provider();
    let server = Cluster::builder()
        .enforce_rbac(true)
        .service_account_token(SA_TOKEN, "sample-controller", "sample-controller")
        .extra_token(PROM_TOKEN, "prometheus")
        .extra_token(EVE_TOKEN, "eve")
        .start()
        .await
        .unwrap();
    let admin = client_for(&server);
    sample_operators::apis::crds::install::<sample_operators::apis::At>(&admin)
        .await
        .unwrap();
    for file in [
        "namespace.yaml",
        "serviceaccount.yaml",
        "clusterrole.yaml",
        "clusterrolebinding.yaml",
        "metrics-reader-clusterrole.yaml",
        "trace-reader-clusterrole.yaml",
    ] {
        let path = format!(
            "{}/artifacts/deploy/base/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        server
            .load_manifests(&std::fs::read_to_string(&path).unwrap())
            .unwrap();
    }
    server.load_manifests(PROMETHEUS_BINDING).unwrap();
    server
}

/// A CA and a `localhost` serving certificate signed by it, written as `tls.crt` / `tls.key`
/// into `dir` (what a cert-manager Secret mounted at `--metrics-cert-dir` holds). Returns the
/// CA's PEM.
fn write_cert_dir(dir: &Path) -> String {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    ca.pem()
}

struct Scrape {
    code: u16,
    content_type: String,
    body: String,
}

async fn scrape(c: &TestClient, with_token: bool) -> Scrape {
    let resp = c.raw("GET", "/metrics", &[], vec![], with_token).await;
    let code = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    Scrape {
        code,
        content_type,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// Starts the manager as the service account, `/metrics` secured, on a port of its choosing;
/// returns its stop token and the address `/metrics` bound.
async fn start(server: &ClusterHandle, secure: SecureServing) -> (CancellationToken, SocketAddr) {
    let config =
        Config::from_kubeconfig_yaml(&server.kubeconfig_yaml_for_token(SA_TOKEN), None).unwrap();
    let sa_client = Client::new(config).unwrap();
    let cfg = ManagerConfig {
        metrics_addr: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        ..manager_config()
    };
    let stop = CancellationToken::new();
    let manager = sample_operators::registry::manager(cfg, sa_client).with_secure_metrics(secure);
    let listeners = manager.listeners_handle();
    tokio::spawn(manager.run(stop.clone()));
    let bound = listeners.bound().await.expect("the manager is running");
    (stop, bound.metrics.expect("metrics are served"))
}

/// Polls until the listener accepts TLS connections (it starts once the informers have),
/// then scrapes.
async fn first_scrape(c: &TestClient, addr: SocketAddr) -> Scrape {
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return scrape(c, true).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the metrics listener did not come up within 10 s");
}

#[tokio::test]
async fn only_a_scraper_bound_to_metrics_reader_reads_metrics() {
    let server = server().await;
    let certs = tempfile::tempdir().unwrap();
    let ca = write_cert_dir(certs.path());
    let (stop, addr) = start(
        &server,
        SecureServing {
            cert_dir: Some(certs.path().to_path_buf()),
        },
    )
    .await;
    let url = format!("https://localhost:{}", addr.port());
    let prometheus = TestClient::from_parts(&url, PROM_TOKEN, Some(&ca), false);

    // The scraper bound to metrics-reader: the metrics, over TLS with the mounted certificate.
    let ok = first_scrape(&prometheus, addr).await;
    assert_eq!(ok.code, 200, "{}", ok.body);
    assert!(
        ok.body.contains("workqueue_depth{name=\"at\"}"),
        "{}",
        ok.body
    );
    let again = scrape(&prometheus, true).await;
    assert_eq!(again.code, 200);
    assert!(
        again
            .content_type
            .starts_with("application/openmetrics-text")
    );

    // No token: 401, Go's http.Error text.
    let anonymous = scrape(&prometheus, false).await;
    assert_eq!(
        (anonymous.code, anonymous.body.as_str()),
        (401, "Unauthorized\n")
    );
    assert_eq!(anonymous.content_type, "text/plain; charset=utf-8");
    // A token the API server does not know: 401.
    let forged = TestClient::from_parts(&url, "not-a-token", Some(&ca), false);
    assert_eq!(scrape(&forged, true).await.code, 401);
    // Authenticated, but not allowed to get /metrics: 403 naming the user.
    let eve = TestClient::from_parts(&url, EVE_TOKEN, Some(&ca), false);
    let denied = scrape(&eve, true).await;
    assert_eq!(
        (denied.code, denied.body.as_str()),
        (403, "Authorization denied for user eve\n")
    );
    // Every path is behind the filter: an unknown one is 401 without a token, 404 with one.
    let other = prometheus.raw("GET", "/debug", &[], vec![], false).await;
    assert_eq!(other.status(), 401);
    let other = prometheus.raw("GET", "/debug", &[], vec![], true).await;
    assert_eq!(other.status(), 403, "metrics-reader grants /metrics only");
    // The trace-reader role: eve (bound to it) reads the machinery's counts, prometheus
    // (bound to metrics-reader alone) does not.
    let counts = eve.raw("GET", "/machinery/counts", &[], vec![], true).await;
    assert_eq!(
        counts.status(),
        200,
        "trace-reader grants /machinery/counts"
    );
    let counts = prometheus
        .raw("GET", "/machinery/counts", &[], vec![], true)
        .await;
    assert_eq!(
        counts.status(),
        403,
        "metrics-reader does not grant /machinery/counts"
    );

    // The reviews went to the API server as the controller's service account, and repeated
    // scrapes are answered from the caches (one TokenReview per token, one
    // SubjectAccessReview per user and path).
    let log = server.request_log();
    let token_reviews = log.count_code("create", "tokenreviews", 201);
    let access_reviews = log.count_code("create", "subjectaccessreviews", 201);
    assert!(
        token_reviews >= 3,
        "prometheus, not-a-token, eve: {token_reviews}"
    );
    assert!(access_reviews >= 2, "{access_reviews}");
    for _ in 0..5 {
        assert_eq!(scrape(&prometheus, true).await.code, 200);
        assert_eq!(scrape(&eve, true).await.code, 403);
    }
    assert_eq!(log.count_code("create", "tokenreviews", 201), token_reviews);
    assert_eq!(
        log.count_code("create", "subjectaccessreviews", 201),
        access_reviews
    );

    stop.cancel();
    server.shutdown().await;
}

#[tokio::test]
async fn without_a_cert_dir_curl_scrapes_a_self_signed_endpoint() {
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipping: curl is not installed");
        return;
    }
    let server = server().await;
    let (stop, addr) = start(&server, SecureServing::default()).await;
    let url = format!("https://127.0.0.1:{}/metrics", addr.port());
    let curl = |token: Option<&'static str>, insecure: bool| {
        let url = url.clone();
        async move {
            let mut cmd = tokio::process::Command::new("curl");
            cmd.args([
                "-sS",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "10",
            ]);
            if insecure {
                cmd.arg("-k");
            }
            if let Some(t) = token {
                cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
            }
            let out = cmd.arg(&url).output().await.unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    let mut code = String::new();
    for _ in 0..200 {
        code = curl(Some(PROM_TOKEN), true).await;
        if code == "200" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(code, "200", "curl -k with the scraper's token");
    assert_eq!(curl(None, true).await, "401");
    assert_eq!(curl(Some(EVE_TOKEN), true).await, "403");
    // Without -k the self-signed certificate is not trusted: no HTTP answer at all.
    assert_eq!(curl(Some(PROM_TOKEN), false).await, "000");
    stop.cancel();
    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_creates_a_token_review() {
    let server = server().await;
    let Some(kubectl) = Kubectl::new(&server) else {
        return;
    };
    let review = |token: &str| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
               "spec": {"token": token}})
        .to_string()
    };
    let create = ["create", "-f", "-", "-o", "json"];
    let out = kubectl
        .run_with_input(&create, Some(&review(PROM_TOKEN)))
        .await;
    assert!(out.ok, "{}", out.stderr);
    let answer: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(answer["status"]["authenticated"], true);
    assert_eq!(answer["status"]["user"]["username"], "prometheus");
    assert_eq!(
        answer["status"]["user"]["groups"],
        json!(["system:authenticated"])
    );
    let out = kubectl.run_with_input(&create, Some(&review("nope"))).await;
    assert!(out.ok, "{}", out.stderr);
    let answer: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(answer["status"]["error"], "invalid bearer token");
    assert!(answer["status"].get("authenticated").is_none());
    // Discovery lists the resources (and `kubectl auth whoami`'s); the controller's service account may create reviews
    // (artifacts/deploy/base/clusterrole.yaml), eve may not.
    let out = kubectl
        .ok(&[
            "api-resources",
            "--api-group=authentication.k8s.io",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(
        out.trim(),
        "selfsubjectreviews.authentication.k8s.io\ntokenreviews.authentication.k8s.io"
    );
    let sa = "system:serviceaccount:sample-controller:sample-controller";
    let can = kubectl
        .run(&[
            "auth",
            "can-i",
            "create",
            "tokenreviews.authentication.k8s.io",
            "--as",
            sa,
        ])
        .await;
    assert_eq!(can.stdout.trim(), "yes", "{}", can.stderr);
    let can = kubectl
        .run(&[
            "auth",
            "can-i",
            "create",
            "tokenreviews.authentication.k8s.io",
            "--as",
            "eve",
        ])
        .await;
    assert_eq!(can.stdout.trim(), "no", "{}", can.stderr);
    server.shutdown().await;
}
