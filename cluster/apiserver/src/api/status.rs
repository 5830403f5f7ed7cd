//! `metav1.Status`: the one error shape every Kubernetes client understands.
//!
//! Every failed request to a real kube-apiserver is answered with a JSON `Status` whose `code`
//! equals the HTTP status code:
//!
//! ```json
//! {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
//!  "message":"configmaps \"x\" not found","reason":"NotFound",
//!  "details":{"name":"x","kind":"configmaps"},"code":404}
//! ```
//!
//! Clients branch on `reason` (client-go `apierrors.IsNotFound`, kube-rs `ErrorResponse.reason`),
//! so the constructors below reproduce apimachinery's `pkg/api/errors` templates word for word:
//! `details.kind` carries the *resource plural* for NotFound / AlreadyExists / Conflict /
//! Forbidden and the *Kind* for Invalid, and a `retryAfterSeconds` detail also produces a
//! `Retry-After` header. The one exception to "every error is a Status" is an unknown URL, which
//! the real server answers with a plain-text `404 page not found` (see
//! [`ApiError::page_not_found`]).

use serde_json::{Map, Value, json};

/// One `details.causes[]` entry (`metav1.StatusCause`; Go's `Type` field serialises as `reason`).
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueNotSupported`, ...
    pub reason: String,
    /// Human text, e.g. `Invalid value: "Bad": a lowercase RFC 1123 subdomain ...`.
    pub message: String,
    /// The field path, e.g. `metadata.name`.
    pub field: String,
}

impl Cause {
    /// A cause from its three parts.
    pub fn new(reason: &str, field: &str, message: impl Into<String>) -> Self {
        Cause {
            reason: reason.to_owned(),
            field: field.to_owned(),
            message: message.into(),
        }
    }

    fn to_json(&self) -> Value {
        json!({"reason": self.reason, "message": self.message, "field": self.field})
    }
}

/// A failed request, rendered as a `metav1.Status` (or, for unknown URLs, plain text).
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status code, equal to the Status `code`.
    pub code: u16,
    /// The machine-readable `reason` (empty for plain-text answers).
    pub reason: String,
    /// The human-readable `message`.
    pub message: String,
    /// `details`, when the error names an object.
    pub details: Option<Value>,
    /// `details.retryAfterSeconds`, mirrored into a `Retry-After` header.
    pub retry_after: Option<u32>,
    /// True for the plain-text `404 page not found` of an unknown URL.
    pub plain_text: bool,
    /// `metadata.continue` of the Status: the inconsistent-continue token a 410 for a
    /// compacted `continue` carries (see [`ApiError::inconsistent_continue`]).
    pub list_continue: Option<String>,
}

/// `resource` or `resource.group`, the way Kubernetes names a resource in messages.
pub fn qualified(resource: &str, group: &str) -> String {
    if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    }
}

fn details(name: &str, group: &str, kind: &str) -> Value {
    let mut d = Map::new();
    if !name.is_empty() {
        d.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        d.insert("group".into(), json!(group));
    }
    d.insert("kind".into(), json!(kind));
    Value::Object(d)
}

impl ApiError {
    /// A Status error with no details.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason: reason.to_owned(),
            message: message.into(),
            details: None,
            retry_after: None,
            plain_text: false,
            list_continue: None,
        }
    }

    /// The same error with another message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    /// The same error with `details.causes` holding one cause that has only a message (the
    /// words of the library that refused the request, where kube-apiserver's own message is
    /// generic).
    pub fn with_cause_message(self, message: impl Into<String>) -> Self {
        self.with_details(json!({"causes": [{"message": message.into()}]}))
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// `404 NotFound` with a message of its own (no object named).
    pub fn not_found_message(message: impl Into<String>) -> Self {
        ApiError::new(404, "NotFound", message)
    }

    /// Whether this is `409 Conflict` (the object moved on since it was read).
    pub fn is_conflict(&self) -> bool {
        self.code == 409 && self.reason == "Conflict"
    }

    /// Whether this is `404 NotFound`.
    pub fn is_not_found(&self) -> bool {
        self.code == 404
    }

    /// Whether this is `409 AlreadyExists`.
    pub fn is_already_exists(&self) -> bool {
        self.code == 409 && self.reason == "AlreadyExists"
    }

    /// The plain-text `404 page not found` for a URL that names no known group, version or
    /// resource (the real server's `notfoundhandler`, not a Status).
    pub fn page_not_found() -> Self {
        ApiError {
            plain_text: true,
            ..ApiError::new(404, "", "404 page not found")
        }
    }

    /// 404 NotFound: `deployments.apps "web" not found`.
    pub fn not_found(resource: &str, group: &str, name: &str) -> Self {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(resource, group)),
        )
        .with_details(details(name, group, resource))
    }

    /// 409 AlreadyExists: `configmaps "x" already exists`.
    pub fn already_exists(resource: &str, group: &str, name: &str) -> Self {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(resource, group)),
        )
        .with_details(details(name, group, resource))
    }

    /// 409 AlreadyExists for a `generateName` collision, with `retryAfterSeconds: 1`.
    pub fn generate_name_conflict(resource: &str, group: &str, name: &str) -> Self {
        let mut d = details(name, group, resource);
        d["retryAfterSeconds"] = json!(1);
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(
                409,
                "AlreadyExists",
                format!(
                    "{} \"{name}\" already exists, the server was not able to generate a unique name for the object",
                    qualified(resource, group)
                ),
            )
            .with_details(d)
        }
    }

    /// 409 Conflict with a custom explanation (`Operation cannot be fulfilled on ...: <why>`).
    pub fn conflict_because(resource: &str, group: &str, name: &str, why: &str) -> Self {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(resource, group)
            ),
        )
        .with_details(details(name, group, resource))
    }

    /// 409 Conflict for a stale `resourceVersion` (`OptimisticLockErrorMsg`).
    pub fn conflict(resource: &str, group: &str, name: &str) -> Self {
        Self::conflict_because(
            resource,
            group,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid: `ConfigMap "Bad" is invalid: metadata.name: Invalid value: ...`.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: Vec<Cause>) -> Self {
        // `field.ErrorList.ToAggregate()` drops repeated messages, so a thousand identical
        // errors read as one.
        let mut seen = std::collections::HashSet::new();
        let parts: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .filter(|p| seen.insert(p.clone()))
            .collect();
        let summary = if parts.len() == 1 {
            parts[0].clone()
        } else {
            format!("[{}]", parts.join(", "))
        };
        let mut d = details(name, group, kind);
        d["causes"] = Value::Array(causes.iter().map(Cause::to_json).collect());
        ApiError::new(
            422,
            "Invalid",
            format!(
                "{} \"{name}\" is invalid: {summary}",
                qualified(kind, group)
            ),
        )
        .with_details(d)
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(400, "BadRequest", message)
    }

    /// 403 Forbidden naming a resource.
    pub fn forbidden(resource: &str, group: &str, name: &str, why: &str) -> Self {
        let target = if name.is_empty() {
            qualified(resource, group)
        } else {
            format!("{} \"{name}\"", qualified(resource, group))
        };
        ApiError::new(403, "Forbidden", format!("{target} is forbidden: {why}"))
            .with_details(details(name, group, resource))
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(action: &str, resource: &str, group: &str) -> Self {
        ApiError::new(
            405,
            "MethodNotAllowed",
            format!("{action} is not supported on resources of kind \"{resource}\""),
        )
        .with_details(details("", group, resource))
    }

    /// 415 UnsupportedMediaType listing what would have been accepted.
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        ApiError::new(406, "NotAcceptable", message)
    }

    /// 410 Expired (watch or list from a compacted resourceVersion, stale continue token).
    pub fn expired(message: impl Into<String>) -> Self {
        ApiError::new(410, "Expired", message)
    }

    /// 410 Expired for a `continue` token whose snapshot was compacted, carrying in
    /// `metadata.continue` a token that continues after the same key at the latest revision
    /// (etcd3 `handleCompactedErrorForPaging`, `staging/src/k8s.io/apiserver/pkg/storage/etcd3/errors.go`).
    pub fn inconsistent_continue(token: String) -> Self {
        ApiError {
            list_continue: Some(token),
            ..ApiError::expired(
                "The provided continue parameter is too old to display a consistent list result. \
                 You can start a new list without the continue parameter, or use the continue token \
                 in this response to retrieve the remainder of the results. Continuing with the \
                 provided token results in an inconsistent list - objects that were created, \
                 modified, or deleted between the time the first chunk was returned and now may \
                 show up in the list.",
            )
        }
    }

    /// 401 Unauthorized (missing or wrong bearer token).
    pub fn unauthorized() -> Self {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        let message = message.into();
        ApiError::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
        .with_details(json!({"causes": [{"message": message}]}))
    }

    /// 504 Timeout for a resourceVersion newer than the server has (`ResourceVersionTooLarge`).
    pub fn too_large_resource_version(rv: u64, current: u64) -> Self {
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(
                504,
                "Timeout",
                format!("Timeout: Too large resource version: {rv}, current: {current}"),
            )
            .with_details(json!({
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1
            }))
        }
    }

    /// 422 Invalid for bad list/watch options (kind `ListOptions`, group `meta.k8s.io`).
    pub fn invalid_list_options(field: &str, message: &str) -> Self {
        ApiError::invalid(
            "ListOptions",
            "meta.k8s.io",
            "",
            vec![Cause::new("FieldValueForbidden", field, message)],
        )
    }

    /// The `metav1.Status` JSON body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty()
            && let Some(m) = s.as_object_mut()
        {
            // `StatusReasonUnknown` is "", which Go's `omitempty` leaves out.
            m.remove("reason");
        }
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        if let Some(c) = &self.list_continue {
            s["metadata"] = json!({"continue": c});
        }
        s
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// A `Status` of `status: Success`, as DELETE returns for stores that do not return the object.
pub fn success_status(name: &str, group: &str, resource: &str, uid: &str) -> Value {
    let mut d = details(name, group, resource);
    if !uid.is_empty() {
        d["uid"] = json!(uid);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": d})
}

/// Field errors as Status causes.
pub fn to_causes(errs: Vec<apimachinery::validation::FieldError>) -> Vec<Cause> {
    errs.into_iter()
        .map(|e| Cause::new(e.reason, &e.field, e.message))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_names_the_qualified_resource() {
        let e = ApiError::not_found("deployments", "apps", "web").to_status();
        assert_eq!(e["message"], "deployments.apps \"web\" not found");
        assert_eq!(e["details"]["kind"], "deployments");
        assert_eq!(e["details"]["group"], "apps");
        assert_eq!(e["code"], 404);
    }

    #[test]
    fn invalid_lists_causes_and_uses_the_kind() {
        let e = ApiError::invalid(
            "ConfigMap",
            "",
            "Bad",
            vec![Cause::new(
                "FieldValueInvalid",
                "metadata.name",
                "Invalid value: \"Bad\"",
            )],
        )
        .to_status();
        assert_eq!(
            e["message"],
            "ConfigMap \"Bad\" is invalid: metadata.name: Invalid value: \"Bad\""
        );
        assert_eq!(e["details"]["causes"][0]["reason"], "FieldValueInvalid");
        assert_eq!(e["details"]["kind"], "ConfigMap");
    }
}
