//! RedisCluster end to end: the simulated StatefulSet controller creates and removes real pods
//! (`<name>-<ordinal>`, in order), the simulated node runs them, and the controller reports the
//! ready ones in `status.nodes`. Deletion runs the finalizer's cleanup and leaves nothing.

use crate::support;

use k8s_openapi::api::core::v1::Pod;
use sample_client_go::client::{Client, DeleteParams, ListParams, PostParams};
use sample_controller_runtime::controller::Clock;
use sample_operators::apis::conditions::find_condition;
use sample_operators::apis::rediscluster::FINALIZER;
use sample_operators::apis::{ConditionStatus, RedisCluster, RedisClusterSpec};
use sample_operators::controllers::rediscluster::{CONDITION_DEGRADED, LABEL_CLUSTER, reason};
use support::at::*;
use support::operators::*;

fn cluster(name: &str, size: i32, image: Option<&str>) -> RedisCluster {
    RedisCluster {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(NS.to_string()),
            ..Default::default()
        },
        spec: RedisClusterSpec {
            size,
            image: image.map(str::to_string),
        },
        status: None,
    }
}

fn ordinals(name: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{name}-{i}")).collect()
}

/// Waits until `status.nodes` is exactly `want` and the pods of the cluster are exactly those.
async fn wait_for_nodes(client: &Client, name: &str, want: &[String]) {
    wait_until(&format!("{name} nodes {want:?}"), || async {
        let rc = api::<RedisCluster>(client).get(name).await.unwrap();
        let st = rc.status.unwrap_or_default();
        st.nodes == want
            && st.ready_replicas == want.len() as i32
            && pod_names(client, LABEL_CLUSTER, name).await == want
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn scales_3_to_5_to_2_and_the_finalizer_cleans_everything_up() {
    let _ticker = Ticker::start();
    let (server, client) = operator_server().await;
    let manager = start_manager(
        &manager_client(&server),
        config_for(&["rediscluster"]),
        Clock::new(),
    )
    .await;
    api::<RedisCluster>(&client)
        .create(&PostParams::default(), &cluster("cache", 3, None))
        .await
        .unwrap();
    wait_for_nodes(&client, "cache", &ordinals("cache", 3)).await;

    let rc = api::<RedisCluster>(&client).get("cache").await.unwrap();
    assert!(
        rc.metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
    );
    let available = find_condition(&rc.status.as_ref().unwrap().conditions, "Available").unwrap();
    assert_eq!(available.status, ConditionStatus::True);
    let sts = statefulset(&client, "cache").await.unwrap();
    assert_eq!(sts.spec.as_ref().unwrap().replicas, Some(3));
    assert_eq!(
        sts.spec.as_ref().unwrap().service_name.as_deref(),
        Some("cache")
    );
    let svc = service(&client, "cache").await.unwrap();
    assert_eq!(svc.spec.unwrap().cluster_ip.as_deref(), Some("None"));
    // Every pod is the StatefulSet's, with its stable name.
    for pod in api::<Pod>(&client)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        let owner = &pod.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("StatefulSet", "cache")
        );
    }

    patch_spec::<RedisCluster>(&client, "cache", serde_json::json!({"size": 5})).await;
    wait_for_nodes(&client, "cache", &ordinals("cache", 5)).await;

    patch_spec::<RedisCluster>(&client, "cache", serde_json::json!({"size": 2})).await;
    wait_for_nodes(&client, "cache", &ordinals("cache", 2)).await;

    // Deletion: the finalizer holds the object until the cleanup is done.
    api::<RedisCluster>(&client)
        .delete("cache", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the RedisCluster to go", || async {
        api::<RedisCluster>(&client)
            .get_opt("cache")
            .await
            .unwrap()
            .is_none()
    })
    .await;
    assert!(statefulset(&client, "cache").await.is_none());
    assert!(service(&client, "cache").await.is_none());
    assert!(pod_names(&client, LABEL_CLUSTER, "cache").await.is_empty());
    let cleaned = wait_for_event(&client, "cache", reason::CLEANED_UP).await;
    assert_eq!(cleaned.type_.as_deref(), Some("Normal"));

    manager.stop().await.unwrap();
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_misconfigured_cluster_is_degraded_with_a_warning_and_creates_nothing() {
    let _ticker = Ticker::start();
    let (server, client) = operator_server().await;
    let manager = start_manager(
        &manager_client(&server),
        config_for(&["rediscluster"]),
        Clock::new(),
    )
    .await;
    api::<RedisCluster>(&client)
        .create(
            &PostParams::default(),
            &cluster("broken", 3, Some("redis 7")),
        )
        .await
        .unwrap();
    let warning = wait_for_event(&client, "broken", reason::INVALID_SPEC).await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert!(warning.message.unwrap().contains("spec.image"));
    wait_until("Degraded=True", || async {
        api::<RedisCluster>(&client)
            .get("broken")
            .await
            .unwrap()
            .status
            .and_then(|s| find_condition(&s.conditions, CONDITION_DEGRADED).cloned())
            .is_some_and(|c| c.status == ConditionStatus::True)
    })
    .await;
    assert!(statefulset(&client, "broken").await.is_none());
    assert_eq!(
        manager.controllers.controllers()[0]
            .stats()
            .snapshot()
            .errors,
        0,
        "a bad spec is not retried as an error"
    );

    // Fixing the image clears it.
    patch_spec::<RedisCluster>(&client, "broken", serde_json::json!({"image": "redis:7"})).await;
    wait_for_nodes(&client, "broken", &ordinals("broken", 3)).await;
    let rc = api::<RedisCluster>(&client).get("broken").await.unwrap();
    let degraded = find_condition(&rc.status.unwrap().conditions, CONDITION_DEGRADED)
        .unwrap()
        .clone();
    assert_eq!(degraded.status, ConditionStatus::False);

    manager.stop().await.unwrap();
    server.shutdown().await;
}

/// A StatefulSet and a Service made by an earlier version of the operator, without the
/// guide's `control-plane: redis-operator` label, get it (so `kubectl get statefulsets,svc -l
/// control-plane=redis-operator` lists them), and putting a label back is no `Scaled` event.
#[tokio::test(start_paused = true)]
async fn objects_of_an_earlier_version_get_the_control_plane_label() {
    use sample_operators::controllers::rediscluster::{
        CONTROL_PLANE, LABEL_CONTROL_PLANE, new_service, new_statefulset,
    };

    let _ticker = Ticker::start();
    let (server, client) = operator_server().await;
    let created = api::<RedisCluster>(&client)
        .create(&PostParams::default(), &cluster("cache", 2, None))
        .await
        .unwrap();
    let mut sts = new_statefulset(&created).unwrap();
    let mut svc = new_service(&created).unwrap();
    for meta in [&mut sts.metadata, &mut svc.metadata] {
        meta.labels.as_mut().unwrap().remove(LABEL_CONTROL_PLANE);
    }
    api::<k8s_openapi::api::apps::v1::StatefulSet>(&client)
        .create(&PostParams::default(), &sts)
        .await
        .unwrap();
    api::<k8s_openapi::api::core::v1::Service>(&client)
        .create(&PostParams::default(), &svc)
        .await
        .unwrap();

    let manager = start_manager(
        &manager_client(&server),
        config_for(&["rediscluster"]),
        Clock::new(),
    )
    .await;
    let labelled = |labels: Option<&std::collections::BTreeMap<String, String>>| {
        labels
            .and_then(|l| l.get(LABEL_CONTROL_PLANE))
            .map(String::as_str)
            == Some(CONTROL_PLANE)
    };
    wait_until("both labelled", || async {
        let sts = statefulset(&client, "cache").await;
        let svc = service(&client, "cache").await;
        sts.is_some_and(|s| labelled(s.metadata.labels.as_ref()))
            && svc.is_some_and(|s| labelled(s.metadata.labels.as_ref()))
    })
    .await;
    wait_for_nodes(&client, "cache", &ordinals("cache", 2)).await;
    let events = events_for(&client, "cache").await;
    let reasons: Vec<_> = events.iter().filter_map(|e| e.reason.as_deref()).collect();
    assert!(
        !reasons.contains(&reason::SCALED) && !reasons.contains(&reason::CREATED),
        "the StatefulSet was relabelled, neither scaled nor created: {reasons:?}"
    );

    manager.stop().await.unwrap();
    server.shutdown().await;
}
