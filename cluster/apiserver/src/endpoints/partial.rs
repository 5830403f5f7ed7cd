//! Content negotiation of `as=PartialObjectMetadata` and `as=PartialObjectMetadataList`.
//!
//! A client that only needs metadata (client-go's metadata client, controller-runtime's
//! metadata-only caches, `kubectl get -o name` in some versions, the Python client's
//! `_preload_content` helpers) asks for `Accept: application/json;as=PartialObjectMetadata;
//! g=meta.k8s.io;v=v1` on a GET, a write or a watch, and `...;as=PartialObjectMetadataList;...`
//! on a list. kube-apiserver (`endpoints/handlers/response.go`, `transformObject`) then answers
//! `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{...}}` (and a
//! `PartialObjectMetadataList` whose items carry that kind too, with the list's
//! `resourceVersion`, `continue` and `remainingItemCount`), in `meta.k8s.io/v1` or `v1beta1`. A
//! Status (a DELETE answered with one, say) passes through untransformed. Asking for the
//! object form on a list, or the list form on an object, is `406 NotAcceptable` (`you requested
//! PartialObjectMetadata, but the requested object is a list (*core.PodList)`).
//!
//! The `Accept` header's clauses are read in order; the first one this server can answer
//! decides: a protobuf clause is skipped (responses are JSON here), a JSON (or `*/*`) clause
//! without `as` means the full object, one with `as=PartialObjectMetadata[List]`, `g=meta.k8s.io`
//! and `v=v1` or `v1beta1` means metadata only. (`as=Table` keeps its own handling in
//! [`crate::endpoints::handlers`].)

use serde_json::{Value, json};

use crate::api::status::ApiError;
use crate::registry::resources::ResourceDef;

/// What the client asked the answer to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wanted {
    /// `as=PartialObjectMetadata` in `meta.k8s.io/<version>`.
    Object(String),
    /// `as=PartialObjectMetadataList` in `meta.k8s.io/<version>`.
    List(String),
}

impl Wanted {
    fn api_version(&self) -> String {
        match self {
            Wanted::Object(v) | Wanted::List(v) => format!("meta.k8s.io/{v}"),
        }
    }
}

/// The partial-metadata form the `Accept` header asks for, if any (see the module docs).
pub fn negotiate(accept: &str) -> Option<Wanted> {
    for clause in accept.split(',') {
        let mut parts = clause.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        if !matches!(
            media.as_str(),
            "application/json" | "application/*" | "*/*" | ""
        ) {
            continue;
        }
        let (mut as_kind, mut group, mut version) = (None, None, None);
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                match k.trim() {
                    "as" => as_kind = Some(v.trim()),
                    "g" => group = Some(v.trim()),
                    "v" => version = Some(v.trim()),
                    _ => {}
                }
            }
        }
        let Some(as_kind) = as_kind else {
            return None; // the full object
        };
        let known_version = matches!(version, Some("v1" | "v1beta1"));
        if group != Some("meta.k8s.io") || !known_version {
            continue;
        }
        let version = version.unwrap_or("v1").to_owned();
        match as_kind {
            "PartialObjectMetadata" => return Some(Wanted::Object(version)),
            "PartialObjectMetadataList" => return Some(Wanted::List(version)),
            // `Table`, handled by the caller, or something this server does not produce.
            _ => return None,
        }
    }
    None
}

/// Go's `%T` of the internal object the real handler holds (`*core.Pod`, `*apps.DeploymentList`,
/// `*unstructured.Unstructured` for custom resources).
fn go_type(def: &ResourceDef, list: bool) -> String {
    let suffix = if list { "List" } else { "" };
    if def.custom.is_some() {
        return format!("*unstructured.Unstructured{suffix}");
    }
    let pkg = if def.group.is_empty() {
        "core"
    } else {
        def.group.split('.').next().unwrap_or("core")
    };
    format!("*{pkg}.{}{suffix}", def.kind)
}

fn not_acceptable(message: String) -> ApiError {
    ApiError::new(406, "NotAcceptable", message)
}

/// One object's metadata as a `meta.k8s.io/v1` `PartialObjectMetadata`.
pub fn metadata_of(obj: &Value) -> Value {
    partial("meta.k8s.io/v1", obj)
}

/// One object's metadata as `PartialObjectMetadata`.
fn partial(api_version: &str, obj: &Value) -> Value {
    let metadata = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
    json!({"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": metadata})
}

/// The answer for one object (a GET, a write, a DELETE that returns the object): the object
/// unchanged when nothing partial was asked or it is a Status.
pub fn object(def: &ResourceDef, wanted: Option<&Wanted>, obj: Value) -> Result<Value, ApiError> {
    match wanted {
        None => Ok(obj),
        Some(_) if obj["kind"] == "Status" => Ok(obj),
        Some(w @ Wanted::Object(_)) => Ok(partial(&w.api_version(), &obj)),
        Some(Wanted::List(_)) => Err(not_acceptable(format!(
            "you requested PartialObjectMetadataList, but the requested object is not a list ({})",
            go_type(def, false)
        ))),
    }
}

/// The answer for a list (`<Kind>List` JSON with `items`).
pub fn list(def: &ResourceDef, wanted: &Wanted, list: &Value) -> Result<Value, ApiError> {
    let Wanted::List(_) = wanted else {
        return Err(not_acceptable(format!(
            "you requested PartialObjectMetadata, but the requested object is a list ({})",
            go_type(def, true)
        )));
    };
    let api_version = wanted.api_version();
    let items: Vec<Value> = list["items"]
        .as_array()
        .map(|items| items.iter().map(|i| partial(&api_version, i)).collect())
        .unwrap_or_default();
    Ok(json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": api_version,
        "metadata": list.get("metadata").cloned().unwrap_or_else(|| json!({})),
        "items": items,
    }))
}

/// A watch's event objects as `PartialObjectMetadata` (`as=PartialObjectMetadata`; the list
/// form on a watch is refused like on an object).
pub fn watch_renderer(
    def: &ResourceDef,
    wanted: &Wanted,
) -> Result<crate::endpoints::watch::Renderer, ApiError> {
    match wanted {
        Wanted::Object(_) => {
            let api_version = wanted.api_version();
            Ok(std::sync::Arc::new(move |obj: &Value, _first: bool| {
                partial(&api_version, obj)
            }))
        }
        Wanted::List(_) => Err(not_acceptable(format!(
            "you requested PartialObjectMetadataList, but the requested object is not a list ({})",
            go_type(def, false)
        ))),
    }
}

/// `kind` and `apiVersion` of a watch bookmark under `wanted`.
pub fn bookmark_type(wanted: &Wanted) -> (String, String) {
    ("PartialObjectMetadata".into(), wanted.api_version())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_answerable_clause_decides() {
        let client_go = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(negotiate(client_go), Some(Wanted::List("v1".into())));
        let python = "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io";
        assert_eq!(negotiate(python), Some(Wanted::Object("v1".into())));
        assert_eq!(
            negotiate("application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1"),
            Some(Wanted::Object("v1beta1".into()))
        );
        assert_eq!(
            negotiate(
                "application/json, application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
            ),
            None
        );
        assert_eq!(
            negotiate("application/json;as=PartialObjectMetadata;g=other;v=v1"),
            None
        );
        assert_eq!(negotiate(""), None);
    }

    #[test]
    fn lists_keep_their_list_metadata_and_items_carry_the_kind() {
        let reg = crate::registry::resources::Registry::builtins();
        let pods = reg.lookup("", "v1", "pods").unwrap();
        let l = json!({"kind": "PodList", "apiVersion": "v1",
            "metadata": {"resourceVersion": "9", "continue": "c"},
            "items": [{"kind": "Pod", "metadata": {"name": "a"}, "spec": {}}]});
        let want = Wanted::List("v1".into());
        assert_eq!(
            list(&pods, &want, &l).unwrap(),
            json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                   "metadata": {"resourceVersion": "9", "continue": "c"},
                   "items": [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                              "metadata": {"name": "a"}}]})
        );
        let e = list(&pods, &Wanted::Object("v1".into()), &l).unwrap_err();
        assert_eq!(e.code, 406);
        assert_eq!(
            e.message,
            "you requested PartialObjectMetadata, but the requested object is a list (*core.PodList)"
        );
        let status = json!({"kind": "Status", "status": "Success"});
        assert_eq!(
            object(&pods, Some(&Wanted::Object("v1".into())), status.clone()).unwrap(),
            status
        );
    }
}
