//! `ValidatingWebhookConfiguration` and `MutatingWebhookConfiguration`: defaults, validation and
//! the question "should this webhook see this request?".
//!
//! The objects are stored as sent (after [`crate::registry::admissionregistration::set_defaults`]), like any other kind; this module reads
//! them as plain JSON into [`Webhook`]s when a write needs them. What mirrors what:
//!
//! * [`crate::registry::admissionregistration::set_defaults`] is `admissionregistration/v1`'s `SetDefaults_*`: `failurePolicy: Fail`,
//!   `matchPolicy: Equivalent`, `namespaceSelector: {}`, `objectSelector: {}`,
//!   `timeoutSeconds: 10`, `reinvocationPolicy: Never` (mutating), `rules[].scope: "*"` and
//!   `clientConfig.service.port: 443`.
//! * [`crate::registry::admissionregistration::validate`] is `ValidateValidatingWebhookConfiguration` / `...Mutating...` of
//!   `pkg/apis/admissionregistration/validation`, with its messages: a name of at least three
//!   dot-separated segments, unique in the configuration; exactly one of `url` or `service`;
//!   an `https` URL without query, fragment or user; rules with operations, groups, versions,
//!   resources and a known scope; `sideEffects` one of `None` / `NoneOnDryRun`;
//!   `admissionReviewVersions` including `v1` or `v1beta1`; `timeoutSeconds` in 1..=30.
//! * [`Webhook::matches_rules`] is `rules.Matcher` (`pkg/admission/plugin/webhook/predicates/rules`),
//!   and [`Webhook::matches_selectors`] the namespace and object matchers beside it.
//!
//! The configurations are read in name order and their webhooks in list order, the order the
//! real server calls mutating webhooks in.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api::selectors::LabelSelector;
pub use crate::registry::admissionregistration::Kind;
pub use crate::webhook::endpoint::{Endpoint, decode_ca};

/// One webhook of a configuration, with its defaults applied.
#[derive(Clone, Debug)]
pub struct Webhook {
    /// Validating or mutating.
    pub kind: Kind,
    /// `webhooks[].name` (what messages quote).
    pub name: String,
    /// `clientConfig`.
    pub endpoint: Endpoint,
    /// `clientConfig.caBundle`, decoded from base64 (PEM); empty means the system roots.
    pub ca_bundle: Vec<u8>,
    /// `rules`.
    pub rules: Vec<Value>,
    /// `failurePolicy: Ignore`.
    pub ignore_failures: bool,
    /// `matchPolicy: Equivalent`.
    pub equivalent: bool,
    /// `namespaceSelector`.
    pub namespace_selector: Value,
    /// `objectSelector`.
    pub object_selector: Value,
    /// `sideEffects`.
    pub side_effects: String,
    /// `timeoutSeconds`.
    pub timeout_seconds: u64,
    /// The AdmissionReview version sent (the first of `admissionReviewVersions` this server
    /// speaks: `v1` or `v1beta1`, which have the same shape).
    pub review_version: String,
    /// `reinvocationPolicy: IfNeeded` (mutating only).
    pub reinvoke_if_needed: bool,
}

/// What a request is, for rule matching.
#[derive(Clone, Debug)]
pub struct RequestAttributes<'a> {
    /// `CREATE`, `UPDATE`, `DELETE`.
    pub operation: &'a str,
    /// Group of the resource.
    pub group: &'a str,
    /// Version of the resource.
    pub version: &'a str,
    /// Plural resource.
    pub resource: &'a str,
    /// Subresource, or empty.
    pub subresource: &'a str,
    /// Namespace, or empty for cluster-scoped objects (for a namespace: its own name).
    pub namespace: &'a str,
}

fn str_list(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Reads the webhooks of one stored configuration (already defaulted and validated; fields
/// that are nonetheless missing take their defaults).
pub fn webhooks_of(kind: Kind, config: &Value) -> Vec<Webhook> {
    let mut out = vec![];
    for h in config["webhooks"].as_array().into_iter().flatten() {
        let cc = &h["clientConfig"];
        let endpoint = Endpoint::from_client_config(cc);
        let versions = str_list(&h["admissionReviewVersions"]);
        out.push(Webhook {
            kind,
            name: h["name"].as_str().unwrap_or_default().to_owned(),
            endpoint,
            ca_bundle: cc
                .get("caBundle")
                .map(|c| decode_ca(c).unwrap_or_default())
                .unwrap_or_default(),
            rules: h["rules"].as_array().cloned().unwrap_or_default(),
            ignore_failures: h["failurePolicy"].as_str() == Some("Ignore"),
            equivalent: h["matchPolicy"].as_str() != Some("Exact"),
            namespace_selector: h["namespaceSelector"].clone(),
            object_selector: h["objectSelector"].clone(),
            side_effects: h["sideEffects"].as_str().unwrap_or_default().to_owned(),
            timeout_seconds: h["timeoutSeconds"].as_u64().unwrap_or(10).clamp(1, 30),
            review_version: versions
                .iter()
                .find(|v| **v == "v1" || **v == "v1beta1")
                .map_or("v1", |v| v)
                .to_owned(),
            reinvoke_if_needed: h["reinvocationPolicy"].as_str() == Some("IfNeeded"),
        });
    }
    out
}

fn exact_or_wildcard(items: &Value, requested: &str) -> bool {
    str_list(items).iter().any(|i| *i == "*" || *i == requested)
}

impl Webhook {
    /// `rules.Matcher`: does any rule name this operation, group, version, resource (and
    /// subresource) and scope? `*` matches every main resource, `*/*` every resource and
    /// subresource, `pods/*` every subresource of pods, `*/status` every status subresource.
    pub fn matches_rules(&self, a: &RequestAttributes<'_>) -> bool {
        self.rules.iter().any(|r| {
            let scope_ok = match r["scope"].as_str().unwrap_or("*") {
                "*" => true,
                "Namespaced" => !is_namespace(a) && !a.namespace.is_empty(),
                "Cluster" => is_namespace(a) || a.namespace.is_empty(),
                _ => false,
            };
            let op_ok = str_list(&r["operations"])
                .iter()
                .any(|o| *o == "*" || *o == a.operation);
            let res_ok = str_list(&r["resources"]).iter().any(|res| {
                let (res, sub) = res.split_once('/').unwrap_or((res, ""));
                (res == "*" || res == a.resource) && (sub == "*" || sub == a.subresource)
            });
            scope_ok
                && op_ok
                && exact_or_wildcard(&r["apiGroups"], a.group)
                && exact_or_wildcard(&r["apiVersions"], a.version)
                && res_ok
        })
    }

    /// The namespace matcher, then the object matcher. `namespace_labels` are the labels of
    /// the request's namespace (for a namespace itself, its own labels; `None` for a
    /// cluster-scoped object, which a namespace selector never exempts). The object selector
    /// matches if either the new or the old object carries matching labels.
    pub fn matches_selectors(
        &self,
        namespace_labels: Option<&BTreeMap<String, String>>,
        object: Option<&Value>,
        old_object: Option<&Value>,
    ) -> Result<bool, String> {
        if let Some(labels) = namespace_labels {
            let sel = LabelSelector::from_json(&self.namespace_selector)?;
            if !sel.is_empty() && !sel.matches(labels) {
                return Ok(false);
            }
        }
        let sel = LabelSelector::from_json(&self.object_selector)?;
        if sel.is_empty() {
            return Ok(true);
        }
        let hit = |o: Option<&Value>| {
            o.is_some_and(|o| sel.matches(&crate::api::object_meta::labels_of(o)))
        };
        Ok(hit(object) || hit(old_object))
    }
}

fn is_namespace(a: &RequestAttributes<'_>) -> bool {
    a.group.is_empty() && a.resource == "namespaces"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::admissionregistration::{set_defaults, validate};
    use apimachinery::validation::FieldError;
    use serde_json::json;

    fn hook(rules: Value) -> Webhook {
        let mut cfg = json!({"metadata": {"name": "c"}, "webhooks": [{
            "name": "a.b.c", "clientConfig": {"url": "https://x/"}, "rules": rules,
            "sideEffects": "None", "admissionReviewVersions": ["v1"]}]});
        set_defaults("validatingwebhookconfigurations", &mut cfg);
        webhooks_of(Kind::Validating, &cfg).remove(0)
    }

    fn attrs<'a>(op: &'a str, res: &'a str, sub: &'a str, ns: &'a str) -> RequestAttributes<'a> {
        RequestAttributes {
            operation: op,
            group: "cnat.programming-kubernetes.info",
            version: "v1alpha1",
            resource: res,
            subresource: sub,
            namespace: ns,
        }
    }

    #[test]
    fn defaults_are_the_v1_defaults() {
        let mut cfg = json!({"webhooks": [{"name": "a.b.c",
            "clientConfig": {"service": {"namespace": "n", "name": "s"}}, "rules": [{}]}]});
        set_defaults("mutatingwebhookconfigurations", &mut cfg);
        let h = &cfg["webhooks"][0];
        assert_eq!(h["failurePolicy"], "Fail");
        assert_eq!(h["matchPolicy"], "Equivalent");
        assert_eq!(h["timeoutSeconds"], 10);
        assert_eq!(h["reinvocationPolicy"], "Never");
        assert_eq!(h["rules"][0]["scope"], "*");
        assert_eq!(h["clientConfig"]["service"]["port"], 443);
    }

    #[test]
    fn rules_match_like_the_real_matcher() {
        let h = hook(json!([{"operations": ["CREATE", "UPDATE"],
            "apiGroups": ["cnat.programming-kubernetes.info"], "apiVersions": ["*"], "resources": ["ats"]}]));
        assert!(h.matches_rules(&attrs("CREATE", "ats", "", "default")));
        assert!(!h.matches_rules(&attrs("DELETE", "ats", "", "default")));
        assert!(!h.matches_rules(&attrs("UPDATE", "ats", "status", "default")));
        let star = hook(
            json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"],
            "resources": ["*/status"], "scope": "Cluster"}]),
        );
        assert!(star.matches_rules(&attrs("UPDATE", "ats", "status", "")));
        assert!(!star.matches_rules(&attrs("UPDATE", "ats", "status", "default")));
        assert!(!star.matches_rules(&attrs("UPDATE", "ats", "", "")));
        let all = hook(
            json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"],
            "resources": ["*"], "scope": "Namespaced"}]),
        );
        assert!(all.matches_rules(&attrs("CREATE", "ats", "", "default")));
        assert!(!all.matches_rules(&attrs("CREATE", "ats", "scale", "default")));
    }

    #[test]
    fn validation_uses_the_real_messages() {
        let cfg = json!({"webhooks": [
            {"name": "short", "clientConfig": {"url": "http://x/"}, "sideEffects": "Some",
             "admissionReviewVersions": ["v2"], "timeoutSeconds": 31},
            {"name": "a.b.c", "clientConfig": {}, "rules": [{"operations": []}]}]});
        let msgs: Vec<String> = validate("validatingwebhookconfigurations", &cfg)
            .iter()
            .map(FieldError::full)
            .collect();
        let want = [
            "webhooks[0].name: Invalid value: \"short\": should be a domain with at least three segments separated by dots",
            "webhooks[0].clientConfig.url: Invalid value: \"http://x/\": 'https' is the only allowed URL scheme",
            "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\"",
            "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds",
            "webhooks[1].clientConfig: Required value: exactly one of url or service is required",
            "webhooks[1].rules[0].operations: Required value",
            "webhooks[1].sideEffects: Required value: must specify one of None, NoneOnDryRun",
        ];
        for w in want {
            assert!(msgs.iter().any(|m| m == w), "missing {w:?} in {msgs:#?}");
        }
    }

    #[test]
    fn selectors_use_namespace_and_either_object() {
        let mut h = hook(json!([]));
        h.namespace_selector = json!({"matchLabels": {"team": "a"}});
        h.object_selector =
            json!({"matchExpressions": [{"key": "skip", "operator": "DoesNotExist"}]});
        let team_a: BTreeMap<String, String> = [("team".to_owned(), "a".to_owned())].into();
        let plain = json!({"metadata": {"labels": {}}});
        let skipped = json!({"metadata": {"labels": {"skip": "yes"}}});
        assert_eq!(
            h.matches_selectors(Some(&team_a), Some(&plain), None),
            Ok(true)
        );
        assert_eq!(
            h.matches_selectors(Some(&BTreeMap::new()), Some(&plain), None),
            Ok(false)
        );
        assert_eq!(h.matches_selectors(None, Some(&skipped), None), Ok(false));
        assert_eq!(
            h.matches_selectors(None, Some(&skipped), Some(&plain)),
            Ok(true)
        );
    }
}
