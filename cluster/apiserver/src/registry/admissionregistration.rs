//! admissionregistration.k8s.io/v1 `ValidatingWebhookConfiguration` and
//! `MutatingWebhookConfiguration`: their defaults (`SetDefaults_*Webhook`, on every write) and
//! validation (`ValidateValidatingWebhookConfiguration`, ...) when they are written, the
//! [`WebhookConfigurationStrategy`] of kube-apiserver's
//! `pkg/registry/admissionregistration/{validating,mutating}webhookconfiguration/strategy.go`.
//! What the webhooks do to other writes is [`crate::admission`]'s.

use apimachinery::validation::FieldError;
use serde_json::{Value, json};

use crate::api::selectors::LabelSelector;
use crate::registry::resources::ResourceDef;
use crate::registry::strategy::Strategy;
use crate::webhook::endpoint::validate_client_config;

/// The API group of the webhook configurations.
pub const GROUP: &str = "admissionregistration.k8s.io";

/// The strategy of one of the two configuration kinds (see the module docs).
#[derive(Debug)]
pub struct WebhookConfigurationStrategy(pub Kind);

impl Strategy for WebhookConfigurationStrategy {
    fn set_defaults(&self, obj: &mut Value) {
        set_defaults(self.0.plural(), obj);
    }

    fn field_errors(
        &self,
        _def: &ResourceDef,
        obj: &Value,
        _old: Option<&Value>,
    ) -> Vec<FieldError> {
        validate(self.0.plural(), obj)
    }
}

fn str_list(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
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
