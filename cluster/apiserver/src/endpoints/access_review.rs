//! Access reviews: asking the authorizer a question instead of making the request.
//!
//! `kubectl auth can-i list ats` does not try to list anything. It `POST`s a question to
//! `authorization.k8s.io/v1` and prints the answer, `yes` (exit code 0) or `no` (exit code 1).
//! The question is an object that is never stored: the server fills in its `status` and sends
//! it back with `201 Created`. Four kinds of question are served, all create-only, as in
//! kube-apiserver's `pkg/registry/authorization`:
//!
//! | resource | scope | asks | who may ask |
//! |---|---|---|---|
//! | `selfsubjectaccessreviews` | cluster | may **I** do this? (`kubectl auth can-i VERB TYPE`) | every authenticated user |
//! | `selfsubjectrulesreviews` | cluster | what may **I** do in this namespace? (`kubectl auth can-i --list`) | every authenticated user |
//! | `subjectaccessreviews` | cluster | may **this user / these groups** do this? | whoever may `create subjectaccessreviews` |
//! | `localsubjectaccessreviews` | namespaced | the same, inside the URL's namespace | whoever may `create localsubjectaccessreviews` there |
//!
//! ## The wire shapes
//!
//! ```text
//! POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews
//! {"kind":"SelfSubjectAccessReview","apiVersion":"authorization.k8s.io/v1","metadata":{},
//!  "spec":{"resourceAttributes":{"namespace":"default","verb":"list",
//!          "group":"cnat.programming-kubernetes.info","resource":"ats"}}}
//! ← 201 {... the same object ..., "status":{"allowed":true,
//!        "reason":"RBAC: allowed by ClusterRoleBinding \"x\" of ClusterRole \"y\" to User \"alice\""}}
//! ```
//!
//! A spec holds exactly one of `resourceAttributes` (`namespace`, `verb`, `group`, `version`,
//! `resource`, `subresource`, `name`) or `nonResourceAttributes` (`path`, `verb`); anything else
//! is `422 Invalid` with the real validation messages, and so is a `metadata` that is not empty.
//! The status carries `allowed`, `denied` (never set: RBAC only allows), `reason` and
//! `evaluationError`. kubectl prints `no - <reason>` when a denial has a reason, which RBAC gives
//! only when a binding names a missing role (`RBAC: clusterrole.rbac.authorization.k8s.io "x"
//! not found`).
//!
//! A rules review's spec is just `{"namespace": "..."}` (required: `400 no namespace on
//! request` without it). Its status lists `resourceRules` (`verbs`, `apiGroups`, `resources`,
//! `resourceNames`) and `nonResourceRules` (`verbs`, `nonResourceURLs`) from every binding that
//! applies to the user — cluster-wide ones, then those of the namespace — with `incomplete:
//! false` and any missing roles in `evaluationError`, the RBAC rule resolver's answer. kubectl
//! breaks the rules down, compacts and sorts them into its `Resources  Non-Resource URLs
//! Resource Names  Verbs` table.
//!
//! A `SubjectAccessReview` names the subject in its spec (`user`, `groups`, `uid`, `extra`; at
//! least a user or a group) and is answered for exactly that subject: its groups are taken as
//! given, `system:authenticated` is not added, as on the real server.
//!
//! ## Who is "self"
//!
//! The requesting user after authentication and impersonation ([`crate::filters::impersonation`]), so
//! `kubectl auth can-i ... --as=system:serviceaccount:cnat:cnat` answers for the service account
//! exactly as a request made with its token would be answered.
//!
//! ## Decisions
//!
//! Answers come from the same authorizer that guards every request ([`crate::auth::rbac`]): with RBAC
//! enforced, members of `system:masters` are allowed with an empty reason (the privileged-group
//! authorizer), everyone else by the stored Roles and bindings plus the built-in bootstrap
//! bindings; with RBAC not enforced (the default, like `--authorization-mode=AlwaysAllow`) every
//! review answers `allowed: true` and every rules review lists `*` for everything, because that
//! is what the server then does.
//!
//! Not served: `fieldSelector` and `labelSelector` in resource attributes are accepted and echoed
//! but ignored (RBAC does not look at them either); the review kinds are not in `/openapi`.

use serde_json::{Map, Value, json};

use crate::api::status::{ApiError, Cause};
use crate::auth::rbac::{Attributes, Authorizer, UserInfo};
use crate::registry::State;

/// The API group of the reviews.
pub const GROUP: &str = "authorization.k8s.io";

/// The served version.
pub const VERSION: &str = "v1";

/// `authorization.k8s.io/v1`.
pub const API_VERSION: &str = "authorization.k8s.io/v1";

/// One of the four review resources.
// The variants are the resources' kinds, which all end in `Review`.
#[allow(clippy::enum_variant_names)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReviewKind {
    /// `localsubjectaccessreviews` (namespaced).
    LocalSubjectAccessReview,
    /// `selfsubjectaccessreviews`.
    SelfSubjectAccessReview,
    /// `selfsubjectrulesreviews`.
    SelfSubjectRulesReview,
    /// `subjectaccessreviews`.
    SubjectAccessReview,
}

impl ReviewKind {
    /// Every review resource, in discovery order.
    pub const ALL: [ReviewKind; 4] = [
        ReviewKind::LocalSubjectAccessReview,
        ReviewKind::SelfSubjectAccessReview,
        ReviewKind::SelfSubjectRulesReview,
        ReviewKind::SubjectAccessReview,
    ];

    /// The Kind.
    pub fn kind(self) -> &'static str {
        match self {
            ReviewKind::LocalSubjectAccessReview => "LocalSubjectAccessReview",
            ReviewKind::SelfSubjectAccessReview => "SelfSubjectAccessReview",
            ReviewKind::SelfSubjectRulesReview => "SelfSubjectRulesReview",
            ReviewKind::SubjectAccessReview => "SubjectAccessReview",
        }
    }

    /// The resource name in URLs.
    pub fn plural(self) -> &'static str {
        match self {
            ReviewKind::LocalSubjectAccessReview => "localsubjectaccessreviews",
            ReviewKind::SelfSubjectAccessReview => "selfsubjectaccessreviews",
            ReviewKind::SelfSubjectRulesReview => "selfsubjectrulesreviews",
            ReviewKind::SubjectAccessReview => "subjectaccessreviews",
        }
    }

    /// The singular name (`kubectl get selfsubjectaccessreview` would use it).
    pub fn singular(self) -> String {
        self.kind().to_ascii_lowercase()
    }

    /// Whether the resource lives in a namespace.
    pub fn namespaced(self) -> bool {
        self == ReviewKind::LocalSubjectAccessReview
    }

    fn from_plural(plural: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.plural() == plural)
    }
}

/// A review URL: `/apis/authorization.k8s.io/v1/<plural>` or, for local reviews,
/// `/apis/authorization.k8s.io/v1/namespaces/<ns>/localsubjectaccessreviews`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReviewTarget {
    /// Which review.
    pub kind: ReviewKind,
    /// The URL's namespace (local reviews only).
    pub namespace: Option<String>,
}

impl ReviewTarget {
    /// The attributes of creating this review, which the requester must be allowed.
    pub fn create_attributes(&self) -> Attributes {
        Attributes {
            verb: "create".into(),
            group: GROUP.into(),
            resource: self.kind.plural().into(),
            namespace: self.namespace.clone().unwrap_or_default(),
            resource_request: true,
            ..Default::default()
        }
    }
}

/// Whether a path is under the reviews' group-version (so it is routed here and nowhere else).
pub fn owns(segs: &[&str]) -> bool {
    matches!(segs, ["apis", GROUP, VERSION, _, ..])
}

/// The review a URL names; `None` (the plain `404 page not found`) for anything else under the
/// group-version, including object names: reviews are never stored, so there is nothing to
/// get.
pub fn route(segs: &[&str]) -> Option<ReviewTarget> {
    match segs {
        ["apis", GROUP, VERSION, plural] => {
            let kind = ReviewKind::from_plural(plural).filter(|k| !k.namespaced())?;
            Some(ReviewTarget {
                kind,
                namespace: None,
            })
        }
        ["apis", GROUP, VERSION, "namespaces", ns, plural] if !ns.is_empty() => {
            let kind = ReviewKind::from_plural(plural).filter(|k| k.namespaced())?;
            Some(ReviewTarget {
                kind,
                namespace: Some((*ns).to_owned()),
            })
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// discovery

/// The `APIResourceList` of `authorization.k8s.io/v1` (legacy discovery).
pub fn api_resource_list() -> Value {
    let resources: Vec<Value> = ReviewKind::ALL
        .iter()
        .map(|k| {
            json!({"name": k.plural(), "singularName": k.singular(), "namespaced": k.namespaced(),
                   "kind": k.kind(), "verbs": ["create"]})
        })
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": API_VERSION,
           "resources": resources})
}

/// The group's entry of an aggregated discovery document (`APIGroupDiscovery`).
pub fn group_discovery() -> Value {
    let resources: Vec<Value> = ReviewKind::ALL
        .iter()
        .map(|k| {
            json!({
                "resource": k.plural(),
                "responseKind": {"group": GROUP, "version": VERSION, "kind": k.kind()},
                "scope": if k.namespaced() { "Namespaced" } else { "Cluster" },
                "singularResource": k.singular(),
                "verbs": ["create"],
            })
        })
        .collect();
    json!({"metadata": {"name": GROUP},
           "versions": [{"version": VERSION, "resources": resources, "freshness": "Current"}]})
}

// ---------------------------------------------------------------------------------------------
// create

fn invalid(kind: ReviewKind, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid(kind.kind(), GROUP, "", causes)
}

/// A value in a validation message (JSON; the real server prints the Go struct).
fn show(v: &Value) -> String {
    match v {
        Value::Null => "\"null\"".into(),
        other => other.to_string(),
    }
}

/// `NonResourceAttributes` as Go's `%#v` prints it in a validation message.
fn show_non_resource(n: &Map<String, Value>) -> String {
    let s = |f: &str| {
        n.get(f)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    format!(
        "authorization.NonResourceAttributes{{Path:{:?}, Verb:{:?}}}",
        s("path"),
        s("verb")
    )
}

/// Checks the envelope (object, `apiVersion`, `kind`, `metadata`, `spec`), then returns the
/// body with `apiVersion` and `kind` filled in, as the real decoder defaults them from the URL.
fn intake(kind: ReviewKind, body: Value) -> Result<Map<String, Value>, ApiError> {
    review_envelope(body, API_VERSION, kind.kind())
}

/// The envelope check of every review kind (SubjectAccessReview and its kin here,
/// TokenReview in [`crate::endpoints::token_review`]): an object whose `apiVersion` and `kind`, when
/// given, are `api_version` and `kind`, and whose `metadata`, `spec` and `status` are objects;
/// returned with `apiVersion` and `kind` filled in. The messages are the Go decoder's.
pub(crate) fn review_envelope(
    body: Value,
    api_version: &str,
    kind: &str,
) -> Result<Map<String, Value>, ApiError> {
    let Value::Object(mut obj) = body else {
        return Err(ApiError::bad_request(
            "the request body must be a JSON or YAML object",
        ));
    };
    match obj.get("apiVersion") {
        None | Some(Value::Null) => {}
        Some(Value::String(av)) if av == api_version => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version ({api_version})",
                other.as_str().unwrap_or_default()
            )));
        }
    }
    match obj.get("kind") {
        None | Some(Value::Null) => {}
        Some(Value::String(k)) if k == kind => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({}) does not match the expected kind ({kind})",
                other.as_str().unwrap_or_default(),
            )));
        }
    }
    for field in ["metadata", "spec", "status"] {
        if let Some(v) = obj.get(field).filter(|v| !v.is_object() && !v.is_null()) {
            return Err(ApiError::bad_request(format!(
                "json: cannot unmarshal {} into Go struct field {kind}.{field} of type object",
                json_type(v),
            )));
        }
    }
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    Ok(obj)
}

/// The Go decoder's name for a JSON value's type.
pub(crate) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `metadata` with its null and empty members removed (`{"creationTimestamp": null}` is what Go
/// clients send for an empty ObjectMeta), and `managedFields` ignored as validation ignores it.
fn meaningful_metadata(obj: &Map<String, Value>, keep_namespace: bool) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(Value::Object(meta)) = obj.get("metadata") {
        for (k, v) in meta {
            let empty = match v {
                Value::Null => true,
                Value::String(s) => s.is_empty(),
                Value::Array(a) => a.is_empty(),
                Value::Object(o) => o.is_empty(),
                Value::Number(n) => n.as_f64() == Some(0.0),
                Value::Bool(b) => !b,
            };
            if empty || k == "managedFields" || (keep_namespace && k == "namespace") {
                continue;
            }
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

/// A string field of an attributes object: absent or null is empty, anything but a string
/// is a decoding error naming the field.
fn string_field(attrs: &Map<String, Value>, path: &str, field: &str) -> Result<String, ApiError> {
    match attrs.get(field) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(ApiError::bad_request(format!(
            "json: cannot unmarshal {} into Go struct field {path}.{field} of type string",
            json_type(other)
        ))),
    }
}

fn object_field<'a>(
    spec: &'a Map<String, Value>,
    kind: ReviewKind,
    field: &str,
) -> Result<Option<&'a Map<String, Value>>, ApiError> {
    match spec.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(o)) => Ok(Some(o)),
        Some(other) => Err(ApiError::bad_request(format!(
            "json: cannot unmarshal {} into Go struct field {}Spec.spec.{field} of type object",
            json_type(other),
            kind.kind()
        ))),
    }
}

/// The attributes an access review asks about: exactly one of `resourceAttributes` or
/// `nonResourceAttributes` (`ValidateSubjectAccessReviewSpec`).
fn spec_attributes(
    kind: ReviewKind,
    spec: &Map<String, Value>,
    causes: &mut Vec<Cause>,
) -> Result<Attributes, ApiError> {
    let resource = object_field(spec, kind, "resourceAttributes")?;
    let non_resource = object_field(spec, kind, "nonResourceAttributes")?;
    match (resource, non_resource) {
        (Some(_), Some(n)) => causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.nonResourceAttributes",
            format!(
                "Invalid value: {}: cannot be specified in combination with resourceAttributes",
                show_non_resource(n)
            ),
        )),
        (None, None) => causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.resourceAttributes",
            "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        _ => {}
    }
    if let Some(r) = resource {
        let path = "ResourceAttributes.spec.resourceAttributes";
        return Ok(Attributes {
            verb: string_field(r, path, "verb")?,
            group: string_field(r, path, "group")?,
            resource: string_field(r, path, "resource")?,
            subresource: string_field(r, path, "subresource")?,
            namespace: string_field(r, path, "namespace")?,
            name: string_field(r, path, "name")?,
            path: String::new(),
            resource_request: true,
        });
    }
    let n = non_resource.cloned().unwrap_or_default();
    let path = "NonResourceAttributes.spec.nonResourceAttributes";
    Ok(Attributes {
        verb: string_field(&n, path, "verb")?,
        path: string_field(&n, path, "path")?,
        ..Default::default()
    })
}

/// The subject a (local) subject access review names.
fn spec_subject(spec: &Map<String, Value>, causes: &mut Vec<Cause>) -> Result<UserInfo, ApiError> {
    let path = "SubjectAccessReviewSpec.spec";
    let user = string_field(spec, path, "user")?;
    string_field(spec, path, "uid")?;
    let groups: Vec<String> = match spec.get("groups") {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(items)) => items
            .iter()
            .map(|g| {
                g.as_str().map(str::to_owned).ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "json: cannot unmarshal {} into Go struct field {path}.groups of type string",
                        json_type(g)
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "json: cannot unmarshal {} into Go struct field {path}.groups of type []string",
                json_type(other)
            )));
        }
    };
    if user.is_empty() && groups.is_empty() {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.user",
            "Invalid value: \"\": at least one of user or group must be specified",
        ));
    }
    Ok(UserInfo { name: user, groups })
}

/// The `status` of an access review.
fn access_status(az: &Authorizer, st: &State, user: &UserInfo, attrs: &Attributes) -> Value {
    let d = az.decide(st, user, attrs);
    let mut status = json!({"allowed": d.allowed});
    if !d.reason.is_empty() {
        status["reason"] = json!(d.reason);
    }
    status
}

/// The `status` of a rules review.
fn rules_status(az: &Authorizer, st: &State, user: &UserInfo, namespace: &str) -> Value {
    let rules = az.rules_for(st, user, namespace);
    let mut resource_rules = vec![];
    let mut non_resource_rules = vec![];
    for rule in &rules.rules {
        let list = |field: &str| -> Vec<Value> {
            rule[field]
                .as_array()
                .map(|a| a.iter().filter(|v| v.is_string()).cloned().collect())
                .unwrap_or_default()
        };
        let verbs = list("verbs");
        let resources = list("resources");
        if !resources.is_empty() {
            let mut r = json!({"verbs": verbs});
            for (json_name, values) in [
                ("apiGroups", list("apiGroups")),
                ("resources", resources),
                ("resourceNames", list("resourceNames")),
            ] {
                if !values.is_empty() {
                    r[json_name] = Value::Array(values);
                }
            }
            resource_rules.push(r);
        }
        let urls = list("nonResourceURLs");
        if !urls.is_empty() {
            non_resource_rules.push(json!({"verbs": verbs, "nonResourceURLs": urls}));
        }
    }
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": false,
    });
    if let Some(e) = rules.evaluation_error() {
        status["evaluationError"] = json!(e);
    }
    status
}

/// Answers a review: validates it as the real registry does and returns the object with its
/// `status` filled in (the caller sends it with `201 Created`). `user` is the requester (after
/// impersonation); `target` comes from [`route`].
pub fn create(
    az: &Authorizer,
    st: &State,
    user: &UserInfo,
    target: &ReviewTarget,
    body: Value,
) -> Result<Value, ApiError> {
    let kind = target.kind;
    let mut obj = intake(kind, body)?;
    if kind == ReviewKind::LocalSubjectAccessReview {
        take_url_namespace(&mut obj, target)?;
    }
    let spec: Map<String, Value> = match obj.get("spec") {
        Some(Value::Object(s)) => s.clone(),
        _ => Map::new(),
    };
    let mut causes = vec![];
    let status = match kind {
        ReviewKind::SelfSubjectRulesReview => {
            let namespace = string_field(&spec, "SelfSubjectRulesReviewSpec.spec", "namespace")?;
            if namespace.is_empty() {
                return Err(ApiError::bad_request("no namespace on request"));
            }
            let status = rules_status(az, st, user, &namespace);
            // The real REST returns a fresh object holding only the status.
            obj.insert("spec".into(), json!({}));
            if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
                meta.clear();
            }
            status
        }
        ReviewKind::SelfSubjectAccessReview => {
            let attrs = spec_attributes(kind, &spec, &mut causes)?;
            let meta = meaningful_metadata(&obj, false);
            if !meta.is_empty() {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    "metadata",
                    format!(
                        "Invalid value: {}: must be empty",
                        show(&Value::Object(meta))
                    ),
                ));
            }
            if !causes.is_empty() {
                return Err(invalid(kind, causes));
            }
            access_status(az, st, user, &attrs)
        }
        ReviewKind::SubjectAccessReview | ReviewKind::LocalSubjectAccessReview => {
            subject_access_status(az, st, target, &obj, &spec)?
        }
    };
    // Go encodes an empty ObjectMeta with a null creationTimestamp.
    let meta = obj.entry("metadata").or_insert_with(|| json!({}));
    if let Some(m) = meta.as_object_mut() {
        m.entry("creationTimestamp").or_insert(Value::Null);
    }
    obj.insert("status".into(), status);
    Ok(Value::Object(obj))
}

/// A LocalSubjectAccessReview's namespace, as the generic create handler sets it: an object
/// without a namespace takes the URL's, one with another namespace is refused.
fn take_url_namespace(obj: &mut Map<String, Value>, target: &ReviewTarget) -> Result<(), ApiError> {
    let url_ns = target.namespace.clone().unwrap_or_default();
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .map(|m| {
            let ns = m.get("namespace").and_then(Value::as_str).unwrap_or("");
            if !ns.is_empty() && ns != url_ns {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            m.insert("namespace".into(), json!(url_ns));
            Ok(())
        });
    match meta {
        Some(r) => r?,
        None => {
            obj.insert("metadata".into(), json!({"namespace": url_ns}));
        }
    }
    Ok(())
}

/// The status of a SubjectAccessReview (or its namespaced kind, the local one): the spec's
/// attributes and subject, and the metadata, checked, then the subject's access decided.
fn subject_access_status(
    az: &Authorizer,
    st: &State,
    target: &ReviewTarget,
    obj: &Map<String, Value>,
    spec: &Map<String, Value>,
) -> Result<Value, ApiError> {
    let kind = target.kind;
    let mut causes = vec![];
    let attrs = spec_attributes(kind, spec, &mut causes)?;
    let subject = spec_subject(spec, &mut causes)?;
    let local = kind == ReviewKind::LocalSubjectAccessReview;
    let meta = meaningful_metadata(obj, local);
    if !meta.is_empty() {
        let what = if local {
            "must be empty except for namespace"
        } else {
            "must be empty"
        };
        causes.push(Cause::new(
            "FieldValueInvalid",
            "metadata",
            format!("Invalid value: {}: {what}", show(&Value::Object(meta))),
        ));
    }
    if local {
        let ns = target.namespace.as_deref().unwrap_or_default();
        if attrs.resource_request && attrs.namespace != ns {
            causes.push(Cause::new(
                "FieldValueInvalid",
                "spec.resourceAttributes.namespace",
                format!(
                    "Invalid value: {:?}: must match metadata.namespace",
                    attrs.namespace
                ),
            ));
        }
        if let Some(Value::Object(n)) = spec.get("nonResourceAttributes") {
            causes.push(Cause::new(
                "FieldValueInvalid",
                "spec.nonResourceAttributes",
                format!(
                    "Invalid value: {}: disallowed on this kind of request",
                    show_non_resource(n)
                ),
            ));
        }
    }
    if !causes.is_empty() {
        return Err(invalid(kind, causes));
    }
    Ok(access_status(az, st, &subject, &attrs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_accept_only_the_review_collections() {
        let ssar = route(&["apis", GROUP, VERSION, "selfsubjectaccessreviews"]).unwrap();
        assert_eq!(ssar.kind, ReviewKind::SelfSubjectAccessReview);
        assert_eq!(ssar.namespace, None);
        let local = route(&[
            "apis",
            GROUP,
            VERSION,
            "namespaces",
            "team",
            "localsubjectaccessreviews",
        ])
        .unwrap();
        assert_eq!(local.namespace.as_deref(), Some("team"));
        // A local review outside a namespace, a cluster review inside one, a name, a typo.
        assert!(route(&["apis", GROUP, VERSION, "localsubjectaccessreviews"]).is_none());
        assert!(
            route(&[
                "apis",
                GROUP,
                VERSION,
                "namespaces",
                "x",
                "subjectaccessreviews"
            ])
            .is_none()
        );
        assert!(route(&["apis", GROUP, VERSION, "subjectaccessreviews", "x"]).is_none());
        assert!(route(&["apis", GROUP, VERSION, "accessreviews"]).is_none());
        assert!(owns(&["apis", GROUP, VERSION, "accessreviews"]));
        assert!(!owns(&["apis", GROUP]));
    }

    #[test]
    fn discovery_lists_four_create_only_resources() {
        let list = api_resource_list();
        let names: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "localsubjectaccessreviews",
                "selfsubjectaccessreviews",
                "selfsubjectrulesreviews",
                "subjectaccessreviews"
            ]
        );
        assert!(
            list["resources"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["verbs"] == json!(["create"]))
        );
        assert_eq!(list["resources"][0]["namespaced"], true);
        assert_eq!(
            group_discovery()["versions"][0]["resources"][1]["scope"],
            "Cluster"
        );
    }
}
