//! Authorization: users, groups, and RBAC enforcement.
//!
//! ## How a real API server decides
//!
//! After authentication says *who* is asking (a user name and groups), the authorizer decides
//! whether they may do *this*: a request becomes attributes — verb (`get`, `list`, `watch`,
//! `create`, `update`, `patch`, `delete`, `deletecollection`), API group, resource,
//! subresource, namespace and name — and the RBAC authorizer looks for one rule that allows
//! them. Rules live in four kinds of the `rbac.authorization.k8s.io/v1` group, stored like any
//! other object:
//!
//! * a **Role** (namespaced) or **ClusterRole** (cluster-wide) is a list of rules: `verbs`,
//!   `apiGroups`, `resources` (`ats`, `ats/status` for a subresource, `*/status`, `*`), optional
//!   `resourceNames`, and for ClusterRoles `nonResourceURLs` (`/metrics`, `/healthz/*`);
//! * a **RoleBinding** grants a Role or ClusterRole to *subjects* inside its namespace; a
//!   **ClusterRoleBinding** grants a ClusterRole everywhere, including cluster-scoped
//!   resources and requests across all namespaces.
//!
//! Subjects are users (`kind: User`), groups (`kind: Group`) or service accounts (`kind:
//! ServiceAccount`, `name` + `namespace`, which authenticate as the user
//! `system:serviceaccount:<namespace>:<name>` in the groups `system:serviceaccounts`,
//! `system:serviceaccounts:<namespace>` and, like every authenticated user,
//! `system:authenticated`). RBAC only ever allows; anything not allowed is denied with `403
//! Forbidden` and a message naming the user and the attributes:
//!
//! ```text
//! ats.cnat.programming-kubernetes.info "x" is forbidden: User "system:serviceaccount:cnat:cnat"
//!   cannot delete resource "ats" in API group "cnat.programming-kubernetes.info" in the namespace "cnat"
//! ```
//!
//! (`... at the cluster scope` when there is no namespace; a subresource is spelled
//! `ats/status`; a binding that names a missing role adds `: RBAC: role.rbac.authorization.k8s.io
//! "x" not found`). Members of `system:masters` bypass RBAC.
//!
//! ## What this server does
//!
//! Every token maps to a user ([`super::ApiServerBuilder::extra_token`],
//! [`super::ApiServerBuilder::service_account_token`], [`super::ApiServerBuilder::user_groups`]);
//! the bootstrap token is the user `admin` in `system:masters`, all-powerful. With
//! [`super::ApiServerBuilder::enforce_rbac`] (default off, as in a server started with
//! `--authorization-mode=AlwaysAllow`) every resource request and `/metrics` is authorized
//! against the RBAC objects stored at that moment, with the real matching rules above
//! ([`authorize`]). Discovery, OpenAPI, `/version` and health checks are open to
//! every authenticated user, as the default `system:discovery` and
//! `system:public-info-viewer` bindings make them in a real cluster. Left out: the bootstrap
//! roles a real cluster starts with (`cluster-admin`, `admin`, `edit`, `view`, `system:*`) are
//! not created, so bind only roles you load; ClusterRole aggregation (`aggregationRule`), the escalation checks on writing roles and bindings,
//! impersonation, and `SelfSubjectAccessReview` (so `kubectl auth can-i` is not served).
//! [`load_manifests`] reads RBAC (or any other) objects from YAML files such as
//! `artifacts/deploy/`, so a test can run a controller under its real ClusterRole and prove
//! the manifests are least privilege.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use sample_controller::apiserver::ApiServer;
//!
//! let server = ApiServer::builder()
//!     .enforce_rbac(true)
//!     .service_account_token("controller-token", "cnat", "cnat")
//!     .start()
//!     .await?;
//! server.load_manifests(r#"
//! apiVersion: rbac.authorization.k8s.io/v1
//! kind: ClusterRole
//! metadata: {name: at-controller}
//! rules: [{apiGroups: [cnat.programming-kubernetes.info], resources: [ats, ats/status], verbs: ["*"]}]
//! ---
//! apiVersion: rbac.authorization.k8s.io/v1
//! kind: ClusterRoleBinding
//! metadata: {name: at-controller}
//! roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: at-controller}
//! subjects: [{kind: ServiceAccount, name: cnat, namespace: cnat}]
//! "#)?;
//! // A client using "controller-token" may now manage ats everywhere, and nothing else.
//! server.shutdown().await;
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::query::Query;
use super::status::ApiError;
use super::store::{State, Store};
use super::verbs::{self, Target};

const GROUP: &str = "rbac.authorization.k8s.io";

/// The bootstrap user.
pub const ADMIN_USER: &str = "admin";

/// The group that bypasses authorization.
pub const MASTERS_GROUP: &str = "system:masters";

/// An authenticated user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    /// User name (`alice`, `system:serviceaccount:cnat:cnat`).
    pub name: String,
    /// Groups, including the derived ones.
    pub groups: Vec<String>,
}

/// What a request asks to do.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// Kubernetes verb (or the lower-cased HTTP method for non-resource paths).
    pub verb: String,
    /// API group (`""` for core).
    pub group: String,
    /// Resource plural; empty for a non-resource request.
    pub resource: String,
    /// Subresource (`status`, `scale`) or empty.
    pub subresource: String,
    /// Namespace, or empty at the cluster scope.
    pub namespace: String,
    /// Object name, or empty.
    pub name: String,
    /// URL path (non-resource requests).
    pub path: String,
}

impl Attributes {
    /// The attributes of a resource request. A list or watch whose field selector requires an
    /// exact `metadata.name` carries that name, so `resourceNames` rules can allow watching
    /// one object (as `RequestInfoFactory` does).
    pub fn for_request(verb: &str, t: &Target, field_selector: Option<&str>) -> Self {
        let mut a = Self::for_target(verb, t);
        if a.name.is_empty()
            && matches!(verb, "list" | "watch")
            && let Some(name) = field_selector.and_then(exact_name)
        {
            a.name = name;
        }
        a
    }

    /// The attributes of a resource request, from its URL alone.
    pub fn for_target(verb: &str, t: &Target) -> Self {
        Attributes {
            verb: verb.to_owned(),
            group: t.def.group.clone(),
            resource: t.def.plural.clone(),
            subresource: t.subresource.clone().unwrap_or_default(),
            namespace: if t.def.namespaced {
                t.namespace.clone().unwrap_or_default()
            } else {
                String::new()
            },
            name: t.name.clone().unwrap_or_default(),
            path: String::new(),
        }
    }
}

/// The name a field selector requires exactly (`metadata.name=x` or `metadata.name==x`,
/// alone or among other terms), parsed by the same [`FieldSelector`] the list verb uses. As in
/// `RequestInfoFactory`, a selector that does not parse names nothing (the list itself then
/// fails with `400`).
///
/// [`FieldSelector`]: super::logic::selectors::FieldSelector
fn exact_name(selector: &str) -> Option<String> {
    super::logic::selectors::FieldSelector::parse(selector)
        .ok()?
        .required_name()
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
}

/// Users' groups and whether RBAC is enforced.
#[derive(Clone, Debug, Default)]
pub struct Authorizer {
    enforce: bool,
    groups: HashMap<String, Vec<String>>,
}

impl Authorizer {
    /// An authorizer; `enforce: false` allows everything (like `AlwaysAllow`).
    pub fn new(enforce: bool, groups: HashMap<String, Vec<String>>) -> Self {
        Authorizer { enforce, groups }
    }

    /// Whether RBAC is enforced.
    pub fn enforced(&self) -> bool {
        self.enforce
    }

    /// The user a name authenticates as, with every group it belongs to.
    pub fn user(&self, name: &str) -> UserInfo {
        let mut groups: Vec<String> = self.groups.get(name).cloned().unwrap_or_default();
        if name == ADMIN_USER {
            groups.push(MASTERS_GROUP.into());
        }
        if let Some(rest) = name.strip_prefix("system:serviceaccount:")
            && let Some((ns, _)) = rest.split_once(':')
        {
            groups.push("system:serviceaccounts".into());
            groups.push(format!("system:serviceaccounts:{ns}"));
        }
        groups.push("system:authenticated".into());
        groups.dedup();
        UserInfo {
            name: name.to_owned(),
            groups,
        }
    }

    /// `Ok` if `user` may do `attrs` (or enforcement is off), else the 403 a real server sends.
    pub fn check(&self, store: &Store, user: &str, attrs: &Attributes) -> Result<(), ApiError> {
        if !self.enforce {
            return Ok(());
        }
        let user = self.user(user);
        let (allowed, reason) = store.read(|st| authorize(st, &user, attrs));
        if allowed {
            return Ok(());
        }
        tracing::debug!(user = %user.name, verb = %attrs.verb, resource = %attrs.resource, namespace = %attrs.namespace, "RBAC denied the request");
        Err(forbidden(&user, attrs, &reason))
    }
}

/// The RBAC decision for `user` doing `attrs` with the objects in `st`: `(allowed, reason)`,
/// where `reason` lists bindings whose roles are missing (as the real authorizer reports).
pub fn authorize(st: &State, user: &UserInfo, attrs: &Attributes) -> (bool, String) {
    if user.groups.iter().any(|g| g == MASTERS_GROUP) {
        return (true, String::new());
    }
    let mut errors: Vec<String> = vec![];
    let mut visit = |binding: &Value, binding_ns: &str| -> bool {
        if !subjects_match(binding, binding_ns, user) {
            return false;
        }
        let role_ref = &binding["roleRef"];
        let kind = role_ref["kind"].as_str().unwrap_or_default();
        let name = role_ref["name"].as_str().unwrap_or_default();
        let role = match kind {
            "ClusterRole" => st.get(&format!("{GROUP}/clusterroles"), "", name),
            "Role" => st.get(&format!("{GROUP}/roles"), binding_ns, name),
            _ => None,
        };
        let Some(role) = role else {
            let resource = if kind == "ClusterRole" {
                "clusterrole"
            } else {
                "role"
            };
            errors.push(format!("{resource}.{GROUP} \"{name}\" not found"));
            return false;
        };
        role["rules"]
            .as_array()
            .is_some_and(|rules| rules.iter().any(|r| rule_allows(r, attrs)))
    };
    for crb in st.list(&format!("{GROUP}/clusterrolebindings"), None) {
        if visit(crb, "") {
            return (true, String::new());
        }
    }
    if !attrs.namespace.is_empty() {
        for rb in st.list(&format!("{GROUP}/rolebindings"), Some(&attrs.namespace)) {
            if visit(rb, &attrs.namespace) {
                return (true, String::new());
            }
        }
    }
    let reason = match errors.len() {
        0 => String::new(),
        1 => format!("RBAC: {}", errors[0]),
        _ => format!("RBAC: [{}]", errors.join(", ")),
    };
    (false, reason)
}

fn subjects_match(binding: &Value, binding_ns: &str, user: &UserInfo) -> bool {
    binding["subjects"].as_array().is_some_and(|subjects| {
        subjects.iter().any(|s| {
            let name = s["name"].as_str().unwrap_or_default();
            match s["kind"].as_str().unwrap_or_default() {
                "User" => name == user.name,
                "Group" => user.groups.iter().any(|g| g == name),
                "ServiceAccount" => {
                    let ns = s["namespace"]
                        .as_str()
                        .filter(|n| !n.is_empty())
                        .unwrap_or(binding_ns);
                    user.name == format!("system:serviceaccount:{ns}:{name}")
                }
                _ => false,
            }
        })
    })
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// `RuleAllows` of the RBAC authorizer.
pub fn rule_allows(rule: &Value, attrs: &Attributes) -> bool {
    let verbs = strings(&rule["verbs"]);
    if !verbs.iter().any(|v| *v == "*" || *v == attrs.verb) {
        return false;
    }
    if attrs.resource.is_empty() {
        return strings(&rule["nonResourceURLs"]).iter().any(|u| {
            *u == "*"
                || *u == attrs.path
                || u.strip_suffix('*')
                    .is_some_and(|prefix| attrs.path.starts_with(prefix))
        });
    }
    if !strings(&rule["apiGroups"])
        .iter()
        .any(|g| *g == "*" || *g == attrs.group)
    {
        return false;
    }
    let combined = if attrs.subresource.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    let resource_ok = strings(&rule["resources"]).iter().any(|r| {
        *r == "*"
            || *r == combined
            || (!attrs.subresource.is_empty()
                && r.strip_prefix("*/") == Some(attrs.subresource.as_str()))
    });
    if !resource_ok {
        return false;
    }
    let names = strings(&rule["resourceNames"]);
    names.is_empty() || names.iter().any(|n| *n == attrs.name)
}

/// The 403 of `responsewriters.Forbidden`.
pub fn forbidden(user: &UserInfo, attrs: &Attributes, reason: &str) -> ApiError {
    let msg = if attrs.resource.is_empty() {
        format!(
            "User \"{}\" cannot {} path \"{}\"",
            user.name, attrs.verb, attrs.path
        )
    } else {
        let resource = if attrs.subresource.is_empty() {
            attrs.resource.clone()
        } else {
            format!("{}/{}", attrs.resource, attrs.subresource)
        };
        if attrs.namespace.is_empty() {
            format!(
                "User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" at the cluster scope",
                user.name, attrs.verb, attrs.group
            )
        } else {
            format!(
                "User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" in the namespace \"{}\"",
                user.name, attrs.verb, attrs.group, attrs.namespace
            )
        }
    };
    let why = if reason.is_empty() {
        msg
    } else {
        format!("{msg}: {reason}")
    };
    if attrs.resource.is_empty() {
        return ApiError::new(403, "Forbidden", format!("forbidden: {why}"));
    }
    ApiError::forbidden(&attrs.resource, &attrs.group, &attrs.name, &why)
}

/// Why manifests could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A document is not valid YAML or lacks `apiVersion`/`kind`.
    #[error("{origin}: document {index}: {message}")]
    Parse {
        /// File name or `<string>`.
        origin: String,
        /// 1-based document number.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// The server refused an object.
    #[error("{origin}: {kind} {name:?}: {error}")]
    Rejected {
        /// File name or `<string>`.
        origin: String,
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
        /// The server's answer.
        error: Box<ApiError>,
    },
}

/// Creates every object in a multi-document YAML string (any kind the server serves; an
/// object that already exists is replaced). Returns `Kind/name` of each object.
pub fn load_manifests(
    store: &Store,
    yaml: &str,
    origin: &str,
) -> Result<Vec<String>, ManifestError> {
    use serde::Deserialize;
    let mut out = vec![];
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(yaml).enumerate() {
        let parse_err = |message: String| ManifestError::Parse {
            origin: origin.to_owned(),
            index: i + 1,
            message,
        };
        let v = Value::deserialize(doc).map_err(|e| parse_err(e.to_string()))?;
        if v.is_null() {
            continue;
        }
        let api_version = v["apiVersion"]
            .as_str()
            .ok_or_else(|| parse_err("field apiVersion: required".into()))?
            .to_owned();
        let kind = v["kind"]
            .as_str()
            .ok_or_else(|| parse_err("field kind: required".into()))?
            .to_owned();
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let (group, version) = api_version
            .split_once('/')
            .unwrap_or(("", api_version.as_str()));
        let reject = |error: ApiError| ManifestError::Rejected {
            origin: origin.to_owned(),
            kind: kind.clone(),
            name: name.clone(),
            error: Box::new(error),
        };
        store.write(|st| {
            let def = st
                .registry
                .in_group_version(group, version)
                .into_iter()
                .find(|d| d.kind == kind)
                .ok_or_else(|| {
                    reject(
                        ApiError::not_found(&kind, group, &name).with_message(format!(
                            "no resource of kind {kind:?} is served in {api_version}"
                        )),
                    )
                })?;
            let namespace = if def.namespaced {
                Some(
                    v["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("default")
                        .to_owned(),
                )
            } else {
                None
            };
            let mut target = Target {
                def: def.clone(),
                namespace,
                name: None,
                subresource: None,
            };
            let exists = st
                .get(
                    &def.storage,
                    target.namespace.as_deref().unwrap_or_default(),
                    &name,
                )
                .cloned();
            let q = Query::parse(None);
            match exists {
                None => verbs::create(st, &target, v.clone(), &q).map_err(reject)?,
                Some(old) => {
                    target.name = Some(name.clone());
                    let mut new = v.clone();
                    new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
                    verbs::update(st, &target, new, &q).map_err(reject)?
                }
            };
            Ok::<(), ManifestError>(())
        })?;
        out.push(format!("{kind}/{name}"));
    }
    Ok(out)
}

/// [`load_manifests`] for a file, or for every `.yaml`/`.yml` file of a directory (sorted by
/// name, `kustomization.yaml` skipped).
pub fn load_manifest_path(store: &Store, path: &Path) -> Result<Vec<String>, ManifestError> {
    let read_err = |p: &Path, source| ManifestError::Read {
        path: p.display().to_string(),
        source,
    };
    let files: Vec<std::path::PathBuf> = if path.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(path)
            .map_err(|e| read_err(path, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                (name.ends_with(".yaml") || name.ends_with(".yml"))
                    && !name.starts_with("kustomization.")
            })
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_owned()]
    };
    let mut out = vec![];
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| read_err(&f, e))?;
        out.extend(load_manifests(store, &text, &f.display().to_string())?);
    }
    Ok(out)
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
    use serde_json::json;

    fn attrs(
        verb: &str,
        group: &str,
        resource: &str,
        sub: &str,
        ns: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
            path: String::new(),
        }
    }

    #[test]
    fn rules_match_verbs_groups_resources_subresources_and_names() {
        let rule = json!({"verbs": ["get", "update"], "apiGroups": ["cnat.programming-kubernetes.info"],
                          "resources": ["ats/status"]});
        let g = "cnat.programming-kubernetes.info";
        assert!(rule_allows(
            &rule,
            &attrs("update", g, "ats", "status", "ns", "x")
        ));
        assert!(!rule_allows(
            &rule,
            &attrs("update", g, "ats", "", "ns", "x")
        ));
        assert!(!rule_allows(
            &rule,
            &attrs("delete", g, "ats", "status", "ns", "x")
        ));
        assert!(!rule_allows(
            &rule,
            &attrs("update", "", "ats", "status", "ns", "x")
        ));
        let star = json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*/status"]});
        assert!(rule_allows(
            &star,
            &attrs("patch", "apps", "deployments", "status", "", "")
        ));
        assert!(!rule_allows(
            &star,
            &attrs("patch", "apps", "deployments", "", "", "")
        ));
        let named = json!({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"],
                           "resourceNames": ["one"]});
        assert!(rule_allows(
            &named,
            &attrs("get", "", "configmaps", "", "ns", "one")
        ));
        assert!(!rule_allows(
            &named,
            &attrs("get", "", "configmaps", "", "ns", "two")
        ));
        assert!(!rule_allows(
            &named,
            &attrs("list", "", "configmaps", "", "ns", "")
        ));
        let urls = json!({"verbs": ["get"], "nonResourceURLs": ["/metrics", "/healthz/*"]});
        let mut a = attrs("get", "", "", "", "", "");
        a.path = "/metrics".into();
        assert!(rule_allows(&urls, &a));
        a.path = "/healthz/etcd".into();
        assert!(rule_allows(&urls, &a));
        a.path = "/version".into();
        assert!(!rule_allows(&urls, &a));
    }

    #[test]
    fn service_accounts_get_their_groups_and_admin_is_a_master() {
        let az = Authorizer::new(true, HashMap::from([("bob".into(), vec!["devs".into()])]));
        let sa = az.user("system:serviceaccount:cnat:controller");
        assert_eq!(
            sa.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:cnat",
                "system:authenticated"
            ]
        );
        assert_eq!(az.user("bob").groups, ["devs", "system:authenticated"]);
        assert!(
            az.user(ADMIN_USER)
                .groups
                .contains(&MASTERS_GROUP.to_owned())
        );
    }

    #[test]
    fn an_exact_name_field_selector_names_the_object() {
        assert_eq!(exact_name("metadata.name=web").as_deref(), Some("web"));
        assert_eq!(
            exact_name("status.phase=Running,metadata.name==web").as_deref(),
            Some("web")
        );
        assert_eq!(exact_name("metadata.name!=web"), None);
        assert_eq!(exact_name("status.phase=Running"), None);
        assert_eq!(exact_name("metadata.name="), None);
        assert_eq!(exact_name(r"metadata.name=a\,b").as_deref(), Some("a,b"));
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

    #[test]
    fn forbidden_messages_have_the_upstream_shape() {
        let u = UserInfo {
            name: "alice".into(),
            groups: vec![],
        };
        let e = forbidden(&u, &attrs("list", "", "pods", "", "default", ""), "");
        assert_eq!(
            e.message,
            "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        );
        let e = forbidden(&u, &attrs("update", "g.io", "ats", "status", "", "x"), "");
        assert_eq!(
            e.message,
            "ats.g.io \"x\" is forbidden: User \"alice\" cannot update resource \"ats/status\" in API group \"g.io\" at the cluster scope"
        );
        assert_eq!(e.to_status()["details"]["kind"], "ats");
    }
}
