//! Seed 002, the MyApp operator track, against this project: `artifacts/examples/myapp.yaml`
//! applied with kubectl, and the Deployment the track's `deploymentForMyApp` builds: named like
//! the MyApp, labels `app: <name>` and `version: v1` on itself, its selector and its pods, one
//! container `myapp` with port 8080 named `http`, owned by the MyApp; its size kept equal to
//! `spec.replicas` ("Ensure the deployment size is the same as the spec"); and gone with the
//! MyApp (the owner reference).

use crate::support::seeds::{Walkthrough, row};

use k8s_openapi::api::apps::v1::Deployment;
use sample_client_go::client::{Api, Client};
use sample_controller_runtime::controller::Clock;
use sample_operators::apis::MyApp;

const NAME: &str = "example-myapp";
const NS: &str = "default";

/// The Deployment has `n` replicas, all available, and the MyApp reports them.
async fn available(client: &Client, n: i32) -> bool {
    let d = Api::<Deployment>::namespaced(client.clone(), NS)
        .get_opt(NAME)
        .await
        .expect("get Deployment");
    let rolled_out = d.is_some_and(|d| {
        d.spec.as_ref().and_then(|s| s.replicas) == Some(n)
            && d.status.as_ref().and_then(|s| s.available_replicas) == Some(n)
    });
    let app = Api::<MyApp>::namespaced(client.clone(), NS)
        .get_opt(NAME)
        .await
        .expect("get MyApp");
    rolled_out
        && app
            .and_then(|a| a.status)
            .is_some_and(|s| s.available_replicas == n)
}

#[tokio::test]
async fn example_myapp_gets_the_track_s_deployment() {
    let Some(w) = Walkthrough::start("seed 002 (MyApp)").await else {
        return;
    };
    let manager = w.manager("myapp", Clock::new()).await;
    let client = w.client.clone();

    let out = w
        .kubectl(&["apply", "-f", "artifacts/examples/myapp.yaml"])
        .await;
    assert!(
        out.contains("myapp.example.com/example-myapp created"),
        "{out}"
    );
    w.wait("2 replicas available", || available(&client, 2))
        .await;
    let out = w.kubectl(&["get", "myapp", NAME]).await;
    assert_eq!(
        row(&out)[..3],
        [NAME, "2", "2"],
        "REPLICAS, AVAILABLE: {out}"
    );

    // The track's labels select the Deployment, and are its selector and its pods' labels.
    let out = w
        .kubectl(&["get", "deployments", "-l", "app=example-myapp,version=v1"])
        .await;
    assert_eq!(row(&out)[..2], [NAME, "2/2"], "{out}");
    assert_eq!(out.lines().count(), 2, "one Deployment: {out}");
    let out = w
        .kubectl(&["get", "pods", "-l", "app=example-myapp,version=v1"])
        .await;
    let pods: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(pods.len(), 2, "the Deployment's two pods: {out}");
    assert!(pods.iter().all(|p| p.contains("Running")), "{out}");
    let jsonpath = |path: &str| format!("jsonpath={path}");
    let get = |path: String| {
        let w = &w;
        async move { w.kubectl(&["get", "deployment", NAME, "-o", &path]).await }
    };
    assert_eq!(
        get(jsonpath(
            "{.spec.selector.matchLabels.app} {.spec.selector.matchLabels.version}"
        ))
        .await,
        "example-myapp v1"
    );
    assert_eq!(
        get(jsonpath(
            "{.spec.template.metadata.labels.app} {.spec.template.metadata.labels.version}"
        ))
        .await,
        "example-myapp v1"
    );
    assert_eq!(
        get(jsonpath("{.spec.template.spec.containers[*].name}")).await,
        "myapp",
        "one container, the track's"
    );
    assert_eq!(
        get(jsonpath(
            "{.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].ports[0].containerPort} {.spec.template.spec.containers[0].ports[0].name}"
        ))
        .await,
        "nginx:1.27 8080 http"
    );
    assert_eq!(
        get(jsonpath(
            "{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name} {.metadata.ownerReferences[0].controller}"
        ))
        .await,
        "MyApp/example-myapp true"
    );

    // The size follows the spec.
    let out = w
        .kubectl(&[
            "patch",
            "myapp",
            NAME,
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":3}}"#,
        ])
        .await;
    assert!(out.contains("patched"), "{out}");
    w.wait("3 replicas available", || available(&client, 3))
        .await;
    let out = w.kubectl(&["get", "deployment", NAME]).await;
    assert_eq!(row(&out)[..2], [NAME, "3/3"], "{out}");

    // Deleting the MyApp takes its Deployment with it.
    let out = w.kubectl(&["delete", "myapp", NAME]).await;
    assert!(out.contains("deleted"), "{out}");
    w.wait("the Deployment to go", || async {
        Api::<Deployment>::namespaced(client.clone(), NS)
            .get_opt(NAME)
            .await
            .expect("get Deployment")
            .is_none()
    })
    .await;
    let out = w
        .kubectl_all(&["get", "deployments", "-l", "app=example-myapp"])
        .await;
    assert!(out.contains("No resources found"), "{out}");

    manager.stop().await.expect("the manager stops cleanly");
    w.shutdown().await;
}
