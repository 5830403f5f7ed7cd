//! `/mutate-shard`: the sharder's mutating webhook, assigning an object to its shard at
//! creation.
//!
//! kubernetes-controller-sharding assigns new objects in admission so that they never exist
//! unassigned; the sharder's periodic pass ([`crate::sharding::sharder`]) stays as the safety
//! net for objects created while the webhook was unreachable (the configuration should use
//! `failurePolicy: Ignore` and a short timeout: availability of the API before a label) and
//! for objects that predate the ring. The route answers from the ring the *leading* sharder of
//! this process last computed ([`crate::sharding::sharder::published_ring`]); a replica that
//! does not lead the sharder, or a sharder whose caches have not synced yet, allows the object
//! unchanged and the pass assigns it within a second.
//!
//! For a `CREATE` (or an `UPDATE` of an object without the shard label) the answer is a JSON
//! patch adding `shard.sample-controller.dev/<ring>=<ring(namespace/name)>`. An object named by
//! `generateName` has no name in admission, so no key: it is allowed unchanged (the same
//! limitation as kubernetes-controller-sharding's). Register the route only for the owner kinds
//! (At, TDSet, RedisCluster, MyApp, Foo): owned objects are labelled by the shard that creates
//! them, and a StatefulSet's pods by the sharder.

use serde_json::{Value, json};

use super::Decision;
use crate::sharding::object_key;
use crate::sharding::sharder::published_ring;

/// RFC 6901: `~` → `~0`, `/` → `~1` in a JSON pointer token.
fn pointer_token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// The handler of `/mutate-shard`.
pub fn assign(request: &Value) -> Decision {
    let op = request["operation"].as_str().unwrap_or_default();
    if op != "CREATE" && op != "UPDATE" {
        return Decision::allow();
    }
    let Some((labels, ring)) = published_ring() else {
        return Decision::allow();
    };
    let meta = &request["object"]["metadata"];
    let key = labels.shard_key();
    if meta["labels"][key].is_string() {
        return Decision::allow();
    }
    let Some(name) = meta["name"].as_str().filter(|n| !n.is_empty()) else {
        return Decision::allow();
    };
    let namespace = meta["namespace"]
        .as_str()
        .or_else(|| request["namespace"].as_str());
    let Some(shard) = ring.shard_for(&object_key(namespace, name)) else {
        return Decision::allow();
    };
    let op = if meta["labels"].is_object() {
        json!({"op": "add", "path": format!("/metadata/labels/{}", pointer_token(key)), "value": shard})
    } else {
        json!({"op": "add", "path": "/metadata/labels", "value": {key: shard}})
    };
    Decision::Allow {
        patch: vec![op],
        warnings: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharding::sharder::publish_ring;
    use crate::sharding::{Ring, RingLabels};

    fn req(op: &str, meta: Value) -> Value {
        json!({"uid": "u", "operation": op, "namespace": "default", "object": {"metadata": meta}})
    }

    // One test: the published ring is process-wide.
    #[test]
    fn new_objects_get_the_label_of_their_ring_position() {
        publish_ring(None);
        assert_eq!(
            assign(&req("CREATE", json!({"name": "a"}))),
            Decision::allow()
        );

        let labels = RingLabels::new("r").unwrap();
        let ring = Ring::new(["s1", "s2", "s3"]);
        let want = ring.shard_for("default/a").unwrap().to_string();
        publish_ring(Some((labels, ring)));
        assert_eq!(
            assign(&req("CREATE", json!({"name": "a"}))),
            Decision::Allow {
                patch: vec![json!({"op": "add", "path": "/metadata/labels",
                                   "value": {"shard.sample-controller.dev/r": want}})],
                warnings: vec![]
            }
        );
        assert_eq!(
            assign(&req("CREATE", json!({"name": "a", "labels": {"app": "x"}}))),
            Decision::Allow {
                patch: vec![json!({"op": "add",
                                   "path": "/metadata/labels/shard.sample-controller.dev~1r",
                                   "value": want})],
                warnings: vec![]
            }
        );
        // Already assigned, generateName, or a delete: unchanged.
        let labelled = json!({"name": "a", "labels": {"shard.sample-controller.dev/r": "s9"}});
        assert_eq!(assign(&req("CREATE", labelled)), Decision::allow());
        assert_eq!(
            assign(&req("CREATE", json!({"generateName": "a-"}))),
            Decision::allow()
        );
        assert_eq!(
            assign(&req("DELETE", json!({"name": "a"}))),
            Decision::allow()
        );
        publish_ring(None);
    }
}
