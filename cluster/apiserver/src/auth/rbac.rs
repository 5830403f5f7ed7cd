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
//! Every token maps to a user ([`crate::ApiServerBuilder::extra_token`],
//! [`crate::ApiServerBuilder::service_account_token`], [`crate::ApiServerBuilder::user_groups`]);
//! the bootstrap token is the user `admin` in `system:masters`, all-powerful. With
//! [`crate::ApiServerBuilder::enforce_rbac`] (default off, as in a server started with
//! `--authorization-mode=AlwaysAllow`) every resource request and `/metrics` is authorized
//! against the RBAC objects stored at that moment, with the real matching rules above
//! ([`authorize`]), as the user the request acts as after impersonation
//! ([`crate::filters::impersonation`]). Discovery, OpenAPI, `/version` and health checks are open to
//! every authenticated user.
//!
//! A real cluster starts with bootstrap roles and bindings, and so does this server: a start
//! stores `cluster-admin`, `admin`, `edit`, `view`, the `system:aggregate-to-*` roles and the
//! discovery roles with their bindings ([`crate::server::bootstrap`]), so `admin`, `edit` and `view`
//! can be bound as on a cluster. Four bootstrap ClusterRoleBindings are also built in, for
//! stores seeded without them (a test's own [`Store`]): `cluster-admin` (everything, for
//! `system:masters`), `system:basic-user` (create `selfsubjectaccessreviews` and
//! `selfsubjectrulesreviews`), `system:discovery` and `system:public-info-viewer` (GET on
//! `/api`, `/apis`, `/openapi`, `/version`, health checks), the last three for
//! `system:authenticated`; a stored ClusterRoleBinding with one of those names replaces the
//! built-in one. The `system:controller:*` roles are not created.
//!
//! The same decisions answer `kubectl auth can-i`: [`Authorizer::decide`] serves access
//! reviews and [`Authorizer::rules_for`] rules reviews ([`crate::endpoints::access_review`]). An allowed decision
//! carries the real reason, `RBAC: allowed by ClusterRoleBinding "x" of ClusterRole "y" to
//! User "alice"` (`RoleBinding "x/ns" of Role "y" to ServiceAccount "cnat/cnat"` for a
//! namespaced grant); members of `system:masters` are allowed with an empty reason by the
//! privileged-group authorizer that runs first; with enforcement off every decision is "allowed"
//! and every rules list is `*`, which is what the server then does.
//!
//! ## Privilege escalation prevention
//!
//! As in kube-apiserver's `registry/rbac` and `rbac/validation`, with RBAC enforced a user can
//! only hand out what it holds ([`crate::auth::escalation::confirm_no_escalation`], run on every create and update of a
//! role or binding):
//!
//! * writing a **Role/ClusterRole** needs every rule it grants to be *covered* by the writer's
//!   own rules in that namespace (`Covers`: each rule broken down into one verb × group ×
//!   resource × name, each covered by some held rule, with `*`, `*/subresource` and `/path*`
//!   wildcards), unless the writer may `escalate` on `roles`/`clusterroles`;
//! * writing a **RoleBinding/ClusterRoleBinding** needs the referenced role's rules covered,
//!   unless the writer may `bind` that role (`resourceNames` may name it); a binding to a role
//!   that does not exist is refused unless `bind` allows it;
//! * members of `system:masters` are exempt.
//!
//! A refusal is `403 Forbidden` with the real text: `clusterroles.rbac.authorization.k8s.io
//! "x" is forbidden: user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC
//! permissions not currently held:` followed by one `{APIGroups:[""], Resources:["secrets"],
//! Verbs:["get"]}` line per missing permission (sorted; rules differing only in verbs merged).
//! Since access reviews and impersonation are decided by the same rules, what a user cannot
//! grant itself it can neither be reported as holding nor impersonate its way into.
//!
//! A ClusterRole with an `aggregationRule` needs full authority (`*` on everything) to write,
//! as on the real server. Left out: the aggregation itself (the controller that fills in the
//! aggregated rules).
//!
//! [`crate::server::manifests::load_manifests`] reads RBAC (or any other) objects from YAML files such as
//! `artifacts/deploy/`, so a test can run a controller under its real ClusterRole and prove
//! the manifests are least privilege.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use embedded_apiserver::ApiServer;
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

use serde_json::{Value, json};

use crate::api::status::ApiError;
use crate::storage::store::{State, Store};

const GROUP: &str = "rbac.authorization.k8s.io";

/// The bootstrap user.
pub const ADMIN_USER: &str = "admin";

/// The group that bypasses authorization.
pub const MASTERS_GROUP: &str = "system:masters";

pub use crate::api::user::UserInfo;

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
    /// A request for a resource (`true`) or for a non-resource path such as `/metrics`.
    pub resource_request: bool,
}

/// The name a field selector requires exactly (`metadata.name=x` or `metadata.name==x`,
/// alone or among other terms), parsed by the same [`FieldSelector`] the list verb uses. As in
/// `RequestInfoFactory`, a selector that does not parse names nothing (the list itself then
/// fails with `400`).
///
/// [`FieldSelector`]: crate::api::selectors::FieldSelector
pub fn exact_name(selector: &str) -> Option<String> {
    crate::api::selectors::FieldSelector::parse(selector)
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

    /// The user of a client certificate: `name` (its common name) in `groups` (its
    /// organizations), the groups configured for the name, and `system:authenticated`. Unlike
    /// [`Self::user`], no group comes from the name itself (a certificate for `admin` is not
    /// the bootstrap token's user).
    pub fn certificate_user(&self, name: &str, groups: &[String]) -> UserInfo {
        let mut all: Vec<String> = self.groups.get(name).cloned().unwrap_or_default();
        for g in groups {
            if !all.contains(g) {
                all.push(g.clone());
            }
        }
        if !all.iter().any(|g| g == "system:authenticated") {
            all.push("system:authenticated".into());
        }
        UserInfo {
            name: name.to_owned(),
            groups: all,
        }
    }

    /// `Ok` if `user` may do `attrs` (or enforcement is off), else the 403 a real server sends.
    pub fn check<Reg>(
        &self,
        store: &Store<Reg>,
        user: &UserInfo,
        attrs: &Attributes,
    ) -> Result<(), ApiError> {
        if !self.enforce {
            return Ok(());
        }
        let (allowed, reason) = store.read(|st| authorize(st, user, attrs));
        if allowed {
            return Ok(());
        }
        tracing::debug!(user = %user.name, verb = %attrs.verb, resource = %attrs.resource, namespace = %attrs.namespace, "RBAC denied the request");
        Err(forbidden(user, attrs, &reason))
    }

    /// The decision for `user` doing `attrs`, as an access review reports it: with enforcement
    /// off every request is allowed with no reason (the `AlwaysAllow` authorizer), otherwise
    /// [`authorize`] decides.
    pub fn decide<Reg>(&self, st: &State<Reg>, user: &UserInfo, attrs: &Attributes) -> Decision {
        if !self.enforce {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        let (allowed, reason) = authorize(st, user, attrs);
        Decision { allowed, reason }
    }

    /// Every rule that applies to `user` in `namespace`, as a rules review reports them: with
    /// enforcement off, `*` for every resource and every path (what `AlwaysAllow` reports),
    /// otherwise [`rules_for`].
    pub fn rules_for<Reg>(&self, st: &State<Reg>, user: &UserInfo, namespace: &str) -> Rules {
        if !self.enforce {
            return Rules {
                rules: vec![
                    json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
                    json!({"verbs": ["*"], "nonResourceURLs": ["*"]}),
                ],
                errors: vec![],
            };
        }
        rules_for(st, user, namespace)
    }
}

/// An authorization decision with the authorizer's reason (`RBAC: allowed by ...`, or on a
/// denial the bindings whose roles are missing; empty when there is nothing to say).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request is allowed.
    pub allowed: bool,
    /// Why, in the real authorizer's words.
    pub reason: String,
}

/// The rules that apply to a user in a namespace, and the roles that could not be resolved.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rules {
    /// PolicyRules (`verbs`, `apiGroups`, `resources`, `resourceNames`, `nonResourceURLs`), in
    /// the order the bindings were visited: cluster-wide first, then the namespace's.
    pub rules: Vec<Value>,
    /// One message per binding whose role is missing.
    pub errors: Vec<String>,
}

impl Rules {
    /// The errors joined as Go's `utilerrors.NewAggregate(...).Error()` joins them (`None`
    /// without errors).
    pub fn evaluation_error(&self) -> Option<String> {
        aggregate(&self.errors)
    }
}

fn aggregate(errors: &[String]) -> Option<String> {
    match errors {
        [] => None,
        [one] => Some(one.clone()),
        many => Some(format!("[{}]", many.join(", "))),
    }
}

/// A ClusterRoleBinding every real cluster is bootstrapped with, whose effect this server
/// builds in (see the module docs): its name, its ClusterRole's name and rules, and the groups
/// it binds.
struct BootstrapBinding {
    name: &'static str,
    groups: &'static [&'static str],
    rules: fn() -> Vec<Value>,
}

/// `cluster-admin` (for `system:masters`), `system:basic-user`, `system:discovery` and
/// `system:public-info-viewer`, as in `plugin/pkg/auth/authorizer/rbac/bootstrappolicy`
/// (limited to what this server serves).
const BOOTSTRAP: &[BootstrapBinding] = &[
    BootstrapBinding {
        name: "cluster-admin",
        groups: &[MASTERS_GROUP],
        rules: || {
            vec![
                json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
                json!({"verbs": ["*"], "nonResourceURLs": ["*"]}),
            ]
        },
    },
    BootstrapBinding {
        name: "system:basic-user",
        groups: &["system:authenticated"],
        rules: || {
            vec![
                json!({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
                        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]}),
            ]
        },
    },
    BootstrapBinding {
        name: "system:discovery",
        groups: &["system:authenticated"],
        rules: || {
            vec![json!({"verbs": ["get"], "nonResourceURLs": [
                "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
                "/openapi/*", "/readyz", "/version", "/version/"]})]
        },
    },
    BootstrapBinding {
        name: "system:public-info-viewer",
        groups: &["system:authenticated", "system:unauthenticated"],
        rules: || {
            vec![json!({"verbs": ["get"], "nonResourceURLs": [
                "/healthz", "/livez", "/readyz", "/version", "/version/"]})]
        },
    },
];

/// `describeSubject` of the RBAC rule resolver: `User "alice"`, `Group "devs"`,
/// `ServiceAccount "cnat/cnat"` (name/namespace).
fn describe_subject(subject: &Value, binding_ns: &str) -> String {
    let kind = subject["kind"].as_str().unwrap_or_default();
    let name = subject["name"].as_str().unwrap_or_default();
    if kind == "ServiceAccount" {
        let ns = subject["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or(binding_ns);
        return format!("{kind} \"{name}/{ns}\"");
    }
    format!("{kind} \"{name}\"")
}

/// Visits every rule that applies to `user` in `namespace`, in the order of the real rule
/// resolver (`VisitRulesFor`): ClusterRoleBindings (the stored ones, then the built-in bootstrap
/// bindings not overridden by a stored one of the same name), then the namespace's
/// RoleBindings. `visit(source, rule)` returns `false` to stop; a binding whose role is missing
/// adds a message to `errors` instead.
fn visit_rules<Reg>(
    st: &State<Reg>,
    user: &UserInfo,
    namespace: &str,
    errors: &mut Vec<String>,
    visit: &mut dyn FnMut(&dyn Fn() -> String, &Value) -> bool,
) {
    let crbs = st.list(&format!("{GROUP}/clusterrolebindings"), None);
    for crb in &crbs {
        if !visit_binding(st, user, crb, "", errors, visit) {
            return;
        }
    }
    for boot in BOOTSTRAP {
        if crbs.iter().any(|c| c["metadata"]["name"] == boot.name) {
            continue;
        }
        let Some(group) = boot
            .groups
            .iter()
            .find(|g| user.groups.iter().any(|ug| ug == *g))
        else {
            continue;
        };
        let describe = || {
            format!(
                "ClusterRoleBinding \"{0}\" of ClusterRole \"{0}\" to Group \"{group}\"",
                boot.name
            )
        };
        for rule in (boot.rules)() {
            if !visit(&describe, &rule) {
                return;
            }
        }
    }
    if !namespace.is_empty() {
        for rb in st.list(&format!("{GROUP}/rolebindings"), Some(namespace)) {
            if !visit_binding(st, user, rb, namespace, errors, visit) {
                return;
            }
        }
    }
}

/// One binding of [`visit_rules`]: nothing when `user` is not among its subjects, an error
/// when its role is missing, else each rule of the role. Returns `false` when `visit` stopped.
fn visit_binding<Reg>(
    st: &State<Reg>,
    user: &UserInfo,
    b: &Value,
    binding_ns: &str,
    errors: &mut Vec<String>,
    visit: &mut dyn FnMut(&dyn Fn() -> String, &Value) -> bool,
) -> bool {
    let Some(subject) = matching_subject(b, binding_ns, user) else {
        return true;
    };
    let role_ref = &b["roleRef"];
    let kind = role_ref["kind"].as_str().unwrap_or_default();
    let name = role_ref["name"].as_str().unwrap_or_default();
    let role = match kind {
        "ClusterRole" => st.get(&format!("{GROUP}/clusterroles"), "", name),
        "Role" => st.get(&format!("{GROUP}/roles"), binding_ns, name),
        _ => {
            errors.push(format!("unsupported role reference kind: \"{kind}\""));
            return true;
        }
    };
    let Some(role) = role else {
        let resource = if kind == "ClusterRole" {
            "clusterrole"
        } else {
            "role"
        };
        errors.push(format!("{resource}.{GROUP} \"{name}\" not found"));
        return true;
    };
    let describe = || {
        let binding_name = b["metadata"]["name"].as_str().unwrap_or_default();
        if binding_ns.is_empty() {
            format!(
                "ClusterRoleBinding \"{binding_name}\" of {kind} \"{name}\" to {}",
                describe_subject(subject, "")
            )
        } else {
            format!(
                "RoleBinding \"{binding_name}/{binding_ns}\" of {kind} \"{name}\" to {}",
                describe_subject(subject, binding_ns)
            )
        }
    };
    let rules = role["rules"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    rules.iter().all(|r| visit(&describe, r))
}

/// Every rule that applies to `user` in `namespace` (`RulesFor` of the RBAC rule resolver):
/// the rules of every matching ClusterRoleBinding, then of every matching RoleBinding in
/// `namespace`, plus the missing roles as errors.
pub fn rules_for<Reg>(st: &State<Reg>, user: &UserInfo, namespace: &str) -> Rules {
    let mut out = Rules::default();
    let mut rules = vec![];
    visit_rules(st, user, namespace, &mut out.errors, &mut |_, rule| {
        rules.push(rule.clone());
        true
    });
    out.rules = rules;
    out
}

/// The RBAC decision for `user` doing `attrs` with the objects in `st`: `(allowed, reason)`.
/// Members of `system:masters` are allowed with an empty reason (the privileged-group
/// authorizer that runs before RBAC); otherwise the first rule that allows gives the reason
/// `RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to User "u"`, and a denial's
/// reason lists the bindings whose roles are missing (empty when none are).
pub fn authorize<Reg>(st: &State<Reg>, user: &UserInfo, attrs: &Attributes) -> (bool, String) {
    if user.groups.iter().any(|g| g == MASTERS_GROUP) {
        return (true, String::new());
    }
    let mut errors: Vec<String> = vec![];
    let mut allowed_by: Option<String> = None;
    visit_rules(
        st,
        user,
        &attrs.namespace,
        &mut errors,
        &mut |describe, rule| {
            if rule_allows(rule, attrs) {
                allowed_by = Some(format!("RBAC: allowed by {}", describe()));
                return false;
            }
            true
        },
    );
    if let Some(reason) = allowed_by {
        return (true, reason);
    }
    let reason = aggregate(&errors)
        .map(|e| format!("RBAC: {e}"))
        .unwrap_or_default();
    (false, reason)
}

/// The first subject of `binding` that `user` is (`appliesTo` of the rule resolver).
fn matching_subject<'b>(
    binding: &'b Value,
    binding_ns: &str,
    user: &UserInfo,
) -> Option<&'b Value> {
    binding["subjects"].as_array().and_then(|subjects| {
        subjects.iter().find(|s| {
            let name = s["name"].as_str().unwrap_or_default();
            match s["kind"].as_str().unwrap_or_default() {
                "User" => name == user.name,
                "Group" => user.groups.iter().any(|g| g == name),
                "ServiceAccount" => {
                    let ns = s["namespace"]
                        .as_str()
                        .filter(|n| !n.is_empty())
                        .unwrap_or(binding_ns);
                    !ns.is_empty() && user.name == format!("system:serviceaccount:{ns}:{name}")
                }
                _ => false,
            }
        })
    })
}

pub(crate) fn strings(v: &Value) -> Vec<&str> {
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
    if !attrs.resource_request {
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
    let msg = if !attrs.resource_request {
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
    if !attrs.resource_request {
        return ApiError::new(403, "Forbidden", format!("forbidden: {why}"));
    }
    ApiError::forbidden(&attrs.resource, &attrs.group, &attrs.name, &why)
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
            resource_request: true,
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
        a.resource_request = false;
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

    fn policy_store() -> crate::registry::Store {
        let store = crate::registry::Store::new(100);
        store.write(|st| {
            st.update(
                &format!("{GROUP}/clusterroles"),
                json!({"metadata": {"name": "at-reader"}, "rules": [
                    {"apiGroups": ["cnat.programming-kubernetes.info"], "resources": ["ats"],
                     "verbs": ["get", "list"]}]}),
            );
            st.update(
                &format!("{GROUP}/clusterrolebindings"),
                json!({"metadata": {"name": "alice-reads"},
                       "roleRef": {"kind": "ClusterRole", "name": "at-reader"},
                       "subjects": [{"kind": "User", "name": "alice"}]}),
            );
            st.update(
                &format!("{GROUP}/rolebindings"),
                json!({"metadata": {"name": "sa-reads", "namespace": "cnat"},
                       "roleRef": {"kind": "ClusterRole", "name": "at-reader"},
                       "subjects": [{"kind": "ServiceAccount", "name": "cnat"}]}),
            );
            st.update(
                &format!("{GROUP}/rolebindings"),
                json!({"metadata": {"name": "ghost", "namespace": "cnat"},
                       "roleRef": {"kind": "Role", "name": "ghost"},
                       "subjects": [{"kind": "User", "name": "alice"}]}),
            );
        });
        store
    }

    #[test]
    fn allowed_decisions_name_the_binding_that_allowed_them() {
        let store = policy_store();
        let az = Authorizer::new(true, HashMap::new());
        let g = "cnat.programming-kubernetes.info";
        store.read(|st| {
            let alice = az.user("alice");
            assert_eq!(
                az.decide(st, &alice, &attrs("list", g, "ats", "", "default", "")),
                Decision {
                    allowed: true,
                    reason: "RBAC: allowed by ClusterRoleBinding \"alice-reads\" of ClusterRole \"at-reader\" to User \"alice\"".into()
                }
            );
            let sa = az.user("system:serviceaccount:cnat:cnat");
            assert_eq!(
                az.decide(st, &sa, &attrs("get", g, "ats", "", "cnat", "x")).reason,
                "RBAC: allowed by RoleBinding \"sa-reads/cnat\" of ClusterRole \"at-reader\" to ServiceAccount \"cnat/cnat\""
            );
            // Outside its namespace the binding does not apply.
            assert!(!az.decide(st, &sa, &attrs("get", g, "ats", "", "default", "x")).allowed);
            // A denial reports the missing role of a binding that applied.
            assert_eq!(
                az.decide(st, &alice, &attrs("delete", g, "ats", "", "cnat", "x")),
                Decision {
                    allowed: false,
                    reason: "RBAC: role.rbac.authorization.k8s.io \"ghost\" not found".into()
                }
            );
            // Masters: allowed before RBAC is consulted, without a reason.
            let admin = az.user(ADMIN_USER);
            assert_eq!(
                az.decide(st, &admin, &attrs("delete", "", "nodes", "", "", "n")),
                Decision {
                    allowed: true,
                    reason: String::new()
                }
            );
            // Not enforced: everything, for everyone.
            let open = Authorizer::new(false, HashMap::new());
            assert!(open.decide(st, &alice, &attrs("delete", "", "nodes", "", "", "")).allowed);
        });
    }

    #[test]
    fn bootstrap_bindings_grant_reviews_and_discovery_unless_overridden() {
        let store = policy_store();
        let az = Authorizer::new(true, HashMap::new());
        let review = attrs(
            "create",
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            "",
            "",
            "",
        );
        let mut discovery = attrs("get", "", "", "", "", "");
        discovery.resource_request = false;
        discovery.path = "/apis/apps/v1".into();
        let bob = az.user("bob");
        store.read(|st| {
            assert_eq!(
                az.decide(st, &bob, &review).reason,
                "RBAC: allowed by ClusterRoleBinding \"system:basic-user\" of ClusterRole \"system:basic-user\" to Group \"system:authenticated\""
            );
            assert!(az.decide(st, &bob, &discovery).allowed);
            // A subject given without system:authenticated (a SubjectAccessReview) has neither.
            let bare = UserInfo {
                name: "bob".into(),
                groups: vec![],
            };
            assert!(!az.decide(st, &bare, &review).allowed);
        });
        // A stored binding of the same name replaces the built-in one.
        store.write(|st| {
            st.update(
                &format!("{GROUP}/clusterrolebindings"),
                json!({"metadata": {"name": "system:basic-user"},
                       "roleRef": {"kind": "ClusterRole", "name": "at-reader"},
                       "subjects": [{"kind": "Group", "name": "nobody"}]}),
            );
        });
        store.read(|st| assert!(!az.decide(st, &bob, &review).allowed));
    }

    #[test]
    fn rules_for_collects_cluster_then_namespace_rules_and_missing_roles() {
        let store = policy_store();
        let az = Authorizer::new(true, HashMap::new());
        store.read(|st| {
            let alice = az.user("alice");
            let r = az.rules_for(st, &alice, "cnat");
            assert_eq!(r.rules[0]["resources"], json!(["ats"]));
            assert!(r.rules.iter().any(|rule| rule["resources"]
                == json!(["selfsubjectaccessreviews", "selfsubjectrulesreviews"])));
            assert_eq!(
                r.evaluation_error().as_deref(),
                Some("role.rbac.authorization.k8s.io \"ghost\" not found")
            );
            assert_eq!(az.rules_for(st, &alice, "default").evaluation_error(), None);
            let admin = az.user(ADMIN_USER);
            assert!(
                az.rules_for(st, &admin, "default")
                    .rules
                    .contains(&json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}))
            );
            let open = Authorizer::new(false, HashMap::new());
            assert_eq!(open.rules_for(st, &alice, "default").rules.len(), 2);
        });
    }
}
