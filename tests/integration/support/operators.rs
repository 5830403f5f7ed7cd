//! Shared fixtures of the operators' integration tests: an embedded API server with every CRD
//! installed and its simulated node and workload controllers on (so Deployments roll out
//! through ReplicaSets whose pods the node runs, and StatefulSets create, run and delete real
//! pods), plus small typed
//! helpers. The generic pieces (clients, the manager runner, polling, the paused-clock ticker)
//! come from `at_support`.
#![allow(dead_code)]

use std::time::Duration;

use embedded_cluster::{Cluster, ClusterBuilder, ClusterHandle};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use sample_client_go::cache::CacheObject;
use sample_client_go::client::{Api, Client, ListParams, Patch, PatchParams, PostParams};
use sample_controller_runtime::manager::ManagerConfig;
use sample_operators::apis::{At, CustomResourceExt, Foo, MyApp, RedisCluster, TDSet};
use serde_json::Value;

use crate::support::at::{NS, client_for, init_tracing, manager_config, wait_until};

/// A simulating API server (node, Deployment and StatefulSet controllers, GC) with the CRDs of
/// all five operators, and an admin client.
pub async fn operator_server() -> (ClusterHandle, Client) {
    server_with(Cluster::builder()).await
}

/// [`operator_server`] from a customised builder (simulation is switched on here).
pub async fn server_with(builder: ClusterBuilder) -> (ClusterHandle, Client) {
    sample_client_go::install_crypto_provider();
    init_tracing();
    let server = builder.simulate(true).start().await.expect("server starts");
    let client = client_for(&server);
    install_crds(&client).await;
    (server, client)
}

/// Installs the generated CRDs of all five resources.
pub async fn install_crds(client: &Client) {
    install::<At>(client).await;
    install::<TDSet>(client).await;
    install::<RedisCluster>(client).await;
    install::<MyApp>(client).await;
    install::<Foo>(client).await;
}

async fn install<K: CustomResourceExt>(client: &Client) {
    let value = sample_operators::apis::crds::crd_value::<K>().unwrap();
    let crd: CustomResourceDefinition = serde_json::from_value(value).unwrap();
    Api::<CustomResourceDefinition>::cluster(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("CRD installs");
}

/// The manager configuration of the tests with `controllers` selected.
pub fn config_for(controllers: &[&'static str]) -> ManagerConfig {
    ManagerConfig {
        controllers: controllers.to_vec(),
        ..manager_config()
    }
}

/// A typed API in the test namespace.
pub fn api<K: CacheObject>(client: &Client) -> Api<K> {
    Api::namespaced(client.clone(), NS)
}

/// Merge-patches `name`'s spec.
pub async fn patch_spec<K: CacheObject>(client: &Client, name: &str, spec: Value) {
    api::<K>(client)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": spec })),
        )
        .await
        .expect("patch spec");
}

pub async fn deployment(client: &Client, name: &str) -> Option<Deployment> {
    api::<Deployment>(client).get_opt(name).await.unwrap()
}

pub fn replicas_of(d: &Deployment) -> Option<i32> {
    d.spec.as_ref().and_then(|s| s.replicas)
}

pub fn image_of(d: &Deployment) -> Option<String> {
    d.spec.as_ref()?.template.spec.as_ref()?.containers[0]
        .image
        .clone()
}

/// Waits until the Deployment `name` exists with `replicas`.
pub async fn wait_for_replicas(client: &Client, name: &str, replicas: i32) -> Deployment {
    wait_until(&format!("deployment/{name} at {replicas}"), || async {
        deployment(client, name)
            .await
            .is_some_and(|d| replicas_of(&d) == Some(replicas))
    })
    .await;
    deployment(client, name).await.unwrap()
}

/// Names of the pods in the test namespace carrying `label=value`, sorted.
pub async fn pod_names(client: &Client, label: &str, value: &str) -> Vec<String> {
    let params = ListParams {
        label_selector: Some(format!("{label}={value}")),
        ..ListParams::default()
    };
    let mut names: Vec<String> = api::<Pod>(client)
        .list(&params)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    names
}

pub async fn statefulset(client: &Client, name: &str) -> Option<StatefulSet> {
    api::<StatefulSet>(client).get_opt(name).await.unwrap()
}

pub async fn service(client: &Client, name: &str) -> Option<Service> {
    api::<Service>(client).get_opt(name).await.unwrap()
}

/// Lets the system run for `d` of tokio time (timers fire, requests get answered).
pub async fn settle(d: Duration) {
    tokio::time::sleep(d).await;
}

/// The documents of a multi-document YAML file's text, in order.
pub fn yaml_documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("a YAML document"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// The seed's TDSet from `artifacts/examples/tdset-hello-world.yaml` (the file's other
/// document is its namespace, `temp`), moved to the test namespace.
pub fn example_tdset() -> TDSet {
    let text = include_str!("../../../artifacts/examples/tdset-hello-world.yaml");
    let doc = yaml_documents(text)
        .into_iter()
        .find(|d| d["kind"] == "TDSet")
        .expect("the example has a TDSet");
    let mut tdset: TDSet = serde_json::from_value(doc).expect("the example is a TDSet");
    tdset.metadata.namespace = Some(NS.to_string());
    tdset
}

/// The name of [`example_tdset`] (and of its Deployment).
pub const EXAMPLE_TDSET: &str = "tdset-hello-world";
