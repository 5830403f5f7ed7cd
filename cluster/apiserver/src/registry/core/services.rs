//! core/v1 Services: what kube-apiserver's Service strategy and REST storage add to the generic
//! store.
//!
//! A Service is not stored as sent. `pkg/registry/core/service/strategy.go`,
//! `storage/storage.go` (its `beginCreate` and `beginUpdate`) and `storage/alloc.go` (and
//! `SetDefaults_Service` in `pkg/apis/core/v1/defaults.go`) do, and so does this module's
//! [`ServiceStrategy`], under the store's lock:
//!
//! * **names** are DNS-1035 labels (`ValidateServiceName`: they start with a letter);
//! * **defaults** on every write: `type: ClusterIP`, `sessionAffinity: None` (and, for
//!   `ClientIP`, `sessionAffinityConfig.clientIP.timeoutSeconds: 10800`), each port's
//!   `protocol: TCP` and `targetPort` = `port`, `internalTrafficPolicy: Cluster` (ClusterIP,
//!   NodePort and LoadBalancer), `externalTrafficPolicy: Cluster` for externally reachable
//!   Services, `allocateLoadBalancerNodePorts: true` for LoadBalancers;
//! * **IP families** (`initIPFamilyFields`) on a single-stack IPv4 cluster: `ipFamilyPolicy`
//!   `SingleStack` and `ipFamilies: [IPv4]`, except a headless Service without a selector,
//!   which gets `RequireDualStack` and `[IPv4, IPv6]` as on a real single-stack cluster;
//!   ExternalName Services get none;
//! * **cluster IPs** from the service CIDR [`SERVICE_CIDR`] (kube-apiserver's default
//!   `--service-cluster-ip-range`, `10.96.0.0/12`): a requested `clusterIP` must be in the range
//!   and free (422 `failed to allocate IP ...: provided IP is already allocated`); otherwise one
//!   is picked at random, from the upper part of the range first, as the real allocator's
//!   offset strategy does (the lower part is kept for static addresses; the first address,
//!   `10.96.0.1`, is the `kubernetes` Service's). `clusterIP` and `clusterIPs` are both set;
//! * **node ports** from `30000-32767` for NodePort and LoadBalancer Services (a requested one
//!   must be free: 422 `provided port is already allocated`);
//! * on **update**, values the client left out are kept from the stored object
//!   (`patchAllocatedValues`: `clusterIP(s)`, node ports by port number, the IP family fields),
//!   and a changed cluster IP is refused (`may not change once set`); a change to
//!   `ExternalName` releases them;
//! * **status**: `status` is reset on create, and a Service always carries
//!   `status.loadBalancer` (`{}` when empty), as Go's non-`omitempty` field serializes it;
//! * **validation** (the parts of `ValidateService` clients rely on): ports required unless
//!   headless or `ExternalName`; port and `targetPort` in 1..=65535; names required (several
//!   ports) and unique; protocol `TCP`/`UDP`/`SCTP`;
//! * **DELETE** answers with the deleted Service, not a Status (`ReturnDeletedObject`; see
//!   the [`crate::registry::resources`] entry).
//!
//! Allocations are not a separate bitmap: the addresses and ports in use are those of the
//! stored Services, read under the same lock as the write, so they are released by deleting
//! the Service and survive a restart with `--data-dir`.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::ops::RangeInclusive;

use apimachinery::validation::{self as v, FieldError};
use serde_json::{Value, json};

use crate::api::object_meta::meta_str;
use crate::api::status::ApiError;
use crate::registry::State;
use crate::registry::resources::ResourceDef;
use crate::registry::strategy::Strategy;
use crate::registry::validation::{is_dns1035_label, str_at, to_causes};
use crate::storage::store::key_of;

/// The service CIDR: base address and prefix length (`10.96.0.0/12`).
pub const SERVICE_CIDR: (Ipv4Addr, u32) = (Ipv4Addr::new(10, 96, 0, 0), 12);

/// The node port range (`--service-node-port-range`, default `30000-32767`).
pub const NODE_PORTS: RangeInclusive<i64> = 30000..=32767;

/// The storage key of Services.
const STORAGE: &str = "core/services";

/// `10.96.0.0/12` as printed in errors.
fn cidr_text() -> String {
    format!("{}/{}", SERVICE_CIDR.0, SERVICE_CIDR.1)
}

/// The first and last usable offsets of the range (network and broadcast excluded), as the
/// real allocator counts them.
fn range_size() -> u32 {
    (1u32 << (32 - SERVICE_CIDR.1)) - 2
}

/// The address at `offset` (1 is the first usable address).
fn address_at(offset: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(SERVICE_CIDR.0) + offset)
}

/// The offset of `ip` in the range, `None` when it is outside or is the network or broadcast
/// address.
fn offset_of(ip: Ipv4Addr) -> Option<u32> {
    let base = u32::from(SERVICE_CIDR.0);
    let ip = u32::from(ip);
    let off = ip.checked_sub(base)?;
    (1..=range_size()).contains(&off).then_some(off)
}

/// The first usable address: the `kubernetes` Service's (`10.96.0.1`).
pub fn first_address() -> Ipv4Addr {
    address_at(1)
}

/// The size of the lower band kept for static addresses (`calculateRangeOffset`: min(max(16,
/// size/16), 256)).
fn static_band() -> u32 {
    (range_size() / 16).clamp(16, 256)
}

/// The strategy of `services` (see the module docs).
#[derive(Debug, Default)]
pub struct ServiceStrategy;

impl Strategy for ServiceStrategy {
    /// Its store hooks read the stored objects: writes run under the lock.
    fn store_free_writes(&self) -> bool {
        false
    }

    fn validate_name(&self, name: &str) -> Vec<String> {
        is_dns1035_label(name)
    }

    fn begin_create(&self, st: &State, obj: &mut Value) -> Result<(), ApiError> {
        begin_create(st, obj)
    }

    fn begin_update(&self, st: &State, old: &Value, obj: &mut Value) -> Result<(), ApiError> {
        begin_update(st, old, obj)
    }

    fn field_errors(
        &self,
        _def: &ResourceDef,
        obj: &Value,
        _old: Option<&Value>,
    ) -> Vec<FieldError> {
        validate_service(&obj["spec"])
    }
}

/// `SetDefaults_Service`.
fn set_defaults(obj: &mut Value) {
    if !obj["spec"].is_object() {
        obj["spec"] = json!({});
    }
    let spec = &mut obj["spec"];
    if str_at(spec, "sessionAffinity").is_empty() {
        spec["sessionAffinity"] = json!("None");
    }
    if str_at(spec, "sessionAffinity") == "None"
        && let Some(s) = spec.as_object_mut()
    {
        s.remove("sessionAffinityConfig");
    }
    if str_at(spec, "sessionAffinity") == "ClientIP"
        && spec
            .pointer("/sessionAffinityConfig/clientIP/timeoutSeconds")
            .is_none_or(Value::is_null)
    {
        spec["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": 10800}});
    }
    if str_at(spec, "type").is_empty() {
        spec["type"] = json!("ClusterIP");
    }
    if let Some(ports) = spec["ports"].as_array_mut() {
        for p in ports.iter_mut().filter(|p| p.is_object()) {
            if str_at(p, "protocol").is_empty() {
                p["protocol"] = json!("TCP");
            }
            let unset = match &p["targetPort"] {
                Value::Null => true,
                Value::Number(n) => n.as_i64() == Some(0),
                Value::String(s) => s.is_empty(),
                _ => false,
            };
            if unset && !p["port"].is_null() {
                p["targetPort"] = p["port"].clone();
            }
        }
    }
    let ty = str_at(spec, "type").to_owned();
    let has_external_ips = spec["externalIPs"]
        .as_array()
        .is_some_and(|a| !a.is_empty());
    let externally_accessible =
        ty == "LoadBalancer" || ty == "NodePort" || (ty == "ClusterIP" && has_external_ips);
    if externally_accessible && str_at(spec, "externalTrafficPolicy").is_empty() {
        spec["externalTrafficPolicy"] = json!("Cluster");
    }
    if spec["internalTrafficPolicy"].is_null()
        && matches!(ty.as_str(), "ClusterIP" | "NodePort" | "LoadBalancer")
    {
        spec["internalTrafficPolicy"] = json!("Cluster");
    }
    if ty == "LoadBalancer" && spec["allocateLoadBalancerNodePorts"].is_null() {
        spec["allocateLoadBalancerNodePorts"] = json!(true);
    }
}

/// `status.loadBalancer` present (Go always writes it).
fn ensure_status(obj: &mut Value) {
    if !obj["status"].is_object() {
        obj["status"] = json!({});
    }
    if !obj["status"]["loadBalancer"].is_object() {
        obj["status"]["loadBalancer"] = json!({});
    }
}

/// The first cluster IP: `clusterIPs[0]`, else `clusterIP`.
fn first_cluster_ip(spec: &Value) -> String {
    spec["clusterIPs"]
        .get(0)
        .and_then(Value::as_str)
        .unwrap_or_else(|| str_at(spec, "clusterIP"))
        .to_owned()
}

fn is_headless(spec: &Value) -> bool {
    first_cluster_ip(spec) == "None"
}

/// `initIPFamilyFields` on a single-stack IPv4 cluster.
fn init_ip_families(obj: &mut Value, old: Option<&Value>, errs: &mut Vec<FieldError>) {
    let spec = &mut obj["spec"];
    if str_at(spec, "type") == "ExternalName" {
        return;
    }
    let selectorless = spec["selector"].as_object().is_none_or(|m| m.is_empty());
    let headless = is_headless(spec);
    if spec["ipFamilyPolicy"].is_null() {
        let old_policy = old
            .map(|o| &o["spec"]["ipFamilyPolicy"])
            .filter(|p| p.is_string());
        spec["ipFamilyPolicy"] = match old_policy {
            Some(p) => p.clone(),
            None if headless && selectorless => json!("RequireDualStack"),
            None => json!("SingleStack"),
        };
    }
    let policy = str_at(spec, "ipFamilyPolicy").to_owned();
    if !matches!(
        policy.as_str(),
        "SingleStack" | "PreferDualStack" | "RequireDualStack"
    ) {
        errs.push(FieldError::not_supported(
            "spec.ipFamilyPolicy",
            &policy,
            &["PreferDualStack", "RequireDualStack", "SingleStack"],
        ));
        return;
    }
    let mut families: Vec<String> = spec["ipFamilies"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if headless && selectorless {
        if families.is_empty() {
            families.push("IPv4".into());
        }
        if families.len() < 2 && policy != "SingleStack" {
            let alt = if families[0] == "IPv4" {
                "IPv6"
            } else {
                "IPv4"
            };
            families.push(alt.into());
        }
        spec["ipFamilies"] = json!(families);
        return;
    }
    if policy == "RequireDualStack" {
        errs.push(FieldError::invalid(
            "spec.ipFamilyPolicy",
            &policy,
            "this cluster is not configured for dual-stack services",
        ));
    }
    for (i, f) in families.iter().enumerate() {
        if f != "IPv4" {
            errs.push(FieldError::invalid(
                format!("spec.ipFamilies[{i}]"),
                f,
                "not configured on this cluster",
            ));
        }
    }
    if families.is_empty() {
        spec["ipFamilies"] = json!(["IPv4"]);
    }
}

/// Cluster IPs in use by stored Services other than `skip` (`namespace/name`).
fn used_ips(st: &State, skip: Option<(&str, &str)>) -> std::collections::HashSet<u32> {
    let mut used = std::collections::HashSet::new();
    for svc in st.list(STORAGE, None) {
        let key = key_of(svc);
        if skip.is_some_and(|(ns, n)| key.0 == ns && key.1 == n) {
            continue;
        }
        let spec = &svc["spec"];
        let mut ips: Vec<&str> = spec["clusterIPs"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        ips.push(str_at(spec, "clusterIP"));
        for ip in ips {
            if let Ok(ip) = ip.parse::<Ipv4Addr>()
                && let Some(off) = offset_of(ip)
            {
                used.insert(off);
            }
        }
    }
    used
}

/// Node ports in use by stored Services other than `skip`.
fn used_node_ports(st: &State, skip: Option<(&str, &str)>) -> std::collections::HashSet<i64> {
    let mut used = std::collections::HashSet::new();
    for svc in st.list(STORAGE, None) {
        let key = key_of(svc);
        if skip.is_some_and(|(ns, n)| key.0 == ns && key.1 == n) {
            continue;
        }
        for p in svc["spec"]["ports"].as_array().into_iter().flatten() {
            if let Some(n) = p["nodePort"].as_i64() {
                used.insert(n);
            }
        }
    }
    used
}

/// `AllocateNext` with the offset strategy: a random free address of the upper band, else of
/// the lower band.
fn allocate_next(used: impl Fn(u32) -> bool) -> Option<u32> {
    let size = range_size();
    let band = static_band().min(size);
    let scan = |lo: u32, hi: u32| -> Option<u32> {
        // [lo, hi], starting at a random point and wrapping, as the random scan does.
        if lo > hi {
            return None;
        }
        let n = hi - lo + 1;
        let start = fastrand::u32(0..n);
        (0..n).map(|i| lo + (start + i) % n).find(|off| !used(*off))
    };
    scan(band + 1, size).or_else(|| scan(1, band))
}

/// Assigns `clusterIP(s)` (or checks the requested one) and node ports.
fn allocate(
    st: &State,
    obj: &mut Value,
    skip: Option<(&str, &str)>,
    old: Option<&Value>,
    errs: &mut Vec<FieldError>,
) -> Result<(), ApiError> {
    let spec = &mut obj["spec"];
    let ty = str_at(spec, "type").to_owned();
    allocate_cluster_ip(st, spec, &ty, skip, old, errs)?;
    let wants_node_ports = ty == "NodePort"
        || (ty == "LoadBalancer" && spec["allocateLoadBalancerNodePorts"] != json!(false));
    if !wants_node_ports {
        return Ok(());
    }
    allocate_node_ports(st, spec, skip, old, errs)
}

/// The cluster IP of a Service `spec` of type `ty`: a free one picked when none is asked for,
/// the requested one checked (a valid address, in the range, free) when it is new, `None` for
/// a headless Service; an ExternalName Service gets none.
fn allocate_cluster_ip(
    st: &State,
    spec: &mut Value,
    ty: &str,
    skip: Option<(&str, &str)>,
    old: Option<&Value>,
    errs: &mut Vec<FieldError>,
) -> Result<(), ApiError> {
    if ty != "ExternalName" && !is_headless(spec) {
        let requested = first_cluster_ip(spec);
        let old_ip = old
            .map(|o| first_cluster_ip(&o["spec"]))
            .unwrap_or_default();
        if requested.is_empty() {
            let used = used_ips(st, skip);
            let Some(off) = allocate_next(|o| used.contains(&o)) else {
                return Err(ApiError::internal(
                    "failed to allocate a serviceIP: range is full",
                ));
            };
            let ip = address_at(off).to_string();
            spec["clusterIP"] = json!(ip);
            spec["clusterIPs"] = json!([ip]);
        } else if requested != old_ip {
            let shown = json!([requested]);
            match requested.parse::<Ipv4Addr>() {
                Err(_) => errs.push(FieldError::invalid_value(
                    "spec.clusterIPs[0]",
                    &json!(requested),
                    "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                )),
                Ok(ip) => match offset_of(ip) {
                    None => errs.push(FieldError::invalid_value(
                        "spec.clusterIPs",
                        &shown,
                        &format!(
                            "failed to allocate IP {requested}: the provided IP ({requested}) is not in the valid range. The range of valid IPs is {}",
                            cidr_text()
                        ),
                    )),
                    Some(off) if used_ips(st, skip).contains(&off) => {
                        errs.push(FieldError::invalid_value(
                            "spec.clusterIPs",
                            &shown,
                            &format!(
                                "failed to allocate IP {requested}: provided IP is already allocated"
                            ),
                        ))
                    }
                    Some(_) => {
                        spec["clusterIP"] = json!(requested);
                        spec["clusterIPs"] = json!([requested]);
                    }
                },
            }
        } else {
            spec["clusterIP"] = json!(requested);
            if spec["clusterIPs"].as_array().is_none_or(|a| a.is_empty()) {
                spec["clusterIPs"] = json!([requested]);
            }
        }
    } else if is_headless(spec) {
        spec["clusterIP"] = json!("None");
        spec["clusterIPs"] = json!(["None"]);
    }
    Ok(())
}

/// The node ports of a Service `spec`: the requested ones checked first (in the range, not
/// taken; the ones it already had are kept), then a free one picked for each port without one.
fn allocate_node_ports(
    st: &State,
    spec: &mut Value,
    skip: Option<(&str, &str)>,
    old: Option<&Value>,
    errs: &mut Vec<FieldError>,
) -> Result<(), ApiError> {
    let mut used = used_node_ports(st, skip);
    let old_ports: Vec<i64> = old
        .and_then(|o| o["spec"]["ports"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|p| p["nodePort"].as_i64())
        .collect();
    let Some(ports) = spec["ports"].as_array_mut() else {
        return Ok(());
    };
    // Requested ports first, so a random pick never takes one the client asked for.
    for (i, p) in ports.iter().enumerate() {
        let Some(n) = p["nodePort"].as_i64().filter(|n| *n != 0) else {
            continue;
        };
        let field = format!("spec.ports[{i}].nodePort");
        if old_ports.contains(&n) {
            used.insert(n);
        } else if !NODE_PORTS.contains(&n) {
            errs.push(FieldError::invalid_value(
                field,
                &json!(n),
                &format!(
                    "provided port is not in the valid range. The range of valid ports is {}-{}",
                    NODE_PORTS.start(),
                    NODE_PORTS.end()
                ),
            ));
        } else if !used.insert(n) {
            errs.push(FieldError::invalid_value(
                field,
                &json!(n),
                "provided port is already allocated",
            ));
        }
    }
    for p in ports.iter_mut() {
        if p["nodePort"].as_i64().is_some_and(|n| n != 0) {
            continue;
        }
        let span = NODE_PORTS.end() - NODE_PORTS.start() + 1;
        let start = fastrand::i64(0..span);
        let Some(n) = (0..span)
            .map(|i| NODE_PORTS.start() + (start + i) % span)
            .find(|n| !used.contains(n))
        else {
            return Err(ApiError::internal(
                "failed to allocate a nodePort: range is full",
            ));
        };
        used.insert(n);
        p["nodePort"] = json!(n);
    }
    Ok(())
}

fn fail(name: &str, errs: Vec<FieldError>) -> Result<(), ApiError> {
    if errs.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid("Service", "", name, to_causes(errs)))
}

/// Defaults, IP families, cluster IP and node ports of a new Service, and its empty status.
fn begin_create(st: &State, obj: &mut Value) -> Result<(), ApiError> {
    set_defaults(obj);
    let name = meta_str(obj, "name").to_owned();
    let mut errs = vec![];
    init_ip_families(obj, None, &mut errs);
    fail(&name, std::mem::take(&mut errs))?;
    allocate(st, obj, None, None, &mut errs)?;
    fail(&name, errs)?;
    if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
    ensure_status(obj);
    Ok(())
}

/// An update of a stored Service: defaults, the allocated values the client left out, the
/// immutability of the cluster IP, allocations for new ports or a new type.
fn begin_update(st: &State, old: &Value, new: &mut Value) -> Result<(), ApiError> {
    set_defaults(new);
    let (ns, name) = key_of(new);
    let mut errs = vec![];
    let old_spec = &old["spec"];
    let new_type = str_at(&new["spec"], "type").to_owned();
    if new_type == "ExternalName" {
        // `dropTypeDependentFields`: the cluster IPs and families of the old type go with it.
        let spec = &mut new["spec"];
        if let Some(s) = spec.as_object_mut() {
            for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
                if s.get(f) == old_spec.get(f) {
                    s.remove(f);
                }
            }
        }
    } else {
        // `patchAllocatedValues`.
        let spec = &mut new["spec"];
        if str_at(spec, "clusterIP").is_empty()
            && spec["clusterIPs"].as_array().is_none_or(|a| a.is_empty())
            && !str_at(old_spec, "clusterIP").is_empty()
        {
            spec["clusterIP"] = old_spec["clusterIP"].clone();
            spec["clusterIPs"] = old_spec["clusterIPs"].clone();
        }
        if let Some(ports) = spec["ports"].as_array_mut() {
            for p in ports.iter_mut() {
                if p["nodePort"].as_i64().is_some_and(|n| n != 0) {
                    continue;
                }
                let same = old_spec["ports"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|o| o["port"] == p["port"] && o["protocol"] == p["protocol"]);
                if let Some(n) = same.and_then(|o| o["nodePort"].as_i64()) {
                    p["nodePort"] = json!(n);
                }
            }
        }
        let old_ip = first_cluster_ip(old_spec);
        let new_ip = first_cluster_ip(spec);
        let old_type = str_at(old_spec, "type");
        if !old_ip.is_empty() && old_type != "ExternalName" && new_ip != old_ip {
            errs.push(FieldError::invalid_value(
                "spec.clusterIPs[0]",
                &spec["clusterIPs"],
                "may not change once set",
            ));
        }
        if old_type != "ExternalName" {
            for f in ["ipFamilies"] {
                if spec[f].is_null() && !old_spec[f].is_null() {
                    spec[f] = old_spec[f].clone();
                }
            }
        }
    }
    if !matches!(new_type.as_str(), "NodePort" | "LoadBalancer")
        && let Some(ports) = new["spec"]["ports"].as_array_mut()
    {
        // Node ports belong to NodePort and LoadBalancer Services only: a type change
        // releases them when the client kept the old values.
        for (i, p) in ports.iter_mut().enumerate() {
            if let Some(o) = p.as_object_mut()
                && o.get("nodePort").is_some()
                && old_spec["ports"][i]["nodePort"] == o["nodePort"]
            {
                o.remove("nodePort");
            }
        }
    }
    init_ip_families(new, Some(old), &mut errs);
    fail(&name, std::mem::take(&mut errs))?;
    allocate(st, new, Some((&ns, &name)), Some(old), &mut errs)?;
    fail(&name, errs)?;
    ensure_status(new);
    Ok(())
}

fn validate_port_number(v: &Value, field: String, errs: &mut Vec<FieldError>) {
    if let Some(n) = v.as_i64()
        && !(1..=65535).contains(&n)
    {
        errs.push(FieldError::invalid_value(
            field,
            v,
            "must be between 1 and 65535, inclusive",
        ));
    }
}

/// `ValidateService`, the parts clients rely on (see the module docs).
fn validate_service(spec: &Value) -> Vec<FieldError> {
    let mut errs = vec![];
    let ports = spec["ports"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let headless = str_at(spec, "clusterIP") == "None";
    let ty = str_at(spec, "type");
    if ports.is_empty() && !headless && ty != "ExternalName" {
        errs.push(FieldError::required("spec.ports", ""));
    }
    let mut names = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let path = format!("spec.ports[{i}]");
        let name = str_at(p, "name");
        if ports.len() > 1 && name.is_empty() {
            errs.push(FieldError::required(format!("{path}.name"), ""));
        } else if !name.is_empty() {
            for m in v::is_dns1123_label(name) {
                errs.push(FieldError::invalid(format!("{path}.name"), name, &m));
            }
            if !names.insert(name) {
                errs.push(FieldError::duplicate(
                    format!("{path}.name"),
                    &Value::String(name.to_owned()),
                ));
            }
        }
        if p["port"].is_null() {
            errs.push(FieldError::invalid_value(
                format!("{path}.port"),
                &Value::from(0),
                "must be between 1 and 65535, inclusive",
            ));
        } else {
            validate_port_number(&p["port"], format!("{path}.port"), &mut errs);
        }
        validate_port_number(&p["targetPort"], format!("{path}.targetPort"), &mut errs);
        let proto = str_at(p, "protocol");
        if !proto.is_empty() && !matches!(proto, "TCP" | "UDP" | "SCTP") {
            errs.push(FieldError::not_supported(
                format!("{path}.protocol"),
                proto,
                &["SCTP", "TCP", "UDP"],
            ));
        }
    }
    errs
}

/// The `kubernetes` Service of the `default` namespace, as kube-apiserver's bootstrap
/// controller (`pkg/controlplane/controller/kubernetesservice`) keeps it: port 443 `https` to
/// the server's own port, the first address of the service CIDR.
pub fn kubernetes_service(port: u16) -> Value {
    let ip = first_address().to_string();
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {
            "ports": [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": port}],
            "clusterIP": ip, "clusterIPs": [ip], "type": "ClusterIP", "sessionAffinity": "None",
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster"
        },
        "status": {"loadBalancer": {}}
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::validation::kind_errors;

    #[test]
    fn the_range_is_kube_apiservers_default() {
        assert_eq!(first_address(), Ipv4Addr::new(10, 96, 0, 1));
        assert_eq!(range_size(), (1 << 20) - 2);
        assert_eq!(static_band(), 256);
        assert_eq!(offset_of(Ipv4Addr::new(10, 96, 0, 0)), None);
        assert_eq!(offset_of(Ipv4Addr::new(10, 111, 255, 255)), None);
        assert_eq!(
            offset_of(Ipv4Addr::new(10, 111, 255, 254)),
            Some(range_size())
        );
        assert_eq!(offset_of(Ipv4Addr::new(10, 112, 0, 1)), None);
    }

    #[test]
    fn dynamic_addresses_come_from_above_the_static_band_while_there_are_any() {
        for _ in 0..100 {
            let off = allocate_next(|_| false).unwrap();
            assert!(off > static_band() && off <= range_size());
        }
        let upper_full = |o: u32| o > static_band();
        let off = allocate_next(upper_full).unwrap();
        assert!((1..=static_band()).contains(&off));
        assert_eq!(allocate_next(|_| true), None);
    }

    #[test]
    fn defaults_follow_set_defaults_service() {
        let mut svc = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}]}});
        set_defaults(&mut svc);
        assert_eq!(svc["spec"]["sessionAffinity"], "None");
        assert_eq!(svc["spec"]["ports"][0]["protocol"], "TCP");
        assert_eq!(svc["spec"]["ports"][0]["targetPort"], 80);
        assert_eq!(svc["spec"]["externalTrafficPolicy"], "Cluster");
        assert_eq!(svc["spec"]["internalTrafficPolicy"], "Cluster");
        let mut ext = json!({"spec": {"type": "ExternalName", "externalName": "example.com"}});
        set_defaults(&mut ext);
        assert!(ext["spec"]["internalTrafficPolicy"].is_null());
    }

    #[test]
    fn ports_are_required_in_range() {
        let errs = |obj| kind_errors("", "services", obj);
        let e = errs(json!({"spec": {"ports": [{"port": 70000}]}}));
        assert_eq!(
            e[0].full(),
            "spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive"
        );
        assert!(errs(json!({"spec": {"clusterIP": "None"}})).is_empty());
        assert_eq!(
            errs(json!({"spec": {}}))[0].full(),
            "spec.ports: Required value"
        );
    }

    #[test]
    fn headless_without_selector_asks_for_both_families() {
        let mut svc = json!({"spec": {"clusterIP": "None"}});
        let mut errs = vec![];
        init_ip_families(&mut svc, None, &mut errs);
        assert!(errs.is_empty());
        assert_eq!(svc["spec"]["ipFamilyPolicy"], "RequireDualStack");
        assert_eq!(svc["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
    }
}
