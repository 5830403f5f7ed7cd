//! The consistent-hash ring: which live shard owns a key.
//!
//! A pure data structure (no I/O, no clock), rebuilt by the sharder whenever the set of live
//! shards changes. It mirrors kubernetes-controller-sharding's `pkg/sharding/consistenthash`
//! (which hashes with xxhash); this crate takes no dependency for a hash and uses its own,
//! written down here because every sharder must compute the same ring:
//!
//! * **Hash**: [`hash64`] = FNV-1a 64 (offset basis `0xcbf29ce484222325`, prime
//!   `0x100000001b3`) over the UTF-8 bytes, followed by MurmurHash3's 64-bit finalizer
//!   (`fmix64`). FNV-1a alone spreads short keys that differ only in their last byte
//!   (`shard-a#17`, `shard-a#18`) over a narrow band of the 64-bit space, which clumps the
//!   virtual nodes; the finalizer's avalanche spreads them evenly. Both steps are fixed by
//!   their constants, so the result is the same on every platform and in every release.
//! * **Virtual nodes**: each shard `s` places [`DEFAULT_VIRTUAL_NODES`] (400) tokens on the ring,
//!   at `hash64("s#0")` … `hash64("s#399")`. kubernetes-controller-sharding uses 100; with 100
//!   the shares of the ring `shard-a`, `shard-b`, `shard-c` came out 25 %, 36 % and 39 % (the
//!   spread of a share falls only with the square root of the token count), with 400 they are
//!   32 %, 35 % and 34 %. A ring of 4 shards is 1,600 tokens: rebuilt in microseconds on every
//!   sharder pass, looked up by binary search.
//! * **Lookup**: a key belongs to the shard of the first token at or after `hash64(key)`,
//!   wrapping around past the largest token (binary search: O(log(shards × tokens))).
//!   Tokens that collide are ordered by shard id, so the ring does not depend on the order in
//!   which shards were added.
//! * **Key**: [`object_key`] = `namespace/name` of the owner (`name` for cluster-scoped
//!   objects). Owned objects use their controller owner's key, so they land with their owner.
//!
//! Why consistent hashing: when shard `n` joins, only the keys that now fall before one of its
//! tokens move, and they all move *to* it (about `1/n` of all keys); when a shard leaves, only
//! its keys move, to the next tokens' shards. Every other object keeps its shard, so a ring
//! change costs writes only for the objects that must move (the module tests check both).

/// Virtual nodes (tokens) per shard (kubernetes-controller-sharding's default is 100; see the
/// module doc for why 400).
pub const DEFAULT_VIRTUAL_NODES: usize = 400;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 of `bytes`, then MurmurHash3's `fmix64` finalizer (see the module doc).
pub fn hash64(bytes: &[u8]) -> u64 {
    let mut h = fnv1a64(bytes);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

/// FNV-1a 64 of `bytes`.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// The ring key of an object (or of the owner whose shard it follows): `namespace/name`, or
/// `name` without a namespace.
pub fn object_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// A consistent-hash ring over a set of shard ids.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ring {
    /// `(token, index into shards)`, sorted by token, then by shard id.
    tokens: Vec<(u64, usize)>,
    /// The shard ids, sorted and without duplicates.
    shards: Vec<String>,
}

impl Ring {
    /// A ring over `shards` with [`DEFAULT_VIRTUAL_NODES`] tokens each. Duplicates count once.
    pub fn new<I, S>(shards: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with_virtual_nodes(DEFAULT_VIRTUAL_NODES, shards)
    }

    /// A ring with `virtual_nodes` tokens per shard (at least 1).
    pub fn with_virtual_nodes<I, S>(virtual_nodes: usize, shards: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut ids: Vec<String> = shards.into_iter().map(Into::into).collect();
        ids.sort();
        ids.dedup();
        let per = virtual_nodes.max(1);
        let mut tokens = Vec::with_capacity(ids.len() * per);
        for (i, id) in ids.iter().enumerate() {
            for v in 0..per {
                tokens.push((hash64(format!("{id}#{v}").as_bytes()), i));
            }
        }
        // Ids are sorted, so ordering by index orders collisions by shard id.
        tokens.sort_unstable();
        Ring {
            tokens,
            shards: ids,
        }
    }

    /// The shard ids on the ring, sorted.
    pub fn shards(&self) -> &[String] {
        &self.shards
    }

    /// Whether the ring has no shard (then no key has one).
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// Whether `shard` is on the ring.
    pub fn contains(&self, shard: &str) -> bool {
        self.shards
            .binary_search_by(|s| s.as_str().cmp(shard))
            .is_ok()
    }

    /// The shard owning `key`, or `None` on an empty ring.
    pub fn shard_for(&self, key: &str) -> Option<&str> {
        if self.tokens.is_empty() {
            return None;
        }
        let h = hash64(key.as_bytes());
        let i = self.tokens.partition_point(|&(t, _)| t < h);
        let (_, shard) = self.tokens[if i == self.tokens.len() { 0 } else { i }];
        Some(self.shards[shard].as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn keys(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| object_key(Some(&format!("ns-{}", i % 7)), &format!("at-{i}")))
            .collect()
    }

    fn assign<'a>(ring: &'a Ring, keys: &[String]) -> Vec<&'a str> {
        keys.iter()
            .map(|k| ring.shard_for(k).expect("non-empty ring"))
            .collect()
    }

    #[test]
    fn hash_is_fixed_by_its_constants() {
        // FNV-1a 64 test vectors (Fowler/Noll/Vo's published table)...
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
        // ...and one full value, so a change of the finalizer (which would reshuffle every
        // ring a running sharder computed) fails here.
        assert_eq!(hash64(b"default/at-1"), 0x0f9f857c8e957cb0);
        assert_ne!(hash64(b"default/at-1"), hash64(b"default/at-2"));
    }

    #[test]
    fn object_key_is_namespace_slash_name() {
        assert_eq!(object_key(Some("default"), "at-1"), "default/at-1");
        assert_eq!(object_key(None, "cluster-thing"), "cluster-thing");
        assert_eq!(object_key(Some(""), "x"), "x");
    }

    #[test]
    fn empty_ring_owns_nothing() {
        let r = Ring::new(Vec::<String>::new());
        assert!(r.is_empty());
        assert_eq!(r.shard_for("default/at-1"), None);
    }

    #[test]
    fn one_shard_owns_everything() {
        let r = Ring::new(["only"]);
        assert!(keys(500).iter().all(|k| r.shard_for(k) == Some("only")));
    }

    #[test]
    fn order_and_duplicates_do_not_matter() {
        let a = Ring::new(["c", "a", "b"]);
        let b = Ring::new(["a", "b", "c", "a"]);
        assert_eq!(a, b);
        assert_eq!(a.shards(), ["a", "b", "c"]);
        assert!(a.contains("b") && !a.contains("d"));
    }

    #[test]
    fn three_shards_share_about_a_third_each() {
        let r = Ring::new(["shard-0", "shard-1", "shard-2"]);
        let ks = keys(30_000);
        let mut count: HashMap<&str, usize> = HashMap::new();
        for s in assign(&r, &ks) {
            *count.entry(s).or_default() += 1;
        }
        assert_eq!(count.len(), 3);
        for (s, n) in count {
            // a third is 10,000; 400 virtual nodes keep each share within ±20%
            assert!((8_000..=12_000).contains(&n), "{s} owns {n} of 30000");
        }
    }

    #[test]
    fn a_fourth_shard_takes_about_a_quarter_and_only_for_itself() {
        let three = Ring::new(["shard-0", "shard-1", "shard-2"]);
        let four = Ring::new(["shard-0", "shard-1", "shard-2", "shard-3"]);
        let ks = keys(20_000);
        let before = assign(&three, &ks);
        let after = assign(&four, &ks);
        let mut moved = 0;
        for (b, a) in before.iter().zip(&after) {
            if b != a {
                assert_eq!(*a, "shard-3", "a key moved between old shards");
                moved += 1;
            }
        }
        // a quarter is 5,000
        assert!((3_500..=6_500).contains(&moved), "{moved} of 20000 moved");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Removing any shard moves exactly that shard's keys, and adding one moves keys
        /// only onto the newcomer.
        #[test]
        fn ring_changes_move_only_what_must_move(
            n in 2usize..7,
            removed in 0usize..7,
            salt in "[a-z]{0,6}",
        ) {
            let ids: Vec<String> = (0..n).map(|i| format!("{salt}shard-{i}")).collect();
            let removed = &ids[removed % n];
            let full = Ring::new(ids.clone());
            let less = Ring::new(ids.iter().filter(|s| *s != removed).cloned());
            let ks = keys(2_000);
            for k in &ks {
                let (f, l) = (full.shard_for(k).unwrap(), less.shard_for(k).unwrap());
                if f == removed.as_str() {
                    prop_assert_ne!(l, removed.as_str());
                } else {
                    // removal: keys of other shards stay; addition (less -> full): a key
                    // that moves, moves to the added shard
                    prop_assert_eq!(f, l);
                }
            }
        }

        /// Any key on a non-empty ring has a shard, and it is one of the ring's.
        #[test]
        fn every_key_has_a_member_shard(key in ".{0,40}", n in 1usize..6) {
            let r = Ring::new((0..n).map(|i| format!("s{i}")));
            let s = r.shard_for(&key).unwrap();
            prop_assert!(r.contains(s));
        }
    }
}
