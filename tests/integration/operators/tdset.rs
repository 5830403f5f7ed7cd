//! TDSet end to end on a paused clock: a whole simulated day of the published hello-world
//! example, in UTC and in Asia/Kolkata (UTC+05:30, so its boundaries fall on the half hour of
//! UTC). At every window boundary the Deployment is scaled exactly once, by exactly one
//! time-driven sync; between boundaries the controller does not run at all (no polling); the
//! 19 → 0 window wraps past midnight and the uncovered hour 0 → 1 falls back to
//! `defaultReplica`.

use crate::support;

use std::time::Duration;

use embedded_apiserver::faults::Fault;
use jiff::Timestamp;
use jiff::civil::date;
use jiff::tz::TimeZone;
use k8s_openapi::api::apps::v1::Deployment;
use sample_client_go::client::{Client, Patch, PatchParams, PostParams};
use sample_controller_runtime::controller::Clock;
use sample_operators::apis::conditions::find_condition;
use sample_operators::apis::{ConditionStatus, TDSet};
use sample_operators::controllers::tdset::{CONDITION_DEGRADED, CONDITION_PROGRESSING, reason};
use support::at::*;
use support::operators::*;

const HOUR: Duration = Duration::from_secs(3600);

/// The seed's example (its name and Deployment: `tdset-hello-world`), in `zone`.
fn hello_world(zone: Option<&str>) -> TDSet {
    let mut t = example_tdset();
    t.spec.time_zone = zone.map(str::to_string);
    t
}

fn local(tz: &TimeZone, day: i8, hour: i8, minute: i8) -> Timestamp {
    date(2030, 6, day)
        .at(hour, minute, 0, 0)
        .to_zoned(tz.clone())
        .unwrap()
        .timestamp()
}

/// Waits until the TDSet reports `replicas` and the Deployment has caught up with them.
async fn wait_settled(client: &Client, replicas: i32) {
    wait_until(
        &format!("{EXAMPLE_TDSET} settled at {replicas}"),
        || async {
            let t = api::<TDSet>(client).get(EXAMPLE_TDSET).await.unwrap();
            let Some(st) = t.status else { return false };
            st.replicas == replicas
                && find_condition(&st.conditions, CONDITION_PROGRESSING)
                    .is_some_and(|c| c.status == ConditionStatus::False)
        },
    )
    .await;
}

/// (syncs, failed syncs) of the manager's controllers so far.
fn sync_counts(manager: &RunningManager) -> (u64, u64) {
    manager
        .controllers
        .controllers()
        .iter()
        .map(|c| c.stats().snapshot())
        .fold((0, 0), |(s, e), st| (s + st.syncs, e + st.errors))
}

fn deployment_writes(server: &embedded_cluster::ClusterHandle) -> u64 {
    server
        .request_log()
        .count_where(|k| k.resource == "deployments" && k.verb == "update")
}

async fn a_simulated_day(zone: Option<&str>) {
    let _ticker = Ticker::start();
    // The status-only fast mode (`deployment_pods(false)`): the Deployment's status is
    // written once per change, so the echoes counted below are exact; with real ReplicaSets
    // and pods it moves in several steps as the pods come and go.
    let (server, client) =
        server_with(embedded_cluster::Cluster::builder().deployment_pods(false)).await;
    let tz = zone.map_or(TimeZone::UTC, |z| TimeZone::get(z).unwrap());
    // Half past midnight, local time: the uncovered hour, so defaultReplica (3).
    let clock = Clock::starting_at(local(&tz, 3, 0, 30));
    let manager = start_manager(&manager_client(&server), config_for(&["tdset"]), clock).await;

    api::<TDSet>(&client)
        .create(&PostParams::default(), &hello_world(zone))
        .await
        .unwrap();
    let d = wait_for_replicas(&client, EXAMPLE_TDSET, 3).await;
    let owner = &d.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("TDSet", Some(true))
    );
    let labels = d.metadata.labels.clone().unwrap();
    assert_eq!(labels["app.kubernetes.io/instance"], EXAMPLE_TDSET);
    assert_eq!(labels["app.kubernetes.io/managed-by"], "tdset-controller");
    wait_settled(&client, 3).await;

    // (local day, hour, replicas from then on): every boundary of the day, ending with the
    // wrap-around window 19 → 0 giving way to the default at midnight.
    let boundaries = [
        (3, 1, 2),
        (3, 7, 3),
        (3, 9, 5),
        (3, 17, 3),
        (3, 19, 2),
        (4, 0, 3),
    ];
    let mut current = 3;
    for (day, hour, want) in boundaries {
        let at = local(&tz, day, hour, 0);
        let (syncs_before, errors_before) = sync_counts(&manager);
        let writes_before = deployment_writes(&server);

        // Up to one second before the boundary: nothing runs, nothing changes.
        advance_settled(clock.until(at) - Duration::from_secs(1), HOUR).await;
        assert_eq!(
            manager.syncs(),
            syncs_before,
            "the controller ran between boundaries (polling) before {hour}:00"
        );
        let d = deployment(&client, EXAMPLE_TDSET).await.unwrap();
        assert_eq!(
            replicas_of(&d),
            Some(current),
            "scaled early, before {hour}:00"
        );

        // At the boundary: scaled once, to the new window's count.
        advance_settled(Duration::from_secs(1), HOUR).await;
        wait_for_replicas(&client, EXAMPLE_TDSET, want).await;
        wait_settled(&client, want).await;
        assert_eq!(
            deployment_writes(&server) - writes_before,
            1,
            "exactly one Deployment write at {hour}:00"
        );
        // Let everything the boundary set off finish (the Deployment's status, in the fast
        // mode, is written 500 ms after the spec changed) before counting.
        advance_settled(Duration::from_secs(5), HOUR).await;
        let (syncs, errors) = sync_counts(&manager);
        // The successful syncs of the boundary, exactly:
        // 1. the queue's wake-up at the boundary (the only time-driven one): it scales the
        //    Deployment and writes the TDSet's status (`Progressing=True`);
        // 2. the echo of that Deployment write (a new resourceVersion of a Deployment the
        //    TDSet controls enqueues it): nothing left to do;
        // 3. the fast mode's Deployment status update 500 ms later (again a new
        //    resourceVersion): it writes `Progressing=False`, `Available=True`.
        // The TDSet's own status writes do not enqueue it (only spec changes do). A sync that
        // fails counts apart: the echo may start before the cache has the status write of
        // sync 1, get 409 Conflict on its own status write and be retried; that retry
        // replaces the failed attempt, it is not extra work.
        assert_eq!(
            (syncs - syncs_before) - (errors - errors_before),
            3,
            "at {hour}:00: one time-driven sync plus the two event-driven echoes \
             (syncs {syncs_before} -> {syncs}, failed {errors_before} -> {errors})"
        );
        assert!(
            errors - errors_before <= 1,
            "at most the one conflict of the echo (failed {errors_before} -> {errors})"
        );
        current = want;
    }
    manager.stop().await.unwrap();
    server.shutdown().await;
}

/// A server, the tdset controller on a clock at 10:00 UTC (5 replicas by the example's
/// windows), and the hello-world TDSet created.
async fn hello_world_at_ten() -> (embedded_cluster::ClusterHandle, Client, RunningManager) {
    let (server, client) = operator_server().await;
    let clock = Clock::starting_at("2030-06-03T10:00:00Z".parse().unwrap());
    let manager = start_manager(&manager_client(&server), config_for(&["tdset"]), clock).await;
    api::<TDSet>(&client)
        .create(&PostParams::default(), &hello_world(None))
        .await
        .unwrap();
    (server, client, manager)
}

/// Someone scales the hello-world Deployment to `replicas` by hand.
async fn scale_by_hand(client: &Client, replicas: i32) {
    api::<Deployment>(client)
        .patch(
            EXAMPLE_TDSET,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_day_in_utc_follows_every_window_with_one_write_per_boundary() {
    a_simulated_day(None).await;
}

#[tokio::test(start_paused = true)]
async fn a_day_in_kolkata_follows_the_local_hours() {
    a_simulated_day(Some("Asia/Kolkata")).await;
}

#[tokio::test(start_paused = true)]
async fn hand_scaling_is_corrected_and_spec_changes_roll_in() {
    let _ticker = Ticker::start();
    let (server, client, manager) = hello_world_at_ten().await;
    wait_for_replicas(&client, EXAMPLE_TDSET, 5).await;
    wait_settled(&client, 5).await;

    // Someone scales the Deployment by hand: put back.
    scale_by_hand(&client, 1).await;
    wait_for_replicas(&client, EXAMPLE_TDSET, 5).await;
    wait_for_event(&client, EXAMPLE_TDSET, reason::DRIFT_CORRECTED).await;

    // A new image and a Service roll in.
    patch_spec::<TDSet>(
        &client,
        EXAMPLE_TDSET,
        serde_json::json!({"container": {"image": "nginx:1.27", "port": 8080}, "service": {"port": 80}}),
    )
    .await;
    wait_until("the new image", || async {
        deployment(&client, EXAMPLE_TDSET)
            .await
            .and_then(|d| image_of(&d))
            .as_deref()
            == Some("nginx:1.27")
    })
    .await;
    wait_until("the Service", || async {
        service(&client, EXAMPLE_TDSET).await.is_some()
    })
    .await;
    let svc = service(&client, EXAMPLE_TDSET).await.unwrap();
    let port = &svc.spec.unwrap().ports.unwrap()[0];
    assert_eq!(port.port, 80);
    assert_eq!(
        port.target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(8080))
    );

    // Removing spec.service removes the Service.
    api::<TDSet>(&client)
        .patch(
            EXAMPLE_TDSET,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"service": null}})),
        )
        .await
        .unwrap();
    wait_until("the Service to go", || async {
        service(&client, EXAMPLE_TDSET).await.is_none()
    })
    .await;

    // An unknown time zone: Degraded with a Warning, the Deployment left as it was.
    patch_spec::<TDSet>(
        &client,
        EXAMPLE_TDSET,
        serde_json::json!({"timeZone": "Mars/Olympus_Mons"}),
    )
    .await;
    let warning = wait_for_event(&client, EXAMPLE_TDSET, reason::INVALID_SPEC).await;
    assert!(warning.message.unwrap().contains("Mars/Olympus_Mons"));
    let t = api::<TDSet>(&client).get(EXAMPLE_TDSET).await.unwrap();
    let degraded = find_condition(&t.status.as_ref().unwrap().conditions, CONDITION_DEGRADED)
        .unwrap()
        .clone();
    assert_eq!(degraded.status, ConditionStatus::True);
    assert_eq!(
        replicas_of(&deployment(&client, EXAMPLE_TDSET).await.unwrap()),
        Some(5)
    );

    manager.stop().await.unwrap();
    server.shutdown().await;
}

/// A hand-scaling that lands right after a window change, before the TDSet's status reports
/// the new count, is still drift. The controller tells the two apart by the count it recorded
/// on the Deployment (`schedule.rs/desired-replicas`), not by its status, which lags behind
/// its own write. Here every status write fails, so the status keeps the old count throughout.
#[tokio::test(start_paused = true)]
async fn hand_scaling_before_the_status_catches_up_is_drift_not_a_window_change() {
    let _ticker = Ticker::start();
    let (server, client, manager) = hello_world_at_ten().await;
    wait_settled(&client, 5).await;
    let created = deployment(&client, EXAMPLE_TDSET).await.unwrap();
    assert_eq!(
        created.metadata.annotations.unwrap()["schedule.rs/desired-replicas"],
        "5"
    );

    server.faults().inject(Fault {
        count: None,
        ..Fault::fail(500).verb("update").resource("tdsets")
    });
    // This hour's window now wants 4: a window change.
    patch_spec::<TDSet>(
        &client,
        EXAMPLE_TDSET,
        serde_json::json!({"schedulingConfig": [{"startTime": 9, "endTime": 17, "replica": 4}]}),
    )
    .await;
    wait_for_replicas(&client, EXAMPLE_TDSET, 4).await;
    let scaled = wait_for_event(&client, EXAMPLE_TDSET, reason::SCALED).await;
    assert!(scaled.message.unwrap().contains("to 4"));
    let t = api::<TDSet>(&client).get(EXAMPLE_TDSET).await.unwrap();
    assert_eq!(t.status.unwrap().replicas, 5, "the status write was failed");

    // Now someone scales it by hand: drift, although the status still says 5.
    scale_by_hand(&client, 9).await;
    wait_for_replicas(&client, EXAMPLE_TDSET, 4).await;
    let drift = wait_for_event(&client, EXAMPLE_TDSET, reason::DRIFT_CORRECTED).await;
    assert!(drift.message.unwrap().contains("changed by hand"));
    let events = events_for(&client, EXAMPLE_TDSET).await;
    let scaled: Vec<_> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason::SCALED))
        .collect();
    assert_eq!(
        scaled.len(),
        1,
        "one Scaled event, for the window: {scaled:?}"
    );
    assert_eq!(scaled[0].count, Some(1), "{scaled:?}");

    server.faults().clear();
    wait_settled(&client, 4).await;
    manager.stop().await.unwrap();
    server.shutdown().await;
}
