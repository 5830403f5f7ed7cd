//! Discovery: how clients learn which resources exist.
//!
//! Before `kubectl get ats` can send a request it must turn `ats` into a URL: which group,
//! version and plural, namespaced or not. It learns that from discovery, which comes in two
//! shapes, both served here from the live [`Registry`] (so a new CRD shows up the moment it is
//! created, and disappears with it):
//!
//! * **Legacy**: `GET /api` (`APIVersions`), `GET /apis` (`APIGroupList`), then one
//!   `APIResourceList` per group-version (`GET /api/v1`, `GET /apis/apps/v1`, ...). Subresources
//!   appear after their resource, by name, as `pods/status`, `deployments/scale` (the latter
//!   with group `autoscaling`, kind `Scale`); pods also list their streams (`attach`, `exec`,
//!   `portforward`), `log`, `ephemeralcontainers` and the create-only actions `pods/binding`
//!   (kind Binding) and `pods/eviction` (group `policy`, version `v1`, kind Eviction). The
//!   core group lists first the create-only resource `bindings` (kind Binding), the older
//!   path to the same binding ([`BINDINGS`]).
//! * **Aggregated** (`apidiscovery.k8s.io`): the same information (`bindings` included, each
//!   subresource with its `responseKind`) in one document per root,
//!   sent only to clients that ask for it in `Accept` (`as=APIGroupDiscoveryList;v=v2`, or
//!   `v2beta1` for kubectl 1.28/1.29). The response `Content-Type` must carry the same
//!   `g`/`v`/`as` parameters, or client-go falls back to the legacy documents.
//!
//! Besides the registry's resources, discovery lists the create-only token reviews of
//! `authentication.k8s.io/v1` ([`crate::endpoints::token_review`]) and access reviews of
//! `authorization.k8s.io/v1` ([`crate::endpoints::access_review`]), in that order, after the built-in groups and
//! before the custom resources' groups; `kubectl auth can-i` finds the access reviews there.
//!
//! The meta types (`APIVersions`, `APIGroupList`, `APIResourceList`) serialise with
//! `apiVersion: v1` whatever group was asked about, as on the real server.

use serde_json::{Value, json};

use crate::endpoints::access_review as review;
use crate::endpoints::token_review as tokenreview;
use crate::registry::resources::{Registry, ResourceDef};

/// The `/version` document (a Kubernetes 1.33 server).
pub fn version() -> Value {
    json!({
        "major": "1", "minor": "33", "gitVersion": "v1.33.0",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2025-04-23T13:00:00Z", "goVersion": "go1.24.2", "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// `GET /api`.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn gv(group: &str, version: &str) -> Value {
    json!({"groupVersion": format!("{group}/{version}"), "version": version})
}

/// Every served group, core (`""`) excluded: the built-in groups in registration order, the
/// reviews' groups (authentication, then authorization), then the custom resources' groups.
pub fn group_names(reg: &Registry) -> Vec<String> {
    let mut names = reg.groups();
    let builtin = names
        .iter()
        .take_while(|g| {
            reg.all()
                .iter()
                .any(|d| &d.group == *g && d.custom.is_none())
        })
        .count();
    if !names.iter().any(|g| g == review::GROUP) {
        names.insert(builtin, review::GROUP.to_owned());
    }
    if !names.iter().any(|g| g == tokenreview::GROUP) {
        names.insert(builtin, tokenreview::GROUP.to_owned());
    }
    names
}

fn versions_of(reg: &Registry, group: &str) -> Vec<String> {
    if group == review::GROUP {
        return vec![review::VERSION.to_owned()];
    }
    if group == tokenreview::GROUP {
        return vec![tokenreview::VERSION.to_owned()];
    }
    reg.versions(group)
}

/// One `APIGroup`.
pub fn api_group(reg: &Registry, group: &str) -> Option<Value> {
    let versions = versions_of(reg, group);
    let first = versions.first()?;
    Some(json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": versions.iter().map(|v| gv(group, v)).collect::<Vec<_>>(),
        "preferredVersion": gv(group, first),
    }))
}

/// `GET /apis`.
pub fn api_group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = group_names(reg)
        .iter()
        .filter_map(|g| {
            let mut v = api_group(reg, g)?;
            if let Some(o) = v.as_object_mut() {
                o.remove("kind");
                o.remove("apiVersion");
            }
            Some(v)
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /api/v1` or `GET /apis/<group>/<version>`.
pub fn api_resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    if group == review::GROUP && version == review::VERSION {
        return Some(review::api_resource_list());
    }
    if group == tokenreview::GROUP && version == tokenreview::VERSION {
        return Some(tokenreview::api_resource_list());
    }
    let defs = reg.in_group_version(group, version);
    if defs.is_empty() {
        return None;
    }
    let mut resources = vec![];
    if group.is_empty() && version == "v1" {
        resources.push(json!({
            "name": BINDINGS, "singularName": "binding", "namespaced": true,
            "kind": "Binding", "verbs": ["create"],
        }));
    }
    for d in &defs {
        let mut r = json!({
            "name": d.plural, "singularName": d.singular, "namespaced": d.namespaced,
            "kind": d.kind, "verbs": d.verbs(),
        });
        if !d.short_names.is_empty() {
            r["shortNames"] = json!(d.short_names);
        }
        if !d.categories.is_empty() {
            r["categories"] = json!(d.categories);
        }
        resources.push(r);
        for sub in subresources(d) {
            let mut r = json!({
                "name": format!("{}/{}", d.plural, sub.name), "singularName": "",
                "namespaced": d.namespaced,
            });
            if let Some((group, version)) = sub.gv {
                r["group"] = json!(group);
                r["version"] = json!(version);
            }
            r["kind"] = json!(sub.kind);
            r["verbs"] = json!(sub.verbs);
            resources.push(r);
        }
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": group_version, "resources": resources,
    }))
}

/// The core/v1 resource `bindings` (`POST /api/v1/namespaces/NS/bindings`): create-only,
/// the older spelling of `pods/NAME/binding`, served by
/// [`crate::endpoints::handlers`] without a stored resource of its own.
pub const BINDINGS: &str = "bindings";

/// Verbs of a subresource that is read and written (`status`, `scale`,
/// `ephemeralcontainers`).
const READ_WRITE: &[&str] = &["get", "patch", "update"];
/// Verbs of the streaming subresources of pods (`attach`, `exec`, `portforward`).
const STREAM: &[&str] = &["create", "get"];
/// Verbs of an action (`binding`, `eviction`).
const ACTION: &[&str] = &["create"];

/// One subresource as discovery lists it.
struct Subresource {
    name: &'static str,
    /// The group and version of its kind when they are not its resource's.
    gv: Option<(&'static str, &'static str)>,
    kind: String,
    verbs: &'static [&'static str],
}

/// The subresources of `d`, by name, as kube-apiserver lists them: `status` and `scale`
/// where the resource has them, `namespaces/finalize`, `serviceaccounts/token` (kind
/// `authentication.k8s.io/v1` TokenRequest), and for pods the streams (`attach`, `exec`, `portforward`,
/// [`crate::remotecommand`]), `log`, `ephemeralcontainers` and the actions `binding` (kind
/// Binding) and `eviction` (kind `policy/v1` Eviction), both create-only.
fn subresources(d: &ResourceDef) -> Vec<Subresource> {
    let own = |name, kind: &str, verbs| Subresource {
        name,
        gv: None,
        kind: kind.to_owned(),
        verbs,
    };
    let mut subs = vec![];
    if d.status_subresource {
        subs.push(own("status", &d.kind, READ_WRITE));
    }
    if d.scale.is_some() {
        subs.push(Subresource {
            name: "scale",
            gv: Some(("autoscaling", "v1")),
            kind: "Scale".into(),
            verbs: READ_WRITE,
        });
    }
    let core = d.group.is_empty() && d.custom.is_none();
    if core && d.plural == "namespaces" {
        subs.push(own("finalize", &d.kind, &["update"]));
    }
    if core && d.plural == "serviceaccounts" {
        subs.push(Subresource {
            name: "token",
            gv: Some(("authentication.k8s.io", "v1")),
            kind: "TokenRequest".into(),
            verbs: ACTION,
        });
    }
    if core && d.plural == "pods" {
        subs.push(own("attach", "PodAttachOptions", STREAM));
        subs.push(own("binding", "Binding", ACTION));
        subs.push(own("ephemeralcontainers", &d.kind, READ_WRITE));
        subs.push(Subresource {
            name: "eviction",
            gv: Some(("policy", "v1")),
            kind: "Eviction".into(),
            verbs: ACTION,
        });
        subs.push(own("exec", "PodExecOptions", STREAM));
        subs.push(own("log", &d.kind, &["get"]));
        subs.push(own("portforward", "PodPortForwardOptions", STREAM));
    }
    subs.sort_by_key(|s| s.name);
    subs
}

fn resource_discovery(d: &ResourceDef) -> Value {
    let kind = json!({"group": d.group, "version": d.version, "kind": d.kind});
    let subresources: Vec<Value> = subresources(d)
        .into_iter()
        .map(|sub| {
            let (group, version) = sub.gv.unwrap_or((&d.group, &d.version));
            json!({"subresource": sub.name,
                   "responseKind": {"group": group, "version": version, "kind": sub.kind},
                   "verbs": sub.verbs})
        })
        .collect();
    let mut r = json!({
        "resource": d.plural, "responseKind": kind,
        "scope": if d.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": d.singular, "verbs": d.verbs(),
    });
    if !d.short_names.is_empty() {
        r["shortNames"] = json!(d.short_names);
    }
    if !d.categories.is_empty() {
        r["categories"] = json!(d.categories);
    }
    if !subresources.is_empty() {
        r["subresources"] = json!(subresources);
    }
    r
}

fn group_discovery(reg: &Registry, group: &str) -> Value {
    if group == review::GROUP {
        return review::group_discovery();
    }
    if group == tokenreview::GROUP {
        return tokenreview::group_discovery();
    }
    let versions: Vec<Value> = reg
        .versions(group)
        .iter()
        .map(|v| {
            let mut resources: Vec<Value> = reg
                .in_group_version(group, v)
                .iter()
                .map(|d| resource_discovery(d))
                .collect();
            if group.is_empty() && v == "v1" {
                resources.insert(
                    0,
                    json!({"resource": BINDINGS,
                           "responseKind": {"group": "", "version": "v1", "kind": "Binding"},
                           "scope": "Namespaced", "singularResource": "binding",
                           "verbs": ["create"]}),
                );
            }
            json!({"version": v, "resources": resources, "freshness": "Current"})
        })
        .collect();
    json!({"metadata": {"name": group}, "versions": versions})
}

/// The aggregated discovery document for `/api` (core) or `/apis` (every group), in the
/// `apidiscovery.k8s.io` version asked for (`v2` or `v2beta1`).
pub fn aggregated(reg: &Registry, core: bool, version: &str) -> Value {
    let items: Vec<Value> = if core {
        vec![group_discovery(reg, "")]
    } else {
        group_names(reg)
            .iter()
            .map(|g| group_discovery(reg, g))
            .collect()
    };
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

/// Which aggregated discovery version the `Accept` header asks for, if any: `v2` preferred,
/// `v2beta1` for older clients. Never v2 to a client that asked only for v2beta1.
pub fn negotiate_aggregated(accept: &str) -> Option<&'static str> {
    let mut best: Option<&'static str> = None;
    for part in accept.split(',') {
        let p = part.replace(' ', "");
        if !p.contains("g=apidiscovery.k8s.io") || !p.contains("as=APIGroupDiscoveryList") {
            continue;
        }
        if p.contains("v=v2beta1") {
            best = best.or(Some("v2beta1"));
        } else if p.contains("v=v2") {
            return Some("v2");
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregated_negotiation_honours_the_requested_version() {
        let both = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(negotiate_aggregated(both), Some("v2"));
        let old = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(negotiate_aggregated(old), Some("v2beta1"));
        assert_eq!(negotiate_aggregated("application/json"), None);
    }

    #[test]
    fn resource_lists_show_subresources() {
        let reg = Registry::builtins();
        let apps = api_resource_list(&reg, "apps", "v1").unwrap();
        let names: Vec<&str> = apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"deployments/scale"));
        assert!(names.contains(&"deployments/status"));
        assert!(api_resource_list(&reg, "nope", "v1").is_none());
    }

    #[test]
    fn the_core_group_lists_bindings_and_the_pod_actions() {
        let reg = Registry::builtins();
        let core = api_resource_list(&reg, "", "v1").unwrap();
        let resources = core["resources"].as_array().unwrap();
        let by = |n: &str| resources.iter().find(|r| r["name"] == n).cloned();
        assert_eq!(
            by("bindings"),
            Some(
                json!({"name": "bindings", "singularName": "binding", "namespaced": true,
                        "kind": "Binding", "verbs": ["create"]})
            )
        );
        assert_eq!(
            by("pods/binding"),
            Some(
                json!({"name": "pods/binding", "singularName": "", "namespaced": true,
                        "kind": "Binding", "verbs": ["create"]})
            )
        );
        assert_eq!(
            by("pods/eviction"),
            Some(
                json!({"name": "pods/eviction", "singularName": "", "namespaced": true,
                        "group": "policy", "version": "v1", "kind": "Eviction",
                        "verbs": ["create"]})
            )
        );
        let pod_subs: Vec<&str> = resources
            .iter()
            .filter_map(|r| r["name"].as_str()?.strip_prefix("pods/"))
            .collect();
        assert_eq!(
            pod_subs,
            [
                "attach",
                "binding",
                "ephemeralcontainers",
                "eviction",
                "exec",
                "log",
                "portforward",
                "status"
            ]
        );
        let agg = aggregated(&reg, true, "v2");
        let v1 = &agg["items"][0]["versions"][0]["resources"];
        assert_eq!(v1[0]["resource"], "bindings");
        assert_eq!(v1[0]["verbs"], json!(["create"]));
        let pods = v1
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "pods")
            .unwrap();
        let eviction = pods["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["subresource"] == "eviction")
            .unwrap();
        assert_eq!(
            eviction["responseKind"],
            json!({"group": "policy", "version": "v1", "kind": "Eviction"})
        );
        assert_eq!(eviction["verbs"], json!(["create"]));
    }

    #[test]
    fn the_reviews_group_follows_the_built_in_groups() {
        let reg = Registry::builtins();
        let names = group_names(&reg);
        assert_eq!(names.last().map(String::as_str), Some(review::GROUP));
        let listed = api_group_list(&reg);
        assert!(
            listed["groups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["name"] == review::GROUP
                    && g["preferredVersion"]["groupVersion"] == "authorization.k8s.io/v1")
        );
        let agg = aggregated(&reg, false, "v2");
        assert!(
            agg["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["metadata"]["name"] == review::GROUP)
        );
    }
}
