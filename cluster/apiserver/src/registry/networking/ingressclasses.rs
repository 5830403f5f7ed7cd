//! networking.k8s.io/v1 IngressClasses: what their strategy adds to the generic store, as
//! kube-apiserver's `pkg/registry/networking/ingressclass/strategy.go` does.
//!
//! Defaults (`SetDefaults_IngressClass`): a `spec.parameters` without a `scope` gets
//! `scope: Cluster`.
//!
//! Validation (`ValidateIngressClass`, `ValidateIngressClassUpdate`): `spec.controller` is
//! required, at most 250 characters, a domain-prefixed path (`example.com/ingress-nginx`), and
//! immutable; `spec.parameters` names a `kind` and a `name` (path segment names), an `apiGroup`
//! that is a DNS-1123 subdomain, a `scope` of `Cluster` or `Namespace`, and a `namespace`
//! exactly when the scope is `Namespace`.

use apimachinery::validation::{self as v, FieldError};
use serde_json::{Value, json};

use crate::registry::resources::ResourceDef;
use crate::registry::strategy::Strategy;
use crate::registry::validation::{is_valid_path_segment_name, str_at};

/// The strategy of `ingressclasses` (see the module docs).
#[derive(Debug, Default)]
pub struct IngressClassStrategy;

impl Strategy for IngressClassStrategy {
    fn set_defaults(&self, obj: &mut Value) {
        if let Some(params) = obj
            .pointer_mut("/spec/parameters")
            .and_then(Value::as_object_mut)
            && params.get("scope").is_none_or(Value::is_null)
        {
            params.insert("scope".into(), json!("Cluster"));
        }
    }

    fn field_errors(
        &self,
        _def: &ResourceDef,
        obj: &Value,
        old: Option<&Value>,
    ) -> Vec<FieldError> {
        let mut errs = vec![];
        if let Some(old) = old {
            let (now, before) = (
                str_at(&obj["spec"], "controller"),
                str_at(&old["spec"], "controller"),
            );
            if now != before {
                errs.push(FieldError::invalid(
                    "spec.controller",
                    now,
                    "field is immutable",
                ));
            }
        }
        errs.extend(validate_spec(&obj["spec"]));
        errs
    }
}

/// `IngressClass` controllers are at most this long (`maxLenIngressClassController`).
const MAX_CONTROLLER_LEN: usize = 250;

fn validate_spec(spec: &Value) -> Vec<FieldError> {
    let mut errs = vec![];
    let controller = str_at(spec, "controller");
    if controller.is_empty() {
        errs.push(FieldError::required("spec.controller", ""));
    } else {
        if controller.len() > MAX_CONTROLLER_LEN {
            errs.push(FieldError {
                reason: "FieldValueTooLong",
                field: "spec.controller".into(),
                message: format!("Too long: may not be more than {MAX_CONTROLLER_LEN} bytes"),
            });
        }
        errs.extend(domain_prefixed_path("spec.controller", controller));
    }
    if let Some(params) = spec.get("parameters").filter(|p| p.is_object()) {
        errs.extend(validate_parameters(params, "spec.parameters"));
    }
    errs
}

/// `validation.IsDomainPrefixedPath`: `<DNS-1123 subdomain>/<HTTP path>`.
fn domain_prefixed_path(field: &str, value: &str) -> Vec<FieldError> {
    let Some((host, path)) = value
        .split_once('/')
        .filter(|(h, p)| !h.is_empty() && !p.is_empty())
    else {
        return vec![FieldError::invalid(
            field,
            value,
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        )];
    };
    let mut errs: Vec<FieldError> = v::is_dns1123_subdomain(host)
        .iter()
        .map(|m| FieldError::invalid(field, host, m))
        .collect();
    let http_path_char = |c: char| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c);
    if !path.chars().all(http_path_char) {
        errs.push(FieldError::invalid(
            field,
            path,
            &v::regex_error("Invalid path", r"[A-Za-z0-9/\-._~%!$&'()*+,;=:]+", &[]),
        ));
    }
    errs
}

/// `validateIngressClassParametersReference`.
fn validate_parameters(params: &Value, at: &str) -> Vec<FieldError> {
    let mut errs = vec![];
    if let Some(group) = params["apiGroup"].as_str() {
        for m in v::is_dns1123_subdomain(group) {
            errs.push(FieldError::invalid(format!("{at}.apiGroup"), group, &m));
        }
    }
    for field in ["kind", "name"] {
        let value = str_at(params, field);
        if value.is_empty() {
            errs.push(FieldError::required(format!("{at}.{field}"), ""));
        } else {
            for m in is_valid_path_segment_name(value) {
                errs.push(FieldError::invalid(format!("{at}.{field}"), value, &m));
            }
        }
    }
    let Some(scope) = params["scope"].as_str() else {
        errs.push(FieldError::required(format!("{at}.scope"), ""));
        return errs;
    };
    let namespace = params["namespace"].as_str();
    match scope {
        "Namespace" => match namespace {
            None => errs.push(FieldError::required(
                format!("{at}.namespace"),
                "`parameters.scope` is set to 'Namespace'",
            )),
            Some(ns) => {
                for m in v::is_dns1123_label(ns) {
                    errs.push(FieldError::invalid(format!("{at}.namespace"), ns, &m));
                }
            }
        },
        "Cluster" => {
            if namespace.is_some() {
                errs.push(FieldError::forbidden(
                    format!("{at}.namespace"),
                    "`parameters.scope` is set to 'Cluster'",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            format!("{at}.scope"),
            other,
            &["Cluster", "Namespace"],
        )),
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::validation::kind_errors;

    fn errors(spec: Value) -> Vec<String> {
        kind_errors(
            "networking.k8s.io",
            "ingressclasses",
            json!({"metadata": {"name": "c"}, "spec": spec}),
        )
        .iter()
        .map(FieldError::full)
        .collect()
    }

    #[test]
    fn the_controller_is_a_required_domain_prefixed_path() {
        assert_eq!(errors(json!({})), ["spec.controller: Required value"]);
        assert_eq!(
            errors(json!({"controller": "nginx"})),
            [
                "spec.controller: Invalid value: \"nginx\": must be a domain-prefixed path (such as \"acme.io/foo\")"
            ]
        );
        assert!(errors(json!({"controller": "k8s.io/ingress-nginx"})).is_empty());
    }

    #[test]
    fn parameters_are_scoped_and_defaulted() {
        let mut obj =
            json!({"spec": {"controller": "a.io/b", "parameters": {"kind": "K", "name": "n"}}});
        IngressClassStrategy.set_defaults(&mut obj);
        assert_eq!(obj["spec"]["parameters"]["scope"], "Cluster");
        assert_eq!(
            errors(
                json!({"controller": "a.io/b", "parameters": {"kind": "K", "name": "n", "scope": "Namespace"}})
            ),
            ["spec.parameters.namespace: Required value: `parameters.scope` is set to 'Namespace'"]
        );
    }

    #[test]
    fn the_controller_is_immutable() {
        let def = crate::registry::resources::Registry::builtins()
            .lookup("networking.k8s.io", "v1", "ingressclasses")
            .unwrap();
        let old = json!({"spec": {"controller": "a.io/b"}});
        let new = json!({"spec": {"controller": "a.io/c"}});
        let errs = IngressClassStrategy.field_errors(&def, &new, Some(&old));
        assert_eq!(
            errs[0].full(),
            "spec.controller: Invalid value: \"a.io/c\": field is immutable"
        );
    }
}
