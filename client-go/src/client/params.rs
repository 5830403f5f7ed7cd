//! Request parameters for the verbs of [`super::api::Api`], named as in `metav1.ListOptions`,
//! `CreateOptions`, `PatchOptions` and `DeleteOptions`. Each `to_query` renders exactly the
//! query string the API server expects (empty fields are left out).

use serde::{Deserialize, Serialize};

/// `resourceVersionMatch` for lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionMatch {
    /// At least as new as the given RV (any RV ≥; "0" = whatever the cache has).
    NotOlderThan,
    /// Exactly the given RV (served from history or 410).
    Exact,
}

impl VersionMatch {
    /// The query value.
    pub fn as_str(self) -> &'static str {
        match self {
            VersionMatch::NotOlderThan => "NotOlderThan",
            VersionMatch::Exact => "Exact",
        }
    }
}

/// Options for `list`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListParams {
    /// `labelSelector`, e.g. `app=nginx,tier in (web)`.
    pub label_selector: Option<String>,
    /// `fieldSelector`, e.g. `metadata.name=x`.
    pub field_selector: Option<String>,
    /// Page size (`limit`); 0 = no paging.
    pub limit: Option<u32>,
    /// `continue` token from the previous page.
    pub continue_token: Option<String>,
    /// `resourceVersion`: None/"" = latest from storage, "0" = any, N = not older than N.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<VersionMatch>,
}

/// Options for `watch`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchParams {
    /// `labelSelector`.
    pub label_selector: Option<String>,
    /// `fieldSelector`.
    pub field_selector: Option<String>,
    /// Start after this resourceVersion; None/"" or "0" = synthetic ADDED for current state first.
    pub resource_version: Option<String>,
    /// `allowWatchBookmarks`.
    pub allow_watch_bookmarks: bool,
    /// `timeoutSeconds`: the server ends the watch cleanly after this long.
    pub timeout_seconds: Option<u32>,
    /// `sendInitialEvents` (streaming list; requires `resourceVersionMatch=NotOlderThan`).
    pub send_initial_events: bool,
}

/// Options for create/update/patch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PostParams {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `fieldManager`.
    pub field_manager: Option<String>,
}

impl PostParams {
    /// Writes recorded under `manager` in `metadata.managedFields` (each controller names its
    /// writes after itself).
    pub fn with_field_manager(manager: &str) -> Self {
        PostParams {
            field_manager: Some(manager.to_owned()),
            ..PostParams::default()
        }
    }
}

/// The kinds of PATCH, by content type.
#[derive(Clone, Debug, PartialEq)]
pub enum Patch {
    /// `application/merge-patch+json` (RFC 7386).
    Merge(serde_json::Value),
    /// `application/json-patch+json` (RFC 6902), a list of operations.
    Json(serde_json::Value),
    /// `application/strategic-merge-patch+json` (built-in kinds only).
    Strategic(serde_json::Value),
    /// `application/apply-patch+yaml` (server-side apply; JSON is valid YAML).
    Apply(serde_json::Value),
}

impl Patch {
    /// The Content-Type header for this patch.
    pub fn content_type(&self) -> &'static str {
        match self {
            Patch::Merge(_) => "application/merge-patch+json",
            Patch::Json(_) => "application/json-patch+json",
            Patch::Strategic(_) => "application/strategic-merge-patch+json",
            Patch::Apply(_) => "application/apply-patch+yaml",
        }
    }
    /// The body.
    pub fn body(&self) -> &serde_json::Value {
        match self {
            Patch::Merge(v) | Patch::Json(v) | Patch::Strategic(v) | Patch::Apply(v) => v,
        }
    }
}

/// Options for patch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PatchParams {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `fieldManager` (required by server-side apply).
    pub field_manager: Option<String>,
    /// `force` (server-side apply: take ownership of conflicting fields).
    pub force: bool,
}

/// `propagationPolicy` of a delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PropagationPolicy {
    /// Dependents are deleted in the background after the owner.
    Background,
    /// Dependents go first; the owner waits with the `foregroundDeletion` finalizer.
    Foreground,
    /// Dependents keep running; their ownerReferences are removed.
    Orphan,
}

/// `preconditions` of a delete.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preconditions {
    /// Delete only if the uid matches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Delete only if the resourceVersion matches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

/// `DeleteOptions`, sent as the body of a DELETE.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeleteParams {
    /// How dependents are treated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub propagation_policy: Option<PropagationPolicy>,
    /// Preconditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preconditions: Option<Preconditions>,
    /// Grace period (0 = immediately).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i64>,
    /// `dryRun: ["All"]`.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub dry_run: Vec<String>,
}

/// Appends `key=value` (URL-encoded) to a query string being built.
pub fn push_query(query: &mut String, key: &str, value: &str) {
    query.push(if query.is_empty() { '?' } else { '&' });
    query.push_str(key);
    query.push('=');
    query.push_str(&url_encode(value));
}

/// Percent-encodes a query value (RFC 3986 unreserved characters pass through).
pub fn url_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

impl ListParams {
    /// The query string, starting with `?` (or empty).
    pub fn to_query(&self) -> String {
        let mut q = String::new();
        if let Some(s) = self.label_selector.as_deref().filter(|s| !s.is_empty()) {
            push_query(&mut q, "labelSelector", s);
        }
        if let Some(s) = self.field_selector.as_deref().filter(|s| !s.is_empty()) {
            push_query(&mut q, "fieldSelector", s);
        }
        if let Some(l) = self.limit.filter(|l| *l > 0) {
            push_query(&mut q, "limit", &l.to_string());
        }
        if let Some(c) = self.continue_token.as_deref().filter(|s| !s.is_empty()) {
            push_query(&mut q, "continue", c);
        }
        if let Some(rv) = self.resource_version.as_deref() {
            push_query(&mut q, "resourceVersion", rv);
        }
        if let Some(m) = self.resource_version_match {
            push_query(&mut q, "resourceVersionMatch", m.as_str());
        }
        q
    }
}

impl WatchParams {
    /// The query string, starting with `?watch=true`.
    pub fn to_query(&self) -> String {
        let mut q = String::new();
        push_query(&mut q, "watch", "true");
        if let Some(s) = self.label_selector.as_deref().filter(|s| !s.is_empty()) {
            push_query(&mut q, "labelSelector", s);
        }
        if let Some(s) = self.field_selector.as_deref().filter(|s| !s.is_empty()) {
            push_query(&mut q, "fieldSelector", s);
        }
        if let Some(rv) = self.resource_version.as_deref() {
            push_query(&mut q, "resourceVersion", rv);
        }
        if self.allow_watch_bookmarks {
            push_query(&mut q, "allowWatchBookmarks", "true");
        }
        if let Some(t) = self.timeout_seconds {
            push_query(&mut q, "timeoutSeconds", &t.to_string());
        }
        if self.send_initial_events {
            push_query(&mut q, "sendInitialEvents", "true");
            push_query(&mut q, "resourceVersionMatch", "NotOlderThan");
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_query_is_encoded_and_skips_empty() {
        let p = ListParams {
            label_selector: Some("app in (a,b)".into()),
            field_selector: Some(String::new()),
            limit: Some(500),
            resource_version: Some("0".into()),
            ..Default::default()
        };
        assert_eq!(
            p.to_query(),
            "?labelSelector=app%20in%20%28a%2Cb%29&limit=500&resourceVersion=0"
        );
        assert_eq!(ListParams::default().to_query(), "");
    }

    #[test]
    fn watch_query_carries_streaming_list_pair() {
        let p = WatchParams {
            resource_version: Some("12".into()),
            allow_watch_bookmarks: true,
            timeout_seconds: Some(300),
            send_initial_events: true,
            ..Default::default()
        };
        assert_eq!(
            p.to_query(),
            "?watch=true&resourceVersion=12&allowWatchBookmarks=true&timeoutSeconds=300&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
        );
    }

    #[test]
    fn delete_options_serialise_like_metav1() {
        let d = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions {
                uid: Some("u".into()),
                resource_version: None,
            }),
            grace_period_seconds: Some(0),
            dry_run: vec![],
        };
        assert_eq!(
            serde_json::to_string(&d).unwrap(),
            r#"{"propagationPolicy":"Foreground","preconditions":{"uid":"u"},"gracePeriodSeconds":0}"#
        );
    }
}
