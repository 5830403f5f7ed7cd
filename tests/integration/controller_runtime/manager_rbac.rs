//! Least privilege: every request the manager makes during an At's whole life is allowed by
//! the ClusterRole and the leader-election Role in `artifacts/deploy/`, read from the files a
//! user applies. A call outside the manifests fails this test.
//!
//! The embedded API server records every request (verb, resource, subresource, namespace);
//! the test's own requests use verbs the manifests do not grant (it creates Ats, creates the
//! namespace, patches pod status and deletes a pod), so they are counted and subtracted exactly.

use crate::support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sample_client_go::client::{Api, DeleteParams, PostParams};
use sample_controller_runtime::controller::Clock;
use sample_controller_runtime::manager::{LeaderElectionConfig, ManagerConfig};
use sample_operators::apis::AtPhase;
use serde::Deserialize;
use support::at::*;

#[derive(Debug, Deserialize)]
struct Rule {
    #[serde(rename = "apiGroups")]
    api_groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct RoleDoc {
    kind: String,
    metadata: ObjectMeta,
    #[serde(default)]
    rules: Vec<Rule>,
}

/// The rules of every ClusterRole and Role in a manifest file: (namespace or None, rule).
fn rules_in(path: &str) -> Vec<(Option<String>, Rule)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let value = serde_yaml_ng::Value::deserialize(doc).unwrap();
        let Ok(role) = serde_yaml_ng::from_value::<RoleDoc>(value) else {
            continue;
        };
        let scope = match role.kind.as_str() {
            "ClusterRole" => None,
            "Role" => Some(role.metadata.namespace.clone().unwrap()),
            _ => continue,
        };
        out.extend(role.rules.into_iter().map(|r| (scope.clone(), r)));
    }
    out
}

/// The API group of each resource the controller can touch.
fn group_of(resource: &str) -> &'static str {
    match resource {
        "ats" => "cnat.programming-kubernetes.info",
        "leases" => "coordination.k8s.io",
        "pods" | "events" | "namespaces" => "",
        other => panic!("the manager touched an unexpected resource {other:?}"),
    }
}

fn allowed(rules: &[(Option<String>, Rule)], verb: &str, resource: &str, namespace: &str) -> bool {
    let (plural, _) = resource.split_once('/').unwrap_or((resource, ""));
    let group = group_of(plural);
    rules.iter().any(|(scope, r)| {
        scope.as_deref().is_none_or(|ns| ns == namespace)
            && r.api_groups.iter().any(|g| g == group || g == "*")
            && r.resources.iter().any(|x| x == resource || x == "*")
            && r.verbs.iter().any(|v| v == verb || v == "*")
    })
}

#[tokio::test(start_paused = true)]
async fn every_request_of_the_manager_is_granted_by_artifacts_deploy() {
    let mut rules = rules_in("artifacts/deploy/base/clusterrole.yaml");
    rules.extend(rules_in("artifacts/deploy/base/role-leader-election.yaml"));
    assert!(!rules.is_empty());
    // The manifests never grant secrets or writes to CRDs.
    for (_, r) in &rules {
        assert!(
            !r.resources.iter().any(|x| x == "secrets" || x == "*"),
            "{r:?}"
        );
        assert!(
            !r.resources
                .iter()
                .any(|x| x.starts_with("customresourcedefinitions"))
        );
    }

    let _ticker = Ticker::start();
    let (server, client) = server().await;
    let log = server.request_log();
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some("sample-controller".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let before = log.snapshot();

    let clock = Clock::new();
    let config = ManagerConfig {
        leader_election: Some(LeaderElectionConfig {
            lease_name: "sample-controller".into(),
            lease_namespace: "sample-controller".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }),
        ..manager_config()
    };
    let manager = start_manager(&manager_client(&server), config, clock).await;

    // A success, a failure (Warning events), a pod deleted mid-run, an invalid spec, a
    // repeated event (PATCH), and a foreign pod (ErrResourceExists).
    let now = in_the_future(&clock, Duration::ZERO);
    create_at(&client, &at("ok", &now, "echo YAY")).await;
    create_at(&client, &at("bad", &now, "exit 2")).await;
    create_at(&client, &at("blank", &now, " ")).await;
    wait_for_pod(&client, "ok-pod").await;
    wait_for_pod(&client, "bad-pod").await;
    pods(&client)
        .delete("ok-pod", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("ok-pod to come back", || async {
        server.request_log().count_code("create", "pods", 201) == 3
    })
    .await;
    finish_pod(&client, "ok-pod", 0).await;
    finish_pod(&client, "bad-pod", 2).await;
    wait_for_phase(&client, "ok", AtPhase::Done).await;
    wait_for_phase(&client, "bad", AtPhase::Done).await;
    wait_for_event(&client, "blank", "InvalidSpec").await;
    advance_settled(Duration::from_secs(1200), Duration::from_secs(60)).await;
    manager.stop().await.unwrap();

    let mut checked = 0;
    for (key, n) in log.snapshot() {
        let earlier = before
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, n)| *n)
            .unwrap_or(0);
        let mut by_manager = n - earlier;
        let resource = if key.subresource.is_empty() {
            key.resource.clone()
        } else {
            format!("{}/{}", key.resource, key.subresource)
        };
        // The test's own requests, none of which the manifests grant.
        match (key.verb.as_str(), resource.as_str()) {
            ("create", "ats") | ("patch", "pods/status") | ("delete", "pods") => by_manager = 0,
            ("list", "ats") | ("list", "events") | ("get", "ats") | ("get", "pods") => {
                // The test reads with GET and LIST too; the manager's reads are list/watch,
                // which the ClusterRole grants, so only check what the test could not have done.
                by_manager = 0
            }
            _ => {}
        }
        if by_manager == 0 {
            continue;
        }
        checked += 1;
        assert!(
            allowed(&rules, &key.verb, &resource, &key.namespace),
            "{} {} in namespace {:?} ({} times) is not granted by artifacts/deploy",
            key.verb,
            resource,
            key.namespace,
            by_manager
        );
    }
    assert!(
        checked >= 6,
        "the manager's requests were observed ({checked} kinds)"
    );
    server.shutdown().await;
}

/// The same life, with the embedded server enforcing RBAC and the manager authenticating as the
/// `sample-controller` service account bound by `artifacts/deploy/` alone: any request outside
/// the manifests is answered 403 and fails the test.
#[tokio::test(start_paused = true)]
async fn the_manager_runs_under_its_own_service_account_with_rbac_enforced() {
    let _ticker = Ticker::start();
    init_tracing();
    sample_client_go::install_crypto_provider();
    let server = embedded_cluster::Cluster::builder()
        .enforce_rbac(true)
        .service_account_token("controller-token", "sample-controller", "sample-controller")
        .start()
        .await
        .unwrap();
    let client = client_for(&server);
    sample_operators::apis::crds::install::<sample_operators::apis::At>(&client)
        .await
        .unwrap();
    for file in [
        "artifacts/deploy/base/namespace.yaml",
        "artifacts/deploy/base/serviceaccount.yaml",
        "artifacts/deploy/base/clusterrole.yaml",
        "artifacts/deploy/base/clusterrolebinding.yaml",
        "artifacts/deploy/base/role-leader-election.yaml",
    ] {
        server
            .load_manifests(&std::fs::read_to_string(file).unwrap())
            .unwrap();
    }
    let config = sample_client_go::client::Config::from_kubeconfig_yaml(
        &server.kubeconfig_yaml_for_token("controller-token"),
        None,
    )
    .unwrap();
    let controller_client = sample_client_go::client::Client::new(config).unwrap();

    let clock = Clock::new();
    let manager_cfg = ManagerConfig {
        leader_election: Some(LeaderElectionConfig {
            lease_name: "sample-controller".into(),
            lease_namespace: "sample-controller".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }),
        ..manager_config()
    };
    // A pod of ours made before the `managed-by` label: invisible to the pod cache, so the
    // manager's create answers 409 and it adopts the pod with one GET and one label PATCH
    // (granted: pods get, patch).
    let old_due = in_the_future(&clock, Duration::ZERO);
    let old = create_at(&client, &at("old", &old_due, "echo YAY")).await;
    let mut old_pod = sample_operators::controllers::at::new_pod(&old);
    if let Some(labels) = old_pod.metadata.labels.as_mut() {
        labels.remove(sample_controller_runtime::ownership::LABEL_MANAGED_BY);
    }
    pods(&client)
        .create(&PostParams::default(), &old_pod)
        .await
        .expect("create the old pod");
    let manager = start_manager(&controller_client, manager_cfg, clock).await;
    let now = in_the_future(&clock, Duration::ZERO);
    create_at(&client, &at("ok", &now, "echo YAY")).await;
    create_at(&client, &at("bad", &now, "exit 2")).await;
    create_at(&client, &at("blank", &now, " ")).await;
    // v1's ttlSecondsAfterFinished: the manager deletes the finished pod (granted: pods delete).
    let mut ttl = at("ttl", &now, "true");
    ttl.spec.run.ttl_seconds_after_finished = Some(0);
    create_at(&client, &ttl).await;
    wait_for_pod(&client, "ok-pod").await;
    wait_for_pod(&client, "bad-pod").await;
    wait_for_pod(&client, "ttl-pod").await;
    finish_pod(&client, "ok-pod", 0).await;
    finish_pod(&client, "bad-pod", 2).await;
    finish_pod(&client, "ttl-pod", 0).await;
    wait_for_phase(&client, "ok", AtPhase::Done).await;
    wait_for_phase(&client, "bad", AtPhase::Done).await;
    wait_for_event(&client, "blank", "InvalidSpec").await;
    wait_for_phase(&client, "ttl", AtPhase::Done).await;
    finish_pod(&client, "old-pod", 0).await;
    wait_for_phase(&client, "old", AtPhase::Done).await;
    assert_eq!(
        server
            .request_log()
            .count_where(|k| k.verb == "patch" && k.resource == "pods" && k.subresource.is_empty()),
        1,
        "the old pod was adopted with one label PATCH"
    );
    wait_until("ttl-pod deleted by the manager", || async {
        !pod_exists(&client, "ttl-pod").await
    })
    .await;
    manager.stop().await.unwrap();
    let forbidden = server.request_log().count_where(|k| k.code == 403);
    assert_eq!(
        forbidden,
        0,
        "requests denied by RBAC: {:?}",
        server.request_log().snapshot()
    );
    server.shutdown().await;
}
