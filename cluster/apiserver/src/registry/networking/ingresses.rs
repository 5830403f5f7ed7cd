//! networking.k8s.io/v1 Ingresses: what their strategy adds to the generic store, as
//! kube-apiserver's `pkg/registry/networking/ingress/strategy.go` does.
//!
//! Validation (`ValidateIngressCreate`, `ValidateIngressUpdate`, in
//! `pkg/apis/networking/validation`), with the real messages:
//!
//! * the spec needs a `defaultBackend` or `rules` (`spec: Invalid value:
//!   []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified`);
//! * a rule's `host` is a DNS-1123 subdomain (or `*.` and one), never an IP address; an `http`
//!   rule has `paths`;
//! * each path has a `pathType` (`Required value: pathType must be specified`), one of `Exact`,
//!   `Prefix`, `ImplementationSpecific`; an `Exact` or `Prefix` path is absolute and holds no
//!   `//`, `/./`, `/../`, `%2f` and does not end in `/..` or `/.`;
//! * a backend is a `service` or a `resource`, not both and not neither; a service backend has
//!   a `name` (a DNS-1035 label) and a `port` with a `name` (an IANA port name) or a `number`
//!   (1-65535), not both (`cannot set both port name & port number`) and not neither (`port
//!   name or number is required`); a resource backend has a `kind` and a `name`;
//! * TLS `hosts` are DNS-1123 subdomains (wildcards allowed), `secretName` a valid Secret name;
//! * `ingressClassName` is a DNS-1123 subdomain and, on create, agrees with a
//!   `kubernetes.io/ingress.class` annotation;
//! * `/status`: each `status.loadBalancer.ingress[]` has a valid `ip` or a DNS `hostname`.
//!
//! No ingress controller runs here, so nothing fills `status.loadBalancer` (kubectl's ADDRESS
//! column stays empty) until a client writes it through `/status`.

use std::net::IpAddr;

use apimachinery::validation::{self as v, FieldError};
use serde_json::Value;

use crate::registry::resources::ResourceDef;
use crate::registry::strategy::Strategy;
use crate::registry::validation::{
    is_dns1035_label, is_valid_path_segment_name, is_valid_port_name, is_valid_port_num, str_at,
};

/// The strategy of `ingresses` (see the module docs).
#[derive(Debug, Default)]
pub struct IngressStrategy;

const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

impl Strategy for IngressStrategy {
    fn field_errors(
        &self,
        _def: &ResourceDef,
        obj: &Value,
        old: Option<&Value>,
    ) -> Vec<FieldError> {
        let mut errs = validate_spec(&obj["spec"]);
        if old.is_none()
            && let Some(annotation) = obj["metadata"]["annotations"][CLASS_ANNOTATION].as_str()
            && let Some(class) = obj["spec"]["ingressClassName"].as_str()
            && annotation != class
        {
            errs.push(FieldError::invalid(
                format!("annotations.{CLASS_ANNOTATION}"),
                annotation,
                "must match `ingressClassName` when both are specified",
            ));
        }
        errs.extend(validate_load_balancer(
            &obj["status"]["loadBalancer"],
            "status.loadBalancer",
        ));
        errs
    }
}

fn items(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// `ValidateIngressSpec`.
fn validate_spec(spec: &Value) -> Vec<FieldError> {
    let mut errs = vec![];
    let rules = items(&spec["rules"]);
    let backend = spec.get("defaultBackend").filter(|b| !b.is_null());
    if rules.is_empty() && backend.is_none() {
        let shown = go_struct_slice("networking.IngressRule", spec.get("rules"));
        errs.push(FieldError {
            reason: "FieldValueInvalid",
            field: "spec".into(),
            message: format!(
                "Invalid value: {shown}: either `defaultBackend` or `rules` must be specified"
            ),
        });
    }
    if let Some(b) = backend {
        errs.extend(validate_backend(b, "spec.defaultBackend"));
    }
    for (i, rule) in rules.iter().enumerate() {
        errs.extend(validate_rule(rule, &format!("spec.rules[{i}]")));
    }
    for (t, tls) in items(&spec["tls"]).iter().enumerate() {
        for (i, host) in items(&tls["hosts"]).iter().enumerate() {
            let host = host.as_str().unwrap_or_default();
            let at = format!("spec.tls[{t}].hosts[{i}]");
            errs.extend(
                host_errors(host)
                    .iter()
                    .map(|m| FieldError::invalid(at.as_str(), host, m)),
            );
        }
        let secret = str_at(tls, "secretName");
        if !secret.is_empty() {
            for m in v::is_dns1123_subdomain(secret) {
                errs.push(FieldError::invalid(
                    format!("spec.tls[{t}].secretName"),
                    secret,
                    &m,
                ));
            }
        }
    }
    if let Some(class) = spec["ingressClassName"].as_str() {
        for m in v::is_dns1123_subdomain(class) {
            errs.push(FieldError::invalid("spec.ingressClassName", class, &m));
        }
    }
    errs
}

/// How Go's `%#v` shows a slice of structs: `[]T(nil)` when absent, `[]T{}` when empty.
fn go_struct_slice(type_name: &str, value: Option<&Value>) -> String {
    match value.and_then(Value::as_array) {
        None => format!("[]{type_name}(nil)"),
        Some(_) => format!("[]{type_name}{{}}"),
    }
}

/// A DNS-1123 subdomain, or a wildcard one (`*.example.com`).
fn host_errors(host: &str) -> Vec<String> {
    if !host.contains('*') {
        return v::is_dns1123_subdomain(host);
    }
    let mut errs = vec![];
    if host.len() > 253 {
        errs.push(v::max_len_error(253));
    }
    let ok = host
        .strip_prefix("*.")
        .is_some_and(|rest| v::is_dns1123_subdomain(rest).is_empty());
    if !ok {
        errs.push(v::regex_error(
            "a wildcard DNS-1123 subdomain must start with '*.', followed by a valid DNS subdomain, which must consist of lower case alphanumeric characters, '-' or '.' and end with an alphanumeric character",
            r"\*\.[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
            &["*.example.com"],
        ));
    }
    errs
}

/// `validateIngressRules` for one rule.
fn validate_rule(rule: &Value, at: &str) -> Vec<FieldError> {
    let mut errs = vec![];
    let host = str_at(rule, "host");
    if !host.is_empty() {
        if host.parse::<IpAddr>().is_ok() {
            errs.push(FieldError::invalid(
                format!("{at}.host"),
                host,
                "must be a DNS name, not an IP address",
            ));
        }
        for m in host_errors(host) {
            errs.push(FieldError::invalid(format!("{at}.host"), host, &m));
        }
    }
    if let Some(http) = rule.get("http").filter(|h| h.is_object()) {
        let paths = items(&http["paths"]);
        if paths.is_empty() {
            errs.push(FieldError::required(format!("{at}.http.paths"), ""));
        }
        for (i, p) in paths.iter().enumerate() {
            errs.extend(validate_path(p, &format!("{at}.http.paths[{i}]")));
        }
    }
    errs
}

/// `validateHTTPIngressPath`.
fn validate_path(p: &Value, at: &str) -> Vec<FieldError> {
    let mut errs = vec![];
    let Some(path_type) = p["pathType"].as_str() else {
        return vec![FieldError::required(
            format!("{at}.pathType"),
            "pathType must be specified",
        )];
    };
    let path = str_at(p, "path");
    match path_type {
        "Exact" | "Prefix" => {
            if !path.starts_with('/') {
                errs.push(FieldError::invalid(
                    format!("{at}.path"),
                    path,
                    "must be an absolute path",
                ));
            }
            for seq in ["//", "/./", "/../", "%2f", "%2F"] {
                if path.contains(seq) {
                    errs.push(FieldError::invalid(
                        format!("{at}.path"),
                        path,
                        &format!("must not contain '{seq}'"),
                    ));
                }
            }
            for suffix in ["/..", "/."] {
                if path.ends_with(suffix) {
                    errs.push(FieldError::invalid(
                        format!("{at}.path"),
                        path,
                        &format!("cannot end with '{suffix}'"),
                    ));
                }
            }
        }
        "ImplementationSpecific" => {
            if !path.is_empty() && !path.starts_with('/') {
                errs.push(FieldError::invalid(
                    format!("{at}.path"),
                    path,
                    "must be an absolute path",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            format!("{at}.pathType"),
            other,
            &["Exact", "ImplementationSpecific", "Prefix"],
        )),
    }
    errs.extend(validate_backend(&p["backend"], &format!("{at}.backend")));
    errs
}

/// `validateIngressBackend`.
fn validate_backend(backend: &Value, at: &str) -> Vec<FieldError> {
    let resource = backend.get("resource").filter(|r| !r.is_null());
    let service = backend.get("service").filter(|s| !s.is_null());
    let mut errs = vec![];
    match (resource, service) {
        (Some(_), Some(_)) => errs.push(FieldError::invalid(
            at,
            "",
            "cannot set both resource and service backends",
        )),
        (Some(r), None) => {
            if let Some(group) = r["apiGroup"].as_str() {
                for m in v::is_dns1123_subdomain(group) {
                    errs.push(FieldError::invalid(
                        format!("{at}.resource.apiGroup"),
                        group,
                        &m,
                    ));
                }
            }
            for field in ["kind", "name"] {
                let value = str_at(r, field);
                if value.is_empty() {
                    errs.push(FieldError::required(format!("{at}.resource.{field}"), ""));
                } else {
                    for m in is_valid_path_segment_name(value) {
                        errs.push(FieldError::invalid(
                            format!("{at}.resource.{field}"),
                            value,
                            &m,
                        ));
                    }
                }
            }
        }
        (None, Some(s)) => {
            let name = str_at(s, "name");
            if name.is_empty() {
                errs.push(FieldError::required(format!("{at}.service.name"), ""));
            } else {
                for m in is_dns1035_label(name) {
                    errs.push(FieldError::invalid(format!("{at}.service.name"), name, &m));
                }
            }
            let port_name = str_at(&s["port"], "name");
            let number = s["port"]["number"].as_i64().unwrap_or(0);
            match (port_name.is_empty(), number == 0) {
                (false, false) => errs.push(FieldError::invalid(
                    at,
                    "",
                    "cannot set both port name & port number",
                )),
                (false, true) => {
                    for m in is_valid_port_name(port_name) {
                        errs.push(FieldError::invalid(
                            format!("{at}.service.port.name"),
                            port_name,
                            &m,
                        ));
                    }
                }
                (true, false) => {
                    for m in is_valid_port_num(number) {
                        errs.push(FieldError::invalid_value(
                            format!("{at}.service.port.number"),
                            &Value::from(number),
                            &m,
                        ));
                    }
                }
                (true, true) => {
                    errs.push(FieldError::required(at, "port name or number is required"))
                }
            }
        }
        (None, None) => errs.push(FieldError::invalid(
            at,
            "",
            "resource or service backend is required",
        )),
    }
    errs
}

/// `ValidateIngressLoadBalancerStatus`.
fn validate_load_balancer(lb: &Value, at: &str) -> Vec<FieldError> {
    let mut errs = vec![];
    for (i, ing) in items(&lb["ingress"]).iter().enumerate() {
        let ip = str_at(ing, "ip");
        if !ip.is_empty() && ip.parse::<IpAddr>().is_err() {
            errs.push(FieldError::invalid(
                format!("{at}.ingress[{i}].ip"),
                ip,
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ));
        }
        let host = str_at(ing, "hostname");
        if !host.is_empty() {
            for m in v::is_dns1123_subdomain(host) {
                errs.push(FieldError::invalid(
                    format!("{at}.ingress[{i}].hostname"),
                    host,
                    &m,
                ));
            }
            if host.parse::<IpAddr>().is_ok() {
                errs.push(FieldError::invalid(
                    format!("{at}.ingress[{i}].hostname"),
                    host,
                    "must be a DNS name, not an IP address",
                ));
            }
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::validation::kind_errors;
    use serde_json::json;

    fn errors(spec: Value) -> Vec<String> {
        kind_errors(
            "networking.k8s.io",
            "ingresses",
            json!({"metadata": {"name": "i", "namespace": "default"}, "spec": spec}),
        )
        .iter()
        .map(FieldError::full)
        .collect()
    }

    fn path(p: Value) -> Value {
        json!({"rules": [{"host": "foo.com", "http": {"paths": [p]}}]})
    }

    #[test]
    fn a_backend_or_rules_is_required() {
        assert_eq!(
            errors(json!({})),
            [
                "spec: Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified"
            ]
        );
        assert!(
            errors(json!({"defaultBackend": {"service": {"name": "svc", "port": {"number": 80}}}}))
                .is_empty()
        );
    }

    #[test]
    fn paths_need_a_known_type_and_an_absolute_path() {
        let backend = json!({"service": {"name": "svc", "port": {"number": 80}}});
        assert_eq!(
            errors(path(json!({"path": "/", "backend": backend}))),
            ["spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified"]
        );
        assert_eq!(
            errors(path(
                json!({"path": "/", "pathType": "Regex", "backend": backend})
            )),
            [
                "spec.rules[0].http.paths[0].pathType: Unsupported value: \"Regex\": supported values: \"Exact\", \"ImplementationSpecific\", \"Prefix\""
            ]
        );
        assert_eq!(
            errors(path(
                json!({"path": "foo", "pathType": "Prefix", "backend": backend})
            )),
            ["spec.rules[0].http.paths[0].path: Invalid value: \"foo\": must be an absolute path"]
        );
        assert!(
            errors(path(
                json!({"path": "/a", "pathType": "Exact", "backend": backend})
            ))
            .is_empty()
        );
    }

    #[test]
    fn a_service_backend_has_a_port_name_or_number() {
        let p = |port: Value| {
            path(
                json!({"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "svc", "port": port}}}),
            )
        };
        assert_eq!(
            errors(p(json!({"name": "http", "number": 80}))),
            [
                "spec.rules[0].http.paths[0].backend: Invalid value: \"\": cannot set both port name & port number"
            ]
        );
        assert_eq!(
            errors(p(json!({}))),
            [
                "spec.rules[0].http.paths[0].backend: Required value: port name or number is required"
            ]
        );
        assert_eq!(
            errors(p(json!({"number": 70000}))),
            [
                "spec.rules[0].http.paths[0].backend.service.port.number: Invalid value: 70000: must be between 1 and 65535, inclusive"
            ]
        );
    }

    #[test]
    fn hosts_are_dns_names() {
        let backend = json!({"service": {"name": "svc", "port": {"number": 80}}});
        let errs = errors(
            json!({"rules": [{"host": "1.2.3.4", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}]}),
        );
        assert_eq!(
            errs[0],
            "spec.rules[0].host: Invalid value: \"1.2.3.4\": must be a DNS name, not an IP address"
        );
        assert!(errors(json!({"rules": [{"host": "*.foo.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}]})).is_empty());
    }
}
