//! Field sets as clients see them. The store holds each `managedFields` entry's `fieldsV1` as
//! its JSON text (`embedded_apiserver::api::folded`); every way out of the server must show it
//! as the JSON object a real server writes, and every way in must accept that object back.

use crate::support;

use serde_json::{Value, json};
use support::apiserver::*;

/// Every `fieldsV1` of `obj` is a non-empty JSON object; returns the managers in order.
fn sets_are_objects(obj: &Value, what: &str) -> Vec<String> {
    let entries = obj["metadata"]["managedFields"]
        .as_array()
        .unwrap_or_else(|| panic!("{what}: no managedFields in {obj}"));
    assert!(!entries.is_empty(), "{what}: no entries");
    for e in entries {
        let set = e["fieldsV1"]
            .as_object()
            .unwrap_or_else(|| panic!("{what}: fieldsV1 is not an object: {e}"));
        assert!(!set.is_empty(), "{what}: empty set in {e}");
    }
    entries
        .iter()
        .map(|e| e["manager"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A ConfigMap (Go-ordered output) and an At (a custom resource, sorted output), each written
/// by two managers, read back through GET, LIST, a watch's initial and live events, a Table
/// with the object, `PartialObjectMetadata`, and the answer of each write; a JSON patch
/// addresses a set by its fields, and a PUT of what was read is the no-op it is.
#[tokio::test]
async fn every_answer_shows_field_sets_as_json_objects() {
    let s = start().await;
    let c = TestClient::new(&s);
    c.install_at_crd().await;
    for (collection, obj, change) in [
        (CMS, cm("f", json!({"app": "a"})), "/data"),
        (ATS, at("f"), "/spec/command"),
    ] {
        let created = c
            .post(&format!("{collection}?fieldManager=first"), &obj)
            .await;
        assert_eq!(created.code, 201, "{:?}", created.body);
        sets_are_objects(&created.body, "create answer");
        let url = format!("{collection}/f");
        let mut edited = created.body.clone();
        if change == "/data" {
            edited["data"] = json!({"k": "v", "second": "2"});
        } else {
            edited["spec"]["command"] = json!("echo second");
        }
        let updated = c.put(&format!("{url}?fieldManager=second"), &edited).await;
        assert_eq!(updated.code, 200, "{:?}", updated.body);
        assert_eq!(
            sets_are_objects(&updated.body, "update answer"),
            ["first", "second"]
        );

        let got = c.get(&url).await;
        assert_eq!(
            got.body["metadata"]["managedFields"],
            updated.body["metadata"]["managedFields"]
        );
        let second = &got.body["metadata"]["managedFields"][1]["fieldsV1"];
        let field = change.trim_start_matches('/').replace('/', "\":{\"f:");
        assert!(
            second.to_string().contains(&format!("\"f:{field}\"")),
            "{second} names {change}"
        );

        let list = c.get(collection).await;
        sets_are_objects(&list.body["items"][0], "list item");

        let mut w = c.watch(&format!("{collection}?watch=true")).await;
        let initial = w.next_change().await.expect("an initial event");
        sets_are_objects(&initial["object"], "initial watch event");

        let table = c
            .send(
                "GET",
                &format!("{url}?includeObject=Object"),
                &[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
                None,
            )
            .await;
        assert_eq!(table.body["kind"], "Table", "{:?}", table.body);
        sets_are_objects(&table.body["rows"][0]["object"], "table row");
        let partial = c
            .send(
                "GET",
                &url,
                &[(
                    "accept",
                    "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
                )],
                None,
            )
            .await;
        assert_eq!(partial.body["kind"], "PartialObjectMetadata");
        sets_are_objects(&partial.body, "partial object metadata");

        // A JSON patch reads a set as the object it is served as.
        let test_set = json!([
            {"op": "test", "path": "/metadata/managedFields/1/fieldsV1", "value": second},
            {"op": "add", "path": "/metadata/labels", "value": {"patched": "yes"}},
        ]);
        let patched = c
            .patch(&url, "application/json-patch+json", &test_set)
            .await;
        assert_eq!(patched.code, 200, "{:?}", patched.body);
        sets_are_objects(&patched.body, "patch answer");
        let live = w.next_change().await.expect("the patch's event");
        assert_eq!(live["type"], "MODIFIED");
        sets_are_objects(&live["object"], "live watch event");

        // What a client read and sends back unchanged is a no-op: same resourceVersion.
        let again = c.put(&url, &patched.body).await;
        assert_eq!(again.code, 200, "{:?}", again.body);
        assert_eq!(
            again.body["metadata"]["resourceVersion"],
            patched.body["metadata"]["resourceVersion"]
        );
        assert_eq!(
            again.body["metadata"]["managedFields"],
            patched.body["metadata"]["managedFields"]
        );
    }
    s.shutdown().await;
}
