//! Claiming: which objects of its namespace a controller owns, by label selector and
//! controller reference, with adoption and release.
//!
//! ## What Kubernetes does
//!
//! A ReplicaSet finds its pods, and a Deployment its ReplicaSets, through
//! `pkg/controller/controller_ref_manager.go` (`ClaimPods`, `ClaimReplicaSets`, both
//! `ClaimObject`): every object of the owner's namespace is looked at once, by two things, its
//! controller reference (the `ownerReferences` entry with `controller: true`) and whether the
//! owner's `spec.selector` (a `metav1.LabelSelector`, read by `LabelSelectorAsSelector`)
//! matches its labels:
//!
//! * controlled by the owner and matching: it is the owner's;
//! * controlled by the owner but no longer matching: it is **released** (the reference
//!   removed, by an update guarded by the object's resourceVersion);
//! * controlled by someone else: left alone;
//! * an orphan (no controller) that matches: **adopted** (a controller reference to the owner
//!   added), unless the owner or the object is being deleted.
//!
//! ## Here
//!
//! [`claim`] sorts a namespace's candidates into those three lists from the informer's cache;
//! [`adopt`] and [`release`] write the references through the loopback interface. The caller
//! decides what a failed adoption or release costs (the ReplicaSet controller logs it and
//! carries on, the Deployment controller syncs again). Departure: an owner being deleted still
//! releases what no longer matches (kube-controller-manager leaves it).

use std::collections::BTreeMap;

use apimachinery::labels::{Operator, Requirement, Selector};
use embedded_apiserver::ApiError;
use embedded_apiserver::loopback::{Loopback, Object, Resource};
use serde_json::Value;

use crate::informer::{controller_ref_of, is_deleting, meta_str};
use crate::pod_control::controller_ref;

/// An object's labels as a map (empty when absent).
pub fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    string_map(&obj["metadata"]["labels"])
}

/// A JSON object of strings as a map (other values skipped).
pub fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// The selector of a `metav1.LabelSelector` (`LabelSelectorAsSelector`): `None` when it is
/// invalid; an empty or missing one selects nothing here, as the workload controllers treat it
/// (validation refuses it anyway).
pub fn selector_of(v: &Value) -> Option<Selector> {
    let mut reqs = vec![];
    for (k, val) in v["matchLabels"].as_object().into_iter().flatten() {
        reqs.push(Requirement::new(k.clone(), Operator::Equals, [val.as_str()?]).ok()?);
    }
    for e in v["matchExpressions"].as_array().into_iter().flatten() {
        let op = match e["operator"].as_str()? {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            _ => return None,
        };
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        reqs.push(Requirement::new(e["key"].as_str()?, op, values).ok()?);
    }
    if reqs.is_empty() {
        return None;
    }
    Some(Selector::from_requirements(reqs))
}

/// The names of the `owners` (objects with a `spec.selector`) whose selector matches `obj`'s
/// labels: who may adopt an orphan (`getPodReplicaSets`, `getReplicaSetsForDeployment`'s
/// inverse), so its change syncs them.
pub fn selecting<'a>(owners: impl IntoIterator<Item = &'a Object>, obj: &Value) -> Vec<String> {
    let labels = labels_of(obj);
    owners
        .into_iter()
        .filter(|o| selector_of(&o["spec"]["selector"]).is_some_and(|s| s.matches(&labels)))
        .map(|o| meta_str(o, "name").to_owned())
        .collect()
}

/// What [`claim`] found among an owner's candidates (each list in the candidates' order).
#[derive(Debug, Default)]
pub struct Claimed {
    /// Controlled by the owner and matching its selector.
    pub owned: Vec<Value>,
    /// Orphans that match: to adopt.
    pub adopt: Vec<Value>,
    /// Controlled by the owner but no longer matching: to release.
    pub release: Vec<Value>,
}

/// Sorts `candidates` (objects of the owner's namespace) by controller reference and
/// `selector` (see the module docs).
pub fn claim<'a>(
    owner: &Value,
    selector: &Selector,
    candidates: impl IntoIterator<Item = &'a Object>,
) -> Claimed {
    let uid = meta_str(owner, "uid");
    let mut claimed = Claimed::default();
    for obj in candidates {
        let matches = selector.matches(&labels_of(obj));
        match controller_ref_of(obj) {
            Some(r) if r["uid"] == uid => {
                if matches {
                    claimed.owned.push(obj.to_value());
                } else {
                    claimed.release.push(obj.to_value());
                }
            }
            Some(_) => {}
            None if matches && !is_deleting(owner) && !is_deleting(obj) => {
                claimed.adopt.push(obj.to_value());
            }
            None => {}
        }
    }
    claimed
}

/// `obj` with `ownerReferences` changed by `f`, for an update that the object's
/// resourceVersion guards.
pub fn with_owner_refs(obj: &Value, f: impl FnOnce(&mut Vec<Value>)) -> Value {
    let mut updated = obj.clone();
    let mut refs = updated["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    f(&mut refs);
    if refs.is_empty() {
        if let Some(m) = updated["metadata"].as_object_mut() {
            m.remove("ownerReferences");
        }
    } else {
        updated["metadata"]["ownerReferences"] = Value::Array(refs);
    }
    updated
}

/// Adds a controller reference to `owner` (an `api_version` `kind`) to `obj` of `resource`;
/// the stored object.
pub async fn adopt(
    lb: &Loopback,
    resource: &Resource,
    owner: &Value,
    api_version: &str,
    kind: &str,
    obj: &Value,
) -> Result<Value, ApiError> {
    let owner_ref = controller_ref(owner, api_version, kind);
    let updated = with_owner_refs(obj, |refs| refs.push(owner_ref));
    lb.update(resource, meta_str(obj, "namespace"), updated)
        .await
}

/// Removes `owner`'s references from `obj` of `resource`; the stored object.
pub async fn release(
    lb: &Loopback,
    resource: &Resource,
    owner: &Value,
    obj: &Value,
) -> Result<Value, ApiError> {
    let uid = meta_str(owner, "uid");
    let updated = with_owner_refs(obj, |refs| refs.retain(|r| r["uid"] != uid));
    lb.update(resource, meta_str(obj, "namespace"), updated)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_read_match_labels_and_expressions() {
        let s = selector_of(&json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}))
        .unwrap();
        let labels = |v: Value| string_map(&v);
        assert!(s.matches(&labels(json!({"app": "web", "tier": "a"}))));
        assert!(!s.matches(&labels(json!({"app": "web"}))));
        assert!(selector_of(&json!({})).is_none());
        assert!(
            selector_of(&json!({"matchExpressions": [{"key": "k", "operator": "Bad"}]})).is_none()
        );
    }

    #[test]
    fn owner_references_are_added_and_removed() {
        let obj = json!({"metadata": {"name": "p", "ownerReferences": [{"uid": "a"}]}});
        let added = with_owner_refs(&obj, |refs| refs.push(json!({"uid": "b"})));
        assert_eq!(
            added["metadata"]["ownerReferences"],
            json!([{"uid": "a"}, {"uid": "b"}])
        );
        let removed = with_owner_refs(&obj, |refs| refs.retain(|r| r["uid"] != "a"));
        assert!(removed["metadata"].get("ownerReferences").is_none());
    }
}
