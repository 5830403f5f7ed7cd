//! A container's environment and command line as the kubelet makes them: `valueFrom.fieldRef`
//! resolved, `$(VAR)` references expanded, the API server's address in
//! `KUBERNETES_SERVICE_HOST`/`_PORT`, and an image's entrypoint where the node knows one.
//!
//! ## What the kubelet does
//!
//! Before it starts a container, the kubelet builds its environment
//! (`makeEnvironmentVariables` in `pkg/kubelet/kubelet_pods.go`): first the variables of the
//! `kubernetes` Service in `default` (`KUBERNETES_SERVICE_HOST`, `KUBERNETES_SERVICE_PORT`,
//! ...; every pod gets them, whatever its `enableServiceLinks`), then the container's `env`
//! in order. An entry with a `value` has its `$(NAME)` references expanded against the
//! variables defined before it (`third_party/forked/golang/expansion`: `$$` is a literal `$`,
//! a reference to an undefined name stays as written); an entry with `valueFrom.fieldRef`
//! takes a field of the pod (the downward API: `metadata.name`, `metadata.namespace`,
//! `metadata.uid`, `metadata.labels['k']`, `metadata.annotations['k']`, `spec.nodeName`,
//! `spec.serviceAccountName`, `status.hostIP(s)`, `status.podIP(s)`). A later entry of the
//! same name wins. Then `command` and `args` are expanded against the whole environment, so
//! `args: ["--namespace=$(POD_NAMESPACE)"]` reaches the process with the pod's namespace.
//!
//! The container's argv is its `command` (replacing the image's entrypoint) followed by its
//! `args` (replacing the image's `CMD`); without `command` the image's entrypoint runs with
//! `args`.
//!
//! ## What the process node does
//!
//! The same, through [`resolve`]: it returns the container's spec with every `env` entry a
//! plain `value` (so the process runtime and `kubectl exec` see the same environment) and
//! `command`/`args` expanded. The departures:
//!
//! * `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` name the embedded API server's
//!   own address (`127.0.0.1` and its port), since no Service IP routes anywhere on the host;
//!   the other `KUBERNETES_PORT_*` link variables are not set;
//! * a node has no images, so an image's entrypoint is known only when the node was told
//!   which host binary stands for the image (`--image-binary IMAGE=PATH`,
//!   [`ImageBinaries`]): a container of that image without `command` runs PATH followed by
//!   its `args`. A container with a `command` runs the command as given, on the host;
//! * `valueFrom` other than `fieldRef` (`configMapKeyRef`, `secretKeyRef`,
//!   `resourceFieldRef`) and `envFrom` are not resolved: those variables are left out.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};

/// Which host binary runs a container of which image (exact `image` strings, as written in
/// the pod: `sample-controller:dev`), standing in for the image's entrypoint.
pub type ImageBinaries = Arc<BTreeMap<String, PathBuf>>;

/// `input` with `$(NAME)` references replaced by `lookup(NAME)` and `$$` by `$`, as
/// Kubernetes' `expansion.Expand` does: a reference to a name `lookup` does not know, an
/// unclosed `$(`, and a `$` before anything else stay as written.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(close) => {
                    let name = &inner[..close];
                    match lookup(name) {
                        Some(v) => out.push_str(&v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[close + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = inner;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The value of a downward-API `fieldPath` of `pod`, `None` for a path the kubelet does not
/// support. A missing label or annotation is the empty string, as in Kubernetes.
pub fn field_ref(pod: &Value, path: &str) -> Option<String> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let ips = |list: &Value| {
        list.as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["ip"].as_str())
            .collect::<Vec<_>>()
            .join(",")
    };
    let meta = &pod["metadata"];
    let keyed = |prefix: &str, field: &str| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(text(&meta[field][key]))
    };
    match path {
        "metadata.name" | "metadata.namespace" | "metadata.uid" => {
            Some(text(&meta[&path["metadata.".len()..]]))
        }
        "spec.nodeName" => Some(text(&pod["spec"]["nodeName"])),
        "spec.serviceAccountName" => Some(text(&pod["spec"]["serviceAccountName"])),
        "status.hostIP" => Some(text(&pod["status"]["hostIP"])),
        "status.podIP" => Some(text(&pod["status"]["podIP"])),
        "status.hostIPs" => Some(ips(&pod["status"]["hostIPs"])),
        "status.podIPs" => Some(ips(&pod["status"]["podIPs"])),
        "metadata.labels" | "metadata.annotations" => {
            let field = &path["metadata.".len()..];
            let mut pairs: Vec<String> = meta[field]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k}=\"{}\"", text(v)))
                .collect();
            pairs.sort();
            Some(pairs.join("\n"))
        }
        _ => keyed("metadata.labels['", "labels")
            .or_else(|| keyed("metadata.annotations['", "annotations")),
    }
}

/// Container `c` of `pod` as the node runs it: `env` the variables of `base` (the node's own,
/// such as `KUBERNETES_SERVICE_HOST`) followed by the container's, each a plain `value`
/// (references expanded, `fieldRef`s resolved, unresolvable `valueFrom`s left out, the last
/// entry of a name winning), `command` and `args` expanded against that environment, and
/// `command` set to the image's binary when the container has none and `images` knows its
/// image. Everything else is kept.
pub fn resolve(pod: &Value, c: &Value, base: &[(String, String)], images: &ImageBinaries) -> Value {
    let mut env: Vec<(String, String)> = base.to_vec();
    let lookup = |env: &[(String, String)], name: &str| {
        env.iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    for e in c["env"].as_array().into_iter().flatten() {
        let Some(name) = e["name"].as_str() else {
            continue;
        };
        let value = if let Some(v) = e["value"].as_str() {
            Some(expand(v, |n| lookup(&env, n)))
        } else if let Some(path) = e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            field_ref(pod, path)
        } else if e.get("valueFrom").is_none_or(Value::is_null) {
            Some(String::new())
        } else {
            None
        };
        if let Some(value) = value {
            env.retain(|(n, _)| n != name);
            env.push((name.to_owned(), value));
        }
    }
    let expand_list = |field: &str| -> Option<Value> {
        let list = c[field].as_array()?;
        Some(Value::Array(
            list.iter()
                .map(|w| match w.as_str() {
                    Some(s) => json!(expand(s, |n| lookup(&env, n))),
                    None => w.clone(),
                })
                .collect(),
        ))
    };
    let mut out = c.clone();
    if let Some(obj) = out.as_object_mut() {
        let command =
            expand_list("command").filter(|v| v.as_array().is_some_and(|a| !a.is_empty()));
        match command {
            Some(cmd) => {
                obj.insert("command".into(), cmd);
            }
            None => {
                if let Some(bin) = c["image"].as_str().and_then(|i| images.get(i)) {
                    obj.insert("command".into(), json!([bin.to_string_lossy()]));
                }
            }
        }
        if let Some(args) = expand_list("args") {
            obj.insert("args".into(), args);
        }
        obj.insert(
            "env".into(),
            Value::Array(
                env.iter()
                    .map(|(n, v)| json!({"name": n, "value": v}))
                    .collect(),
            ),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(name: &str) -> Option<String> {
        match name {
            "NS" => Some("apps".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn references_expand_as_kubernetes_expands_them() {
        assert_eq!(expand("--ns=$(NS)", vars), "--ns=apps");
        assert_eq!(expand("$(NS)/$(NS)", vars), "apps/apps");
        assert_eq!(expand("$(UNKNOWN)", vars), "$(UNKNOWN)");
        assert_eq!(expand("$$(NS)", vars), "$(NS)");
        assert_eq!(expand("a$$b", vars), "a$b");
        assert_eq!(expand("$NS", vars), "$NS");
        assert_eq!(expand("$(NS", vars), "$(NS");
        assert_eq!(expand("x$(EMPTY)y", vars), "xy");
        assert_eq!(expand("trailing$", vars), "trailing$");
        assert_eq!(expand("é$(NS)é", vars), "éappsé");
    }

    fn pod() -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1",
                         "labels": {"app": "x", "tier": "web"}, "annotations": {"a": "1"}},
            "spec": {"nodeName": "embedded-node", "serviceAccountName": "bot"},
            "status": {"podIP": "10.244.0.2", "podIPs": [{"ip": "10.244.0.2"}],
                       "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}]},
        })
    }

    #[test]
    fn field_refs_read_the_pod() {
        let p = pod();
        assert_eq!(field_ref(&p, "metadata.namespace").as_deref(), Some("ns"));
        assert_eq!(field_ref(&p, "metadata.uid").as_deref(), Some("u-1"));
        assert_eq!(
            field_ref(&p, "spec.serviceAccountName").as_deref(),
            Some("bot")
        );
        assert_eq!(
            field_ref(&p, "status.podIPs").as_deref(),
            Some("10.244.0.2")
        );
        assert_eq!(
            field_ref(&p, "metadata.labels['tier']").as_deref(),
            Some("web")
        );
        assert_eq!(
            field_ref(&p, "metadata.labels['none']").as_deref(),
            Some("")
        );
        assert_eq!(
            field_ref(&p, "metadata.labels").as_deref(),
            Some("app=\"x\"\ntier=\"web\"")
        );
        assert_eq!(field_ref(&p, "spec.nope"), None);
    }

    #[test]
    fn a_container_gets_its_environment_expanded_and_its_images_binary() {
        let c = json!({
            "name": "c", "image": "sample-controller:dev",
            "args": ["run", "--ns=$(POD_NAMESPACE)", "--host=$(KUBERNETES_SERVICE_HOST)"],
            "env": [
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "GREETING", "value": "hi-$(POD_NAMESPACE)-$(LATER)"},
                {"name": "LATER", "value": "l"},
                {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                {"name": "LATER", "value": "again"},
            ],
        });
        let images: ImageBinaries = Arc::new(BTreeMap::from([(
            "sample-controller:dev".to_owned(),
            PathBuf::from("/bin/sample-controller"),
        )]));
        let base = [("KUBERNETES_SERVICE_HOST".to_owned(), "127.0.0.1".to_owned())];
        let r = resolve(&pod(), &c, &base, &images);
        assert_eq!(r["command"], json!(["/bin/sample-controller"]));
        assert_eq!(r["args"], json!(["run", "--ns=ns", "--host=127.0.0.1"]));
        assert_eq!(
            r["env"],
            json!([
                {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
                {"name": "POD_NAMESPACE", "value": "ns"},
                {"name": "GREETING", "value": "hi-ns-$(LATER)"},
                {"name": "LATER", "value": "again"},
            ])
        );
        // A command of its own replaces the image's entrypoint; an unknown image has none.
        let own = resolve(
            &pod(),
            &json!({"image": "sample-controller:dev", "command": ["sh"]}),
            &[],
            &images,
        );
        assert_eq!(own["command"], json!(["sh"]));
        let other = resolve(
            &pod(),
            &json!({"image": "busybox", "args": ["x"]}),
            &[],
            &images,
        );
        assert!(other.get("command").is_none(), "{other}");
    }
}
