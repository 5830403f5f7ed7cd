//! Authorization (kube-apiserver's `WithAuthorization`): may this user do this?
//!
//! Once routing has resolved a resource URL to a target and a verb (kube's `RequestInfo`), the
//! request's attributes (verb, group, resource, subresource, namespace, name) go to the
//! authorizer ([`crate::auth::rbac`]); a denial is the real server's `403`. With RBAC not
//! enforced every request is allowed (`--authorization-mode=AlwaysAllow`). Non-resource paths
//! that need it (`/metrics`) are authorized by their path.

use crate::api::status::ApiError;
use crate::api::user::UserInfo;
use crate::auth::rbac::{Attributes, Authorizer};
use crate::registry::Store;
use crate::registry::generic::Target;

/// Authorizes `verb` on `target`. A list or watch whose field selector names one object
/// (`metadata.name=x`) is authorized for that name, so `resourceNames` rules apply to it.
pub fn authorize_resource(
    rbac: &Authorizer,
    store: &Store,
    user: &UserInfo,
    target: &Target,
    verb: &str,
    field_selector: Option<&str>,
) -> Result<(), ApiError> {
    rbac.check(store, user, &target.attributes(verb, field_selector))
}

/// Authorizes `verb` (the lower-cased HTTP method) on a non-resource `path`.
pub fn authorize_path(
    rbac: &Authorizer,
    store: &Store,
    user: &UserInfo,
    verb: &str,
    path: &str,
) -> Result<(), ApiError> {
    let attrs = Attributes {
        verb: verb.into(),
        path: path.to_owned(),
        ..Default::default()
    };
    rbac.check(store, user, &attrs)
}
