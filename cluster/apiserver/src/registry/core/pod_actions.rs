//! Three subresources that are actions, not objects: `serviceaccounts/<name>/token`
//! (TokenRequest), `pods/<name>/eviction` (Eviction) and `pods/<name>/binding` (Binding).
//!
//! * **TokenRequest** (`pkg/registry/core/serviceaccount/storage/token.go`): a `POST` of an
//!   `authentication.k8s.io/v1` TokenRequest for an existing ServiceAccount answers `201` with
//!   the request, its `spec` defaulted (`expirationSeconds: 3600`; audiences the server's,
//!   `https://kubernetes.default.svc.cluster.local`) and `status.token` and
//!   `status.expirationTimestamp` filled in. The token authenticates as
//!   `system:serviceaccount:<namespace>:<name>` until it expires ([`crate::auth::tokens::TokenTable`]).
//!   It is an opaque random string, not a signed JWT: this server has no service account
//!   signing key, and clients treat the token as opaque. `expirationSeconds` below 600 is
//!   `422` (`may not specify a duration less than 10 minutes`), above 2^32 too.
//! * **Eviction** (`pkg/registry/core/pod/storage/eviction.go`): a `POST` of a `policy/v1`
//!   Eviction deletes the pod (with the Eviction's `deleteOptions`) unless a
//!   PodDisruptionBudget selecting it allows no disruption, and answers `201` with a `Success`
//!   Status. A budget's allowance is computed from the pods at hand (healthy = Running and
//!   Ready, against `minAvailable` or `maxUnavailable`, integers or percentages), as the
//!   disruption controller would have written it; a pod that is not running (Pending,
//!   Succeeded, Failed) is evicted whatever the budget says. A refusal is `429
//!   TooManyRequests` `Cannot evict pod as it would violate the pod's disruption budget.` with
//!   the cause `DisruptionBudget`; two budgets on one pod are `500`.
//! * **Binding** (`pkg/registry/core/pod/storage/storage.go`, `BindingREST`): a `POST` of a
//!   core/v1 Binding (`target: {kind: Node, name: <node>}`) is how a scheduler assigns a pod:
//!   it sets `spec.nodeName`, merges the Binding's annotations into the pod's, sets the
//!   `PodScheduled` condition `True`, and answers `201` with a `Success` Status. The Binding's
//!   `metadata.name` must be the pod's (`400 name in URL does not match name in Binding
//!   object`) and its `metadata.namespace`, if set, the request's. The resource `bindings`
//!   (`POST /api/v1/namespaces/NS/bindings`, kube's `LegacyBindingREST`) is the same action,
//!   the pod named by the Binding's `metadata.name`. `target.name`
//!   is required and `target.kind` must be `Node` (or empty); a Binding carrying
//!   `metadata.uid` or `metadata.resourceVersion` binds only that incarnation or version. A
//!   pod already assigned (`pod X is already assigned to node "Y"`) or being deleted (`pod X
//!   is being deleted, cannot be assigned to a host`) is `409 Conflict`.
//!
//! ComponentStatuses ([`component_statuses`]) are answered here too: like kube-apiserver's
//! `componentstatus` REST storage they are computed on each read, never stored, and only
//! `get` and `list` exist (`405` otherwise); every component of this server is in-process and
//! healthy, so `scheduler`, `controller-manager` and `etcd-0` are `Healthy`. Every answer
//! carries the deprecation warning `v1 ComponentStatus is deprecated in v1.19+`.

use serde_json::{Value, json};

use crate::api::object_meta::meta_str;
use crate::api::status::{ApiError, Cause};
use crate::auth::tokens::TokenTable;
use crate::registry::State;
use crate::registry::generic::{self as verbs, DeleteOptions, Target};

/// The audience of this server's tokens (kube-apiserver's default `--api-audiences`).
pub const AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// `POST serviceaccounts/<name>/token`.
pub fn token_request(
    st: &State,
    tokens: &TokenTable,
    ns: &str,
    name: &str,
    body: &Value,
) -> Result<(u16, Value), ApiError> {
    if st.get("core/serviceaccounts", ns, name).is_none() {
        return Err(ApiError::not_found("serviceaccounts", "", name));
    }
    let spec = &body["spec"];
    let seconds = spec["expirationSeconds"].as_i64().unwrap_or(3600);
    if !(600..=1 << 32).contains(&seconds) {
        return Err(ApiError::invalid(
            "TokenRequest",
            "authentication.k8s.io",
            name,
            vec![Cause::new(
                "FieldValueInvalid",
                "spec.expirationSeconds",
                format!(
                    "Invalid value: {seconds}: may not specify a duration less than 10 minutes"
                ),
            )],
        ));
    }
    let audiences = match spec["audiences"].as_array() {
        Some(a) if !a.is_empty() => Value::Array(a.clone()),
        _ => json!([AUDIENCE]),
    };
    let now = jiff::Timestamp::now();
    let expires = now.as_second().saturating_add(seconds);
    let user = format!("system:serviceaccount:{ns}:{name}");
    let Some(token) = tokens.issue(&user, expires.max(0) as u64) else {
        return Err(ApiError::new(
            429,
            "TooManyRequests",
            "too many service account tokens are valid at once",
        ));
    };
    let expiration = jiff::Timestamp::from_second(expires)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    Ok((
        201,
        json!({
            "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": null},
            "spec": {"audiences": audiences, "expirationSeconds": seconds,
                     "boundObjectRef": spec.get("boundObjectRef").cloned().unwrap_or(Value::Null)},
            "status": {"token": token, "expirationTimestamp": expiration}
        }),
    ))
}

/// Whether a budget's `selector` selects a pod with `labels` (policy/v1: `{}` selects every
/// pod, `null` none).
fn selects(selector: &Value, labels: &Value) -> bool {
    if selector.is_null() {
        return false;
    }
    crate::api::selectors::LabelSelector::from_json(selector)
        .is_ok_and(|s| s.matches_object(&json!({"metadata": {"labels": labels}})))
}

fn healthy(p: &Value) -> bool {
    p["status"]["phase"] == "Running"
        && p["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// An integer or a percentage of `total` (rounded up, as `GetScaledValueFromIntOrPercent`
/// does for PDBs).
fn scaled(v: &Value, total: i64) -> Option<i64> {
    if let Some(n) = v.as_i64() {
        return Some(n);
    }
    let pct: i64 = v.as_str()?.strip_suffix('%')?.parse().ok()?;
    Some((pct * total + 99) / 100)
}

/// `POST pods/<name>/eviction`.
pub fn evict(st: &mut State, pods: &Target, body: &Value) -> Result<(u16, Value), ApiError> {
    let ns = pods.namespace.clone().unwrap_or_default();
    let name = pods.name.clone().unwrap_or_default();
    let Some(pod) = st.get("core/pods", &ns, &name).cloned() else {
        return Err(ApiError::not_found("pods", "", &name));
    };
    let phase = pod["status"]["phase"].as_str().unwrap_or_default();
    let ignores_budgets = matches!(phase, "Pending" | "Succeeded" | "Failed" | "")
        || !meta_str(&pod, "deletionTimestamp").is_empty();
    if !ignores_budgets {
        let labels = &pod["metadata"]["labels"];
        let budgets: Vec<Value> = st
            .list("policy/poddisruptionbudgets", Some(&ns))
            .into_iter()
            .filter(|b| selects(&b["spec"]["selector"], labels))
            .cloned()
            .collect();
        if budgets.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        if let Some(b) = budgets.first() {
            let selected: Vec<Value> = st
                .list("core/pods", Some(&ns))
                .into_iter()
                .filter(|p| selects(&b["spec"]["selector"], &p["metadata"]["labels"]))
                .cloned()
                .collect();
            let total = selected.len() as i64;
            let healthy_now = selected.iter().filter(|p| healthy(p)).count() as i64;
            let desired = if let Some(min) = scaled(&b["spec"]["minAvailable"], total) {
                min
            } else if let Some(max) = scaled(&b["spec"]["maxUnavailable"], total) {
                total - max
            } else {
                total
            };
            if healthy_now - desired <= 0 {
                let budget = meta_str(b, "name");
                let mut e = ApiError::new(
                    429,
                    "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                );
                e.details = Some(json!({"causes": [{"reason": "DisruptionBudget",
                    "message": format!("The disruption budget {budget} needs {desired} healthy pods and has {healthy_now} currently")}]}));
                return Err(e);
            }
        }
    }
    let opts = DeleteOptions::parse(
        body.get("deleteOptions"),
        &crate::api::query::Query::parse(None),
    )?;
    verbs::delete_one(st, pods, &opts)?;
    Ok((
        201,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

/// `POST pods/<name>/binding`: assigns the pod to `target.name` (see the module docs);
/// `now` is the `lastTransitionTime` of the `PodScheduled` condition.
pub fn bind(
    st: &mut State,
    pods: &Target,
    body: &Value,
    now: &str,
) -> Result<(u16, Value), ApiError> {
    let ns = pods.namespace.clone().unwrap_or_default();
    let name = pods.name.clone().unwrap_or_default();
    if meta_str(body, "name") != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Binding object",
        ));
    }
    let body_ns = meta_str(body, "namespace");
    if !body_ns.is_empty() && body_ns != ns {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let node = body["target"]["name"].as_str().unwrap_or_default();
    let kind = body["target"]["kind"].as_str().unwrap_or_default();
    let mut causes = vec![];
    if node.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "target.name",
            "Required value",
        ));
    }
    if !kind.is_empty() && kind != "Node" {
        causes.push(Cause::new(
            "FieldValueNotSupported",
            "target.kind",
            format!("Unsupported value: {kind:?}: supported values: \"Node\""),
        ));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid("Binding", "", &name, causes));
    }
    let Some(mut pod) = st.get("core/pods", &ns, &name).cloned() else {
        return Err(ApiError::not_found("pods", "", &name));
    };
    let uid = meta_str(body, "uid");
    let rv = meta_str(body, "resourceVersion");
    if (!uid.is_empty() && uid != meta_str(&pod, "uid"))
        || (!rv.is_empty() && rv != meta_str(&pod, "resourceVersion"))
    {
        return Err(ApiError::conflict("pods", "", &name));
    }
    if !meta_str(&pod, "deletionTimestamp").is_empty() {
        return Err(ApiError::conflict_because(
            "pods",
            "",
            &name,
            &format!("pod {name} is being deleted, cannot be assigned to a host"),
        ));
    }
    let assigned = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    if !assigned.is_empty() {
        return Err(ApiError::conflict_because(
            "pods",
            "",
            &name,
            &format!("pod {name} is already assigned to node {assigned:?}"),
        ));
    }
    pod["spec"]["nodeName"] = json!(node);
    if let Some(extra) = body["metadata"]["annotations"].as_object() {
        let meta = &mut pod["metadata"];
        if !meta["annotations"].is_object() {
            meta["annotations"] = json!({});
        }
        for (k, v) in extra {
            meta["annotations"][k] = v.clone();
        }
    }
    let mut conditions = pod["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // No `lastProbeTime: null` (a zero time): the server drops a built-in kind's `null` fields
    // on every other write, and the node's status writes copy this condition.
    let scheduled = json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": now});
    match conditions.iter_mut().find(|c| c["type"] == "PodScheduled") {
        Some(c) if c["status"] == "True" => {}
        Some(c) => *c = scheduled,
        None => conditions.push(scheduled),
    }
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    pod["status"]["conditions"] = json!(conditions);
    st.write("core/pods", pod);
    Ok((
        201,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

/// The deprecation warning of ComponentStatuses.
pub const COMPONENT_STATUS_WARNING: &str = "v1 ComponentStatus is deprecated in v1.19+";

/// Every ComponentStatus, in the order kube-apiserver lists them.
pub fn component_statuses() -> Vec<Value> {
    [
        ("scheduler", "ok"),
        ("controller-manager", "ok"),
        ("etcd-0", "{\"health\":\"true\",\"reason\":\"\"}"),
    ]
    .iter()
    .map(|(name, message)| {
        json!({"kind": "ComponentStatus", "apiVersion": "v1",
               "metadata": {"name": name, "creationTimestamp": null},
               "conditions": [{"type": "Healthy", "status": "True", "message": message}]})
    })
    .collect()
}

/// `GET componentstatuses[/name]`.
pub fn component_status_answer(name: Option<&str>) -> Result<Value, ApiError> {
    let all = component_statuses();
    match name {
        Some(n) => all
            .into_iter()
            .find(|c| c["metadata"]["name"] == n)
            .ok_or_else(|| ApiError::not_found("componentstatuses", "", n)),
        None => Ok(json!({"kind": "ComponentStatusList", "apiVersion": "v1",
                          "metadata": {}, "items": all})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Store;

    fn pods_target(store: &Store, name: &str) -> Target {
        Target {
            def: store
                .read(|s| s.registry.lookup("", "v1", "pods"))
                .expect("pods are served"),
            namespace: Some("default".into()),
            name: Some(name.into()),
            subresource: Some("binding".into()),
        }
    }

    fn binding(node: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
               "target": {"kind": "Node", "name": node}})
    }

    #[test]
    fn a_binding_assigns_an_unassigned_pod_once() {
        let store = Store::new(100);
        store.write(|s| {
            s.create(
                "core/pods",
                json!({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
                       "spec": {"containers": [{"name": "c", "image": "i"}]},
                       "status": {"phase": "Pending"}}),
            )
        });
        let t = pods_target(&store, "p");
        let (code, _) = store
            .write(|s| bind(s, &t, &binding("n1"), "2024-01-01T00:00:00Z"))
            .unwrap();
        assert_eq!(code, 201);
        let pod = store
            .read(|s| s.get("core/pods", "default", "p").cloned())
            .unwrap();
        assert_eq!(pod["spec"]["nodeName"], "n1");
        assert_eq!(pod["status"]["conditions"][0]["type"], "PodScheduled");
        assert_eq!(pod["status"]["conditions"][0]["status"], "True");

        let again = store
            .write(|s| bind(s, &t, &binding("n2"), "2024-01-01T00:00:00Z"))
            .unwrap_err();
        assert_eq!(again.code, 409);
        assert!(
            again.message.contains("already assigned to node \"n1\""),
            "{}",
            again.message
        );

        let mut wrong_uid = binding("n1");
        wrong_uid["metadata"]["uid"] = json!("other");
        let e = store.write(|s| bind(s, &t, &wrong_uid, "")).unwrap_err();
        assert_eq!(e.code, 409);
        let e = store.write(|s| bind(s, &t, &binding(""), "")).unwrap_err();
        assert_eq!(e.code, 422);
        let missing = pods_target(&store, "q");
        let e = store
            .write(|s| bind(s, &missing, &binding("n1"), ""))
            .unwrap_err();
        assert_eq!(e.code, 400, "the URL names q, the Binding p");
        assert_eq!(
            e.message,
            "name in URL does not match name in Binding object"
        );
        let mut for_q = binding("n1");
        for_q["metadata"]["name"] = json!("q");
        let e = store.write(|s| bind(s, &missing, &for_q, "")).unwrap_err();
        assert_eq!(e.code, 404);
        let mut elsewhere = binding("n1");
        elsewhere["metadata"]["namespace"] = json!("other");
        let e = store.write(|s| bind(s, &t, &elsewhere, "")).unwrap_err();
        assert_eq!(e.code, 400);
    }
}
