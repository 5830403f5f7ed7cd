//! The objects a new cluster starts with, and the ServiceAccount controller.
//!
//! kube-apiserver's post-start hooks and kube-controller-manager create these; test suites
//! written for real clusters expect them:
//!
//! * the **`kubernetes` Service** in `default` (the `kubernetesservice` bootstrap controller):
//!   port 443 `https`, target port the server's own, cluster IP `10.96.0.1`
//!   ([`crate::registry::core::services::kubernetes_service`]), seeded in [`crate::ApiServerBuilder::start`];
//! * the **bootstrap RBAC policy** (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy`, written by
//!   the `rbac/bootstrap-roles` post-start hook): the user-facing ClusterRoles `cluster-admin`,
//!   `admin`, `edit` and `view` (the last three aggregated from `system:aggregate-to-*`, whose
//!   rules are filled in as the aggregation controller fills them), the discovery roles
//!   `system:discovery`, `system:basic-user`, `system:public-info-viewer` and
//!   `system:monitoring`, and their ClusterRoleBindings (`cluster-admin` to `system:masters`,
//!   the discovery ones to `system:authenticated` and, for public info, `system:unauthenticated`).
//!   Every one carries the label `kubernetes.io/bootstrapping: rbac-defaults` and the annotation
//!   `rbac.authorization.kubernetes.io/autoupdate: "true"`. Like the hook, a start creates the
//!   missing ones and leaves existing ones alone (their rules are not re-reconciled). The
//!   rules are those of the real policy restricted to nothing: they name resources this server
//!   does not serve exactly as the real ones do;
//! * the roles of the embedded cluster's own components, which reach the server through the
//!   loopback interface ([`crate::loopback`]) as identified users: `system:kube-controller-manager`
//!   (bound to that user; every verb on every resource, the union of the `system:controller:*`
//!   roles kube-controller-manager's controllers use with `--use-service-account-credentials`,
//!   which the garbage collector's `*/*` already spans) and `system:node` (bound to the group
//!   `system:nodes`; see [`node_rules`]);
//! * a **`default` ServiceAccount** in every namespace (the controller manager's; the
//!   `serviceaccount-controller` of kube-controller-manager), created when the namespace
//!   appears and again if it is deleted, never in a namespace being deleted, and the
//!   **`kube-root-ca.crt` ConfigMap** (the `root-ca-cert-publisher`) holding the server's CA
//!   (`ca.crt`) when it serves HTTPS, kept at that content. The ServiceAccount controller is on
//!   by default; the publisher is on in the standalone server and opt-in for the library
//!   (`ClusterBuilder::root_ca_publisher` of the embedded cluster), so that a test's ConfigMaps are its own.
//!
//! Where the simulation departs: the real hooks build these objects in each kube-apiserver
//! process; here a test process may run a hundred servers, so the RBAC objects (and the APF
//! ones, `filters/flowcontrol`) are built once per process as templates, and each server
//! stores copies stamped with their own `uid` and `creationTimestamp`, as the hooks' creates
//! would be.

use std::sync::LazyLock;

use serde_json::{Value, json};

use crate::api::object_meta as meta;
use crate::registry::State;

const RBAC: &str = "rbac.authorization.k8s.io";

/// `get, list, watch` (bootstrappolicy's `Read`).
const READ: &[&str] = &["get", "list", "watch"];
/// `create, delete, deletecollection, patch, update` (bootstrappolicy's `Write`).
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];

fn rule(verbs: &[&str], group: &str, resources: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": [group], "resources": resources})
}

fn read_write() -> Vec<&'static str> {
    READ.iter().chain(WRITE).copied().collect()
}

fn url_rule(urls: &[&str]) -> Value {
    json!({"verbs": ["get"], "nonResourceURLs": urls})
}

/// The rules of `system:aggregate-to-view`.
fn view_rules() -> Vec<Value> {
    vec![
        rule(
            READ,
            "",
            &[
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "configmaps",
            ],
        ),
        rule(
            READ,
            "",
            &[
                "limitranges",
                "resourcequotas",
                "bindings",
                "events",
                "pods/status",
                "resourcequotas/status",
                "namespaces/status",
                "replicationcontrollers/status",
                "pods/log",
            ],
        ),
        rule(READ, "", &["namespaces"]),
        rule(READ, "discovery.k8s.io", &["endpointslices"]),
        rule(
            READ,
            "apps",
            &[
                "controllerrevisions",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
            ],
        ),
        rule(
            READ,
            "autoscaling",
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
        ),
        rule(
            READ,
            "batch",
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
        ),
        rule(
            READ,
            "extensions",
            &[
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "ingresses",
                "ingresses/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "replicationcontrollers/scale",
                "networkpolicies",
            ],
        ),
        rule(
            READ,
            "policy",
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
        ),
        rule(
            READ,
            "networking.k8s.io",
            &["ingresses", "ingresses/status", "networkpolicies"],
        ),
    ]
}

/// The rules of `system:aggregate-to-edit`.
fn edit_rules() -> Vec<Value> {
    let rw = WRITE;
    vec![
        rule(&["impersonate"], "", &["serviceaccounts"]),
        rule(
            WRITE,
            "",
            &[
                "pods",
                "pods/attach",
                "pods/proxy",
                "pods/exec",
                "pods/portforward",
            ],
        ),
        rule(&["create"], "", &["pods/eviction"]),
        rule(
            WRITE,
            "",
            &[
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/proxy",
                "persistentvolumeclaims",
                "configmaps",
                "secrets",
                "events",
            ],
        ),
        rule(&["create"], "", &["serviceaccounts/token"]),
        rule(
            rw,
            "apps",
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
        ),
        rule(rw, "autoscaling", &["horizontalpodautoscalers"]),
        rule(rw, "batch", &["cronjobs", "jobs"]),
        rule(
            rw,
            "extensions",
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "ingresses",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicationcontrollers/scale",
            ],
        ),
        rule(rw, "policy", &["poddisruptionbudgets"]),
        rule(rw, "networking.k8s.io", &["ingresses", "networkpolicies"]),
    ]
}

/// The rules of `system:aggregate-to-admin`.
fn admin_rules() -> Vec<Value> {
    vec![
        rule(
            &["create"],
            "authorization.k8s.io",
            &["localsubjectaccessreviews"],
        ),
        rule(&read_write(), RBAC, &["rolebindings", "roles"]),
    ]
}

fn labelled(mut obj: Value, extra_labels: Value) -> Value {
    let mut labels = json!({"kubernetes.io/bootstrapping": "rbac-defaults"});
    if let (Some(l), Some(extra)) = (labels.as_object_mut(), extra_labels.as_object()) {
        l.extend(extra.clone());
    }
    obj["metadata"]["labels"] = labels;
    obj["metadata"]["annotations"] = json!({"rbac.authorization.kubernetes.io/autoupdate": "true"});
    obj
}

fn cluster_role(name: &str, rules: Vec<Value>, labels: Value) -> Value {
    labelled(
        json!({"apiVersion": format!("{RBAC}/v1"), "kind": "ClusterRole",
               "metadata": {"name": name}, "rules": rules}),
        labels,
    )
}

/// An aggregated ClusterRole (`admin`, `edit`, `view`) with the rules the aggregation
/// controller gives it.
fn aggregated(name: &str, selector: &str, rules: Vec<Value>, labels: Value) -> Value {
    let mut role = cluster_role(name, rules, labels);
    role["aggregationRule"] = json!({"clusterRoleSelectors": [
        {"matchLabels": {format!("rbac.authorization.k8s.io/{selector}"): "true"}}]});
    role
}

/// The bootstrap ClusterRoles, in the real policy's order.
pub fn cluster_roles() -> Vec<Value> {
    let view = view_rules();
    let edit: Vec<Value> = edit_rules().into_iter().chain(view.clone()).collect();
    let admin: Vec<Value> = admin_rules().into_iter().chain(edit.clone()).collect();
    vec![
        cluster_role(
            "cluster-admin",
            vec![
                json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
                json!({"verbs": ["*"], "nonResourceURLs": ["*"]}),
            ],
            json!({}),
        ),
        cluster_role(
            "system:discovery",
            vec![url_rule(&[
                "/api",
                "/api/*",
                "/apis",
                "/apis/*",
                "/healthz",
                "/livez",
                "/openapi",
                "/openapi/*",
                "/readyz",
                "/version",
                "/version/",
            ])],
            json!({}),
        ),
        cluster_role(
            "system:monitoring",
            vec![url_rule(&[
                "/healthz",
                "/healthz/*",
                "/livez",
                "/livez/*",
                "/metrics",
                "/metrics/slis",
                "/readyz",
                "/readyz/*",
            ])],
            json!({}),
        ),
        cluster_role(
            "system:basic-user",
            vec![
                rule(
                    &["create"],
                    "authorization.k8s.io",
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                rule(
                    &["create"],
                    "authentication.k8s.io",
                    &["selfsubjectreviews"],
                ),
            ],
            json!({}),
        ),
        cluster_role(
            "system:public-info-viewer",
            vec![url_rule(&[
                "/healthz",
                "/livez",
                "/readyz",
                "/version",
                "/version/",
            ])],
            json!({}),
        ),
        aggregated(
            "admin",
            "aggregate-to-admin",
            admin,
            json!({"kubernetes.io/bootstrapping": "rbac-defaults"}),
        ),
        aggregated(
            "edit",
            "aggregate-to-edit",
            edit,
            json!({"rbac.authorization.k8s.io/aggregate-to-admin": "true"}),
        ),
        aggregated(
            "view",
            "aggregate-to-view",
            view.clone(),
            json!({"rbac.authorization.k8s.io/aggregate-to-edit": "true"}),
        ),
        cluster_role(
            "system:aggregate-to-admin",
            admin_rules(),
            json!({"rbac.authorization.k8s.io/aggregate-to-admin": "true"}),
        ),
        cluster_role(
            "system:aggregate-to-edit",
            edit_rules(),
            json!({"rbac.authorization.k8s.io/aggregate-to-edit": "true"}),
        ),
        cluster_role(
            "system:aggregate-to-view",
            view,
            json!({"rbac.authorization.k8s.io/aggregate-to-view": "true"}),
        ),
        cluster_role(
            KUBE_CONTROLLER_MANAGER,
            vec![json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})],
            json!({}),
        ),
        cluster_role("system:node", node_rules(), json!({})),
    ]
}

/// The user the embedded controller manager acts as (kube-controller-manager's
/// `system:kube-controller-manager`).
pub const KUBE_CONTROLLER_MANAGER: &str = "system:kube-controller-manager";

/// The group of the embedded nodes' users (`system:node:<name>`), as of the kubelets'.
pub const NODES_GROUP: &str = "system:nodes";

/// What a node's kubelet (and, in the embedded cluster, the scheduler it stands in for) may
/// do: bootstrappolicy's `NodeRules` (nodes and their status, pods and their status,
/// evictions, events, the ConfigMaps, Secrets and Services a pod uses, service account
/// tokens, Leases) plus `pods/binding`, the scheduler's. kube-apiserver's Node authorizer
/// narrows these to the node's own pods; this server grants them to the `system:nodes` group
/// through the `system:node` binding, as clusters did before the Node authorizer.
pub fn node_rules() -> Vec<Value> {
    vec![
        rule(
            &[
                "create", "get", "list", "watch", "update", "patch", "delete",
            ],
            "",
            &["nodes"],
        ),
        rule(&["update", "patch"], "", &["nodes/status", "pods/status"]),
        rule(&["get", "list", "watch", "create", "delete"], "", &["pods"]),
        rule(
            &["create"],
            "",
            &["pods/eviction", "pods/binding", "serviceaccounts/token"],
        ),
        rule(
            &["get", "list", "watch"],
            "",
            &["configmaps", "secrets", "services", "endpoints"],
        ),
        rule(&["create", "update", "patch"], "", &["events"]),
        rule(&["create", "update", "patch"], "events.k8s.io", &["events"]),
        rule(
            &["get", "create", "update", "patch", "delete"],
            "coordination.k8s.io",
            &["leases"],
        ),
    ]
}

fn binding(name: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"kind": "Group", "apiGroup": RBAC, "name": g}))
        .collect();
    labelled(
        json!({"apiVersion": format!("{RBAC}/v1"), "kind": "ClusterRoleBinding",
               "metadata": {"name": name},
               "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
               "subjects": subjects}),
        json!({}),
    )
}

/// The bootstrap ClusterRoleBindings.
pub fn cluster_role_bindings() -> Vec<Value> {
    vec![
        binding("cluster-admin", &["system:masters"]),
        binding("system:monitoring", &["system:monitoring"]),
        binding("system:discovery", &["system:authenticated"]),
        binding("system:basic-user", &["system:authenticated"]),
        binding(
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
        user_binding(KUBE_CONTROLLER_MANAGER, KUBE_CONTROLLER_MANAGER),
        binding("system:node", &[NODES_GROUP]),
    ]
}

/// A ClusterRoleBinding of the ClusterRole `name` to one user.
fn user_binding(name: &str, user: &str) -> Value {
    labelled(
        json!({"apiVersion": format!("{RBAC}/v1"), "kind": "ClusterRoleBinding",
               "metadata": {"name": name},
               "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
               "subjects": [{"kind": "User", "apiGroup": RBAC, "name": user}]}),
        json!({}),
    )
}

/// The bootstrap roles and bindings by storage, built once per process: every server of the
/// process seeds copies of the same objects, each stamped with its own uid and creation time.
static RBAC_DEFAULTS: LazyLock<[(String, Vec<Value>); 2]> = LazyLock::new(|| {
    [
        (format!("{RBAC}/clusterroles"), cluster_roles()),
        (
            format!("{RBAC}/clusterrolebindings"),
            cluster_role_bindings(),
        ),
    ]
});

/// Creates the bootstrap roles and bindings that are missing (existing ones are kept).
pub fn seed_rbac(st: &mut State) {
    for (storage, objects) in RBAC_DEFAULTS.iter() {
        seed_missing(st, storage, objects);
    }
}

/// Creates a copy of each of `objects` (cluster-scoped) that `storage` does not hold yet, with a
/// fresh uid and creation time.
fn seed_missing(st: &mut State, storage: &str, objects: &[Value]) {
    for template in objects {
        if st
            .get(storage, "", meta::meta_str(template, "name"))
            .is_some()
        {
            continue;
        }
        let mut obj = template.clone();
        obj["metadata"]["uid"] = json!(meta::new_uid());
        obj["metadata"]["creationTimestamp"] = json!(meta::now_time());
        // `write`, not `create`: the stored object is shared with the history, and the copy
        // `create` would hand back is not needed.
        st.write(storage, obj);
    }
}

/// The objects of a fresh cluster: the namespaces `default`, `kube-system`, `kube-public` and
/// `kube-node-lease` (where the nodes' heartbeat Leases live; kube-apiserver's
/// `systemnamespaces` controller creates the last three),
/// the bootstrap RBAC policy ([`seed_rbac`]) and the `kubernetes` Service in `default` pointing
/// at this server's port (kube-apiserver's bootstrap controllers; an existing one, loaded from
/// the data directory, gets its port reconciled as the real `kubernetesservice` controller
/// does).
pub fn seed(store: &crate::registry::Store, port: u16) {
    store.write(|st| {
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            if st.get("core/namespaces", "", ns).is_some() {
                continue; // loaded from the data directory
            }
            let obj = json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "uid": meta::new_uid(), "creationTimestamp": meta::now_time(),
                             "labels": {"kubernetes.io/metadata.name": ns}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"}
            });
            st.write("core/namespaces", obj);
        }
        seed_rbac(st);
        let mut svc = crate::registry::core::services::kubernetes_service(port);
        match st.get("core/services", "default", "kubernetes") {
            Some(old) if old["spec"]["ports"] == svc["spec"]["ports"] => {}
            Some(old) => {
                let mut updated = old.clone();
                updated["spec"]["ports"] = svc["spec"]["ports"].clone();
                st.write("core/services", updated);
            }
            None => {
                svc["metadata"]["uid"] = json!(meta::new_uid());
                svc["metadata"]["creationTimestamp"] = json!(meta::now_time());
                st.write("core/services", svc);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Store;

    #[test]
    fn aggregated_roles_hold_what_they_aggregate() {
        let roles = cluster_roles();
        let by = |n: &str| {
            roles
                .iter()
                .find(|r| r["metadata"]["name"] == n)
                .cloned()
                .unwrap()
        };
        let (admin, edit, view) = (by("admin"), by("edit"), by("view"));
        let len = |r: &Value| r["rules"].as_array().map_or(0, Vec::len);
        assert_eq!(len(&view), view_rules().len());
        assert_eq!(len(&edit), edit_rules().len() + view_rules().len());
        assert_eq!(
            len(&admin),
            admin_rules().len() + edit_rules().len() + view_rules().len()
        );
        assert_eq!(
            view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"],
            "true"
        );
        for r in &roles {
            assert_eq!(
                r["metadata"]["labels"]["kubernetes.io/bootstrapping"],
                "rbac-defaults"
            );
        }
    }

    #[test]
    fn seeding_keeps_existing_objects() {
        let store = Store::new(100);
        store.write(|st| {
            st.create(
                "rbac.authorization.k8s.io/clusterroles",
                json!({"metadata": {"name": "view"}, "rules": []}),
            );
            seed_rbac(st);
            seed_rbac(st);
            let view = st
                .get("rbac.authorization.k8s.io/clusterroles", "", "view")
                .unwrap();
            assert_eq!(view["rules"], json!([]));
            assert_eq!(
                st.list("rbac.authorization.k8s.io/clusterroles", None)
                    .len(),
                cluster_roles().len()
            );
        });
    }
}
