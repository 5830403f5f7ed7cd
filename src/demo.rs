//! # `sample-controller demo`: the whole story in one command
//!
//! `cargo run -- demo` needs nothing but the Rust toolchain: no cluster, no network,
//! no Docker. In one process it starts
//!
//! 1. the **embedded API server** ([`embedded_apiserver`]) over HTTPS on 127.0.0.1 with a
//!    generated CA and a token, with its node on the **process runtime**
//!    ([`embedded_cluster::NodeRuntime::Process`]): each pod's command really runs as a child process of
//!    the demo, its output is what `kubectl logs` prints, and its exit code decides the pod's
//!    phase. It writes a kubeconfig so you can watch from another terminal with `kubectl`;
//! 2. installs the **At CRD** generated from [`sample_operators::apis::At`]: `v1` stored,
//!    the book's `v1alpha1` still served, `conversion: Webhook` pointing at the manager (and
//!    the CRDs of the other selected operators). The demo plays cert-manager and the cluster's
//!    Service for the manager's **webhook server** (the `webhooks` submodule): it mints a CA and
//!    a serving certificate, maps the webhook Service to the manager's port, and injects the
//!    CA into the CRD and the admission webhook configurations of `artifacts/deploy/webhook/`;
//! 3. starts the **controller manager** ([`sample_controller_runtime::manager::Manager`]) exactly as
//!    `sample-controller run` would, talking to that server over real HTTP, with its webhook
//!    server answering `/convert`, `/mutate-at` and `/validate-at`;
//! 4. creates the Ats of the story (two stored, two refused at admission):
//!    * `example-at`: the book's `artifacts/examples/cnat-example.yaml` (`echo YAY`), its
//!      schedule moved a few seconds ahead, created **in `v1alpha1`** and read back **as
//!      `v1`** (`spec.command` became `spec.run.command`, `spec.run.image` was defaulted by
//!      `/mutate-at`);
//!    * `failing-at`: a command that exits 3 (a real `sh -c "exit 3"`), to show `result:
//!      Failed` and its exit code; created **in `v1`** with `activeDeadlineSeconds`, a field
//!      `v1alpha1` has no place for, and read back **as `v1alpha1`**: the field waits in an
//!      annotation, so a `v1alpha1` client's update loses nothing;
//!    * `blank-command`: a command of spaces, which passes the schema's `minLength` but cannot
//!      run: the manager's `/validate-at` webhook refuses it, and the demo prints the
//!      webhook's message (were it let through, the controller would mark it with a Warning
//!      `InvalidSpec` event and condition and never retry it until the spec changes, and the
//!      demo would wait for that Warning);
//!    * `not-a-time`: a schedule that is not a time. A server that checks the CRD's
//!      `format: date-time` rejects it at admission (the first line of defence; the demo prints
//!      the rejection); a server that lets it through leaves it to the controller, which marks
//!      it with a Warning `InvalidSpec` event and condition;
//! 5. prints every phase change and every event as the controller produces them, read from its
//!    own informers (the same machinery the controller uses);
//! 6. once both runnable Ats are `DONE` and every invalid one the server accepted carries its
//!    Warning, **checks** that the controller ran each command exactly once, at its schedule:
//!    the server's request log must show exactly one successful pod creation per runnable At,
//!    and each At's pod (found by name and its controller ownerReference) must have been
//!    created no earlier than the At's schedule and at most a few seconds after it
//!    ([`check_runs`]). It prints what it measured, or fails with what does not hold; then,
//!    as the book does, it prints `kubectl logs example-at-pod`: `YAY`;
//! 7. exits 0, or keeps serving with `--serve` until Ctrl-C or SIGTERM.
//!
//! `--operators` chooses which operators the story shows (default `at,tdset,rediscluster`;
//! also `myapp` and `foo`). Beside the Ats, a TDSet scales a Deployment by its current window
//! and has a hand-scaling put back, and a RedisCluster goes 3 → 5 → 2 nodes on the simulated
//! StatefulSet controller and is deleted through its finalizer; see the `operators` submodule.
//! Only what the selected operators need is installed, watched and printed: without `at`
//! there is no At CRD, no At informer in the printer and no `kubectl get ats` hint.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use apimachinery::duration::{format as format_duration, parse as parse_go_duration};
use embedded_cluster::Cluster;
use sample_client_go::cache::{EventHandlerFns, SharedInformerFactory};
use sample_client_go::client::{self, Api, Client, Config, PostParams};
use sample_client_go::keytrace::{KeyTracer, TraceFilter};
use sample_controller_runtime::manager::{
    ClientSource, LogFormat, ManagerConfig, parse_bind_address,
};
use sample_controller_runtime::webhook::WebhookServerConfig;
use sample_operators::apis::at::conversion;
use sample_operators::apis::at::v1alpha1::At as AtV1alpha1;
use sample_operators::apis::conditions::find_condition;
use sample_operators::apis::{At, AtPhase, AtSpec, ConditionStatus};
use sample_operators::controllers::at::{CONDITION_INVALID_SPEC, reason};
use sample_operators::slim::AtSummary;

mod operators;
mod webhooks;

/// The book's `cnat-example.yaml`, compiled in.
const BOOK_EXAMPLE: &str = include_str!("../artifacts/examples/cnat-example.yaml");

/// The namespace the demo's Ats live in.
pub const DEMO_NAMESPACE: &str = "default";

/// Flags of `sample-controller demo`.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct DemoOptions {
    /// Keep the API server and the controller running after the story ends (Ctrl-C or SIGTERM stops them).
    #[arg(long)]
    pub serve: bool,

    /// How far ahead of now the runnable Ats are scheduled.
    #[arg(long, default_value = "5s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub delay: Duration,

    /// Give up (exit 1) if the story has not ended after this long.
    #[arg(long, default_value = "60s", value_parser = parse_go_duration, value_name = "DURATION")]
    pub timeout: Duration,

    /// Where to write the kubeconfig of the embedded API server.
    #[arg(
        long,
        default_value = "sample-controller-demo.kubeconfig",
        value_name = "PATH"
    )]
    pub kubeconfig_out: PathBuf,

    /// Log verbosity of the controller's own logs (stderr), klog style; 0 shows warnings only.
    #[arg(short = 'v', long = "v", default_value_t = 0, value_name = "LEVEL")]
    pub verbosity: u8,

    /// The operators to show, comma-separated: at, tdset, rediscluster, myapp, foo.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "at,tdset,rediscluster",
        value_name = "LIST"
    )]
    pub operators: Vec<String>,

    /// Follow one of the story's Ats (example-at, failing-at) hop by hop, inline: the trace
    /// `sample-controller trace` reads from a running manager.
    #[arg(long, value_name = "NAME")]
    pub trace: Option<String>,

    /// Where the manager serves /metrics, /trace and the /machinery page, as `run` takes it
    /// ("0": off; ":8080" or "127.0.0.1:8080"; port 0: one the system picks, printed).
    #[arg(long, default_value = "127.0.0.1:0", value_name = "ADDR")]
    pub metrics_bind_address: String,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            serve: false,
            delay: Duration::from_secs(5),
            timeout: Duration::from_secs(60),
            kubeconfig_out: PathBuf::from("sample-controller-demo.kubeconfig"),
            verbosity: 0,
            operators: operators::DEFAULT_OPERATORS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            trace: None,
            metrics_bind_address: "127.0.0.1:0".to_string(),
        }
    }
}

/// Why the demo did not reach its end.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The embedded API server did not start.
    #[error("starting the embedded API server: {0}")]
    Server(String),
    /// A request to the embedded server failed.
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: client::Error,
    },
    /// The kubeconfig could not be written.
    #[error("writing the kubeconfig to {path}: {source}")]
    Kubeconfig {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The story did not end in time.
    #[error("not finished after {timeout}: still waiting for {waiting}")]
    Timeout { timeout: String, waiting: String },
    /// The manager stopped with an error.
    #[error("the controller manager stopped: {0}")]
    Manager(String),
    /// The At controller did not run each command exactly once, at its schedule.
    #[error("the At controller did not run each command exactly once at its schedule: {0}")]
    NotExactlyOnce(String),
    /// `--metrics-bind-address` is not an address.
    #[error("{0}")]
    Flag(String),
    /// `--operators` named something that is not an operator.
    #[error(
        "--operators: {0:?} is not an operator (known: {known})",
        known = sample_operators::registry::NAMES.join(", ")
    )]
    UnknownOperator(String),
}

fn api_err(what: impl Into<String>) -> impl FnOnce(client::Error) -> DemoError {
    let what = what.into();
    move |source| DemoError::Api { what, source }
}

/// What the printer has seen, to decide when the story is over.
#[derive(Debug, Default)]
struct Seen {
    phases: BTreeMap<String, AtPhase>,
    invalid: BTreeSet<String>,
    warnings: BTreeSet<(String, String)>,
    /// The invalid Ats the server accepted: each must end up with its Warning.
    expect_invalid: Vec<String>,
}

/// Runs the demo (see the module documentation).
pub async fn run(opts: DemoOptions) -> Result<(), DemoError> {
    apimachinery::crypto::install_provider();
    let operators = operators::resolve(&opts.operators)?;
    let with_at = operators.contains(&"at");
    let metrics_addr = parse_bind_address("--metrics-bind-address", &opts.metrics_bind_address)
        .map_err(|e| DemoError::Flag(e.to_string()))?;
    let started = Instant::now();
    // The manager's webhooks (conversion and admission of Ats), wired in as a cluster would.
    let hooks = if with_at {
        Some(webhooks::DemoWebhooks::prepare()?)
    } else {
        None
    };
    let server = Cluster::builder()
        .simulate(true)
        .node_runtime(embedded_cluster::NodeRuntime::Process)
        .start()
        .await
        .map_err(|e| DemoError::Server(e.to_string()))?;
    let kubeconfig = server.kubeconfig_yaml();
    write_private(&opts.kubeconfig_out, &kubeconfig).await?;
    let config = Config::from_kubeconfig_yaml(&kubeconfig, None)
        .map_err(api_err("reading the embedded server's kubeconfig"))?;
    let client = Client::new(config).map_err(api_err("building the client"))?;

    let path = opts.kubeconfig_out.display().to_string();
    print_banner(&operators, server.url(), &path, opts.serve);

    if let Some(h) = &hooks {
        install_at_crd(h, &client, started).await?;
    }
    operators::install_crds(&client, &operators, started).await?;

    // The printer: an informer factory of its own, like any other client of the API.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let printer = SharedInformerFactory::new(ClientSource(client.clone()), Duration::ZERO)
        .with_namespace(DEMO_NAMESPACE);
    register_printers(&printer, Arc::clone(&seen), started, with_at);
    let printer_stop = CancellationToken::new();
    printer.start(&printer_stop);

    let manager_cfg = manager_config(&operators, opts.verbosity, metrics_addr);
    let manager_stop = CancellationToken::new();
    let manager = sample_operators::registry::manager(manager_cfg, client.clone())
        .with_webhook_server(hooks.as_ref().map(|h| WebhookServerConfig {
            addr: webhooks::BIND_ADDRESS,
            cert_dir: h.cert_dir.clone(),
        }));
    let listeners = manager.listeners_handle();
    // `--trace NAME`: subscribed before any At exists, so the first hop is its ADDED.
    let tracing = match &opts.trace {
        Some(name) => Some(spawn_trace(&manager.key_tracer(), name, started)?),
        None => None,
    };
    let manager = tokio::spawn(manager.run(manager_stop.clone()));
    tokio::spawn(announce_machinery(
        listeners.clone(),
        opts.trace.clone(),
        started,
    ));
    if let Some(h) = &hooks {
        register_admission(h, &server, &listeners, &client, started).await?;
    }

    // The other operators' stories run beside the At's.
    let deadline = started + opts.timeout;
    let other_stories = tokio::spawn(operators::run(
        client.clone(),
        operators.clone(),
        started,
        deadline,
    ));
    let outcome = if with_at {
        match STORY
            .scope(
                "at",
                at_story(&client, &opts, &seen, started, deadline, &manager),
            )
            .await
        {
            Ok(schedule) => check_each_ran_once(&client, &server, schedule).await,
            Err(e) => Err(e),
        }
    } else {
        Ok(Vec::new())
    };
    let outcome = match (outcome, other_stories.await) {
        (Err(e), _) => Err(e),
        (Ok(runs), Ok(r)) => r.map(|()| runs),
        (Ok(_), Err(e)) => Err(DemoError::Manager(format!("the operators' story: {e}"))),
    };

    if let Ok(runs) = &outcome {
        let invalid = seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .expect_invalid
            .join(" and ");
        print_ending(&client, &operators, runs, &invalid, with_at).await;
        if opts.serve {
            // SIGTERM as well as Ctrl-C, so `kill` also shuts down in order (and the webhook's
            // private key directory is removed); installed before the announcement.
            let stop = apimachinery::signals::wait_for_signal();
            print_serving(&operators, server.url(), &path, with_at);
            stop.await;
        }
    }

    if let Some(t) = tracing {
        // The trace holds each hop a moment to print them in order: let the last ones out.
        tokio::time::sleep(2 * sample_client_go::keytrace::REORDER_WINDOW).await;
        t.abort();
    }
    manager_stop.cancel();
    match manager.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) if outcome.is_ok() => return Err(DemoError::Manager(e.to_string())),
        Err(e) if outcome.is_ok() => return Err(DemoError::Manager(e.to_string())),
        _ => {}
    }
    printer_stop.cancel();
    printer.shutdown().await;
    server.shutdown().await;
    outcome.map(|_| ())
}

/// The At CRD with its conversion webhook pointing at the manager's `/convert`.
async fn install_at_crd(
    h: &webhooks::DemoWebhooks,
    client: &Client,
    started: Instant,
) -> Result<(), DemoError> {
    h.install_at_crd(client).await?;
    say(
        started,
        "installed the CRD ats.cnat.programming-kubernetes.info (v1 stored, v1alpha1 served; conversion by the manager's /convert)",
    );
    Ok(())
}

/// Once the manager's webhook server listens (on a port of its own choosing): the webhook
/// Service pointed at it, as a cluster's Endpoints would be, and the At's admission webhooks
/// registered.
async fn register_admission(
    h: &webhooks::DemoWebhooks,
    server: &embedded_cluster::ClusterHandle,
    listeners: &sample_controller_runtime::manager::ListenersHandle,
    client: &Client,
    started: Instant,
) -> Result<(), DemoError> {
    let addr = webhooks::webhook_address(listeners, Duration::from_secs(30)).await?;
    server.set_service_endpoint(webhooks::SERVICE, &addr.to_string());
    h.install_admission(client).await?;
    say(
        started,
        &format!(
            "the manager's webhook server listens on https://{addr} (/convert, /mutate-at, /validate-at); admission webhooks registered"
        ),
    );
    Ok(())
}

/// The demo's first lines: what runs, where, and how to watch it with kubectl.
fn print_banner(operators: &[&'static str], server_url: &str, path: &str, serve: bool) {
    println!(
        "sample-controller demo: the {} operator{} on an embedded API server",
        operators.join(", "),
        if operators.len() == 1 { "" } else { "s" }
    );
    println!();
    println!("  API server  {} (in this process)", server_url);
    println!("  kubeconfig  {path}");
    for resource in operators.iter().map(|op| operators::watched_resource(op)) {
        println!("  watch it    kubectl --kubeconfig {path} get {resource} -w");
    }
    if serve {
        println!(
            "  --serve     the server and the controllers keep running after the stories, until Ctrl-C or SIGTERM"
        );
    } else {
        println!(
            "  (the demo exits when its stories end, and the server with it; add --serve to keep both"
        );
        println!(
            "   running and use them with kubectl: apply your own objects, watch the controllers act)"
        );
    }
    println!();
    println!("  every line says its story: [time] story | what happened");
    println!();
}

/// `--trace NAME`: prints every hop of the At `NAME`'s key as the manager records it, as lines
/// of the story `trace`, each with its time since the first hop. Ends when aborted.
fn spawn_trace(
    tracer: &KeyTracer,
    name: &str,
    started: Instant,
) -> Result<tokio::task::JoinHandle<()>, DemoError> {
    let key = format!("{DEMO_NAMESPACE}/{name}");
    let mut sub = tracer
        .subscribe(TraceFilter::key(&key))
        .map_err(|e| DemoError::Flag(format!("--trace: {e}")))?;
    say_in(
        started,
        "trace",
        &format!("following {key}: every hop, from its watch event to each sync's end"),
    );
    Ok(tokio::spawn(async move {
        let mut first = None;
        while let Some(hop) = sub.next_in_order().await {
            let zero = *first.get_or_insert(hop.at);
            say_in(started, "trace", &hop.line(zero));
        }
    }))
}

/// Once the manager's metrics server listens: where its `/trace` and `/machinery` page are.
async fn announce_machinery(
    listeners: sample_controller_runtime::manager::ListenersHandle,
    trace: Option<String>,
    started: Instant,
) {
    let Some(addr) = listeners.bound().await.and_then(|b| b.metrics) else {
        return;
    };
    let key = format!(
        "{DEMO_NAMESPACE}/{}",
        trace.as_deref().unwrap_or("example-at")
    );
    say_in(
        started,
        "demo",
        &format!(
            "the manager serves http://{addr}/metrics, the page http://{addr}/machinery?key={key} and sample-controller trace --address http://{addr} {key}"
        ),
    );
}

/// The controller manager, exactly as `sample-controller run` builds it (metrics, `/trace`
/// and `/machinery` at `metrics_addr`; no probes, no leader election: one process, one
/// manager).
fn manager_config(
    operators: &[&'static str],
    verbosity: u8,
    metrics_addr: Option<std::net::SocketAddr>,
) -> ManagerConfig {
    ManagerConfig {
        kubeconfig: None,
        master: None,
        context: None,
        namespace: None,
        controllers: operators.to_vec(),
        workers: 2,
        resync_period: Duration::from_secs(600),
        qps: 50.0,
        burst: 100,
        throttle_follows_server: false,
        leader_election: None,
        metrics_addr,
        health_addr: None,
        serving: sample_controller_runtime::health::probe_serving_limits(),
        shutdown_timeout: Duration::from_secs(10),
        log_format: LogFormat::Text,
        verbosity,
        otlp: None,
    }
}

/// The end of the stories: what the At controller did (each pod, the log of one) and each
/// other operator's summary.
async fn print_ending(
    client: &Client,
    operators: &[&'static str],
    runs: &[String],
    invalid: &str,
    with_at: bool,
) {
    println!();
    if with_at {
        if invalid.is_empty() {
            println!(
                "done: example-at and failing-at are DONE; the invalid Ats were refused at admission."
            );
        } else {
            println!("done: example-at and failing-at are DONE; {invalid}: InvalidSpec warning.");
        }
        println!(
            "      the API server saw {} pod creations: one per runnable At, none before its schedule:",
            runs.len()
        );
        for run in runs {
            println!("      {run}");
        }
        println!();
        println!("$ kubectl logs example-at-pod");
        match pod_log(client, "example-at-pod").await {
            Ok(text) => print!("{text}"),
            Err(e) => println!("(could not read the log: {e})"),
        }
    }
    for op in operators.iter().filter(|o| **o != "at") {
        println!("done: {}", operators::summary(op));
    }
}

/// With `--serve`: what to try with kubectl while the server and the controllers keep running.
fn print_serving(operators: &[&'static str], server_url: &str, path: &str, with_at: bool) {
    println!();
    let resources: BTreeSet<&str> = operators
        .iter()
        .flat_map(|op| operators::shown_resources(op).iter().copied())
        .collect();
    println!(
        "still serving (--serve): the API server at {server_url} and the controllers keep running."
    );
    println!(
        "  look:   kubectl --kubeconfig {path} get {}",
        resources.into_iter().collect::<Vec<_>>().join(",")
    );
    if with_at {
        println!(
            "  why:    kubectl --kubeconfig {path} describe at example-at   (events, conditions)"
        );
        println!(
            "  shapes: kubectl --kubeconfig {path} get ats.v1alpha1.cnat.programming-kubernetes.info -o yaml   (the book's version, converted by /convert)"
        );
    }
    let examples: Vec<String> = operators
        .iter()
        .map(|op| format!("-f artifacts/examples/{}", operators::example_file(op)))
        .collect();
    println!(
        "  act:    kubectl --kubeconfig {path} apply {}   (from the repository root; the controllers pick them up)",
        examples.join(" ")
    );
    println!("press Ctrl-C (or send SIGTERM) to stop");
}

/// The log of a pod in the demo namespace (`GET .../pods/NAME/log`, what `kubectl logs`
/// reads).
async fn pod_log(client: &Client, name: &str) -> Result<String, client::Error> {
    let req = http::Request::get(format!(
        "/api/v1/namespaces/{DEMO_NAMESPACE}/pods/{name}/log"
    ))
    .body(bytes::Bytes::new())
    .map_err(|e| client::Error::Other(format!("building the log request: {e}")))?;
    let body = client.request_bytes(req).await?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The At part of the story: create the Ats, then wait until the runnable ones are `DONE`
/// and the blank one carries its Warning. Returns the runnable Ats' schedule.
async fn at_story(
    client: &Client,
    opts: &DemoOptions,
    seen: &Mutex<Seen>,
    started: Instant,
    deadline: Instant,
    manager: &tokio::task::JoinHandle<Result<(), sample_controller_runtime::manager::ManagerError>>,
) -> Result<jiff::Timestamp, DemoError> {
    let due = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::try_from(opts.delay).unwrap_or_default())
        .unwrap_or_else(|_| jiff::Timestamp::now());
    let due = sample_operators::apis::conditions::truncate_to_seconds(due);
    let due_str = due.to_string();
    let ats = Api::<At>::namespaced(client.clone(), DEMO_NAMESPACE);
    let alpha_ats = Api::<AtV1alpha1>::namespaced(client.clone(), DEMO_NAMESPACE);
    create_book_example(&ats, &alpha_ats, &due_str, started).await?;
    create_failing_at(&ats, &alpha_ats, &due_str, started).await?;
    create_invalid_ats(&ats, seen, &due_str, started).await?;
    loop {
        if let Some(waiting) = still_waiting(seen) {
            if Instant::now() >= deadline {
                return Err(DemoError::Timeout {
                    timeout: format_duration(opts.timeout),
                    waiting,
                });
            }
            if manager.is_finished() {
                return Err(DemoError::Manager("it exited early".to_string()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        } else {
            return Ok(due);
        }
    }
}

/// The book's example, exactly as shipped (`v1alpha1`), with only its schedule moved: created
/// in `v1alpha1` and read back as `v1` (the API server stores `v1` and converts both ways
/// through the manager's `/convert`).
async fn create_book_example(
    ats: &Api<At>,
    alpha_ats: &Api<AtV1alpha1>,
    due_str: &str,
    started: Instant,
) -> Result<(), DemoError> {
    let pp = PostParams::default();
    let mut example: AtV1alpha1 =
        serde_yaml_ng::from_str(BOOK_EXAMPLE).map_err(|e| DemoError::Api {
            what: "reading artifacts/examples/cnat-example.yaml".to_string(),
            source: client::Error::Other(e.to_string()),
        })?;
    example.metadata.namespace = Some(DEMO_NAMESPACE.to_string());
    example.spec.schedule = due_str.to_string();
    alpha_ats
        .create(&pp, &example)
        .await
        .map_err(api_err("creating At example-at in v1alpha1"))?;
    say(
        started,
        &format!(
            "created at/example-at     in v1alpha1: schedule {}  command {:?}",
            example.spec.schedule,
            example.spec.command()
        ),
    );
    let as_v1 = ats
        .get("example-at")
        .await
        .map_err(api_err("reading At example-at as v1"))?;
    say(
        started,
        &format!(
            "  read back as v1:          spec.run.command {:?}  spec.run.image {:?} (defaulted by /mutate-at)",
            as_v1.spec.run.command,
            as_v1.spec.run.image.as_deref().unwrap_or("")
        ),
    );
    Ok(())
}

/// The other way: a `v1` At with a field `v1alpha1` has no place for, read back as `v1alpha1`;
/// the field waits in an annotation, so nothing is lost on the way back.
async fn create_failing_at(
    ats: &Api<At>,
    alpha_ats: &Api<AtV1alpha1>,
    due_str: &str,
    started: Instant,
) -> Result<(), DemoError> {
    let pp = PostParams::default();
    let mut failing = new_at("failing-at", due_str, "exit 3");
    failing.spec.run.active_deadline_seconds = Some(60);
    ats.create(&pp, &failing)
        .await
        .map_err(api_err("creating At failing-at"))?;
    say(
        started,
        &format!(
            "created at/failing-at     in v1: schedule {}  run {{command: \"exit 3\", activeDeadlineSeconds: 60}}",
            failing.spec.schedule
        ),
    );
    let as_alpha = alpha_ats
        .get("failing-at")
        .await
        .map_err(api_err("reading At failing-at as v1alpha1"))?;
    let kept = as_alpha
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(conversion::ANNOTATION))
        .map(String::as_str)
        .unwrap_or("(none)");
    say(
        started,
        &format!(
            "  read back as v1alpha1:    spec.command {:?}; kept for v1 in annotation {}: {kept}",
            as_alpha.spec.command(),
            conversion::ANNOTATION
        ),
    );
    Ok(())
}

/// Two Ats that are never stored: a command of spaces passes the schema's minLength and the
/// manager's `/validate-at` refuses it; a schedule that is no time fails the schema. (Without the
/// webhook the controller would mark the first `InvalidSpec`: then the story waits for that.)
async fn create_invalid_ats(
    ats: &Api<At>,
    seen: &Mutex<Seen>,
    due_str: &str,
    started: Instant,
) -> Result<(), DemoError> {
    let pp = PostParams::default();
    match ats
        .create(&pp, &new_at("blank-command", due_str, "   "))
        .await
    {
        Err(e) if matches!(e.code(), Some(400..=499)) => say(
            started,
            &format!(
                "the manager's /validate-at webhook refused at/blank-command at admission: {e}"
            ),
        ),
        Err(e) => return Err(api_err("creating At blank-command")(e)),
        Ok(_) => {
            say(
                started,
                "created at/blank-command  command \"   \" (admission let it through; the controller will not run it)",
            );
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .expect_invalid
                .push("blank-command".to_string());
        }
    }
    match ats
        .create(&pp, &new_at("not-a-time", "tomorrow at noon", "echo never"))
        .await
    {
        Err(e) if e.is_invalid() => say(
            started,
            &format!("the API server rejected at/not-a-time at admission: {e}"),
        ),
        Err(e) => return Err(api_err("creating At not-a-time")(e)),
        Ok(_) => {
            say(
                started,
                "created at/not-a-time     schedule \"tomorrow at noon\" (admission let it through; the controller will not)",
            );
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .expect_invalid
                .push("not-a-time".to_string());
        }
    }

    Ok(())
}

/// The Ats whose commands run: each must have run exactly once.
const RUNNABLE_ATS: [&str; 2] = ["example-at", "failing-at"];

/// How late after its schedule a pod may be created and still count as "at its schedule".
/// The controller wakes at the schedule itself; the slack is for a loaded machine.
const LATE_SLACK: jiff::SignedDuration = jiff::SignedDuration::from_secs(10);

/// One runnable At's run, as the demo measured it after the story.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredRun {
    /// The At's name.
    pub at: String,
    /// Its `spec.schedule`.
    pub schedule: jiff::Timestamp,
    /// Its pod (`<name>-pod` with this At's controller ownerReference) and the pod's
    /// `creationTimestamp`, if there is one.
    pub pod: Option<(String, jiff::Timestamp)>,
}

/// Checks "the controller ran each command exactly once, at its schedule" from what the
/// server saw: `pod_creations` successful pod creations (HTTP `201` answers to `create pods`;
/// the simulated workload controllers write pods to the store directly and are not counted)
/// and each runnable At's pod. Returns one line per At on success, else what does not hold.
pub fn check_runs(pod_creations: u64, runs: &[MeasuredRun]) -> Result<Vec<String>, String> {
    let mut wrong = Vec::new();
    if pod_creations != runs.len() as u64 {
        wrong.push(format!(
            "the API server created {pod_creations} pods for {} runnable Ats (want exactly one each)",
            runs.len()
        ));
    }
    let mut lines = Vec::new();
    for run in runs {
        let Some((pod, created)) = &run.pod else {
            wrong.push(format!("at/{} has no pod of its own", run.at));
            continue;
        };
        let after = created.duration_since(run.schedule);
        if after.is_negative() {
            wrong.push(format!(
                "pod/{pod} was created at {created}, {}s before at/{}'s schedule {}",
                -after.as_secs(),
                run.at,
                run.schedule
            ));
        } else if after > LATE_SLACK {
            wrong.push(format!(
                "pod/{pod} was created at {created}, {}s after at/{}'s schedule {} (more than {}s late)",
                after.as_secs(),
                run.at,
                run.schedule,
                LATE_SLACK.as_secs()
            ));
        } else {
            lines.push(format!(
                "at/{:<14} pod/{pod} created {created}, {}s after its schedule {}",
                run.at,
                after.as_secs(),
                run.schedule
            ));
        }
    }
    if wrong.is_empty() {
        Ok(lines)
    } else {
        Err(wrong.join("; "))
    }
}

/// Measures each runnable At's pod and the server's pod creations, then [`check_runs`].
async fn check_each_ran_once(
    client: &Client,
    server: &embedded_cluster::ClusterHandle,
    schedule: jiff::Timestamp,
) -> Result<Vec<String>, DemoError> {
    let ats = Api::<At>::namespaced(client.clone(), DEMO_NAMESPACE);
    let pods = Api::<Pod>::namespaced(client.clone(), DEMO_NAMESPACE);
    let mut runs = Vec::new();
    for name in RUNNABLE_ATS {
        let at = ats
            .get(name)
            .await
            .map_err(api_err(format!("reading At {name}")))?;
        let pod_name = at.pod_name();
        let pod =
            pods.get_opt(&pod_name)
                .await
                .map_err(api_err(format!("reading pod {pod_name}")))?
                .filter(|p| {
                    p.metadata.owner_references.iter().flatten().any(|o| {
                        o.controller == Some(true) && Some(&o.uid) == at.metadata.uid.as_ref()
                    })
                })
                .and_then(|p| p.metadata.creation_timestamp)
                .map(|t| (pod_name, t.0));
        let schedule = at.spec.schedule.parse().unwrap_or(schedule);
        runs.push(MeasuredRun {
            at: name.to_string(),
            schedule,
            pod,
        });
    }
    let creations = server.request_log().count_code("create", "pods", 201);
    check_runs(creations, &runs).map_err(DemoError::NotExactlyOnce)
}

fn new_at(name: &str, schedule: &str, command: &str) -> At {
    At {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(DEMO_NAMESPACE.to_string()),
            ..ObjectMeta::default()
        },
        spec: AtSpec::new(schedule, command),
        status: None,
    }
}

async fn write_private(path: &std::path::Path, contents: &str) -> Result<(), DemoError> {
    let err = |source| DemoError::Kubeconfig {
        path: path.display().to_string(),
        source,
    };
    tokio::fs::write(path, contents).await.map_err(err)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .await
            .map_err(err)?;
    }
    Ok(())
}

tokio::task_local! {
    /// The story (operator) the current task tells; [`say`] prefixes its lines with it.
    pub(crate) static STORY: &'static str;
}

/// Prints one line of the story the current task tells (see [`STORY`]; `demo` outside one).
fn say(started: Instant, line: &str) {
    say_in(started, STORY.try_with(|s| *s).unwrap_or("demo"), line);
}

/// Prints one line of `story`: `[  time] story        | line`, so the stories that run side
/// by side can be told apart (or filtered: `grep '] tdset '`).
fn say_in(started: Instant, story: &str, line: &str) {
    println!(
        "[{:>6.1}s] {story:<12} | {line}",
        started.elapsed().as_secs_f64()
    );
}

/// The story an event belongs to, from the kind of its object (the pods and deployments an
/// operator creates carry their owner's story in their name only: `cluster`).
fn story_of_kind(kind: &str) -> &'static str {
    match kind {
        "at" => "at",
        "tdset" => "tdset",
        "rediscluster" => "rediscluster",
        "myapp" => "myapp",
        "foo" => "foo",
        _ => "cluster",
    }
}

/// Prints At phase changes and events as the informers deliver them, and records what the
/// end condition needs.
fn register_printers(
    factory: &SharedInformerFactory<ClientSource>,
    seen: Arc<Mutex<Seen>>,
    started: Instant,
    with_at: bool,
) {
    let on_at = {
        let seen = Arc::clone(&seen);
        move |at: &AtSummary| {
            let name = at.metadata.name.as_deref().unwrap_or_default().to_owned();
            let phase = at.phase();
            let status = at.status.clone().unwrap_or_default();
            let invalid = find_condition(&status.conditions, CONDITION_INVALID_SPEC)
                .is_some_and(|c| c.status == ConditionStatus::True);
            let mut s = seen.lock().unwrap_or_else(|p| p.into_inner());
            if invalid {
                s.invalid.insert(name.clone());
            }
            if at.status.is_none() || s.phases.get(&name) == Some(&phase) {
                return;
            }
            s.phases.insert(name.clone(), phase);
            drop(s);
            let mut line = format!("at/{name:<14} {:<8}", phase.as_str());
            if phase == AtPhase::Done {
                let result = status.result.map(|r| format!("{r:?}")).unwrap_or_default();
                let code = status
                    .exit_code
                    .map(|c| format!(" exit code {c}"))
                    .unwrap_or_default();
                line.push_str(&format!(" result {result}{code}"));
            } else if let Some(m) = &status.message {
                line.push_str(&format!(" {m}"));
            }
            say_in(started, "at", &line);
        }
    };
    // Only an At story has Ats to print: without it no At CRD is installed, and an At
    // informer would only log its failing lists.
    if with_at {
        let on_at_add = on_at.clone();
        // The controller's own At cache (one watch, shared).
        let ats = factory.informer::<AtSummary>();
        let _ = ats.add_event_handler(
            EventHandlerFns::<AtSummary>::new()
                .on_add(move |at, _| on_at_add(&at))
                .on_update(move |_, at| on_at(&at)),
        );
    }

    let print_event = move |e: &Event| {
        let kind = e
            .involved_object
            .kind
            .clone()
            .unwrap_or_default()
            .to_lowercase();
        let name = e.involved_object.name.clone().unwrap_or_default();
        let type_ = e.type_.clone().unwrap_or_default();
        let reason_ = e.reason.clone().unwrap_or_default();
        let count = e.count.unwrap_or(1);
        if type_ == "Warning" {
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .warnings
                .insert((name.clone(), reason_.clone()));
        }
        let repeat = if count > 1 {
            format!(" (x{count})")
        } else {
            String::new()
        };
        say_in(
            started,
            story_of_kind(&kind),
            &format!(
                "  event {type_:<7} {reason_:<17} {kind}/{name}: {}{repeat}",
                e.message.clone().unwrap_or_default()
            ),
        );
    };
    let print_event_add = print_event.clone();
    let events = factory.informer::<Event>();
    let _ = events.add_event_handler(
        EventHandlerFns::<Event>::new()
            .on_add(move |e, _| print_event_add(&e))
            .on_update(move |old, new| {
                if old.count != new.count {
                    print_event(&new);
                }
            }),
    );
}

/// `None` when the story is over, else what it still waits for.
fn still_waiting(seen: &Mutex<Seen>) -> Option<String> {
    let s = seen.lock().unwrap_or_else(|p| p.into_inner());
    let mut waiting = Vec::new();
    for name in ["example-at", "failing-at"] {
        if s.phases.get(name) != Some(&AtPhase::Done) {
            waiting.push(format!("{name} to be DONE"));
        }
    }
    for name in &s.expect_invalid {
        let warned = s
            .warnings
            .contains(&(name.clone(), reason::INVALID_SPEC.to_string()));
        if !(s.invalid.contains(name) && warned) {
            waiting.push(format!("{name}'s InvalidSpec warning"));
        }
    }
    (!waiting.is_empty()).then(|| waiting.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    fn run(at: &str, created: Option<&str>) -> MeasuredRun {
        MeasuredRun {
            at: at.to_string(),
            schedule: ts("2030-06-03T10:00:00Z"),
            pod: created.map(|c| (format!("{at}-pod"), ts(c))),
        }
    }

    #[test]
    fn one_pod_each_at_or_after_the_schedule_holds() {
        let lines = check_runs(
            2,
            &[
                run("example-at", Some("2030-06-03T10:00:00Z")),
                run("failing-at", Some("2030-06-03T10:00:01Z")),
            ],
        )
        .unwrap();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].contains("pod/example-at-pod created 2030-06-03T10:00:00Z, 0s after"));
        assert!(lines[1].contains("pod/failing-at-pod created 2030-06-03T10:00:01Z, 1s after"));
    }

    #[test]
    fn a_second_pod_creation_is_caught() {
        let runs = [
            run("example-at", Some("2030-06-03T10:00:00Z")),
            run("failing-at", Some("2030-06-03T10:00:00Z")),
        ];
        let err = check_runs(3, &runs).unwrap_err();
        assert!(err.contains("created 3 pods for 2 runnable Ats"), "{err}");
    }

    #[test]
    fn an_early_a_late_and_a_missing_pod_are_caught() {
        let err = check_runs(
            2,
            &[
                run("example-at", Some("2030-06-03T09:59:58Z")),
                run("failing-at", None),
            ],
        )
        .unwrap_err();
        assert!(
            err.contains("pod/example-at-pod was created at 2030-06-03T09:59:58Z, 2s before"),
            "{err}"
        );
        assert!(err.contains("at/failing-at has no pod of its own"), "{err}");
        let err = check_runs(1, &[run("example-at", Some("2030-06-03T10:01:00Z"))]).unwrap_err();
        assert!(err.contains("60s after at/example-at's schedule"), "{err}");
    }

    #[test]
    fn a_failed_check_is_a_demo_error_naming_it() {
        let e = DemoError::NotExactlyOnce("at/failing-at has no pod of its own".to_string());
        assert_eq!(
            e.to_string(),
            "the At controller did not run each command exactly once at its schedule: at/failing-at has no pod of its own"
        );
    }
}
