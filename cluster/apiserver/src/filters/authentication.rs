//! Authentication (kube-apiserver's `WithAuthentication`), then impersonation
//! ([`crate::filters::impersonation`]): who a request acts as.
//!
//! A verified client certificate authenticates first (kube-apiserver's x509 authenticator
//! comes before the token ones in its union); otherwise a bearer token from the server's token
//! table ([`crate::auth::tokens`]); over plain HTTP a request without credentials is the
//! bootstrap user, as kube-apiserver's old insecure port served everyone.

use http::header;

use crate::api::status::ApiError;
use crate::api::user::UserInfo;
use crate::auth::rbac::Authorizer;
use crate::auth::tokens::TokenTable;
use crate::filters::impersonation;
use crate::registry::Store;

/// What authentication checks a request against.
#[derive(Debug, Default)]
pub struct Authenticator {
    /// Accepted bearer tokens.
    pub tokens: TokenTable,
    /// Who a request without an `Authorization` header is: `None` (401) over HTTPS; the
    /// bootstrap user over plain HTTP, as kube-apiserver's old insecure port served everyone
    /// (clients such as kubectl send no credentials to an `http://` server).
    pub unauthenticated_user: Option<String>,
}

/// The user of a connection's verified client certificate ([`crate::server::tls`]): the subject's
/// common name, in its organizations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientCertIdentity {
    /// The common name.
    pub name: String,
    /// The organizations.
    pub groups: Vec<String>,
}

/// Authentication, then impersonation: the user the request acts as.
///
/// A verified client certificate authenticates first (kube-apiserver's x509 authenticator
/// comes before the token ones in its union): the user is its common name, in its
/// organizations plus `system:authenticated`. Otherwise, outside the public paths a request
/// needs a known bearer token, or no `Authorization` header at all when the server has an
/// unauthenticated user; anything else is `401`. Impersonation applies to authenticated
/// requests; a public path asked for without a token is answered as the empty user.
pub fn authenticate(
    authn: &Authenticator,
    rbac: &Authorizer,
    store: &Store,
    path: &str,
    headers: &http::HeaderMap,
    cert: Option<&ClientCertIdentity>,
) -> Result<UserInfo, ApiError> {
    if let Some(id) = cert.filter(|id| !id.name.is_empty()) {
        let user = rbac.certificate_user(&id.name, &id.groups);
        return impersonation::resolve(rbac, store, user, headers);
    }
    let header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if !crate::auth::tokens::is_public_path(path) {
        let anonymous_allowed = header.is_none() && authn.unauthenticated_user.is_some();
        if !anonymous_allowed && authn.tokens.authenticate(header).is_none() {
            return Err(ApiError::unauthorized());
        }
    }
    let authenticated = match header {
        Some(h) => authn.tokens.authenticate(Some(h)),
        None => authn.unauthenticated_user.clone(),
    };
    match authenticated {
        Some(name) => impersonation::resolve(rbac, store, rbac.user(&name), headers),
        None => Ok(rbac.user("")),
    }
}
