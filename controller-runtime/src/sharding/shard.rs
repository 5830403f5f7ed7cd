//! One shard: its flags, its Lease, and the label selectors of its caches.
//!
//! `sample-controller run --shard-mode=sharded` makes the process a shard of a ring (see the
//! [module documentation](super)). What changes against the default `--shard-mode=leader`:
//!
//! * **Its Lease.** Instead of contending for the one leader Lease, the process holds a Lease
//!   of its own, `<--shard-lease-namespace>/<--shard-id>`, labelled
//!   `sharding.sample-controller.dev/ring=<--shard-ring>` and held with holder identity
//!   `<--shard-id>`. It is acquired, renewed and released by the same elector as a leader's
//!   Lease ([`sample_client_go::leaderelection`]), with the `--leader-elect-lease-duration`,
//!   `-renew-deadline` and `-retry-period` timings: the workers run only while the Lease is
//!   held and stop when a renewal misses its deadline. That is the property the sharder's
//!   direct relabelling of a dead shard's objects relies on. Two processes started with the
//!   same shard id do not both work: the second waits, a standby of that shard.
//! * **Its caches** ([`ShardKinds::scope`](crate::manager::ShardKinds::scope), applied by the manager). The informers of the sharded kinds (At, TDSet,
//!   RedisCluster, MyApp, Foo) list and watch with `shard.sample-controller.dev/<ring>=<shard-id>`; those of
//!   the owned kinds (pods, Deployments, StatefulSets, Services) with the managed-by selector
//!   of `sample_operators::slim` *and* that label (`…managed-by in (…),shard…=<id>`).
//! * **What it creates** ([`inherit_shard_labels`]). Every owned object gets its owner's shard
//!   labels when the operator creates it; an owned object found by name (409 AlreadyExists,
//!   e.g. after its owner moved to this shard) is adopted with the owner's shard labels by
//!   `sample_operators::slim::get_existing`.
//!
//! RedisCluster is sharded like the others, with one difference: its pods are not created by
//! the operator but by its StatefulSet, from a pod template that carries no shard label (one
//! there would restart every pod of the cluster on each move). The sharder labels those pods
//! itself, as objects that follow their controller's owner (see the
//! [module documentation](super), "Grandchildren").
//!
//! | flag | default | meaning |
//! |---|---|---|
//! | `--shard-mode` | `leader` | `leader`: today's behaviour (`--leader-elect` optional); `sharded`: this process is one shard |
//! | `--shard-id` | `$POD_NAME`, else `$HOSTNAME` | the shard's id: its Lease's name and its label value |
//! | `--shard-ring` | `sample-controller` | the ring's name, in the label keys |
//! | `--shard-lease-namespace` | the pod's namespace, else `default` | where the shard Leases live |
//! | `--shard-sharder` | `true` | also be a candidate for the ring's sharder ([`super::sharder`]), leader-elected on the Lease `<ring>-sharder` with the same timings |
//!
//! The sharder runs in the same binary: every shard started with `--shard-sharder=true` (the
//! default) contends for the Lease `<--shard-lease-namespace>/<ring>-sharder`, and the one
//! holding it runs [`super::Sharder`] over the kinds of the enabled controllers (At → its pods;
//! TDSet → its Deployment and Service; MyApp and Foo → their Deployments).
//!
//! Or in a process of its own: `sample-controller run --controllers=sharder` runs no operator
//! and holds no shard Lease; it contends for the same `<ring>-sharder` Lease (under its manager
//! identity) with the `--leader-elect-*` timings, and serves `/mutate-shard` from the ring it
//! computes. Its `--shard-ring` and `--shard-lease-namespace` must match the shards'. The
//! operator names beside `sharder` choose the kinds (`--controllers=sharder,at`: Ats and their
//! pods; `sharder` alone: those of every sharded controller ([`Registration::with_sharding`](crate::manager::Registration::with_sharding))). Shards then run with
//! `--shard-sharder=false`; mixing both kinds of candidates is safe, one Lease electing one
//! sharder.

use std::collections::BTreeMap;
use std::time::Duration;

use clap::{Args, ValueEnum};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::labels::{DEFAULT_RING, InvalidName, LEASE_RING_LABEL, RingLabels, SHARD_LABEL_PREFIX};

/// `--shard-mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ShardMode {
    /// One active replica at most (with `--leader-elect`), working on every object.
    #[default]
    Leader,
    /// This process is one shard of a ring, working on the objects labelled for it.
    Sharded,
}

/// The sharding flags of `sample-controller run`.
#[derive(Args, Clone, Debug, PartialEq)]
pub struct ShardFlags {
    /// 'leader' (one active replica, today's behaviour) or 'sharded' (this process is one shard
    /// of a ring, with a Lease of its own, working only on the objects labelled for it).
    #[arg(long, value_enum, default_value = "leader", value_name = "MODE")]
    pub shard_mode: ShardMode,

    /// The shard's id, its Lease's name and its label value (default: $POD_NAME, else $HOSTNAME).
    #[arg(long, default_value = "", value_name = "ID")]
    pub shard_id: String,

    /// The ring's name, part of the shard and drain label keys.
    #[arg(long, default_value = DEFAULT_RING, value_name = "NAME")]
    pub shard_ring: String,

    /// The namespace of the shard Leases (default: the pod's namespace in a cluster, else "default").
    #[arg(long, default_value = "", value_name = "NAMESPACE")]
    pub shard_lease_namespace: String,

    /// In sharded mode, also be a candidate for the ring's sharder (leader-elected on the
    /// Lease `<ring>-sharder`); 'false' leaves the sharder to other processes, e.g. one run
    /// with --controllers=sharder.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub shard_sharder: bool,
}

impl Default for ShardFlags {
    /// The documented defaults: leader mode, the default ring.
    fn default() -> Self {
        ShardFlags {
            shard_mode: ShardMode::Leader,
            shard_id: String::new(),
            shard_ring: DEFAULT_RING.to_string(),
            shard_lease_namespace: String::new(),
            shard_sharder: true,
        }
    }
}

/// A validated shard configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardConfig {
    /// The ring's label keys.
    pub labels: RingLabels,
    /// This shard's id (its Lease's name, its label value, its holder identity).
    pub shard_id: String,
    /// The namespace of the ring's Leases.
    pub lease_namespace: String,
    /// How long a Lease not seen renewed stays valid.
    pub lease_duration: Duration,
    /// How long the shard keeps retrying a renewal before it stops its workers.
    pub renew_deadline: Duration,
    /// The time between renewals.
    pub retry_period: Duration,
    /// Whether this process is also a candidate for the ring's sharder (`--shard-sharder`).
    pub run_sharder: bool,
}

impl ShardConfig {
    /// The labels on this shard's Lease: `sharding.sample-controller.dev/ring=<ring>`.
    pub fn lease_labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(LEASE_RING_LABEL.to_string(), self.labels.ring().to_string())])
    }

    /// The selector of this shard's caches of the sharded kinds.
    pub fn selector(&self) -> String {
        self.labels.shard_selector(&self.shard_id)
    }
}

impl ShardConfig {
    /// The election of the ring's sharder when this shard hosts it (`--shard-sharder=true`):
    /// the shard's ring, Lease namespace and timings.
    pub fn sharder_election(&self) -> super::SharderElection {
        super::SharderElection {
            labels: self.labels.clone(),
            lease_namespace: self.lease_namespace.clone(),
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
        }
    }
}

/// What is wrong with a sharding flag: the flag's name, the value and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid value {value:?} for --{flag}: {reason}")]
pub struct ShardFlagError {
    /// The flag, without dashes.
    pub flag: &'static str,
    /// The value given (or derived from the environment).
    pub value: String,
    /// Why it cannot be used.
    pub reason: String,
}

impl ShardFlagError {
    fn from_name(flag: &'static str, e: InvalidName) -> Self {
        ShardFlagError {
            flag,
            value: e.value,
            reason: e.reason.to_string(),
        }
    }
}

impl ShardFlags {
    /// `None` in leader mode; in sharded mode the shard's configuration, with the given
    /// Lease timings and `lease_namespace` as the default namespace. `env` reads an
    /// environment variable (`POD_NAME`, `HOSTNAME`) for the default shard id.
    pub fn validate(
        &self,
        lease_namespace: &str,
        timings: (Duration, Duration, Duration),
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<ShardConfig>, ShardFlagError> {
        if self.shard_mode == ShardMode::Leader {
            return Ok(None);
        }
        let labels = RingLabels::new(self.shard_ring.trim())
            .map_err(|e| ShardFlagError::from_name("shard-ring", e))?;
        let shard_id = match self.shard_id.trim() {
            "" => env("POD_NAME")
                .filter(|v| !v.is_empty())
                .or_else(|| env("HOSTNAME").filter(|v| !v.is_empty()))
                .ok_or_else(|| ShardFlagError {
                    flag: "shard-id",
                    value: String::new(),
                    reason: "not given, and neither POD_NAME nor HOSTNAME is set".into(),
                })?,
            id => id.to_string(),
        };
        validate_shard_id(&shard_id)?;
        let lease_namespace = match self.shard_lease_namespace.trim() {
            "" => lease_namespace.to_string(),
            ns => ns.to_string(),
        };
        let (lease_duration, renew_deadline, retry_period) = timings;
        Ok(Some(ShardConfig {
            labels,
            shard_id,
            lease_namespace,
            lease_duration,
            renew_deadline,
            retry_period,
            run_sharder: self.shard_sharder,
        }))
    }
}

impl ShardFlags {
    /// The election of a `--controllers=sharder` process: the ring of `--shard-ring`, the
    /// Leases in `--shard-lease-namespace` (else `lease_namespace`), the given timings.
    pub fn sharder_election(
        &self,
        lease_namespace: &str,
        timings: (Duration, Duration, Duration),
    ) -> Result<super::SharderElection, ShardFlagError> {
        let labels = RingLabels::new(self.shard_ring.trim())
            .map_err(|e| ShardFlagError::from_name("shard-ring", e))?;
        let lease_namespace = match self.shard_lease_namespace.trim() {
            "" => lease_namespace.to_string(),
            ns => ns.to_string(),
        };
        let (lease_duration, renew_deadline, retry_period) = timings;
        Ok(super::SharderElection {
            labels,
            lease_namespace,
            lease_duration,
            renew_deadline,
            retry_period,
        })
    }
}

/// A shard id names a Lease (a DNS subdomain) and is a label value: 1 to 63 characters of
/// `[a-z0-9.-]`, starting and ending with a letter or digit (a pod name qualifies).
fn validate_shard_id(id: &str) -> Result<(), ShardFlagError> {
    super::labels::validate_name("shard id", id)
        .map_err(|e| ShardFlagError::from_name("shard-id", e))?;
    if id.bytes().any(|b| b.is_ascii_uppercase() || b == b'_') {
        return Err(ShardFlagError {
            flag: "shard-id",
            value: id.to_string(),
            reason: "names a Lease, so only lowercase letters, digits, '-' and '.'".into(),
        });
    }
    Ok(())
}

/// The owner's shard labels (`shard.sample-controller.dev/<ring>`, any ring), which the
/// objects it owns must carry to be seen by the shard that reconciles the owner.
pub fn shard_labels(owner: &ObjectMeta) -> BTreeMap<String, String> {
    owner
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(SHARD_LABEL_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Copies the owner's shard labels onto an owned object about to be created (nothing when the
/// owner has none, as in leader mode).
pub fn inherit_shard_labels(owner: &ObjectMeta, owned: &mut ObjectMeta) {
    let labels = shard_labels(owner);
    if !labels.is_empty() {
        owned
            .labels
            .get_or_insert_with(Default::default)
            .extend(labels);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMINGS: (Duration, Duration, Duration) = (
        Duration::from_secs(15),
        Duration::from_secs(10),
        Duration::from_secs(2),
    );

    fn sharded(id: &str) -> ShardFlags {
        ShardFlags {
            shard_mode: ShardMode::Sharded,
            shard_id: id.to_string(),
            shard_ring: DEFAULT_RING.to_string(),
            shard_lease_namespace: String::new(),
            shard_sharder: true,
        }
    }

    #[test]
    fn leader_mode_has_no_shard() {
        let flags = ShardFlags::default();
        assert_eq!(flags.validate("default", TIMINGS, |_| None), Ok(None));
    }

    #[test]
    fn the_shard_id_defaults_to_the_pod_name_then_the_host_name() {
        let pod = |k: &str| match k {
            "POD_NAME" => Some("controller-0".to_string()),
            "HOSTNAME" => Some("node-a".to_string()),
            _ => None,
        };
        let c = sharded("").validate("ns", TIMINGS, pod).unwrap().unwrap();
        assert_eq!(c.shard_id, "controller-0");
        assert_eq!(c.lease_namespace, "ns");
        assert_eq!(
            c.selector(),
            "shard.sample-controller.dev/sample-controller=controller-0"
        );
        let host = |k: &str| (k == "HOSTNAME").then(|| "node-a".to_string());
        let c = sharded("").validate("ns", TIMINGS, host).unwrap().unwrap();
        assert_eq!(c.shard_id, "node-a");
        let err = sharded("").validate("ns", TIMINGS, |_| None).unwrap_err();
        assert_eq!(err.flag, "shard-id");
    }

    #[test]
    fn bad_ids_and_rings_name_the_flag() {
        let err = sharded("Shard_A")
            .validate("ns", TIMINGS, |_| None)
            .unwrap_err();
        assert_eq!(err.flag, "shard-id");
        assert!(err.to_string().contains("\"Shard_A\""), "{err}");
        let mut flags = sharded("a");
        flags.shard_ring = "no/slash".into();
        assert_eq!(
            flags.validate("ns", TIMINGS, |_| None).unwrap_err().flag,
            "shard-ring"
        );
    }

    #[test]
    fn owned_objects_take_the_owners_shard_labels_only() {
        let owner = ObjectMeta {
            labels: Some(BTreeMap::from([
                (
                    "shard.sample-controller.dev/r".to_string(),
                    "s1".to_string(),
                ),
                (
                    "drain.shard.sample-controller.dev/r".to_string(),
                    "true".to_string(),
                ),
                ("app".to_string(), "x".to_string()),
            ])),
            ..ObjectMeta::default()
        };
        let mut pod = ObjectMeta::default();
        inherit_shard_labels(&owner, &mut pod);
        assert_eq!(
            pod.labels,
            Some(BTreeMap::from([(
                "shard.sample-controller.dev/r".to_string(),
                "s1".to_string()
            )]))
        );
        let mut untouched = ObjectMeta::default();
        inherit_shard_labels(&ObjectMeta::default(), &mut untouched);
        assert_eq!(untouched.labels, None);
    }
}
