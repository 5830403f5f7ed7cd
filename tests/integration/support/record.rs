//! Shared setup for the record / leader election / metrics tests against the embedded API
//! server: a started server, a client for it with a throttle high enough not to matter, the At
//! CRD and a namespace, and kubectl when it is installed.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use embedded_cluster::{Cluster, ClusterHandle};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sample_client_go::client::{Api, Client, Config, PostParams};
use sample_operators::apis::crds;
use sample_operators::apis::{At, AtSpec};

pub async fn server() -> ClusterHandle {
    sample_client_go::install_crypto_provider();
    Cluster::builder().start().await.unwrap()
}

pub fn client(server: &ClusterHandle) -> Client {
    let mut config = Config::from_kubeconfig_yaml(&server.kubeconfig_yaml(), None).unwrap();
    config.qps = 1000.0;
    config.burst = 1000;
    Client::new(config).unwrap()
}

/// Creates namespace `ns`.
pub async fn namespace(client: &Client, ns: &str) {
    let api: Api<Namespace> = Api::cluster(client.clone());
    let obj = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &obj).await.unwrap();
}

/// Installs the At CRD and creates At `ns/name`.
pub async fn at(client: &Client, ns: &str, name: &str) -> At {
    let crds_api: Api<CustomResourceDefinition> = Api::cluster(client.clone());
    let crd = crds::crd::<At>().unwrap();
    match crds_api.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(e) if e.is_already_exists() => {}
        Err(e) => panic!("creating the At CRD: {e}"),
    }
    let api: Api<At> = Api::namespaced(client.clone(), ns);
    let obj = At {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        spec: AtSpec::new("2030-01-01T10:00:00Z", "echo hello"),
        ..Default::default()
    };
    // The CRD's resources are served as soon as it is created.
    api.create(&PostParams::default(), &obj).await.unwrap()
}

/// Runs kubectl against `server`; returns (success, stdout, stderr).
pub async fn run_kubectl(
    bin: &PathBuf,
    server: &ClusterHandle,
    args: &[&str],
) -> (bool, String, String) {
    let home = tempfile::tempdir().unwrap();
    let kubeconfig = home.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(bin)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(home.path().join("cache"))
            .args(args)
            .env("HOME", home.path())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("kubectl did not finish within 60 s")
    .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
