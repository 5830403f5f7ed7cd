//! kubectl compatibility of the embedded API server: typed `kubectl create` commands, which
//! send protobuf bodies from kubectl 1.32 on, and the Tables `kubectl get` prints for built-in
//! kinds.
//!
//! Two halves:
//!
//! - With each installed kubectl (`kubectl` on the PATH, `kubectl.1.32`, `kubectl.1.33`; a
//!   missing binary skips its test with a message): `create role|rolebinding|clusterrole|
//!   clusterrolebinding|deployment|service|secret|serviceaccount|configmap|job|cronjob|
//!   poddisruptionbudget|token` and `create -f` of a
//!   ReplicaSet and a CRD succeed, the stored objects hold what was asked for, and `kubectl get`
//!   prints the same headers a real API server's printers produce.
//! - Without kubectl: the Table JSON (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`)
//!   of each built-in kind with a printer, column definitions and cells.

use crate::support;
use crate::support::cluster;

use cluster::{Kubectl, kubectl_bin};
use serde_json::{Value, json};
use support::apiserver::*;

const NS: &str = "compat";
const TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

fn fixture(name: &str) -> String {
    format!("tests/fixtures/kubectl-compat/{name}")
}

/// The words of the first line kubectl printed (its header).
fn header(out: &str) -> Vec<String> {
    out.lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

async fn typed_creates_and_headers(version: Option<&str>) {
    let Some(bin) = kubectl_bin(version) else {
        eprintln!(
            "SKIPPED: kubectl {} not found (looked on PATH and beside the binary it resolves to)",
            version.unwrap_or("(default)")
        );
        return;
    };
    let server = start().await;
    let api = TestClient::new(&server);
    let k = Kubectl::with_bin(bin, &server);
    let rbac = "/apis/rbac.authorization.k8s.io/v1";

    k.ok(&["create", "namespace", NS]).await;

    // RBAC: typed clients, protobuf bodies.
    k.ok(&[
        "create",
        "role",
        "pod-reader",
        "-n",
        NS,
        "--verb=get,list",
        "--resource=pods",
    ])
    .await;
    let role = api
        .get(&format!("{rbac}/namespaces/{NS}/roles/pod-reader"))
        .await;
    assert_eq!(role.code, 200, "{:?}", role.body);
    assert_eq!(
        role.body["rules"],
        json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}])
    );

    k.ok(&[
        "create",
        "rolebinding",
        "read-pods",
        "-n",
        NS,
        "--role=pod-reader",
        "--user=alice",
        "--serviceaccount=compat:bot",
    ])
    .await;
    let rb = api
        .get(&format!("{rbac}/namespaces/{NS}/rolebindings/read-pods"))
        .await;
    assert_eq!(rb.code, 200, "{:?}", rb.body);
    assert_eq!(
        rb.body["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"})
    );
    let subjects = rb.body["subjects"].as_array().unwrap();
    assert_eq!(subjects.len(), 2, "{subjects:?}");
    assert_eq!(subjects[0]["kind"], "User");
    assert_eq!(subjects[0]["name"], "alice");
    assert_eq!(subjects[1]["kind"], "ServiceAccount");
    assert_eq!(subjects[1]["name"], "bot");
    assert_eq!(subjects[1]["namespace"], NS);

    k.ok(&[
        "create",
        "clusterrole",
        "metrics-reader",
        "--verb=get",
        "--non-resource-url=/metrics",
    ])
    .await;
    let cr = api
        .get(&format!("{rbac}/clusterroles/metrics-reader"))
        .await;
    assert_eq!(cr.code, 200, "{:?}", cr.body);
    assert_eq!(
        cr.body["rules"],
        json!([{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}])
    );

    k.ok(&[
        "create",
        "clusterrolebinding",
        "read-metrics",
        "--clusterrole=metrics-reader",
        "--group=devs",
    ])
    .await;
    let crb = api
        .get(&format!("{rbac}/clusterrolebindings/read-metrics"))
        .await;
    assert_eq!(crb.code, 200, "{:?}", crb.body);
    assert_eq!(crb.body["roleRef"]["kind"], "ClusterRole");
    assert_eq!(crb.body["roleRef"]["name"], "metrics-reader");
    assert_eq!(crb.body["subjects"][0]["kind"], "Group");
    assert_eq!(crb.body["subjects"][0]["name"], "devs");

    // A ReplicaSet and a CRD from files.
    k.ok(&["create", "-f", &fixture("replicaset.yaml")]).await;
    let rs = api
        .get(&format!("/apis/apps/v1/namespaces/{NS}/replicasets/web"))
        .await;
    assert_eq!(rs.code, 200, "{:?}", rs.body);
    assert_eq!(rs.body["spec"]["replicas"], 2);
    assert_eq!(
        rs.body["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.27"
    );
    k.ok(&["create", "-f", &fixture("crd.yaml")]).await;
    let crd = api
        .get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.compat.example.com")
        .await;
    assert_eq!(crd.code, 200, "{:?}", crd.body);
    let size = &crd.body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        ["properties"]["size"];
    assert_eq!(
        size,
        &json!({"type": "integer", "minimum": 0, "default": 1})
    );
    assert_eq!(
        crd.body["spec"]["versions"][0]["subresources"],
        json!({"status": {}})
    );

    // The other commonly listed kinds, created the way users do.
    k.ok(&[
        "create",
        "deployment",
        "web",
        "-n",
        NS,
        "--image=nginx:1.27",
        "--replicas=2",
    ])
    .await;
    k.ok(&[
        "create",
        "service",
        "clusterip",
        "web",
        "-n",
        NS,
        "--tcp=80:8080",
    ])
    .await;
    k.ok(&["create", "serviceaccount", "bot", "-n", NS]).await;
    k.ok(&[
        "create",
        "secret",
        "generic",
        "creds",
        "-n",
        NS,
        "--from-literal=user=admin",
    ])
    .await;
    k.ok(&[
        "create",
        "configmap",
        "settings",
        "-n",
        NS,
        "--from-literal=color=blue",
    ])
    .await;
    // batch/v1, policy/v1 and a TokenRequest: protobuf bodies too.
    k.ok(&[
        "create",
        "job",
        "once",
        "-n",
        NS,
        "--image=busybox",
        "--",
        "echo",
        "hi",
    ])
    .await;
    k.ok(&[
        "create",
        "cronjob",
        "nightly",
        "-n",
        NS,
        "--image=busybox",
        "--schedule=0 3 * * *",
        "--",
        "echo",
        "hi",
    ])
    .await;
    k.ok(&[
        "create",
        "poddisruptionbudget",
        "budget",
        "-n",
        NS,
        "--selector=app=web",
        "--min-available=1",
    ])
    .await;
    let token = k
        .ok(&["create", "token", "bot", "-n", NS, "--duration=10m"])
        .await;
    assert!(token.trim().len() > 10, "no token printed: {token:?}");
    let job = api
        .get(&format!("/apis/batch/v1/namespaces/{NS}/jobs/once"))
        .await;
    assert_eq!(job.code, 200, "{:?}", job.body);
    assert_eq!(
        job.body["spec"]["template"]["spec"]["containers"][0]["command"],
        json!(["echo", "hi"])
    );
    let cron = api
        .get(&format!("/apis/batch/v1/namespaces/{NS}/cronjobs/nightly"))
        .await;
    assert_eq!(cron.code, 200, "{:?}", cron.body);
    assert_eq!(cron.body["spec"]["schedule"], "0 3 * * *");
    assert_eq!(
        cron.body["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["image"],
        "busybox"
    );
    let pdb = api
        .get(&format!(
            "/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/budget"
        ))
        .await;
    assert_eq!(pdb.code, 200, "{:?}", pdb.body);
    assert_eq!(pdb.body["spec"]["minAvailable"], 1);
    assert_eq!(pdb.body["spec"]["selector"]["matchLabels"]["app"], "web");
    for (path, body) in [
        (
            format!("/apis/apps/v1/namespaces/{NS}/statefulsets"),
            statefulset(),
        ),
        (format!("/api/v1/namespaces/{NS}/events"), event()),
        (
            format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"),
            lease(),
        ),
    ] {
        let r = api.post(&path, &body).await;
        assert_eq!(r.code, 201, "{path}: {:?}", r.body);
    }

    let expected: &[(&[&str], &[&str])] = &[
        (
            &["get", "deployments"],
            &["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        ),
        (
            &["get", "deployments", "-o", "wide"],
            &[
                "NAME",
                "READY",
                "UP-TO-DATE",
                "AVAILABLE",
                "AGE",
                "CONTAINERS",
                "IMAGES",
                "SELECTOR",
            ],
        ),
        (&["get", "statefulsets"], &["NAME", "READY", "AGE"]),
        (
            &["get", "services"],
            &[
                "NAME",
                "TYPE",
                "CLUSTER-IP",
                "EXTERNAL-IP",
                "PORT(S)",
                "AGE",
            ],
        ),
        (
            &["get", "events"],
            &["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        ),
        (
            &["get", "replicasets"],
            &["NAME", "DESIRED", "CURRENT", "READY", "AGE"],
        ),
        (&["get", "configmaps"], &["NAME", "DATA", "AGE"]),
        (
            &["get", "jobs"],
            &["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
        ),
        (
            &["get", "cronjobs"],
            &[
                "NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE", "AGE",
            ],
        ),
        (&["get", "secrets"], &["NAME", "TYPE", "DATA", "AGE"]),
        (&["get", "serviceaccounts"], &["NAME", "SECRETS", "AGE"]),
        (&["get", "leases"], &["NAME", "HOLDER", "AGE"]),
        (&["get", "roles"], &["NAME", "CREATED", "AT"]),
        (&["get", "rolebindings"], &["NAME", "ROLE", "AGE"]),
        (
            &["get", "clusterrolebindings", "read-metrics"],
            &["NAME", "ROLE", "AGE"],
        ),
        (&["get", "namespace", NS], &["NAME", "STATUS", "AGE"]),
        (&["get", "crds"], &["NAME", "CREATED", "AT"]),
    ];
    for (args, want) in expected {
        let mut full = args.to_vec();
        if !matches!(args[1], "namespace" | "crds" | "clusterrolebindings") {
            full.extend(["-n", NS]);
        }
        let out = k.ok(&full).await;
        assert_eq!(header(&out), *want, "kubectl {full:?}:\n{out}");
    }

    // Cells, as kubectl prints them.
    let out = k
        .ok(&["get", "deployment", "web", "-n", NS, "-o", "wide"])
        .await;
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[..4], ["web", "0/2", "0", "0"], "{out}");
    assert_eq!(row[5..], ["nginx", "nginx:1.27", "app=web"], "{out}");
    let out = k.ok(&["get", "rolebinding", "read-pods", "-n", NS]).await;
    assert!(out.contains("Role/pod-reader"), "{out}");
    let out = k.ok(&["get", "service", "web", "-n", NS]).await;
    assert!(out.contains("80/TCP"), "{out}");
    let out = k.ok(&["get", "events", "-n", NS]).await;
    assert!(
        out.contains("Normal") && out.contains("deployment/web") && out.contains("Scaled up"),
        "{out}"
    );

    server.shutdown().await;
}

#[tokio::test]
async fn kubectl_on_path_creates_typed_kinds_and_prints_builtin_tables() {
    typed_creates_and_headers(None).await;
}

#[tokio::test]
async fn kubectl_1_32_creates_typed_kinds_and_prints_builtin_tables() {
    typed_creates_and_headers(Some("1.32")).await;
}

#[tokio::test]
async fn kubectl_1_33_creates_typed_kinds_and_prints_builtin_tables() {
    typed_creates_and_headers(Some("1.33")).await;
}

fn statefulset() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "redis"},
        "spec": {
            "replicas": 3, "serviceName": "redis",
            "selector": {"matchLabels": {"app": "redis"}},
            "template": {"metadata": {"labels": {"app": "redis"}},
                         "spec": {"containers": [{"name": "redis", "image": "redis:7"}]}},
        },
    })
}

fn event() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "web.1"},
        "involvedObject": {"kind": "Deployment", "name": "web", "namespace": NS, "apiVersion": "apps/v1"},
        "reason": "ScalingReplicaSet", "message": "Scaled up replica set web-1 to 2",
        "type": "Normal", "count": 3,
        "source": {"component": "deployment-controller"},
        "firstTimestamp": "2024-05-01T00:00:00Z", "lastTimestamp": "2024-05-01T00:00:00Z",
    })
}

fn lease() -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "cnat-controller"},
        "spec": {"holderIdentity": "pod-a_1234", "leaseDurationSeconds": 15},
    })
}

/// `(name, priority)` of each column, and the first row's cells without the time columns
/// (`Age`, `Last Seen`, `First Seen`), which depend on the clock; those are checked to be
/// strings.
async fn table(api: &TestClient, path: &str) -> (Columns, Vec<Value>) {
    let answer = read_answer(
        api.raw("GET", path, &[("accept", TABLE)], vec![], true)
            .await,
    )
    .await;
    assert_eq!(answer.code, 200, "{path}: {:?}", answer.body);
    assert_eq!(answer.body["kind"], "Table", "{path}: {:?}", answer.body);
    let defs = answer.body["columnDefinitions"].as_array().unwrap();
    let columns: Columns = defs
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap().to_owned(),
                d["priority"].as_i64().unwrap(),
            )
        })
        .collect();
    let cells = answer.body["rows"][0]["cells"].as_array().unwrap();
    assert_eq!(cells.len(), columns.len(), "{path}: {:?}", answer.body);
    let kept = columns
        .iter()
        .zip(cells)
        .filter_map(|((name, _), cell)| {
            if matches!(name.as_str(), "Age" | "Last Seen" | "First Seen") {
                assert!(cell.is_string(), "{path}: {name} = {cell}");
                None
            } else {
                Some(cell.clone())
            }
        })
        .collect();
    (columns, kept)
}

/// `(name, priority)` of each column of a Table.
type Columns = Vec<(String, i64)>;

fn cols(spec: &[(&str, i64)]) -> Columns {
    spec.iter().map(|(n, p)| (n.to_string(), *p)).collect()
}

#[tokio::test]
async fn builtin_kinds_get_their_printer_tables() {
    let server = start().await;
    let api = TestClient::new(&server);
    let core = format!("/api/v1/namespaces/{NS}");
    let apps = format!("/apis/apps/v1/namespaces/{NS}");
    let rbac = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}");
    let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases");
    assert_eq!(
        api.post("/api/v1/namespaces", &json!({"metadata": {"name": NS}}))
            .await
            .code,
        201
    );
    let deployment = json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "nginx"},
                                                      {"name": "log", "image": "busybox"}]}}},
    });
    let mut replicaset = deployment.clone();
    replicaset["metadata"]["name"] = json!("web-1");
    for (path, body) in [
        (format!("{apps}/deployments"), deployment),
        (format!("{apps}/replicasets"), replicaset),
        (format!("{apps}/statefulsets"), statefulset()),
        (
            format!("{core}/services"),
            json!({"metadata": {"name": "web"}, "spec": {"clusterIP": "10.96.0.10",
                "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}], "selector": {"app": "web"}}}),
        ),
        (format!("{core}/events"), event()),
        (
            format!("{core}/configmaps"),
            json!({"metadata": {"name": "settings"}, "data": {"a": "1", "b": "2"}}),
        ),
        (
            format!("{core}/secrets"),
            json!({"metadata": {"name": "creds"}, "type": "Opaque", "data": {"user": "YWRtaW4="}}),
        ),
        (
            format!("{core}/serviceaccounts"),
            json!({"metadata": {"name": "bot"}}),
        ),
        (leases.clone(), lease()),
        (
            format!("{rbac}/rolebindings"),
            json!({"metadata": {"name": "read-pods"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
                "subjects": [{"kind": "User", "name": "alice"},
                             {"kind": "ServiceAccount", "name": "bot", "namespace": NS}]}),
        ),
    ] {
        let r = api.post(&path, &body).await;
        assert_eq!(r.code, 201, "{path}: {:?}", r.body);
    }

    let cases: Vec<(String, Columns, Value)> = vec![
        (
            format!("{apps}/deployments"),
            cols(&[
                ("Name", 0),
                ("Ready", 0),
                ("Up-to-date", 0),
                ("Available", 0),
                ("Age", 0),
                ("Containers", 1),
                ("Images", 1),
                ("Selector", 1),
            ]),
            json!(["web", "0/3", 0, 0, "web,log", "nginx,busybox", "app=web"]),
        ),
        (
            format!("{apps}/statefulsets"),
            cols(&[
                ("Name", 0),
                ("Ready", 0),
                ("Age", 0),
                ("Containers", 1),
                ("Images", 1),
            ]),
            json!(["redis", "0/3", "redis", "redis:7"]),
        ),
        (
            format!("{apps}/replicasets"),
            cols(&[
                ("Name", 0),
                ("Desired", 0),
                ("Current", 0),
                ("Ready", 0),
                ("Age", 0),
                ("Containers", 1),
                ("Images", 1),
                ("Selector", 1),
            ]),
            json!(["web-1", 3, 0, 0, "web,log", "nginx,busybox", "app=web"]),
        ),
        (
            format!("{core}/services"),
            cols(&[
                ("Name", 0),
                ("Type", 0),
                ("Cluster-IP", 0),
                ("External-IP", 0),
                ("Port(s)", 0),
                ("Age", 0),
                ("Selector", 1),
            ]),
            json!([
                "web",
                "ClusterIP",
                "10.96.0.10",
                "<none>",
                "80/TCP",
                "app=web"
            ]),
        ),
        (
            format!("{core}/events"),
            cols(&[
                ("Last Seen", 0),
                ("Type", 0),
                ("Reason", 0),
                ("Object", 0),
                ("Subobject", 1),
                ("Source", 1),
                ("Message", 0),
                ("First Seen", 1),
                ("Count", 1),
                ("Name", 1),
            ]),
            json!([
                "Normal",
                "ScalingReplicaSet",
                "deployment/web",
                "",
                "deployment-controller",
                "Scaled up replica set web-1 to 2",
                3,
                "web.1"
            ]),
        ),
        (
            format!("{core}/configmaps"),
            cols(&[("Name", 0), ("Data", 0), ("Age", 0)]),
            json!(["settings", 2]),
        ),
        (
            format!("{core}/secrets"),
            cols(&[("Name", 0), ("Type", 0), ("Data", 0), ("Age", 0)]),
            json!(["creds", "Opaque", 1]),
        ),
        (
            format!("{core}/serviceaccounts/bot"),
            cols(&[("Name", 0), ("Secrets", 0), ("Age", 0)]),
            json!(["bot", 0]),
        ),
        (
            leases,
            cols(&[("Name", 0), ("Holder", 0), ("Age", 0)]),
            json!(["cnat-controller", "pod-a_1234"]),
        ),
        (
            format!("{rbac}/rolebindings"),
            cols(&[
                ("Name", 0),
                ("Role", 0),
                ("Age", 0),
                ("Users", 1),
                ("Groups", 1),
                ("ServiceAccounts", 1),
            ]),
            json!(["read-pods", "Role/pod-reader", "alice", "", "compat:bot"]),
        ),
        (
            format!("/api/v1/namespaces/{NS}"),
            cols(&[("Name", 0), ("Status", 0), ("Age", 0)]),
            json!([NS, "Active"]),
        ),
    ];
    for (path, want_columns, want_cells) in cases {
        let (columns, cells) = table(&api, &path).await;
        assert_eq!(columns, want_columns, "{path}");
        assert_eq!(Value::Array(cells), want_cells, "{path}");
    }

    server.shutdown().await;
}
