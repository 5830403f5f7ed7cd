//! Discovery: how clients learn which resources exist.
//!
//! Before `kubectl get ats` can send a request it must turn `ats` into a URL: which group,
//! version and plural, namespaced or not. It learns that from discovery, which comes in two
//! shapes, both served here from the live [`Registry`] (so a new CRD shows up the moment it is
//! created, and disappears with it):
//!
//! * **Legacy**: `GET /api` (`APIVersions`), `GET /apis` (`APIGroupList`), then one
//!   `APIResourceList` per group-version (`GET /api/v1`, `GET /apis/apps/v1`, ...). Subresources
//!   appear as `pods/status`, `deployments/scale` (the latter with group `autoscaling`, kind
//!   `Scale`).
//! * **Aggregated** (`apidiscovery.k8s.io`): the same information in one document per root,
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
        if d.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", d.plural), "singularName": "", "namespaced": d.namespaced,
                "kind": d.kind, "verbs": ["get", "patch", "update"],
            }));
        }
        if d.group.is_empty() && d.plural == "pods" {
            for (sub, kind) in POD_STREAMS.iter().take(2) {
                resources.push(json!({
                    "name": format!("pods/{sub}"), "singularName": "", "namespaced": true,
                    "kind": kind, "verbs": ["create", "get"],
                }));
            }
            resources.push(json!({
                "name": "pods/ephemeralcontainers", "singularName": "", "namespaced": true,
                "kind": "Pod", "verbs": ["get", "patch", "update"],
            }));
            resources.push(json!({
                "name": "pods/log", "singularName": "", "namespaced": true,
                "kind": "Pod", "verbs": ["get"],
            }));
            let (sub, kind) = POD_STREAMS[2];
            resources.push(json!({
                "name": format!("pods/{sub}"), "singularName": "", "namespaced": true,
                "kind": kind, "verbs": ["create", "get"],
            }));
        }
        if d.scale.is_some() {
            resources.push(json!({
                "name": format!("{}/scale", d.plural), "singularName": "", "namespaced": d.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"],
            }));
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

/// The streaming subresources of pods ([`crate::remotecommand`]) and the kinds of their
/// options, in the real server's (alphabetical) order; each takes `create` and `get`.
const POD_STREAMS: [(&str, &str); 3] = [
    ("attach", "PodAttachOptions"),
    ("exec", "PodExecOptions"),
    ("portforward", "PodPortForwardOptions"),
];

fn resource_discovery(d: &ResourceDef) -> Value {
    let kind = json!({"group": d.group, "version": d.version, "kind": d.kind});
    let mut subresources = vec![];
    if d.status_subresource {
        subresources.push(json!({"subresource": "status", "responseKind": kind, "verbs": ["get", "patch", "update"]}));
    }
    if d.group.is_empty() && d.plural == "pods" {
        let stream = |(sub, k): (&str, &str)| {
            json!({"subresource": sub, "responseKind": {"group": "", "version": "v1", "kind": k},
                   "verbs": ["create", "get"]})
        };
        subresources.push(stream(POD_STREAMS[0]));
        subresources.push(stream(POD_STREAMS[1]));
        subresources.push(
            json!({"subresource": "ephemeralcontainers", "responseKind": kind,
            "verbs": ["get", "patch", "update"]}),
        );
        subresources.push(json!({"subresource": "log", "responseKind": kind, "verbs": ["get"]}));
        subresources.push(stream(POD_STREAMS[2]));
    }
    if d.scale.is_some() {
        subresources.push(json!({"subresource": "scale",
            "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "verbs": ["get", "patch", "update"]}));
    }
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
            let resources: Vec<Value> = reg
                .in_group_version(group, v)
                .iter()
                .map(|d| resource_discovery(d))
                .collect();
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
