//! Authentication: bearer tokens.
//!
//! The real server runs a chain of authenticators (client certificates, bearer tokens, service
//! account tokens, ...) and answers `401 Unauthorized` with a Status body when none recognises
//! the request. This server knows a table of static bearer tokens, each mapped to a user name
//! (like kube-apiserver's `--token-auth-file`): the one generated at start-up (user `admin`)
//! plus any added with the builder. The user name travels with the request so that later layers
//! (authorization) can decide per user.
//!
//! Plain HTTP is the exception, as kube-apiserver's old insecure port was: clients such as kubectl
//! (and this crate's client, following clientcmd) never send credentials to an `http://` server,
//! so a plain-HTTP server treats a request without an `Authorization` header as the bootstrap user
//! `admin`. A request that does carry a token is still checked, and an unknown token is still 401.
//! Serve plain HTTP on loopback only.
//!
//! `/healthz`, `/livez`, `/readyz` and `/version` are answered without a token, as the real
//! server's `system:public-info-viewer` role allows anonymous clients to do.

use std::collections::HashMap;

/// Static bearer tokens and the users they stand for, and the service account tokens issued
/// by `serviceaccounts/<name>/token` (TokenRequest), valid until they expire.
#[derive(Clone, Debug, Default)]
pub struct TokenTable {
    tokens: HashMap<String, String>,
    issued: std::sync::Arc<std::sync::Mutex<HashMap<String, (String, u64)>>>,
}

/// The most issued tokens kept at once (expired ones are dropped first; then the request for
/// one more is refused), so a client cannot grow the table without bound.
pub const MAX_ISSUED_TOKENS: usize = 100_000;

impl TokenTable {
    /// Adds a token for `user`.
    pub fn insert(&mut self, token: impl Into<String>, user: impl Into<String>) {
        self.tokens.insert(token.into(), user.into());
    }

    /// Issues a new token for `user`, valid until `expires_unix` (seconds); `None` when
    /// [`MAX_ISSUED_TOKENS`] unexpired tokens exist.
    pub fn issue(&self, user: &str, expires_unix: u64) -> Option<String> {
        let now = unix_now();
        let mut issued = self.issued.lock().ok()?;
        if issued.len() >= MAX_ISSUED_TOKENS {
            issued.retain(|_, (_, exp)| *exp > now);
        }
        if issued.len() >= MAX_ISSUED_TOKENS {
            return None;
        }
        // Longer than the static ones, in the shape of nothing a user would type.
        let token = format!("{}{}", random_token(), random_token());
        issued.insert(token.clone(), (user.to_owned(), expires_unix));
        Some(token)
    }

    /// The user an `Authorization` header value authenticates as, if any.
    pub fn authenticate(&self, header: Option<&str>) -> Option<String> {
        let value = header?.trim();
        let (scheme, token) = value.split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let token = token.trim();
        if let Some(user) = self.tokens.get(token) {
            return Some(user.clone());
        }
        let issued = self.issued.lock().ok()?;
        let (user, expires) = issued.get(token)?;
        (*expires > unix_now()).then(|| user.clone())
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Paths answered without authentication.
pub fn is_public_path(path: &str) -> bool {
    matches!(path, "/healthz" | "/livez" | "/readyz" | "/version")
}

/// A random token: 32 characters from `[a-z0-9]`.
pub fn random_token() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..32)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

/// One line of a kube-apiserver `--token-auth-file`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticToken {
    /// The bearer token.
    pub token: String,
    /// The user it authenticates as.
    pub user: String,
    /// Extra groups.
    pub groups: Vec<String>,
}

/// Parses kube-apiserver's `--token-auth-file` format: one `token,user,uid[,"group1,group2"]`
/// per line (the uid is read and ignored; empty lines and `#` comments are skipped).
pub fn parse_token_auth_file(text: &str) -> Result<Vec<StaticToken>, String> {
    let mut out = vec![];
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.splitn(4, ',');
        let token = parts.next().unwrap_or_default().trim();
        let user = parts.next().unwrap_or_default().trim();
        let _uid = parts.next();
        let groups: Vec<String> = parts
            .next()
            .unwrap_or_default()
            .trim()
            .trim_matches('"')
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(str::to_owned)
            .collect();
        if token.is_empty() || user.is_empty() {
            return Err(format!(
                "line {}: expected token,user,uid[,\"groups\"], got {line:?}",
                i + 1
            ));
        }
        out.push(StaticToken {
            token: token.to_owned(),
            user: user.to_owned(),
            groups,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_bearer_tokens_authenticate() {
        let mut t = TokenTable::default();
        t.insert("abc", "admin");
        t.insert("def", "alice");
        assert_eq!(t.authenticate(Some("Bearer abc")).as_deref(), Some("admin"));
        assert_eq!(t.authenticate(Some("bearer def")).as_deref(), Some("alice"));
        assert_eq!(t.authenticate(Some("Bearer nope")), None);
        assert_eq!(t.authenticate(Some("Basic abc")), None);
        assert_eq!(t.authenticate(None), None);
        let issued = t
            .issue("system:serviceaccount:ns:sa", unix_now() + 600)
            .unwrap();
        let header = format!("Bearer {issued}");
        assert_eq!(
            t.authenticate(Some(&header)).as_deref(),
            Some("system:serviceaccount:ns:sa")
        );
        let expired = t.issue("x", unix_now() - 1).unwrap();
        assert_eq!(t.authenticate(Some(&format!("Bearer {expired}"))), None);
    }

    #[test]
    fn token_files_follow_the_kube_apiserver_format() {
        let t = parse_token_auth_file(
            "# comment\nabc,alice,1\n\ndef,system:serviceaccount:cnat:cnat,2,\"devs,ops\"\n",
        )
        .unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].user, "alice");
        assert!(t[0].groups.is_empty());
        assert_eq!(t[1].groups, ["devs", "ops"]);
        let e = parse_token_auth_file("ok,bob,1\njusttoken").unwrap_err();
        assert!(e.starts_with("line 2:"), "{e}");
    }
}
