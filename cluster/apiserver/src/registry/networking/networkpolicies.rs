//! networking.k8s.io/v1 NetworkPolicies: what their strategy adds to the generic store, as
//! kube-apiserver's `pkg/registry/networking/networkpolicy/strategy.go` does.
//!
//! Defaults (`SetDefaults_NetworkPolicy`, `SetDefaults_NetworkPolicyPort`): a policy without
//! `policyTypes` gets `[Ingress]`, and `[Ingress, Egress]` when it has egress rules; a port
//! without a `protocol` gets `TCP`; `spec.podSelector` (a field Go always writes) is `{}` when
//! absent.
//!
//! Validation (`ValidateNetworkPolicy`, `ValidateNetworkPolicyUpdate`): the pod selector and the
//! peers' selectors are valid label selectors; a port's `protocol` is `TCP`, `UDP` or `SCTP`, a
//! numeric `port` is 1-65535 and a named one an IANA port name, `endPort` only with a numeric
//! `port` and not below it; a peer names a pod selector, a namespace selector or an IP block
//! (an `ipBlock` alone), whose `cidr` is required and whose `except` entries lie strictly inside
//! it; `policyTypes` holds at most two entries, each `Ingress` or `Egress`.
//!
//! The simulated node has no pod network, so a policy filters nothing here.

use std::net::IpAddr;

use apimachinery::validation::FieldError;
use serde_json::{Value, json};

use crate::registry::resources::ResourceDef;
use crate::registry::strategy::Strategy;
use crate::registry::validation::{
    go_string_slice, is_valid_port_name, is_valid_port_num, str_at, validate_label_selector,
};

/// The strategy of `networkpolicies` (see the module docs).
#[derive(Debug, Default)]
pub struct NetworkPolicyStrategy;

impl Strategy for NetworkPolicyStrategy {
    fn set_defaults(&self, obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            if let Some(o) = obj.as_object_mut() {
                o.insert(
                    "spec".into(),
                    json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
                );
            }
            return;
        };
        if spec.get("podSelector").is_none_or(Value::is_null) {
            spec.insert("podSelector".into(), json!({}));
        }
        for rules in ["ingress", "egress"] {
            if let Some(rules) = spec.get_mut(rules).and_then(Value::as_array_mut) {
                for rule in rules {
                    if let Some(ports) = rule.get_mut("ports").and_then(Value::as_array_mut) {
                        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
                            if port.get("protocol").is_none_or(Value::is_null) {
                                port.insert("protocol".into(), json!("TCP"));
                            }
                        }
                    }
                }
            }
        }
        let no_types = spec
            .get("policyTypes")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty);
        if no_types {
            let egress = spec
                .get("egress")
                .and_then(Value::as_array)
                .is_some_and(|e| !e.is_empty());
            let types = if egress {
                json!(["Ingress", "Egress"])
            } else {
                json!(["Ingress"])
            };
            spec.insert("policyTypes".into(), types);
        }
    }

    fn field_errors(
        &self,
        _def: &ResourceDef,
        obj: &Value,
        _old: Option<&Value>,
    ) -> Vec<FieldError> {
        validate_spec(&obj["spec"])
    }
}

fn items(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// `ValidateNetworkPolicySpec`.
fn validate_spec(spec: &Value) -> Vec<FieldError> {
    let mut errs = validate_label_selector(&spec["podSelector"], "spec.podSelector");
    for (rules, peers) in [("ingress", "from"), ("egress", "to")] {
        for (i, rule) in items(&spec[rules]).iter().enumerate() {
            let at = format!("spec.{rules}[{i}]");
            for (j, port) in items(&rule["ports"]).iter().enumerate() {
                errs.extend(validate_port(port, &format!("{at}.ports[{j}]")));
            }
            for (j, peer) in items(&rule[peers]).iter().enumerate() {
                errs.extend(validate_peer(peer, &format!("{at}.{peers}[{j}]")));
            }
        }
    }
    let types = spec["policyTypes"].as_array();
    if types.is_some_and(|t| t.len() > 2) {
        errs.push(FieldError {
            reason: "FieldValueInvalid",
            field: "spec.policyTypes".into(),
            message: format!(
                "Invalid value: {}: may not specify more than two policyTypes",
                go_string_slice("networking.PolicyType", types)
            ),
        });
        return errs;
    }
    for (i, t) in types.map(Vec::as_slice).unwrap_or(&[]).iter().enumerate() {
        let t = t.as_str().unwrap_or_default();
        if !matches!(t, "Ingress" | "Egress") {
            errs.push(FieldError::not_supported(
                format!("spec.policyTypes[{i}]"),
                t,
                &["Ingress", "Egress"],
            ));
        }
    }
    errs
}

/// `ValidateNetworkPolicyPort`.
fn validate_port(port: &Value, at: &str) -> Vec<FieldError> {
    let mut errs = vec![];
    if let Some(proto) = port["protocol"].as_str()
        && !matches!(proto, "TCP" | "UDP" | "SCTP")
    {
        errs.push(FieldError::not_supported(
            format!("{at}.protocol"),
            proto,
            &["TCP", "UDP", "SCTP"],
        ));
    }
    let end = port["endPort"].as_i64();
    match &port["port"] {
        Value::Number(n) => {
            let n = n.as_i64().unwrap_or(0);
            for m in is_valid_port_num(n) {
                errs.push(FieldError::invalid_value(
                    format!("{at}.port"),
                    &json!(n),
                    &m,
                ));
            }
            if let Some(end) = end {
                if end < n {
                    errs.push(FieldError::invalid_value(
                        format!("{at}.endPort"),
                        &json!(end),
                        "must be greater than or equal to `port`",
                    ));
                }
                for m in is_valid_port_num(end) {
                    errs.push(FieldError::invalid_value(
                        format!("{at}.endPort"),
                        &json!(end),
                        &m,
                    ));
                }
            }
        }
        Value::String(name) => {
            if let Some(end) = end {
                errs.push(FieldError::invalid_value(
                    format!("{at}.endPort"),
                    &json!(end),
                    "may not be specified when `port` is non-numeric",
                ));
            }
            for m in is_valid_port_name(name) {
                errs.push(FieldError::invalid(format!("{at}.port"), name, &m));
            }
        }
        _ => {
            if let Some(end) = end {
                errs.push(FieldError::invalid_value(
                    format!("{at}.endPort"),
                    &json!(end),
                    "may not be specified when `port` is not specified",
                ));
            }
        }
    }
    errs
}

/// `ValidateNetworkPolicyPeer`.
fn validate_peer(peer: &Value, at: &str) -> Vec<FieldError> {
    let mut errs = vec![];
    let mut peers = 0;
    for selector in ["podSelector", "namespaceSelector"] {
        if let Some(s) = peer.get(selector).filter(|s| !s.is_null()) {
            peers += 1;
            errs.extend(validate_label_selector(s, &format!("{at}.{selector}")));
        }
    }
    let ip_block = peer.get("ipBlock").filter(|b| !b.is_null());
    if let Some(block) = ip_block {
        peers += 1;
        errs.extend(validate_ip_block(block, &format!("{at}.ipBlock")));
    }
    if peers == 0 {
        errs.push(FieldError::required(at, "must specify a peer"));
    } else if peers > 1 && ip_block.is_some() {
        errs.push(FieldError::forbidden(
            at,
            "may not specify both ipBlock and another peer",
        ));
    }
    errs
}

/// A CIDR as `(network address, prefix length)`, or `None` when it does not parse.
fn parse_cidr(s: &str) -> Option<(IpAddr, u32)> {
    let (ip, bits) = s.split_once('/')?;
    let ip: IpAddr = ip.parse().ok()?;
    let bits: u32 = bits.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((ip, bits))
}

/// Whether `ip` lies in the network `net`/`bits`.
fn contains(net: IpAddr, bits: u32, ip: IpAddr) -> bool {
    match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(i)) => {
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            u32::from(n) & mask == u32::from(i) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(i)) => {
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            u128::from(n) & mask == u128::from(i) & mask
        }
        _ => false,
    }
}

const CIDR_ERROR: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";

/// `ValidateIPBlock`.
fn validate_ip_block(block: &Value, at: &str) -> Vec<FieldError> {
    let cidr = str_at(block, "cidr");
    if cidr.is_empty() {
        return vec![FieldError::required(format!("{at}.cidr"), "")];
    }
    let Some((net, bits)) = parse_cidr(cidr) else {
        return vec![FieldError::invalid(format!("{at}.cidr"), cidr, CIDR_ERROR)];
    };
    let mut errs = vec![];
    for (i, except) in items(&block["except"]).iter().enumerate() {
        let except = except.as_str().unwrap_or_default();
        let field = format!("{at}.except[{i}]");
        match parse_cidr(except) {
            None => errs.push(FieldError::invalid(field, except, CIDR_ERROR)),
            Some((ip, ebits)) => {
                if !contains(net, bits, ip) || bits >= ebits {
                    errs.push(FieldError::invalid(
                        field,
                        except,
                        "must be a strict subset of `cidr`",
                    ));
                }
            }
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::validation::kind_errors;

    fn errors(spec: Value) -> Vec<String> {
        let mut obj = json!({"metadata": {"name": "np", "namespace": "default"}, "spec": spec});
        NetworkPolicyStrategy.set_defaults(&mut obj);
        kind_errors("networking.k8s.io", "networkpolicies", obj)
            .iter()
            .map(FieldError::full)
            .collect()
    }

    #[test]
    fn policy_types_default_from_the_rules() {
        let mut obj = json!({"spec": {"egress": [{"ports": [{"port": 53}]}]}});
        NetworkPolicyStrategy.set_defaults(&mut obj);
        assert_eq!(obj["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(obj["spec"]["podSelector"], json!({}));
        assert_eq!(obj["spec"]["egress"][0]["ports"][0]["protocol"], "TCP");
        let mut obj = json!({"spec": {"podSelector": {"matchLabels": {"a": "b"}}}});
        NetworkPolicyStrategy.set_defaults(&mut obj);
        assert_eq!(obj["spec"]["policyTypes"], json!(["Ingress"]));
    }

    #[test]
    fn policy_types_are_ingress_or_egress() {
        assert_eq!(
            errors(json!({"policyTypes": ["Sideways"]})),
            [
                "spec.policyTypes[0]: Unsupported value: \"Sideways\": supported values: \"Ingress\", \"Egress\""
            ]
        );
        assert_eq!(
            errors(json!({"policyTypes": ["Ingress", "Egress", "Ingress"]})),
            [
                "spec.policyTypes: Invalid value: []networking.PolicyType{\"Ingress\", \"Egress\", \"Ingress\"}: may not specify more than two policyTypes"
            ]
        );
    }

    #[test]
    fn peers_and_ports_are_checked() {
        assert_eq!(
            errors(json!({"ingress": [{"from": [{}]}]})),
            ["spec.ingress[0].from[0]: Required value: must specify a peer"]
        );
        assert_eq!(
            errors(
                json!({"ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.1.0.0/24"]}}]}]})
            ),
            [
                "spec.ingress[0].from[0].ipBlock.except[0]: Invalid value: \"10.1.0.0/24\": must be a strict subset of `cidr`"
            ]
        );
        assert_eq!(
            errors(json!({"ingress": [{"ports": [{"port": "http", "endPort": 90}]}]})),
            [
                "spec.ingress[0].ports[0].endPort: Invalid value: 90: may not be specified when `port` is non-numeric"
            ]
        );
        assert!(errors(json!({"ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "a"}}}], "ports": [{"port": 80}]}]})).is_empty());
    }
}
