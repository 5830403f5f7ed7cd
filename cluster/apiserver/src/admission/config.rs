//! `ValidatingWebhookConfiguration` and `MutatingWebhookConfiguration`: defaults, validation and
//! the question "should this webhook see this request?".
//!
//! The objects are stored as sent (after [`set_defaults`]), like any other kind; this module reads
//! them as plain JSON into [`Webhook`]s when a write needs them. What mirrors what:
//!
//! * [`set_defaults`] is `admissionregistration/v1`'s `SetDefaults_*`: `failurePolicy: Fail`,
//!   `matchPolicy: Equivalent`, `namespaceSelector: {}`, `objectSelector: {}`,
//!   `timeoutSeconds: 10`, `reinvocationPolicy: Never` (mutating), `rules[].scope: "*"` and
//!   `clientConfig.service.port: 443`.
//! * [`validate`] is `ValidateValidatingWebhookConfiguration` / `...Mutating...` of
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

use apimachinery::validation::FieldError;
use serde_json::{Value, json};

use crate::api::selectors::LabelSelector;
pub use crate::webhook::endpoint::Endpoint;

/// Which of the two configuration kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `validatingwebhookconfigurations`: called in parallel after schema validation.
    Validating,
    /// `mutatingwebhookconfigurations`: called in order, before schema validation; may patch.
    Mutating,
}

impl Kind {
    /// The resource's plural name.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Validating => "validatingwebhookconfigurations",
            Kind::Mutating => "mutatingwebhookconfigurations",
        }
    }

    /// The store key the configurations live under.
    pub fn storage(self) -> String {
        format!("{GROUP}/{}", self.plural())
    }
}

/// The API group of both kinds.
pub const GROUP: &str = "admissionregistration.k8s.io";

/// One webhook of a configuration, with its defaults applied.
#[derive(Clone, Debug)]
pub struct Webhook {
    /// Validating or mutating.
    pub kind: Kind,
    /// The configuration's name.
    pub configuration: String,
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

/// Fills in the v1 defaults of a configuration about to be stored.
pub fn set_defaults(plural: &str, obj: &mut Value) {
    let mutating = plural == Kind::Mutating.plural();
    let Some(hooks) = obj.get_mut("webhooks").and_then(Value::as_array_mut) else {
        return;
    };
    for h in hooks.iter_mut().filter(|h| h.is_object()) {
        let defaults = [
            ("failurePolicy", json!("Fail")),
            ("matchPolicy", json!("Equivalent")),
            ("namespaceSelector", json!({})),
            ("objectSelector", json!({})),
            ("timeoutSeconds", json!(10)),
        ];
        for (k, v) in defaults {
            if h.get(k).is_none_or(Value::is_null) {
                h[k] = v;
            }
        }
        if mutating && h.get("reinvocationPolicy").is_none_or(Value::is_null) {
            h["reinvocationPolicy"] = json!("Never");
        }
        if let Some(rules) = h.get_mut("rules").and_then(Value::as_array_mut) {
            for r in rules.iter_mut().filter(|r| r.is_object()) {
                if r.get("scope").is_none_or(Value::is_null) {
                    r["scope"] = json!("*");
                }
            }
        }
        if let Some(svc) = h
            .get_mut("clientConfig")
            .and_then(|c| c.get_mut("service"))
            .filter(|s| s.is_object())
            && svc.get("port").is_none_or(Value::is_null)
        {
            svc["port"] = json!(443);
        }
    }
}

fn str_list(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// `ValidateValidatingWebhookConfiguration` / `ValidateMutatingWebhookConfiguration`: the
/// field errors of a configuration (after defaults).
pub fn validate(plural: &str, obj: &Value) -> Vec<FieldError> {
    let mutating = plural == Kind::Mutating.plural();
    let mut errs = vec![];
    let hooks = match &obj["webhooks"] {
        Value::Null => return errs,
        Value::Array(a) => a.as_slice(),
        other => {
            errs.push(FieldError::invalid_value(
                "webhooks",
                other,
                "must be a list",
            ));
            return errs;
        }
    };
    let mut seen: Vec<&str> = vec![];
    for (i, h) in hooks.iter().enumerate() {
        let p = format!("webhooks[{i}]");
        let name = h["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            errs.push(FieldError::required(format!("{p}.name"), ""));
        } else {
            if seen.contains(&name) {
                errs.push(FieldError::duplicate(format!("{p}.name"), &json!(name)));
            }
            seen.push(name);
            if name.split('.').count() < 3 {
                errs.push(FieldError::invalid(
                    format!("{p}.name"),
                    name,
                    "should be a domain with at least three segments separated by dots",
                ));
            } else {
                for m in apimachinery::validation::is_dns1123_subdomain(name) {
                    errs.push(FieldError::invalid(format!("{p}.name"), name, &m));
                }
            }
        }
        validate_client_config(&h["clientConfig"], &format!("{p}.clientConfig"), &mut errs);
        match &h["rules"] {
            Value::Null => {}
            Value::Array(rules) => {
                for (j, r) in rules.iter().enumerate() {
                    validate_rule(r, &format!("{p}.rules[{j}]"), &mut errs);
                }
            }
            other => errs.push(FieldError::invalid_value(
                format!("{p}.rules"),
                other,
                "must be a list",
            )),
        }
        enum_field(h, &p, "failurePolicy", &["Fail", "Ignore"], &mut errs);
        enum_field(h, &p, "matchPolicy", &["Exact", "Equivalent"], &mut errs);
        if mutating {
            enum_field(
                h,
                &p,
                "reinvocationPolicy",
                &["Never", "IfNeeded"],
                &mut errs,
            );
        }
        match h["sideEffects"].as_str() {
            None | Some("") => errs.push(FieldError::required(
                format!("{p}.sideEffects"),
                "must specify one of None, NoneOnDryRun",
            )),
            Some(s) if s != "None" && s != "NoneOnDryRun" => errs.push(FieldError::not_supported(
                format!("{p}.sideEffects"),
                s,
                &["None", "NoneOnDryRun"],
            )),
            Some(_) => {}
        }
        let versions = str_list(&h["admissionReviewVersions"]);
        if versions.is_empty() {
            errs.push(FieldError::required(
                format!("{p}.admissionReviewVersions"),
                "must specify one of v1, v1beta1",
            ));
        } else if !versions.iter().any(|v| *v == "v1" || *v == "v1beta1") {
            errs.push(FieldError::invalid_value(
                format!("{p}.admissionReviewVersions"),
                &h["admissionReviewVersions"],
                "must include at least one of v1, v1beta1",
            ));
        }
        if let Some(t) = h.get("timeoutSeconds").filter(|t| !t.is_null())
            && !t.as_i64().is_some_and(|t| (1..=30).contains(&t))
        {
            errs.push(FieldError::invalid_value(
                format!("{p}.timeoutSeconds"),
                t,
                "the timeout value must be between 1 and 30 seconds",
            ));
        }
        for sel in ["namespaceSelector", "objectSelector"] {
            if let Err(e) = LabelSelector::from_json(&h[sel]) {
                errs.push(FieldError::invalid_value(format!("{p}.{sel}"), &h[sel], &e));
            }
        }
    }
    errs
}

fn enum_field(h: &Value, p: &str, field: &str, allowed: &[&str], errs: &mut Vec<FieldError>) {
    if let Some(v) = h[field].as_str()
        && !allowed.contains(&v)
    {
        errs.push(FieldError::not_supported(
            format!("{p}.{field}"),
            v,
            allowed,
        ));
    }
}

pub(crate) fn validate_client_config(cc: &Value, p: &str, errs: &mut Vec<FieldError>) {
    let url = cc["url"].as_str();
    let svc = cc.get("service").filter(|s| !s.is_null());
    match (url, svc) {
        (Some(_), Some(_)) | (None, None) => errs.push(FieldError::required(
            p.to_owned(),
            "exactly one of url or service is required",
        )),
        (Some(u), None) => {
            if let Err(e) = check_url(u) {
                errs.push(FieldError::invalid(format!("{p}.url"), u, &e));
            }
        }
        (None, Some(s)) => {
            for f in ["namespace", "name"] {
                if s[f].as_str().is_none_or(str::is_empty) {
                    errs.push(FieldError::required(
                        format!("{p}.service.{f}"),
                        &format!("service {f} is required"),
                    ));
                }
            }
            if let Some(path) = s["path"].as_str()
                && !path.is_empty()
                && !path.starts_with('/')
            {
                errs.push(FieldError::invalid(
                    format!("{p}.service.path"),
                    path,
                    "must start with a '/'",
                ));
            }
            if let Some(port) = s.get("port").filter(|v| !v.is_null())
                && !port.as_i64().is_some_and(|n| (1..=65535).contains(&n))
            {
                errs.push(FieldError::invalid_value(
                    format!("{p}.service.port"),
                    port,
                    "port is not valid: must be between 1 and 65535, inclusive",
                ));
            }
        }
    }
    if let Some(ca) = cc.get("caBundle").filter(|v| !v.is_null())
        && decode_ca(ca).is_err()
    {
        errs.push(FieldError::invalid_value(
            format!("{p}.caBundle"),
            ca,
            "must be base64-encoded PEM",
        ));
    }
}

/// The checks `webhook.ValidateWebhookURL` makes (messages included).
fn check_url(u: &str) -> Result<(), String> {
    let Some(rest) = u.strip_prefix("https://") else {
        return Err("'https' is the only allowed URL scheme".into());
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() {
        return Err("host must be specified".into());
    }
    if authority.contains('@') {
        return Err("user information is not permitted in the URL".into());
    }
    if u.contains('#') {
        return Err("fragments are not permitted in the URL".into());
    }
    if u.contains('?') {
        return Err("query parameters are not permitted in the URL".into());
    }
    Ok(())
}

pub(crate) fn decode_ca(ca: &Value) -> Result<Vec<u8>, String> {
    use base64::Engine;
    let s = ca.as_str().ok_or("caBundle must be a base64 string")?;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| format!("caBundle is not base64: {e}"))
}

fn validate_rule(r: &Value, p: &str, errs: &mut Vec<FieldError>) {
    let ops = str_list(&r["operations"]);
    if ops.is_empty() {
        errs.push(FieldError::required(format!("{p}.operations"), ""));
    }
    if ops.len() > 1 && ops.contains(&"*") {
        errs.push(FieldError::invalid_value(
            format!("{p}.operations"),
            &r["operations"],
            "if '*' is present, must not specify other operations",
        ));
    }
    for (k, op) in ops.iter().enumerate() {
        if !["*", "CREATE", "UPDATE", "DELETE", "CONNECT"].contains(op) {
            errs.push(FieldError::not_supported(
                format!("{p}.operations[{k}]"),
                op,
                &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"],
            ));
        }
    }
    for (field, what) in [
        ("apiGroups", "resource rule must have at least one group"),
        (
            "apiVersions",
            "resource rule must have at least one version",
        ),
        ("resources", ""),
    ] {
        if str_list(&r[field]).is_empty() {
            errs.push(FieldError::required(format!("{p}.{field}"), what));
        }
    }
    for (k, v) in str_list(&r["apiVersions"]).iter().enumerate() {
        if v.is_empty() {
            errs.push(FieldError::required(
                format!("{p}.apiVersions[{k}]"),
                "version must not be empty",
            ));
        }
    }
    for (k, res) in str_list(&r["resources"]).iter().enumerate() {
        if res.is_empty() {
            errs.push(FieldError::required(format!("{p}.resources[{k}]"), ""));
        }
    }
    if let Some(s) = r["scope"].as_str()
        && !["*", "Cluster", "Namespaced"].contains(&s)
    {
        errs.push(FieldError::not_supported(
            format!("{p}.scope"),
            s,
            &["*", "Cluster", "Namespaced"],
        ));
    }
}

/// Reads the webhooks of one stored configuration (already defaulted and validated; fields
/// that are nonetheless missing take their defaults).
pub fn webhooks_of(kind: Kind, config: &Value) -> Vec<Webhook> {
    let configuration = config["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut out = vec![];
    for h in config["webhooks"].as_array().into_iter().flatten() {
        let cc = &h["clientConfig"];
        let endpoint = Endpoint::from_client_config(cc);
        let versions = str_list(&h["admissionReviewVersions"]);
        out.push(Webhook {
            kind,
            configuration: configuration.clone(),
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

    /// The URL messages quote (and, for a service, the address the certificate must name:
    /// `https://NAME.NAMESPACE.svc:PORT/PATH`).
    pub fn url(&self) -> String {
        self.endpoint.url()
    }
}

fn is_namespace(a: &RequestAttributes<'_>) -> bool {
    a.group.is_empty() && a.resource == "namespaces"
}

#[cfg(test)]
mod tests {
    use super::*;

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
