//! The on-disk copy of the store behind `--data-dir`: objects, the revision counter and the
//! watch history window, in a [redb](https://www.redb.org) database (`DIR/store.redb`).
//!
//! kube-apiserver keeps all of this in etcd; this server keeps it in memory ([`crate::storage::store`])
//! and, when asked to, mirrors every write here so that a restart (even after `kill -9`) resumes
//! where it stopped: the same objects with the same `resourceVersion`s, the revision counter
//! continuing from the last acknowledged write, and the history window, so a watch from a
//! revision still in the window resumes without a relist.
//!
//! ## Layout
//!
//! | table | key | value |
//! |---|---|---|
//! | `objects` | `storage \0 namespace \0 name` | the object's JSON |
//! | `history` | revision (`u64`) | the change: `{storage, kind, object, prev, at}` as JSON |
//! | `meta` | `rv`, `compacted` | the revision counter and the compaction point |
//!
//! ## Commits and acknowledgement
//!
//! [`Disk::enqueue`] is called under the store lock with the changes of one write, so batches
//! queue in revision order; it returns a ticket. [`Disk::wait`] blocks until that ticket is
//! committed: the first waiter that finds no commit running becomes the committer and commits
//! *everything* queued so far in one redb transaction (one fsync, `Durability::Immediate`, the
//! default), then wakes the others (group commit: the more concurrent writers, the more writes per
//! fsync). The store only answers a write after `wait` returns, so an acknowledged write is
//! on disk.
//!
//! ## A full disk: etcd's NOSPACE
//!
//! A commit that fails (disk full, I/O error) does not stop the server. As etcd raises its
//! `NOSPACE` alarm and then refuses writes while it keeps serving reads, the store here turns
//! **read-only**: the failed batch goes back to the head of the queue, the database is closed
//! (redb refuses every operation after an I/O error until it is reopened), and
//! [`Disk::failure`] holds the error. Requests that write are then answered `500`
//! `etcdserver: mvcc: database space exceeded` ([`crate::storage::store::Store::write_checked`]),
//! before they change anything; reads and watches go on. The write whose commit failed was
//! already applied in memory: its client gets the same error (its outcome is unknown to it, as
//! with an etcd timeout: it must read again), and it is committed with everything queued after
//! it once space returns. Each later write request first tries [`Disk::recover`]: the database
//! is reopened and the queue committed; once that succeeds the store is writable again.
//! Nothing acknowledged is ever lost: a restart finds the last committed state, which holds
//! every write that was answered with success.
//!
//! Invariant: after a commit, `history` holds exactly the changes with a revision above
//! `compacted`, and `objects` is the state at `rv`.
//!
//! ## Loading: bytes, not trees
//!
//! [`Disk::open`] reads every object and every history entry back as **JSON bytes**: each
//! object becomes a bytes-only [`Stored`] ([`Stored::from_json`], as an object that has rested,
//! see [`crate::storage::stored`]), decoded only when something reads it. A history entry is
//! parsed with its `object` and `prev` borrowed as raw JSON ([`RawValue`]), its key read by a
//! small parse of `metadata.namespace` and `metadata.name` ([`key_of_json`]); no tree is built.
//! A tree costs 10 to 15 times its JSON: loaded as trees, a history of 66.5 MiB of JSON took
//! the server to 1.3 GiB (figures below).
//!
//! Each version is one allocation again, as it was before the restart ([`Change::bytes`]
//! charges each version once): a change's `prev` holding the same bytes as the object of the
//! key's change before it *is* that object, and the newest change's object holding the same
//! bytes as the live object *is* the live object. The bytes are compared, not trees: every
//! JSON the store holds is serde_json's compact encoding of a tree (keys sorted), so two
//! versions are equal exactly when their bytes are. The entries are written as they always
//! were, `{"at","kind","object","prev","storage"}` with the objects' JSON spliced in (an object
//! that rests is written from its bytes, not decoded for it), so data directories of any
//! version load.
//!
//! After a restart the history's byte bound charges the loaded changes their JSON, as it
//! charges changes that rested; a watch that replays them, a LIST and the snapshot of a paged
//! LIST read them without keeping trees ([`crate::endpoints::watch`], [`Stored::with_value`],
//! [`Stored::key`]).
//!
//! ## Memory
//!
//! redb keeps a page cache of its own, by default 1 GiB, which keeps every page a read brings
//! in up to that size: loading the data directory would leave the whole file in it. Here the
//! cache is [`CACHE_BYTES`] (4 MiB): the load reads each page once, and a commit reads the few
//! pages of the B-trees it changes, which the kernel's page cache holds (not counted in the
//! server's RSS). With 16 MiB the cache stayed full and the server held 11 MiB more for it
//! after every restart, for no faster writes (`BIN=... HISTORY_MIB=60 REST_WAIT=5
//! hack/bench-restart.sh`, three runs of each alternated on a machine running a soak: writes
//! 13.5 to 14.3 s with 4 MiB against 12.3 to 15.5 s with 16 MiB; RSS once loaded 49 against
//! 60 MiB; the data directory of a one-hour soak, 744 MB with 13,000 events, loaded in 135
//! against 147 MiB).
//!
//! Measured with the release binary (`hack/bench-restart.sh`: 3,000 Ats with four status
//! updates each and 2,500 ConfigMaps of 100 keys written four to five times each, 25,054
//! changes; then `kill -9`, a restart, watches of both resources from the revision before the
//! writes (25,000 events), a watch of Ats from `resourceVersion=0`, and plain,
//! `resourceVersion=0` and paged LISTs of both), loading trees as the server did before, and
//! bytes as it does now (with the page cache at 16 MiB then; at 4 MiB each figure after the
//! restart is about 11 MiB lower):
//!
//! | | trees | bytes |
//! |---|---|---|
//! | RSS right after the writes | 398 MiB | 400 MiB |
//! | RSS 45 s later, before the kill (the objects have rested) | 129 MiB | 115 MiB |
//! | `/healthz` answers after the restart in | 5.1 s | 1.0 s |
//! | RSS once loaded (peak) | 1,342 MiB | 118 MiB |
//! | peak through the watches and LISTs | 1,370 MiB | 133 MiB |
//! | RSS 45 s later | 419 MiB | 119 MiB |
//! | `apiserver_storage_history_bytes` after the restart | 225 MiB (66.5 once rested) | 66.5 MiB |
//!
//! So a restart leaves the server where it was before the kill once its objects had rested:
//! its history's JSON (66.5 MiB), the live objects' JSON (about 15 MiB) and about 40 MiB of its
//! own (code, runtime, tables, the page cache above). Right after a burst of writes it holds
//! more (objects written less than `--rest-unread-after` before are trees,
//! [`crate::storage::stored`]). The writes, each committed before its answer, are no slower with
//! the small page cache: 76 s, against 90 s with redb's default (one run each, on a shared
//! machine).
//!
//! The price is CPU after the restart: a watch replaying a change of a built-in resource
//! decodes its object for that event and encodes it in Go's field order (a custom resource's
//! event is the stored bytes), where the trees loaded before were encoded once for all
//! watches. In another run of the same script the watches and LISTs took 4.1 s, against
//! 2.2 s with trees, after a load of 1.0 s instead of 3.4 s.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use std::collections::HashMap;

use redb::{Database, ReadableTable, TableDefinition};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::storage::store::{Change, ChangeType, Key, StorageKey, Stored};
use crate::storage::stored::key_of_json;

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
const HISTORY: TableDefinition<u64, &[u8]> = TableDefinition::new("history");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// The memory redb may keep for its page cache (see the module docs, "Memory"): a tenth for
/// the pages a commit writes, the rest for pages read or written before.
pub const CACHE_BYTES: usize = 4 << 20;

/// Opens (or creates) the database with a page cache of [`CACHE_BYTES`].
fn create(path: &Path) -> Result<Database, redb::DatabaseError> {
    Database::builder().set_cache_size(CACHE_BYTES).create(path)
}

/// Opening or reading the data directory failed.
#[derive(Debug, thiserror::Error)]
#[error("data directory {path}: {message}")]
pub struct DiskError {
    /// The file or directory.
    pub path: PathBuf,
    /// What went wrong.
    pub message: String,
}

/// What a data directory held at start, as JSON bytes (see the module docs, "Loading").
#[derive(Debug, Default)]
pub struct Loaded {
    /// The revision counter (0 for a new directory).
    pub rv: u64,
    /// The compaction point.
    pub compacted: u64,
    /// Every stored object with its storage key (`core/pods`, ...) and its `(namespace, name)`,
    /// bytes-only.
    pub objects: Vec<(StorageKey, Key, Arc<Stored>)>,
    /// The history window, oldest first, bytes-only, each version one allocation: a change's
    /// `prev` is the previous change's `object` of the same key, and the newest change's
    /// `object` is the live object of `objects`.
    pub history: Vec<Change>,
}

#[derive(Debug, Default)]
struct Queue {
    pending: Vec<Arc<Change>>,
    rv: u64,
    compacted: u64,
    enqueued: u64,
    committed: u64,
    committing: bool,
    /// Why the last commit failed, until one succeeds again.
    failed: Option<String>,
}

/// The open database and the group-commit queue.
pub struct Disk {
    /// `None` after a failed commit closed it (see the module docs).
    db: Mutex<Option<Database>>,
    path: PathBuf,
    queue: Mutex<Queue>,
    done: Condvar,
    /// Fault injection: commits fail as on a full disk ([`Disk::simulate_full`]).
    full: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Disk").field("path", &self.path).finish()
    }
}

fn object_key(storage: &str, obj: &Stored) -> String {
    let (ns, name) = obj.key();
    format!("{storage}\0{ns}\0{name}")
}

fn kind_from(s: &str) -> Option<ChangeType> {
    Some(match s {
        "ADDED" => ChangeType::Added,
        "MODIFIED" => ChangeType::Modified,
        "DELETED" => ChangeType::Deleted,
        _ => return None,
    })
}

/// A history entry as stored: `{"at":..,"kind":..,"object":..,"prev":..,"storage":..}`, the
/// objects' JSON written as they are (a rested object is not decoded for it).
fn encode_change(c: &Change) -> Vec<u8> {
    let object = c.object.to_json();
    let prev = c.prev.as_ref().map(|p| p.to_json());
    let mut out = Vec::with_capacity(object.len() + prev.as_ref().map_or(4, Vec::len) + 96);
    out.extend_from_slice(
        format!(
            "{{\"at\":{},\"kind\":\"{}\",\"object\":",
            c.at_ms,
            c.kind.as_str()
        )
        .as_bytes(),
    );
    out.extend_from_slice(&object);
    out.extend_from_slice(b",\"prev\":");
    out.extend_from_slice(prev.as_deref().unwrap_or(b"null"));
    out.extend_from_slice(b",\"storage\":");
    out.extend_from_slice(&serde_json::to_vec(c.storage.as_str()).unwrap_or_default());
    out.push(b'}');
    out
}

/// A history entry as read: the objects borrowed as raw JSON, not parsed into trees.
#[derive(serde::Deserialize)]
struct Record<'a> {
    #[serde(borrow)]
    storage: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    object: &'a RawValue,
    #[serde(borrow, default)]
    prev: Option<&'a RawValue>,
    at: u64,
}

fn parse_record(rv: u64, bytes: &[u8]) -> Result<Record<'_>, String> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    // Written by this module from objects whose depth was checked when they were written.
    de.disable_recursion_limit();
    let record = Record::deserialize(&mut de)
        .and_then(|r| de.end().map(|()| r))
        .map_err(|e| format!("history entry {rv}: {e}"))?;
    if kind_from(&record.kind).is_none() {
        return Err(format!(
            "history entry {rv}: invalid kind {:?}",
            record.kind
        ));
    }
    Ok(record)
}

/// The objects of a data directory, loaded as bytes and shared as [`Loaded`] says.
#[derive(Default)]
struct Loader {
    /// One key per resource, shared by its objects' buckets and its changes.
    storages: HashMap<String, StorageKey>,
    /// The live objects, by storage and key.
    live: HashMap<(StorageKey, Key), Arc<Stored>>,
    /// The object of the newest change loaded so far, by storage and key.
    newest: HashMap<(StorageKey, Key), Arc<Stored>>,
}

impl Loader {
    fn storage(&mut self, s: &str) -> StorageKey {
        if let Some(k) = self.storages.get(s) {
            return k.clone();
        }
        let k = StorageKey::from(s);
        self.storages.insert(s.to_owned(), k.clone());
        k
    }

    /// `json` as a stored object: `same` itself when it holds these bytes, else a new one.
    fn share(json: &[u8], same: Option<&Arc<Stored>>) -> Arc<Stored> {
        match same {
            Some(s) if s.json().is_some_and(|j| **j == *json) => s.clone(),
            _ => Arc::new(Stored::from_json(Arc::from(json))),
        }
    }

    fn change(&mut self, rv: u64, bytes: &[u8]) -> Result<Change, String> {
        let r = parse_record(rv, bytes)?;
        let storage = self.storage(&r.storage);
        let object_json = r.object.get().as_bytes();
        let key = (storage.clone(), key_of_json(object_json));
        let object = Loader::share(object_json, self.live.get(&key));
        let prev = r
            .prev
            .map(|p| Loader::share(p.get().as_bytes(), self.newest.get(&key)));
        let kind = kind_from(&r.kind).unwrap_or(ChangeType::Modified);
        self.newest.insert(key, object.clone());
        Ok(Change {
            rv,
            storage,
            kind,
            object,
            prev,
            at_ms: r.at,
            served: Default::default(),
            size: Default::default(),
        })
    }
}

impl Disk {
    /// Opens (or creates) `dir/store.redb` and reads everything back. A database left by a
    /// killed process is recovered by redb to its last committed transaction.
    pub fn open(dir: &Path) -> Result<(Disk, Loaded), DiskError> {
        let path = dir.join("store.redb");
        let fail = |e: &dyn std::fmt::Display| DiskError {
            path: path.clone(),
            message: e.to_string(),
        };
        std::fs::create_dir_all(dir).map_err(|e| DiskError {
            path: dir.to_owned(),
            message: e.to_string(),
        })?;
        let db = create(&path).map_err(|e| fail(&e))?;
        // Create the tables on a new database so that reads find them.
        let txn = db.begin_write().map_err(|e| fail(&e))?;
        {
            txn.open_table(OBJECTS).map_err(|e| fail(&e))?;
            txn.open_table(HISTORY).map_err(|e| fail(&e))?;
            txn.open_table(META).map_err(|e| fail(&e))?;
        }
        txn.commit().map_err(|e| fail(&e))?;

        let mut loaded = Loaded::default();
        let txn = db.begin_read().map_err(|e| fail(&e))?;
        let meta = txn.open_table(META).map_err(|e| fail(&e))?;
        let get = |k: &str| -> Result<u64, DiskError> {
            Ok(meta
                .get(k)
                .map_err(|e| fail(&e))?
                .map(|g| g.value())
                .unwrap_or(0))
        };
        loaded.rv = get("rv")?;
        loaded.compacted = get("compacted")?;
        let mut loader = Loader::default();
        let objects = txn.open_table(OBJECTS).map_err(|e| fail(&e))?;
        for entry in objects.iter().map_err(|e| fail(&e))? {
            let (k, v) = entry.map_err(|e| fail(&e))?;
            let mut parts = k.value().splitn(3, '\0');
            let (Some(storage), Some(ns), Some(name)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(fail(&format!("object key {:?}", k.value())));
            };
            // Checked as JSON (scanned, not built), so a damaged object stops the start with
            // its name rather than reading as `null` later.
            let mut de = serde_json::Deserializer::from_slice(v.value());
            de.disable_recursion_limit();
            serde::de::IgnoredAny::deserialize(&mut de)
                .and_then(|_| de.end())
                .map_err(|e| fail(&format!("object {}: {e}", k.value().replace('\0', "/"))))?;
            let storage = loader.storage(storage);
            let key: Key = (ns.to_owned(), name.to_owned());
            let obj = Arc::new(Stored::from_json(Arc::from(v.value())));
            loader
                .live
                .insert((storage.clone(), key.clone()), obj.clone());
            loaded.objects.push((storage, key, obj));
        }
        let history = txn.open_table(HISTORY).map_err(|e| fail(&e))?;
        for entry in history.iter().map_err(|e| fail(&e))? {
            let (k, v) = entry.map_err(|e| fail(&e))?;
            loaded
                .history
                .push(loader.change(k.value(), v.value()).map_err(|e| fail(&e))?);
        }
        drop((meta, objects, history, txn));
        let queue = Queue {
            rv: loaded.rv,
            compacted: loaded.compacted,
            ..Queue::default()
        };
        Ok((
            Disk {
                db: Mutex::new(Some(db)),
                path,
                queue: Mutex::new(queue),
                done: Condvar::new(),
                full: Default::default(),
            },
            loaded,
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues one write's changes (call it under the store lock, so batches stay in revision
    /// order) and returns the ticket to [`Disk::wait`] for.
    pub fn enqueue(&self, changes: Vec<Arc<Change>>, rv: u64, compacted: u64) -> u64 {
        let mut q = self.lock();
        q.pending.extend(changes);
        q.rv = rv;
        q.compacted = compacted;
        q.enqueued += 1;
        q.enqueued
    }

    /// Returns once the batch `ticket` is committed, committing it (and everything queued with
    /// it) if no other caller is. `Err` when the commit failed, or an earlier one did and the
    /// store is read-only (the batch stays queued; see the module docs).
    pub fn wait(&self, ticket: u64) -> Result<(), String> {
        let mut q = self.lock();
        loop {
            if q.committed >= ticket {
                return Ok(());
            }
            if q.committing {
                q = self.done.wait(q).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            if let Some(e) = &q.failed {
                return Err(e.clone());
            }
            return self.commit_queued(q);
        }
    }

    /// Commits everything queued (the caller holds the queue, no commit is running).
    fn commit_queued(&self, mut q: std::sync::MutexGuard<'_, Queue>) -> Result<(), String> {
        q.committing = true;
        let batch = std::mem::take(&mut q.pending);
        let (rv, compacted, upto) = (q.rv, q.compacted, q.enqueued);
        drop(q);
        let result = self.commit(&batch, rv, compacted);
        let mut q = self.lock();
        q.committing = false;
        match &result {
            Ok(()) => {
                q.committed = upto;
                if q.failed.take().is_some() {
                    tracing::warn!(path = %self.path.display(), "the data directory accepts commits again; the store is writable");
                }
            }
            Err(e) => {
                // Back at the head of the queue, in revision order, for the next attempt.
                let mut again = batch;
                again.append(&mut q.pending);
                q.pending = again;
                if q.failed.is_none() {
                    tracing::error!(path = %self.path.display(), error = %e,
                        "cannot commit to the data directory; refusing writes until it can (reads go on)");
                }
                q.failed = Some(e.clone());
                // redb refuses everything after an I/O error until reopened.
                *self.db.lock().unwrap_or_else(|p| p.into_inner()) = None;
            }
        }
        self.done.notify_all();
        result
    }

    /// Why the store is read-only, if it is.
    pub fn failure(&self) -> Option<String> {
        self.lock().failed.clone()
    }

    /// Tries to leave the read-only state: reopens the database and commits everything queued.
    pub fn recover(&self) -> Result<(), String> {
        let mut q = self.lock();
        while q.committing {
            q = self.done.wait(q).unwrap_or_else(|e| e.into_inner());
        }
        if q.failed.is_none() {
            return Ok(());
        }
        self.commit_queued(q)
    }

    /// Fault injection: while `full`, every commit fails as on a full disk (`No space left on
    /// device`), so the read-only state and the recovery can be exercised without filling one.
    pub fn simulate_full(&self, full: bool) {
        self.full.store(full, std::sync::atomic::Ordering::Relaxed);
    }

    fn commit(&self, batch: &[Arc<Change>], rv: u64, compacted: u64) -> Result<(), String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        if self.full.load(std::sync::atomic::Ordering::Relaxed) {
            return Err("No space left on device (os error 28)".into());
        }
        let mut db = self.db.lock().unwrap_or_else(|p| p.into_inner());
        if db.is_none() {
            *db = Some(create(&self.path).map_err(|x| e(&x))?);
        }
        let Some(db) = db.as_ref() else {
            return Err("the database is closed".into());
        };
        let txn = db.begin_write().map_err(|x| e(&x))?;
        {
            let mut objects = txn.open_table(OBJECTS).map_err(|x| e(&x))?;
            let mut history = txn.open_table(HISTORY).map_err(|x| e(&x))?;
            let mut meta = txn.open_table(META).map_err(|x| e(&x))?;
            for c in batch {
                let key = object_key(&c.storage, &c.object);
                match c.kind {
                    ChangeType::Deleted => {
                        objects.remove(key.as_str()).map_err(|x| e(&x))?;
                    }
                    ChangeType::Added | ChangeType::Modified => {
                        let bytes = c.object.to_json();
                        objects
                            .insert(key.as_str(), bytes.as_slice())
                            .map_err(|x| e(&x))?;
                    }
                }
                if c.rv > compacted {
                    history
                        .insert(c.rv, encode_change(c).as_slice())
                        .map_err(|x| e(&x))?;
                }
            }
            history
                .retain_in(..=compacted, |_, _| false)
                .map_err(|x| e(&x))?;
            meta.insert("rv", rv).map_err(|x| e(&x))?;
            meta.insert("compacted", compacted).map_err(|x| e(&x))?;
        }
        txn.commit().map_err(|x| e(&x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn change(rv: u64, kind: ChangeType, name: &str, v: u64) -> Arc<Change> {
        let obj = json!({"metadata": {"namespace": "ns", "name": name,
                         "resourceVersion": rv.to_string()}, "data": {"v": v}});
        Arc::new(Change {
            rv,
            storage: "core/configmaps".into(),
            kind,
            object: Arc::new(Stored::new(obj.clone())),
            prev: (kind != ChangeType::Added).then(|| Arc::new(Stored::new(obj.clone()))),
            at_ms: 1000 + rv,
            served: Default::default(),
            size: Default::default(),
        })
    }

    #[test]
    fn commits_are_read_back_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (disk, loaded) = Disk::open(dir.path()).unwrap();
            assert_eq!(loaded.rv, 0);
            let t1 = disk.enqueue(
                vec![
                    change(2, ChangeType::Added, "a", 1),
                    change(3, ChangeType::Added, "b", 1),
                ],
                3,
                1,
            );
            let t2 = disk.enqueue(
                vec![
                    change(4, ChangeType::Modified, "a", 2),
                    change(5, ChangeType::Deleted, "b", 1),
                ],
                5,
                2,
            );
            disk.wait(t1).unwrap();
            disk.wait(t2).unwrap();
        }
        let (_, loaded) = Disk::open(dir.path()).unwrap();
        assert_eq!((loaded.rv, loaded.compacted), (5, 2));
        assert_eq!(loaded.objects.len(), 1);
        let (storage, key, a) = &loaded.objects[0];
        assert_eq!(
            (storage.as_str(), key),
            ("core/configmaps", &("ns".to_owned(), "a".to_owned()))
        );
        let rvs: Vec<u64> = loaded.history.iter().map(|c| c.rv).collect();
        assert_eq!(rvs, vec![3, 4, 5]);
        // Nothing is decoded; the versions are shared as before the restart.
        assert!(!a.is_decoded());
        for c in &loaded.history {
            assert!(!c.object.is_decoded() && !c.prev.as_ref().is_some_and(|p| p.is_decoded()));
        }
        assert!(Arc::ptr_eq(&loaded.history[1].object, a), "the live object");
        assert!(std::ptr::eq(
            loaded.history[0].storage.as_str(),
            loaded.objects[0].0.as_str()
        ));
        // And it reads back as written.
        assert_eq!(a["data"]["v"], 2);
        assert_eq!(loaded.history[2].kind, ChangeType::Deleted);
        assert_eq!(loaded.history[1], *change(4, ChangeType::Modified, "a", 2));
    }

    /// A history entry is written as the tree `{at, kind, object, prev, storage}` always was
    /// (so older data directories load, and newer ones load in an older binary), whether its
    /// objects are trees or bytes.
    #[test]
    fn history_entries_keep_their_format() {
        for kind in [ChangeType::Added, ChangeType::Modified] {
            let c = change(4, kind, "a\"\u{e9}", 2);
            let as_tree = serde_json::to_vec(&json!({
                "storage": c.storage, "kind": c.kind.as_str(), "object": c.object.value(),
                "prev": c.prev.as_ref().map(|p| p.value()), "at": c.at_ms,
            }))
            .unwrap();
            assert_eq!(
                String::from_utf8(encode_change(&c)).unwrap(),
                String::from_utf8(as_tree.clone()).unwrap()
            );
            let rested = Change {
                object: Arc::new(Stored::from_json(c.object.to_json().into())),
                ..(*c).clone()
            };
            assert_eq!(encode_change(&rested), as_tree);
            assert!(!rested.object.is_decoded(), "written without decoding");
            let back = Loader::default().change(4, &as_tree).unwrap();
            assert_eq!(back, *c);
        }
    }

    #[test]
    fn a_damaged_object_stops_the_start_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (disk, _) = Disk::open(dir.path()).unwrap();
            let t = disk.enqueue(vec![change(2, ChangeType::Added, "a", 1)], 2, 1);
            disk.wait(t).unwrap();
            let db = disk.db.lock().unwrap().take().unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(OBJECTS)
                .unwrap()
                .insert("core/configmaps\0ns\0a", b"{\"metadata\":".as_slice())
                .unwrap();
            txn.commit().unwrap();
        }
        let err = Disk::open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("object core/configmaps/ns/a: EOF"), "{err}");
    }

    #[test]
    fn a_corrupt_history_entry_is_a_clear_error() {
        let err = parse_record(7, b"{\"storage\":\"x\"}").err().unwrap();
        assert!(err.starts_with("history entry 7: missing field"), "{err}");
        let err = parse_record(7, br#"{"storage":"x","kind":"GONE","object":{},"at":1}"#)
            .err()
            .unwrap();
        assert!(err.contains("history entry 7: invalid kind"), "{err}");
        assert!(parse_record(7, b"not json").is_err());
    }
}
