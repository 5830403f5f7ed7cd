//! The Note controller against the embedded API server, the way envtest runs a Go controller:
//! a real API server over HTTPS, the real manager in-process, and the test reading what the
//! controller wrote.

use std::collections::BTreeMap;
use std::time::Duration;

use configmap_controller::{Note, NoteSpec, crd, registration};
use embedded_apiserver::ApiServer;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sample_client_go::client::{Api, Client, Config, ListParams, PostParams};
use sample_controller_runtime::manager::{LogFormat, Manager, ManagerConfig};
use tokio_util::sync::CancellationToken;

const NS: &str = "default";

fn manager_config() -> ManagerConfig {
    ManagerConfig {
        kubeconfig: None,
        master: None,
        context: None,
        namespace: None,
        controllers: vec!["notes"],
        workers: 2,
        resync_period: Duration::from_secs(600),
        qps: 0.0,
        burst: 0,
        throttle_follows_server: false,
        leader_election: None,
        metrics_addr: None,
        health_addr: None,
        serving: sample_controller_runtime::health::probe_serving_limits(),
        shutdown_timeout: Duration::from_secs(10),
        log_format: LogFormat::Text,
        verbosity: 0,
        otlp: None,
    }
}

/// Polls `check` every 50 ms until it returns `Some`, for at most 30 s.
async fn eventually<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn note(name: &str, pairs: &[(&str, &str)]) -> Note {
    Note {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        spec: NoteSpec {
            data: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        },
        status: None,
    }
}

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn config_map_data(cms: &Api<ConfigMap>, name: &str) -> Option<BTreeMap<String, String>> {
    cms.get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|cm| cm.data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_note_becomes_a_configmap_that_is_kept_in_step_with_it() {
    sample_client_go::install_crypto_provider();
    let server = ApiServer::builder().start().await.expect("server starts");
    let config = Config::from_kubeconfig_yaml(&server.kubeconfig_yaml(), None).unwrap();
    let client = Client::new(config).unwrap();
    let crd: CustomResourceDefinition = serde_json::from_value(crd()).unwrap();
    Api::<CustomResourceDefinition>::cluster(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("the Note CRD is created");
    let notes: Api<Note> = Api::namespaced(client.clone(), NS);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    eventually("the Note CRD to be served", || async {
        notes.list(&ListParams::default()).await.ok()
    })
    .await;

    // A ConfigMap that someone else owns, named like a Note to come.
    let foreign = ConfigMap {
        metadata: ObjectMeta {
            name: Some("taken".into()),
            ..ObjectMeta::default()
        },
        data: Some(data(&[("mine", "yes")])),
        ..ConfigMap::default()
    };
    cms.create(&PostParams::default(), &foreign).await.unwrap();

    let shutdown = CancellationToken::new();
    let manager = Manager::new(manager_config(), client.clone()).register(registration());
    assert_eq!(manager.known_controllers().names, vec!["notes"]);
    manager.preflight().await.expect("the CRD check passes");
    let running = tokio::spawn(manager.run(shutdown.clone()));

    // Created: the ConfigMap holds the Note's data and is controlled by it.
    let pp = PostParams::default();
    notes
        .create(&pp, &note("greeting", &[("hello", "world")]))
        .await
        .unwrap();
    eventually("the ConfigMap", || async {
        (config_map_data(&cms, "greeting").await? == data(&[("hello", "world")])).then_some(())
    })
    .await;
    let cm = cms.get("greeting").await.unwrap();
    let owner = &cm.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Note", "greeting")
    );
    assert_eq!(owner.controller, Some(true));
    let status = eventually("the Note's status", || async {
        notes
            .get("greeting")
            .await
            .ok()?
            .status
            .filter(|s| s.observed_generation == Some(1))
    })
    .await;
    assert_eq!(status.phase.as_deref(), Some("Synced"));
    assert_eq!(status.config_map.as_deref(), Some("greeting"));

    // The Note changes: the ConfigMap follows.
    let mut changed = notes.get("greeting").await.unwrap();
    changed.spec.data.insert("bye".into(), "moon".into());
    notes.update(&pp, &changed).await.unwrap();
    eventually("the ConfigMap to follow the Note", || async {
        (config_map_data(&cms, "greeting").await? == data(&[("bye", "moon"), ("hello", "world")]))
            .then_some(())
    })
    .await;

    // The ConfigMap is edited by hand (Owns): it is put back.
    let mut edited = cms.get("greeting").await.unwrap();
    edited.data = Some(data(&[("hello", "tampered")]));
    cms.update(&pp, &edited).await.unwrap();
    eventually("the ConfigMap to be put back", || async {
        (config_map_data(&cms, "greeting").await? == data(&[("bye", "moon"), ("hello", "world")]))
            .then_some(())
    })
    .await;

    // A name taken by someone else's ConfigMap: reported, and that ConfigMap left alone.
    notes
        .create(&pp, &note("taken", &[("hello", "world")]))
        .await
        .unwrap();
    let status = eventually("the conflict to be reported", || async {
        notes.get("taken").await.ok()?.status
    })
    .await;
    assert_eq!(status.phase.as_deref(), Some("Conflict"));
    assert_eq!(status.config_map, None);
    assert_eq!(
        config_map_data(&cms, "taken").await,
        Some(data(&[("mine", "yes")]))
    );

    shutdown.cancel();
    let result = tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the manager stops")
        .expect("the manager's task ends");
    assert!(result.is_ok(), "{result:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_crd_the_manager_says_which_one_is_missing() {
    sample_client_go::install_crypto_provider();
    let server = ApiServer::builder().start().await.expect("server starts");
    let config = Config::from_kubeconfig_yaml(&server.kubeconfig_yaml(), None).unwrap();
    let client = Client::new(config).unwrap();
    let manager = Manager::new(manager_config(), client).register(registration());
    let err = manager.preflight().await.expect_err("no Note CRD");
    assert!(err.to_string().contains("notes.notes.example.com"), "{err}");
}
