//! # Sharding: past one leader, with a consistent-hash ring and a Lease per shard
//!
//! Leader election ([`sample_client_go::leaderelection`]) keeps every replica's cache warm but lets only one
//! replica work: one process bounds the throughput, and its cache grows with the cluster.
//! Sharding splits the *objects* instead: each replica (a **shard**) watches, caches and
//! reconciles only the objects assigned to it, and a small **sharder** decides the assignment.
//! The design is the one of [kubernetes-controller-sharding] by Tim Ebert (a Master's thesis,
//! KubeCon EU 2025; its `docs/design.md`, `pkg/sharding/consistenthash` and
//! `pkg/controller/sharder`), written here in the client-go style for this crate's operators.
//!
//! [kubernetes-controller-sharding]: https://github.com/timebertt/kubernetes-controller-sharding
//!
//! ## The pieces
//!
//! ```text
//!                 Lease shard-a ─┐  (label sharding.sample-controller.dev/ring=<ring>,
//!                 Lease shard-b ─┼─  renewed by each shard like a leader's Lease)
//!                 Lease shard-c ─┘
//!                        │ watch (live = not expired)
//!                        ▼
//!   sharder (leader-elected) ── ring of live shards ── assigns / drains / relabels objects
//!                        │ label shard.sample-controller.dev/<ring>=<shard-id>
//!                        ▼
//!   shard-a's informers: labelSelector shard.sample-controller.dev/<ring>=shard-a
//!   shard-b's informers: labelSelector shard.sample-controller.dev/<ring>=shard-b   ...
//! ```
//!
//! * **The ring** ([`ring`]): a consistent-hash ring over the *live* shards, 400 virtual nodes
//!   per shard, hashed with FNV-1a 64 followed by MurmurHash3's 64-bit finalizer (`fmix64`; a
//!   pure function of the bytes, the same on every machine and every release, so two sharders
//!   always agree). An object's key is `namespace/name` of its *owner* (its own, for the
//!   sharded kinds At, TDSet, RedisCluster, MyApp and Foo), so an owner and what it owns land on
//!   the same shard. Adding a fourth shard to three moves about a quarter of the keys, all of
//!   them to the new shard; removing a shard moves only that shard's keys.
//! * **Shard Leases** ([`shard`]): each shard holds one `coordination.k8s.io/v1` Lease named by
//!   its id (`--shard-id`, default the pod name), labelled
//!   `sharding.sample-controller.dev/ring=<ring>`, so `kubectl get leases -l
//!   sharding.sample-controller.dev/ring=<ring>` shows the ring. A shard renews it every
//!   retry period; a Lease not renewed for `leaseDurationSeconds`, as observed on the reader's
//!   own clock, is *expired* and its shard *dead*. A shard that cannot renew within the renew
//!   deadline stops its workers, exactly as a leader does (the same 15 s / 10 s / 2 s).
//! * **The labels** ([`labels`]): `shard.sample-controller.dev/<ring>=<shard-id>` assigns an
//!   object; `drain.shard.sample-controller.dev/<ring>=true` asks its shard to let go of it.
//!   Every shard informer of a sharded kind, and of the kinds they own (pods, Deployments,
//!   StatefulSets, Services), lists and watches with the selector
//!   `shard.sample-controller.dev/<ring>=<own id>`: the API server, not the shard, filters.
//!
//! ## One object's assignment: the state machine
//!
//! ```text
//!                   sharder: add shard label = ring(key)      (webhook on CREATE, or the
//!   ┌────────────┐  (1 write, resourceVersion precondition)    sharder's controller)
//!   │ Unassigned │ ─────────────────────────────────────────────────────┐
//!   └────────────┘                                                      ▼
//!         ▲                                                     ┌──────────────┐
//!         │ shard s: stop working on it, then remove            │ Assigned(s)  │
//!         │ shard + drain labels in ONE write (rv precondition) └──────────────┘
//!         │                                                 ring(key) = t ≠ s │
//!   ┌─────────────┐   sharder, s's Lease live: add the drain label (rv precond.) │
//!   │ Draining(s) │ ◀────────────────────────────────────────────────────────────┤
//!   └─────────────┘                                                              │
//!                      sharder, s's Lease expired: set shard label = t directly  │
//!                      (1 write, rv precondition) ──▶ Assigned(t) ◀──────────────┘
//! ```
//!
//! From `Unassigned` the sharder moves the object to `Assigned(ring(key))` at once, so a drained
//! object passes `Unassigned → Assigned(t)` within one sharder sync: `Assigned(s) →
//! Draining(s) → Unassigned → Assigned(t)`.
//!
//! ## Why no object is reconciled by two shards at once
//!
//! A shard works on an object only while its own informer holds it, i.e. while the object, as
//! last seen by that shard, carries `shard=<its id>` and no drain label. The argument is the
//! one of leader election, per object:
//!
//! 1. **A live shard lets go itself.** While `s` is live the sharder never changes the shard
//!    label; it only *asks* (drain). `s` sees the drain label through its watch, stops the
//!    object's work (it no longer enqueues it, and a sync in flight finishes first: the
//!    workqueue never hands one key to two workers), and only *then* writes the
//!    label removal. The new shard `t` can only see the object after the sharder has seen
//!    that removal and relabelled, so `t` starts strictly after `s` stopped.
//! 2. **A dead shard has stopped by the time it counts as dead.** A shard that fails to renew
//!    its Lease gives up its workers at most `retry_period + renew_deadline` (12 s) after its
//!    last renewal; the sharder calls it dead only after `lease_duration` (15 s) without seeing
//!    the Lease change, on its own clock. Relabelling directly is therefore safe as long as the
//!    clocks *tick* at the same rate; it is what makes a `kill -9` recoverable, and it bounds
//!    the time an object is without a working shard by one Lease duration plus one sharder sync.
//! 3. **Every label write carries the `resourceVersion` it was computed from.** The sharder's
//!    drain or relabel of an object the shard has meanwhile changed answers 409 Conflict, and
//!    the sharder re-reads instead of overwriting; the shard's acknowledgement likewise cannot
//!    remove a label the sharder changed under it. Two sharders (a stale leader and a new one)
//!    cannot both win a write either.
//! 4. **Owned objects follow their owner and are never drained.** The owner is the point of
//!    synchronisation (as in kubernetes-controller-sharding): a shard reconciles owned objects
//!    only through their owner's sync. After the owner reaches `Assigned(t)` the sharder
//!    relabels the owner's pods, Deployments and Services (one write each). Until
//!    then `t`'s cache lacks them, so `t` may try to create an owned object that exists: the
//!    create answers 409 AlreadyExists, and the existing-object path of
//!    `sample_operators::slim` adopts it by its controller ownerReference. Names of owned
//!    objects are fixed, so nothing is created twice: an At is never run twice.
//!
//! ## What a move costs
//!
//! | move | API writes | watch events seen by shards |
//! |---|---|---|
//! | unassigned → assigned (webhook on create) | 0 extra (the create carries the label) | 1 ADDED on the shard |
//! | unassigned → assigned (controller) | 1 PATCH | 1 ADDED |
//! | s live → t | 3 on the owner (drain, ack, assign) + 1 per owned object | s: MODIFIED, DELETED; t: ADDED per object |
//! | s dead → t | 1 on the owner + 1 per owned object | t: ADDED per object |
//!
//! Rebalancing on a ring change touches only the keys whose ring position changed: about `1/n`
//! of the objects when an `n`-th shard joins, and exactly the dead shard's objects when one
//! leaves.
//!
//! ## Grandchildren: a RedisCluster's pods, moved without a restart
//!
//! A RedisCluster owns a StatefulSet and a Service, and reads the *StatefulSet's* pods (its
//! status lists the ready ones). Those pods are created by the StatefulSet controller from the
//! pod template, so the operator cannot put its owner's shard label on them at creation, and
//! putting the label into the template does not work either: the template changes on every
//! move, and a StatefulSet rolls every pod when its template changes, so each move of a
//! RedisCluster would restart its whole Redis cluster. The alternatives considered:
//!
//! * **Read the pods through a selector without the shard label** (e.g. the cluster label
//!   alone): every shard would cache every shard's Redis pods, breaking "a shard caches only its
//!   objects" for exactly the kind that has many pods per object.
//! * **Make the ring key of a pod resolve to its grandparent** in the shard's own cache filter:
//!   the API server filters by labels only, so the key would still have to be a label.
//! * **The sharder labels the pods** (chosen). The pod template stays free of shard labels, so
//!   the StatefulSet's revision never changes on a move and no pod is restarted; the
//!   StatefulSet and Service carry the shard label on their own metadata (set by the operator
//!   at creation, then by the sharder, like every owned object). The StatefulSet controller
//!   leaves labels outside its template alone on existing pods (it compares revisions, not
//!   label sets), so a label the sharder adds stays.
//!
//! The sharder's pass resolves owned kinds in order, each object following its *controller*:
//! a StatefulSet follows its RedisCluster, and a pod whose controller is that StatefulSet
//! follows the StatefulSet's resolved shard, i.e. the RedisCluster's. It then writes them in
//! the reverse order (pods first, the StatefulSet last), one PATCH each under a
//! `resourceVersion` precondition, as for any owned object.
//!
//! What it relies on and costs: a move of a RedisCluster of `n` pods costs the owner's writes
//! (table above) plus `2 + n` PATCHes (StatefulSet, Service, pods). A pod the StatefulSet
//! creates later (scale up, a replaced pod) is born without the shard label and is invisible to
//! the shard until the sharder's next pass labels it (one sync period, 1 s by default): the
//! RedisCluster's `status.nodes` lags by that much. The new shard may sync the RedisCluster
//! before its StatefulSet is relabelled: the create answers 409 AlreadyExists and the existing
//! StatefulSet is adopted by name with the owner's shard labels
//! (`sample_operators::slim::get_existing`), as for the other kinds; a status written in
//! that window may count fewer ready pods than there are, until the pods' relabelling (the same
//! pass) brings them into the cache and the next sync corrects it. No pod is recreated, and
//! the only writes to the StatefulSet during a move are to its metadata labels.

//! ## Where each piece lives
//!
//! | piece | module |
//! |---|---|
//! | the ring (hash, virtual nodes, key) | [`ring`] |
//! | label keys and selectors of a ring | [`labels`] |
//! | a shard: flags, Lease, cache selectors, label inheritance | [`shard`] |
//! | the shard's release of a drained object (called from each operator's sync) | [`drain`] |
//! | the sharder: live shards, assign / drain / move, owned objects follow, metrics | [`sharder`] |
//! | the sharder's election, hosted by a shard or by a `--controllers=sharder` process | [`SharderElection`], [`crate::manager::Manager::with_sharder`] |
//! | assignment in admission (`/mutate-shard`) | [`crate::webhook::shard`] |
//!

pub mod drain;
pub mod labels;
pub mod ring;
pub mod shard;
pub mod sharder;

pub use drain::release_if_draining;
pub use labels::RingLabels;
pub use ring::{DEFAULT_VIRTUAL_NODES, Ring, hash64, object_key};
pub use shard::{
    ShardConfig, ShardFlagError, ShardFlags, ShardMode, inherit_shard_labels, shard_labels,
};
pub use sharder::{Sharder, SharderConfig, SharderElection, SharderMetrics};
