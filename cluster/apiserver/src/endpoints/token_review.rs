//! Token reviews: asking the server who a bearer token belongs to.
//!
//! A component that serves its own HTTPS endpoint (a controller's `/metrics`, an aggregated API
//! server, the kubelet) does not know the cluster's tokens. It hands the token it was given to
//! the API server in a `TokenReview` (`authentication.k8s.io/v1`) and gets back the user the
//! token authenticates as, which it can then ask about in a `SubjectAccessReview`
//! ([`crate::endpoints::access_review`]). This is what client-go's delegating authenticator (and
//! controller-runtime's `filters.WithAuthenticationAndAuthorization`) does, as does
//! kube-apiserver's `--authentication-token-webhook` on the other side.
//!
//! Like the access reviews, a token review is create-only and never stored: the server fills in
//! its `status` and answers `201 Created` (kube-apiserver's `pkg/registry/authentication/
//! tokenreview`):
//!
//! ```text
//! POST /apis/authentication.k8s.io/v1/tokenreviews
//! {"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","spec":{"token":"abc..."}}
//! ← 201 {..., "status":{"authenticated":true,
//!        "user":{"username":"alice","groups":["devs","system:authenticated"]}}}
//! ```
//!
//! * The token is checked by the same authenticator that guards every request
//!   ([`crate::auth::tokens::TokenTable`]), and the user gets the same groups a request with that token
//!   would have ([`crate::auth::rbac::Authorizer::user`]).
//! * An unknown token is not an error of the review: it answers `201` with
//!   `{"authenticated": false, "user": {}, "error": "invalid bearer token"}` (the message of
//!   the real server's bearer-token authenticator).
//! * `spec.token` missing or empty is `400 BadRequest`, "token is required for TokenReview in
//!   authentication", as on the real server.
//! * `spec.audiences`: the static tokens are audience-agnostic (the real token-file
//!   authenticator is too), so an authenticated review echoes the audiences asked for in
//!   `status.audiences`; none asked, none echoed (this server has no `--api-audiences`).
//! * Creating one needs `create` on `tokenreviews` in `authentication.k8s.io`, which RBAC
//!   grants nobody by default (the real server's `system:auth-delegator` ClusterRole holds it,
//!   unbound); a controller that authenticates its scrapers is given it by its ClusterRole.
//!
//! ## SelfSubjectReview: who am I?
//!
//! `POST /apis/authentication.k8s.io/v1/selfsubjectreviews` (what `kubectl auth whoami` sends,
//! GA since 1.28; kube-apiserver's `pkg/registry/authentication/selfsubjectreview`) answers
//! `201` with the requester's own user in `status.userInfo`: the token's user, a client
//! certificate's subject, or the impersonated user, with its groups. Any authenticated user may
//! ask (`system:basic-user` grants `create` on it). The body's `metadata` is echoed; there is no
//! `spec`.
//!
//! Not served: the `v1beta1` and `v1alpha1` versions.

use serde_json::{Map, Value, json};

use crate::api::status::ApiError;
use crate::api::user::UserInfo;
use crate::auth::rbac::{Attributes, Authorizer};

/// The API group of token reviews.
pub const GROUP: &str = "authentication.k8s.io";

/// The served version.
pub const VERSION: &str = "v1";

/// `authentication.k8s.io/v1`.
pub const API_VERSION: &str = "authentication.k8s.io/v1";

/// The resource name in URLs.
pub const PLURAL: &str = "tokenreviews";

/// The Kind.
pub const KIND: &str = "TokenReview";

/// The resource name of the self-review (`kubectl auth whoami`).
pub const SELF_PLURAL: &str = "selfsubjectreviews";

/// Its Kind.
pub const SELF_KIND: &str = "SelfSubjectReview";

/// The `status.error` of a review whose token authenticates nobody.
pub const INVALID_TOKEN: &str = "invalid bearer token";

/// Whether a path is under the group-version (so it is routed here and nowhere else).
pub fn owns(segs: &[&str]) -> bool {
    matches!(segs, ["apis", GROUP, VERSION, _, ..])
}

/// The resource a path names if it is one of the two collections served
/// (`/apis/authentication.k8s.io/v1/tokenreviews` or `.../selfsubjectreviews`).
pub fn collection(segs: &[&str]) -> Option<&'static str> {
    match segs {
        ["apis", GROUP, VERSION, PLURAL] => Some(PLURAL),
        ["apis", GROUP, VERSION, SELF_PLURAL] => Some(SELF_PLURAL),
        _ => None,
    }
}

/// The attributes of creating a review of `resource`, which the requester must be allowed.
pub fn create_attributes(resource: &str) -> Attributes {
    Attributes {
        verb: "create".into(),
        group: GROUP.into(),
        resource: resource.into(),
        resource_request: true,
        ..Default::default()
    }
}

/// The `APIResourceList` of `authentication.k8s.io/v1` (legacy discovery).
pub fn api_resource_list() -> Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": API_VERSION,
           "resources": [{"name": SELF_PLURAL, "singularName": "selfsubjectreview",
                          "namespaced": false, "kind": SELF_KIND, "verbs": ["create"]},
                         {"name": PLURAL, "singularName": "tokenreview", "namespaced": false,
                          "kind": KIND, "verbs": ["create"]}]})
}

/// The group's entry of an aggregated discovery document (`APIGroupDiscovery`).
pub fn group_discovery() -> Value {
    json!({"metadata": {"name": GROUP},
    "versions": [{"version": VERSION, "freshness": "Current", "resources": [{
        "resource": SELF_PLURAL,
        "responseKind": {"group": GROUP, "version": VERSION, "kind": SELF_KIND},
        "scope": "Cluster",
        "singularResource": "selfsubjectreview",
        "verbs": ["create"],
    }, {
        "resource": PLURAL,
        "responseKind": {"group": GROUP, "version": VERSION, "kind": KIND},
        "scope": "Cluster",
        "singularResource": "tokenreview",
        "verbs": ["create"],
    }]}]})
}

/// Checks the envelope and returns the body with `apiVersion` and `kind` filled in (the
/// check every review kind shares: [`crate::endpoints::access_review::review_envelope`]).
fn intake(body: Value) -> Result<Map<String, Value>, ApiError> {
    crate::endpoints::access_review::review_envelope(body, API_VERSION, KIND)
}

/// Answers a token review: `authenticate` maps a token to the user name it stands for (the
/// server's token table), `az` gives that user its groups. Returns the object with its `status`
/// filled in (the caller sends it with `201 Created`).
pub fn create(
    az: &Authorizer,
    authenticate: impl Fn(&str) -> Option<String>,
    body: Value,
) -> Result<Value, ApiError> {
    let mut obj = intake(body)?;
    let spec = match obj.get("spec") {
        Some(Value::Object(s)) => s.clone(),
        _ => Map::new(),
    };
    let token = match spec.get("token") {
        None | Some(Value::Null) => "",
        Some(Value::String(t)) => t.as_str(),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "json: cannot unmarshal {} into Go struct field TokenReviewSpec.spec.token of type string",
                crate::endpoints::access_review::json_type(other)
            )));
        }
    };
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let audiences: Vec<Value> = match spec.get("audiences") {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => a.clone(),
        Some(_) => {
            return Err(ApiError::bad_request(
                "json: cannot unmarshal into Go struct field TokenReviewSpec.spec.audiences of type []string",
            ));
        }
    };
    let status = match authenticate(token) {
        Some(name) => {
            let user = az.user(&name);
            let mut status = json!({
                "authenticated": true,
                "user": {"username": user.name, "groups": user.groups},
            });
            if !audiences.is_empty() {
                status["audiences"] = Value::Array(audiences);
            }
            status
        }
        None => json!({"user": {}, "error": INVALID_TOKEN}),
    };
    // Go encodes an empty ObjectMeta with a null creationTimestamp.
    let meta = obj.entry("metadata").or_insert_with(|| json!({}));
    if let Some(m) = meta.as_object_mut() {
        m.entry("creationTimestamp").or_insert(Value::Null);
    }
    obj.insert("status".into(), status);
    Ok(Value::Object(obj))
}

/// Answers a self-review for `user` (the request's, after impersonation): the body's
/// envelope checked, `status.userInfo` filled in.
pub fn create_self(user: &UserInfo, body: Value) -> Result<Value, ApiError> {
    let mut obj = crate::endpoints::access_review::review_envelope(body, API_VERSION, SELF_KIND)?;
    let meta = obj.entry("metadata").or_insert_with(|| json!({}));
    if let Some(m) = meta.as_object_mut() {
        m.entry("creationTimestamp").or_insert(Value::Null);
    }
    obj.insert(
        "status".into(),
        json!({"userInfo": {"username": user.name, "groups": user.groups}}),
    );
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(token: &str) -> Option<String> {
        (token == "good").then(|| "alice".to_owned())
    }

    #[test]
    fn a_known_token_names_its_user_and_groups() {
        let az = Authorizer::new(true, HashMap::from([("alice".into(), vec!["devs".into()])]));
        let r = create(
            &az,
            lookup,
            json!({"apiVersion": API_VERSION, "kind": KIND,
                   "spec": {"token": "good", "audiences": ["https://metrics"]}}),
        )
        .unwrap();
        assert_eq!(r["status"]["authenticated"], true);
        assert_eq!(r["status"]["user"]["username"], "alice");
        assert_eq!(
            r["status"]["user"]["groups"],
            json!(["devs", "system:authenticated"])
        );
        assert_eq!(r["status"]["audiences"], json!(["https://metrics"]));
        assert_eq!(r["spec"]["token"], "good");
        assert!(r["metadata"]["creationTimestamp"].is_null());
    }

    #[test]
    fn an_unknown_token_is_an_unauthenticated_answer_not_an_error() {
        let az = Authorizer::default();
        let r = create(&az, lookup, json!({"spec": {"token": "bad"}})).unwrap();
        assert_eq!(r["kind"], KIND);
        assert_eq!(r["apiVersion"], API_VERSION);
        assert!(r["status"].get("authenticated").is_none());
        assert_eq!(r["status"]["error"], INVALID_TOKEN);
        assert_eq!(r["status"]["user"], json!({}));
    }

    #[test]
    fn a_missing_token_or_a_wrong_envelope_is_400() {
        let az = Authorizer::default();
        for body in [
            json!({"spec": {}}),
            json!({"spec": {"token": ""}}),
            json!({"spec": {"token": 7}}),
            json!({"kind": "SubjectAccessReview", "spec": {"token": "good"}}),
            json!({"apiVersion": "authentication.k8s.io/v1beta1", "spec": {"token": "good"}}),
            json!("token"),
        ] {
            let e = create(&az, lookup, body.clone()).unwrap_err();
            assert_eq!(e.code, 400, "{body}");
        }
        let e = create(&az, lookup, json!({})).unwrap_err();
        assert_eq!(
            e.message,
            "token is required for TokenReview in authentication"
        );
    }

    #[test]
    fn routes_and_discovery_name_two_create_only_resources() {
        assert_eq!(collection(&["apis", GROUP, VERSION, PLURAL]), Some(PLURAL));
        assert_eq!(
            collection(&["apis", GROUP, VERSION, SELF_PLURAL]),
            Some(SELF_PLURAL)
        );
        assert_eq!(collection(&["apis", GROUP, VERSION, PLURAL, "x"]), None);
        assert!(owns(&["apis", GROUP, VERSION, "selfsubjectreviews"]));
        assert!(!owns(&["apis", "authorization.k8s.io", VERSION, PLURAL]));
        for r in api_resource_list()["resources"].as_array().unwrap() {
            assert_eq!(r["verbs"], json!(["create"]));
        }
        assert_eq!(
            group_discovery()["versions"][0]["resources"][1]["scope"],
            "Cluster"
        );
    }

    #[test]
    fn a_self_review_names_the_requester() {
        let user = UserInfo {
            name: "alice".into(),
            groups: vec!["devs".into(), "system:authenticated".into()],
        };
        let answer =
            create_self(&user, json!({"apiVersion": API_VERSION, "kind": SELF_KIND})).unwrap();
        assert_eq!(
            answer["status"]["userInfo"],
            json!({"username": "alice", "groups": ["devs", "system:authenticated"]})
        );
        assert!(create_self(&user, json!({"apiVersion": API_VERSION, "kind": KIND})).is_err());
    }
}
