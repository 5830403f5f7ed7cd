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

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use redb::{Database, ReadableTable, TableDefinition};
use serde_json::{Value, json};

use crate::storage::store::{Change, ChangeType, Stored, key_of};

const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
const HISTORY: TableDefinition<u64, &[u8]> = TableDefinition::new("history");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Opening or reading the data directory failed.
#[derive(Debug, thiserror::Error)]
#[error("data directory {path}: {message}")]
pub struct DiskError {
    /// The file or directory.
    pub path: PathBuf,
    /// What went wrong.
    pub message: String,
}

/// What a data directory held at start.
#[derive(Debug, Default)]
pub struct Loaded {
    /// The revision counter (0 for a new directory).
    pub rv: u64,
    /// The compaction point.
    pub compacted: u64,
    /// Every stored object with its storage key (`core/pods`, ...).
    pub objects: Vec<(String, Value)>,
    /// The history window, oldest first.
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

fn object_key(storage: &str, obj: &Value) -> String {
    let (ns, name) = key_of(obj);
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

fn encode_change(c: &Change) -> Vec<u8> {
    let v = json!({
        "storage": c.storage, "kind": c.kind.as_str(), "object": &*c.object,
        "prev": c.prev.as_deref(), "at": c.at_ms,
    });
    serde_json::to_vec(&v).unwrap_or_default()
}

fn decode_change(rv: u64, bytes: &[u8]) -> Result<Change, String> {
    let v: Value = crate::api::limits::json_from_slice(bytes)
        .map_err(|e| format!("history entry {rv}: {e}"))?;
    let bad = |what: &str| format!("history entry {rv}: missing or invalid {what}");
    Ok(Change {
        rv,
        storage: v["storage"].as_str().ok_or_else(|| bad("storage"))?.into(),
        kind: v["kind"]
            .as_str()
            .and_then(kind_from)
            .ok_or_else(|| bad("kind"))?,
        object: Arc::new(Stored::new(
            v.get("object").cloned().ok_or_else(|| bad("object"))?,
        )),
        prev: v
            .get("prev")
            .filter(|p| !p.is_null())
            .cloned()
            .map(|p| Arc::new(Stored::new(p))),
        at_ms: v["at"].as_u64().ok_or_else(|| bad("at"))?,
        served: Default::default(),
        size: Default::default(),
    })
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
        let db = Database::create(&path).map_err(|e| fail(&e))?;
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
        let objects = txn.open_table(OBJECTS).map_err(|e| fail(&e))?;
        for entry in objects.iter().map_err(|e| fail(&e))? {
            let (k, v) = entry.map_err(|e| fail(&e))?;
            let key = k.value();
            let storage = key.split('\0').next().unwrap_or_default().to_owned();
            let obj: Value = crate::api::limits::json_from_slice(v.value())
                .map_err(|e| fail(&format!("object {}: {e}", key.replace('\0', "/"))))?;
            loaded.objects.push((storage, obj));
        }
        let history = txn.open_table(HISTORY).map_err(|e| fail(&e))?;
        for entry in history.iter().map_err(|e| fail(&e))? {
            let (k, v) = entry.map_err(|e| fail(&e))?;
            loaded
                .history
                .push(decode_change(k.value(), v.value()).map_err(|e| fail(&e))?);
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
            *db = Some(Database::create(&self.path).map_err(|x| e(&x))?);
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
        assert_eq!(loaded.objects[0].1["data"]["v"], 2);
        let rvs: Vec<u64> = loaded.history.iter().map(|c| c.rv).collect();
        assert_eq!(rvs, vec![3, 4, 5]);
        assert_eq!(loaded.history[2].kind, ChangeType::Deleted);
        assert_eq!(loaded.history[1], *change(4, ChangeType::Modified, "a", 2));
    }

    #[test]
    fn a_corrupt_history_entry_is_a_clear_error() {
        assert!(
            decode_change(7, b"{\"storage\":\"x\"}")
                .unwrap_err()
                .contains("history entry 7: missing or invalid kind")
        );
        assert!(decode_change(7, b"not json").is_err());
    }
}
