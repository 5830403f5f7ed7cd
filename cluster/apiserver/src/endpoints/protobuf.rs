//! Protobuf request bodies: decoding what kubectl ≥ 1.32 and Go typed clients send.
//!
//! Kubernetes has two wire encodings for built-in kinds: JSON, which everything speaks, and
//! protobuf (`Content-Type: application/vnd.kubernetes.protobuf`), which Go clients prefer for
//! speed. Since client-go 1.32 typed clients *send* protobuf bodies by default, so
//! `kubectl create namespace cnat` (the first command of the book) arrives here as bytes. This
//! module turns those bytes into the same JSON the server would have received from a JSON
//! client; the server stores and answers in JSON (which those clients accept).
//!
//! # The envelope
//!
//! ```text
//! "k8s\0"                           4 magic bytes
//! runtime.Unknown {                 a protobuf message
//!   typeMeta { apiVersion, kind }   which type `raw` holds
//!   raw                             the object, itself a protobuf message (e.g. core/v1 ConfigMap)
//!   contentEncoding, contentType    both empty in practice
//! }
//! ```
//!
//! [`decode_body`] checks the magic, decodes the `Unknown`, picks the message type from
//! `typeMeta`, decodes `raw` with the generated types of the `k8s-pb` crate and converts the
//! result to JSON with the real field names (`metadata.creationTimestamp`, `spec.nodeName`, ...).
//!
//! # Conversion rules
//!
//! `k8s-pb` has no serde support, so each message's conversion is written out once, as a table
//! of `json name => struct field` (see the `message!` invocations). The rules are those of the
//! Kubernetes JSON encoding: `Time` becomes RFC 3339 with second precision, `MicroTime` gets
//! six fractional digits, `IntOrString` becomes a number or a string, `Quantity` its string,
//! `bytes` base64, `FieldsV1` the JSON it carries; embedded structs (`LocalObjectReference` in
//! key selectors, `VolumeSource` in volumes, `ProbeHandler` in probes) are inlined. Go's protobuf
//! encoder writes every non-pointer field, zeros included, while its JSON encoder leaves
//! `omitempty` zeros out; so empty strings, lists and maps are left out, and so are `0` and
//! `false` except in the fields marked `keep` (pointer fields such as `spec.replicas`, where a
//! zero is meant, and fields without `omitempty` such as `containerPort` or `restartCount`). The
//! result is the JSON the same client would have sent.
//!
//! **Nothing is dropped silently.** Each conversion moves the fields it knows out of the decoded
//! message and then checks that what remains is empty; a field it does not know (a rarely used
//! volume type, a probe kind, a brand-new API field) makes the decode fail with an error naming
//! the field path, e.g. `spec.template.spec.volumes[0].nfs: field not supported in protobuf
//! bodies by this server; send JSON instead`. The server answers such bodies with 415, and Go
//! clients can be switched to JSON (`rest.Config.ContentType = "application/json"`).
//!
//! Kinds decoded: core/v1 Namespace, ConfigMap, Secret, Event, Pod, Service, ServiceAccount;
//! apps/v1 Deployment, StatefulSet, ReplicaSet, DaemonSet; core/v1 ReplicationController;
//! batch/v1 Job and CronJob (`kubectl create job|cronjob`); policy/v1 PodDisruptionBudget and
//! Eviction; authentication.k8s.io/v1 TokenRequest (`kubectl create token`) and SelfSubjectReview
//! (`kubectl auth whoami`); rbac.authorization.k8s.io/v1 Role, ClusterRole,
//! RoleBinding, ClusterRoleBinding (what `kubectl create role|clusterrole|rolebinding|
//! clusterrolebinding` send); apiextensions.k8s.io/v1 CustomResourceDefinition (schemas
//! included: `default`/`example`/`enum` values are the raw JSON they carry, `items` a schema or a
//! list, `additionalProperties` a schema or a boolean); coordination.k8s.io/v1 Lease;
//! events.k8s.io/v1 Event; networking.k8s.io/v1 Ingress, IngressClass and NetworkPolicy
//! (`kubectl create ingress`); core/v1 ResourceQuota (`kubectl create quota`); autoscaling/v1 Scale (the `/scale` subresource); the four access
//! reviews of authorization.k8s.io/v1 (`kubectl auth can-i`); and `DeleteOptions` (typed clients
//! send the options of a DELETE as a protobuf body too). Of the served kinds only core/v1 Node is
//! not decoded (nodes are registered by the in-process kubelet, not by clients).
//! Namespace, ConfigMap, Secret, both Events, Lease, ServiceAccount, the RBAC kinds, the CRD, the
//! networking kinds, ResourceQuota and the reviews are complete; Pod (and pod templates) covers containers, init containers, env,
//! ports, resources, volume mounts,
//! probes, security contexts, tolerations and the common volume types; StatefulSet volume claim
//! templates are not decoded.

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::authentication::v1 as authentication;
use k8s_pb::api::authorization::v1 as authorization;
use k8s_pb::api::autoscaling::v1 as autoscaling;
use k8s_pb::api::batch::v1 as batch;
use k8s_pb::api::coordination::v1 as coordination;
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::events::v1 as events;
use k8s_pb::api::networking::v1 as networking;
use k8s_pb::api::policy::v1 as policy;
use k8s_pb::api::rbac::v1 as rbac;
use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1 as crd;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::{Map, Value};

/// The four bytes every Kubernetes protobuf body starts with.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// Conversion of one decoded protobuf value to its JSON form.
trait ToJson {
    fn to_json(self) -> Result<Value, String>;
}

/// Conversion of one struct field, which may be absent (`None`, empty list, empty map).
trait Conv {
    fn conv(self) -> Result<Option<Value>, String>;
}

impl ToJson for String {
    fn to_json(self) -> Result<Value, String> {
        Ok(Value::String(self))
    }
}

impl ToJson for i32 {
    fn to_json(self) -> Result<Value, String> {
        Ok(Value::from(self))
    }
}

impl ToJson for i64 {
    fn to_json(self) -> Result<Value, String> {
        Ok(Value::from(self))
    }
}

impl ToJson for bool {
    fn to_json(self) -> Result<Value, String> {
        Ok(Value::Bool(self))
    }
}

impl ToJson for Vec<u8> {
    fn to_json(self) -> Result<Value, String> {
        Ok(Value::String(
            base64::engine::general_purpose::STANDARD.encode(self),
        ))
    }
}

impl ToJson for f64 {
    fn to_json(self) -> Result<Value, String> {
        serde_json::Number::from_f64(self)
            .map(Value::Number)
            .ok_or_else(|| format!("{self} is not a finite number"))
    }
}

impl<T: ToJson> ToJson for Box<T> {
    fn to_json(self) -> Result<Value, String> {
        (*self).to_json()
    }
}

impl<T: ToJson> Conv for Option<T> {
    fn conv(self) -> Result<Option<Value>, String> {
        match self {
            None => Ok(None),
            Some(v) => match v.to_json()? {
                Value::String(s) if s.is_empty() => Ok(None),
                Value::Null => Ok(None),
                other => Ok(Some(other)),
            },
        }
    }
}

/// Prefixes an error from a nested value with the field (or index) it came from; an error
/// starting with `:` is about the value itself (`default: does not hold JSON`).
fn nest(prefix: &str, e: String) -> String {
    if e.starts_with('[') || e.starts_with(':') {
        format!("{prefix}{e}")
    } else {
        format!("{prefix}.{e}")
    }
}

impl<T: ToJson> Conv for Vec<T> {
    fn conv(self) -> Result<Option<Value>, String> {
        if self.is_empty() {
            return Ok(None);
        }
        self.into_iter()
            .enumerate()
            .map(|(i, v)| v.to_json().map_err(|e| nest(&format!("[{i}]"), e)))
            .collect::<Result<Vec<_>, _>>()
            .map(|items| Some(Value::Array(items)))
    }
}

impl<T: ToJson> Conv for BTreeMap<String, T> {
    fn conv(self) -> Result<Option<Value>, String> {
        if self.is_empty() {
            return Ok(None);
        }
        let mut map = Map::new();
        for (k, v) in self {
            let value = v.to_json().map_err(|e| nest(&k, e))?;
            map.insert(k, value);
        }
        Ok(Some(Value::Object(map)))
    }
}

/// Converts a Debug field name (`liveness_probe`, `r#type`) to its JSON spelling.
fn camel(snake: &str) -> String {
    let snake = snake.trim_start_matches("r#");
    let mut out = String::with_capacity(snake.len());
    let mut upper = false;
    for c in snake.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// Names the non-empty fields left in a message after conversion, from its Debug output
/// (`Name { a: None, b: Some(..), c: [] }` → `["b"]`).
fn leftover_fields(debug: &str) -> Vec<String> {
    let Some(start) = debug.find('{') else {
        return Vec::new();
    };
    let body = debug[start + 1..].trim_end().trim_end_matches('}');
    let mut fields = Vec::new();
    let mut depth = 0i32;
    let mut in_str = false;
    let mut escaped = false;
    let mut current = String::new();
    let mut push = |entry: &str| {
        if let Some((name, value)) = entry.split_once(':') {
            let value = value.trim();
            if !matches!(value, "None" | "[]" | "{}" | "") {
                fields.push(camel(name.trim()));
            }
        }
    };
    for c in body.chars() {
        if in_str {
            current.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                current.push(c);
            }
            '{' | '[' | '(' => {
                depth += 1;
                current.push(c);
            }
            '}' | ']' | ')' => {
                depth -= 1;
                current.push(c);
            }
            ',' if depth == 0 => {
                push(&current);
                current.clear();
            }
            _ => current.push(c),
        }
    }
    push(&current);
    fields
}

/// Fails when `rest` (a message after its known fields were moved out) still holds data.
fn ensure_consumed<T: Message + Default + PartialEq + std::fmt::Debug>(
    rest: &T,
) -> Result<(), String> {
    if *rest == T::default() {
        return Ok(());
    }
    let fields = leftover_fields(&format!("{rest:?}"));
    let (first, others) = match fields.split_first() {
        Some((f, o)) => (f.clone(), o.to_vec()),
        None => ("<unknown>".to_string(), Vec::new()),
    };
    let also = if others.is_empty() {
        String::new()
    } else {
        format!(" (also: {})", others.join(", "))
    };
    Err(format!(
        "{first}: field not supported in protobuf bodies by this server{also}; send JSON instead"
    ))
}

/// Drops a zero number or `false`: Go writes every non-pointer scalar to protobuf, while its JSON
/// encoding leaves `omitempty` zeros out.
fn omit_zero(v: Option<Value>) -> Option<Value> {
    match v {
        Some(Value::Bool(false)) => None,
        Some(Value::Number(n)) if n.as_f64() == Some(0.0) => None,
        other => other,
    }
}

/// Whether a field leaves out a zero or `false` (Go's `omitempty`) or keeps it.
#[derive(Clone, Copy)]
enum Zeros {
    Omit,
    Keep,
}

/// Puts one converted field into `o`, naming the field in an error: the part of each field's
/// conversion that does not depend on its type, written once here instead of in every field of
/// every `message!` (a closure per field was a function of its own for the compiler, thousands
/// in all).
fn put(
    o: &mut Map<String, Value>,
    json: &str,
    converted: Result<Option<Value>, String>,
    zeros: Zeros,
) -> Result<(), String> {
    let value = converted.map_err(|e| nest(json, e))?;
    let value = match zeros {
        Zeros::Omit => omit_zero(value),
        Zeros::Keep => value,
    };
    if let Some(v) = value {
        o.insert(json.to_string(), v);
    }
    Ok(())
}

/// Declares the JSON conversion of a k8s-pb message: `"jsonName" => field` moves and converts a
/// field, leaving out a zero or `false` (Go's `omitempty`); fields in `keep { ... }` keep their
/// zeros (Go pointer fields, where a zero was set on purpose, and fields without `omitempty`);
/// `exact { ... }` fields are `Option`s converted as they are, empty strings included (raw JSON
/// such as a schema's `default: ""`); `inline field` merges a nested message's keys into this
/// object.
macro_rules! message {
    ($ty:ty { $( $json:literal => $field:ident ),* $(,)? }
     $( keep { $( $kjson:literal => $kfield:ident ),* $(,)? } )?
     $( exact { $( $xjson:literal => $xfield:ident ),* $(,)? } )?
     $( inline $inl:ident )* ) => {
        impl ToJson for $ty {
            fn to_json(mut self) -> Result<Value, String> {
                let mut o = Map::new();
                $(
                    put(&mut o, $json, Conv::conv(std::mem::take(&mut self.$field)), Zeros::Omit)?;
                )*
                $( $(
                    put(&mut o, $kjson, Conv::conv(std::mem::take(&mut self.$kfield)), Zeros::Keep)?;
                )* )?
                $( $(
                    if let Some(v) = self.$xfield.take() {
                        put(&mut o, $xjson, ToJson::to_json(v).map(Some), Zeros::Keep)?;
                    }
                )* )?
                $(
                    if let Some(Value::Object(m)) = Conv::conv(std::mem::take(&mut self.$inl))? {
                        o.extend(m);
                    }
                )*
                ensure_consumed(&self)?;
                Ok(Value::Object(o))
            }
        }
    };
}

// ---- apimachinery leaf types -------------------------------------------------------------

/// Seconds of Go's zero `time.Time` (0001-01-01T00:00:00Z), which marshals as JSON `null`.
const GO_ZERO_TIME: i64 = -62_135_596_800;

fn rfc3339(seconds: i64, nanos: Option<i32>, micros: bool) -> Result<Value, String> {
    let t = jiff::Timestamp::from_second(seconds)
        .map_err(|e| format!("timestamp {seconds} is out of range: {e}"))?;
    let base = t.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    Ok(Value::String(if micros {
        format!("{base}.{:06}Z", nanos.unwrap_or(0).max(0) / 1000)
    } else {
        format!("{base}Z")
    }))
}

impl ToJson for meta::Time {
    fn to_json(self) -> Result<Value, String> {
        match self.seconds {
            None => Ok(Value::Null),
            Some(GO_ZERO_TIME) => Ok(Value::Null),
            Some(s) => rfc3339(s, self.nanos, false),
        }
    }
}

impl ToJson for meta::MicroTime {
    fn to_json(self) -> Result<Value, String> {
        match self.seconds {
            None => Ok(Value::Null),
            Some(GO_ZERO_TIME) => Ok(Value::Null),
            Some(s) => rfc3339(s, self.nanos, true),
        }
    }
}

impl ToJson for IntOrString {
    fn to_json(self) -> Result<Value, String> {
        match self.r#type.unwrap_or(0) {
            0 => Ok(Value::from(self.int_val.unwrap_or(0))),
            1 => Ok(Value::String(self.str_val.unwrap_or_default())),
            other => Err(format!(
                "IntOrString has unknown type {other} (expected 0 or 1)"
            )),
        }
    }
}

impl ToJson for Quantity {
    fn to_json(self) -> Result<Value, String> {
        Ok(Value::String(self.string.unwrap_or_default()))
    }
}

impl ToJson for meta::FieldsV1 {
    fn to_json(self) -> Result<Value, String> {
        match self.raw {
            None => Ok(Value::Null),
            Some(raw) => serde_json::from_slice(&raw)
                .map_err(|e| format!("FieldsV1 does not hold JSON: {e}")),
        }
    }
}

message!(meta::ObjectMeta {
    "name" => name, "generateName" => generate_name, "namespace" => namespace,
    "selfLink" => self_link, "uid" => uid, "resourceVersion" => resource_version,
    "generation" => generation, "creationTimestamp" => creation_timestamp,
    "deletionTimestamp" => deletion_timestamp, "labels" => labels, "annotations" => annotations,
    "ownerReferences" => owner_references, "finalizers" => finalizers,
    "managedFields" => managed_fields,
} keep {
    "deletionGracePeriodSeconds" => deletion_grace_period_seconds,
});
message!(meta::OwnerReference {
    "apiVersion" => api_version, "kind" => kind, "name" => name, "uid" => uid,
} keep {
    "controller" => controller, "blockOwnerDeletion" => block_owner_deletion,
});
message!(meta::ManagedFieldsEntry {
    "manager" => manager, "operation" => operation, "apiVersion" => api_version, "time" => time,
    "fieldsType" => fields_type, "fieldsV1" => fields_v1, "subresource" => subresource,
});
message!(meta::LabelSelector {
    "matchLabels" => match_labels, "matchExpressions" => match_expressions,
});
message!(meta::LabelSelectorRequirement {
    "key" => key, "operator" => operator, "values" => values,
});
message!(meta::Condition {
    "type" => r#type, "status" => status, "observedGeneration" => observed_generation,
    "lastTransitionTime" => last_transition_time, "reason" => reason, "message" => message,
});

message!(meta::DeleteOptions {
    "preconditions" => preconditions, "propagationPolicy" => propagation_policy, "dryRun" => dry_run,
} keep {
    "gracePeriodSeconds" => grace_period_seconds, "orphanDependents" => orphan_dependents,
    "ignoreStoreReadErrorWithClusterBreakingPotential" => ignore_store_read_error_with_cluster_breaking_potential,
});
message!(meta::Preconditions { "uid" => uid, "resourceVersion" => resource_version });

message!(meta::FieldSelectorRequirement {
    "key" => key, "operator" => operator, "values" => values,
});

// ---- authorization.k8s.io/v1 ---------------------------------------------------------------

impl ToJson for authorization::ExtraValue {
    fn to_json(self) -> Result<Value, String> {
        Ok(Value::Array(
            self.items.into_iter().map(Value::String).collect(),
        ))
    }
}

message!(authorization::SelfSubjectAccessReview {
    "metadata" => metadata, "spec" => spec, "status" => status,
});
message!(authorization::SelfSubjectAccessReviewSpec {
    "resourceAttributes" => resource_attributes,
    "nonResourceAttributes" => non_resource_attributes,
});
message!(authorization::SubjectAccessReview {
    "metadata" => metadata, "spec" => spec, "status" => status,
});
message!(authorization::LocalSubjectAccessReview {
    "metadata" => metadata, "spec" => spec, "status" => status,
});
message!(authorization::SubjectAccessReviewSpec {
    "resourceAttributes" => resource_attributes,
    "nonResourceAttributes" => non_resource_attributes,
    "user" => user, "groups" => groups, "extra" => extra, "uid" => uid,
});
message!(authorization::ResourceAttributes {
    "namespace" => namespace, "verb" => verb, "group" => group, "version" => version,
    "resource" => resource, "subresource" => subresource, "name" => name,
    "fieldSelector" => field_selector, "labelSelector" => label_selector,
});
message!(authorization::NonResourceAttributes { "path" => path, "verb" => verb });
message!(authorization::FieldSelectorAttributes {
    "rawSelector" => raw_selector, "requirements" => requirements,
});
message!(authorization::LabelSelectorAttributes {
    "rawSelector" => raw_selector, "requirements" => requirements,
});
message!(authorization::SubjectAccessReviewStatus {
    "denied" => denied, "reason" => reason, "evaluationError" => evaluation_error,
} keep {
    "allowed" => allowed,
});
message!(authorization::SelfSubjectRulesReview {
    "metadata" => metadata, "spec" => spec, "status" => status,
});
message!(authorization::SelfSubjectRulesReviewSpec { "namespace" => namespace });
message!(authorization::SubjectRulesReviewStatus {
    "resourceRules" => resource_rules, "nonResourceRules" => non_resource_rules,
    "evaluationError" => evaluation_error,
} keep {
    "incomplete" => incomplete,
});
message!(authorization::ResourceRule {
    "verbs" => verbs, "apiGroups" => api_groups, "resources" => resources,
    "resourceNames" => resource_names,
});
message!(authorization::NonResourceRule {
    "verbs" => verbs, "nonResourceURLs" => non_resource_ur_ls,
});

// ---- core/v1 ------------------------------------------------------------------------------

message!(core::Namespace { "metadata" => metadata, "spec" => spec, "status" => status });
message!(core::NamespaceSpec { "finalizers" => finalizers });
message!(core::NamespaceStatus { "phase" => phase, "conditions" => conditions });
message!(core::NamespaceCondition {
    "type" => r#type, "status" => status, "lastTransitionTime" => last_transition_time,
    "reason" => reason, "message" => message,
});
message!(core::ConfigMap {
    "metadata" => metadata, "data" => data, "binaryData" => binary_data,
} keep {
    "immutable" => immutable,
});
message!(core::Secret {
    "metadata" => metadata, "data" => data, "stringData" => string_data, "type" => r#type,
} keep {
    "immutable" => immutable,
});
message!(core::Event {
    "metadata" => metadata, "involvedObject" => involved_object, "reason" => reason,
    "message" => message, "source" => source, "firstTimestamp" => first_timestamp,
    "lastTimestamp" => last_timestamp, "count" => count, "type" => r#type,
    "eventTime" => event_time, "series" => series, "action" => action, "related" => related,
    "reportingComponent" => reporting_component, "reportingInstance" => reporting_instance,
});
message!(core::ObjectReference {
    "kind" => kind, "namespace" => namespace, "name" => name, "uid" => uid,
    "apiVersion" => api_version, "resourceVersion" => resource_version, "fieldPath" => field_path,
});
message!(core::EventSource { "component" => component, "host" => host });
message!(core::EventSeries { "count" => count, "lastObservedTime" => last_observed_time });
message!(core::ServiceAccount {
    "metadata" => metadata, "secrets" => secrets, "imagePullSecrets" => image_pull_secrets,
} keep {
    "automountServiceAccountToken" => automount_service_account_token,
});
message!(core::LocalObjectReference { "name" => name });
message!(core::Service { "metadata" => metadata, "spec" => spec, "status" => status });
message!(core::ServiceSpec {
    "ports" => ports, "selector" => selector, "clusterIP" => cluster_ip,
    "clusterIPs" => cluster_ips, "type" => r#type, "externalIPs" => external_ips,
    "sessionAffinity" => session_affinity, "loadBalancerIP" => load_balancer_ip,
    "loadBalancerSourceRanges" => load_balancer_source_ranges, "externalName" => external_name,
    "externalTrafficPolicy" => external_traffic_policy,
    "healthCheckNodePort" => health_check_node_port,
    "publishNotReadyAddresses" => publish_not_ready_addresses,
    "sessionAffinityConfig" => session_affinity_config, "ipFamilies" => ip_families,
    "ipFamilyPolicy" => ip_family_policy, "loadBalancerClass" => load_balancer_class,
    "internalTrafficPolicy" => internal_traffic_policy,
    "trafficDistribution" => traffic_distribution,
} keep {
    "allocateLoadBalancerNodePorts" => allocate_load_balancer_node_ports,
});
message!(core::SessionAffinityConfig { "clientIP" => client_ip });
message!(core::ClientIpConfig { } keep { "timeoutSeconds" => timeout_seconds, });
message!(core::ServicePort {
    "name" => name, "protocol" => protocol, "appProtocol" => app_protocol,
    "targetPort" => target_port, "nodePort" => node_port,
} keep {
    "port" => port,
});
message!(core::ServiceStatus { "loadBalancer" => load_balancer, "conditions" => conditions });
message!(core::LoadBalancerStatus { "ingress" => ingress });
message!(core::LoadBalancerIngress {
    "ip" => ip, "hostname" => hostname, "ipMode" => ip_mode, "ports" => ports,
});
message!(core::PortStatus { "protocol" => protocol, "error" => error, } keep { "port" => port, });

message!(core::Pod { "metadata" => metadata, "spec" => spec, "status" => status });
message!(core::PodTemplateSpec { "metadata" => metadata, "spec" => spec });
message!(core::PodSpec {
    "volumes" => volumes, "initContainers" => init_containers, "containers" => containers,
    "restartPolicy" => restart_policy, "dnsPolicy" => dns_policy, "nodeSelector" => node_selector,
    "serviceAccountName" => service_account_name, "serviceAccount" => service_account,
    "nodeName" => node_name, "hostNetwork" => host_network, "hostPID" => host_pid,
    "hostIPC" => host_ipc, "securityContext" => security_context,
    "imagePullSecrets" => image_pull_secrets, "hostname" => hostname, "subdomain" => subdomain,
    "schedulerName" => scheduler_name, "tolerations" => tolerations, "hostAliases" => host_aliases,
    "priorityClassName" => priority_class_name, "readinessGates" => readiness_gates,
    "runtimeClassName" => runtime_class_name, "preemptionPolicy" => preemption_policy,
    "overhead" => overhead, "schedulingGates" => scheduling_gates, "resources" => resources,
} keep {
    "terminationGracePeriodSeconds" => termination_grace_period_seconds,
    "activeDeadlineSeconds" => active_deadline_seconds,
    "automountServiceAccountToken" => automount_service_account_token,
    "shareProcessNamespace" => share_process_namespace, "priority" => priority,
    "enableServiceLinks" => enable_service_links, "setHostnameAsFQDN" => set_hostname_as_fqdn,
    "hostUsers" => host_users,
});
message!(core::PodReadinessGate { "conditionType" => condition_type });
message!(core::PodSchedulingGate { "name" => name });
message!(core::HostAlias { "ip" => ip, "hostnames" => hostnames });
message!(core::Toleration {
    "key" => key, "operator" => operator, "value" => value, "effect" => effect,
} keep {
    "tolerationSeconds" => toleration_seconds,
});
message!(core::PodSecurityContext {
    "supplementalGroups" => supplemental_groups,
    "supplementalGroupsPolicy" => supplemental_groups_policy, "sysctls" => sysctls,
    "fsGroupChangePolicy" => fs_group_change_policy, "seccompProfile" => seccomp_profile,
    "seLinuxChangePolicy" => se_linux_change_policy,
} keep {
    "runAsUser" => run_as_user, "runAsGroup" => run_as_group, "runAsNonRoot" => run_as_non_root,
    "fsGroup" => fs_group,
});
message!(core::Sysctl { "name" => name, "value" => value });
message!(core::SeccompProfile { "type" => r#type, "localhostProfile" => localhost_profile });
message!(core::SecurityContext {
    "capabilities" => capabilities, "procMount" => proc_mount, "seccompProfile" => seccomp_profile,
} keep {
    "privileged" => privileged, "runAsUser" => run_as_user, "runAsGroup" => run_as_group,
    "runAsNonRoot" => run_as_non_root, "readOnlyRootFilesystem" => read_only_root_filesystem,
    "allowPrivilegeEscalation" => allow_privilege_escalation,
});
message!(core::Capabilities { "add" => add, "drop" => drop });
message!(core::Container {
    "name" => name, "image" => image, "command" => command, "args" => args,
    "workingDir" => working_dir, "ports" => ports, "envFrom" => env_from, "env" => env,
    "resources" => resources, "restartPolicy" => restart_policy, "volumeMounts" => volume_mounts,
    "livenessProbe" => liveness_probe, "readinessProbe" => readiness_probe,
    "startupProbe" => startup_probe, "terminationMessagePath" => termination_message_path,
    "terminationMessagePolicy" => termination_message_policy,
    "imagePullPolicy" => image_pull_policy, "securityContext" => security_context,
    "stdin" => stdin, "stdinOnce" => stdin_once, "tty" => tty,
});
message!(core::ContainerPort {
    "name" => name, "hostPort" => host_port, "protocol" => protocol, "hostIP" => host_ip,
} keep {
    "containerPort" => container_port,
});
message!(core::EnvVar { "name" => name, "value" => value, "valueFrom" => value_from });
message!(core::EnvVarSource {
    "fieldRef" => field_ref, "resourceFieldRef" => resource_field_ref,
    "configMapKeyRef" => config_map_key_ref, "secretKeyRef" => secret_key_ref,
});
message!(core::ObjectFieldSelector { "apiVersion" => api_version, "fieldPath" => field_path });
message!(core::ResourceFieldSelector {
    "containerName" => container_name, "resource" => resource, "divisor" => divisor,
});
message!(core::ConfigMapKeySelector {
    "key" => key,
} keep {
    "optional" => optional,
} inline local_object_reference);
message!(core::SecretKeySelector {
    "key" => key,
} keep {
    "optional" => optional,
} inline local_object_reference);
message!(core::EnvFromSource {
    "prefix" => prefix, "configMapRef" => config_map_ref, "secretRef" => secret_ref,
});
message!(core::ConfigMapEnvSource {
} keep {
    "optional" => optional,
} inline local_object_reference);
message!(core::SecretEnvSource { } keep { "optional" => optional, } inline local_object_reference);
message!(core::ResourceRequirements {
    "limits" => limits, "requests" => requests, "claims" => claims,
});
message!(core::ResourceClaim { "name" => name, "request" => request });
message!(core::VolumeMount {
    "name" => name, "readOnly" => read_only, "recursiveReadOnly" => recursive_read_only,
    "mountPath" => mount_path, "subPath" => sub_path, "mountPropagation" => mount_propagation,
    "subPathExpr" => sub_path_expr,
});
message!(core::Probe {
    "initialDelaySeconds" => initial_delay_seconds, "timeoutSeconds" => timeout_seconds,
    "periodSeconds" => period_seconds, "successThreshold" => success_threshold,
    "failureThreshold" => failure_threshold,
} keep {
    "terminationGracePeriodSeconds" => termination_grace_period_seconds,
} inline handler);
message!(core::ProbeHandler {
    "exec" => exec, "httpGet" => http_get, "tcpSocket" => tcp_socket, "grpc" => grpc,
});
message!(core::ExecAction { "command" => command });
message!(core::HttpGetAction {
    "path" => path, "port" => port, "host" => host, "scheme" => scheme, "httpHeaders" => http_headers,
});
message!(core::HttpHeader { "name" => name, "value" => value });
message!(core::TcpSocketAction { "port" => port, "host" => host });
message!(core::GrpcAction { "service" => service, } keep { "port" => port, });
message!(core::Volume { "name" => name } inline volume_source);
message!(core::VolumeSource {
    "hostPath" => host_path, "emptyDir" => empty_dir, "secret" => secret,
    "persistentVolumeClaim" => persistent_volume_claim, "downwardAPI" => downward_api,
    "configMap" => config_map, "projected" => projected,
});
message!(core::HostPathVolumeSource { "path" => path, "type" => r#type });
message!(core::EmptyDirVolumeSource { "medium" => medium, "sizeLimit" => size_limit });
message!(core::SecretVolumeSource {
    "secretName" => secret_name, "items" => items,
} keep {
    "defaultMode" => default_mode, "optional" => optional,
});
message!(core::ConfigMapVolumeSource {
    "items" => items,
} keep {
    "defaultMode" => default_mode, "optional" => optional,
} inline local_object_reference);
message!(core::KeyToPath { "key" => key, "path" => path, } keep { "mode" => mode, });
message!(core::PersistentVolumeClaimVolumeSource {
    "claimName" => claim_name, "readOnly" => read_only,
});
message!(core::DownwardAPIVolumeSource {
    "items" => items,
} keep {
    "defaultMode" => default_mode,
});
message!(core::DownwardAPIVolumeFile {
    "path" => path, "fieldRef" => field_ref, "resourceFieldRef" => resource_field_ref,
} keep {
    "mode" => mode,
});
message!(core::ProjectedVolumeSource {
    "sources" => sources,
} keep {
    "defaultMode" => default_mode,
});
message!(core::VolumeProjection {
    "secret" => secret, "downwardAPI" => downward_api, "configMap" => config_map,
    "serviceAccountToken" => service_account_token,
});
message!(core::SecretProjection {
    "items" => items,
} keep {
    "optional" => optional,
} inline local_object_reference);
message!(core::ConfigMapProjection {
    "items" => items,
} keep {
    "optional" => optional,
} inline local_object_reference);
message!(core::DownwardAPIProjection { "items" => items });
message!(core::ServiceAccountTokenProjection {
    "audience" => audience, "path" => path,
} keep {
    "expirationSeconds" => expiration_seconds,
});
message!(core::PodStatus {
    "observedGeneration" => observed_generation, "phase" => phase, "conditions" => conditions,
    "message" => message, "reason" => reason, "nominatedNodeName" => nominated_node_name,
    "hostIP" => host_ip, "hostIPs" => host_ips, "podIP" => pod_ip, "podIPs" => pod_ips,
    "startTime" => start_time, "initContainerStatuses" => init_container_statuses,
    "containerStatuses" => container_statuses, "qosClass" => qos_class,
    "ephemeralContainerStatuses" => ephemeral_container_statuses, "resize" => resize,
});
message!(core::PodCondition {
    "type" => r#type, "observedGeneration" => observed_generation, "status" => status,
    "lastProbeTime" => last_probe_time, "lastTransitionTime" => last_transition_time,
    "reason" => reason, "message" => message,
});
message!(core::PodIp { "ip" => ip });
message!(core::HostIp { "ip" => ip });
message!(core::ContainerStatus {
    "name" => name, "state" => state, "lastState" => last_state, "image" => image,
    "imageID" => image_id, "containerID" => container_id, "stopSignal" => stop_signal,
} keep {
    "ready" => ready, "restartCount" => restart_count, "started" => started,
});
message!(core::ContainerState {
    "waiting" => waiting, "running" => running, "terminated" => terminated,
});
message!(core::ContainerStateWaiting { "reason" => reason, "message" => message });
message!(core::ContainerStateRunning { "startedAt" => started_at });
message!(core::ContainerStateTerminated {
    "signal" => signal, "reason" => reason, "message" => message, "startedAt" => started_at,
    "finishedAt" => finished_at, "containerID" => container_id,
} keep {
    "exitCode" => exit_code,
});

// ---- apps/v1 ------------------------------------------------------------------------------

message!(apps::Deployment { "metadata" => metadata, "spec" => spec, "status" => status });
message!(apps::DeploymentSpec {
    "selector" => selector, "template" => template, "strategy" => strategy,
    "minReadySeconds" => min_ready_seconds, "paused" => paused,
} keep {
    "replicas" => replicas, "revisionHistoryLimit" => revision_history_limit,
    "progressDeadlineSeconds" => progress_deadline_seconds,
});
message!(apps::DeploymentStrategy { "type" => r#type, "rollingUpdate" => rolling_update });
message!(apps::RollingUpdateDeployment {
    "maxUnavailable" => max_unavailable, "maxSurge" => max_surge,
});
message!(apps::DeploymentStatus {
    "observedGeneration" => observed_generation, "replicas" => replicas,
    "updatedReplicas" => updated_replicas, "readyReplicas" => ready_replicas,
    "availableReplicas" => available_replicas, "unavailableReplicas" => unavailable_replicas,
    "conditions" => conditions,
} keep {
    "terminatingReplicas" => terminating_replicas, "collisionCount" => collision_count,
});
message!(apps::DeploymentCondition {
    "type" => r#type, "status" => status, "lastUpdateTime" => last_update_time,
    "lastTransitionTime" => last_transition_time, "reason" => reason, "message" => message,
});
message!(apps::StatefulSet { "metadata" => metadata, "spec" => spec, "status" => status });
message!(apps::StatefulSetSpec {
    "selector" => selector, "template" => template, "serviceName" => service_name,
    "podManagementPolicy" => pod_management_policy, "updateStrategy" => update_strategy,
    "minReadySeconds" => min_ready_seconds,
    "persistentVolumeClaimRetentionPolicy" => persistent_volume_claim_retention_policy,
    "ordinals" => ordinals,
} keep {
    "replicas" => replicas, "revisionHistoryLimit" => revision_history_limit,
});
message!(apps::StatefulSetUpdateStrategy { "type" => r#type, "rollingUpdate" => rolling_update });
message!(apps::RollingUpdateStatefulSetStrategy {
    "maxUnavailable" => max_unavailable,
} keep {
    "partition" => partition,
});
message!(apps::StatefulSetPersistentVolumeClaimRetentionPolicy {
    "whenDeleted" => when_deleted, "whenScaled" => when_scaled,
});
message!(apps::StatefulSetOrdinals { } keep { "start" => start, });
message!(apps::StatefulSetStatus {
    "observedGeneration" => observed_generation, "readyReplicas" => ready_replicas,
    "currentReplicas" => current_replicas, "updatedReplicas" => updated_replicas,
    "currentRevision" => current_revision, "updateRevision" => update_revision,
    "conditions" => conditions,
} keep {
    "replicas" => replicas, "collisionCount" => collision_count,
    "availableReplicas" => available_replicas,
});
message!(apps::StatefulSetCondition {
    "type" => r#type, "status" => status, "lastTransitionTime" => last_transition_time,
    "reason" => reason, "message" => message,
});

message!(apps::ReplicaSet { "metadata" => metadata, "spec" => spec, "status" => status });
message!(apps::ReplicaSetSpec {
    "minReadySeconds" => min_ready_seconds, "selector" => selector, "template" => template,
} keep {
    "replicas" => replicas,
});
message!(apps::ReplicaSetStatus {
    "fullyLabeledReplicas" => fully_labeled_replicas, "readyReplicas" => ready_replicas,
    "availableReplicas" => available_replicas, "observedGeneration" => observed_generation,
    "conditions" => conditions,
} keep {
    "replicas" => replicas, "terminatingReplicas" => terminating_replicas,
});
message!(apps::ReplicaSetCondition {
    "type" => r#type, "status" => status, "lastTransitionTime" => last_transition_time,
    "reason" => reason, "message" => message,
});

// ---- apps/v1 DaemonSet, core/v1 ReplicationController ----------------------------------------

message!(apps::DaemonSet { "metadata" => metadata, "spec" => spec, "status" => status });
message!(apps::DaemonSetSpec {
    "selector" => selector, "template" => template, "updateStrategy" => update_strategy,
    "minReadySeconds" => min_ready_seconds,
} keep {
    "revisionHistoryLimit" => revision_history_limit,
});
message!(apps::DaemonSetUpdateStrategy { "type" => r#type, "rollingUpdate" => rolling_update });
message!(apps::RollingUpdateDaemonSet {
    "maxUnavailable" => max_unavailable, "maxSurge" => max_surge,
});
message!(apps::DaemonSetStatus {
    "observedGeneration" => observed_generation, "updatedNumberScheduled" => updated_number_scheduled,
    "numberAvailable" => number_available, "numberUnavailable" => number_unavailable,
    "conditions" => conditions,
} keep {
    "currentNumberScheduled" => current_number_scheduled,
    "numberMisscheduled" => number_misscheduled,
    "desiredNumberScheduled" => desired_number_scheduled, "numberReady" => number_ready,
    "collisionCount" => collision_count,
});
message!(apps::DaemonSetCondition {
    "type" => r#type, "status" => status, "lastTransitionTime" => last_transition_time,
    "reason" => reason, "message" => message,
});
message!(core::ReplicationController { "metadata" => metadata, "spec" => spec, "status" => status });
message!(core::ReplicationControllerSpec {
    "minReadySeconds" => min_ready_seconds, "selector" => selector, "template" => template,
} keep {
    "replicas" => replicas,
});
message!(core::ReplicationControllerStatus {
    "fullyLabeledReplicas" => fully_labeled_replicas, "readyReplicas" => ready_replicas,
    "availableReplicas" => available_replicas, "observedGeneration" => observed_generation,
    "conditions" => conditions,
} keep {
    "replicas" => replicas,
});
message!(core::ReplicationControllerCondition {
    "type" => r#type, "status" => status, "lastTransitionTime" => last_transition_time,
    "reason" => reason, "message" => message,
});

// ---- batch/v1 (what `kubectl create job|cronjob` send) ---------------------------------------

message!(batch::Job { "metadata" => metadata, "spec" => spec, "status" => status });
message!(batch::JobSpec {
    "selector" => selector, "template" => template, "completionMode" => completion_mode,
    "podReplacementPolicy" => pod_replacement_policy, "managedBy" => managed_by,
} keep {
    "parallelism" => parallelism, "completions" => completions,
    "activeDeadlineSeconds" => active_deadline_seconds, "backoffLimit" => backoff_limit,
    "backoffLimitPerIndex" => backoff_limit_per_index, "maxFailedIndexes" => max_failed_indexes,
    "manualSelector" => manual_selector, "ttlSecondsAfterFinished" => ttl_seconds_after_finished,
    "suspend" => suspend,
});
message!(batch::JobStatus {
    "conditions" => conditions, "startTime" => start_time, "completionTime" => completion_time,
    "active" => active, "succeeded" => succeeded, "failed" => failed,
    "completedIndexes" => completed_indexes, "failedIndexes" => failed_indexes,
    "uncountedTerminatedPods" => uncounted_terminated_pods,
} keep {
    "terminating" => terminating, "ready" => ready,
});
message!(batch::JobCondition {
    "type" => r#type, "status" => status, "lastProbeTime" => last_probe_time,
    "lastTransitionTime" => last_transition_time, "reason" => reason, "message" => message,
});
message!(batch::UncountedTerminatedPods { "succeeded" => succeeded, "failed" => failed });
message!(batch::JobTemplateSpec { "metadata" => metadata, "spec" => spec });
message!(batch::CronJob { "metadata" => metadata, "spec" => spec, "status" => status });
message!(batch::CronJobSpec {
    "schedule" => schedule, "timeZone" => time_zone, "concurrencyPolicy" => concurrency_policy,
    "jobTemplate" => job_template,
} keep {
    "startingDeadlineSeconds" => starting_deadline_seconds, "suspend" => suspend,
    "successfulJobsHistoryLimit" => successful_jobs_history_limit,
    "failedJobsHistoryLimit" => failed_jobs_history_limit,
});
message!(batch::CronJobStatus {
    "active" => active, "lastScheduleTime" => last_schedule_time,
    "lastSuccessfulTime" => last_successful_time,
});

// ---- policy/v1 and authentication.k8s.io/v1 -------------------------------------------------

message!(policy::PodDisruptionBudget { "metadata" => metadata, "spec" => spec, "status" => status });
message!(policy::PodDisruptionBudgetSpec {
    "minAvailable" => min_available, "selector" => selector, "maxUnavailable" => max_unavailable,
    "unhealthyPodEvictionPolicy" => unhealthy_pod_eviction_policy,
});
message!(policy::PodDisruptionBudgetStatus {
    "observedGeneration" => observed_generation, "disruptedPods" => disrupted_pods,
    "conditions" => conditions,
} keep {
    "disruptionsAllowed" => disruptions_allowed, "currentHealthy" => current_healthy,
    "desiredHealthy" => desired_healthy, "expectedPods" => expected_pods,
});
message!(policy::Eviction { "metadata" => metadata, "deleteOptions" => delete_options });
message!(authentication::TokenRequest { "metadata" => metadata, "spec" => spec, "status" => status });
message!(authentication::TokenRequestSpec {
    "audiences" => audiences, "boundObjectRef" => bound_object_ref,
} keep {
    "expirationSeconds" => expiration_seconds,
});
message!(authentication::BoundObjectReference {
    "kind" => kind, "apiVersion" => api_version, "name" => name, "uid" => u_id,
});
message!(authentication::TokenRequestStatus {
    "token" => token, "expirationTimestamp" => expiration_timestamp,
});
message!(authentication::SelfSubjectReview { "metadata" => metadata, "status" => status });
message!(authentication::SelfSubjectReviewStatus { "userInfo" => user_info });
message!(authentication::UserInfo {
    "username" => username, "uid" => uid, "groups" => groups, "extra" => extra,
});

impl ToJson for authentication::ExtraValue {
    fn to_json(self) -> Result<Value, String> {
        Ok(Value::Array(
            self.items.into_iter().map(Value::String).collect(),
        ))
    }
}

// ---- rbac.authorization.k8s.io/v1 ----------------------------------------------------------

message!(rbac::Role { "metadata" => metadata, "rules" => rules });
message!(rbac::ClusterRole {
    "metadata" => metadata, "rules" => rules, "aggregationRule" => aggregation_rule,
});
message!(rbac::AggregationRule { "clusterRoleSelectors" => cluster_role_selectors });
message!(rbac::PolicyRule {
    "verbs" => verbs, "apiGroups" => api_groups, "resources" => resources,
    "resourceNames" => resource_names, "nonResourceURLs" => non_resource_ur_ls,
});
message!(rbac::RoleBinding { "metadata" => metadata, "subjects" => subjects, "roleRef" => role_ref });
message!(rbac::ClusterRoleBinding {
    "metadata" => metadata, "subjects" => subjects, "roleRef" => role_ref,
});
message!(rbac::Subject {
    "kind" => kind, "apiGroup" => api_group, "name" => name, "namespace" => namespace,
});
message!(rbac::RoleRef { "apiGroup" => api_group, "kind" => kind, "name" => name });

// ---- apiextensions.k8s.io/v1 ---------------------------------------------------------------

message!(crd::CustomResourceDefinition {
    "metadata" => metadata, "spec" => spec, "status" => status,
});
message!(crd::CustomResourceDefinitionSpec {
    "group" => group, "names" => names, "scope" => scope, "versions" => versions,
    "conversion" => conversion, "preserveUnknownFields" => preserve_unknown_fields,
});
message!(crd::CustomResourceDefinitionNames {
    "plural" => plural, "singular" => singular, "shortNames" => short_names, "kind" => kind,
    "listKind" => list_kind, "categories" => categories,
});
message!(crd::CustomResourceDefinitionVersion {
    "name" => name, "deprecated" => deprecated, "deprecationWarning" => deprecation_warning,
    "schema" => schema, "subresources" => subresources,
    "additionalPrinterColumns" => additional_printer_columns,
    "selectableFields" => selectable_fields,
} keep {
    "served" => served, "storage" => storage,
});
message!(crd::CustomResourceValidation { "openAPIV3Schema" => open_apiv3_schema });
message!(crd::CustomResourceSubresources { "status" => status, "scale" => scale });
/// `subresources.status` is an empty object whose presence enables `/status`.
impl ToJson for crd::CustomResourceSubresourceStatus {
    fn to_json(self) -> Result<Value, String> {
        Ok(Value::Object(Map::new()))
    }
}
message!(crd::CustomResourceSubresourceScale {
    "specReplicasPath" => spec_replicas_path, "statusReplicasPath" => status_replicas_path,
    "labelSelectorPath" => label_selector_path,
});
message!(crd::CustomResourceColumnDefinition {
    "name" => name, "type" => r#type, "format" => format, "description" => description,
    "priority" => priority, "jsonPath" => json_path,
});
message!(crd::SelectableField { "jsonPath" => json_path });
message!(crd::CustomResourceConversion { "strategy" => strategy, "webhook" => webhook });
message!(crd::WebhookConversion {
    "clientConfig" => client_config, "conversionReviewVersions" => conversion_review_versions,
});
message!(crd::WebhookClientConfig {
    "url" => url, "service" => service, "caBundle" => ca_bundle,
});
message!(crd::ServiceReference {
    "namespace" => namespace, "name" => name, "path" => path,
} keep {
    "port" => port,
});
message!(crd::CustomResourceDefinitionStatus {
    "conditions" => conditions, "acceptedNames" => accepted_names,
    "storedVersions" => stored_versions, "observedGeneration" => observed_generation,
});
message!(crd::CustomResourceDefinitionCondition {
    "type" => r#type, "status" => status, "lastTransitionTime" => last_transition_time,
    "reason" => reason, "message" => message, "observedGeneration" => observed_generation,
});
// A schema: Go pointer fields (`maximum`, `maxLength`, `items`, ...) keep their zeros, and the
// raw JSON values (`default`, `example`) are kept exactly, `""` and `0` included.
message!(crd::JsonSchemaProps {
    "id" => id, "$schema" => schema, "$ref" => r#ref, "description" => description,
    "type" => r#type, "format" => format, "title" => title,
    "exclusiveMaximum" => exclusive_maximum, "exclusiveMinimum" => exclusive_minimum,
    "pattern" => pattern, "uniqueItems" => unique_items, "enum" => r#enum,
    "required" => required, "allOf" => all_of, "oneOf" => one_of, "anyOf" => any_of,
    "properties" => properties, "patternProperties" => pattern_properties,
    "dependencies" => dependencies, "definitions" => definitions,
    "externalDocs" => external_docs, "nullable" => nullable,
    "x-kubernetes-embedded-resource" => x_kubernetes_embedded_resource,
    "x-kubernetes-int-or-string" => x_kubernetes_int_or_string,
    "x-kubernetes-list-map-keys" => x_kubernetes_list_map_keys,
    "x-kubernetes-validations" => x_kubernetes_validations,
} keep {
    "maximum" => maximum, "minimum" => minimum, "maxLength" => max_length,
    "minLength" => min_length, "maxItems" => max_items, "minItems" => min_items,
    "multipleOf" => multiple_of, "maxProperties" => max_properties,
    "minProperties" => min_properties, "items" => items, "not" => not,
    "additionalProperties" => additional_properties, "additionalItems" => additional_items,
    "x-kubernetes-preserve-unknown-fields" => x_kubernetes_preserve_unknown_fields,
    "x-kubernetes-list-type" => x_kubernetes_list_type,
    "x-kubernetes-map-type" => x_kubernetes_map_type,
} exact {
    "default" => default, "example" => example,
});
message!(crd::ExternalDocumentation { "description" => description, "url" => url });
message!(crd::ValidationRule {
    "rule" => rule, "message" => message, "messageExpression" => message_expression,
    "reason" => reason, "fieldPath" => field_path,
} keep {
    "optionalOldSelf" => optional_old_self,
});

/// `JSON` (a schema's `default`, `example` and `enum` values): the raw JSON it carries.
impl ToJson for crd::Json {
    fn to_json(self) -> Result<Value, String> {
        match self.raw {
            None => Ok(Value::Null),
            Some(raw) => {
                serde_json::from_slice(&raw).map_err(|e| format!(": does not hold JSON: {e}"))
            }
        }
    }
}

/// `items`: one schema for every element, or (JSON Schema's tuple form) a list of schemas.
impl ToJson for crd::JsonSchemaPropsOrArray {
    fn to_json(self) -> Result<Value, String> {
        if !self.j_son_schemas.is_empty() {
            return Ok(Conv::conv(self.j_son_schemas)?.unwrap_or(Value::Null));
        }
        match self.schema {
            Some(schema) => schema.to_json(),
            None => Ok(Value::Null),
        }
    }
}

/// `additionalProperties` / `additionalItems`: a schema, or `true`/`false`.
impl ToJson for crd::JsonSchemaPropsOrBool {
    fn to_json(self) -> Result<Value, String> {
        match self.schema {
            Some(schema) => schema.to_json(),
            None => Ok(Value::Bool(self.allows.unwrap_or(false))),
        }
    }
}

/// A `dependencies` entry: a schema, or the list of properties that must also be present.
impl ToJson for crd::JsonSchemaPropsOrStringArray {
    fn to_json(self) -> Result<Value, String> {
        if !self.property.is_empty() {
            return Ok(Conv::conv(self.property)?.unwrap_or(Value::Null));
        }
        match self.schema {
            Some(schema) => schema.to_json(),
            None => Ok(Value::Null),
        }
    }
}

// ---- autoscaling/v1 (the /scale subresource) ------------------------------------------------

message!(autoscaling::Scale { "metadata" => metadata, "spec" => spec, "status" => status });
// A zero `spec.replicas` is kept: it is what "scale to zero" sends.
message!(autoscaling::ScaleSpec {} keep { "replicas" => replicas });
message!(autoscaling::ScaleStatus { "selector" => selector } keep { "replicas" => replicas });

// ---- coordination.k8s.io/v1 and events.k8s.io/v1 -------------------------------------------

message!(coordination::Lease { "metadata" => metadata, "spec" => spec });
message!(coordination::LeaseSpec {
    "holderIdentity" => holder_identity, "acquireTime" => acquire_time, "renewTime" => renew_time,
    "strategy" => strategy, "preferredHolder" => preferred_holder,
} keep {
    "leaseDurationSeconds" => lease_duration_seconds, "leaseTransitions" => lease_transitions,
});
message!(events::Event {
    "metadata" => metadata, "eventTime" => event_time, "series" => series,
    "reportingController" => reporting_controller, "reportingInstance" => reporting_instance,
    "action" => action, "reason" => reason, "regarding" => regarding, "related" => related,
    "note" => note, "type" => r#type, "deprecatedSource" => deprecated_source,
    "deprecatedFirstTimestamp" => deprecated_first_timestamp,
    "deprecatedLastTimestamp" => deprecated_last_timestamp, "deprecatedCount" => deprecated_count,
});
message!(events::EventSeries {
    "lastObservedTime" => last_observed_time,
} keep {
    "count" => count,
});

// ---- networking.k8s.io/v1 and core/v1 ResourceQuota ----------------------------------------

message!(networking::Ingress { "metadata" => metadata, "spec" => spec, "status" => status });
message!(networking::IngressSpec {
    "ingressClassName" => ingress_class_name, "defaultBackend" => default_backend,
    "tls" => tls, "rules" => rules,
});
message!(networking::IngressBackend { "service" => service, "resource" => resource });
message!(core::TypedLocalObjectReference {
    "apiGroup" => api_group, "kind" => kind, "name" => name,
});
message!(networking::IngressServiceBackend { "name" => name, "port" => port });
message!(networking::ServiceBackendPort { "name" => name, "number" => number });
message!(networking::IngressTls { "hosts" => hosts, "secretName" => secret_name });
message!(networking::IngressRule { "host" => host } inline ingress_rule_value);
message!(networking::IngressRuleValue { "http" => http });
message!(networking::HttpIngressRuleValue { "paths" => paths });
message!(networking::HttpIngressPath {
    "path" => path, "pathType" => path_type, "backend" => backend,
});
message!(networking::IngressStatus { "loadBalancer" => load_balancer });
message!(networking::IngressLoadBalancerStatus { "ingress" => ingress });
message!(networking::IngressLoadBalancerIngress {
    "ip" => ip, "hostname" => hostname, "ports" => ports,
});
message!(networking::IngressPortStatus { "protocol" => protocol, "error" => error, } keep { "port" => port, });
message!(networking::IngressClass { "metadata" => metadata, "spec" => spec });
message!(networking::IngressClassSpec { "controller" => controller, "parameters" => parameters });
message!(networking::IngressClassParametersReference {
    "apiGroup" => a_pi_group, "kind" => kind, "name" => name, "scope" => scope,
    "namespace" => namespace,
});
// `podSelector` has no `omitempty`: an empty selector is kept as `{}`.
message!(networking::NetworkPolicy { "metadata" => metadata, "spec" => spec });
message!(networking::NetworkPolicySpec {
    "ingress" => ingress, "egress" => egress, "policyTypes" => policy_types,
} keep {
    "podSelector" => pod_selector,
});
message!(networking::NetworkPolicyIngressRule { "ports" => ports, "from" => from });
message!(networking::NetworkPolicyEgressRule { "ports" => ports, "to" => to });
message!(networking::NetworkPolicyPeer {
    "podSelector" => pod_selector, "namespaceSelector" => namespace_selector,
    "ipBlock" => ip_block,
});
message!(networking::NetworkPolicyPort {
    "protocol" => protocol, "port" => port,
} keep {
    "endPort" => end_port,
});
message!(networking::IpBlock { "cidr" => cidr, "except" => except });
message!(core::ResourceQuota { "metadata" => metadata, "spec" => spec, "status" => status });
message!(core::ResourceQuotaSpec {
    "hard" => hard, "scopes" => scopes, "scopeSelector" => scope_selector,
});
message!(core::ScopeSelector { "matchExpressions" => match_expressions });
message!(core::ScopedResourceSelectorRequirement {
    "scopeName" => scope_name, "operator" => operator, "values" => values,
});
message!(core::ResourceQuotaStatus { "hard" => hard, "used" => used });

fn decode_as<T: Message + Default + ToJson>(
    raw: &[u8],
    api_version: &str,
    kind: &str,
) -> Result<Value, String> {
    let msg = T::decode(raw).map_err(|e| {
        format!("the {api_version} {kind} message in the protobuf body is malformed: {e}")
    })?;
    let mut value = msg.to_json()?;
    if let Value::Object(map) = &mut value {
        let mut out = Map::new();
        out.insert("kind".into(), Value::String(kind.into()));
        out.insert("apiVersion".into(), Value::String(api_version.into()));
        out.extend(std::mem::take(map));
        return Ok(Value::Object(out));
    }
    Ok(value)
}

/// The `(apiVersion, kind)` pairs [`decode_body`] understands.
#[cfg(test)]
pub const SUPPORTED_KINDS: &[(&str, &str)] = &[
    ("v1", "Namespace"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Event"),
    ("v1", "Pod"),
    ("v1", "Service"),
    ("v1", "ServiceAccount"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "ReplicaSet"),
    ("apps/v1", "DaemonSet"),
    ("v1", "ReplicationController"),
    ("batch/v1", "Job"),
    ("batch/v1", "CronJob"),
    ("policy/v1", "PodDisruptionBudget"),
    ("policy/v1", "Eviction"),
    ("authentication.k8s.io/v1", "TokenRequest"),
    ("authentication.k8s.io/v1", "SelfSubjectReview"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ("coordination.k8s.io/v1", "Lease"),
    ("events.k8s.io/v1", "Event"),
    ("networking.k8s.io/v1", "Ingress"),
    ("networking.k8s.io/v1", "IngressClass"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("v1", "ResourceQuota"),
    ("autoscaling/v1", "Scale"),
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"),
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"),
    ("authorization.k8s.io/v1", "SubjectAccessReview"),
    ("authorization.k8s.io/v1", "LocalSubjectAccessReview"),
    ("meta.k8s.io/v1", "DeleteOptions"),
];

/// Decodes a Kubernetes protobuf request body (magic, `runtime.Unknown` envelope, object) into
/// the JSON object a JSON client would have sent, `apiVersion` and `kind` included.
///
/// Errors name what was wrong: a missing magic, a malformed envelope or message, an unsupported
/// kind, a content encoding, or a field this decoder does not convert (with its path).
pub fn decode_body(bytes: &[u8]) -> Result<Value, String> {
    let Some(rest) = bytes.strip_prefix(MAGIC.as_slice()) else {
        return Err(format!(
            "the protobuf body does not start with the Kubernetes magic bytes \"k8s\\x00\" (first bytes: {:?})",
            &bytes[..bytes.len().min(4)]
        ));
    };
    let unknown = Unknown::decode(rest)
        .map_err(|e| format!("the protobuf envelope (runtime.Unknown) is malformed: {e}"))?;
    if let Some(enc) = unknown
        .content_encoding
        .as_deref()
        .filter(|e| !e.is_empty())
    {
        return Err(format!(
            "the protobuf envelope has contentEncoding {enc:?}, which is not supported"
        ));
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let raw = unknown.raw.unwrap_or_default();
    let result = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => decode_as::<core::Namespace>(&raw, &api_version, &kind),
        ("v1", "ConfigMap") => decode_as::<core::ConfigMap>(&raw, &api_version, &kind),
        ("v1", "Secret") => decode_as::<core::Secret>(&raw, &api_version, &kind),
        ("v1", "Event") => decode_as::<core::Event>(&raw, &api_version, &kind),
        ("v1", "Pod") => decode_as::<core::Pod>(&raw, &api_version, &kind),
        ("v1", "Service") => decode_as::<core::Service>(&raw, &api_version, &kind),
        ("v1", "ServiceAccount") => decode_as::<core::ServiceAccount>(&raw, &api_version, &kind),
        ("apps/v1", "Deployment") => decode_as::<apps::Deployment>(&raw, &api_version, &kind),
        ("apps/v1", "StatefulSet") => decode_as::<apps::StatefulSet>(&raw, &api_version, &kind),
        ("apps/v1", "ReplicaSet") => decode_as::<apps::ReplicaSet>(&raw, &api_version, &kind),
        ("apps/v1", "DaemonSet") => decode_as::<apps::DaemonSet>(&raw, &api_version, &kind),
        ("v1", "ReplicationController") => {
            decode_as::<core::ReplicationController>(&raw, &api_version, &kind)
        }
        ("batch/v1", "Job") => decode_as::<batch::Job>(&raw, &api_version, &kind),
        ("batch/v1", "CronJob") => decode_as::<batch::CronJob>(&raw, &api_version, &kind),
        ("policy/v1", "PodDisruptionBudget") => {
            decode_as::<policy::PodDisruptionBudget>(&raw, &api_version, &kind)
        }
        ("policy/v1", "Eviction") => decode_as::<policy::Eviction>(&raw, &api_version, &kind),
        ("authentication.k8s.io/v1", "TokenRequest") => {
            decode_as::<authentication::TokenRequest>(&raw, &api_version, &kind)
        }
        ("authentication.k8s.io/v1", "SelfSubjectReview") => {
            decode_as::<authentication::SelfSubjectReview>(&raw, &api_version, &kind)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => {
            decode_as::<rbac::Role>(&raw, &api_version, &kind)
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
            decode_as::<rbac::ClusterRole>(&raw, &api_version, &kind)
        }
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
            decode_as::<rbac::RoleBinding>(&raw, &api_version, &kind)
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            decode_as::<rbac::ClusterRoleBinding>(&raw, &api_version, &kind)
        }
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            decode_as::<crd::CustomResourceDefinition>(&raw, &api_version, &kind)
        }
        ("coordination.k8s.io/v1", "Lease") => {
            decode_as::<coordination::Lease>(&raw, &api_version, &kind)
        }
        ("events.k8s.io/v1", "Event") => decode_as::<events::Event>(&raw, &api_version, &kind),
        ("networking.k8s.io/v1", "Ingress") => {
            decode_as::<networking::Ingress>(&raw, &api_version, &kind)
        }
        ("networking.k8s.io/v1", "IngressClass") => {
            decode_as::<networking::IngressClass>(&raw, &api_version, &kind)
        }
        ("networking.k8s.io/v1", "NetworkPolicy") => {
            decode_as::<networking::NetworkPolicy>(&raw, &api_version, &kind)
        }
        ("v1", "ResourceQuota") => decode_as::<core::ResourceQuota>(&raw, &api_version, &kind),
        ("autoscaling/v1", "Scale") => decode_as::<autoscaling::Scale>(&raw, &api_version, &kind),
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => {
            decode_as::<authorization::SelfSubjectAccessReview>(&raw, &api_version, &kind)
        }
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => {
            decode_as::<authorization::SelfSubjectRulesReview>(&raw, &api_version, &kind)
        }
        ("authorization.k8s.io/v1", "SubjectAccessReview") => {
            decode_as::<authorization::SubjectAccessReview>(&raw, &api_version, &kind)
        }
        ("authorization.k8s.io/v1", "LocalSubjectAccessReview") => {
            decode_as::<authorization::LocalSubjectAccessReview>(&raw, &api_version, &kind)
        }
        // DeleteOptions is registered in every group-version; clients name whichever they use.
        (_, "DeleteOptions") if !api_version.is_empty() => {
            decode_as::<meta::DeleteOptions>(&raw, &api_version, &kind)
        }
        ("", _) | (_, "") => {
            return Err(format!(
                "the protobuf envelope does not name the type of its content (apiVersion {api_version:?}, kind {kind:?})"
            ));
        }
        _ => {
            return Err(format!(
                "protobuf bodies of {api_version} {kind} are not supported by this server; send JSON instead"
            ));
        }
    };
    result.map_err(|e| format!("{api_version} {kind}: {e}"))
}

/// Wraps an encoded object in the envelope, as a Go client does (useful for tests and tools).
#[cfg(test)]
pub fn encode_body(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta_named(name: &str, ns: Option<&str>) -> meta::ObjectMeta {
        meta::ObjectMeta {
            name: Some(name.into()),
            namespace: ns.map(Into::into),
            // Go's protobuf writes every non-pointer string, so empty ones arrive too.
            generate_name: Some(String::new()),
            labels: BTreeMap::from([("app".to_string(), "cnat".to_string())]),
            creation_timestamp: Some(meta::Time {
                seconds: Some(-62_135_596_800),
                nanos: Some(0),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn namespace_like_kubectl_create_namespace() {
        let ns = core::Namespace {
            metadata: Some(meta_named("cnat", None)),
            spec: Some(core::NamespaceSpec::default()),
            status: Some(core::NamespaceStatus::default()),
        };
        let body = encode_body("v1", "Namespace", ns.encode_to_vec());
        assert_eq!(
            decode_body(&body).unwrap(),
            json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "cnat", "labels": {"app": "cnat"}},
                   "spec": {}, "status": {}})
        );
    }

    #[test]
    fn configmap_and_secret() {
        let cm = core::ConfigMap {
            metadata: Some(meta_named("cfg", Some("default"))),
            data: BTreeMap::from([
                ("a".to_string(), "1".to_string()),
                ("empty".to_string(), String::new()),
            ]),
            binary_data: BTreeMap::from([("bin".to_string(), vec![0u8, 1, 2])]),
            immutable: None,
        };
        let v = decode_body(&encode_body("v1", "ConfigMap", cm.encode_to_vec())).unwrap();
        assert_eq!(v["data"], json!({"a": "1", "empty": ""}));
        assert_eq!(v["binaryData"], json!({"bin": "AAEC"}));
        assert_eq!(v["metadata"]["namespace"], "default");
        assert!(v.get("immutable").is_none());

        let secret = core::Secret {
            metadata: Some(meta_named("s", Some("default"))),
            data: BTreeMap::from([("password".to_string(), b"hunter2".to_vec())]),
            r#type: Some("Opaque".into()),
            immutable: Some(true),
            ..Default::default()
        };
        let v = decode_body(&encode_body("v1", "Secret", secret.encode_to_vec())).unwrap();
        assert_eq!(v["data"]["password"], "aHVudGVyMg==");
        assert_eq!(v["type"], "Opaque");
        assert_eq!(v["immutable"], true);
    }

    #[test]
    fn event_and_lease_times() {
        let ev = core::Event {
            metadata: Some(meta_named("at.17", Some("default"))),
            involved_object: Some(core::ObjectReference {
                kind: Some("At".into()),
                name: Some("example".into()),
                namespace: Some("default".into()),
                uid: Some("u-1".into()),
                ..Default::default()
            }),
            reason: Some("Created".into()),
            message: Some("pod created".into()),
            source: Some(core::EventSource {
                component: Some("cnat".into()),
                host: Some(String::new()),
            }),
            first_timestamp: Some(meta::Time {
                seconds: Some(1_714_557_600),
                nanos: Some(0),
            }),
            last_timestamp: Some(meta::Time {
                seconds: Some(1_714_557_601),
                nanos: Some(0),
            }),
            count: Some(2),
            r#type: Some("Normal".into()),
            event_time: Some(meta::MicroTime {
                seconds: Some(1_714_557_600),
                nanos: Some(123_456_789),
            }),
            ..Default::default()
        };
        let v = decode_body(&encode_body("v1", "Event", ev.encode_to_vec())).unwrap();
        assert_eq!(
            v["involvedObject"],
            json!({"kind": "At", "name": "example", "namespace": "default", "uid": "u-1"})
        );
        assert_eq!(v["firstTimestamp"], "2024-05-01T10:00:00Z");
        assert_eq!(v["lastTimestamp"], "2024-05-01T10:00:01Z");
        assert_eq!(v["eventTime"], "2024-05-01T10:00:00.123456Z");
        assert_eq!(v["source"], json!({"component": "cnat"}));
        assert_eq!(v["count"], 2);

        let lease = coordination::Lease {
            metadata: Some(meta_named("sample-controller", Some("kube-system"))),
            spec: Some(coordination::LeaseSpec {
                holder_identity: Some("pod-a".into()),
                lease_duration_seconds: Some(15),
                acquire_time: Some(meta::MicroTime {
                    seconds: Some(1_714_557_600),
                    nanos: Some(5_000),
                }),
                renew_time: Some(meta::MicroTime {
                    seconds: Some(1_714_557_610),
                    nanos: Some(0),
                }),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        let v = decode_body(&encode_body(
            "coordination.k8s.io/v1",
            "Lease",
            lease.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(
            v["spec"],
            json!({"holderIdentity": "pod-a", "leaseDurationSeconds": 15,
                   "acquireTime": "2024-05-01T10:00:00.000005Z", "renewTime": "2024-05-01T10:00:10.000000Z",
                   "leaseTransitions": 0})
        );
        assert_eq!(v["apiVersion"], "coordination.k8s.io/v1");
    }

    #[test]
    fn deployment_with_pod_template() {
        let container = core::Container {
            name: Some("web".into()),
            image: Some("nginx".into()),
            ports: vec![core::ContainerPort {
                container_port: Some(80),
                protocol: Some("TCP".into()),
                ..Default::default()
            }],
            env: vec![core::EnvVar {
                name: Some("FROM_CM".into()),
                value_from: Some(core::EnvVarSource {
                    config_map_key_ref: Some(core::ConfigMapKeySelector {
                        local_object_reference: Some(core::LocalObjectReference {
                            name: Some("cfg".into()),
                        }),
                        key: Some("a".into()),
                        optional: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            resources: Some(core::ResourceRequirements {
                limits: BTreeMap::from([(
                    "cpu".to_string(),
                    Quantity {
                        string: Some("500m".into()),
                    },
                )]),
                ..Default::default()
            }),
            readiness_probe: Some(core::Probe {
                handler: Some(core::ProbeHandler {
                    http_get: Some(core::HttpGetAction {
                        path: Some("/healthz".into()),
                        port: Some(IntOrString {
                            r#type: Some(1),
                            int_val: Some(0),
                            str_val: Some("http".into()),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                period_seconds: Some(10),
                ..Default::default()
            }),
            ..Default::default()
        };
        let deploy = apps::Deployment {
            metadata: Some(meta_named("web", Some("default"))),
            spec: Some(apps::DeploymentSpec {
                replicas: Some(0),
                selector: Some(meta::LabelSelector {
                    match_labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
                    ..Default::default()
                }),
                template: Some(core::PodTemplateSpec {
                    metadata: Some(meta_named("", None)),
                    spec: Some(core::PodSpec {
                        containers: vec![container],
                        volumes: vec![core::Volume {
                            name: Some("data".into()),
                            volume_source: Some(core::VolumeSource {
                                empty_dir: Some(core::EmptyDirVolumeSource::default()),
                                ..Default::default()
                            }),
                        }],
                        ..Default::default()
                    }),
                }),
                strategy: Some(apps::DeploymentStrategy {
                    r#type: Some("RollingUpdate".into()),
                    rolling_update: Some(apps::RollingUpdateDeployment {
                        max_unavailable: Some(IntOrString {
                            r#type: Some(1),
                            int_val: None,
                            str_val: Some("25%".into()),
                        }),
                        max_surge: Some(IntOrString {
                            r#type: Some(0),
                            int_val: Some(1),
                            str_val: None,
                        }),
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        };
        let v = decode_body(&encode_body(
            "apps/v1",
            "Deployment",
            deploy.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(v["spec"]["replicas"], 0, "explicit zero replicas survive");
        assert_eq!(
            v["spec"]["selector"],
            json!({"matchLabels": {"app": "web"}})
        );
        assert_eq!(
            v["spec"]["strategy"]["rollingUpdate"],
            json!({"maxUnavailable": "25%", "maxSurge": 1})
        );
        let c = &v["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            c["env"][0]["valueFrom"]["configMapKeyRef"],
            json!({"name": "cfg", "key": "a"})
        );
        assert_eq!(c["resources"]["limits"]["cpu"], "500m");
        assert_eq!(
            c["readinessProbe"],
            json!({"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10})
        );
        assert_eq!(
            v["spec"]["template"]["spec"]["volumes"][0],
            json!({"name": "data", "emptyDir": {}})
        );
    }

    #[test]
    fn unsupported_fields_are_named_not_dropped() {
        let pod = core::Pod {
            metadata: Some(meta_named("p", Some("default"))),
            spec: Some(core::PodSpec {
                volumes: vec![core::Volume {
                    name: Some("nfs".into()),
                    volume_source: Some(core::VolumeSource {
                        nfs: Some(core::NfsVolumeSource {
                            server: Some("srv".into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                }],
                ..Default::default()
            }),
            status: None,
        };
        let err = decode_body(&encode_body("v1", "Pod", pod.encode_to_vec())).unwrap_err();
        assert_eq!(
            err,
            "v1 Pod: spec.volumes[0].nfs: field not supported in protobuf bodies by this server; send JSON instead"
        );
    }

    #[test]
    fn envelope_errors() {
        let err = decode_body(b"{\"kind\":\"ConfigMap\"}").unwrap_err();
        assert!(err.contains("magic bytes"), "{err}");
        let err = decode_body(b"k8s\0\xff\xff\xff").unwrap_err();
        assert!(
            err.contains("envelope (runtime.Unknown) is malformed"),
            "{err}"
        );
        let err = decode_body(&encode_body("v1", "Node", vec![])).unwrap_err();
        assert_eq!(
            err,
            "protobuf bodies of v1 Node are not supported by this server; send JSON instead"
        );
        let err = decode_body(&encode_body("", "", vec![])).unwrap_err();
        assert!(err.contains("does not name the type"), "{err}");
        let err = decode_body(&encode_body("v1", "ConfigMap", vec![0x0a, 0x05, 0x01])).unwrap_err();
        assert!(
            err.contains("v1 ConfigMap message in the protobuf body is malformed"),
            "{err}"
        );
        let mut gz = Unknown::decode(&encode_body("v1", "ConfigMap", vec![])[4..]).unwrap();
        gz.content_encoding = Some("gzip".into());
        let mut body = MAGIC.to_vec();
        body.extend(gz.encode_to_vec());
        assert!(
            decode_body(&body)
                .unwrap_err()
                .contains("contentEncoding \"gzip\"")
        );
    }

    #[test]
    fn leftover_field_names() {
        assert_eq!(
            leftover_fields(
                "X { a: None, liveness_probe: Some(Probe { x: None }), c: [], r#type: Some(\"a, b\"), m: {} }"
            ),
            vec!["livenessProbe", "type"]
        );
    }

    #[test]
    fn every_supported_kind_decodes_an_empty_object() {
        for (api_version, kind) in SUPPORTED_KINDS {
            let v = decode_body(&encode_body(api_version, kind, Vec::new())).unwrap();
            assert_eq!(
                v,
                json!({"kind": kind, "apiVersion": api_version}),
                "{api_version} {kind}"
            );
        }
    }

    /// Bodies captured from `kubectl.1.33 create namespace cnat`, `create configmap cfg
    /// --from-literal=a=1 --from-literal=b=two` and `create secret generic s1
    /// --from-literal=password=hunter2`.
    #[test]
    fn real_kubectl_bodies() {
        let ns = decode_body(include_bytes!("testdata/kubectl-1.33-create-namespace.pb")).unwrap();
        assert_eq!(
            ns,
            json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": "cnat"}, "spec": {}, "status": {}})
        );
        let cm = decode_body(include_bytes!("testdata/kubectl-1.33-create-configmap.pb")).unwrap();
        assert_eq!(cm["kind"], "ConfigMap");
        assert_eq!(cm["metadata"]["name"], "cfg");
        assert_eq!(cm["data"], json!({"a": "1", "b": "two"}));
        let secret = decode_body(include_bytes!("testdata/kubectl-1.33-create-secret.pb")).unwrap();
        assert_eq!(secret["metadata"]["name"], "s1");
        assert_eq!(secret["data"], json!({"password": "aHVudGVyMg=="}));
    }

    /// Bodies captured from `kubectl.1.33 create deployment web --image=nginx --replicas=2
    /// --port=80`, `create service clusterip web --tcp=80:8080` and `create serviceaccount robot`:
    /// the JSON is what kubectl sends as JSON (`-o json --dry-run=client`), zeros of `omitempty`
    /// fields left out.
    #[test]
    fn real_kubectl_workload_bodies() {
        let d = decode_body(include_bytes!("testdata/kubectl-1.33-create-deployment.pb")).unwrap();
        assert_eq!(
            d,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"labels": {"app": "web"}, "name": "web", "namespace": "default"},
                   "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "strategy": {},
                            "template": {"metadata": {"labels": {"app": "web"}},
                                         "spec": {"containers": [{"image": "nginx", "name": "nginx",
                                                                  "ports": [{"containerPort": 80}], "resources": {}}]}}},
                   "status": {}})
        );
        let svc = decode_body(include_bytes!("testdata/kubectl-1.33-create-service.pb")).unwrap();
        assert_eq!(
            svc["spec"],
            json!({"ports": [{"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080}],
                   "selector": {"app": "web"}, "type": "ClusterIP"})
        );
        let sa = decode_body(include_bytes!(
            "testdata/kubectl-1.33-create-serviceaccount.pb"
        ))
        .unwrap();
        assert_eq!(
            sa,
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot", "namespace": "default"}})
        );
    }

    #[test]
    fn delete_options_and_scale() {
        let opts = meta::DeleteOptions {
            grace_period_seconds: Some(0),
            preconditions: Some(meta::Preconditions {
                uid: Some("u-1".into()),
                resource_version: None,
            }),
            propagation_policy: Some("Foreground".into()),
            orphan_dependents: None,
            ..Default::default()
        };
        let v = decode_body(&encode_body(
            "meta.k8s.io/v1",
            "DeleteOptions",
            opts.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(
            v,
            json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1", "gracePeriodSeconds": 0,
                   "preconditions": {"uid": "u-1"}, "propagationPolicy": "Foreground"})
        );
        let scale = autoscaling::Scale {
            metadata: Some(meta_named("web", Some("default"))),
            spec: Some(autoscaling::ScaleSpec { replicas: Some(0) }),
            status: None,
        };
        let v = decode_body(&encode_body(
            "autoscaling/v1",
            "Scale",
            scale.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(
            v["spec"],
            json!({"replicas": 0}),
            "scale to zero keeps its zero"
        );
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn rbac_kinds_as_kubectl_create_sends_them() {
        // `kubectl create role pod-reader --verb=get,list --resource=pods`
        let role = rbac::Role {
            metadata: Some(meta_named("pod-reader", Some("cnat"))),
            rules: vec![rbac::PolicyRule {
                verbs: strings(&["get", "list"]),
                api_groups: strings(&[""]),
                resources: strings(&["pods"]),
                resource_names: vec![],
                non_resource_ur_ls: vec![],
            }],
        };
        let v = decode_body(&encode_body(
            "rbac.authorization.k8s.io/v1",
            "Role",
            role.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(v["kind"], "Role");
        assert_eq!(v["apiVersion"], "rbac.authorization.k8s.io/v1");
        assert_eq!(
            v["rules"],
            json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}]),
            "the core group's empty name is kept inside the list"
        );

        let cr = rbac::ClusterRole {
            metadata: Some(meta_named("metrics", None)),
            rules: vec![rbac::PolicyRule {
                verbs: strings(&["get"]),
                non_resource_ur_ls: strings(&["/metrics"]),
                ..Default::default()
            }],
            aggregation_rule: Some(rbac::AggregationRule {
                cluster_role_selectors: vec![meta::LabelSelector {
                    match_labels: BTreeMap::from([("agg".to_string(), "true".to_string())]),
                    match_expressions: vec![],
                }],
            }),
        };
        let v = decode_body(&encode_body(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            cr.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(
            v["rules"],
            json!([{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}])
        );
        assert_eq!(
            v["aggregationRule"],
            json!({"clusterRoleSelectors": [{"matchLabels": {"agg": "true"}}]})
        );

        let subjects = vec![
            rbac::Subject {
                kind: Some("User".into()),
                api_group: Some("rbac.authorization.k8s.io".into()),
                name: Some("alice".into()),
                namespace: Some(String::new()),
            },
            rbac::Subject {
                kind: Some("ServiceAccount".into()),
                api_group: Some(String::new()),
                name: Some("cnat".into()),
                namespace: Some("cnat".into()),
            },
        ];
        let role_ref = rbac::RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: Some("Role".into()),
            name: Some("pod-reader".into()),
        };
        let rb = rbac::RoleBinding {
            metadata: Some(meta_named("read-pods", Some("cnat"))),
            subjects: subjects.clone(),
            role_ref: Some(role_ref.clone()),
        };
        let v = decode_body(&encode_body(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            rb.encode_to_vec(),
        ))
        .unwrap();
        let expected_subjects = json!([
            {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"},
            {"kind": "ServiceAccount", "name": "cnat", "namespace": "cnat"},
        ]);
        assert_eq!(v["subjects"], expected_subjects);
        assert_eq!(
            v["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"})
        );
        assert_eq!(v["metadata"]["namespace"], "cnat");

        let crb = rbac::ClusterRoleBinding {
            metadata: Some(meta_named("read-all", None)),
            subjects,
            role_ref: Some(rbac::RoleRef {
                kind: Some("ClusterRole".into()),
                ..role_ref
            }),
        };
        let v = decode_body(&encode_body(
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            crb.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(v["kind"], "ClusterRoleBinding");
        assert_eq!(v["subjects"], expected_subjects);
        assert_eq!(v["roleRef"]["kind"], "ClusterRole");
    }

    #[test]
    fn replicaset_keeps_zero_replicas_and_its_template() {
        let rs = apps::ReplicaSet {
            metadata: Some(meta_named("web-1", Some("default"))),
            spec: Some(apps::ReplicaSetSpec {
                replicas: Some(0),
                min_ready_seconds: Some(0),
                selector: Some(meta::LabelSelector {
                    match_labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
                    match_expressions: vec![],
                }),
                template: Some(core::PodTemplateSpec {
                    metadata: Some(meta::ObjectMeta {
                        labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
                        ..Default::default()
                    }),
                    spec: Some(core::PodSpec {
                        containers: vec![core::Container {
                            name: Some("web".into()),
                            image: Some("nginx".into()),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                }),
            }),
            status: Some(apps::ReplicaSetStatus {
                replicas: Some(0),
                ..Default::default()
            }),
        };
        let v = decode_body(&encode_body("apps/v1", "ReplicaSet", rs.encode_to_vec())).unwrap();
        assert_eq!(v["kind"], "ReplicaSet");
        assert_eq!(
            v["spec"],
            json!({
                "replicas": 0,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "web", "image": "nginx"}]}},
            })
        );
        assert_eq!(v["status"], json!({"replicas": 0}));
    }

    fn schema(type_: &str) -> crd::JsonSchemaProps {
        crd::JsonSchemaProps {
            r#type: Some(type_.into()),
            ..Default::default()
        }
    }

    fn raw_json(v: Value) -> crd::Json {
        crd::Json {
            raw: Some(serde_json::to_vec(&v).unwrap()),
        }
    }

    #[test]
    fn crd_with_schema_subresources_and_printer_columns() {
        let spec_schema = crd::JsonSchemaProps {
            r#type: Some("object".into()),
            required: strings(&["schedule"]),
            properties: BTreeMap::from([
                (
                    "schedule".to_string(),
                    crd::JsonSchemaProps {
                        format: Some("date-time".into()),
                        ..schema("string")
                    },
                ),
                (
                    "command".to_string(),
                    crd::JsonSchemaProps {
                        min_length: Some(0),
                        default: Some(raw_json(json!(""))),
                        ..schema("string")
                    },
                ),
                (
                    "replicas".to_string(),
                    crd::JsonSchemaProps {
                        minimum: Some(0.0),
                        maximum: Some(10.0),
                        r#enum: vec![raw_json(json!(1)), raw_json(json!(3))],
                        ..schema("integer")
                    },
                ),
                (
                    "tags".to_string(),
                    crd::JsonSchemaProps {
                        items: Some(Box::new(crd::JsonSchemaPropsOrArray {
                            schema: Some(Box::new(schema("string"))),
                            j_son_schemas: vec![],
                        })),
                        x_kubernetes_list_type: Some("set".into()),
                        ..schema("array")
                    },
                ),
                (
                    "labels".to_string(),
                    crd::JsonSchemaProps {
                        additional_properties: Some(Box::new(crd::JsonSchemaPropsOrBool {
                            allows: Some(true),
                            schema: Some(Box::new(schema("string"))),
                        })),
                        ..schema("object")
                    },
                ),
                (
                    "closed".to_string(),
                    crd::JsonSchemaProps {
                        additional_properties: Some(Box::new(crd::JsonSchemaPropsOrBool {
                            allows: Some(false),
                            schema: None,
                        })),
                        x_kubernetes_preserve_unknown_fields: Some(false),
                        ..schema("object")
                    },
                ),
            ]),
            x_kubernetes_validations: vec![crd::ValidationRule {
                rule: Some("self.schedule != ''".into()),
                message: Some("schedule is required".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let definition = crd::CustomResourceDefinition {
            metadata: Some(meta_named("ats.cnat.programming-kubernetes.info", None)),
            spec: Some(crd::CustomResourceDefinitionSpec {
                group: Some("cnat.programming-kubernetes.info".into()),
                names: Some(crd::CustomResourceDefinitionNames {
                    plural: Some("ats".into()),
                    singular: Some("at".into()),
                    short_names: vec![],
                    kind: Some("At".into()),
                    list_kind: Some("AtList".into()),
                    categories: strings(&["all"]),
                }),
                scope: Some("Namespaced".into()),
                versions: vec![crd::CustomResourceDefinitionVersion {
                    name: Some("v1alpha1".into()),
                    served: Some(true),
                    storage: Some(false),
                    deprecated: Some(false),
                    schema: Some(crd::CustomResourceValidation {
                        open_apiv3_schema: Some(crd::JsonSchemaProps {
                            properties: BTreeMap::from([("spec".to_string(), spec_schema)]),
                            ..schema("object")
                        }),
                    }),
                    subresources: Some(crd::CustomResourceSubresources {
                        status: Some(crd::CustomResourceSubresourceStatus {}),
                        scale: None,
                    }),
                    additional_printer_columns: vec![crd::CustomResourceColumnDefinition {
                        name: Some("Schedule".into()),
                        r#type: Some("string".into()),
                        priority: Some(0),
                        json_path: Some(".spec.schedule".into()),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                conversion: Some(crd::CustomResourceConversion {
                    strategy: Some("None".into()),
                    webhook: None,
                }),
                preserve_unknown_fields: Some(false),
            }),
            status: Some(crd::CustomResourceDefinitionStatus::default()),
        };
        let v = decode_body(&encode_body(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            definition.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(v["kind"], "CustomResourceDefinition");
        assert_eq!(v["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(
            v["spec"]["names"],
            json!({"plural": "ats", "singular": "at", "kind": "At", "listKind": "AtList", "categories": ["all"]})
        );
        assert_eq!(v["spec"]["conversion"], json!({"strategy": "None"}));
        assert!(v["spec"].get("preserveUnknownFields").is_none());
        let version = &v["spec"]["versions"][0];
        assert_eq!(version["served"], true);
        assert_eq!(version["storage"], false, "storage has no omitempty");
        assert!(version.get("deprecated").is_none());
        assert_eq!(version["subresources"], json!({"status": {}}));
        assert_eq!(
            version["additionalPrinterColumns"],
            json!([{"name": "Schedule", "type": "string", "jsonPath": ".spec.schedule"}])
        );
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(
            spec,
            &json!({
                "type": "object",
                "required": ["schedule"],
                "properties": {
                    "schedule": {"type": "string", "format": "date-time"},
                    "command": {"type": "string", "minLength": 0, "default": ""},
                    "replicas": {"type": "integer", "minimum": 0.0, "maximum": 10.0, "enum": [1, 3]},
                    "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "closed": {"type": "object", "additionalProperties": false,
                               "x-kubernetes-preserve-unknown-fields": false},
                },
                "x-kubernetes-validations": [{"rule": "self.schedule != ''", "message": "schedule is required"}],
            })
        );
    }

    #[test]
    fn crd_schema_tuple_items_and_bad_default_are_reported() {
        let tuple = crd::JsonSchemaProps {
            items: Some(Box::new(crd::JsonSchemaPropsOrArray {
                schema: None,
                j_son_schemas: vec![schema("string"), schema("integer")],
            })),
            dependencies: BTreeMap::from([(
                "a".to_string(),
                crd::JsonSchemaPropsOrStringArray {
                    schema: None,
                    property: strings(&["b"]),
                },
            )]),
            ..schema("array")
        };
        assert_eq!(
            tuple.to_json().unwrap(),
            json!({"type": "array", "items": [{"type": "string"}, {"type": "integer"}],
                   "dependencies": {"a": ["b"]}})
        );
        let bad = crd::JsonSchemaProps {
            default: Some(crd::Json {
                raw: Some(b"{not json".to_vec()),
            }),
            ..schema("object")
        };
        let err = bad.to_json().unwrap_err();
        assert!(err.starts_with("default: does not hold JSON"), "{err}");
    }

    #[test]
    fn access_reviews_decode_as_kubectl_sends_them() {
        // What kubectl auth can-i sends: an empty ObjectMeta with Go's zero creation time, the
        // attributes, and a zero status (allowed=false).
        let review = authorization::SelfSubjectAccessReview {
            metadata: Some(meta::ObjectMeta {
                creation_timestamp: Some(meta::Time {
                    seconds: Some(-62_135_596_800),
                    nanos: Some(0),
                }),
                ..Default::default()
            }),
            spec: Some(authorization::SelfSubjectAccessReviewSpec {
                resource_attributes: Some(authorization::ResourceAttributes {
                    namespace: Some("default".into()),
                    verb: Some("list".into()),
                    group: Some("cnat.programming-kubernetes.info".into()),
                    version: Some(String::new()),
                    resource: Some("ats".into()),
                    subresource: Some(String::new()),
                    name: Some(String::new()),
                    ..Default::default()
                }),
                non_resource_attributes: None,
            }),
            status: Some(authorization::SubjectAccessReviewStatus {
                allowed: Some(false),
                denied: Some(false),
                reason: Some(String::new()),
                evaluation_error: Some(String::new()),
            }),
        };
        let v = decode_body(&encode_body(
            "authorization.k8s.io/v1",
            "SelfSubjectAccessReview",
            review.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(
            v,
            json!({"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                   "metadata": {},
                   "spec": {"resourceAttributes": {"namespace": "default", "verb": "list",
                            "group": "cnat.programming-kubernetes.info", "resource": "ats"}},
                   "status": {"allowed": false}})
        );
        let rules = authorization::SelfSubjectRulesReview {
            spec: Some(authorization::SelfSubjectRulesReviewSpec {
                namespace: Some("team".into()),
            }),
            ..Default::default()
        };
        let v = decode_body(&encode_body(
            "authorization.k8s.io/v1",
            "SelfSubjectRulesReview",
            rules.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(v["spec"], json!({"namespace": "team"}));
        let sar = authorization::SubjectAccessReview {
            spec: Some(authorization::SubjectAccessReviewSpec {
                user: Some("alice".into()),
                groups: vec!["devs".into()],
                extra: BTreeMap::from([(
                    "scopes".to_string(),
                    authorization::ExtraValue {
                        items: vec!["a".into(), "b".into()],
                    },
                )]),
                non_resource_attributes: Some(authorization::NonResourceAttributes {
                    path: Some("/metrics".into()),
                    verb: Some("get".into()),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let v = decode_body(&encode_body(
            "authorization.k8s.io/v1",
            "SubjectAccessReview",
            sar.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(
            v["spec"],
            json!({"user": "alice", "groups": ["devs"], "extra": {"scopes": ["a", "b"]},
                   "nonResourceAttributes": {"path": "/metrics", "verb": "get"}})
        );
    }
}
