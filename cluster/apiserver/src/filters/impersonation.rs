//! Impersonation: acting as another user (`kubectl --as`, `--as-group`).
//!
//! A request may ask to be treated as if another user had made it, with headers:
//!
//! | header | asks to act as | the requester needs `impersonate` on |
//! |---|---|---|
//! | `Impersonate-User: alice` | the user `alice` | `users` named `alice` (core group) |
//! | `Impersonate-User: system:serviceaccount:cnat:cnat` | that service account | `serviceaccounts` named `cnat` in namespace `cnat` |
//! | `Impersonate-Group: devs` (repeatable) | a member of `devs` | `groups` named `devs` |
//! | `Impersonate-Uid: 42` | uid `42` | `uids` named `42` (`authentication.k8s.io`) |
//! | `Impersonate-Extra-<key>: v` (repeatable) | extra `<key>=v` | `userextras/<key>` named `v` (`authentication.k8s.io`) |
//!
//! It is the real server's `WithImpersonation` filter: after authentication, each thing asked
//! for is authorized against the *requester* (a `403 Forbidden` naming it if any is refused,
//! e.g. `users "alice" is forbidden: User "bob" cannot impersonate resource "users" in API group
//! "" at the cluster scope`), then the request continues as the new user, whose groups are
//! exactly the `Impersonate-Group` values — a service account without them gets its own two
//! groups — plus `system:authenticated`. Nothing is looked up: impersonating `admin` does not
//! make the request a member of `system:masters` unless that group is asked for too. Groups,
//! uid or extras without `Impersonate-User` are a `500` (`requested [...] without impersonating
//! a user`), as on the real server.
//!
//! With RBAC not enforced every authenticated user may impersonate anyone (the `AlwaysAllow`
//! authorizer), and the bootstrap user (`system:masters`) may always. `kubectl auth can-i ...
//! --as=<user>` relies on this: its access review is answered for the impersonated user.
//!
//! The uid and extras are authorized and then not used further: nothing in this server's RBAC
//! looks at them, as nothing in the real RBAC authorizer does.

use http::HeaderMap;

use crate::api::status::ApiError;
use crate::auth::rbac::{Attributes, Authorizer, UserInfo};
use crate::registry::Store;

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";

const AUTHENTICATED: &str = "system:authenticated";
const UNAUTHENTICATED: &str = "system:unauthenticated";
const ANONYMOUS: &str = "system:anonymous";

/// What the impersonation headers ask for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// `Impersonate-User`.
    pub user: Option<String>,
    /// `Impersonate-Group` values, in order.
    pub groups: Vec<String>,
    /// `Impersonate-Uid`.
    pub uid: Option<String>,
    /// `Impersonate-Extra-<key>` values: `(key, value)`, keys lower-cased and percent-decoded.
    pub extra: Vec<(String, String)>,
}

impl Request {
    /// Whether any impersonation header was present.
    pub fn is_empty(&self) -> bool {
        self.user.is_none() && self.groups.is_empty() && self.uid.is_none() && self.extra.is_empty()
    }
}

fn header_str<'a>(name: &str, v: &'a http::HeaderValue) -> Result<&'a str, ApiError> {
    v.to_str().map_err(|_| {
        ApiError::bad_request(format!(
            "header {name}: the value is not valid visible ASCII"
        ))
    })
}

/// Percent-decodes an extra key (`Impersonate-Extra-acme.com%2Fproject` → `acme.com/project`).
fn unescape_key(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = key
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads the impersonation headers.
pub fn parse(headers: &HeaderMap) -> Result<Request, ApiError> {
    let mut req = Request::default();
    if let Some(v) = headers.get(USER) {
        let user = header_str("Impersonate-User", v)?;
        if !user.is_empty() {
            req.user = Some(user.to_owned());
        }
    }
    for v in headers.get_all(GROUP) {
        req.groups
            .push(header_str("Impersonate-Group", v)?.to_owned());
    }
    if let Some(v) = headers.get(UID) {
        let uid = header_str("Impersonate-Uid", v)?;
        if !uid.is_empty() {
            req.uid = Some(uid.to_owned());
        }
    }
    for (name, v) in headers {
        if let Some(key) = name.as_str().strip_prefix(EXTRA_PREFIX) {
            let value = header_str(name.as_str(), v)?;
            req.extra.push((unescape_key(key), value.to_owned()));
        }
    }
    Ok(req)
}

/// `system:serviceaccount:<namespace>:<name>` split into its parts, when both are valid names.
pub fn split_service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix("system:serviceaccount:")?;
    let (ns, name) = rest.split_once(':')?;
    let label = |s: &str, dots: bool| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || (dots && b == b'.')
            })
            && !s.starts_with(['-', '.'])
            && !s.ends_with(['-', '.'])
    };
    (label(ns, false) && ns.len() <= 63 && label(name, true)).then_some((ns, name))
}

/// The user a request acts as: `requester` itself when no impersonation header is present,
/// otherwise the impersonated user, after checking that `requester` may impersonate each part.
pub fn resolve(
    rbac: &Authorizer,
    store: &Store,
    requester: UserInfo,
    headers: &HeaderMap,
) -> Result<UserInfo, ApiError> {
    let req = parse(headers)?;
    if req.is_empty() {
        return Ok(requester);
    }
    let Some(user) = req.user.clone() else {
        let mut asked: Vec<String> = req.groups.iter().map(|g| format!("group {g:?}")).collect();
        asked.extend(req.uid.iter().map(|u| format!("uid {u:?}")));
        asked.extend(req.extra.iter().map(|(k, v)| format!("extra {k}={v:?}")));
        return Err(ApiError::internal(format!(
            "requested [{}] without impersonating a user",
            asked.join(" ")
        )));
    };
    let mut checks: Vec<Attributes> = vec![];
    let attrs = |group: &str, resource: &str, sub: &str, ns: &str, name: &str| Attributes {
        verb: "impersonate".into(),
        group: group.into(),
        resource: resource.into(),
        subresource: sub.into(),
        namespace: ns.into(),
        name: name.into(),
        path: String::new(),
        resource_request: true,
    };
    let mut groups: Vec<String> = vec![];
    match split_service_account(&user) {
        Some((ns, name)) => {
            checks.push(attrs("", "serviceaccounts", "", ns, name));
            if req.groups.is_empty() {
                groups = vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{ns}"),
                ];
            }
        }
        None => checks.push(attrs("", "users", "", "", &user)),
    }
    for g in &req.groups {
        checks.push(attrs("", "groups", "", "", g));
        groups.push(g.clone());
    }
    if let Some(uid) = &req.uid {
        checks.push(attrs("authentication.k8s.io", "uids", "", "", uid));
    }
    for (key, value) in &req.extra {
        checks.push(attrs("authentication.k8s.io", "userextras", key, "", value));
    }
    for a in &checks {
        rbac.check(store, &requester, a)?;
    }
    if user != ANONYMOUS {
        if !groups
            .iter()
            .any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED)
        {
            groups.push(AUTHENTICATED.into());
        }
    } else if !groups.iter().any(|g| g == UNAUTHENTICATED) {
        groups.push(UNAUTHENTICATED.into());
    }
    tracing::debug!(requester = %requester.name, user = %user, "request impersonates another user");
    Ok(UserInfo { name: user, groups })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn admin() -> UserInfo {
        Authorizer::new(true, HashMap::new()).user("admin")
    }

    #[test]
    fn headers_are_read_with_repeated_groups_and_decoded_extra_keys() {
        let r = parse(&headers(&[
            ("Impersonate-User", "alice"),
            ("Impersonate-Group", "devs"),
            ("Impersonate-Group", "ops"),
            ("Impersonate-Extra-Acme.com%2Fproject", "p1"),
        ]))
        .unwrap();
        assert_eq!(r.user.as_deref(), Some("alice"));
        assert_eq!(r.groups, ["devs", "ops"]);
        assert_eq!(r.extra, [("acme.com/project".to_owned(), "p1".to_owned())]);
        assert!(parse(&HeaderMap::new()).unwrap().is_empty());
    }

    #[test]
    fn service_account_names_are_split_only_when_valid() {
        assert_eq!(
            split_service_account("system:serviceaccount:cnat:cnat-controller"),
            Some(("cnat", "cnat-controller"))
        );
        assert_eq!(split_service_account("system:serviceaccount:cnat"), None);
        assert_eq!(split_service_account("system:serviceaccount:Cnat:x"), None);
        assert_eq!(split_service_account("system:serviceaccount:a:b:c"), None);
        assert_eq!(split_service_account("alice"), None);
    }

    #[test]
    fn the_new_user_has_exactly_the_asked_groups_plus_authenticated() {
        let az = Authorizer::new(true, HashMap::new());
        let store = Store::new(10);
        let u = resolve(
            &az,
            &store,
            admin(),
            &headers(&[("Impersonate-User", "admin")]),
        )
        .unwrap();
        assert_eq!(u.name, "admin");
        assert_eq!(u.groups, ["system:authenticated"]);
        let sa = resolve(
            &az,
            &store,
            admin(),
            &headers(&[("Impersonate-User", "system:serviceaccount:cnat:cnat")]),
        )
        .unwrap();
        assert_eq!(
            sa.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:cnat",
                "system:authenticated"
            ]
        );
        let g = resolve(
            &az,
            &store,
            admin(),
            &headers(&[
                ("Impersonate-User", "system:serviceaccount:cnat:cnat"),
                ("Impersonate-Group", "system:masters"),
            ]),
        )
        .unwrap();
        assert_eq!(g.groups, ["system:masters", "system:authenticated"]);
    }

    #[test]
    fn groups_without_a_user_are_an_internal_error() {
        let az = Authorizer::new(false, HashMap::new());
        let store = Store::new(10);
        let e = resolve(
            &az,
            &store,
            admin(),
            &headers(&[("Impersonate-Group", "devs")]),
        )
        .unwrap_err();
        assert_eq!(e.code, 500);
        assert!(
            e.message.contains("without impersonating a user"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_user_without_rights_cannot_impersonate_when_rbac_is_enforced() {
        let enforced = Authorizer::new(true, HashMap::new());
        let store = Store::new(10);
        let bob = enforced.user("bob");
        let e = resolve(
            &enforced,
            &store,
            bob.clone(),
            &headers(&[("Impersonate-User", "alice")]),
        )
        .unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "users \"alice\" is forbidden: User \"bob\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
        );
        // AlwaysAllow: anyone may.
        let open = Authorizer::new(false, HashMap::new());
        let u = resolve(
            &open,
            &store,
            bob,
            &headers(&[("Impersonate-User", "alice")]),
        )
        .unwrap();
        assert_eq!(u.name, "alice");
    }
}
