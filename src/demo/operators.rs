//! The demo's stories for the operators after At (`--operators`): each creates its custom
//! resource in the embedded server, changes it the way a user would, and waits (polling the
//! API, like a user running `kubectl get`) until the controller has made the cluster match.
//! The event printer of the demo shows what the controllers said along the way.
//!
//! * **tdset**: a TDSet whose only window is the current UTC hour (2 replicas, else 1). The
//!   story shows the Deployment at 2, says when the next boundary is (the controller will be
//!   woken then by its queue, without polling), raises the window to 4, and scales the
//!   Deployment by hand to show the controller putting it back.
//! * **rediscluster**: 3 nodes, then 5, then 2 (the simulated StatefulSet controller adds and
//!   removes `<name>-<ordinal>` pods in order), then deletion through the finalizer.
//! * **myapp**: a Deployment of 2 replicas until `availableReplicas` is 2.
//! * **foo**: sample-controller's example Foo until `availableReplicas` is 1.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::json;
use tokio::time::Instant;

use super::{DEMO_NAMESPACE, DemoError, STORY, api_err, say};
use futures_util::future::BoxFuture;
use sample_client_go::cache::CacheObject;
use sample_client_go::client::{self, Api, Client, DeleteParams, Patch, PatchParams, PostParams};
use sample_controller_runtime::controller::Operator;
use sample_operators::apis::{
    Foo, FooSpec, MyApp, MyAppSpec, RedisCluster, RedisClusterSpec, SchedulingWindow, TDSet,
    TDSetContainer, TDSetSpec,
};
use sample_operators::controllers::at::AtController;
use sample_operators::controllers::foo::FooController;
use sample_operators::controllers::myapp::MyAppController;
use sample_operators::controllers::rediscluster::RedisClusterController;
use sample_operators::controllers::tdset::TDSetController;
use sample_operators::registry::{self, Entry};

/// What `demo` shows without `--operators`.
pub const DEFAULT_OPERATORS: &[&str] = &["at", "tdset", "rediscluster"];

/// Checks `--operators` and puts the names in the manager's order, without repeats.
pub fn resolve(list: &[String]) -> Result<Vec<&'static str>, DemoError> {
    let wanted: Vec<&str> = list
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(unknown) = wanted.iter().find(|w| !registry::NAMES.contains(w)) {
        return Err(DemoError::UnknownOperator(unknown.to_string()));
    }
    let chosen: Vec<&'static str> = registry::NAMES
        .iter()
        .copied()
        .filter(|k| wanted.contains(k))
        .collect();
    if chosen.is_empty() {
        return Err(DemoError::UnknownOperator(list.join(",")));
    }
    Ok(chosen)
}

/// A story's future: `(client, started, deadline)`.
type StoryFn = fn(Client, Instant, Instant) -> BoxFuture<'static, Result<(), DemoError>>;

/// What the demo shows of one operator, keyed by its [`Operator::NAME`] (the operators
/// themselves, with their CRDs, are the library's `controllers::registry::OPERATORS`).
struct Story {
    /// The operator's name.
    operator: &'static str,
    /// One line on what the story showed.
    summary: &'static str,
    /// The resources the story creates or changes, its custom resource first.
    shown_resources: &'static [&'static str],
    /// An example of `artifacts/examples/` that applies cleanly after the story (`--serve`).
    example: &'static str,
    /// The story; `None` for At, whose story (and CRD install) is the demo's main line.
    run: Option<StoryFn>,
}

const STORIES: &[Story] = &[
    Story {
        operator: AtController::NAME,
        summary: "",
        shown_resources: &["ats", "pods"],
        example: "cnat-example-v1.yaml",
        run: None,
    },
    Story {
        operator: TDSetController::NAME,
        summary: "the TDSet's Deployment follows its window; hand-scaling was put back",
        shown_resources: &["tdsets", "deployments"],
        example: "tdset-hello-world.yaml",
        run: Some(|c, s, d| Box::pin(tdset_story(c, s, d))),
    },
    Story {
        operator: RedisClusterController::NAME,
        summary: "the RedisCluster went 3 -> 5 -> 2 nodes and its finalizer cleaned everything up",
        shown_resources: &["redisclusters", "statefulsets", "services", "pods"],
        example: "rediscluster.yaml",
        run: Some(|c, s, d| Box::pin(rediscluster_story(c, s, d))),
    },
    Story {
        operator: MyAppController::NAME,
        summary: "the MyApp's Deployment is available",
        shown_resources: &["myapps", "deployments"],
        example: "myapp.yaml",
        run: Some(|c, s, d| Box::pin(myapp_story(c, s, d))),
    },
    Story {
        operator: FooController::NAME,
        summary: "the Foo's Deployment is available",
        shown_resources: &["foos", "deployments"],
        example: "foo.yaml",
        run: Some(|c, s, d| Box::pin(foo_story(c, s, d))),
    },
];

fn story(op: &str) -> Option<&'static Story> {
    STORIES.iter().find(|s| s.operator == op)
}

/// One line on what the story of `op` showed.
pub fn summary(op: &str) -> &'static str {
    story(op).map_or("", |s| s.summary)
}

/// The resource whose changes `kubectl get <it> -w` shows for the story of `op`.
pub fn watched_resource(op: &str) -> &'static str {
    shown_resources(op).first().copied().unwrap_or("events")
}

/// The resources the story of `op` creates or changes, its custom resource first.
pub fn shown_resources(op: &str) -> &'static [&'static str] {
    story(op).map_or(&[], |s| s.shown_resources)
}

/// The file of `artifacts/examples/` that gives the operator `op` new work once its story has
/// ended (`--serve`): its CRD is installed and the object's name is not taken.
pub fn example_file(op: &str) -> &'static str {
    story(op).map_or("", |s| s.example)
}

/// Installs the CRDs of the selected operators (At's is installed by the At story).
pub async fn install_crds(
    client: &Client,
    operators: &[&'static str],
    started: Instant,
) -> Result<(), DemoError> {
    for op in operators {
        if story(op).is_some_and(|s| s.run.is_none()) {
            continue;
        }
        let registration =
            registry::lookup(op).map_err(|e| DemoError::UnknownOperator(e.name.clone()))?;
        install(registration, client, started).await?;
    }
    Ok(())
}

async fn install(registration: &Entry, client: &Client, started: Instant) -> Result<(), DemoError> {
    let name = (registration.crd_name)();
    (registration.install_crd)(client)
        .await
        .map_err(|e| DemoError::Api {
            what: format!("installing the CRD {name}"),
            source: client::Error::Other(e.to_string()),
        })?;
    say(started, &format!("installed the CRD {name}"));
    Ok(())
}

/// Runs the stories of the selected operators side by side; the first failure ends it.
pub async fn run(
    client: Client,
    operators: Vec<&'static str>,
    started: Instant,
    deadline: Instant,
) -> Result<(), DemoError> {
    let mut stories: Vec<BoxFuture<'static, Result<(), DemoError>>> = Vec::new();
    for op in operators {
        let Some(run) = story(op).and_then(|s| s.run) else {
            continue;
        };
        // Every line the story prints carries its name (see `say`).
        stories.push(Box::pin(
            STORY.scope(op, run(client.clone(), started, deadline)),
        ));
    }
    futures_util::future::try_join_all(stories).await?;
    Ok(())
}

fn api<K: CacheObject>(client: &Client) -> Api<K> {
    Api::namespaced(client.clone(), DEMO_NAMESPACE)
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(DEMO_NAMESPACE.to_string()),
        ..ObjectMeta::default()
    }
}

/// Polls `check` every 100 ms until it is true, or fails at `deadline` naming `what`.
async fn wait_for<F, Fut>(what: &str, deadline: Instant, mut check: F) -> Result<(), DemoError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, client::Error>>,
{
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(api_err(format!("waiting for {what}"))(e)),
        }
        if Instant::now() >= deadline {
            return Err(DemoError::Timeout {
                timeout: "the --timeout".to_string(),
                waiting: what.to_string(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn deployment_replicas(client: &Client, name: &str) -> Result<Option<i32>, client::Error> {
    Ok(api::<Deployment>(client)
        .get_opt(name)
        .await?
        .and_then(|d| d.spec)
        .and_then(|s| s.replicas))
}

/// The demo TDSet's window, `(start, end)` in whole hours UTC, for a demo started in `hour`:
/// two hours from the start of this one. The story takes seconds, but it may start a second
/// before the hour ends; a window of this hour alone would then end under it, and the
/// controller would scale the Deployment to 1 while the story waits for 2 (or 4).
fn demo_window(hour: i32) -> (i32, i32) {
    (hour, (hour + 2) % 24)
}

async fn tdset_story(client: Client, started: Instant, deadline: Instant) -> Result<(), DemoError> {
    let now = Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC);
    let (hour, end) = demo_window(i32::from(now.hour()));
    let window = |replica| SchedulingWindow {
        start_time: hour,
        end_time: end,
        replica,
    };
    let tdset = TDSet {
        metadata: meta("office-hours"),
        spec: TDSetSpec {
            container: TDSetContainer {
                image: "nginx:1.27".to_string(),
                port: 80,
            },
            service: None,
            scheduling_config: vec![window(2)],
            default_replica: 1,
            interval_mint: None,
            time_zone: None,
        },
        status: None,
    };
    api::<TDSet>(&client)
        .create(&PostParams::default(), &tdset)
        .await
        .map_err(api_err("creating TDSet office-hours"))?;
    say(
        started,
        &format!(
            "created tdset/office-hours: 2 replicas from {hour:02}:00 to {end:02}:00 (UTC), else 1"
        ),
    );
    let at = |n: i32| {
        let client = client.clone();
        move || {
            let client = client.clone();
            async move { Ok(deployment_replicas(&client, "office-hours").await? == Some(n)) }
        }
    };
    wait_for("deployment/office-hours at 2", deadline, at(2)).await?;
    say(
        started,
        &format!(
            "deployment/office-hours runs 2 replicas; at {end:02}:00 UTC the controller wakes once and scales it to 1"
        ),
    );
    let patch = json!({"spec": {"schedulingConfig": [window(4)]}});
    api::<TDSet>(&client)
        .patch(
            "office-hours",
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
        .map_err(api_err("editing TDSet office-hours"))?;
    say(started, "edited tdset/office-hours: the window now wants 4");
    wait_for("deployment/office-hours at 4", deadline, at(4)).await?;
    say(started, "deployment/office-hours scaled to 4");
    api::<Deployment>(&client)
        .patch(
            "office-hours",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 9}})),
        )
        .await
        .map_err(api_err("scaling deployment/office-hours by hand"))?;
    say(started, "scaled deployment/office-hours to 9 by hand");
    // The patch is stored before it returns: from here on, 4 means the controller put it back.
    wait_for("deployment/office-hours back at 4", deadline, at(4)).await?;
    say(started, "deployment/office-hours is back at 4");
    Ok(())
}

async fn rediscluster_story(
    client: Client,
    started: Instant,
    deadline: Instant,
) -> Result<(), DemoError> {
    let cluster = RedisCluster {
        metadata: meta("example-rediscluster"),
        spec: RedisClusterSpec {
            size: 3,
            image: None,
        },
        status: None,
    };
    let clusters = api::<RedisCluster>(&client);
    clusters
        .create(&PostParams::default(), &cluster)
        .await
        .map_err(api_err("creating RedisCluster example-rediscluster"))?;
    say(
        started,
        "created rediscluster/example-rediscluster with size 3",
    );
    for size in [3usize, 5, 2] {
        if size != 3 {
            clusters
                .patch(
                    "example-rediscluster",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"size": size}})),
                )
                .await
                .map_err(api_err("resizing RedisCluster example-rediscluster"))?;
            say(
                started,
                &format!("resized rediscluster/example-rediscluster to {size}"),
            );
        }
        let want: Vec<String> = (0..size)
            .map(|i| format!("example-rediscluster-{i}"))
            .collect();
        let clusters2 = clusters.clone();
        let want2 = want.clone();
        wait_for(&format!("{size} ready Redis nodes"), deadline, move || {
            let (clusters, want) = (clusters2.clone(), want2.clone());
            async move {
                let c = clusters.get("example-rediscluster").await?;
                Ok(c.status.is_some_and(|s| s.nodes == want))
            }
        })
        .await?;
        say(
            started,
            &format!(
                "rediscluster/example-rediscluster status.nodes = {}",
                want.join(", ")
            ),
        );
    }
    clusters
        .delete("example-rediscluster", &DeleteParams::default())
        .await
        .map_err(api_err("deleting RedisCluster example-rediscluster"))?;
    say(
        started,
        "deleted rediscluster/example-rediscluster: the finalizer runs the cleanup first",
    );
    let clusters2 = clusters.clone();
    wait_for("example-rediscluster to be gone", deadline, move || {
        let clusters = clusters2.clone();
        async move { Ok(clusters.get_opt("example-rediscluster").await?.is_none()) }
    })
    .await?;
    say(
        started,
        "rediscluster/example-rediscluster is gone, with its StatefulSet, Service and pods",
    );
    Ok(())
}

async fn myapp_story(client: Client, started: Instant, deadline: Instant) -> Result<(), DemoError> {
    let app = MyApp {
        metadata: meta("example-myapp"),
        spec: MyAppSpec {
            replicas: 2,
            image: "nginx:1.27".to_string(),
        },
        status: None,
    };
    let apps = api::<MyApp>(&client);
    apps.create(&PostParams::default(), &app)
        .await
        .map_err(api_err("creating MyApp example-myapp"))?;
    say(
        started,
        "created myapp/example-myapp: 2 replicas of nginx:1.27",
    );
    let apps2 = apps.clone();
    wait_for("example-myapp to be available", deadline, move || {
        let apps = apps2.clone();
        async move {
            let a = apps.get("example-myapp").await?;
            Ok(a.status.is_some_and(|s| s.available_replicas == 2))
        }
    })
    .await?;
    say(started, "myapp/example-myapp: 2 replicas available");
    Ok(())
}

async fn foo_story(client: Client, started: Instant, deadline: Instant) -> Result<(), DemoError> {
    let example = Foo {
        metadata: meta("example-foo"),
        spec: FooSpec {
            deployment_name: "example-foo".to_string(),
            replicas: Some(1),
        },
        status: None,
    };
    let foos = api::<Foo>(&client);
    foos.create(&PostParams::default(), &example)
        .await
        .map_err(api_err("creating Foo example-foo"))?;
    say(
        started,
        "created foo/example-foo (sample-controller's example)",
    );
    let foos2 = foos.clone();
    wait_for("example-foo to be available", deadline, move || {
        let foos = foos2.clone();
        async move {
            let f = foos.get("example-foo").await?;
            Ok(f.status.is_some_and(|s| s.available_replicas == 1))
        }
    })
    .await?;
    say(started, "foo/example-foo: 1 replica available");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Started in the last second of any hour, the demo's window still holds (2 replicas) a
    /// minute later, by the TDSet controller's own reading of the window.
    #[test]
    fn the_demo_window_outlasts_a_story_started_at_the_end_of_any_hour() {
        use sample_operators::controllers::tdset::{desired_replicas, validate};
        for h in 0..24i8 {
            let (start, end) = demo_window(i32::from(h));
            let spec = TDSetSpec {
                container: TDSetContainer {
                    image: "nginx".into(),
                    port: 80,
                },
                service: None,
                scheduling_config: vec![SchedulingWindow {
                    start_time: start,
                    end_time: end,
                    replica: 2,
                }],
                default_replica: 1,
                interval_mint: None,
                time_zone: None,
            };
            let tz = validate(&spec).unwrap();
            let last_second = jiff::civil::date(2030, 6, 1)
                .at(h, 59, 59, 0)
                .to_zoned(jiff::tz::TimeZone::UTC)
                .unwrap()
                .timestamp();
            for later in [0, 1, 60] {
                let t = last_second + jiff::SignedDuration::from_secs(later);
                assert_eq!(desired_replicas(&spec, &tz, t), 2, "hour {h}, +{later}s");
            }
        }
    }

    #[test]
    fn operators_are_checked_and_ordered() {
        let v = |s: &[&str]| resolve(&s.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(
            v(&["rediscluster", "at", "at"]).unwrap(),
            vec!["at", "rediscluster"]
        );
        assert_eq!(v(&["foo", " myapp "]).unwrap(), vec!["myapp", "foo"]);
        assert!(matches!(v(&["nope"]), Err(DemoError::UnknownOperator(n)) if n == "nope"));
        assert!(v(&[""]).is_err());
        let e = v(&["tdset", "nope"]).unwrap_err().to_string();
        assert_eq!(
            e,
            "--operators: \"nope\" is not an operator (known: at, tdset, rediscluster, myapp, foo)"
        );
    }

    #[test]
    fn every_operator_has_a_story_and_every_story_an_operator() {
        for name in registry::NAMES {
            let s = story(name).unwrap_or_else(|| panic!("no demo story for {name}"));
            assert!(!s.shown_resources.is_empty(), "{name}");
        }
        for s in STORIES {
            assert!(registry::lookup(s.operator).is_ok(), "{}", s.operator);
        }
    }
}
