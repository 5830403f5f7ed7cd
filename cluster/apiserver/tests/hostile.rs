//! Hostile input against the embedded API server, over real HTTP: each request that once took
//! the process to gigabytes or held a CPU for a minute gets kube-apiserver's answer, and the
//! server keeps serving. No timing is asserted here (`hack/bench-hostile.sh` prints the
//! figures); the bounds are asserted by the answers themselves (an error that comes before
//! the work, a limit's message).

use bytes::Bytes;
use embedded_apiserver::{ApiServer, ApiServerHandle};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

const CMS: &str = "/api/v1/namespaces/default/configmaps";

struct Plain {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Plain {
    fn new(s: &ApiServerHandle, http2: bool) -> Self {
        let mut b = Client::builder(TokioExecutor::new());
        b.http2_only(http2);
        Plain {
            base: s.url().to_owned(),
            client: b.build_http(),
        }
    }

    async fn send(&self, method: &str, path: &str, ctype: &str, body: Vec<u8>) -> (u16, Value) {
        let req = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("content-type", ctype)
            .body(Full::new(Bytes::from(body)))
            .expect("request");
        let resp = self.client.request(req).await.expect("response");
        let code = resp.status().as_u16();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (code, body)
    }

    async fn json(&self, method: &str, path: &str, ctype: &str, body: &Value) -> (u16, Value) {
        self.send(method, path, ctype, body.to_string().into_bytes())
            .await
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.send("GET", path, "application/json", vec![]).await
    }
}

async fn start() -> ApiServerHandle {
    ApiServer::builder()
        .plain_http(true)
        .start()
        .await
        .expect("server starts")
}

fn configmap(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

/// Creates ConfigMaps `{prefix}-0` .. `{prefix}-{n-1}`, each with `data(i)`.
async fn create_configmaps(c: &Plain, n: usize, prefix: &str, data: impl Fn(usize) -> Value) {
    for i in 0..n {
        let (code, body) = c
            .json(
                "POST",
                CMS,
                "application/json",
                &configmap(&format!("{prefix}-{i}"), data(i)),
            )
            .await;
        assert_eq!(code, 201, "{body}");
    }
}

/// Opens a watch of ConfigMaps with the query `query` (after `watch=true&`).
async fn watch_configmaps(c: &Plain, query: &str) -> hyper::body::Incoming {
    let req = hyper::Request::builder()
        .uri(format!("{}{CMS}?watch=true&{query}", c.base))
        .body(Full::new(Bytes::new()))
        .expect("request");
    c.client.request(req).await.expect("watch").into_body()
}

/// The events completed by the watch's next frame (`tail` keeps a line cut across frames);
/// `None` when the stream has ended.
async fn next_events(body: &mut hyper::body::Incoming, tail: &mut Vec<u8>) -> Option<Vec<Value>> {
    let frame = body.frame().await?.expect("frame");
    if let Ok(data) = frame.into_data() {
        tail.extend_from_slice(&data);
    }
    let mut events = Vec::new();
    while let Some(nl) = tail.iter().position(|&b| b == b'\n') {
        let line: Vec<u8> = tail.drain(..=nl).collect();
        events.push(serde_json::from_slice(&line).expect("event"));
    }
    Some(events)
}

/// Row 1: twenty `copy` operations that each double the object would make it a gigabyte; the
/// copy budget (3 MiB) stops the patch with kube-apiserver's 422, with and without dryRun, and
/// the object is unchanged.
#[tokio::test]
async fn json_patch_copies_are_capped_at_three_mebibytes() {
    let s = start().await;
    let c = Plain::new(&s, false);
    let (code, _) = c
        .json(
            "POST",
            CMS,
            "application/json",
            &configmap("grow", json!({"a": "x".repeat(1000)})),
        )
        .await;
    assert_eq!(code, 201);
    let ops: Vec<Value> = (0..20)
        .map(|i| json!({"op": "copy", "from": "/data", "path": format!("/data/k{i}")}))
        .collect();
    for query in ["", "?dryRun=All"] {
        let (code, body) = c
            .json(
                "PATCH",
                &format!("{CMS}/grow{query}"),
                "application/json-patch+json",
                &Value::Array(ops.clone()),
            )
            .await;
        assert_eq!(code, 422, "{body}");
        assert_eq!(body["reason"], "Invalid");
        assert_eq!(
            body["message"],
            "the server rejected our request due to an error in our request"
        );
        let cause = body["details"]["causes"][0]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            cause.starts_with(
                "Unable to complete the copy, the accumulated size increase of copy is "
            ) && cause.ends_with(", exceeding the limit 3145728"),
            "{cause}"
        );
    }
    let (_, now) = c.get(&format!("{CMS}/grow")).await;
    assert_eq!(now["data"], json!({"a": "x".repeat(1000)}));
    // Copies within the budget still work.
    let (code, body) = c
        .json(
            "PATCH",
            &format!("{CMS}/grow"),
            "application/json-patch+json",
            &json!([{"op": "copy", "from": "/data/a", "path": "/data/b"}]),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["data"]["b"], "x".repeat(1000));
    s.shutdown().await;
}

/// Row 1: more than 10,000 operations is refused before any runs, with a 413.
#[tokio::test]
async fn json_patches_of_more_than_ten_thousand_operations_get_413() {
    let s = start().await;
    let c = Plain::new(&s, false);
    c.json(
        "POST",
        CMS,
        "application/json",
        &configmap("ops", json!({})),
    )
    .await;
    let ops: Vec<Value> = (0..10_001)
        .map(|_| json!({"op": "test", "path": "/metadata/name", "value": "ops"}))
        .collect();
    let (code, body) = c
        .json(
            "PATCH",
            &format!("{CMS}/ops"),
            "application/json-patch+json",
            &Value::Array(ops),
        )
        .await;
    assert_eq!(code, 413, "{body}");
    assert_eq!(body["reason"], "RequestEntityTooLarge");
    assert_eq!(
        body["message"],
        "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
    );
    s.shutdown().await;
}

/// Row 5: a body over 3 MiB is a 413 Status, over HTTP/1.1 and over HTTP/2 alike (a full
/// response, not a reset stream).
#[tokio::test]
async fn bodies_over_three_mebibytes_get_a_413_status_over_both_protocols() {
    let s = start().await;
    for http2 in [false, true] {
        let c = Plain::new(&s, http2);
        let data = json!({"a": "x".repeat(3 * 1024 * 1024)});
        let (code, body) = c
            .json("POST", CMS, "application/json", &configmap("huge", data))
            .await;
        assert_eq!(code, 413, "http2={http2}: {body}");
        assert_eq!(body["kind"], "Status");
        assert_eq!(
            body["message"],
            "Request entity too large: limit is 3145728"
        );
        // The connection (or a new one) still serves.
        let (code, _) = c.get(CMS).await;
        assert_eq!(code, 200);
    }
    s.shutdown().await;
}

/// Row 5: ConfigMap and Secret data over 1 MiB is a 422 with `ValidateConfigMap`'s and
/// `ValidateSecret`'s words; an object over etcd's 1.5 MiB request limit gets etcd's error
/// (a dry run never reaches etcd and is answered).
#[tokio::test]
async fn data_over_one_mebibyte_and_objects_over_etcds_limit_are_refused() {
    let s = start().await;
    let c = Plain::new(&s, false);
    let mib = 1024 * 1024;
    let (code, body) = c
        .json(
            "POST",
            CMS,
            "application/json",
            &configmap("big", json!({"a": "x".repeat(mib), "b": "y"})),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "ConfigMap \"big\" is invalid: : Too long: may not be more than 1048576 bytes"
    );
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "big"},
                        "stringData": {"a": "x".repeat(mib + 1)}});
    let (code, body) = c
        .json(
            "POST",
            "/api/v1/namespaces/default/secrets",
            "application/json",
            &secret,
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "Secret \"big\" is invalid: data: Too long: may not be more than 1048576 bytes"
    );
    let leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": "big"},
                       "spec": {"holderIdentity": "x".repeat(mib * 3 / 2 + 1)}});
    let (code, body) = c
        .json(
            "POST",
            &format!("{leases}?dryRun=All"),
            "application/json",
            &lease,
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = c.json("POST", leases, "application/json", &lease).await;
    assert_eq!(code, 500, "{body}");
    assert_eq!(body["message"], "etcdserver: request is too large");
    assert!(body.get("reason").is_none(), "{body}");
    let (code, _) = c.get(&format!("{leases}/big")).await;
    assert_eq!(code, 404);
    s.shutdown().await;
}

/// Row 3: a million empty ownerReferences (2.9 MiB) is a 422 naming the four required fields
/// once each, not four million causes.
#[tokio::test]
async fn a_million_empty_owner_references_get_four_causes() {
    let s = start().await;
    let c = Plain::new(&s, false);
    let mut body = String::from(
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"owned","ownerReferences":["#,
    );
    body.push_str(&vec!["{}"; 1_000_000].join(","));
    body.push_str("]}}");
    assert!(body.len() < 3 * 1024 * 1024);
    let (code, answer) = c
        .send("POST", CMS, "application/json", body.into_bytes())
        .await;
    assert_eq!(code, 422, "{answer}");
    let fields: Vec<&str> = answer["details"]["causes"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["field"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        fields,
        [
            "metadata.ownerReferences.apiVersion",
            "metadata.ownerReferences.kind",
            "metadata.ownerReferences.name",
            "metadata.ownerReferences.uid"
        ]
    );
    assert_eq!(
        answer["message"],
        "ConfigMap \"owned\" is invalid: [metadata.ownerReferences.apiVersion: Invalid value: \"\": version must not be empty, metadata.ownerReferences.kind: Invalid value: \"\": kind must not be empty, metadata.ownerReferences.name: Invalid value: \"\": name must not be empty, metadata.ownerReferences.uid: Invalid value: \"\": uid must not be empty]"
    );
    s.shutdown().await;
}

/// Row 2: YAML a hundred thousand levels deep (flow or block) is refused before it is parsed,
/// and an alias bomb stops once it has built what its text could hold.
#[tokio::test]
async fn deep_yaml_and_alias_bombs_are_refused() {
    let s = start().await;
    let c = Plain::new(&s, false);
    let reviews = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let flow = format!("spec: {}{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let block = format!("spec:\n  x:\n{}x\n", "  - ".repeat(100_000));
    for doc in [flow, block] {
        for path in [CMS, reviews] {
            let (code, body) = c
                .send("POST", path, "application/yaml", doc.clone().into_bytes())
                .await;
            assert_eq!(code, 400, "{body}");
            let m = body["message"].as_str().unwrap_or_default();
            assert!(m.contains("exceeded max depth of 1000"), "{m}");
        }
    }
    let mut bomb = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\nx0: &x0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for i in 1..10 {
        let refs = vec![format!("*x{}", i - 1); 10].join(", ");
        bomb.push_str(&format!("x{i}: &x{i} [{refs}]\n"));
    }
    let (code, body) = c
        .send("POST", CMS, "application/yaml", bomb.into_bytes())
        .await;
    assert_eq!(code, 400, "{body}");
    // A plain YAML body still works.
    let ok = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\ndata:\n  a: \"1\"\n";
    let (code, body) = c
        .send("POST", CMS, "application/yaml", ok.as_bytes().to_vec())
        .await;
    assert_eq!(code, 201, "{body}");
    s.shutdown().await;
}

/// Row 6: built-in fields of the wrong JSON type fail typed decoding as on the real server: a
/// create is a 400 with the decoder's words, a patch whose result does not decode is a 422.
#[tokio::test]
async fn wrongly_typed_built_in_fields_are_refused() {
    let s = start().await;
    let c = Plain::new(&s, false);
    let mut bad = configmap("typed", json!({"a": "1"}));
    bad["metadata"]["annotations"] = json!({"a": {"nested": true}});
    let (code, body) = c.json("POST", CMS, "application/json", &bad).await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(
        body["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal object into Go struct field ObjectMeta.metadata.annotations of type string"
    );
    let (code, body) = c
        .json(
            "POST",
            CMS,
            "application/json",
            &configmap("typed", json!({"k": {"x": 1}})),
        )
        .await;
    assert_eq!(code, 400, "{body}");
    assert!(body["message"].as_str().unwrap_or_default().ends_with(
        "json: cannot unmarshal object into Go struct field ConfigMap.data of type string"
    ));
    let (code, _) = c
        .json(
            "POST",
            CMS,
            "application/json",
            &configmap("typed", json!({"a": "1"})),
        )
        .await;
    assert_eq!(code, 201);
    for (ty, patch) in [
        (
            "application/json-patch+json",
            json!([{"op": "add", "path": "/metadata/labels", "value": {"a": 5}}]),
        ),
        ("application/merge-patch+json", json!({"data": {"b": [1]}})),
    ] {
        let (code, body) = c.json("PATCH", &format!("{CMS}/typed"), ty, &patch).await;
        assert_eq!(code, 422, "{ty}: {body}");
        let cause = &body["details"]["causes"][0];
        assert_eq!(cause["field"], "patch");
        assert!(
            cause["message"]
                .as_str()
                .unwrap_or_default()
                .contains("json: cannot unmarshal"),
            "{body}"
        );
    }
    let (_, now) = c.get(&format!("{CMS}/typed")).await;
    assert_eq!(now["data"], json!({"a": "1"}));
    assert!(now["metadata"].get("labels").is_none());
    s.shutdown().await;
}

/// Row 11: with a cert or data directory the admin token is kept there, so a kubeconfig
/// written before a restart still authenticates after it.
#[tokio::test]
async fn the_admin_token_survives_a_restart() {
    for kind in ["cert", "data"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let builder = || {
            let b = ApiServer::builder();
            if kind == "cert" {
                b.cert_dir(dir.path())
            } else {
                b.data_dir(dir.path())
            }
        };
        let first = builder().start().await.expect("first start");
        let token = first.token().to_owned();
        let kubeconfig = first.kubeconfig_yaml();
        first.shutdown().await;
        drop(first);
        let second = builder().start().await.expect("second start");
        assert_eq!(second.token(), token, "{kind} dir");
        assert!(kubeconfig.contains(&token));
        second.shutdown().await;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(dir.path().join(embedded_apiserver::ADMIN_TOKEN_FILE))
                .expect("token file");
            assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        }
    }
    // A file that holds no token is refused, not replaced.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join(embedded_apiserver::ADMIN_TOKEN_FILE), "\n").expect("write");
    let err = ApiServer::builder()
        .data_dir(dir.path())
        .start()
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("does not hold a token"), "{err}");
}

fn crd_with_pattern(pattern: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": {
                    "word": {"type": "string", "pattern": pattern}}}}}}}]
        }
    })
}

/// Row 4: a pattern RE2 would not compile (too large) is refused when the CRD is written, and
/// accepted patterns have RE2's meaning (`\w` is ASCII) without costing a compile per value.
#[tokio::test]
async fn crd_patterns_are_checked_at_create_and_mean_what_re2_means() {
    let s = start().await;
    let c = Plain::new(&s, false);
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let (code, body) = c
        .json(
            "POST",
            crds,
            "application/json",
            &crd_with_pattern("((a{100}){100}){100}"),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    let m = body["message"].as_str().unwrap_or_default();
    assert!(
        m.contains("spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[word].pattern: Invalid value: \"((a{100}){100}){100}\": must be a valid regular expression, but isn't: error parsing regexp: expression too large"),
        "{m}"
    );
    let (code, body) = c
        .json(
            "POST",
            crds,
            "application/json",
            &crd_with_pattern(r"^[\w.-]{1,253}$"),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    let widget = |name: &str, word: &str| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": name}, "spec": {"word": word}})
    };
    // The CRD's resource is served the moment the CRD is created.
    let (code, body) = c
        .json(
            "POST",
            widgets,
            "application/json",
            &widget("ascii", "a.b-c_d"),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = c
        .json(
            "POST",
            widgets,
            "application/json",
            &widget("unicode", "héllo"),
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap_or_default()
            .contains(r"should match '^[\w.-]{1,253}$'"),
        "{body}"
    );
    s.shutdown().await;
}

/// Row 7: a full server sheds its oldest silent connection for a new client instead of
/// refusing the client.
#[tokio::test]
async fn silent_connections_do_not_lock_new_clients_out() {
    use tokio::io::AsyncReadExt;
    let s = ApiServer::builder()
        .plain_http(true)
        .serving_limits(embedded_apiserver::ServingLimits {
            max_connections: 3,
            ..Default::default()
        })
        .start()
        .await
        .expect("server starts");
    let addr = s.url().trim_start_matches("http://").to_owned();
    let mut silent = vec![];
    for _ in 0..3 {
        silent.push(
            tokio::net::TcpStream::connect(&addr)
                .await
                .expect("connect"),
        );
    }
    let c = Plain::new(&s, false);
    let (code, body) = c.get(CMS).await;
    assert_eq!(code, 200, "{body}");
    // The oldest silent connection was closed to make room (a bound, not a timing: it is
    // closed before the new client is served).
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(std::time::Duration::from_secs(30), silent[0].read(&mut buf))
        .await
        .expect("closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    s.shutdown().await;
}

/// A CRD schema nested `depth` levels (`properties.a` all the way down) and an object that
/// fills it.
fn deep_crd_and_object(depth: usize) -> (Value, Value) {
    let mut schema = json!({"type": "string"});
    let mut value = json!("leaf");
    for _ in 0..depth {
        schema = json!({"type": "object", "properties": {"a": schema}});
        value = json!({"a": value});
    }
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "deeps.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "deeps", "singular": "deep", "kind": "Deep", "listKind": "DeepList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": schema}}}}]
        }
    });
    let obj = json!({"apiVersion": "example.com/v1", "kind": "Deep",
                     "metadata": {"name": "d"}, "spec": value});
    (crd, obj)
}

/// A CRD whose schema is nested 70 levels is accepted and its objects are served, as
/// kube-apiserver does; so is a 500-deep object, near the bound; a 100,000-deep JSON body is
/// still refused, by the depth pre-scan.
#[tokio::test]
async fn a_crd_schema_seventy_levels_deep_is_served() {
    let s = start().await;
    let c = Plain::new(&s, false);
    let (crd, obj) = deep_crd_and_object(70);
    let (code, body) = c
        .json(
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            "application/json",
            &crd,
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let deeps = "/apis/example.com/v1/namespaces/default/deeps";
    let mut created = (0, Value::Null);
    for _ in 0..100 {
        created = c.json("POST", deeps, "application/json", &obj).await;
        if created.0 != 404 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(created.0, 201, "{}", created.1);
    let (code, got) = c.get(&format!("{deeps}/d")).await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["spec"], obj["spec"]);
    let (code, list) = c.get(deeps).await;
    assert_eq!(code, 200, "{list}");
    // Near the bound: an object of a schemaless CRD nested 500 levels is stored and served.
    let mut free = crd.clone();
    free["metadata"]["name"] = json!("frees.example.com");
    free["spec"]["names"] =
        json!({"plural": "frees", "singular": "free", "kind": "Free", "listKind": "FreeList"});
    free["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"] =
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let (code, body) = c
        .json(
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            "application/json",
            &free,
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let mut value = json!("leaf");
    for _ in 0..500 {
        value = json!({"a": value});
    }
    let frees = "/apis/example.com/v1/namespaces/default/frees";
    let obj = json!({"apiVersion": "example.com/v1", "kind": "Free", "metadata": {"name": "f"}, "spec": value});
    let mut created = (0, Value::Null);
    for _ in 0..100 {
        created = c.json("POST", frees, "application/json", &obj).await;
        if created.0 != 404 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(created.0, 201, "{}", created.1);
    let (code, got) = c.get(&format!("{frees}/f")).await;
    assert_eq!(code, 200);
    // Deeper than this client's own JSON parser goes (serde_json's 128): read as text.
    let text = got.as_str().expect("the object's JSON text");
    assert_eq!(text.matches(r#"{"a":"#).count(), 500, "{text}");
    assert!(text.contains(r#""leaf""#));
    // Hostile depth is still refused, and fast enough not to matter.
    let deep = format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"x\"}},\"data\":{}{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let (code, body) = c
        .send("POST", CMS, "application/json", deep.into_bytes())
        .await;
    assert_eq!(code, 400, "{body}");
    s.shutdown().await;
}

/// Row 10: a data directory that cannot take commits (a full disk, simulated) turns the server
/// read-only as etcd's NOSPACE alarm does: writes get etcd's error, reads go on, and writes
/// work again once space returns; nothing answered with success is lost across a restart.
#[tokio::test]
async fn a_full_disk_refuses_writes_keeps_reads_and_recovers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let start_durable = || {
        ApiServer::builder()
            .plain_http(true)
            .data_dir(dir.path())
            .start()
    };
    let s = start_durable().await.expect("server starts");
    let c = Plain::new(&s, false);
    let post = |name: &'static str| configmap(name, json!({"k": name}));
    let (code, _) = c
        .json("POST", CMS, "application/json", &post("before"))
        .await;
    assert_eq!(code, 201);
    s.faults().disk_full(true);
    for name in ["during", "refused"] {
        let (code, body) = c.json("POST", CMS, "application/json", &post(name)).await;
        assert_eq!(code, 500, "{body}");
        assert_eq!(body["message"], "etcdserver: mvcc: database space exceeded");
    }
    let (code, _) = c.get(&format!("{CMS}/before")).await;
    assert_eq!(code, 200, "reads go on");
    let (code, list) = c.get(CMS).await;
    assert_eq!(code, 200);
    assert!(list["items"].as_array().is_some_and(|i| !i.is_empty()));
    // A write refused while read-only never ran.
    let (code, _) = c.get(&format!("{CMS}/refused")).await;
    assert_eq!(code, 404);
    s.faults().disk_full(false);
    let (code, body) = c
        .json("POST", CMS, "application/json", &post("after"))
        .await;
    assert_eq!(code, 201, "{body}");
    s.shutdown().await;
    drop(s);
    let s = start_durable().await.expect("restart");
    let c = Plain::new(&s, false);
    for (name, want) in [
        ("before", 200),
        ("during", 200),
        ("refused", 404),
        ("after", 200),
    ] {
        let (code, _) = c.get(&format!("{CMS}/{name}")).await;
        assert_eq!(code, want, "{name}");
    }
    s.shutdown().await;
}

/// Row 3 through a patch: a JSON patch that adds 20,000 empty ownerReferences is judged by the
/// bounded metadata check before the typed round trip would expand each `{}`.
#[tokio::test]
async fn owner_references_added_by_a_patch_are_refused_as_cheaply() {
    let s = start().await;
    let c = Plain::new(&s, false);
    let (code, _) = c
        .json(
            "POST",
            CMS,
            "application/json",
            &configmap("grown", json!({})),
        )
        .await;
    assert_eq!(code, 201);
    let ops = json!([{"op": "add", "path": "/metadata/ownerReferences",
                      "value": Value::Array(vec![json!({}); 20_000])}]);
    let (code, body) = c
        .json(
            "PATCH",
            &format!("{CMS}/grown"),
            "application/json-patch+json",
            &ops,
        )
        .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["details"]["causes"].as_array().map(Vec::len),
        Some(4),
        "{body}"
    );
    s.shutdown().await;
}

// The two tests of resting objects look inside the store (whether an object holds a tree or
// its bytes), which only the `unstable-internals` feature shows; the workspace's test command
// turns it on (through the root package), `cargo test -p embedded-apiserver` alone does not.

#[cfg(feature = "unstable-internals")]
/// A server whose objects rest after 300 ms unread (passes every tenth of a second).
async fn resting_server() -> ApiServerHandle {
    ApiServer::builder()
        .plain_http(true)
        .rest_unread_objects(true)
        .rest_unread_after(std::time::Duration::from_millis(300))
        .start()
        .await
        .expect("server starts")
}

#[cfg(feature = "unstable-internals")]
/// How many of the ConfigMaps `cm-00` .. `cm-{n-1}` hold a decoded tree.
fn still_decoded(s: &ApiServerHandle, n: usize) -> usize {
    s.store().read(|st| {
        (0..n)
            .filter(|i| {
                st.get_shared("core/configmaps", "default", &format!("cm-{i:02}"))
                    .is_some_and(|o| o.is_decoded())
            })
            .count()
    })
}

#[cfg(feature = "unstable-internals")]
/// Waits until none of `cm-00` .. `cm-{n-1}` holds a tree (up to 20 s on a busy machine), then
/// half a second more, for the history entries the last pass found.
async fn wait_until_rested(s: &ApiServerHandle, n: usize) {
    for _ in 0..200 {
        if still_decoded(s, n) == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(still_decoded(s, n), 0, "every unread object rests");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
}

/// Row 9: with `rest_unread_objects`, objects nobody reads come to rest as their JSON bytes
/// (no tree) in the live map, and every read (a GET, a LIST, a write on top) answers exactly
/// what was written.
#[cfg(feature = "unstable-internals")]
#[tokio::test]
async fn unread_objects_rest_as_bytes_and_read_back_the_same() {
    let s = resting_server().await;
    let c = Plain::new(&s, false);
    let mut written = vec![];
    for i in 0..20 {
        let (code, body) = c
            .json(
                "POST",
                CMS,
                "application/json",
                &configmap(&format!("cm-{i:02}"), json!({"i": i.to_string(), "n": "x"})),
            )
            .await;
        assert_eq!(code, 201, "{body}");
        written.push(body);
    }
    wait_until_rested(&s, 20).await;
    let (code, list) = c.get(CMS).await;
    assert_eq!(code, 200);
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 20);
    // A typed list's items carry no kind and apiVersion, as kube-apiserver writes them.
    for (got, want) in items.iter().zip(&written) {
        assert_eq!(got, &untyped(want));
    }
    assert_eq!(
        still_decoded(&s, 20),
        0,
        "a LIST decodes a rested object for its item alone"
    );
    let (code, got) = c.get(&format!("{CMS}/cm-07")).await;
    assert_eq!((code, &got), (200, &written[7]));
    let mut changed = written[7].clone();
    changed["data"]["n"] = json!("y");
    let (code, body) = c
        .json("PUT", &format!("{CMS}/cm-07"), "application/json", &changed)
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["data"], json!({"i": "7", "n": "y"}));
    assert_ne!(
        body["metadata"]["resourceVersion"],
        written[7]["metadata"]["resourceVersion"]
    );
}

/// Row 9, the history side: a watch resuming from an old revision and a paged LIST whose
/// snapshot predates later writes read changes whose objects (before and after) have rested,
/// and get exactly what the server answered to each write, in order.
#[cfg(feature = "unstable-internals")]
#[tokio::test]
async fn a_watch_and_a_paged_list_read_rested_history_as_written() {
    const N: usize = 30;
    let s = resting_server().await;
    let c = Plain::new(&s, false);
    let (_, list) = c.get(CMS).await;
    let from = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("list revision")
        .to_owned();
    let mut events = vec![];
    let mut live = vec![];
    for i in 0..N {
        let (code, body) = c
            .json(
                "POST",
                CMS,
                "application/json",
                &configmap(&format!("cm-{i:02}"), json!({"v": "1"})),
            )
            .await;
        assert_eq!(code, 201, "{body}");
        events.push(("ADDED", body));
    }
    for i in 0..N {
        let mut changed = events[i].1.clone();
        changed["data"]["v"] = json!("2");
        let (code, body) = c
            .json(
                "PUT",
                &format!("{CMS}/cm-{i:02}"),
                "application/json",
                &changed,
            )
            .await;
        assert_eq!(code, 200, "{body}");
        events.push(("MODIFIED", body.clone()));
        live.push(body);
    }
    // A paged LIST: its first page fixes the snapshot; then one object changes again.
    let (code, page) = c.get(&format!("{CMS}?limit=7")).await;
    assert_eq!(code, 200, "{page}");
    let mut listed: Vec<Value> = page["items"].as_array().expect("items").clone();
    let mut token = page["metadata"]["continue"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let mut changed = live[25].clone();
    changed["data"]["v"] = json!("3");
    let (code, body) = c
        .json("PUT", &format!("{CMS}/cm-25"), "application/json", &changed)
        .await;
    assert_eq!(code, 200, "{body}");
    events.push(("MODIFIED", body));
    // Every object and every change rests, then the rest of the pages and the watch read them.
    wait_until_rested(&s, N).await;
    while !token.is_empty() {
        let (code, page) = c.get(&format!("{CMS}?limit=7&continue={token}")).await;
        assert_eq!(code, 200, "{page}");
        listed.extend(page["items"].as_array().expect("items").iter().cloned());
        token = page["metadata"]["continue"]
            .as_str()
            .unwrap_or("")
            .to_owned();
    }
    assert_eq!(listed.len(), N);
    for (got, want) in listed.iter().zip(&live) {
        assert_eq!(
            got,
            &untyped(want),
            "the pages show the first page's snapshot"
        );
    }
    let mut body = watch_configmaps(&c, &format!("resourceVersion={from}")).await;
    let (mut got, mut tail) = (Vec::new(), Vec::new());
    while got.len() < events.len() {
        got.extend(
            next_events(&mut body, &mut tail)
                .await
                .expect("the watch goes on"),
        );
    }
    assert_eq!(got.len(), events.len());
    for (ev, (ty, object)) in got.iter().zip(&events) {
        assert_eq!(ev["type"], *ty, "{ev}");
        assert_eq!(&ev["object"], object);
    }
    s.shutdown().await;
}

/// Row 12: a watcher whose client stops reading is closed as kube-apiserver's cacher closes it
/// ("Forcing watcher close due to unresponsiveness"): once its client takes the next frame
/// long after the last while events pile up, the stream ends after what its buffers held, and
/// `apiserver_terminated_watchers_total` counts it. A watcher that keeps reading gets every
/// event and is not closed.
#[tokio::test]
async fn a_watcher_that_stops_reading_is_closed_and_a_reading_one_is_not() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const N: usize = 300;
    let s = ApiServer::builder()
        .plain_http(true)
        .watch_unresponsive(std::time::Duration::from_millis(200), 20)
        .start()
        .await
        .expect("server starts");
    let addr: std::net::SocketAddr = s.url().trim_start_matches("http://").parse().unwrap();
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut silent = sock.connect(addr).await.expect("connect");
    silent
        .write_all(format!("GET {CMS}?watch=true HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let c = Plain::new(&s, false);
    let mut body = watch_configmaps(&c, "").await;
    let reader = tokio::spawn(async move {
        let (mut seen, mut tail) = (0, Vec::new());
        while seen < N {
            let Some(events) = next_events(&mut body, &mut tail).await else {
                break;
            };
            for ev in events {
                assert_eq!(ev["type"], "ADDED", "{}", ev["type"]);
                seen += 1;
            }
        }
        seen
    });
    // N objects of 64 KiB: 19 MiB of events, more than the silent client's socket and the
    // server's write buffers hold.
    let big = "x".repeat(64 * 1024);
    create_configmaps(&c, N, "big", |_| json!({"a": big})).await;
    assert_eq!(
        reader.await.unwrap(),
        N,
        "the reading watcher gets every event"
    );
    // The silent client has left its last frame untaken for longer than the 200 ms allowed.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    // When it reads again it gets what its buffers held, then the end of the stream (the
    // chunked body's last chunk).
    let mut received = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    let ended = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        loop {
            let n = silent.read(&mut buf).await.expect("read");
            received.extend_from_slice(&buf[..n]);
            if n == 0 || received.ends_with(b"\r\n0\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the silent watcher's stream ends");
    let events = received
        .windows(br#""type":"ADDED""#.len())
        .filter(|w| *w == br#""type":"ADDED""#)
        .count();
    assert!(
        events > 0 && events < N,
        "{events} of {N} events reached the silent watcher"
    );
    let (code, metrics) = c.get("/metrics").await;
    assert_eq!(code, 200);
    let metrics = metrics.as_str().unwrap_or_default().to_owned();
    assert!(
        metrics.contains(
            "apiserver_terminated_watchers_total{group=\"\",resource=\"configmaps\"} 1\n"
        ),
        "{metrics}"
    );
    // The server goes on serving.
    let (code, _) = c.get(&format!("{CMS}/big-0")).await;
    assert_eq!(code, 200);
    s.shutdown().await;
}

/// A watch that starts far behind (more changes than it takes from the history at a time)
/// catches up in steps and gets every change once, in order.
#[tokio::test]
async fn a_watch_far_behind_gets_every_change_once_in_order() {
    const N: usize = 700;
    let s = start().await;
    let c = Plain::new(&s, false);
    let (code, list) = c.get(CMS).await;
    assert_eq!(code, 200);
    let from = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("list revision")
        .to_owned();
    create_configmaps(&c, N, "cm", |i| json!({"i": i.to_string()})).await;
    let mut body = watch_configmaps(&c, &format!("resourceVersion={from}")).await;
    let (mut names, mut tail) = (Vec::new(), Vec::new());
    let mut last_rv = 0u64;
    while names.len() < N {
        let events = next_events(&mut body, &mut tail)
            .await
            .expect("the watch goes on");
        for ev in events {
            assert_eq!(ev["type"], "ADDED", "{ev}");
            let rv: u64 = ev["object"]["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|v| v.parse().ok())
                .expect("revision");
            assert!(rv > last_rv, "revisions rise: {rv} after {last_rv}");
            last_rv = rv;
            names.push(
                ev["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            );
        }
    }
    let expected: Vec<String> = (0..N).map(|i| format!("cm-{i}")).collect();
    assert_eq!(names, expected);
    s.shutdown().await;
}

#[cfg(feature = "unstable-internals")]
/// An object as an item of a typed list shows it: without `kind` and `apiVersion`.
fn untyped(obj: &serde_json::Value) -> serde_json::Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("kind");
        m.remove("apiVersion");
    }
    o
}
