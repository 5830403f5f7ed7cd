//! The ResourceQuota admission plugin (`plugin/pkg/admission/resourcequota`, its
//! `CheckRequest`): every create of a namespaced object is checked against the quotas of its
//! namespace before it is stored, under the store's lock, so two creates cannot both take the
//! last unit.
//!
//! For each quota that tracks something the object charges (and, for a quota with scopes, whose
//! scopes select the object: only pods are scoped), in name order:
//!
//! 1. a pod must name, in every container and init container, the compute resources the quota
//!    tracks among `cpu`, `memory`, `requests.*` and `limits.*` of both; if not, `403` with
//!    `pods "p" is forbidden: failed quota: q1: must specify limits.cpu for: c1,c2; requests.cpu
//!    for: c1` (`podEvaluator.Constraints`);
//! 2. the object's usage ([`super::usage::object_usage`]) restricted to the quota's names is
//!    added to `status.used`; if any name then exceeds `status.hard`, `403` with
//!    `configmaps "c3" is forbidden: exceeded quota: q1, requested: count/configmaps=1, used:
//!    count/configmaps=2, limited: count/configmaps=2` (the exceeded names only, sorted, in
//!    canonical quantities).
//!
//! Updates are not charged (kube charges a few of them: a pod's in-place resize, a Service
//! changing type), nor are subresources.

use apimachinery::quantity::Quantity;
use serde_json::Value;

use crate::api::object_meta::meta_str;
use crate::api::status::ApiError;
use crate::registry::State;
use crate::registry::core::resourcequotas::usage::{
    ResourceList, compute_usage, object_usage, pod_containers, tracks,
};
use crate::registry::core::resourcequotas::{STORAGE, parse_list};
use crate::registry::resources::ResourceDef;

/// The compute names a pod must state in every container when a quota tracks them.
const VALIDATION_SET: &[&str] = &[
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

fn pretty(list: &ResourceList, names: &[String]) -> String {
    names
        .iter()
        .map(|n| {
            let q = list.get(n).copied().unwrap_or_else(Quantity::zero);
            format!("{n}={q}")
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether a pod is selected by one scope (`podMatchesScopeFunc`).
fn pod_in_scope(pod: &Value, scope: &str, values: Option<(&str, &[Value])>) -> bool {
    let best_effort = pod_containers(pod)
        .iter()
        .all(|(_, req, lim)| req.is_empty() && lim.is_empty());
    match scope {
        "Terminating" => pod["spec"]["activeDeadlineSeconds"]
            .as_i64()
            .is_some_and(|s| s >= 0),
        "NotTerminating" => !pod_in_scope(pod, "Terminating", None),
        "BestEffort" => best_effort,
        "NotBestEffort" => !best_effort,
        "PriorityClass" => {
            let class = pod["spec"]["priorityClassName"]
                .as_str()
                .unwrap_or_default();
            match values {
                None | Some(("Exists", _)) => !class.is_empty(),
                Some(("DoesNotExist", _)) => class.is_empty(),
                Some(("In", vals)) => vals.iter().any(|v| v.as_str() == Some(class)),
                Some(("NotIn", vals)) => !vals.iter().any(|v| v.as_str() == Some(class)),
                Some(_) => false,
            }
        }
        _ => false,
    }
}

/// Whether a quota's scopes select the object (`generic.Matches` with the evaluator's scope
/// function): an unscoped quota selects everything, a scoped one only pods in all its scopes.
fn in_scopes(def: &ResourceDef, obj: &Value, quota: &Value) -> bool {
    let scopes = quota["spec"]["scopes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let exprs = quota["spec"]["scopeSelector"]["matchExpressions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if scopes.is_empty() && exprs.is_empty() {
        return true;
    }
    if !(def.group.is_empty() && def.plural == "pods") {
        return false;
    }
    scopes
        .iter()
        .all(|s| pod_in_scope(obj, s.as_str().unwrap_or_default(), None))
        && exprs.iter().all(|e| {
            let values = e["values"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            pod_in_scope(
                obj,
                e["scopeName"].as_str().unwrap_or_default(),
                Some((e["operator"].as_str().unwrap_or_default(), values)),
            )
        })
}

/// `podEvaluator.Constraints`: `must specify <name> for: <containers>; ...`, or `None`.
fn missing_requests(obj: &Value, required: &[String]) -> Option<String> {
    let required: Vec<&String> = required
        .iter()
        .filter(|r| VALIDATION_SET.contains(&r.as_str()))
        .collect();
    let mut missing: std::collections::BTreeMap<&str, std::collections::BTreeSet<String>> =
        Default::default();
    for (name, requests, limits) in pod_containers(obj) {
        let have = compute_usage(&requests, &limits);
        for r in &required {
            if !have.contains_key(r.as_str()) {
                missing.entry(r.as_str()).or_default().insert(name.clone());
            }
        }
    }
    if missing.is_empty() {
        return None;
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(r, cs)| {
            format!(
                "{r} for: {}",
                cs.iter().cloned().collect::<Vec<_>>().join(",")
            )
        })
        .collect();
    Some(format!("must specify {}", parts.join("; ")))
}

/// Checks a create of `obj` (about to be stored) against the quotas of its namespace.
pub fn admit_create(st: &State, def: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
    let ns = meta_str(obj, "namespace");
    if !def.namespaced || ns.is_empty() {
        return Ok(());
    }
    let mut quotas: Vec<&Value> = st.list(STORAGE, Some(ns));
    if quotas.is_empty() {
        return Ok(());
    }
    quotas.sort_by(|a, b| meta_str(a, "name").cmp(meta_str(b, "name")));
    let name = meta_str(obj, "name");
    let forbidden = |why: String| ApiError::forbidden(&def.plural, &def.group, name, &why);
    let is_pod = def.group.is_empty() && def.plural == "pods";
    // First every pertinent quota's constraints, then every quota's limits, as `CheckRequest`.
    let mut pertinent = vec![];
    for quota in quotas {
        let hard = parse_list(&quota["status"]["hard"]).unwrap_or_default();
        let restricted: Vec<String> = hard
            .iter()
            .map(|(k, _)| k.clone())
            .filter(|k| tracks(&def.group, &def.plural, k))
            .collect();
        if restricted.is_empty() || !in_scopes(def, obj, quota) {
            continue;
        }
        let qname = meta_str(quota, "name");
        if is_pod && let Some(msg) = missing_requests(obj, &restricted) {
            return Err(forbidden(format!("failed quota: {qname}: {msg}")));
        }
        pertinent.push((qname, quota, hard));
    }
    let delta = object_usage(def, obj);
    for (qname, quota, hard) in pertinent {
        let used: ResourceList = parse_list(&quota["status"]["used"])
            .unwrap_or_default()
            .into_iter()
            .collect();
        let hard: ResourceList = hard.into_iter().collect();
        let requested: ResourceList = delta
            .iter()
            .filter(|(k, _)| hard.contains_key(*k))
            .map(|(k, q)| (k.clone(), *q))
            .collect();
        if requested.values().all(Quantity::is_zero) {
            continue;
        }
        let exceeded: Vec<String> = requested
            .iter()
            .filter(|(k, q)| {
                let now = used.get(*k).copied().unwrap_or_else(Quantity::zero);
                hard.get(*k).is_some_and(|limit| now.add(q) > *limit)
            })
            .map(|(k, _)| k.clone())
            .collect();
        if !exceeded.is_empty() {
            return Err(forbidden(format!(
                "exceeded quota: {qname}, requested: {}, used: {}, limited: {}",
                pretty(&requested, &exceeded),
                pretty(&used, &exceeded),
                pretty(&hard, &exceeded)
            )));
        }
    }
    Ok(())
}
