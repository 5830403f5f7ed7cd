//! Query parameters: decoding and the meta/v1 `ListOptions` / `DeleteOptions` rules.
//!
//! The real server decodes query strings with the meta/v1 parameter codec: booleans accept
//! `true`/`1` (`?watch=1` appears in the Kubernetes docs), numbers are decimal, unknown
//! parameters are ignored. [`ListOptions::parse`] also performs apimachinery's list-option
//! validation, whose failures are `422 Invalid` with kind `ListOptions` and group `meta.k8s.io`:
//! `resourceVersionMatch` needs a `resourceVersion`, cannot be combined with `continue`,
//! `Exact` cannot be combined with `"0"`, and `sendInitialEvents` is for watches only and needs
//! `resourceVersionMatch=NotOlderThan`.
//!
//! Writes validate their options the same way ([`Query::check_write_options`], the real
//! server's `ValidateCreateOptions` / `ValidateUpdateOptions` / `ValidatePatchOptions` /
//! `ValidateDeleteOptions`): `dryRun` may only be `All` and `fieldValidation` only `Ignore`,
//! `Warn` or `Strict` (empty means `Warn`); anything else is a `422 Invalid` of kind
//! `CreateOptions` (etc.) in `meta.k8s.io`, checked before anything is read or written. A write's
//! warnings (`unknown field "spec.foo"` under `fieldValidation=Warn`) are collected on the query
//! ([`Query::warn`]) and sent back by the HTTP layer as `Warning: 299 - "..."` headers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::api::status::ApiError;

/// Decoded query parameters (the last value wins for repeated keys), plus the request's
/// `User-Agent`, from which the server names the field manager of a write that does not give
/// `fieldManager`.
#[derive(Clone, Debug, Default)]
pub struct Query {
    params: HashMap<String, String>,
    /// Every `key=value` pair in order, for the parameters that repeat (`command=sh&command=-c`).
    pairs: Vec<(String, String)>,
    user_agent: String,
    warnings: Arc<Mutex<Vec<String>>>,
    requester: Option<Arc<crate::api::user::UserInfo>>,
}

/// `fieldValidation`: what a write does with unknown and duplicate fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValidation {
    /// Drop them silently.
    Ignore,
    /// Drop them and warn (`Warning` headers); the default.
    Warn,
    /// Reject the write: 400 `strict decoding error: ...`.
    Strict,
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Query {
    /// Parses a raw query string (`a=b&c=d`).
    pub fn parse(raw: Option<&str>) -> Self {
        let mut params = HashMap::new();
        let mut pairs = Vec::new();
        for pair in raw.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let (k, v) = (percent_decode(k), percent_decode(v));
            pairs.push((k.clone(), v.clone()));
            params.insert(k, v);
        }
        Query {
            params,
            pairs,
            user_agent: String::new(),
            warnings: Arc::default(),
            requester: None,
        }
    }

    /// The same parameters, remembering the request's `User-Agent`.
    pub fn with_user_agent(mut self, ua: &str) -> Self {
        self.user_agent = ua.to_owned();
        self
    }

    /// The field manager of a write: `fieldManager`, else the `User-Agent` up to its first `/`
    /// (`kubectl/v1.33.1 (linux/amd64) ...` → `kubectl`), as the real server's field manager
    /// names it; at most 128 characters.
    pub fn field_manager(&self) -> String {
        let m = match self.non_empty("fieldManager") {
            Some(m) => m,
            None => self.user_agent.split('/').next().unwrap_or_default(),
        };
        let m = if m.is_empty() { "unknown" } else { m };
        m.chars().take(128).collect()
    }

    /// The same parameters, remembering who writes (for RBAC's escalation checks).
    pub fn with_requester(mut self, requester: crate::api::user::UserInfo) -> Self {
        self.requester = Some(Arc::new(requester));
        self
    }

    /// Who writes, when RBAC is enforced.
    pub fn requester(&self) -> Option<Arc<crate::api::user::UserInfo>> {
        self.requester.clone()
    }

    /// A parameter's value.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.params.get(key).map(String::as_str)
    }

    /// Every value of a repeated parameter, in order (`command=sh&command=-c` → `["sh", "-c"]`).
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.pairs
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// A non-empty parameter's value.
    pub fn non_empty(&self, key: &str) -> Option<&str> {
        self.get(key).filter(|v| !v.is_empty())
    }

    /// A boolean parameter (`true`/`1` → true, `false`/`0`/absent → false).
    pub fn flag(&self, key: &str) -> Result<bool, ApiError> {
        match self.get(key) {
            None | Some("") | Some("false") | Some("0") | Some("False") => Ok(false),
            Some("true") | Some("1") | Some("True") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "invalid value {other:?} for boolean query parameter {key}"
            ))),
        }
    }

    /// An optional integer parameter.
    pub fn int(&self, key: &str) -> Result<Option<i64>, ApiError> {
        match self.non_empty(key) {
            None => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid value {v:?} for integer query parameter {key}"
                ))
            }),
        }
    }

    /// `dryRun=All` was requested (other values are refused by [`Query::check_write_options`]).
    pub fn dry_run(&self) -> bool {
        self.get("dryRun") == Some("All")
    }

    /// `fieldValidation` (absent or empty: `Warn`, the server's default since 1.27).
    pub fn field_validation(&self) -> FieldValidation {
        match self.get("fieldValidation") {
            Some("Strict") => FieldValidation::Strict,
            Some("Ignore") => FieldValidation::Ignore,
            _ => FieldValidation::Warn,
        }
    }

    /// The option checks of a write (`options_kind`: `CreateOptions`, `UpdateOptions`,
    /// `PatchOptions`, `DeleteOptions`): 422 for a `dryRun` other than `All` or an unknown
    /// `fieldValidation`, with the real server's causes.
    pub fn check_write_options(&self, options_kind: &str) -> Result<(), ApiError> {
        use apimachinery::validation::FieldError;
        let mut errs = vec![];
        if let Some(d) = self.get("dryRun")
            && d != "All"
        {
            errs.push(FieldError {
                reason: "FieldValueNotSupported",
                field: "dryRun".into(),
                message: format!(
                    "Unsupported value: {}: supported values: \"All\"",
                    serde_json::json!([d])
                ),
            });
        }
        if options_kind != "DeleteOptions"
            && let Some(f) = self.get("fieldValidation")
            && !matches!(f, "" | "Ignore" | "Warn" | "Strict")
        {
            errs.push(FieldError::not_supported(
                "fieldValidation",
                f,
                &["", "Ignore", "Strict", "Warn"],
            ));
        }
        if errs.is_empty() {
            return Ok(());
        }
        Err(ApiError::invalid(
            options_kind,
            "meta.k8s.io",
            "",
            crate::api::status::to_causes(errs),
        ))
    }

    /// Records a warning for the response (`Warning: 299 - "<text>"`).
    pub fn warn(&self, text: impl Into<String>) {
        if let Ok(mut w) = self.warnings.lock() {
            w.push(text.into());
        }
    }

    /// The warnings recorded so far, in order.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.lock().map(|w| w.clone()).unwrap_or_default()
    }

    /// The same request as `dryRun=All`, sharing its warnings (a write computed as a dry run
    /// before it is stored, whose warnings are the request's).
    pub fn as_dry_run(&self) -> Query {
        let mut q = self.clone();
        q.params.insert("dryRun".into(), "All".into());
        q
    }

    /// The same request as `dryRun=All`, with warnings of its own (admission runs a write
    /// once as a dry run to learn the object validating webhooks are shown).
    pub fn for_dry_run(&self) -> Query {
        let mut q = self.clone();
        q.params.insert("dryRun".into(), "All".into());
        q.warnings = Arc::default();
        q
    }
}

/// `resourceVersionMatch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RvMatch {
    /// Serve exactly the given revision.
    Exact,
    /// Serve any revision at least as new as the given one.
    NotOlderThan,
}

/// The meta/v1 `ListOptions` of a list or watch request.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// `labelSelector`.
    pub label_selector: String,
    /// `fieldSelector`.
    pub field_selector: String,
    /// `watch`.
    pub watch: bool,
    /// `allowWatchBookmarks`.
    pub allow_bookmarks: bool,
    /// `resourceVersion` (empty when unset).
    pub resource_version: String,
    /// `resourceVersionMatch`.
    pub rv_match: Option<RvMatch>,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<i64>,
    /// `limit` (0 = no limit).
    pub limit: u64,
    /// `continue`.
    pub continue_token: String,
    /// `sendInitialEvents`.
    pub send_initial_events: Option<bool>,
}

impl ListOptions {
    /// Decodes and validates list options (422 Invalid `ListOptions` on contradictions).
    pub fn parse(q: &Query, watch_forced: bool) -> Result<Self, ApiError> {
        let rv_match = match q.non_empty("resourceVersionMatch") {
            None => None,
            Some("Exact") => Some(RvMatch::Exact),
            Some("NotOlderThan") => Some(RvMatch::NotOlderThan),
            Some(other) => {
                return Err(ApiError::invalid_list_options(
                    "resourceVersionMatch",
                    &format!(
                        "Unsupported value: \"{other}\": supported values: \"Exact\", \"NotOlderThan\""
                    ),
                ));
            }
        };
        let send_initial_events = match q.get("sendInitialEvents") {
            None | Some("") => None,
            Some(_) => Some(q.flag("sendInitialEvents")?),
        };
        let limit = q.int("limit")?.unwrap_or(0).max(0) as u64;
        let opts = ListOptions {
            label_selector: q.get("labelSelector").unwrap_or_default().to_owned(),
            field_selector: q.get("fieldSelector").unwrap_or_default().to_owned(),
            watch: watch_forced || q.flag("watch")?,
            allow_bookmarks: q.flag("allowWatchBookmarks")?,
            resource_version: q.get("resourceVersion").unwrap_or_default().to_owned(),
            rv_match,
            timeout_seconds: q.int("timeoutSeconds")?,
            limit,
            continue_token: q.get("continue").unwrap_or_default().to_owned(),
            send_initial_events,
        };
        opts.validate()?;
        Ok(opts)
    }

    fn validate(&self) -> Result<(), ApiError> {
        let field = "resourceVersionMatch";
        if let Some(m) = self.rv_match {
            if self.resource_version.is_empty()
                && !(self.watch && self.send_initial_events.is_some())
            {
                return Err(ApiError::invalid_list_options(
                    field,
                    "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            if !self.continue_token.is_empty() {
                return Err(ApiError::invalid_list_options(
                    field,
                    "Forbidden: resourceVersionMatch is forbidden when continue is provided",
                ));
            }
            if m == RvMatch::Exact && self.resource_version == "0" {
                return Err(ApiError::invalid_list_options(
                    field,
                    "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
        }
        match (self.watch, self.send_initial_events) {
            (false, Some(_)) => {
                return Err(ApiError::invalid_list_options(
                    "sendInitialEvents",
                    "Forbidden: sendInitialEvents is forbidden for list",
                ));
            }
            (true, Some(_)) if self.rv_match != Some(RvMatch::NotOlderThan) => {
                return Err(ApiError::invalid_list_options(
                    field,
                    "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            (true, None) if self.rv_match.is_some() => {
                return Err(ApiError::invalid_list_options(
                    field,
                    "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                ));
            }
            _ => {}
        }
        if !self.continue_token.is_empty()
            && !self.resource_version.is_empty()
            && self.resource_version != "0"
        {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_percent_escapes_and_booleans() {
        let q = Query::parse(Some("labelSelector=app%3Dweb%2Ctier+in+(a)&watch=1"));
        assert_eq!(q.get("labelSelector"), Some("app=web,tier in (a)"));
        assert!(q.flag("watch").unwrap());
        assert!(q.flag("nope").is_ok_and(|b| !b));
        assert!(Query::parse(Some("watch=maybe")).flag("watch").is_err());
    }

    #[test]
    fn list_option_contradictions_are_invalid() {
        let bad = |s: &str| {
            ListOptions::parse(&Query::parse(Some(s)), false)
                .unwrap_err()
                .code
        };
        assert_eq!(bad("resourceVersionMatch=Exact"), 422);
        assert_eq!(bad("resourceVersion=0&resourceVersionMatch=Exact"), 422);
        assert_eq!(bad("sendInitialEvents=true"), 422);
        assert_eq!(bad("watch=true&sendInitialEvents=true"), 422);
        assert!(
            ListOptions::parse(
                &Query::parse(Some(
                    "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
                )),
                false
            )
            .is_ok()
        );
    }
}
