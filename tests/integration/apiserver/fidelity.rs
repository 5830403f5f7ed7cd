//! Behaviours that other projects' end-to-end suites (written for real clusters) rely on:
//! the Service REST storage (deleted object, status, cluster IPs, node ports), the default
//! objects of a new cluster (the `kubernetes` Service, the bootstrap RBAC policy, every
//! namespace's `default` ServiceAccount), and the rest of issue 38.

use crate::support;

use serde_json::{Value, json};
use support::apiserver::*;

const SVCS: &str = "/api/v1/namespaces/default/services";

fn svc(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec})
}

fn cluster_ip(v: &Value) -> std::net::Ipv4Addr {
    v["spec"]["clusterIP"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .unwrap_or_else(|_| panic!("no cluster IP in {v}"))
}

fn in_service_cidr(ip: std::net::Ipv4Addr) -> bool {
    let o = ip.octets();
    o[0] == 10 && (96..112).contains(&o[1])
}

#[tokio::test]
async fn a_service_is_defaulted_gets_a_cluster_ip_and_its_delete_returns_it() {
    let s = start().await;
    let c = TestClient::new(&s);
    let created = c
        .post(
            SVCS,
            &svc(
                "web",
                json!({"selector": {"app": "web"}, "ports": [{"port": 80}]}),
            ),
        )
        .await;
    assert_eq!(created.code, 201, "{}", created.body);
    let spec = &created.body["spec"];
    let ip = cluster_ip(&created.body);
    assert!(in_service_cidr(ip), "{ip}");
    assert_ne!(ip, std::net::Ipv4Addr::new(10, 96, 0, 1));
    assert_eq!(spec["clusterIPs"], json!([ip.to_string()]));
    assert_eq!(spec["type"], "ClusterIP");
    assert_eq!(spec["sessionAffinity"], "None");
    assert_eq!(spec["ipFamilies"], json!(["IPv4"]));
    assert_eq!(spec["ipFamilyPolicy"], "SingleStack");
    assert_eq!(spec["internalTrafficPolicy"], "Cluster");
    assert_eq!(
        spec["ports"],
        json!([{"port": 80, "protocol": "TCP", "targetPort": 80}])
    );
    assert_eq!(created.body["status"], json!({"loadBalancer": {}}));

    // An update without the allocated values keeps them; changing the IP is refused.
    let mut upd = created.body.clone();
    upd["spec"].as_object_mut().unwrap().remove("clusterIP");
    upd["spec"].as_object_mut().unwrap().remove("clusterIPs");
    upd["metadata"]["labels"] = json!({"tier": "front"});
    let updated = c.put(&format!("{SVCS}/web"), &upd).await;
    assert_eq!(updated.code, 200, "{}", updated.body);
    assert_eq!(cluster_ip(&updated.body), ip);
    let mut moved = updated.body.clone();
    moved["spec"]["clusterIP"] = json!("10.96.0.77");
    moved["spec"]["clusterIPs"] = json!(["10.96.0.77"]);
    let refused = c.put(&format!("{SVCS}/web"), &moved).await;
    assert_eq!(refused.code, 422, "{}", refused.body);
    assert!(
        refused.body["message"].as_str().unwrap().contains(
            "spec.clusterIPs[0]: Invalid value: [\"10.96.0.77\"]: may not change once set"
        ),
        "{}",
        refused.body
    );

    // A requested address must be free and in range.
    let taken = c
        .post(
            SVCS,
            &svc(
                "copy",
                json!({"clusterIP": ip.to_string(), "ports": [{"port": 80}]}),
            ),
        )
        .await;
    assert_eq!(taken.code, 422);
    assert_eq!(
        taken.body["message"],
        format!(
            "Service \"copy\" is invalid: spec.clusterIPs: Invalid value: [\"{ip}\"]: failed to allocate IP {ip}: provided IP is already allocated"
        )
    );
    let outside = c
        .post(
            SVCS,
            &svc(
                "far",
                json!({"clusterIP": "192.168.0.1", "ports": [{"port": 80}]}),
            ),
        )
        .await;
    assert_eq!(outside.code, 422);
    assert!(outside.body["message"].as_str().unwrap().contains(
        "the provided IP (192.168.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/12"
    ));
    let chosen = c
        .post(
            SVCS,
            &svc(
                "fixed",
                json!({"clusterIP": "10.96.0.10", "ports": [{"port": 53}]}),
            ),
        )
        .await;
    assert_eq!(chosen.code, 201, "{}", chosen.body);
    assert_eq!(chosen.body["spec"]["clusterIPs"], json!(["10.96.0.10"]));

    // DELETE answers with the Service (ReturnDeletedObject), and its address is free again.
    let deleted = c.delete(&format!("{SVCS}/web"), None).await;
    assert_eq!(deleted.code, 200);
    assert_eq!(deleted.body["kind"], "Service");
    assert_eq!(deleted.body["metadata"]["name"], "web");
    assert_eq!(cluster_ip(&deleted.body), ip);
    let again = c
        .post(
            SVCS,
            &svc(
                "again",
                json!({"clusterIP": ip.to_string(), "ports": [{"port": 80}]}),
            ),
        )
        .await;
    assert_eq!(again.code, 201, "{}", again.body);
    s.shutdown().await;
}

#[tokio::test]
async fn headless_external_name_and_node_port_services_get_what_a_cluster_gives_them() {
    let s = start().await;
    let c = TestClient::new(&s);
    let headless = c
        .post(
            SVCS,
            &svc(
                "db",
                json!({"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"port": 5432}]}),
            ),
        )
        .await;
    assert_eq!(headless.code, 201, "{}", headless.body);
    assert_eq!(headless.body["spec"]["clusterIPs"], json!(["None"]));
    assert_eq!(headless.body["spec"]["ipFamilyPolicy"], "SingleStack");
    let bare = c
        .post(SVCS, &svc("bare", json!({"clusterIP": "None"})))
        .await;
    assert_eq!(bare.code, 201, "{}", bare.body);
    assert_eq!(bare.body["spec"]["ipFamilyPolicy"], "RequireDualStack");
    assert_eq!(bare.body["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
    let ext = c
        .post(
            SVCS,
            &svc(
                "ext",
                json!({"type": "ExternalName", "externalName": "example.com"}),
            ),
        )
        .await;
    assert_eq!(ext.code, 201, "{}", ext.body);
    assert!(ext.body["spec"]["clusterIP"].is_null());
    assert!(ext.body["spec"]["ipFamilies"].is_null());

    let np = c
        .post(SVCS, &svc("np", json!({"type": "NodePort", "ports": [{"name": "a", "port": 80}, {"name": "b", "port": 81, "nodePort": 30081}]})))
        .await;
    assert_eq!(np.code, 201, "{}", np.body);
    let first = np.body["spec"]["ports"][0]["nodePort"].as_i64().unwrap();
    assert!((30000..=32767).contains(&first), "{first}");
    assert_eq!(np.body["spec"]["ports"][1]["nodePort"], 30081);
    assert_eq!(np.body["spec"]["externalTrafficPolicy"], "Cluster");
    let clash = c
        .post(
            SVCS,
            &svc(
                "np2",
                json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30081}]}),
            ),
        )
        .await;
    assert_eq!(clash.code, 422);
    assert!(clash.body["message"].as_str().unwrap().contains(
        "spec.ports[0].nodePort: Invalid value: 30081: provided port is already allocated"
    ));
    s.shutdown().await;
}

#[tokio::test]
async fn a_new_cluster_has_the_kubernetes_service_and_the_bootstrap_policy() {
    let s = start().await;
    let c = TestClient::new(&s);
    let k = c.get(&format!("{SVCS}/kubernetes")).await;
    assert_eq!(k.code, 200, "{}", k.body);
    assert_eq!(k.body["spec"]["clusterIP"], "10.96.0.1");
    assert_eq!(k.body["metadata"]["labels"]["component"], "apiserver");
    let port: u16 = s.url().rsplit(':').next().unwrap().parse().unwrap();
    assert_eq!(
        k.body["spec"]["ports"],
        json!([{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}])
    );

    let roles = c
        .get("/apis/rbac.authorization.k8s.io/v1/clusterroles")
        .await;
    let names: Vec<&str> = roles.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["metadata"]["name"].as_str())
        .collect();
    for n in [
        "cluster-admin",
        "admin",
        "edit",
        "view",
        "system:discovery",
        "system:basic-user",
        "system:public-info-viewer",
        "system:aggregate-to-view",
    ] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    let crb = c
        .get("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/cluster-admin")
        .await;
    assert_eq!(crb.code, 200);
    assert_eq!(
        crb.body["subjects"],
        json!([{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:masters"}])
    );
    let view = c
        .get("/apis/rbac.authorization.k8s.io/v1/clusterroles/view")
        .await;
    assert_eq!(
        view.body["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"],
        json!({"rbac.authorization.k8s.io/aggregate-to-view": "true"})
    );
    s.shutdown().await;
}

#[tokio::test]
async fn every_namespace_gets_a_default_service_account_and_the_root_ca() {
    let s = embedded_cluster::Cluster::builder()
        .root_ca_publisher(true)
        .start()
        .await
        .unwrap();
    let c = TestClient::new(&s);
    let ns = c
        .post(
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
        )
        .await;
    assert_eq!(ns.code, 201);
    let rv = ns.body["metadata"]["resourceVersion"].as_str().unwrap();
    let mut w = c
        .watch(&format!(
            "/api/v1/namespaces/team/serviceaccounts?watch=true&resourceVersion={rv}"
        ))
        .await;
    let e = w.next_change().await.unwrap();
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"]["metadata"]["name"], "default");
    let cm = c
        .get("/api/v1/namespaces/team/configmaps/kube-root-ca.crt")
        .await;
    assert_eq!(cm.code, 200, "{}", cm.body);
    assert_eq!(cm.body["data"]["ca.crt"], s.ca_pem().unwrap());

    // Deleted, it comes back, as the ServiceAccount controller recreates it.
    let gone = c
        .delete("/api/v1/namespaces/team/serviceaccounts/default", None)
        .await;
    assert_eq!(gone.code, 200);
    assert_eq!(w.next_change().await.unwrap()["type"], "DELETED");
    let back = w.next_change().await.unwrap();
    assert_eq!(back["type"], "ADDED");
    assert_ne!(
        back["object"]["metadata"]["uid"],
        gone.body["metadata"]["uid"]
    );

    // The namespaces a cluster starts with have theirs too.
    let mut sys = c
        .watch("/api/v1/namespaces/kube-system/serviceaccounts?watch=true&fieldSelector=metadata.name%3Ddefault")
        .await;
    let e = sys.next_change().await.unwrap();
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"]["metadata"]["namespace"], "kube-system");
    s.shutdown().await;
}

async fn body_text(resp: hyper::Response<hyper::body::Incoming>) -> String {
    use http_body_util::BodyExt;
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn bodies_have_go_field_order_and_end_with_a_newline() {
    let s = start().await;
    let c = TestClient::new(&s);
    assert_eq!(c.post(CMS, &cm("a", json!({}))).await.code, 201);
    let dup = c
        .raw(
            "POST",
            CMS,
            &[("content-type", "application/json")],
            serde_json::to_vec(&cm("a", json!({}))).unwrap(),
            true,
        )
        .await;
    assert_eq!(
        body_text(dup).await,
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"configmaps \\\"a\\\" already exists\",\"reason\":\"AlreadyExists\",\"details\":{\"name\":\"a\",\"kind\":\"configmaps\"},\"code\":409}\n"
    );
    let got = body_text(c.raw("GET", &format!("{CMS}/a"), &[], vec![], true).await).await;
    assert!(
        got.starts_with("{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"a\",\"namespace\":\"default\",\"uid\":"),
        "{got}"
    );
    assert!(got.ends_with("},\"data\":{\"k\":\"v\"}}\n"), "{got}");
    let list = body_text(c.raw("GET", CMS, &[], vec![], true).await).await;
    assert!(
        list.starts_with(
            "{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":"
        ),
        "{list}"
    );
    // A typed list's items leave their kind and apiVersion out, as kube-apiserver's do.
    assert!(
        list.contains("\"items\":[{\"metadata\":{\"name\":\"a\""),
        "{list}"
    );
    assert!(list.ends_with("}]}\n"));

    // Custom resources are unstructured on a real server: every level sorted.
    c.install_at_crd().await;
    let created = c.post(ATS, &at("x")).await;
    assert_eq!(created.code, 201, "{}", created.body);
    let got = body_text(c.raw("GET", &format!("{ATS}/x"), &[], vec![], true).await).await;
    assert!(got.starts_with("{\"apiVersion\":\"cnat.programming-kubernetes.info/v1alpha1\",\"kind\":\"At\",\"metadata\":{\"creationTimestamp\":"), "{got}");
    assert!(got.ends_with("}\n"));
    s.shutdown().await;
}

const PARTIAL: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
const PARTIAL_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

#[tokio::test]
async fn metadata_only_answers_for_get_list_patch_and_watch() {
    let s = start().await;
    let c = TestClient::new(&s);
    assert_eq!(c.post(CMS, &cm("a", json!({"app": "web"}))).await.code, 201);
    let got = c
        .send("GET", &format!("{CMS}/a"), &[("accept", PARTIAL)], None)
        .await;
    assert_eq!(got.code, 200);
    assert_eq!(got.body["kind"], "PartialObjectMetadata");
    assert_eq!(got.body["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(got.body["metadata"]["labels"], json!({"app": "web"}));
    assert!(got.body.get("data").is_none());

    let list = c.send("GET", CMS, &[("accept", PARTIAL_LIST)], None).await;
    assert_eq!(list.code, 200);
    assert_eq!(list.body["kind"], "PartialObjectMetadataList");
    assert!(list.body["metadata"]["resourceVersion"].is_string());
    assert_eq!(list.body["items"][0]["kind"], "PartialObjectMetadata");
    assert_eq!(list.body["items"][0]["metadata"]["name"], "a");
    assert!(list.body["items"][0].get("data").is_none());

    let wrong = c.send("GET", CMS, &[("accept", PARTIAL)], None).await;
    assert_eq!(wrong.code, 406);
    assert_eq!(wrong.body["reason"], "NotAcceptable");
    assert_eq!(
        wrong.body["message"],
        "you requested PartialObjectMetadata, but the requested object is a list (*core.ConfigMapList)"
    );

    let patched = c
        .send(
            "PATCH",
            &format!("{CMS}/a"),
            &[
                ("accept", PARTIAL),
                ("content-type", "application/merge-patch+json"),
            ],
            Some(&json!({"metadata": {"labels": {"tier": "front"}}})),
        )
        .await;
    assert_eq!(patched.code, 200, "{}", patched.body);
    assert_eq!(patched.body["kind"], "PartialObjectMetadata");
    assert_eq!(patched.body["metadata"]["labels"]["tier"], "front");

    let resp = c
        .raw(
            "GET",
            &format!("{CMS}?watch=true"),
            &[("accept", PARTIAL)],
            vec![],
            true,
        )
        .await;
    assert_eq!(resp.status(), 200);
    let mut w = reader(resp);
    let e = w.next_change().await.unwrap();
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(e["object"]["metadata"]["name"], "a");
    assert!(e["object"].get("data").is_none());

    // A DELETE answered with a Status keeps it.
    let gone = c
        .send("DELETE", &format!("{CMS}/a"), &[("accept", PARTIAL)], None)
        .await;
    assert_eq!(gone.code, 200);
    assert_eq!(gone.body["kind"], "Status");
    s.shutdown().await;
}

#[tokio::test]
async fn client_certificates_authenticate_as_their_common_name_in_their_organizations() {
    let s = embedded_cluster::Cluster::builder()
        .enforce_rbac(true)
        .start()
        .await
        .unwrap();
    let (cert, key) = s
        .client_certificate("kubernetes-admin", Some("system:masters"))
        .unwrap()
        .unwrap();
    let ca = s.ca_pem().unwrap();
    let admin = TestClient::with_client_cert(s.url(), ca, &cert, &key);
    let a = admin.get("/api/v1/namespaces").await;
    assert_eq!(a.code, 200, "{:?}", a.body);

    let (cert, key) = s
        .client_certificate("alice", Some("devs"))
        .unwrap()
        .unwrap();
    let alice = TestClient::with_client_cert(s.url(), ca, &cert, &key);
    let a = alice.get("/api/v1/namespaces").await;
    assert_eq!(a.code, 403);
    assert_eq!(
        a.body["message"],
        "namespaces is forbidden: User \"alice\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope"
    );
    // Her group is what a binding can name.
    s.load_manifests(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: devs-view}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}\nsubjects: [{kind: Group, apiGroup: rbac.authorization.k8s.io, name: devs}]\n",
    )
    .unwrap();
    let a = alice.get("/api/v1/namespaces/default/configmaps").await;
    assert_eq!(a.code, 200, "{:?}", a.body);

    // A certificate from another CA is refused at the handshake's verification: no user.
    let other = embedded_cluster::Cluster::builder().start().await.unwrap();
    let (cert, key) = other
        .client_certificate("mallory", Some("system:masters"))
        .unwrap()
        .unwrap();
    let mallory = TestClient::with_client_cert(s.url(), ca, &cert, &key);
    assert!(
        mallory.try_get("/api/v1/namespaces").await.is_err(),
        "a foreign client certificate was accepted"
    );

    // kubectl with a kind-like kubeconfig.
    if let Some(k) = crate::support::cluster::Kubectl::new(&s) {
        let yaml = s
            .kubeconfig_yaml_for_client_cert("kubernetes-admin", Some("system:masters"))
            .unwrap()
            .unwrap();
        std::fs::write(k.home().join("kubeconfig"), yaml).unwrap();
        let out = k
            .ok(&[
                "get",
                "svc",
                "kubernetes",
                "-o",
                "jsonpath={.spec.clusterIP}",
            ])
            .await;
        assert_eq!(out, "10.96.0.1");
        let who = k.ok(&["auth", "can-i", "delete", "nodes"]).await;
        assert_eq!(who.trim(), "yes");
    }
    other.shutdown().await;
    s.shutdown().await;
}

/// Reads a watch until an event satisfies `done`, returning that event's object.
async fn watch_until(w: &mut WatchReader, done: impl Fn(&Value) -> bool) -> Value {
    loop {
        let e = w.next_change().await.expect("the watch ended");
        if done(&e["object"]) {
            return e["object"].clone();
        }
    }
}

#[tokio::test]
async fn a_job_runs_its_pods_to_completion_or_to_its_backoff_limit() {
    let s = embedded_cluster::Cluster::builder()
        .simulate(true)
        .pod_run_time(std::time::Duration::ZERO)
        .start()
        .await
        .unwrap();
    let c = TestClient::new(&s);
    const JOBS: &str = "/apis/batch/v1/namespaces/default/jobs";
    let job = |name: &str, script: &str, completions: i64| {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
               "spec": {"completions": completions, "backoffLimit": 1, "template": {"spec": {
                   "restartPolicy": "Never",
                   "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", script]}]}}}})
    };
    let mut w = c.watch(&format!("{JOBS}?watch=true")).await;
    let created = c.post(JOBS, &job("pi", "echo 3.14", 2)).await;
    assert_eq!(created.code, 201, "{}", created.body);
    let uid = created.body["metadata"]["uid"].as_str().unwrap().to_owned();
    assert_eq!(created.body["spec"]["parallelism"], 1);
    assert_eq!(created.body["spec"]["completionMode"], "NonIndexed");
    assert_eq!(
        created.body["spec"]["selector"],
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
    );
    assert_eq!(
        created.body["spec"]["template"]["metadata"]["labels"]["job-name"],
        "pi"
    );
    let done = watch_until(&mut w, |j| {
        j["metadata"]["name"] == "pi"
            && j["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Complete"))
    })
    .await;
    assert_eq!(done["status"]["succeeded"], 2);
    assert!(done["status"]["completionTime"].is_string());
    let pods = c
        .get("/api/v1/namespaces/default/pods?labelSelector=job-name%3Dpi")
        .await;
    let pods = pods.body["items"].as_array().unwrap();
    assert_eq!(pods.len(), 2);
    assert!(pods.iter().all(|p| p["status"]["phase"] == "Succeeded"
        && p["metadata"]["name"].as_str().unwrap().starts_with("pi-")
        && p["metadata"]["ownerReferences"][0]["kind"] == "Job"));

    assert_eq!(c.post(JOBS, &job("bad", "exit 2", 1)).await.code, 201);
    let failed = watch_until(&mut w, |j| {
        j["metadata"]["name"] == "bad"
            && j["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Failed"))
    })
    .await;
    assert_eq!(failed["status"]["failed"], 2);
    let cond = failed["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Failed")
        .unwrap()
        .clone();
    assert_eq!(cond["reason"], "BackoffLimitExceeded");
    s.shutdown().await;
}

#[tokio::test]
async fn token_requests_evictions_and_the_other_kinds_clients_expect() {
    let s = embedded_cluster::Cluster::builder()
        .enforce_rbac(true)
        .start()
        .await
        .unwrap();
    let c = TestClient::new(&s);
    // TokenRequest: a token that authenticates as the service account.
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}});
    assert_eq!(
        c.post("/api/v1/namespaces/default/serviceaccounts", &sa)
            .await
            .code,
        201
    );
    let tr = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                    "spec": {"expirationSeconds": 3600}});
    let issued = c
        .post(
            "/api/v1/namespaces/default/serviceaccounts/robot/token",
            &tr,
        )
        .await;
    assert_eq!(issued.code, 201, "{}", issued.body);
    assert_eq!(issued.body["kind"], "TokenRequest");
    assert!(issued.body["status"]["expirationTimestamp"].is_string());
    let token = issued.body["status"]["token"].as_str().unwrap();
    let robot = TestClient::from_parts(s.url(), token, s.ca_pem(), false);
    let denied = robot.get("/api/v1/namespaces/default/pods").await;
    assert_eq!(denied.code, 403);
    assert_eq!(
        denied.body["message"],
        "pods is forbidden: User \"system:serviceaccount:default:robot\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    let missing = c
        .post(
            "/api/v1/namespaces/default/serviceaccounts/nobody/token",
            &tr,
        )
        .await;
    assert_eq!(missing.code, 404);
    let short = c
        .post(
            "/api/v1/namespaces/default/serviceaccounts/robot/token",
            &json!({"spec": {"expirationSeconds": 60}}),
        )
        .await;
    assert_eq!(short.code, 422);

    // Eviction: a pending pod goes; a running one behind a budget that allows nothing stays.
    let store = s.store();
    let mk = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "db"}},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    };
    for n in ["p1", "p2"] {
        assert_eq!(
            c.post("/api/v1/namespaces/default/pods", &mk(n)).await.code,
            201
        );
    }
    let eviction = |n: &str| json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": n, "namespace": "default"}});
    let evicted = c
        .post(
            "/api/v1/namespaces/default/pods/p1/eviction",
            &eviction("p1"),
        )
        .await;
    assert_eq!(evicted.code, 201, "{}", evicted.body);
    assert_eq!(evicted.body["status"], "Success");
    assert_eq!(c.get("/api/v1/namespaces/default/pods/p1").await.code, 404);
    store.write(|st| {
        let mut p = st.get("core/pods", "default", "p2").unwrap().clone();
        p["spec"]["nodeName"] = json!("node");
        p["status"] =
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
        st.update("core/pods", p);
    });
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "db"},
                     "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}});
    assert_eq!(
        c.post(
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
            &pdb
        )
        .await
        .code,
        201
    );
    let refused = c
        .post(
            "/api/v1/namespaces/default/pods/p2/eviction",
            &eviction("p2"),
        )
        .await;
    assert_eq!(refused.code, 429, "{}", refused.body);
    assert_eq!(
        refused.body["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert_eq!(
        refused.body["details"]["causes"][0]["reason"],
        "DisruptionBudget"
    );

    // CSRs with /approval, and the kinds that are stored as on a cluster.
    let csr = json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": "alice"},
        "spec": {"request": "LS0t", "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"]}});
    const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let created = c.post(CSRS, &csr).await;
    assert_eq!(created.code, 201, "{}", created.body);
    let mut approve = created.body.clone();
    approve["status"] = json!({"conditions": [{"type": "Approved", "status": "True", "reason": "Test", "message": "ok"}]});
    let approved = c.put(&format!("{CSRS}/alice/approval"), &approve).await;
    assert_eq!(approved.code, 200, "{}", approved.body);
    assert_eq!(approved.body["status"]["conditions"][0]["type"], "Approved");
    for path in [
        "/apis/apps/v1/namespaces/default/daemonsets",
        "/api/v1/namespaces/default/replicationcontrollers",
        "/apis/batch/v1/namespaces/default/cronjobs",
        "/apis/apiregistration.k8s.io/v1/apiservices",
    ] {
        assert_eq!(c.get(path).await.code, 200, "{path}");
    }
    s.shutdown().await;
}

#[tokio::test]
async fn component_statuses_are_computed_read_only_and_deprecated() {
    let s = start().await;
    let c = TestClient::new(&s);
    let list = c.get("/api/v1/componentstatuses").await;
    assert_eq!(list.code, 200);
    assert_eq!(list.body["kind"], "ComponentStatusList");
    let names: Vec<&str> = list.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["scheduler", "controller-manager", "etcd-0"]);
    assert_eq!(
        list.headers.get("warning").unwrap(),
        "299 - \"v1 ComponentStatus is deprecated in v1.19+\""
    );
    let etcd = c.get("/api/v1/componentstatuses/etcd-0").await;
    assert_eq!(etcd.body["conditions"][0]["type"], "Healthy");
    assert_eq!(c.get("/api/v1/componentstatuses/nope").await.code, 404);
    let del = c.delete("/api/v1/componentstatuses/etcd-0", None).await;
    assert_eq!(del.code, 405);
    if let Some(k) = crate::support::cluster::Kubectl::new(&s) {
        let out = k.run(&["get", "cs"]).await;
        assert!(out.ok, "{}", out.stderr);
        assert!(
            out.stdout.contains("etcd-0") && out.stdout.contains("Healthy"),
            "{}",
            out.stdout
        );
        assert!(
            out.stderr
                .contains("v1 ComponentStatus is deprecated in v1.19+"),
            "{}",
            out.stderr
        );
    }
    s.shutdown().await;
}

/// `pods/NAME/ephemeralcontainers`: GET answers with the pod; PUT and strategic PATCH take only
/// `spec.ephemeralContainers`, add containers but never remove or change one, with the real
/// validation messages; discovery lists the subresource; the simulated node reports the added
/// containers running.
#[tokio::test]
async fn ephemeral_containers_are_added_through_their_subresource_only() {
    let s = embedded_cluster::Cluster::builder()
        .simulate(true)
        .start()
        .await
        .unwrap();
    let c = TestClient::new(&s);
    const PODS: &str = "/api/v1/namespaces/default/pods";
    const EC: &str = "/api/v1/namespaces/default/pods/dbg/ephemeralcontainers";
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dbg", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "app", "image": "busybox", "command": ["sleep", "60"]}]}});
    assert_eq!(c.post(PODS, &pod).await.code, 201);

    let got = c.get(EC).await;
    assert_eq!(got.code, 200, "{}", got.body);
    assert_eq!(got.body["kind"], "Pod");
    assert!(got.body["spec"].get("ephemeralContainers").is_none());
    // `SetDefaults_PodSpec`: `kubectl debug` reads `spec.securityContext.runAsNonRoot`.
    assert_eq!(got.body["spec"]["securityContext"], json!({}));

    // A PUT without resourceVersion; its labels and other spec changes are ignored.
    let put = c
        .put(
            EC,
            &json!({"metadata": {"name": "dbg", "labels": {"app": "changed"}},
                    "spec": {"containers": [{"name": "app", "image": "nginx"}],
                             "ephemeralContainers": [{"name": "debug1", "image": "busybox",
                                                      "command": ["sh", "-c", "sleep 1"]}]}}),
        )
        .await;
    assert_eq!(put.code, 200, "{}", put.body);
    assert_eq!(put.body["metadata"]["labels"]["app"], "x");
    assert_eq!(put.body["spec"]["containers"][0]["image"], "busybox");
    assert_eq!(put.body["spec"]["ephemeralContainers"][0]["name"], "debug1");

    // A strategic merge patch adds by name.
    let patched = c
        .patch(
            EC,
            "application/strategic-merge-patch+json",
            &json!({"spec": {"ephemeralContainers": [{"name": "debug2", "image": "busybox"}]}}),
        )
        .await;
    assert_eq!(patched.code, 200, "{}", patched.body);
    let names: Vec<&str> = patched.body["spec"]["ephemeralContainers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["debug1", "debug2"]);

    // Removing or changing one is refused, as are fields an ephemeral container may not have.
    let removed = c
        .put(
            EC,
            &json!({"metadata": {"name": "dbg"},
                    "spec": {"ephemeralContainers": [{"name": "debug2", "image": "busybox"}]}}),
        )
        .await;
    assert_eq!(removed.code, 422, "{}", removed.body);
    assert_eq!(
        removed.body["message"],
        "Pod \"dbg\" is invalid: spec.ephemeralContainers: Forbidden: existing ephemeral containers \"debug1\" may not be removed\n"
    );
    let bad = c
        .patch(
            EC,
            "application/strategic-merge-patch+json",
            &json!({"spec": {"ephemeralContainers": [
                {"name": "app", "image": "busybox", "ports": [{"containerPort": 80}]}]}}),
        )
        .await;
    assert_eq!(bad.code, 422, "{}", bad.body);
    let causes: Vec<(&str, &str)> = bad.body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["field"].as_str().unwrap(), c["message"].as_str().unwrap()))
        .collect();
    assert_eq!(
        causes,
        [
            (
                "spec.ephemeralContainers[2].name",
                "Duplicate value: \"app\""
            ),
            (
                "spec.ephemeralContainers[2].ports",
                "Forbidden: cannot be set for an Ephemeral Container"
            ),
        ]
    );
    // Only GET, PUT and PATCH; the pod's own endpoint is unchanged.
    assert_eq!(c.delete(EC, None).await.code, 405);

    // Discovery lists it, as kube-apiserver does.
    let core = c.get("/api/v1").await;
    let listed = core.body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods/ephemeralcontainers")
        .cloned();
    assert_eq!(
        listed,
        Some(
            json!({"name": "pods/ephemeralcontainers", "singularName": "", "namespaced": true,
                    "kind": "Pod", "verbs": ["get", "patch", "update"]})
        )
    );

    // The simulated node reports both containers running (never ready).
    crate::support::cluster::wait_until(&s, "ephemeral container statuses", |st| {
        st.get("core/pods", "default", "dbg").is_some_and(|p| {
            p["status"]["ephemeralContainerStatuses"]
                .as_array()
                .is_some_and(|a| {
                    a.len() == 2 && a.iter().all(|s| s["state"]["running"].is_object())
                })
        })
    })
    .await;
    let pod = c.get(&format!("{PODS}/dbg")).await.body;
    assert_eq!(
        pod["status"]["ephemeralContainerStatuses"][0]["ready"],
        false
    );
    assert_eq!(pod["status"]["phase"], "Running");
    s.shutdown().await;
}
