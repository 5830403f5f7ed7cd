//! The request log: what clients asked the server, counted.
//!
//! Every request is classified the way the real server's audit log and
//! `apiserver_request_total` metric classify it — verb (`get`, `list`, `watch`, `create`,
//! `update`, `patch`, `delete`, `deletecollection`), resource, subresource, namespace and HTTP
//! status code — and counted. Tests use it to assert behaviour that is otherwise invisible,
//! such as "this controller made zero GETs in steady state because it reads from its
//! informer cache":
//!
//! ```no_run
//! # async fn f(server: embedded_apiserver::ApiServerHandle) {
//! let log = server.request_log();
//! assert_eq!(log.count("get", "ats"), 0);
//! assert!(log.count_code("update", "ats", 409) <= 1);
//! # }
//! ```
//!
//! Injected faults ([`crate::filters::faults`]) are counted too, separately ([`RequestLog::fault_count`]):
//! the request a fault failed also appears among the requests, with the code it got.
//!
//! The same counts are served at `/metrics` in the Prometheus text format, named like the real
//! server's `apiserver_request_total`.
//!
//! Non-resource requests (discovery, `/version`, OpenAPI) are counted with verb `get` and their
//! route as their resource (`/version`, `/apis/{group}`); a path that matches no route, or a
//! request refused before routing (a `401`), is counted as resource `<unrouted>`: labels come
//! from a bounded set, never from the raw URL, so a client sending 70,000 distinct paths adds
//! one key, not 70,000 (the real server's metrics do the same).
//!
//! Counts are kept per distinct (verb, resource, subresource, namespace, code). Namespaces come
//! from URLs and are not bounded by routing, so once the log holds [`MAX_KEYS`] keys a new key
//! is recorded with namespace `<other>` instead: memory stays bounded whatever clients send.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Distinct keys the log holds before new namespaces are folded into [`OTHER_NAMESPACE`].
pub const MAX_KEYS: usize = 10_000;

/// The namespace label of requests recorded after the log reached [`MAX_KEYS`] keys.
pub const OTHER_NAMESPACE: &str = "<other>";

/// One classified request.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestKey {
    /// Kubernetes verb (`get`, `list`, `watch`, `create`, ...).
    pub verb: String,
    /// Plural resource name, or the URL path for non-resource requests.
    pub resource: String,
    /// `status`, `scale`, or empty.
    pub subresource: String,
    /// Namespace from the URL, or empty.
    pub namespace: String,
    /// HTTP status code of the answer.
    pub code: u16,
}

/// Shared, cloneable counts of every request served.
#[derive(Clone, Debug, Default)]
pub struct RequestLog {
    counts: Arc<Mutex<BTreeMap<RequestKey, u64>>>,
    faults: Arc<Mutex<BTreeMap<FaultKey, u64>>>,
}

/// One kind of injected fault that fired (see [`crate::filters::faults`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FaultKey {
    /// `fail-<code>`, `latency`, `conflict`, `drop-watches` or `compact`.
    pub fault: String,
    /// The verb of the request it hit (`*` for server-wide faults).
    pub verb: String,
    /// The resource of the request it hit (`*` for server-wide faults).
    pub resource: String,
}

impl RequestLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<RequestKey, u64>> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one request (with namespace `<other>` if it is a new key and the log is full).
    pub fn record(&self, mut key: RequestKey) {
        let mut counts = self.lock();
        if counts.len() >= MAX_KEYS && !counts.contains_key(&key) {
            key.namespace = OTHER_NAMESPACE.to_owned();
        }
        *counts.entry(key).or_default() += 1;
    }

    /// Every key with its count.
    pub fn snapshot(&self) -> Vec<(RequestKey, u64)> {
        self.lock().iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Requests with this verb on this resource (any subresource, namespace or code).
    pub fn count(&self, verb: &str, resource: &str) -> u64 {
        self.count_where(|k| k.verb == verb && k.resource == resource)
    }

    /// Requests with this verb on this resource that were answered with `code`.
    pub fn count_code(&self, verb: &str, resource: &str, code: u16) -> u64 {
        self.count_where(|k| k.verb == verb && k.resource == resource && k.code == code)
    }

    /// Requests with this verb on this resource's `subresource`.
    pub fn count_subresource(&self, verb: &str, resource: &str, subresource: &str) -> u64 {
        self.count_where(|k| {
            k.verb == verb && k.resource == resource && k.subresource == subresource
        })
    }

    /// Requests matching an arbitrary predicate.
    pub fn count_where(&self, pred: impl Fn(&RequestKey) -> bool) -> u64 {
        self.lock()
            .iter()
            .filter(|(k, _)| pred(k))
            .map(|(_, v)| v)
            .sum()
    }

    /// Every request counted so far.
    pub fn total(&self) -> u64 {
        self.count_where(|_| true)
    }

    /// The counts in the Prometheus text format, as the real server's
    /// `apiserver_request_total{verb,resource,subresource,code}` (served at `/metrics`).
    pub fn prometheus_text(&self) -> String {
        fn esc(s: &str) -> String {
            s.replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n")
        }
        let mut out = String::from(
            "# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, resource, subresource, namespace and HTTP response code.\n# TYPE apiserver_request_total counter\n",
        );
        for (k, v) in self.lock().iter() {
            out.push_str(&format!(
                "apiserver_request_total{{verb=\"{}\",resource=\"{}\",subresource=\"{}\",namespace=\"{}\",code=\"{}\"}} {v}\n",
                esc(&k.verb),
                esc(&k.resource),
                esc(&k.subresource),
                esc(&k.namespace),
                k.code
            ));
        }
        out
    }

    /// Forgets every count (start of a test phase).
    pub fn clear(&self) {
        self.lock().clear();
        self.faults_lock().clear();
    }

    fn faults_lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<FaultKey, u64>> {
        self.faults.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one injected fault.
    pub fn record_fault(&self, fault: &str, verb: &str, resource: &str) {
        let key = FaultKey {
            fault: fault.to_owned(),
            verb: verb.to_owned(),
            resource: resource.to_owned(),
        };
        *self.faults_lock().entry(key).or_default() += 1;
    }

    /// How many times a fault kind (`fail-503`, `latency`, `conflict`, `drop-watches`,
    /// `compact`) fired.
    pub fn fault_count(&self, fault: &str) -> u64 {
        self.faults_lock()
            .iter()
            .filter(|(k, _)| k.fault == fault)
            .map(|(_, v)| v)
            .sum()
    }

    /// Every injected fault that fired, with its count.
    pub fn faults(&self) -> Vec<(FaultKey, u64)> {
        self.faults_lock()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }
}

/// What a request was, for the request log: filled in as the chain learns it (the verb and
/// resource once routing resolved the URL), recorded when the answer is sent.
#[derive(Default)]
pub struct RequestLabel {
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    /// `X-Kubernetes-PF-*` header values ([`crate::filters::flowcontrol`]).
    pub pf: crate::filters::flowcontrol::PfUids,
}

/// Request-log label of a request not resolved to a resource: one of a fixed set of routes
/// (`/version`, `/healthz`, `/apis/{group}`, ...), or [`UNROUTED`] for every other path, so the
/// log and `/metrics` stay bounded whatever paths clients send.
pub fn non_resource_label(path: &str) -> &'static str {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["healthz"] => "/healthz",
        ["livez"] => "/livez",
        ["readyz"] => "/readyz",
        ["metrics"] => "/metrics",
        ["version"] => "/version",
        ["admin", "faults"] => "/admin/faults",
        ["api"] => "/api",
        ["api", "v1"] => "/api/v1",
        ["apis"] => "/apis",
        ["apis", _] => "/apis/{group}",
        ["apis", _, _] => "/apis/{group}/{version}",
        ["openapi", "v2"] => "/openapi/v2",
        ["openapi", "v3", ..] => "/openapi/v3",
        _ => UNROUTED,
    }
}

/// Request-log resource label of every request whose path matched no route (and of requests
/// refused before routing, such as `401`s).
pub const UNROUTED: &str = "<unrouted>";

#[cfg(test)]
mod tests {
    use super::*;

    fn key(verb: &str, res: &str, code: u16) -> RequestKey {
        RequestKey {
            verb: verb.into(),
            resource: res.into(),
            subresource: String::new(),
            namespace: "default".into(),
            code,
        }
    }

    #[test]
    fn counts_by_verb_resource_and_code() {
        let log = RequestLog::default();
        log.record(key("get", "pods", 200));
        log.record(key("get", "pods", 404));
        log.record(key("list", "pods", 200));
        assert_eq!(log.count("get", "pods"), 2);
        assert_eq!(log.count_code("get", "pods", 404), 1);
        assert_eq!(log.total(), 3);
        let text = log.prometheus_text();
        assert!(text.contains(
            "apiserver_request_total{verb=\"get\",resource=\"pods\",subresource=\"\",namespace=\"default\",code=\"404\"} 1"
        ));
        log.clear();
        assert_eq!(log.total(), 0);
    }

    #[test]
    fn distinct_namespaces_beyond_the_cap_share_one_key() {
        let log = RequestLog::default();
        for i in 0..MAX_KEYS + 5_000 {
            let mut k = key("get", "pods", 404);
            k.namespace = format!("ns-{i}");
            log.record(k);
        }
        assert_eq!(log.snapshot().len(), MAX_KEYS + 1);
        assert_eq!(log.count("get", "pods"), (MAX_KEYS + 5_000) as u64);
        assert_eq!(log.count_where(|k| k.namespace == OTHER_NAMESPACE), 5_000);
    }
}
