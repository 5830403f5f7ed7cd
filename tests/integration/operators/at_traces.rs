//! Traces: a running manager wraps every sync in a root `sync` span (controller, key, result,
//! requeue) and every API request of that sync in a child `request` span (verb, resource,
//! subresource, code). Recorded here with a small `tracing` layer that keeps each span's
//! fields and parent.

use crate::support::at::*;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sample_controller_runtime::controller::Clock;
use tracing::Subscriber;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

#[derive(Clone, Debug, Default)]
struct SpanRec {
    name: String,
    parent: Option<u64>,
    fields: BTreeMap<String, String>,
}

#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<HashMap<u64, SpanRec>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut rec = SpanRec {
            name: attrs.metadata().name().to_owned(),
            parent: ctx
                .span(id)
                .and_then(|s| s.parent())
                .map(|p| p.id().into_u64()),
            ..Default::default()
        };
        attrs.record(&mut Fields(&mut rec.fields));
        self.0.lock().unwrap().insert(id.into_u64(), rec);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        if let Some(rec) = self.0.lock().unwrap().get_mut(&id.into_u64()) {
            values.record(&mut Fields(&mut rec.fields));
        }
    }
}

impl Recorder {
    fn spans(&self) -> HashMap<u64, SpanRec> {
        self.0.lock().unwrap().clone()
    }
}

#[tokio::test(start_paused = true)]
async fn a_sync_is_a_root_span_and_its_api_requests_are_its_children() {
    let recorder = Recorder::default();
    let subscriber = tracing_subscriber::registry().with(
        recorder
            .clone()
            .with_filter(tracing_subscriber::filter::LevelFilter::DEBUG),
    );
    let _guard = tracing::subscriber::set_default(subscriber);

    let _ticker = Ticker::start();
    let (server, client) = server().await;
    let clock = Clock::new();
    let manager = start_manager(&manager_client(&server), manager_config(), clock).await;
    let now = in_the_future(&clock, Duration::ZERO);
    create_at(&client, &at("traced", &now, "echo hi")).await;
    wait_for_pod(&client, "traced-pod").await;
    wait_until("a sync to create the pod", || async {
        recorder.spans().values().any(|s| {
            s.name == "request"
                && s.fields.get("resource").map(String::as_str) == Some("pods")
                && s.fields.get("code").map(String::as_str) == Some("201")
        })
    })
    .await;

    let spans = recorder.spans();
    let (create_pod_id, create_pod) = spans
        .iter()
        .find(|(_, s)| {
            s.name == "request"
                && s.fields.get("verb").map(String::as_str) == Some("POST")
                && s.fields.get("resource").map(String::as_str) == Some("pods")
        })
        .expect("a request span for the pod's POST");
    assert_eq!(create_pod.fields["code"], "201", "{create_pod:?}");
    assert_eq!(create_pod.fields["subresource"], "");
    let parent = create_pod.parent.expect("the request span has a parent");
    let sync = &spans[&parent];
    assert_eq!(sync.name, "sync", "{sync:?} (child {create_pod_id})");
    assert_eq!(sync.parent, None, "a sync is a root span");
    assert_eq!(sync.fields["controller"], "at");
    assert_eq!(sync.fields["key"], format!("{NS}/traced"));
    // Status writes (PUT or PATCH .../status) are children of syncs too.
    assert!(
        spans.values().any(|s| s.name == "request"
            && s.fields.get("resource").map(String::as_str) == Some("ats")
            && s.fields.get("subresource").map(String::as_str) == Some("status")
            && s.parent.is_some_and(|p| spans[&p].name == "sync")),
        "{spans:#?}"
    );
    // Every finished sync says how it ended and whether the key went back on the queue.
    let finished: Vec<&SpanRec> = spans
        .values()
        .filter(|s| s.name == "sync" && s.fields.contains_key("result"))
        .collect();
    assert!(!finished.is_empty());
    for s in &finished {
        let requeue = s.fields["requeue"].as_str();
        match s.fields["result"].as_str() {
            "success" => assert_eq!(requeue, "false", "{s:?}"),
            "requeue_after" => {
                assert_eq!(requeue, "true", "{s:?}");
                assert!(s.fields.contains_key("requeue_after_ms"), "{s:?}");
            }
            "error" => assert_eq!(requeue, "true", "{s:?}"),
            other => panic!("unexpected result {other:?}"),
        }
    }
    assert!(sync.fields.contains_key("result"), "{sync:?}");

    manager.stop().await.unwrap();
    server.shutdown().await;
}
