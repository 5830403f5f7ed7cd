//! One object that does not decode never stalls a cache.
//!
//! The At CRD is loosened as an older operator's would be (its spec schema preserves unknown
//! fields and requires nothing), and one At is stored in a shape this release's type cannot
//! read (`spec.run.command` as a list of words). Among 300 good Ats created before the
//! manager starts (the bad one comes in the list), or 200 created while it runs (the bad one
//! comes on the watch, between them), the good ones all reach DONE; the bad one is left alone, with a Warning event naming why.

use crate::support;

use std::time::Duration;

use embedded_cluster::Cluster;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use sample_client_go::client::{Api, Client, PostParams};
use sample_controller_runtime::controller::Clock;
use sample_operators::apis::AtPhase;
use support::at::*;

const BAD: &str = "older-operators-at";

/// An embedded API server whose simulated node runs every pod to success at once, with the At
/// CRD installed and then loosened.
async fn loosened_server() -> (embedded_cluster::ClusterHandle, Client) {
    sample_client_go::install_crypto_provider();
    init_tracing();
    let server = Cluster::builder()
        .simulate(true)
        .pod_run_time(Duration::ZERO)
        .start()
        .await
        .expect("server starts");
    let client = client_for(&server);
    sample_operators::apis::crds::install::<sample_operators::apis::At>(&client)
        .await
        .expect("CRD installs");
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    let mut crd = crds
        .get("ats.cnat.programming-kubernetes.info")
        .await
        .unwrap();
    for version in &mut crd.spec.versions {
        let schema = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .expect("a schema");
        schema.x_kubernetes_validations = None;
        let props = schema.properties.as_mut().expect("properties");
        props.insert(
            "spec".into(),
            JSONSchemaProps {
                type_: Some("object".into()),
                x_kubernetes_preserve_unknown_fields: Some(true),
                ..Default::default()
            },
        );
    }
    crds.update(&PostParams::default(), &crd)
        .await
        .expect("the loosened CRD is stored");
    (server, client)
}

/// Stores the At this release cannot read: its command is a list of words.
async fn create_bad_at(client: &Client) {
    let body = serde_json::json!({
        "apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
        "metadata": {"name": BAD, "namespace": NS},
        "spec": {"schedule": "2019-04-12T10:12:00Z", "run": {"command": ["echo", "YAY"]}}
    });
    let req = http::Request::post(format!(
        "/apis/cnat.programming-kubernetes.info/v1/namespaces/{NS}/ats"
    ))
    .header("content-type", "application/json")
    .body(bytes::Bytes::from(body.to_string()))
    .unwrap();
    let (code, text) = client.request_raw(req).await.expect("POST the bad At");
    assert_eq!(code.as_u16(), 201, "{}", String::from_utf8_lossy(&text));
}

async fn count_done(client: &Client) -> usize {
    // Read as JSON: the bad object does not decode as the typed At (which is the point).
    let req = http::Request::get(format!(
        "/apis/cnat.programming-kubernetes.info/v1/namespaces/{NS}/ats"
    ))
    .body(bytes::Bytes::new())
    .unwrap();
    let (_, text) = client.request_raw(req).await.expect("LIST ats");
    let list: serde_json::Value = serde_json::from_slice(&text).expect("JSON");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["status"]["phase"] == AtPhase::Done.as_str())
        .count()
}

async fn run(bad_first: bool, n: usize) {
    let (server, client) = loosened_server().await;
    let half = if bad_first { n } else { n / 2 };
    if bad_first {
        create_bad_at(&client).await;
    }
    for i in 0..half {
        create_at(
            &client,
            &at(&format!("good-{i}"), "2019-04-12T10:12:00Z", "echo YAY"),
        )
        .await;
    }
    let mut config = manager_config();
    config.workers = 8;
    let manager = start_manager(
        &manager_client_with_qps(&server, 0.0, 0),
        config,
        Clock::new(),
    )
    .await;
    if !bad_first {
        create_bad_at(&client).await;
        for i in half..n {
            create_at(
                &client,
                &at(&format!("good-{i}"), "2019-04-12T10:12:00Z", "echo YAY"),
            )
            .await;
        }
    }
    wait_until_every(
        "every good At to be DONE",
        Duration::from_millis(200),
        900,
        || async { count_done(&client).await == n },
    )
    .await;

    // The bad one is left alone (no pod, no status), and says why.
    assert!(!pod_exists(&client, &format!("{BAD}-pod")).await);
    let event = wait_for_event(&client, BAD, "UndecodableObject").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let message = event.message.unwrap_or_default();
    assert!(
        message.contains("does not decode") && message.contains("invalid type: sequence"),
        "{message}"
    );
    assert_eq!(list_pods(&client).await.len(), n, "one pod per good At");
    manager.stop().await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn one_at_that_does_not_decode_in_the_list_leaves_three_hundred_good_ones_to_reach_done() {
    run(true, 300).await;
}

#[tokio::test]
async fn one_at_that_does_not_decode_on_the_watch_leaves_the_good_ones_to_reach_done() {
    run(false, 200).await;
}
