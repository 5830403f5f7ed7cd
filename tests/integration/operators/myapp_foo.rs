//! MyApp and Foo end to end: create, scale, drift correction, and for Foo sample-controller's
//! adoption conflict (a Deployment of the wanted name that the Foo does not own).

use crate::support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sample_client_go::client::{Client, DeleteParams, Patch, PatchParams, PostParams};
use sample_controller_runtime::controller::Clock;
use sample_operators::apis::{Foo, FooSpec, MyApp, MyAppSpec};
use sample_operators::controllers::{foo, myapp};
use support::at::*;
use support::operators::*;

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(NS.to_string()),
        ..ObjectMeta::default()
    }
}

async fn hand_edit(client: &Client, name: &str, patch: serde_json::Value) {
    api::<Deployment>(client)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn myapp_creates_scales_and_corrects_drift() {
    let _ticker = Ticker::start();
    let (server, client) = operator_server().await;
    let manager = start_manager(
        &manager_client(&server),
        config_for(&["myapp"]),
        Clock::new(),
    )
    .await;
    let app = MyApp {
        metadata: meta("web"),
        spec: MyAppSpec {
            replicas: 2,
            image: "nginx:1.27".into(),
        },
        status: None,
    };
    api::<MyApp>(&client)
        .create(&PostParams::default(), &app)
        .await
        .unwrap();
    let d = wait_for_replicas(&client, "web", 2).await;
    assert_eq!(image_of(&d).as_deref(), Some("nginx:1.27"));
    let owner = &d.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("MyApp", Some(true))
    );
    let available = |n: i32| {
        let client = client.clone();
        async move {
            api::<MyApp>(&client)
                .get("web")
                .await
                .unwrap()
                .status
                .is_some_and(|s| s.available_replicas == n)
        }
    };
    wait_until("availableReplicas 2", || available(2)).await;

    patch_spec::<MyApp>(&client, "web", serde_json::json!({"replicas": 4})).await;
    wait_for_replicas(&client, "web", 4).await;
    wait_until("availableReplicas 4", || available(4)).await;

    // Drift: scaled and re-imaged by hand, put back, and the extra label someone added kept.
    hand_edit(
        &client,
        "web",
        serde_json::json!({
            "metadata": {"labels": {"team": "blue"}},
            "spec": {"replicas": 9, "template": {"spec": {"containers": [{"name": "myapp", "image": "evil:1"}]}}}
        }),
    )
    .await;
    wait_until("drift corrected", || async {
        deployment(&client, "web").await.is_some_and(|d| {
            replicas_of(&d) == Some(4) && image_of(&d).as_deref() == Some("nginx:1.27")
        })
    })
    .await;
    let d = deployment(&client, "web").await.unwrap();
    assert_eq!(d.metadata.labels.unwrap()["team"], "blue");
    wait_for_event(&client, "web", myapp::reason::DRIFT_CORRECTED).await;

    manager.stop().await.unwrap();
    server.shutdown().await;
}

fn a_foo(name: &str, deployment: &str, replicas: i32) -> Foo {
    Foo {
        metadata: meta(name),
        spec: FooSpec {
            deployment_name: deployment.to_string(),
            replicas: Some(replicas),
        },
        status: None,
    }
}

#[tokio::test(start_paused = true)]
async fn foo_creates_scales_corrects_drift_and_reports_synced() {
    let _ticker = Ticker::start();
    let (server, client) = operator_server().await;
    let manager = start_manager(&manager_client(&server), config_for(&["foo"]), Clock::new()).await;
    api::<Foo>(&client)
        .create(
            &PostParams::default(),
            &a_foo("example-foo", "example-foo", 1),
        )
        .await
        .unwrap();
    let d = wait_for_replicas(&client, "example-foo", 1).await;
    assert_eq!(image_of(&d).as_deref(), Some(foo::IMAGE));
    let labels = d.spec.unwrap().selector.match_labels.unwrap();
    assert_eq!(labels["app"], "nginx");
    assert_eq!(labels["controller"], "example-foo");
    let synced = wait_for_event(&client, "example-foo", foo::reason::SUCCESS_SYNCED).await;
    assert_eq!(
        synced.message.as_deref(),
        Some(foo::reason::MESSAGE_RESOURCE_SYNCED)
    );
    let available = |n: i32| {
        let client = client.clone();
        async move {
            api::<Foo>(&client)
                .get("example-foo")
                .await
                .unwrap()
                .status
                .is_some_and(|s| s.available_replicas == n)
        }
    };
    wait_until("availableReplicas 1", || available(1)).await;

    patch_spec::<Foo>(&client, "example-foo", serde_json::json!({"replicas": 3})).await;
    wait_for_replicas(&client, "example-foo", 3).await;
    wait_until("availableReplicas 3", || available(3)).await;

    hand_edit(
        &client,
        "example-foo",
        serde_json::json!({"spec": {"replicas": 7}}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    wait_for_replicas(&client, "example-foo", 3).await;

    manager.stop().await.unwrap();
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn foo_never_adopts_a_deployment_it_does_not_own_and_does_not_retry_the_conflict() {
    let _ticker = Ticker::start();
    let (server, client) = operator_server().await;
    // A Deployment named "squatter" that no Foo owns.
    let squatter = Deployment {
        metadata: meta("squatter"),
        spec: Some(k8s_openapi::api::apps::v1::DeploymentSpec {
            replicas: Some(2),
            selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some([("app".to_string(), "other".to_string())].into()),
                ..Default::default()
            },
            template: k8s_openapi::api::core::v1::PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some([("app".to_string(), "other".to_string())].into()),
                    ..ObjectMeta::default()
                }),
                spec: Some(k8s_openapi::api::core::v1::PodSpec {
                    containers: vec![k8s_openapi::api::core::v1::Container {
                        name: "other".into(),
                        image: Some("busybox:1.36".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    };
    api::<Deployment>(&client)
        .create(&PostParams::default(), &squatter)
        .await
        .unwrap();
    // Its own (simulated) controller reports it rolled out before the story starts, so the
    // only events the Foo controller sees later are the ones the test causes.
    wait_until("the squatter rolled out", || async {
        deployment(&client, "squatter")
            .await
            .and_then(|d| d.status)
            .and_then(|s| s.available_replicas)
            == Some(2)
    })
    .await;
    let manager = start_manager(&manager_client(&server), config_for(&["foo"]), Clock::new()).await;
    api::<Foo>(&client)
        .create(&PostParams::default(), &a_foo("claimant", "squatter", 4))
        .await
        .unwrap();

    let warning = wait_for_event(&client, "claimant", foo::reason::ERR_RESOURCE_EXISTS).await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert_eq!(
        warning.message.as_deref(),
        Some("Resource \"squatter\" already exists and is not managed by Foo")
    );

    // Left alone, and no retry storm: the squatter carries no managed-by label, so the cache
    // cannot show its deletion; the Foo looks again every FOREIGN_RECHECK, nothing more.
    let syncs = manager.syncs();
    advance_settled(Duration::from_secs(3600), Duration::from_secs(60)).await;
    let rechecks = manager.syncs() - syncs;
    let most = 3600 / foo::FOREIGN_RECHECK.as_secs() + 1;
    assert!(
        rechecks <= most,
        "a permanent conflict is rechecked every FOREIGN_RECHECK only: {rechecks} syncs"
    );
    let d = deployment(&client, "squatter").await.unwrap();
    assert_eq!(replicas_of(&d), Some(2));
    assert!(
        d.metadata
            .owner_references
            .clone()
            .unwrap_or_default()
            .is_empty()
    );
    assert_eq!(image_of(&d).as_deref(), Some("busybox:1.36"));
    let stats = manager.controllers.controllers()[0].stats().snapshot();
    assert_eq!(stats.errors, 0);

    // The squatter goes: the Foo gets its own Deployment at its next recheck.
    api::<Deployment>(&client)
        .delete("squatter", &DeleteParams::default())
        .await
        .unwrap();
    advance_settled(foo::FOREIGN_RECHECK, Duration::from_secs(10)).await;
    wait_until("the Foo's own Deployment", || async {
        deployment(&client, "squatter").await.is_some_and(|d| {
            d.metadata
                .owner_references
                .unwrap_or_default()
                .iter()
                .any(|r| r.kind == "Foo" && r.name == "claimant")
        })
    })
    .await;
    wait_for_replicas(&client, "squatter", 4).await;

    manager.stop().await.unwrap();
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_failing_sync_records_a_reconciliation_failed_warning_and_recovers() {
    let _ticker = Ticker::start();
    let (server, client) = operator_server().await;
    // The first two Deployment creations fail with a 500 (no Retry-After: not retried by the
    // client), so the MyApp's first syncs fail.
    server.faults().inject(
        embedded_apiserver::faults::Fault::fail(500)
            .verb("create")
            .resource("deployments")
            .times(2),
    );
    let manager = start_manager(
        &manager_client(&server),
        config_for(&["myapp"]),
        Clock::new(),
    )
    .await;
    let app = MyApp {
        metadata: meta("flaky"),
        spec: MyAppSpec {
            replicas: 1,
            image: "nginx:1.27".into(),
        },
        status: None,
    };
    api::<MyApp>(&client)
        .create(&PostParams::default(), &app)
        .await
        .unwrap();
    let warning = wait_for_event(
        &client,
        "flaky",
        sample_controller_runtime::controller::REASON_RECONCILIATION_FAILED,
    )
    .await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert_eq!(warning.involved_object.kind.as_deref(), Some("MyApp"));
    let message = warning.message.clone().unwrap_or_default();
    assert!(message.contains("creating the Deployment"), "{message}");
    // The retry with backoff succeeds once the faults are used up.
    wait_for_replicas(&client, "flaky", 1).await;
    let stats = manager.controllers.controllers()[0].stats().snapshot();
    assert!(stats.errors >= 2, "{stats:?}");
    manager.stop().await.unwrap();
    server.shutdown().await;
}

/// A Deployment made by an earlier version of the MyApp operator (selector and pod labels
/// `app.kubernetes.io/*`, one container `app` without ports) is brought to the track's shape
/// in place: its selector stays (the API server refuses to change it), its pods gain
/// `app` and `version`, and its container is renamed `myapp` with port 8080 `http`, not
/// joined by a second one.
#[tokio::test(start_paused = true)]
async fn myapp_brings_a_deployment_of_an_earlier_version_to_the_track_s_shape() {
    use k8s_openapi::api::apps::v1::DeploymentSpec;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use sample_controller_runtime::ownership::{dependent_metadata, standard_labels};

    let _ticker = Ticker::start();
    let (server, client) = operator_server().await;
    let app = api::<MyApp>(&client)
        .create(
            &PostParams::default(),
            &MyApp {
                metadata: meta("web"),
                spec: MyAppSpec {
                    replicas: 2,
                    image: "nginx:1.27".into(),
                },
                status: None,
            },
        )
        .await
        .unwrap();
    let old_labels = standard_labels("myapp", "web", myapp::CONTROLLER_NAME);
    let legacy = Deployment {
        metadata: dependent_metadata(&app, "web", old_labels.clone()).unwrap(),
        spec: Some(DeploymentSpec {
            replicas: Some(2),
            selector: LabelSelector {
                match_labels: Some(old_labels.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(old_labels.clone()),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: myapp::LEGACY_CONTAINER_NAME.into(),
                        image: Some("nginx:1.27".into()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    };
    api::<Deployment>(&client)
        .create(&PostParams::default(), &legacy)
        .await
        .unwrap();

    let manager = start_manager(
        &manager_client(&server),
        config_for(&["myapp"]),
        Clock::new(),
    )
    .await;
    let container_names = |d: &Deployment| -> Vec<String> {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .map_or_else(Vec::new, |p| {
                p.containers.iter().map(|c| c.name.clone()).collect()
            })
    };
    wait_until("the container renamed", || async {
        deployment(&client, "web")
            .await
            .is_some_and(|d| container_names(&d) == [myapp::CONTAINER_NAME])
    })
    .await;
    wait_for_event(&client, "web", myapp::reason::DRIFT_CORRECTED).await;
    let d = deployment(&client, "web").await.unwrap();
    let spec = d.spec.unwrap();
    assert_eq!(spec.selector.match_labels, Some(old_labels.clone()));
    let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
    for (k, v) in old_labels.iter().chain(&myapp::app_labels("web")) {
        assert_eq!(pod_labels.get(k), Some(v), "{pod_labels:?}");
    }
    let c = &spec.template.spec.unwrap().containers[0];
    assert_eq!(c.image.as_deref(), Some("nginx:1.27"));
    let port = &c.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.container_port, port.name.as_deref()),
        (8080, Some("http"))
    );

    manager.stop().await.unwrap();
    server.shutdown().await;
}
