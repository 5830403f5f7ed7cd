//! What an object charges against a quota, and what a namespace's objects use: kube's quota
//! evaluators (`pkg/quota/v1/evaluator/core`: pods, services; `pkg/quota/v1/generic`: the
//! object count evaluator every other resource gets).
//!
//! * every object counts 1 toward `count/<resource>` (core) or `count/<resource>.<group>`;
//! * core objects with a legacy name count 1 toward it too: `services`, `configmaps`, `secrets`,
//!   `persistentvolumeclaims`, `replicationcontrollers`, `resourcequotas`;
//! * a pod that has not reached a terminal state (phase `Succeeded`/`Failed`, or past its
//!   deletion grace period) counts toward `pods` and charges its compute resources: the sum of
//!   its containers' requests and limits, each raised to the largest init container's, plus
//!   `spec.overhead` — `cpu`/`requests.cpu`, `memory`/`requests.memory`,
//!   `ephemeral-storage`/`requests.ephemeral-storage`, `limits.<name>`, and `requests.<name>` for
//!   extended resources (`example.com/gpu`);
//! * a Service of type `LoadBalancer` counts toward `services.loadbalancers`, and a `NodePort`
//!   or `LoadBalancer` Service's ports toward `services.nodeports`.

use std::collections::BTreeMap;

use apimachinery::quantity::Quantity;
use serde_json::Value;

use crate::registry::State;
use crate::registry::resources::ResourceDef;

/// Resource names and amounts (`corev1.ResourceList`), in name order.
pub type ResourceList = BTreeMap<String, Quantity>;

/// The object-count name of a resource: `count/pods`, `count/deployments.apps`.
pub fn count_name(group: &str, plural: &str) -> String {
    if group.is_empty() {
        format!("count/{plural}")
    } else {
        format!("count/{plural}.{group}")
    }
}

/// The legacy object-count name of a core resource, if it has one.
fn legacy_name(group: &str, plural: &str) -> Option<&'static str> {
    if !group.is_empty() {
        return None;
    }
    [
        "services",
        "configmaps",
        "secrets",
        "persistentvolumeclaims",
        "replicationcontrollers",
        "resourcequotas",
    ]
    .into_iter()
    .find(|n| *n == plural)
}

/// The compute resource names a pod's quota usage can hold (besides extended `requests.*`).
const POD_COMPUTE: &[&str] = &[
    "pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
];

/// Whether a quota resource name is one this resource's evaluator tracks
/// (`Evaluator.MatchingResources`).
pub fn tracks(group: &str, plural: &str, name: &str) -> bool {
    if name == count_name(group, plural) || legacy_name(group, plural) == Some(name) {
        return true;
    }
    match (group, plural) {
        ("", "pods") => {
            POD_COMPUTE.contains(&name)
                || name.starts_with("requests.") && name.contains('/')
                || name.starts_with("requests.hugepages-")
                || name.starts_with("limits.hugepages-")
        }
        ("", "services") => matches!(name, "services.loadbalancers" | "services.nodeports"),
        _ => false,
    }
}

fn add(list: &mut ResourceList, name: &str, q: Quantity) {
    let sum = match list.get(name) {
        Some(have) => have.add(&q),
        None => q,
    };
    list.insert(name.to_owned(), sum);
}

/// The quantities of a container's `resources.<field>` (unparsable values are left out:
/// validation refused them).
fn resource_list(v: &Value) -> ResourceList {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), Quantity::parse(v.as_str()?).ok()?)))
                .collect()
        })
        .unwrap_or_default()
}

fn max_into(list: &mut ResourceList, other: &ResourceList) {
    for (k, v) in other {
        let m = match list.get(k) {
            Some(have) => Quantity::max(*have, *v),
            None => *v,
        };
        list.insert(k.clone(), m);
    }
}

/// `podComputeUsageHelper`: the quota names a pod's (or a container's) requests and limits
/// charge.
pub fn compute_usage(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    for (name, q) in requests {
        match name.as_str() {
            "cpu" | "memory" | "ephemeral-storage" => {
                out.insert(name.clone(), *q);
                out.insert(format!("requests.{name}"), *q);
            }
            n if n.starts_with("hugepages-")
                || n.contains('/') && !n.starts_with("kubernetes.io/") =>
            {
                out.insert(format!("requests.{n}"), *q);
            }
            _ => {}
        }
    }
    for (name, q) in limits {
        if matches!(name.as_str(), "cpu" | "memory" | "ephemeral-storage")
            || name.starts_with("hugepages-")
        {
            out.insert(format!("limits.{name}"), *q);
        }
    }
    out
}

/// `QuotaV1Pod`: whether a pod still holds its compute resources (not terminal, not past its
/// deletion grace period).
pub fn pod_is_live(pod: &Value) -> bool {
    if matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    ) {
        return false;
    }
    if let Some(deleted) = pod["metadata"]["deletionTimestamp"].as_str()
        && let Some(grace) = pod["metadata"]["deletionGracePeriodSeconds"].as_i64()
        && let Ok(t) = deleted.parse::<jiff::Timestamp>()
        && let Ok(end) = t.checked_add(jiff::SignedDuration::from_secs(grace))
        && jiff::Timestamp::now() > end
    {
        return false;
    }
    true
}

fn containers(pod: &Value, field: &str) -> Vec<Value> {
    pod["spec"][field].as_array().cloned().unwrap_or_default()
}

/// A pod's containers and init containers, as `(name, requests, limits)`.
pub fn pod_containers(pod: &Value) -> Vec<(String, ResourceList, ResourceList)> {
    containers(pod, "containers")
        .iter()
        .chain(containers(pod, "initContainers").iter())
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().to_owned(),
                resource_list(&c["resources"]["requests"]),
                resource_list(&c["resources"]["limits"]),
            )
        })
        .collect()
}

fn pod_usage(pod: &Value) -> ResourceList {
    let mut out = ResourceList::new();
    add(&mut out, "count/pods", Quantity::from_int(1));
    if !pod_is_live(pod) {
        return out;
    }
    let (mut requests, mut limits) = (ResourceList::new(), ResourceList::new());
    for c in containers(pod, "containers") {
        for (k, q) in resource_list(&c["resources"]["requests"]) {
            add(&mut requests, &k, q);
        }
        for (k, q) in resource_list(&c["resources"]["limits"]) {
            add(&mut limits, &k, q);
        }
    }
    for c in containers(pod, "initContainers") {
        max_into(&mut requests, &resource_list(&c["resources"]["requests"]));
        max_into(&mut limits, &resource_list(&c["resources"]["limits"]));
    }
    for (k, q) in resource_list(&pod["spec"]["overhead"]) {
        add(&mut requests, &k, q);
        if limits.contains_key(&k) {
            add(&mut limits, &k, q);
        }
    }
    add(&mut out, "pods", Quantity::from_int(1));
    for (k, q) in compute_usage(&requests, &limits) {
        add(&mut out, &k, q);
    }
    out
}

fn service_usage(svc: &Value) -> ResourceList {
    let mut out = ResourceList::new();
    let ty = svc["spec"]["type"].as_str().unwrap_or("ClusterIP");
    let ports = svc["spec"]["ports"].as_array().map_or(0, Vec::len) as i64;
    match ty {
        "LoadBalancer" => {
            out.insert("services.loadbalancers".into(), Quantity::from_int(1));
            out.insert("services.nodeports".into(), Quantity::from_int(ports));
        }
        "NodePort" => {
            out.insert("services.nodeports".into(), Quantity::from_int(ports));
        }
        _ => {}
    }
    out
}

/// What creating `obj` of `def` charges (`Evaluator.Usage`).
pub fn object_usage(def: &ResourceDef, obj: &Value) -> ResourceList {
    let mut out = match (def.group.as_str(), def.plural.as_str()) {
        ("", "pods") => pod_usage(obj),
        ("", "services") => service_usage(obj),
        _ => ResourceList::new(),
    };
    out.insert(count_name(&def.group, &def.plural), Quantity::from_int(1));
    if let Some(legacy) = legacy_name(&def.group, &def.plural) {
        out.insert(legacy.to_owned(), Quantity::from_int(1));
    }
    out
}

/// The storage an object-count name counts (`count/<resource>[.<group>]` or a legacy name),
/// if the server serves that resource.
fn counted_storage(st: &State, name: &str) -> Option<String> {
    let (group, plural) = match name.strip_prefix("count/") {
        Some(rest) => match rest.split_once('.') {
            Some((plural, group)) => (group, plural),
            None => ("", rest),
        },
        None => ("", legacy_name("", name)?),
    };
    st.registry
        .all()
        .iter()
        .find(|d| d.group == group && d.plural == plural)
        .map(|d| d.storage.clone())
}

/// What the objects of namespace `ns` use of each resource in `hard`: the usage the quota
/// controller computes (`CalculateUsage`), every name of `hard` present (`0` when nothing
/// uses it).
pub fn namespace_usage<'a>(
    st: &State,
    ns: &str,
    hard: impl IntoIterator<Item = &'a String>,
) -> ResourceList {
    let names: Vec<&String> = hard.into_iter().collect();
    let mut used: ResourceList = names
        .iter()
        .map(|n| ((*n).clone(), Quantity::zero()))
        .collect();
    let wants = |g: &str, p: &str| {
        names
            .iter()
            .any(|n| tracks(g, p, n) && !n.starts_with("count/"))
    };
    if wants("", "pods") {
        for pod in st.list("core/pods", Some(ns)) {
            for (k, q) in pod_usage(pod) {
                if let Some(have) = used.get_mut(&k) {
                    *have = have.add(&q);
                }
            }
        }
    }
    if names
        .iter()
        .any(|n| matches!(n.as_str(), "services.loadbalancers" | "services.nodeports"))
    {
        for svc in st.list("core/services", Some(ns)) {
            for (k, q) in service_usage(svc) {
                if let Some(have) = used.get_mut(&k) {
                    *have = have.add(&q);
                }
            }
        }
    }
    for name in &names {
        if name.as_str() == "pods" {
            continue;
        }
        if let Some(storage) = counted_storage(st, name) {
            let n = st.list(&storage, Some(ns)).len() as i64;
            used.insert((*name).clone(), Quantity::from_int(n));
        }
    }
    used
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_charges_its_containers_raised_to_its_init_containers() {
        let pod = json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "500m"}}},
                {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]}});
        let u = pod_usage(&pod);
        let shown: Vec<String> = u.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            shown,
            [
                "count/pods=1",
                "cpu=2",
                "limits.cpu=500m",
                "memory=128Mi",
                "pods=1",
                "requests.cpu=2",
                "requests.memory=128Mi"
            ]
        );
        let done = json!({"status": {"phase": "Succeeded"}, "spec": pod["spec"].clone()});
        assert_eq!(pod_usage(&done).len(), 1, "a finished pod is only counted");
    }
}
