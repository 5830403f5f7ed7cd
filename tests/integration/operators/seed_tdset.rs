//! Seed 001, the TDSet article, as its reader runs it: `tdset-hello-world` in the namespace
//! `temp` applied with kubectl (`kubectl apply -f artifacts/examples/tdset-hello-world.yaml`),
//! then "a new deployment has been created ..., and automatically updating the replica count by
//! the hour of the day": the Deployment `tdset-hello-world` runs `crccheck/hello-world` on port
//! 8000, and `kubectl get deployment` shows 5 replicas at 10:30, 3 at 17:30, 2 at 20:00, the
//! default 3 in the uncovered hour 00:30, 2 at 03:00 and 3 at 08:00 (UTC).
//!
//! The hour is the manager's: its clock is injected (`Manager::with_clock`), so the walkthrough
//! runs the manager at each hour in turn, in the middle of a window, never near a boundary; the
//! exact wake-up at each boundary is the paused-clock test's subject (`operators_tdset`).

use crate::support::seeds::{Walkthrough, row};

use k8s_openapi::api::apps::v1::Deployment;
use sample_client_go::client::{Api, Client};
use sample_controller_runtime::controller::Clock;
use sample_operators::apis::TDSet;

const NAME: &str = "tdset-hello-world";
const NS: &str = "temp";

/// The Deployment has `n` replicas, all available, and the TDSet reports `n`.
async fn at_replicas(client: &Client, n: i32) -> bool {
    let d = Api::<Deployment>::namespaced(client.clone(), NS)
        .get_opt(NAME)
        .await
        .expect("get Deployment");
    let rolled_out = d.is_some_and(|d| {
        d.spec.as_ref().and_then(|s| s.replicas) == Some(n)
            && d.status.as_ref().and_then(|s| s.available_replicas) == Some(n)
    });
    let t = Api::<TDSet>::namespaced(client.clone(), NS)
        .get_opt(NAME)
        .await
        .expect("get TDSet");
    rolled_out && t.and_then(|t| t.status).is_some_and(|s| s.replicas == n)
}

#[tokio::test]
async fn tdset_hello_world_in_temp_follows_the_hour_of_the_day() {
    let Some(w) = Walkthrough::start("seed 001 (TDSet)").await else {
        return;
    };
    let client = w.client.clone();

    // The operator, at 10:30 UTC: in the 9–17 window.
    let mut manager = w
        .manager(
            "tdset",
            Clock::starting_at("2030-06-03T10:30:00Z".parse().unwrap()),
        )
        .await;
    let out = w
        .kubectl(&["apply", "-f", "artifacts/examples/tdset-hello-world.yaml"])
        .await;
    assert!(out.contains("namespace/temp created"), "{out}");
    assert!(
        out.contains("tdset.schedule.rs/tdset-hello-world created"),
        "{out}"
    );
    w.wait("5 replicas at 10:30", || at_replicas(&client, 5))
        .await;

    // "A new deployment has been created": named like the TDSet, in its namespace, running the
    // seed's container.
    let out = w.kubectl(&["get", "deployments", "-n", NS]).await;
    assert_eq!(row(&out)[..2], [NAME, "5/5"], "{out}");
    // Its ReplicaSet's five pods run on the cluster's node.
    let out = w.kubectl(&["get", "pods", "-n", NS]).await;
    let pods: Vec<&str> = out.lines().skip(1).collect();
    assert_eq!(pods.len(), 5, "{out}");
    assert!(
        pods.iter()
            .all(|p| p.starts_with(&format!("{NAME}-")) && p.contains("Running")),
        "{out}"
    );
    let container = w
        .kubectl(&[
            "get",
            "deployment",
            NAME,
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].ports[0].containerPort}",
        ])
        .await;
    assert_eq!(container, "crccheck/hello-world 8000");
    let owner = w
        .kubectl(&[
            "get",
            "deployment",
            NAME,
            "-n",
            NS,
            "-o",
            "jsonpath={.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}",
        ])
        .await;
    assert_eq!(owner, "TDSet/tdset-hello-world");
    let out = w.kubectl(&["get", "tdset", NAME, "-n", NS]).await;
    assert_eq!(row(&out)[..2], [NAME, "5"], "the REPLICAS column: {out}");

    // The rest of the day, hour by hour: (clock, replicas, the window that decides).
    for (time, want, window) in [
        ("2030-06-03T17:30:00Z", 3, "17–19"),
        ("2030-06-03T20:00:00Z", 2, "19–0, past midnight"),
        ("2030-06-04T00:30:00Z", 3, "none: defaultReplica"),
        ("2030-06-04T03:00:00Z", 2, "1–7"),
        ("2030-06-04T08:00:00Z", 3, "7–9"),
    ] {
        manager.stop().await.expect("the manager stops cleanly");
        manager = w
            .manager("tdset", Clock::starting_at(time.parse().unwrap()))
            .await;
        w.wait(&format!("{want} replicas at {time} ({window})"), || {
            at_replicas(&client, want)
        })
        .await;
        let out = w.kubectl(&["get", "deployment", NAME, "-n", NS]).await;
        assert_eq!(
            row(&out)[..2],
            [NAME.to_string(), format!("{want}/{want}")],
            "at {time} ({window}): {out}"
        );
    }

    manager.stop().await.expect("the manager stops cleanly");
    w.shutdown().await;
}
