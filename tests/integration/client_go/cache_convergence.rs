//! Convergence property of the informer, against the in-memory fake lister-watcher
//! (`cache::testing`) on tokio's paused clock.
//!
//! Random sequences of creates, updates and deletes are interleaved with random faults: watches
//! closed, history compacted (410 on resume), deletions lost while disconnected, 500s on list,
//! 429 and connection refused on watch, errors inside the stream, with or without streaming
//! lists (and servers that reject them). After the faults stop and the clock runs on, the
//! property is:
//!
//! * the cache equals the server's objects (same keys, same resourceVersions);
//! * every handler saw a consistent history: no add for a key it already had, no update or
//!   delete for a key it did not have, updates whose `old` is exactly what it last saw and never
//!   go back in resourceVersion, and its final view equals the server's objects.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use proptest::prelude::*;
use sample_client_go::cache::informer::InformerOptions;
use sample_client_go::cache::testing::{FakeListerWatcher, meta};
use sample_client_go::cache::{
    Deleted, ReflectorConfig, ResourceEventHandler, SharedIndexInformer, key_of,
};
use sample_client_go::client::{Error, TransportError, TransportKind};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
enum Op {
    Upsert(u8),
    Delete(u8),
    CloseWatches,
    Compact,
    Expire,
    LostDelete(u8),
    FailList,
    FailWatch429,
    FailWatchRefused,
    StreamError,
    Wait(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..12).prop_map(Op::Upsert),
        3 => (0u8..12).prop_map(Op::Delete),
        1 => Just(Op::CloseWatches),
        1 => Just(Op::Compact),
        1 => Just(Op::Expire),
        1 => (0u8..12).prop_map(Op::LostDelete),
        1 => Just(Op::FailList),
        1 => Just(Op::FailWatch429),
        1 => Just(Op::FailWatchRefused),
        1 => Just(Op::StreamError),
        3 => (0u16..3000).prop_map(Op::Wait),
    ]
}

fn pod(i: u8) -> Pod {
    Pod {
        metadata: meta("ns", &format!("p{i}"), &[]),
        ..Default::default()
    }
}

fn rv_num(p: &Pod) -> u64 {
    p.metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// A handler that checks the history it is given and keeps its own view of the world.
#[derive(Clone, Default)]
struct Checker {
    view: Arc<Mutex<BTreeMap<String, u64>>>,
    violations: Arc<Mutex<Vec<String>>>,
}

impl Checker {
    fn violation(&self, v: String) {
        self.violations.lock().unwrap().push(v);
    }
}

impl ResourceEventHandler<Pod> for Checker {
    fn on_add(&self, obj: Arc<Pod>, _initial: bool) {
        let key = key_of(obj.as_ref());
        if let Some(old) = self.view.lock().unwrap().insert(key.clone(), rv_num(&obj)) {
            self.violation(format!("add of {key} which was present at rv {old}"));
        }
    }
    fn on_update(&self, old: Arc<Pod>, new: Arc<Pod>) {
        let key = key_of(new.as_ref());
        let mut view = self.view.lock().unwrap();
        match view.get(&key).copied() {
            None => self.violation(format!("update of unknown {key}")),
            Some(seen) => {
                if seen != rv_num(&old) {
                    self.violation(format!(
                        "update of {key}: old rv {} but handler last saw {seen}",
                        rv_num(&old)
                    ));
                }
                if rv_num(&new) < seen {
                    self.violation(format!(
                        "update of {key} went back from {seen} to {}",
                        rv_num(&new)
                    ));
                }
            }
        }
        view.insert(key, rv_num(&new));
    }
    fn on_delete(&self, d: Deleted<Pod>) {
        let key = d.key();
        if self.view.lock().unwrap().remove(&key).is_none() {
            self.violation(format!("delete of unknown {key}"));
        }
    }
}

fn truth(fake: &FakeListerWatcher<Pod>) -> BTreeMap<String, u64> {
    fake.objects()
        .iter()
        .map(|p| (key_of(p), rv_num(p)))
        .collect()
}

fn run_case(ops: Vec<Op>, streaming: bool, server_streams: bool) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    rt.block_on(async move {
        let fake = FakeListerWatcher::new();
        fake.set_streaming_list_support(server_streams);
        for i in 0..4 {
            fake.upsert(pod(i));
        }
        let inf = SharedIndexInformer::new(
            fake.clone(),
            InformerOptions {
                default_resync: Duration::from_secs(7),
                reflector: ReflectorConfig {
                    streaming_list: streaming,
                    ..Default::default()
                },
                ..InformerOptions::default()
            },
        );
        let early = Checker::default();
        let no_resync = Checker::default();
        inf.add_event_handler(early.clone()).unwrap();
        inf.add_event_handler_with_resync_period(no_resync.clone(), Duration::ZERO)
            .unwrap();
        let cancel = CancellationToken::new();
        let task = tokio::spawn({
            let (i, c) = (inf.clone(), cancel.clone());
            async move { i.run(c).await }
        });
        let mut late = None;
        for (n, op) in ops.into_iter().enumerate() {
            match op {
                Op::Upsert(i) => {
                    fake.upsert(pod(i));
                }
                Op::Delete(i) => {
                    fake.delete(&format!("ns/p{i}"));
                }
                Op::CloseWatches => fake.close_watches(),
                Op::Compact => fake.compact(),
                Op::Expire => {
                    fake.compact();
                    fake.error_watches(Error::status(410, "Expired", "too old resource version"));
                }
                Op::LostDelete(i) => {
                    fake.close_watches();
                    fake.delete_silently(&format!("ns/p{i}"));
                    fake.compact();
                }
                Op::FailList => {
                    fake.fail_next_list(Error::status(500, "InternalError", "etcd timeout"))
                }
                Op::FailWatch429 => {
                    fake.fail_next_watch(Error::status(429, "TooManyRequests", "too many requests"))
                }
                Op::FailWatchRefused => {
                    fake.fail_next_watch(Error::Transport(TransportError::new(
                        TransportKind::ConnectionRefused,
                        "GET /api/v1/pods?watch=true",
                        "tcp connect error: Connection refused (os error 111)",
                    )))
                }
                Op::StreamError => {
                    fake.error_watches(Error::status(500, "InternalError", "stream broke"))
                }
                Op::Wait(ms) => tokio::time::sleep(Duration::from_millis(ms.into())).await,
            }
            // A handler that joins half-way must catch up through the replay.
            if n == 5 {
                let c = Checker::default();
                inf.add_event_handler(c.clone()).unwrap();
                late = Some(c);
            }
            tokio::task::yield_now().await;
        }
        let handlers: Vec<Checker> = [Some(early), Some(no_resync), late]
            .into_iter()
            .flatten()
            .collect();
        // Quiescence: no more changes or faults; let the virtual clock run until everything
        // agrees (backoff is at most 60 s per step, so this is generous).
        let want = truth(&fake);
        let mut converged = false;
        for _ in 0..3_000 {
            let cache: BTreeMap<String, u64> = inf
                .indexer()
                .list()
                .iter()
                .map(|p| (key_of(p.as_ref()), rv_num(p)))
                .collect();
            if cache == want && handlers.iter().all(|h| *h.view.lock().unwrap() == want) {
                converged = true;
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        cancel.cancel();
        task.await.unwrap();
        for h in &handlers {
            let v = h.violations.lock().unwrap();
            prop_assert!(v.is_empty(), "inconsistent history: {:?}", *v);
        }
        let cache: BTreeMap<String, u64> = inf
            .indexer()
            .list()
            .iter()
            .map(|p| (key_of(p.as_ref()), rv_num(p)))
            .collect();
        prop_assert_eq!(&cache, &want, "cache differs from the server");
        for h in &handlers {
            prop_assert_eq!(&*h.view.lock().unwrap(), &want, "a handler's view differs");
        }
        prop_assert!(converged);
        Ok(())
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn informer_converges_under_faults(
        ops in prop::collection::vec(op(), 1..60),
        streaming in any::<bool>(),
        server_streams in any::<bool>(),
    ) {
        run_case(ops, streaming, server_streams)?;
    }
}
