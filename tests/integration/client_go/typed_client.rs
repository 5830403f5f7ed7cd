//! The crate's own client against the embedded API server, configured from the kubeconfig the
//! server hands out: typed CRUD, status updates, conflicts and watches on the `At` kind.

use crate::support;

use futures_util::StreamExt;
use sample_client_go::client::{
    Api, Client, Config, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams,
};
use sample_operators::apis::{At, AtPhase, AtSpec, AtStatus};
use support::apiserver::*;

#[tokio::test]
async fn the_crate_client_works_from_the_servers_kubeconfig() {
    let s = start().await;
    let raw = TestClient::new(&s);
    let crd: serde_json::Value =
        serde_yaml_ng::from_str(sample_operators::apis::crds::AT_YAML).unwrap();
    let created = raw.post(CRDS, &crd).await;
    assert_eq!(created.code, 201, "{:?}", created.body);

    let config = Config::from_kubeconfig_yaml(&s.kubeconfig_yaml(), None).unwrap();
    let client = Client::new(config).unwrap();
    assert_eq!(client.default_namespace(), "default");
    let ats: Api<At> = Api::default_namespaced(client);

    let mut at = At::default();
    at.metadata.name = Some("example-at".into());
    at.spec = AtSpec::new("2019-04-12T10:12:00Z", "echo YAY");
    let at = ats.create(&PostParams::default(), &at).await.unwrap();
    assert_eq!(at.metadata.generation, Some(1));

    let list = ats.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let rv = list.metadata.resource_version.clone().unwrap();
    let mut events = ats
        .watch(&WatchParams {
            resource_version: Some(rv),
            ..Default::default()
        })
        .await
        .unwrap();

    let mut running = at.clone();
    running.status = Some(AtStatus {
        phase: Some(AtPhase::Running),
        ..Default::default()
    });
    let updated = ats
        .update_status(&PostParams::default(), &running)
        .await
        .unwrap();
    assert_eq!(
        updated.status.as_ref().unwrap().phase,
        Some(AtPhase::Running)
    );
    assert_eq!(
        updated.metadata.generation,
        Some(1),
        "status writes keep generation"
    );

    // The copy read before the status write is stale now.
    let stale = ats.update_status(&PostParams::default(), &running).await;
    assert!(stale.unwrap_err().is_conflict());

    match events.next().await.unwrap().unwrap() {
        WatchEvent::Modified(seen) => {
            assert_eq!(seen.status.unwrap().phase, Some(AtPhase::Running))
        }
        other => panic!("expected MODIFIED, got {other:?}"),
    }

    ats.delete("example-at", &DeleteParams::default())
        .await
        .unwrap();
    assert!(ats.get("example-at").await.unwrap_err().is_not_found());
    match events.next().await.unwrap().unwrap() {
        WatchEvent::Deleted(gone) => assert_eq!(gone.metadata.name.as_deref(), Some("example-at")),
        other => panic!("expected DELETED, got {other:?}"),
    }
    s.shutdown().await;
}
