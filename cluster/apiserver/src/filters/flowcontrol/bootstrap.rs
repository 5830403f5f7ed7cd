//! The FlowSchemas and PriorityLevelConfigurations a fresh server starts with.
//!
//! These are the objects of kube-apiserver's `apis/flowcontrol/bootstrap/default.go`
//! (`flowcontrol.apiserver.k8s.io/v1`), with the same names, shares, queuing parameters,
//! matching precedences, distinguishers and rules:
//!
//! | priority level     | type    | nominalConcurrencyShares | lendablePercent | queues | handSize | queueLengthLimit |
//! |--------------------|---------|-------------------------:|----------------:|-------:|---------:|-----------------:|
//! | `exempt`           | Exempt  | 0                        | 0               |        |          |                  |
//! | `system`           | Limited | 30                       | 33              | 64     | 6        | 50               |
//! | `node-high`        | Limited | 40                       | 25              | 64     | 6        | 50               |
//! | `leader-election`  | Limited | 10                       | 0               | 16     | 4        | 50               |
//! | `workload-high`    | Limited | 40                       | 50              | 128    | 6        | 50               |
//! | `workload-low`     | Limited | 100                      | 90              | 128    | 6        | 50               |
//! | `global-default`   | Limited | 20                       | 50              | 128    | 6        | 50               |
//! | `catch-all`        | Limited | 5                        | 0               | Reject |          |                  |
//!
//! and the FlowSchemas `exempt` (1, `system:masters`), `probes` (2, `GET /healthz|/readyz|/livez`
//! for everyone), `system-leader-election` (100), `workload-leader-election` (200),
//! `system-node-high` (400), `system-nodes` (500), `kube-controller-manager` and
//! `kube-scheduler` (800, by namespace), `kube-system-service-accounts` (900, by namespace),
//! `service-accounts` (9000, by user), `global-default` (9900, by user) and `catch-all`
//! (10000, by user). `exempt`/`catch-all` of both kinds are the *mandatory* objects, the rest
//! the *suggested* ones. Every object carries the annotation
//! `apf.kubernetes.io/autoupdate-spec: "true"`, as the real ones do.

use serde_json::{Value, json};

/// `metadata.annotations` key the real server sets on the objects it maintains.
pub const AUTO_UPDATE_ANNOTATION: &str = "apf.kubernetes.io/autoupdate-spec";

fn meta(name: &str) -> Value {
    json!({
        "name": name,
        "uid": crate::api::object_meta::new_uid(),
        "creationTimestamp": crate::api::object_meta::now_time(),
        "generation": 1,
        "annotations": {AUTO_UPDATE_ANNOTATION: "true"},
    })
}

fn limited(name: &str, shares: u32, lendable: u32, queuing: Option<(u32, u32, u32)>) -> Value {
    let limit_response = match queuing {
        Some((queues, hand_size, queue_length_limit)) => json!({
            "type": "Queue",
            "queuing": {"queues": queues, "handSize": hand_size, "queueLengthLimit": queue_length_limit},
        }),
        None => json!({"type": "Reject"}),
    };
    json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "PriorityLevelConfiguration",
        "metadata": meta(name),
        "spec": {
            "type": "Limited",
            "limited": {
                "nominalConcurrencyShares": shares,
                "lendablePercent": lendable,
                "limitResponse": limit_response,
            },
        },
        "status": {},
    })
}

/// The priority levels, mandatory and suggested.
pub fn priority_levels() -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "PriorityLevelConfiguration",
            "metadata": meta("exempt"),
            "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}},
            "status": {},
        }),
        limited("system", 30, 33, Some((64, 6, 50))),
        limited("node-high", 40, 25, Some((64, 6, 50))),
        limited("leader-election", 10, 0, Some((16, 4, 50))),
        limited("workload-high", 40, 50, Some((128, 6, 50))),
        limited("workload-low", 100, 90, Some((128, 6, 50))),
        limited("global-default", 20, 50, Some((128, 6, 50))),
        limited("catch-all", 5, 0, None),
    ]
}

fn groups(names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .map(|n| json!({"kind": "Group", "group": {"name": n}}))
        .collect()
}

fn users(names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .map(|n| json!({"kind": "User", "user": {"name": n}}))
        .collect()
}

fn kube_system_service_accounts() -> Vec<Value> {
    vec![
        json!({"kind": "ServiceAccount", "serviceAccount": {"name": "*", "namespace": "kube-system"}}),
    ]
}

/// Every verb on every resource in every namespace and cluster scope, and every non-resource URL.
fn everything(subjects: Vec<Value>) -> Value {
    json!({
        "subjects": subjects,
        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                           "namespaces": ["*"], "clusterScope": true}],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
    })
}

fn leader_election_rules(subjects: Vec<Value>, config_namespaces: &[&str]) -> Value {
    json!({
        "subjects": subjects,
        "resourceRules": [
            {"verbs": ["get", "create", "update"], "apiGroups": [""],
             "resources": ["endpoints", "configmaps"], "namespaces": config_namespaces},
            {"verbs": ["get", "create", "update"], "apiGroups": ["coordination.k8s.io"],
             "resources": ["leases"], "namespaces": ["*"]},
        ],
    })
}

fn flow_schema(name: &str, level: &str, precedence: u32, by: Option<&str>, rules: Value) -> Value {
    let mut spec = json!({
        "priorityLevelConfiguration": {"name": level},
        "matchingPrecedence": precedence,
        "rules": [rules],
    });
    if let Some(by) = by {
        spec["distinguisherMethod"] = json!({"type": by});
    }
    json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": meta(name),
        "spec": spec,
        "status": {"conditions": [{
            "type": "Dangling",
            "status": "False",
            "reason": "Found",
            "message": "This FlowSchema references the PriorityLevelConfiguration object named \"".to_owned() + level + "\" and it exists",
            "lastTransitionTime": crate::api::object_meta::now_time(),
        }]},
    })
}

/// The flow schemas, mandatory and suggested.
pub fn flow_schemas() -> Vec<Value> {
    let everyone = ["system:unauthenticated", "system:authenticated"];
    let mut leader_subjects = users(&["system:kube-controller-manager", "system:kube-scheduler"]);
    leader_subjects.extend(kube_system_service_accounts());
    vec![
        flow_schema(
            "exempt",
            "exempt",
            1,
            None,
            everything(groups(&["system:masters"])),
        ),
        flow_schema(
            "probes",
            "exempt",
            2,
            None,
            json!({
                "subjects": groups(&everyone),
                "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}],
            }),
        ),
        flow_schema(
            "system-leader-election",
            "leader-election",
            100,
            Some("ByUser"),
            leader_election_rules(leader_subjects, &["kube-system"]),
        ),
        flow_schema(
            "workload-leader-election",
            "leader-election",
            200,
            Some("ByUser"),
            leader_election_rules(kube_system_service_accounts(), &["*"]),
        ),
        flow_schema(
            "system-node-high",
            "node-high",
            400,
            Some("ByUser"),
            json!({
                "subjects": groups(&["system:nodes"]),
                "resourceRules": [
                    {"verbs": ["*"], "apiGroups": [""], "resources": ["nodes", "nodes/status"],
                     "namespaces": ["*"], "clusterScope": true},
                    {"verbs": ["*"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                     "namespaces": ["*"]},
                ],
            }),
        ),
        flow_schema(
            "system-nodes",
            "system",
            500,
            Some("ByUser"),
            everything(groups(&["system:nodes"])),
        ),
        flow_schema(
            "kube-controller-manager",
            "workload-high",
            800,
            Some("ByNamespace"),
            everything(users(&["system:kube-controller-manager"])),
        ),
        flow_schema(
            "kube-scheduler",
            "workload-high",
            800,
            Some("ByNamespace"),
            everything(users(&["system:kube-scheduler"])),
        ),
        flow_schema(
            "kube-system-service-accounts",
            "workload-high",
            900,
            Some("ByNamespace"),
            everything(kube_system_service_accounts()),
        ),
        flow_schema(
            "service-accounts",
            "workload-low",
            9000,
            Some("ByUser"),
            everything(groups(&["system:serviceaccounts"])),
        ),
        flow_schema(
            "global-default",
            "global-default",
            9900,
            Some("ByUser"),
            everything(groups(&everyone)),
        ),
        flow_schema(
            "catch-all",
            "catch-all",
            10000,
            Some("ByUser"),
            everything(groups(&everyone)),
        ),
    ]
}
