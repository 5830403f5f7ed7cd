//! All five controllers in one manager, authenticated as the service account of
//! `artifacts/deploy/` with RBAC enforced by the embedded API server: every call the
//! controllers make is allowed by the shipped ClusterRole (no 403 anywhere), while what the
//! role does not grant is refused.

use crate::support;

use embedded_cluster::Cluster;
use k8s_openapi::api::core::v1::Secret;
use sample_client_go::client::{Api, Client, Config, DeleteParams, ListParams, PostParams};
use sample_controller_runtime::controller::Clock;
use sample_operators::apis::{
    AtPhase, Foo, FooSpec, MyApp, MyAppSpec, RedisCluster, RedisClusterSpec, TDSet,
};
use sample_operators::controllers::foo;
use sample_operators::controllers::rediscluster::LABEL_CLUSTER;
use sample_operators::registry::NAMES;
use support::at::*;
use support::operators::*;

const SA_TOKEN: &str = "sample-controller-sa-token";

fn meta(name: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(NS.to_string()),
        ..Default::default()
    }
}

#[tokio::test(start_paused = true)]
async fn five_controllers_in_one_manager_need_nothing_beyond_the_cluster_role() {
    let _ticker = Ticker::start();
    let (server, client) =
        server_with(Cluster::builder().enforce_rbac(true).service_account_token(
            SA_TOKEN,
            "sample-controller",
            "sample-controller",
        ))
        .await;
    // The RBAC of artifacts/deploy/, namespace first (the directory loads alphabetically).
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/artifacts/deploy/base");
    let mut loaded = Vec::new();
    for file in [
        "namespace.yaml",
        "serviceaccount.yaml",
        "clusterrole.yaml",
        "clusterrolebinding.yaml",
    ] {
        loaded.extend(
            server
                .load_manifest_path(format!("{deploy}/{file}"))
                .unwrap(),
        );
    }
    assert!(
        loaded.contains(&"ClusterRole/sample-controller".to_string()),
        "{loaded:?}"
    );

    // The manager authenticates as the service account, not as the admin.
    let yaml = server.kubeconfig_yaml().replace(server.token(), SA_TOKEN);
    let sa_client = Client::new(Config::from_kubeconfig_yaml(&yaml, None).unwrap()).unwrap();
    let forbidden = Api::<Secret>::all(sa_client.clone())
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(forbidden.is_forbidden(), "RBAC is enforced: {forbidden}");

    let clock = Clock::starting_at("2030-06-03T10:00:00Z".parse().unwrap());
    let manager = start_manager(&sa_client, config_for(&NAMES), clock).await;

    // At: due an hour ago, so it runs at once; the simulated node runs its pod to completion.
    create_at(&client, &at("once", "2030-06-03T09:00:00Z", "echo hi")).await;
    // TDSet: 10:00 UTC is in the 9–17 window of tdset-hello-world.
    api::<TDSet>(&client)
        .create(&PostParams::default(), &example_tdset())
        .await
        .unwrap();
    api::<RedisCluster>(&client)
        .create(
            &PostParams::default(),
            &RedisCluster {
                metadata: meta("cache"),
                spec: RedisClusterSpec {
                    size: 2,
                    image: None,
                },
                status: None,
            },
        )
        .await
        .unwrap();
    api::<MyApp>(&client)
        .create(
            &PostParams::default(),
            &MyApp {
                metadata: meta("web"),
                spec: MyAppSpec {
                    replicas: 1,
                    image: "nginx:1.27".into(),
                },
                status: None,
            },
        )
        .await
        .unwrap();
    api::<Foo>(&client)
        .create(
            &PostParams::default(),
            &Foo {
                metadata: meta("example-foo"),
                spec: FooSpec {
                    deployment_name: "example-foo".into(),
                    replicas: Some(2),
                },
                status: None,
            },
        )
        .await
        .unwrap();

    wait_for_phase(&client, "once", AtPhase::Done).await;
    wait_for_replicas(&client, EXAMPLE_TDSET, 5).await;
    wait_for_replicas(&client, "web", 1).await;
    wait_for_replicas(&client, "example-foo", 2).await;
    wait_for_event(&client, "example-foo", foo::reason::SUCCESS_SYNCED).await;
    wait_until("the Redis nodes", || async {
        api::<RedisCluster>(&client)
            .get("cache")
            .await
            .unwrap()
            .status
            .is_some_and(|s| s.nodes == ["cache-0", "cache-1"])
    })
    .await;
    wait_until("MyApp status", || async {
        api::<MyApp>(&client)
            .get("web")
            .await
            .unwrap()
            .status
            .is_some_and(|s| s.available_replicas == 1)
    })
    .await;

    // The finalizer path too: delete the cluster and see it cleaned up.
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
            && pod_names(&client, LABEL_CLUSTER, "cache").await.is_empty()
    })
    .await;

    let denied = server.request_log().count_where(|k| k.code == 403);
    assert_eq!(
        denied,
        1,
        "only the test's own secrets probe was refused: {:?}",
        server
            .request_log()
            .snapshot()
            .into_iter()
            .filter(|(k, _)| k.code == 403)
            .collect::<Vec<_>>()
    );
    manager.stop().await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn the_deploy_directory_loads_in_one_go_namespace_first() {
    // `sample-controller apiserver --manifests artifacts/deploy/` loads the directory as a whole:
    // its files sort alphabetically (deployment.yaml before namespace.yaml), so Namespaces and
    // CRDs from every file are created before anything else.
    let server = Cluster::builder().simulate(false).start().await.unwrap();
    let deploy = concat!(env!("CARGO_MANIFEST_DIR"), "/artifacts/deploy/base");
    let loaded = server.load_manifest_path(deploy).unwrap();
    assert_eq!(
        loaded.first().map(String::as_str),
        Some("Namespace/sample-controller")
    );
    for expected in [
        "ServiceAccount/sample-controller",
        "ClusterRole/sample-controller",
        "ClusterRoleBinding/sample-controller",
        "Deployment/sample-controller",
    ] {
        assert!(
            loaded.iter().any(|l| l == expected),
            "{expected}: {loaded:?}"
        );
    }
    server.shutdown().await;
}
