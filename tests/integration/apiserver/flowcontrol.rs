//! API Priority and Fairness in the embedded API server: the default FlowSchemas and priority
//! levels served as resources (also to `kubectl get`), fairness between a greedy and a polite
//! user sharing a tiny priority level, 429 + `Retry-After` instead of timeouts, watches that hold
//! no seat once started, the `X-Kubernetes-PF-*` headers and the `apiserver_flowcontrol_*`
//! metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use embedded_apiserver::faults::Fault;
use embedded_cluster::Cluster;
use serde_json::json;

use crate::support::apiserver::{TestClient, read_answer};
use crate::support::cluster::Kubectl;

const FS_HEADER: &str = "x-kubernetes-pf-flowschema-uid";
const PL_HEADER: &str = "x-kubernetes-pf-prioritylevel-uid";

#[tokio::test]
async fn defaults_are_served_and_every_response_names_its_flow() {
    let s = Cluster::builder()
        .extra_token("alice-token", "alice")
        .start()
        .await
        .unwrap();
    let admin = TestClient::new(&s);
    let fs = admin
        .get("/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas")
        .await;
    assert_eq!(fs.code, 200, "{:?}", fs.body);
    let names: Vec<&str> = fs.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    for want in [
        "exempt",
        "probes",
        "system-leader-election",
        "workload-leader-election",
        "system-node-high",
        "system-nodes",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-system-service-accounts",
        "service-accounts",
        "global-default",
        "catch-all",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let pl = admin
        .get("/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/workload-low")
        .await;
    assert_eq!(pl.code, 200);
    assert_eq!(pl.body["spec"]["limited"]["nominalConcurrencyShares"], 100);
    let global_default_uid = admin
        .get("/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/global-default")
        .await
        .body["metadata"]["uid"]
        .clone();

    // The admin (system:masters) is exempt; alice falls to global-default. Both get the headers,
    // on successes and errors alike.
    let alice = TestClient::from_parts(s.url(), "alice-token", s.ca_pem(), false);
    let a = alice
        .get("/api/v1/namespaces/default/configmaps/missing")
        .await;
    assert_eq!(a.code, 404);
    assert_eq!(
        a.headers[PL_HEADER].to_str().unwrap(),
        global_default_uid.as_str().unwrap()
    );
    assert!(!a.headers[FS_HEADER].is_empty());
    let m = admin.get("/api/v1/namespaces").await;
    assert_ne!(
        m.headers[PL_HEADER], a.headers[PL_HEADER],
        "admin is exempt"
    );

    let metrics = admin.get("/metrics").await;
    let text = metrics.body.as_str().unwrap();
    assert!(
        text.contains("apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"global-default\",priority_level=\"global-default\"} 1"),
        "{text}"
    );
    assert!(text.contains(
        "apiserver_flowcontrol_nominal_limit_seats{priority_level=\"workload-low\"} 245"
    ));

    if let Some(k) = Kubectl::new(&s) {
        let out = k
            .run(&["get", "flowschemas,prioritylevelconfigurations"])
            .await;
        assert!(out.ok, "{}", out.stderr);
        for want in [
            "PRIORITYLEVEL",
            "MATCHINGPRECEDENCE",
            "DISTINGUISHERMETHOD",
            "MISSINGPL",
            "NOMINALCONCURRENCYSHARES",
            "QUEUELENGTHLIMIT",
            "flowschema.flowcontrol.apiserver.k8s.io/catch-all",
            "prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/workload-high",
        ] {
            assert!(out.stdout.contains(want), "{want} missing:\n{}", out.stdout);
        }
    }
    s.shutdown().await;
}

/// 500 requests per second from one user against a priority level with a single seat, each
/// request holding it for 50 ms: the greedy user is answered 429 with `Retry-After` (never left
/// hanging), and another user in the same level is still served every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greedy_user_gets_429_while_another_is_still_served() {
    // 2 + 1 = 3 seats in all; global-default gets ceil(3 × 20 / 245) = 1.
    let s = Cluster::builder()
        .plain_http(true)
        .extra_token("greedy-token", "greedy")
        .extra_token("polite-token", "polite")
        .max_requests_inflight(2)
        .max_mutating_requests_inflight(1)
        .flow_control_queue_wait(Duration::from_secs(3))
        .start()
        .await
        .unwrap();
    s.faults().inject(
        Fault::latency(Duration::from_millis(50))
            .verb("list")
            .resource("configmaps"),
    );
    let greedy = Arc::new(TestClient::from_parts(s.url(), "greedy-token", None, false));
    let polite = TestClient::from_parts(s.url(), "polite-token", None, false);

    let ok = Arc::new(AtomicUsize::new(0));
    let throttled = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(2));
    for _ in 0..1000 {
        tick.tick().await;
        let (c, ok, throttled) = (greedy.clone(), ok.clone(), throttled.clone());
        tasks.push(tokio::spawn(async move {
            let resp = tokio::time::timeout(
                Duration::from_secs(60),
                c.raw(
                    "GET",
                    "/api/v1/namespaces/default/configmaps",
                    &[],
                    vec![],
                    true,
                ),
            )
            .await
            .expect("a greedy request hung instead of being answered");
            let a = read_answer(resp).await;
            match a.code {
                200 => ok.fetch_add(1, Ordering::Relaxed),
                429 => {
                    assert_eq!(a.headers["retry-after"], "1");
                    assert_eq!(a.body["reason"], "TooManyRequests", "{:?}", a.body);
                    assert!(a.headers.contains_key(PL_HEADER));
                    throttled.fetch_add(1, Ordering::Relaxed)
                }
                other => panic!("greedy request answered {other}: {:?}", a.body),
            };
        }));
    }
    // While the flood is queued, the polite user is served, every time.
    for i in 0..5 {
        let a = tokio::time::timeout(
            Duration::from_secs(60),
            polite.get("/api/v1/namespaces/default/configmaps"),
        )
        .await
        .expect("polite request hung");
        assert_eq!(a.code, 200, "polite request {i}: {:?}", a.body);
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (ok, throttled) = (
        ok.load(Ordering::Relaxed),
        throttled.load(Ordering::Relaxed),
    );
    assert!(
        throttled > 0,
        "no 429 among 1000 greedy requests ({ok} served)"
    );
    assert!(
        ok > 0,
        "the greedy user was served too, just not more than its share"
    );
    let admin = TestClient::from_parts(s.url(), s.token(), None, false);
    let text = admin.get("/metrics").await.body;
    let text = text.as_str().unwrap();
    assert!(
        text.contains("apiserver_flowcontrol_rejected_requests_total{flow_schema=\"global-default\",priority_level=\"global-default\",reason=\"queue-full\"}"),
        "{text}"
    );
    assert!(text.contains("apiserver_flowcontrol_current_inqueue_requests{flow_schema=\"global-default\",priority_level=\"global-default\"} 0"));
    s.shutdown().await;
}

/// A watch holds a seat only while it starts: three open watches do not use up a level with one
/// seat.
#[tokio::test]
async fn open_watches_hold_no_seat() {
    let s = Cluster::builder()
        .extra_token("alice-token", "alice")
        .max_requests_inflight(2)
        .max_mutating_requests_inflight(1)
        .flow_control_queue_wait(Duration::from_secs(2))
        .start()
        .await
        .unwrap();
    let alice = TestClient::from_parts(s.url(), "alice-token", s.ca_pem(), false);
    let mut watches = Vec::new();
    for _ in 0..3 {
        watches.push(
            alice
                .watch("/api/v1/namespaces/default/configmaps?watch=true")
                .await,
        );
    }
    let created = alice
        .post(
            "/api/v1/namespaces/default/configmaps",
            &json!({"metadata": {"name": "x"}}),
        )
        .await;
    assert_eq!(created.code, 201, "{:?}", created.body);
    for w in &mut watches {
        assert_eq!(w.next_change().await.unwrap()["type"], "ADDED");
    }
    let admin = TestClient::new(&s);
    let text = admin.get("/metrics").await.body;
    assert!(text.as_str().unwrap().contains(
        "apiserver_flowcontrol_current_executing_requests{flow_schema=\"global-default\",priority_level=\"global-default\"} 0"
    ));
    s.shutdown().await;
}

/// New objects reconfigure the dispatcher: a FlowSchema for one user sends its requests to a
/// level of its own.
#[tokio::test]
async fn a_new_flow_schema_takes_effect() {
    let s = Cluster::builder()
        .extra_token("bob-token", "bob")
        .start()
        .await
        .unwrap();
    let admin = TestClient::new(&s);
    let pl = admin
        .post(
            "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
            &json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
                    "metadata": {"name": "bobs"},
                    "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 1,
                             "limitResponse": {"type": "Reject"}}}}),
        )
        .await;
    assert_eq!(pl.code, 201, "{:?}", pl.body);
    let fs = admin
        .post(
            "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
            &json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
                    "metadata": {"name": "bob"},
                    "spec": {"priorityLevelConfiguration": {"name": "bobs"}, "matchingPrecedence": 50,
                             "rules": [{"subjects": [{"kind": "User", "user": {"name": "bob"}}],
                                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                                        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                           "namespaces": ["*"], "clusterScope": true}]}]}}),
        )
        .await;
    assert_eq!(fs.code, 201, "{:?}", fs.body);
    let bob = TestClient::from_parts(s.url(), "bob-token", s.ca_pem(), false);
    let want = pl.body["metadata"]["uid"].as_str().unwrap().to_owned();
    let mut last = String::new();
    for _ in 0..100 {
        let a = bob.get("/api/v1/namespaces/default/configmaps").await;
        last = a.headers[PL_HEADER].to_str().unwrap().to_owned();
        if last == want {
            assert_eq!(
                a.headers[FS_HEADER].to_str().unwrap(),
                fs.body["metadata"]["uid"].as_str().unwrap()
            );
            s.shutdown().await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("bob's requests never reached the new level (last {last}, want {want})");
}

/// The `flow_schema="global-default"` value of one `apiserver_flowcontrol_*` gauge.
fn global_default_gauge(metrics: &str, name: &str) -> usize {
    let prefix =
        format!("{name}{{flow_schema=\"global-default\",priority_level=\"global-default\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// A LIST occupies one seat per 100 objects it processes (kube-apiserver's list work
/// estimator): forty concurrent LISTs of 500 objects by one user run at most two at a time in a
/// level of 13 seats (5 seats each), the rest wait their turn, and another user's GET is
/// served meanwhile.
#[tokio::test]
async fn large_lists_occupy_seats_by_their_size() {
    // 100 + 50 = 150 seats; global-default gets ceil(150 × 20 / 245) = 13.
    let s = Cluster::builder()
        .extra_token("greedy-token", "greedy")
        .extra_token("polite-token", "polite")
        .max_requests_inflight(100)
        .max_mutating_requests_inflight(50)
        .flow_control_queue_wait(Duration::from_secs(60))
        .start()
        .await
        .unwrap();
    let admin = Arc::new(TestClient::new(&s));
    let cms = "/api/v1/namespaces/default/configmaps";
    for chunk in (0..500).collect::<Vec<_>>().chunks(50) {
        let posts = chunk.iter().map(|i| {
            let admin = admin.clone();
            async move {
                let body = json!({"metadata": {"name": format!("cm-{i}")}, "data": {"v": "x"}});
                assert_eq!(admin.post(cms, &body).await.code, 201);
            }
        });
        futures_util::future::join_all(posts).await;
    }
    // Each LIST holds its seats for at least 200 ms, so they overlap.
    s.faults().inject(
        Fault::latency(Duration::from_millis(200))
            .verb("list")
            .resource("configmaps"),
    );
    let greedy = Arc::new(TestClient::from_parts(
        s.url(),
        "greedy-token",
        s.ca_pem(),
        false,
    ));
    let lists: Vec<_> = (0..40)
        .map(|_| {
            let greedy = greedy.clone();
            tokio::spawn(async move {
                let a = greedy.get(cms).await;
                assert_eq!(a.code, 200, "{:?}", a.headers);
                assert_eq!(a.body["items"].as_array().unwrap().len(), 500);
            })
        })
        .collect();
    // The admin (exempt) samples the gauges while the LISTs run.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (admin, done) = (admin.clone(), done.clone());
        tokio::spawn(async move {
            let (mut requests, mut seats) = (0, 0);
            while !done.load(Ordering::Relaxed) {
                let text = admin.get("/metrics").await.body;
                let text = text.as_str().unwrap();
                requests = requests.max(global_default_gauge(
                    text,
                    "apiserver_flowcontrol_current_executing_requests",
                ));
                seats = seats.max(global_default_gauge(
                    text,
                    "apiserver_flowcontrol_current_executing_seats",
                ));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (requests, seats)
        })
    };
    // Another user's GET is served while the LISTs queue.
    let polite = TestClient::from_parts(s.url(), "polite-token", s.ca_pem(), false);
    for _ in 0..5 {
        let a = tokio::time::timeout(Duration::from_secs(60), polite.get(&format!("{cms}/cm-1")))
            .await
            .expect("the polite GET is served");
        assert_eq!(a.code, 200, "{:?}", a.body);
    }
    for l in lists {
        l.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let (requests, seats) = sampler.await.unwrap();
    // Two LISTs of five seats fit in thirteen, plus the polite GET's one.
    assert!(requests <= 3, "{requests} requests executed at once");
    assert!((5..=13).contains(&seats), "{seats} seats in use at most");
    s.shutdown().await;
}
