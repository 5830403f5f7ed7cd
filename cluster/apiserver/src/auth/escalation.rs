//! RBAC's escalation checks: a user may create or update a Role, ClusterRole or binding only
//! with rules they already hold themselves (or with the `escalate` / `bind` verb), as
//! kube-apiserver's `pkg/registry/rbac/validation` does (`ConfirmNoEscalation`, `Covers`,
//! `BreakdownRule`, `CompactRules`). The RBAC resources' strategy calls
//! [`confirm_no_escalation`] on every write.

use serde_json::{Value, json};

use crate::api::status::ApiError;
use crate::auth::rbac::{Attributes, MASTERS_GROUP, UserInfo, authorize, rules_for, strings};
use crate::storage::store::State;

fn has(set: &[&str], x: &str) -> bool {
    set.contains(&x)
}

fn has_all(set: &[&str], xs: &[&str]) -> bool {
    xs.iter().all(|x| has(set, x))
}

/// `resourceCoversAll`.
fn resource_covers_all(set: &[&str], covers: &[&str]) -> bool {
    if has(set, "*") || has_all(set, covers) {
        return true;
    }
    covers.iter().all(|path| {
        has(set, path)
            || path
                .split_once('/')
                .is_some_and(|(_, sub)| has(set, &format!("*/{sub}")))
    })
}

/// `nonResourceURLsCoversAll`.
fn non_resource_urls_cover_all(set: &[&str], covers: &[&str]) -> bool {
    covers.iter().all(|path| {
        set.iter().any(|owner| {
            owner == path
                || owner
                    .strip_suffix('*')
                    .is_some_and(|p| path.starts_with(p.trim_end_matches('*')))
        })
    })
}

/// `ruleCovers`: whether a held rule covers a broken-down rule.
fn rule_covers(owner: &Value, sub: &Value) -> bool {
    let ov = strings(&owner["verbs"]);
    let og = strings(&owner["apiGroups"]);
    let on = strings(&owner["resourceNames"]);
    let sn = strings(&sub["resourceNames"]);
    let verbs = has(&ov, "*") || has_all(&ov, &strings(&sub["verbs"]));
    let groups = has(&og, "*") || has_all(&og, &strings(&sub["apiGroups"]));
    let resources = resource_covers_all(&strings(&owner["resources"]), &strings(&sub["resources"]));
    let urls = non_resource_urls_cover_all(
        &strings(&owner["nonResourceURLs"]),
        &strings(&sub["nonResourceURLs"]),
    );
    let names = if sn.is_empty() {
        on.is_empty()
    } else {
        on.is_empty() || has_all(&on, &sn)
    };
    verbs && groups && resources && names && urls
}

/// `BreakdownRule`: one rule per group × resource × verb (× name), and per URL × verb.
fn breakdown(rule: &Value) -> Vec<Value> {
    let mut out = vec![];
    let verbs = strings(&rule["verbs"]);
    let names = strings(&rule["resourceNames"]);
    for g in strings(&rule["apiGroups"]) {
        for r in strings(&rule["resources"]) {
            for v in &verbs {
                if names.is_empty() {
                    out.push(json!({"apiGroups": [g], "resources": [r], "verbs": [v]}));
                } else {
                    for n in &names {
                        out.push(json!({"apiGroups": [g], "resources": [r], "verbs": [v], "resourceNames": [n]}));
                    }
                }
            }
        }
    }
    for u in strings(&rule["nonResourceURLs"]) {
        for v in &verbs {
            out.push(json!({"nonResourceURLs": [u], "verbs": [v]}));
        }
    }
    out
}

/// `Covers`: whether `owner` rules cover every rule of `servant`, and the broken-down rules
/// that are not covered.
pub fn covers(owner: &[Value], servant: &[Value]) -> (bool, Vec<Value>) {
    let missing: Vec<Value> = servant
        .iter()
        .flat_map(breakdown)
        .filter(|sub| !owner.iter().any(|o| rule_covers(o, sub)))
        .collect();
    (missing.is_empty(), missing)
}

/// `CompactRules`: broken-down resource rules that differ only in their verbs become one.
fn compact(rules: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = vec![];
    for r in rules {
        let simple = r.get("resourceNames").is_none() && r.get("nonResourceURLs").is_none();
        if simple
            && let Some(existing) = out.iter_mut().find(|e| {
                e.get("resourceNames").is_none()
                    && e.get("nonResourceURLs").is_none()
                    && e["apiGroups"] == r["apiGroups"]
                    && e["resources"] == r["resources"]
            })
        {
            let verb = r["verbs"][0].clone();
            if let Some(vs) = existing["verbs"].as_array_mut()
                && !vs.contains(&verb)
            {
                vs.push(verb);
            }
            continue;
        }
        out.push(r);
    }
    out
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn go_string_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items
        .iter()
        .map(|s| apimachinery::validation::go_quote(s))
        .collect();
    format!("[{}]", quoted.join(" "))
}

/// `rbacv1helpers.CompactString`.
fn compact_string(r: &Value) -> String {
    let mut parts = vec![];
    for (field, label) in [
        ("apiGroups", "APIGroups"),
        ("resources", "Resources"),
        ("nonResourceURLs", "NonResourceURLs"),
        ("resourceNames", "ResourceNames"),
        ("verbs", "Verbs"),
    ] {
        let v = strings(&r[field]);
        if !v.is_empty() {
            parts.push(format!("{label}:{}", go_string_list(&v)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

/// The rules of a binding's `roleRef` in `namespace` (`GetRoleReferenceRules`).
fn role_reference_rules<Reg>(
    st: &State<Reg>,
    role_ref: &Value,
    namespace: &str,
) -> Result<Vec<Value>, String> {
    let name = role_ref["name"].as_str().unwrap_or_default();
    let (storage, ns, what) = match role_ref["kind"].as_str().unwrap_or_default() {
        "Role" => ("rbac.authorization.k8s.io/roles", namespace, "role"),
        _ => ("rbac.authorization.k8s.io/clusterroles", "", "clusterrole"),
    };
    match st.get(storage, ns, name) {
        Some(role) => Ok(role["rules"].as_array().cloned().unwrap_or_default()),
        None => Err(format!(
            "{what}.rbac.authorization.k8s.io \"{name}\" not found"
        )),
    }
}

/// `ConfirmNoEscalation` plus the `escalate` / `bind` exemptions, for a create or update of a
/// role or binding (`plural` in `rbac.authorization.k8s.io`) named `name` in `namespace`.
/// `Ok` for every other resource.
pub fn confirm_no_escalation<Reg>(
    st: &State<Reg>,
    user: &UserInfo,
    plural: &str,
    namespace: &str,
    obj: &Value,
) -> Result<(), ApiError> {
    const GROUP: &str = "rbac.authorization.k8s.io";
    if user.groups.iter().any(|g| g == MASTERS_GROUP) {
        return Ok(());
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let attrs = |verb: &str, resource: &str, name: &str| Attributes {
        verb: verb.into(),
        group: GROUP.into(),
        resource: resource.into(),
        namespace: namespace.into(),
        name: name.into(),
        resource_request: true,
        ..Default::default()
    };
    let rules = match plural {
        "roles" | "clusterroles" => {
            if authorize(st, user, &attrs("escalate", plural, name)).0 {
                return Ok(());
            }
            if plural == "clusterroles" && obj["aggregationRule"].is_object() {
                // The aggregated rules are not known yet: only full authority may aggregate.
                let full = [
                    json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
                    json!({"verbs": ["*"], "nonResourceURLs": ["*"]}),
                ];
                let held = rules_for(st, user, namespace);
                if !covers(&held.rules, &full).0 {
                    return Err(ApiError::forbidden(
                        plural,
                        GROUP,
                        name,
                        "must have cluster-admin privileges to use the aggregationRule",
                    ));
                }
            }
            obj["rules"].as_array().cloned().unwrap_or_default()
        }
        "rolebindings" | "clusterrolebindings" => {
            let role_ref = &obj["roleRef"];
            let ref_resource = if role_ref["kind"] == "Role" {
                "roles"
            } else {
                "clusterroles"
            };
            let ref_name = role_ref["name"].as_str().unwrap_or_default();
            if authorize(st, user, &attrs("bind", ref_resource, ref_name)).0 {
                return Ok(());
            }
            role_reference_rules(st, role_ref, namespace)
                .map_err(|e| ApiError::forbidden(plural, GROUP, name, &e))?
        }
        _ => return Ok(()),
    };
    let held = rules_for(st, user, namespace);
    let (ok, missing) = covers(&held.rules, &rules);
    if ok {
        return Ok(());
    }
    let mut lines: Vec<String> = compact(missing).iter().map(compact_string).collect();
    lines.sort();
    lines.dedup();
    let groups: Vec<&str> = user.groups.iter().map(String::as_str).collect();
    let mut msg = format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        apimachinery::validation::go_quote(&user.name),
        go_string_list(&groups),
        lines.join("\n")
    );
    if let Some(e) = held.evaluation_error() {
        msg.push_str(&format!("; resolution errors: [{e}]"));
    }
    Err(ApiError::forbidden(plural, GROUP, name, &msg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn covers_breaks_rules_down_and_honours_wildcards() {
        let owner = vec![
            json!({"apiGroups": [""], "resources": ["pods", "*/status"], "verbs": ["get", "list"]}),
            json!({"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web"], "verbs": ["*"]}),
            json!({"nonResourceURLs": ["/healthz/*"], "verbs": ["get"]}),
        ];
        let ok = [
            json!({"apiGroups": [""], "resources": ["pods", "services/status"], "verbs": ["get"]}),
            json!({"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web"], "verbs": ["delete"]}),
            json!({"nonResourceURLs": ["/healthz/ping"], "verbs": ["get"]}),
        ];
        assert_eq!(covers(&owner, &ok), (true, vec![]));
        let (held, missing) = covers(
            &owner,
            &[
                json!({"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get", "watch"]}),
                json!({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}),
            ],
        );
        assert!(!held);
        let lines: Vec<String> = compact(missing).iter().map(compact_string).collect();
        assert_eq!(
            lines,
            vec![
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["watch"]}"#,
                r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get" "watch"]}"#,
                r#"{APIGroups:["apps"], Resources:["deployments"], Verbs:["get"]}"#,
            ]
        );
    }
}
