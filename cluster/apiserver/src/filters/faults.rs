//! Fault injection: make the server misbehave on purpose, deterministically.
//!
//! A controller is only as good as its error paths, and a real cluster exercises them at
//! random: a watch connection drops, etcd compacts and the next watch gets `410 Gone`, an
//! overloaded server answers `429 Too Many Requests` with `Retry-After` or `503`, a write
//! races with another writer and gets `409 Conflict`, a request is slow. A test cannot wait for
//! those to happen; here it asks for them. Every fault is available on the handle
//! ([`crate::ApiServerHandle::faults`]) and, for a standalone server, over HTTP at
//! `/admin/faults` (see [`admin`]):
//!
//! | fault | what the client sees | client-go reaction it exercises |
//! |---|---|---|
//! | [`Faults::drop_watches`] | every open watch response ends now | the reflector re-watches from its last resourceVersion |
//! | [`Faults::compact`] | a watch or exact list from an older resourceVersion gets `410 Expired` | the reflector relists |
//! | [`Faults::inject`] with [`Fault::fail`] | the next N matching requests get the code with a proper `Status` (`500 InternalError`, `503 ServiceUnavailable`, `429 TooManyRequests` + `Retry-After`, `409 Conflict`, ...), or with [`Fault::plain_text`] the plain-text body the real overload filters send | retries, back-off, rate-limited requeues |
//! | [`Faults::inject`] with [`Fault::latency`] | matching requests wait before they are served | timeouts |
//! | [`Faults::disk_full`] | every write gets `500` (`etcdserver: mvcc: database space exceeded`) while reads go on, until lifted | errors on writes that are not the client's fault |
//! | [`Faults::conflict_next_updates`] | the next N updates (PUT, also of `/status`) of a resource find the object changed under them: a no-op write bumps its resourceVersion (watchers see a `MODIFIED`), then `409 Conflict` | re-read and retry |
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use embedded_apiserver::ApiServer;
//! use embedded_apiserver::faults::Fault;
//!
//! let server = ApiServer::builder().start().await?;
//! // The controller's next two status updates of `ats` are throttled, then its watches drop.
//! server.faults().inject(Fault::fail(429).verb("update").resource("ats").times(2).retry_after(1));
//! server.faults().drop_watches();
//! // ... run the controller, then check it coped:
//! assert_eq!(server.request_log().fault_count("drop-watches"), 1);
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! A request is matched by its Kubernetes verb (`get`, `list`, `watch`, `create`, `update`,
//! `patch`, `delete`, `deletecollection`) and its resource plural (`ats`, `pods`), either of
//! which may be `*`. Failures and conflicts are consumed one per matching request; latency
//! applies to every match until [`Faults::clear`] (or for `count` requests if given). Every
//! fault that fires is counted in the request log
//! ([`crate::RequestLog::fault_count`]), and the failed request itself is counted as usual
//! with its status code.
//!
//! Faults apply to HTTP requests only: the cluster's own components (the controller manager and
//! the node, reaching the server through [`crate::loopback`]) never see them, so a fault aimed
//! at the client under test does not also stop the pods it creates from running.
//!
//! Nothing like this exists in a real API server; the closest are chaos tools that kill
//! connections or pods. Faults are checked after authentication and authorization, where an
//! overloaded real server would reject a request.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::api::status::ApiError;
use crate::filters::request_log::RequestLog;
use crate::registry::Store;
use crate::registry::generic::Target;

/// What an injected fault does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FaultAction {
    /// Answer with this HTTP code and a matching `Status`.
    Fail {
        /// The status code (400–599).
        code: u16,
        /// `Retry-After` seconds (also `details.retryAfterSeconds`); 429 defaults to 1.
        retry_after: Option<u32>,
        /// Answer in plain text instead of a `Status`, as API Priority and Fairness and the
        /// max-in-flight filter do for their 429s.
        plain_text: bool,
    },
    /// Wait this long, then serve normally.
    Latency(Duration),
}

/// A fault rule: which requests, what happens, how many times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Kubernetes verb to match, or `*`.
    pub verb: String,
    /// Resource plural to match, or `*`.
    pub resource: String,
    /// What happens to a matching request.
    pub action: FaultAction,
    /// How many requests it applies to (`None`: until cleared).
    pub count: Option<u32>,
}

impl Fault {
    /// Fail the next matching request with `code` (chain [`Fault::times`] for more).
    pub fn fail(code: u16) -> Self {
        Fault {
            verb: "*".into(),
            resource: "*".into(),
            action: FaultAction::Fail {
                code,
                retry_after: (code == 429).then_some(1),
                plain_text: false,
            },
            count: Some(1),
        }
    }

    /// Delay every matching request by `d` (until cleared, or [`Fault::times`]).
    pub fn latency(d: Duration) -> Self {
        Fault {
            verb: "*".into(),
            resource: "*".into(),
            action: FaultAction::Latency(d),
            count: None,
        }
    }

    /// Only requests with this verb (`get`, `list`, `watch`, `create`, `update`, `patch`,
    /// `delete`, `deletecollection`).
    pub fn verb(mut self, verb: impl Into<String>) -> Self {
        self.verb = verb.into();
        self
    }

    /// Only requests on this resource plural.
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = resource.into();
        self
    }

    /// Applies to `n` matching requests.
    pub fn times(mut self, n: u32) -> Self {
        self.count = Some(n);
        self
    }

    /// `Retry-After` seconds for a failure.
    pub fn retry_after(mut self, secs: u32) -> Self {
        if let FaultAction::Fail { retry_after, .. } = &mut self.action {
            *retry_after = Some(secs);
        }
        self
    }

    /// Answer a failure in plain text (`Too many requests, please try again later.` for 429)
    /// with only the `Retry-After` header, like the real server's overload filters.
    pub fn plain_text(mut self) -> Self {
        if let FaultAction::Fail { plain_text, .. } = &mut self.action {
            *plain_text = true;
        }
        self
    }

    fn matches(&self, verb: &str, resource: &str) -> bool {
        (self.verb == "*" || self.verb == verb)
            && (self.resource == "*" || self.resource == resource)
    }
}

#[derive(Debug, Default)]
struct Rules {
    faults: Vec<Fault>,
    /// `(resource or "*", remaining)`.
    conflicts: Vec<(String, u32)>,
}

/// The fault switchboard of one server. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Faults {
    rules: Arc<Mutex<Rules>>,
    watches: Arc<Mutex<CancellationToken>>,
    shutdown: CancellationToken,
    store: Arc<Store>,
    log: RequestLog,
}

impl Faults {
    /// Faults for a server whose watches end at `shutdown`.
    pub fn new(store: Arc<Store>, log: RequestLog, shutdown: CancellationToken) -> Self {
        Faults {
            rules: Arc::default(),
            watches: Arc::new(Mutex::new(shutdown.child_token())),
            shutdown,
            store,
            log,
        }
    }

    fn rules(&self) -> std::sync::MutexGuard<'_, Rules> {
        self.rules.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The token a new watch ends on: cancelled at shutdown or by [`Faults::drop_watches`].
    pub fn watch_token(&self) -> CancellationToken {
        self.watches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .child_token()
    }

    /// Ends every open watch now (watches started afterwards are unaffected).
    pub fn drop_watches(&self) {
        let mut current = self.watches.lock().unwrap_or_else(|e| e.into_inner());
        current.cancel();
        *current = self.shutdown.child_token();
        self.log.record_fault("drop-watches", "watch", "*");
        tracing::info!("fault injected: dropped every open watch");
    }

    /// Drops the watch history: the next watch (or exact list) from an older resourceVersion
    /// gets `410 Expired`.
    pub fn compact(&self) {
        self.store.write(|s| s.compact());
        self.log.record_fault("compact", "*", "*");
        tracing::info!("fault injected: compacted the watch history");
    }

    /// The data directory ([`crate::ApiServerBuilder::data_dir`]) fills up (`true`) or has
    /// room again (`false`): while full, every commit fails as on a full disk, so the store turns
    /// read-only as etcd does on `NOSPACE` (writes answer `500 etcdserver: mvcc: database space
    /// exceeded`, reads go on) and recovers once there is room. No effect on a server that
    /// keeps its state in memory. Loopback writes (the cluster's own components) fail too: the
    /// disk is the whole server's.
    pub fn disk_full(&self, full: bool) {
        self.store.simulate_disk_full(full);
        if full {
            self.log.record_fault("disk-full", "*", "*");
        }
        tracing::info!(full, "fault injected: data directory full");
    }

    /// Adds a fault rule.
    pub fn inject(&self, fault: Fault) {
        tracing::info!(verb = %fault.verb, resource = %fault.resource, action = ?fault.action, count = ?fault.count, "fault rule added");
        self.rules().faults.push(fault);
    }

    /// The next `n` updates (PUT) of `resource` (or `*`) hit a resourceVersion conflict.
    ///
    /// Patches are left alone: a real server retries a patch without a resourceVersion
    /// internally, so clients never see a conflict for one; use [`Fault::fail`] with 409 on
    /// `patch` to force one anyway.
    pub fn conflict_next_updates(&self, resource: impl Into<String>, n: u32) {
        self.rules().conflicts.push((resource.into(), n));
    }

    /// Removes every fault rule and pending conflict.
    pub fn clear(&self) {
        let mut r = self.rules();
        r.faults.clear();
        r.conflicts.clear();
    }

    /// The rules still active.
    pub fn active(&self) -> Vec<Fault> {
        self.rules().faults.clone()
    }

    /// Runs the faults that match a request, before it is served: waits for injected
    /// latency, then fails it if a failure or conflict applies.
    pub async fn before(&self, verb: &str, target: &Target) -> Result<(), ApiError> {
        let resource = target.def.plural.as_str();
        let (delay, failure, conflict) = {
            let mut r = self.rules();
            let mut delay = Duration::ZERO;
            let mut failure = None;
            for f in r.faults.iter_mut() {
                if !f.matches(verb, resource) || f.count == Some(0) {
                    continue;
                }
                match &f.action {
                    FaultAction::Latency(d) => delay += *d,
                    FaultAction::Fail {
                        code,
                        retry_after,
                        plain_text,
                    } => {
                        if failure.is_some() {
                            continue;
                        }
                        failure = Some((*code, *retry_after, *plain_text));
                    }
                }
                if let Some(c) = f.count.as_mut() {
                    *c -= 1;
                }
            }
            r.faults.retain(|f| f.count != Some(0));
            let mut conflict = false;
            if failure.is_none()
                && verb == "update"
                && target.name.is_some()
                && let Some(entry) = r
                    .conflicts
                    .iter_mut()
                    .find(|(res, n)| *n > 0 && (res == "*" || res == resource))
            {
                entry.1 -= 1;
                conflict = true;
            }
            r.conflicts.retain(|(_, n)| *n > 0);
            (delay, failure, conflict)
        };
        if !delay.is_zero() {
            self.log.record_fault("latency", verb, resource);
            tokio::time::sleep(delay).await;
        }
        if let Some((code, retry_after, plain_text)) = failure {
            self.log
                .record_fault(&format!("fail-{code}"), verb, resource);
            if plain_text {
                let message = if code == 429 {
                    "Too many requests, please try again later.".to_owned()
                } else {
                    format!("injected fault on {verb} {resource}")
                };
                return Err(ApiError {
                    plain_text: true,
                    retry_after,
                    ..ApiError::new(code, "", message)
                });
            }
            return Err(failure_error(code, retry_after, verb, target));
        }
        if conflict {
            self.log.record_fault("conflict", verb, resource);
            return Err(self.conflict(target));
        }
        Ok(())
    }

    /// A concurrent writer touches the object (a no-op write: new resourceVersion, a MODIFIED
    /// event), and the request gets the 409 it would get after such a race.
    fn conflict(&self, target: &Target) -> ApiError {
        let def = &target.def;
        let name = target.name.clone().unwrap_or_default();
        let ns = if def.namespaced {
            target.namespace.clone().unwrap_or_default()
        } else {
            String::new()
        };
        self.store.write(|st| {
            if let Some(obj) = st.get(&def.storage, &ns, &name).cloned() {
                st.update(&def.storage, obj);
            }
        });
        ApiError::conflict(&def.plural, &def.group, &name)
    }
}

/// The Status a real server would send with `code`.
fn failure_error(code: u16, retry_after: Option<u32>, verb: &str, target: &Target) -> ApiError {
    let def = &target.def;
    let name = target.name.as_deref().unwrap_or_default();
    let mut e = match code {
        409 => ApiError::conflict(&def.plural, &def.group, name),
        429 => ApiError::new(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
        ),
        500 => ApiError::internal(format!("injected fault on {verb} {}", def.plural)),
        503 => ApiError::new(
            503,
            "ServiceUnavailable",
            "The server is currently unable to handle the request",
        ),
        504 => ApiError::new(
            504,
            "Timeout",
            format!("Timeout: the {verb} of {} timed out", def.plural),
        ),
        404 => ApiError::not_found(&def.plural, &def.group, name),
        403 => ApiError::forbidden(&def.plural, &def.group, name, "injected fault"),
        400 => ApiError::bad_request(format!("injected fault on {verb} {}", def.plural)),
        c => ApiError::new(
            c,
            "Unknown",
            format!("injected fault on {verb} {}", def.plural),
        ),
    };
    if let Some(secs) = retry_after {
        e.retry_after = Some(secs);
        let mut d = e.details.take().unwrap_or_else(|| json!({}));
        d["retryAfterSeconds"] = json!(secs);
        e.details = Some(d);
    }
    e
}

/// The Kubernetes verb of a request (what RBAC and the request log call it).
pub fn verb_of(method: &http::Method, has_name: bool, watch: bool) -> &'static str {
    match *method {
        http::Method::GET | http::Method::HEAD if watch => "watch",
        http::Method::GET | http::Method::HEAD if has_name => "get",
        http::Method::GET | http::Method::HEAD => "list",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if has_name => "delete",
        http::Method::DELETE => "deletecollection",
        _ => "unknown",
    }
}

/// `/admin/faults`: the handle's fault methods over HTTP, for a standalone server. Only the
/// bootstrap (admin) token reaches it; anyone else gets 403.
///
/// * `GET /admin/faults` lists the active rules and the fault counts.
/// * `POST /admin/faults` with one JSON object:
///   - `{"action": "dropWatches"}`
///   - `{"action": "compact"}`
///   - `{"action": "fail", "code": 503, "verb": "update", "resource": "ats", "count": 2,
///     "retryAfterSeconds": 1, "plainText": false}` (`verb`/`resource` default to `*`, `count`
///     to 1; `plainText` answers without a Status body, like the overload filters' 429)
///   - `{"action": "latency", "millis": 250, "verb": "*", "resource": "pods", "count": 10}`
///     (`count` omitted: until cleared)
///   - `{"action": "conflict", "resource": "ats", "count": 1}`
///   - `{"action": "clear"}`
///
/// answered with `{"kind": "Status", "status": "Success", ...}`, or 400 naming the bad field.
/// ```text
/// curl -k -H "Authorization: Bearer $TOKEN" -X POST https://127.0.0.1:6443/admin/faults \
///      -d '{"action":"fail","code":503,"verb":"list","resource":"ats","count":3}'
/// ```
pub fn admin(faults: &Faults, method: &http::Method, body: &[u8]) -> Result<Value, ApiError> {
    if *method == http::Method::GET {
        let rules: Vec<Value> = faults.active().iter().map(fault_json).collect();
        let counts: Vec<Value> = faults
            .log
            .faults()
            .into_iter()
            .map(|(k, n)| json!({"fault": k.fault, "verb": k.verb, "resource": k.resource, "count": n}))
            .collect();
        return Ok(json!({"rules": rules, "fired": counts}));
    }
    if *method != http::Method::POST {
        return Err(ApiError::method_not_allowed(method.as_str(), "faults", ""));
    }
    let req: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding fault request: {e}")))?;
    let s = |f: &str, default: &str| -> Result<String, ApiError> {
        match &req[f] {
            Value::Null => Ok(default.to_owned()),
            Value::String(s) if !s.is_empty() => Ok(s.clone()),
            other => Err(ApiError::bad_request(format!(
                "field {f}: expected a non-empty string, got {other}"
            ))),
        }
    };
    let n = |f: &str| -> Result<Option<u64>, ApiError> {
        match &req[f] {
            Value::Null => Ok(None),
            v => v.as_u64().map(Some).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "field {f}: expected a non-negative integer, got {v}"
                ))
            }),
        }
    };
    let count = |f: &str| -> Result<Option<u32>, ApiError> {
        n(f)?
            .map(|v| {
                u32::try_from(v)
                    .map_err(|_| ApiError::bad_request(format!("field {f}: {v} is too large")))
            })
            .transpose()
    };
    let action = s("action", "")?;
    match action.as_str() {
        "dropWatches" => faults.drop_watches(),
        "compact" => faults.compact(),
        "clear" => faults.clear(),
        "conflict" => {
            faults.conflict_next_updates(s("resource", "*")?, count("count")?.unwrap_or(1))
        }
        "fail" => {
            let code = n("code")?.ok_or_else(|| ApiError::bad_request("field code: required"))?;
            if !(400..=599).contains(&code) {
                return Err(ApiError::bad_request(format!(
                    "field code: {code} is not an HTTP error code (400-599)"
                )));
            }
            let mut f = Fault::fail(code as u16)
                .verb(s("verb", "*")?)
                .resource(s("resource", "*")?)
                .times(count("count")?.unwrap_or(1));
            if let Some(r) = count("retryAfterSeconds")? {
                f = f.retry_after(r);
            }
            match &req["plainText"] {
                Value::Null | Value::Bool(false) => {}
                Value::Bool(true) => f = f.plain_text(),
                other => {
                    return Err(ApiError::bad_request(format!(
                        "field plainText: expected a boolean, got {other}"
                    )));
                }
            }
            faults.inject(f);
        }
        "latency" => {
            let millis =
                n("millis")?.ok_or_else(|| ApiError::bad_request("field millis: required"))?;
            let mut f = Fault::latency(Duration::from_millis(millis))
                .verb(s("verb", "*")?)
                .resource(s("resource", "*")?);
            if let Some(c) = count("count")? {
                f = f.times(c);
            }
            faults.inject(f);
        }
        other => {
            return Err(ApiError::bad_request(format!(
                "field action: unknown action {other:?} (dropWatches, compact, fail, latency, conflict, clear)"
            )));
        }
    }
    Ok(
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
              "message": format!("fault {action} applied")}),
    )
}

fn fault_json(f: &Fault) -> Value {
    let mut v = json!({"verb": f.verb, "resource": f.resource, "count": f.count});
    match &f.action {
        FaultAction::Fail {
            code,
            retry_after,
            plain_text,
        } => {
            v["action"] = json!("fail");
            v["code"] = json!(code);
            v["retryAfterSeconds"] = json!(retry_after);
            v["plainText"] = json!(plain_text);
        }
        FaultAction::Latency(d) => {
            v["action"] = json!("latency");
            v["millis"] = json!(d.as_millis() as u64);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::resources::Registry;

    fn target(plural: &str) -> Target {
        let def = Registry::builtins().lookup("", "v1", plural).unwrap();
        Target {
            def,
            namespace: Some("default".into()),
            name: Some("x".into()),
            subresource: None,
        }
    }

    fn faults() -> Faults {
        Faults::new(
            Arc::new(Store::new(10)),
            RequestLog::default(),
            CancellationToken::new(),
        )
    }

    #[tokio::test]
    async fn failures_are_consumed_per_matching_request() {
        let f = faults();
        f.inject(Fault::fail(503).verb("get").resource("pods").times(2));
        assert!(f.before("get", &target("configmaps")).await.is_ok());
        assert!(f.before("list", &target("pods")).await.is_ok());
        assert_eq!(
            f.before("get", &target("pods")).await.unwrap_err().code,
            503
        );
        assert_eq!(
            f.before("get", &target("pods")).await.unwrap_err().code,
            503
        );
        assert!(f.before("get", &target("pods")).await.is_ok());
        assert!(f.active().is_empty());
        assert_eq!(f.log.fault_count("fail-503"), 2);
    }

    #[tokio::test]
    async fn too_many_requests_carries_retry_after() {
        let f = faults();
        f.inject(Fault::fail(429));
        let e = f.before("list", &target("pods")).await.unwrap_err();
        assert_eq!(e.retry_after, Some(1));
        assert_eq!(e.to_status()["details"]["retryAfterSeconds"], 1);
        assert_eq!(e.reason, "TooManyRequests");
    }

    #[tokio::test(start_paused = true)]
    async fn latency_delays_in_virtual_time() {
        let f = faults();
        f.inject(Fault::latency(Duration::from_secs(5)).verb("get"));
        let start = tokio::time::Instant::now();
        f.before("get", &target("pods")).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        f.before("list", &target("pods")).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_secs(5));
    }

    #[test]
    fn admin_requests_name_the_bad_field() {
        let f = faults();
        let e = admin(&f, &http::Method::POST, br#"{"action":"fail","code":200}"#).unwrap_err();
        assert!(e.message.contains("field code"), "{}", e.message);
        let e = admin(&f, &http::Method::POST, br#"{"action":"explode"}"#).unwrap_err();
        assert!(e.message.contains("field action"), "{}", e.message);
        let e = admin(
            &f,
            &http::Method::POST,
            br#"{"action":"latency","millis":-1}"#,
        )
        .unwrap_err();
        assert!(e.message.contains("field millis"), "{}", e.message);
        admin(
            &f,
            &http::Method::POST,
            br#"{"action":"fail","code":500,"resource":"ats"}"#,
        )
        .unwrap();
        assert_eq!(f.active().len(), 1);
    }
}
