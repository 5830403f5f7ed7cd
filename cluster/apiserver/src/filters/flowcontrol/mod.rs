//! API Priority and Fairness: the server's overload protection (KEP-1040,
//! `flowcontrol.apiserver.k8s.io/v1`).
//!
//! An API server has a fixed amount of concurrency: kube-apiserver's
//! `--max-requests-inflight` (default 400) plus `--max-mutating-requests-inflight` (default
//! 200), 600 *seats* in all. Without protection one runaway client (a controller in a hot loop, a
//! script listing in a tight loop) takes all of them and every other client, including the
//! controllers that keep the cluster healthy, times out. APF divides the seats and queues the
//! excess fairly:
//!
//! 1. **Classification.** Every request (after authentication and impersonation, before
//!    authorization, as in the real handler chain) is matched against the **FlowSchemas**, in
//!    ascending `matchingPrecedence` (then name). A schema matches when one of its rules matches
//!    the request's subject (user, group or service account), verb, and either resource
//!    (API group, `resource` or `resource/subresource`, namespace or cluster scope) or
//!    non-resource URL. The first match decides the request's **priority level** and its
//!    **flow**: the schema's name plus a *distinguisher*, the user name (`ByUser`), the
//!    namespace (`ByNamespace`) or nothing.
//! 2. **Seats per level.** Each `Limited` **PriorityLevelConfiguration** gets
//!    `ceil(600 × nominalConcurrencyShares / Σ shares)` seats (the real server's nominal
//!    concurrency limit; borrowing between levels through `lendablePercent` is not
//!    simulated, so each level has exactly its nominal seats). The `Exempt` level
//!    (`system:masters` and health probes) is never limited.
//! 3. **Fair queuing** inside a level ([`queueset`]): shuffle sharding deals each flow a hand of
//!    queues, a request joins the shortest queue of its hand, and seats go to queues in turn.
//!    A request that finds its queue full (`queueLengthLimit`), or whose level is of type
//!    `Reject` and has no free seat, or that waits longer than the queue wait limit (15 s, a
//!    quarter of the real server's 60 s request timeout), is answered `429 TooManyRequests` with
//!    `Retry-After: 1` and a `Status` (the real filter writes the same message as plain text;
//!    client-go treats both alike).
//! 4. **Width.** A request occupies one seat, except a LIST, which occupies one seat per 100
//!    objects it is estimated to process, at most 10 ([`list_width`], after kube-apiserver's
//!    list work estimator, `staging/src/k8s.io/apiserver/pkg/util/flowcontrol/request/list_work_estimator.go`).
//!    It waits until that many seats of its level are free ([`queueset`]), so concurrent large
//!    LISTs, each building a full copy of a big collection in memory, run at most
//!    `seats / width` at a time while the others queue, and the memory they hold together is
//!    bounded by the level's seats; narrow requests of other flows keep their turns.
//!    `apiserver_flowcontrol_current_executing_seats` shows the seats in use.
//! 5. **Long-running requests.** A watch holds its seat only while the server builds its
//!    initial events; once the stream is running it holds none (as in the real server, whose
//!    watch initialization signal releases the seat). An exec, attach or port-forward holds
//!    its seat until the connection is upgraded, never for the session, and without APF the
//!    max-in-flight limits do not count them ([`RequestDigest::is_long_running`]).
//! 6. **Visibility.** Every response, including a 429, carries
//!    `X-Kubernetes-PF-FlowSchema-UID` and `X-Kubernetes-PF-PriorityLevel-UID` (clients use
//!    them to detect APF), and `/metrics` serves `apiserver_flowcontrol_dispatched_requests_total`,
//!    `apiserver_flowcontrol_rejected_requests_total` (by `reason`),
//!    `apiserver_flowcontrol_current_inqueue_requests`,
//!    `apiserver_flowcontrol_current_executing_requests`,
//!    `apiserver_flowcontrol_current_executing_seats` (labels `flow_schema`,
//!    `priority_level`) and `apiserver_flowcontrol_nominal_limit_seats`.
//!
//! The objects are ordinary resources: the defaults of [`bootstrap`] are created at start,
//! `kubectl get flowschemas,prioritylevelconfigurations` lists them, and creating, changing or
//! deleting them reconfigures the dispatcher within moments ([`FlowControl::spawn_config_watch`]
//! follows the store). Unlike the real server, deleted mandatory objects are not re-created; a
//! request no schema matches is served by a built-in copy of the mandatory `catch-all` level.
//!
//! With APF turned off ([`Settings::enabled`]), the server behaves like kube-apiserver with
//! `--enable-priority-and-fairness=false`: the max-in-flight filter keeps two plain limits,
//! read-only requests and mutating requests, answers `429` at once when one is reached, and
//! sends no `X-Kubernetes-PF-*` headers.
//!
//! Data in: a [`RequestDigest`]. Data out: a [`Ticket`] that holds the seat until dropped, or
//! the 429 to send. Memory is bounded by the configured queues, never by the number of clients.

pub mod bootstrap;
pub mod queueset;

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock};
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::object_meta::{meta_str, new_uid, now_time};
use crate::api::status::ApiError;
use crate::auth::rbac::UserInfo;
use crate::registry::Store;
use queueset::{Admission, QueueSet, QueueSetConfig, Rejection, Seat};

/// The most seats one request may occupy (`maximumSeats` of kube-apiserver's
/// `WorkEstimatorConfig`, `staging/src/k8s.io/apiserver/pkg/util/flowcontrol/request/config.go`);
/// a level with fewer seats clamps it to its own.
pub const MAXIMUM_SEATS: usize = 10;

/// Objects a LIST processes per seat (`objectsPerSeat` of `ListWorkEstimatorConfig`).
const OBJECTS_PER_SEAT: u64 = 100;

/// The seats a LIST occupies, as kube-apiserver's list work estimator computes them
/// (`staging/src/k8s.io/apiserver/pkg/util/flowcontrol/request/list_work_estimator.go`,
/// `seatsBasedOnObjectCount`): from `stored`, the number of objects of the resource (its
/// object-count tracker's figure; `None` when the resource is unknown, which costs the minimum),
/// and the list's options:
///
/// * a list of one object by name (a `metadata.name=` field selector) processes 1 object;
/// * a list the watch cache serves (no `continue`, no exact `resourceVersion`, which the
///   estimator assumes go to etcd, `delegator.CacheWithoutSnapshots`) processes every stored
///   object, whatever its `limit` or selectors;
/// * a list from etcd with a label or field selector processes `stored + limit`;
/// * any other list from etcd `2 × limit` (`limit` capped at `stored`).
///
/// Seats are `ceil(objects / 100)`, at least 1 and at most [`MAXIMUM_SEATS`]; options that do
/// not parse cost the maximum (the request is bound to fail validation, as upstream reasons).
pub fn list_width(stored: Option<u64>, opts: Option<&crate::api::query::ListOptions>) -> usize {
    let Some(opts) = opts else {
        return MAXIMUM_SEATS;
    };
    let Some(stored) = stored else {
        return 1;
    };
    let single = crate::api::selectors::FieldSelector::parse(&opts.field_selector)
        .ok()
        .is_some_and(|f| f.required_name().is_some());
    let rv = opts.resource_version.as_str();
    let from_storage = !opts.continue_token.is_empty()
        || opts.rv_match == Some(crate::api::query::RvMatch::Exact)
        || (opts.rv_match.is_none() && opts.limit > 0 && !rv.is_empty() && rv != "0");
    let limit = if opts.limit > 0 && opts.limit < stored {
        opts.limit
    } else {
        stored
    };
    let objects = if single {
        1
    } else if !from_storage {
        stored
    } else if !opts.label_selector.is_empty() || !opts.field_selector.is_empty() {
        stored + limit
    } else {
        2 * limit
    };
    (objects.div_ceil(OBJECTS_PER_SEAT) as usize).clamp(1, MAXIMUM_SEATS)
}

/// Storage key of FlowSchemas.
pub const FLOW_SCHEMAS: &str = "flowcontrol.apiserver.k8s.io/flowschemas";
/// Storage key of PriorityLevelConfigurations.
pub const PRIORITY_LEVELS: &str = "flowcontrol.apiserver.k8s.io/prioritylevelconfigurations";
/// Response header naming the FlowSchema that classified a request.
pub const FLOW_SCHEMA_UID_HEADER: &str = "X-Kubernetes-PF-FlowSchema-UID";
/// Response header naming the priority level that served a request.
pub const PRIORITY_LEVEL_UID_HEADER: &str = "X-Kubernetes-PF-PriorityLevel-UID";

/// How the server limits concurrency.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// API Priority and Fairness (default on); off, the plain max-in-flight limits apply.
    pub enabled: bool,
    /// `--max-requests-inflight` (default 400).
    pub max_requests_inflight: usize,
    /// `--max-mutating-requests-inflight` (default 200).
    pub max_mutating_requests_inflight: usize,
    /// How long a request may wait in a queue before it is rejected (default 15 s).
    pub queue_wait: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            enabled: true,
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            queue_wait: Duration::from_secs(15),
        }
    }
}

/// What APF needs to know about a request (the real server's `RequestDigest`: `RequestInfo`
/// plus the user).
#[derive(Clone, Debug)]
pub struct RequestDigest<'a> {
    /// The user the request acts as (after impersonation).
    pub user: &'a UserInfo,
    /// Kubernetes verb for resource requests, lower-cased HTTP method otherwise.
    pub verb: String,
    /// Whether the URL names an API resource.
    pub is_resource: bool,
    /// API group (`""` for core).
    pub api_group: String,
    /// `resource` or `resource/subresource`.
    pub resource: String,
    /// Namespace, empty for cluster-scoped and non-resource requests.
    pub namespace: String,
    /// The URL path.
    pub path: String,
    /// Seats the request occupies while it executes (its work estimate, see [`list_width`]);
    /// 1 unless set.
    pub width: usize,
}

impl<'a> RequestDigest<'a> {
    /// Classifies a request by its method, path and `watch` parameter, without consulting the
    /// resource table (like the real `RequestInfoFactory`).
    pub fn new(method: &http::Method, path: &str, watch: bool, user: &'a UserInfo) -> Self {
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let rest = match segs.as_slice() {
            ["api", "v1", rest @ ..] if !rest.is_empty() => Some(("", rest)),
            ["apis", g, _, rest @ ..] if !rest.is_empty() => Some((*g, rest)),
            _ => None,
        };
        let parsed = rest.map(|(group, rest)| {
            let (ns, res, tail) = match rest {
                ["namespaces", ns, res, tail @ ..] if *res != "status" && *res != "finalize" => {
                    (*ns, *res, tail)
                }
                [res, tail @ ..] => ("", *res, tail),
                [] => ("", "", &[][..]),
            };
            let resource = match tail.get(1) {
                Some(sub) => format!("{res}/{sub}"),
                None => res.to_owned(),
            };
            (group, ns, resource, !tail.is_empty())
        });
        match parsed {
            Some((group, ns, resource, has_name)) => RequestDigest {
                user,
                verb: crate::filters::faults::verb_of(method, has_name, watch).to_owned(),
                is_resource: true,
                api_group: group.to_owned(),
                resource,
                namespace: ns.to_owned(),
                path: path.to_owned(),
                width: 1,
            },
            None => RequestDigest {
                user,
                verb: method.as_str().to_ascii_lowercase(),
                is_resource: false,
                api_group: String::new(),
                resource: String::new(),
                namespace: String::new(),
                path: path.to_owned(),
                width: 1,
            },
        }
    }

    /// A long-running request, which the max-in-flight limits do not count (kube-apiserver's
    /// `BasicLongRunningRequestCheck`): a watch, or a streaming subresource (`attach`, `exec`,
    /// `portforward`, `proxy`, `log`), whose connection lives as long as its session. Under
    /// API Priority and Fairness such a request holds its seat only until it is answered (the
    /// upgrade or the first bytes), never for the session.
    pub fn is_long_running(&self) -> bool {
        self.verb == "watch"
            || (self.is_resource
                && self.resource.rsplit_once('/').is_some_and(|(_, sub)| {
                    matches!(sub, "attach" | "exec" | "portforward" | "proxy" | "log")
                }))
    }

    fn is_mutating(&self) -> bool {
        !matches!(
            self.verb.as_str(),
            "get" | "list" | "watch" | "head" | "options"
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Compiled configuration

#[derive(Clone, Debug)]
enum Subject {
    User(String),
    Group(String),
    ServiceAccount { namespace: String, name: String },
}

impl Subject {
    fn matches(&self, user: &UserInfo) -> bool {
        match self {
            Subject::User(n) => n == "*" || *n == user.name,
            Subject::Group(g) => g == "*" || user.groups.iter().any(|x| x == g),
            Subject::ServiceAccount { namespace, name } => user
                .name
                .strip_prefix("system:serviceaccount:")
                .and_then(|r| r.split_once(':'))
                .is_some_and(|(ns, n)| ns == namespace && (name == "*" || name == n)),
        }
    }
}

fn listed(list: &[String], v: &str) -> bool {
    list.iter().any(|x| x == "*" || x == v)
}

#[derive(Clone, Debug, Default)]
struct ResourceRule {
    verbs: Vec<String>,
    groups: Vec<String>,
    resources: Vec<String>,
    namespaces: Vec<String>,
    cluster_scope: bool,
}

#[derive(Clone, Debug, Default)]
struct NonResourceRule {
    verbs: Vec<String>,
    urls: Vec<String>,
}

fn url_matches(pattern: &str, path: &str) -> bool {
    if pattern == "*" || pattern == path {
        return true;
    }
    match pattern.strip_suffix("/*") {
        Some(prefix) => path == prefix || path.starts_with(&format!("{prefix}/")),
        None => false,
    }
}

#[derive(Clone, Debug, Default)]
struct Rule {
    subjects: Vec<Subject>,
    resource_rules: Vec<ResourceRule>,
    non_resource_rules: Vec<NonResourceRule>,
}

impl Rule {
    fn matches(&self, d: &RequestDigest<'_>) -> bool {
        if !self.subjects.iter().any(|s| s.matches(d.user)) {
            return false;
        }
        if d.is_resource {
            self.resource_rules.iter().any(|r| {
                listed(&r.verbs, &d.verb)
                    && listed(&r.groups, &d.api_group)
                    && listed(&r.resources, &d.resource)
                    && if d.namespace.is_empty() {
                        r.cluster_scope
                    } else {
                        listed(&r.namespaces, &d.namespace)
                    }
            })
        } else {
            self.non_resource_rules.iter().any(|r| {
                listed(&r.verbs, &d.verb) && r.urls.iter().any(|u| url_matches(u, &d.path))
            })
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Distinguisher {
    None,
    ByUser,
    ByNamespace,
}

#[derive(Clone, Debug)]
struct Schema {
    name: String,
    uid: String,
    level: String,
    precedence: i64,
    distinguisher: Distinguisher,
    rules: Vec<Rule>,
}

/// One priority level as configured now.
#[derive(Debug)]
struct Level {
    name: String,
    uid: String,
    /// `None` for the exempt level.
    set: Option<Arc<QueueSet>>,
}

#[derive(Debug, Default)]
struct Config {
    schemas: Vec<Schema>,
    levels: HashMap<String, Arc<Level>>,
    fallback: Option<Arc<Level>>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn parse_schema(obj: &Value) -> Option<Schema> {
    let spec = &obj["spec"];
    let subject = |s: &Value| -> Option<Subject> {
        match s["kind"].as_str()? {
            "User" => Some(Subject::User(s["user"]["name"].as_str()?.to_owned())),
            "Group" => Some(Subject::Group(s["group"]["name"].as_str()?.to_owned())),
            "ServiceAccount" => Some(Subject::ServiceAccount {
                namespace: s["serviceAccount"]["namespace"].as_str()?.to_owned(),
                name: s["serviceAccount"]["name"].as_str()?.to_owned(),
            }),
            _ => None,
        }
    };
    let rules = spec["rules"]
        .as_array()
        .map(|rules| {
            rules
                .iter()
                .map(|r| Rule {
                    subjects: r["subjects"]
                        .as_array()
                        .map(|a| a.iter().filter_map(subject).collect())
                        .unwrap_or_default(),
                    resource_rules: r["resourceRules"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|rr| ResourceRule {
                                    verbs: strings(&rr["verbs"]),
                                    groups: strings(&rr["apiGroups"]),
                                    resources: strings(&rr["resources"]),
                                    namespaces: strings(&rr["namespaces"]),
                                    cluster_scope: rr["clusterScope"].as_bool().unwrap_or(false),
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                    non_resource_rules: r["nonResourceRules"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|nr| NonResourceRule {
                                    verbs: strings(&nr["verbs"]),
                                    urls: strings(&nr["nonResourceURLs"]),
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default();
    Some(Schema {
        name: obj["metadata"]["name"].as_str()?.to_owned(),
        uid: obj["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        level: spec["priorityLevelConfiguration"]["name"]
            .as_str()?
            .to_owned(),
        precedence: spec["matchingPrecedence"].as_i64().unwrap_or(1000),
        distinguisher: match spec["distinguisherMethod"]["type"].as_str() {
            Some("ByUser") => Distinguisher::ByUser,
            Some("ByNamespace") => Distinguisher::ByNamespace,
            _ => Distinguisher::None,
        },
        rules,
    })
}

/// `(name, uid, exempt, shares, queuing)` of one PriorityLevelConfiguration.
type ParsedLevel = (String, String, bool, u64, Option<(usize, usize, usize)>);

/// `(exempt, shares, queuing)` of a PriorityLevelConfiguration; queuing `None` means `Reject`.
fn parse_level(obj: &Value) -> (bool, u64, Option<(usize, usize, usize)>) {
    let spec = &obj["spec"];
    if spec["type"].as_str() == Some("Exempt") {
        return (true, 0, None);
    }
    let limited = &spec["limited"];
    // v1 defaults nominalConcurrencyShares to 30 when unset.
    let shares = limited["nominalConcurrencyShares"].as_u64().unwrap_or(30);
    let lr = &limited["limitResponse"];
    let queuing = (lr["type"].as_str() == Some("Queue")).then(|| {
        let q = &lr["queuing"];
        let n = |k: &str, d: u64| q[k].as_u64().unwrap_or(d).clamp(1, 1 << 20) as usize;
        (n("queues", 64), n("handSize", 8), n("queueLengthLimit", 50))
    });
    (false, shares, queuing)
}

impl Config {
    /// Builds the dispatcher configuration, keeping the queues of every level whose limits did
    /// not change (so requests waiting there stay in line).
    fn compile(
        schemas: &[Value],
        levels: &[Value],
        server_concurrency: usize,
        previous: &Config,
    ) -> Config {
        let parsed: Vec<ParsedLevel> = levels
            .iter()
            .filter_map(|o| {
                let name = o["metadata"]["name"].as_str()?.to_owned();
                let uid = o["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
                let (exempt, shares, q) = parse_level(o);
                Some((name, uid, exempt, shares, q))
            })
            .collect();
        let mut total: u64 = parsed.iter().filter(|p| !p.2).map(|p| p.3).sum();
        let catch_all_present = parsed.iter().any(|p| p.0 == "catch-all");
        if !catch_all_present {
            total += 5;
        }
        let total = total.max(1);
        let seats_for = |shares: u64| -> usize {
            ((server_concurrency as u64 * shares).div_ceil(total)).max(1) as usize
        };
        let make =
            |name: &str, uid: &str, exempt: bool, shares: u64, q: Option<(usize, usize, usize)>| {
                let set = (!exempt).then(|| {
                    let cfg = QueueSetConfig {
                        seats: seats_for(shares),
                        queues: q.map_or(0, |q| q.0),
                        hand_size: q.map_or(0, |q| q.1),
                        queue_length_limit: q.map_or(0, |q| q.2),
                    };
                    match previous.levels.get(name).and_then(|l| l.set.clone()) {
                        Some(set) if *set.config() == cfg => set,
                        _ => QueueSet::new(cfg),
                    }
                });
                Arc::new(Level {
                    name: name.to_owned(),
                    uid: uid.to_owned(),
                    set,
                })
            };
        let levels: HashMap<String, Arc<Level>> = parsed
            .iter()
            .map(|(name, uid, exempt, shares, q)| {
                (name.clone(), make(name, uid, *exempt, *shares, *q))
            })
            .collect();
        let fallback = match levels.get("catch-all") {
            Some(l) => l.clone(),
            None => make("catch-all", "", false, 5, None),
        };
        let mut schemas: Vec<Schema> = schemas.iter().filter_map(parse_schema).collect();
        schemas.sort_by(|a, b| a.precedence.cmp(&b.precedence).then(a.name.cmp(&b.name)));
        Config {
            schemas,
            levels,
            fallback: Some(fallback),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Metrics

#[derive(Debug, Default)]
struct FlowStats {
    dispatched: AtomicU64,
    rejected: [AtomicU64; 3],
    inqueue: AtomicI64,
    executing: AtomicI64,
    executing_seats: AtomicI64,
}

fn rejection_index(r: Rejection) -> usize {
    match r {
        Rejection::QueueFull => 0,
        Rejection::ConcurrencyLimit => 1,
        Rejection::TimeOut => 2,
    }
}

const REJECTIONS: [Rejection; 3] = [
    Rejection::QueueFull,
    Rejection::ConcurrencyLimit,
    Rejection::TimeOut,
];

// ---------------------------------------------------------------------------------------------
// The dispatcher

/// The `X-Kubernetes-PF-*` header values of one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PfUids {
    /// UID of the FlowSchema that matched.
    pub flow_schema: String,
    /// UID of its priority level.
    pub priority_level: String,
}

/// Held while a request executes; dropping it frees the seat and lets the next request in.
#[derive(Debug)]
pub struct Ticket {
    _seat: Option<Seat>,
    stats: Option<Arc<FlowStats>>,
    /// Seats counted in the stats' `executing_seats`.
    width: usize,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Some(s) = &self.stats {
            s.executing.fetch_sub(1, Ordering::Relaxed);
            s.executing_seats
                .fetch_sub(self.width as i64, Ordering::Relaxed);
        }
    }
}

/// Decrements the in-queue gauge when a wait ends, however it ends.
struct InQueue(Arc<FlowStats>);

impl Drop for InQueue {
    fn drop(&mut self) {
        self.0.inqueue.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The server's concurrency limiter: APF, or the two max-in-flight limits when APF is off.
#[derive(Debug)]
pub struct FlowControl {
    settings: Settings,
    config: RwLock<Arc<Config>>,
    stats: Mutex<BTreeMap<(String, String), Arc<FlowStats>>>,
    /// Max-in-flight limits (APF off): read-only, mutating.
    inflight: (Arc<QueueSet>, Arc<QueueSet>),
}

/// The 429 the server answers an overloaded request with.
pub fn too_many_requests() -> ApiError {
    let mut e = ApiError::new(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
    );
    e.details = Some(serde_json::json!({"retryAfterSeconds": 1}));
    e.retry_after = Some(1);
    e
}

impl FlowControl {
    /// A limiter with `settings`, configured from the objects in `store` (see
    /// [`FlowControl::seed`] for the defaults).
    pub fn new(settings: Settings, store: &Store) -> Arc<Self> {
        let plain = |n: usize| {
            QueueSet::new(QueueSetConfig {
                seats: n.max(1),
                queues: 0,
                hand_size: 0,
                queue_length_limit: 0,
            })
        };
        let fc = Arc::new(FlowControl {
            inflight: (
                plain(settings.max_requests_inflight),
                plain(settings.max_mutating_requests_inflight),
            ),
            settings,
            config: RwLock::new(Arc::new(Config::default())),
            stats: Mutex::new(BTreeMap::new()),
        });
        fc.reload(store);
        fc
    }

    /// Creates the mandatory and suggested objects ([`bootstrap`]) that do not exist yet.
    pub fn seed(store: &Store) {
        // Built once per process; each server stores copies with their own uids and times.
        static DEFAULTS: LazyLock<[(&str, Vec<Value>); 2]> = LazyLock::new(|| {
            [
                (PRIORITY_LEVELS, bootstrap::priority_levels()),
                (FLOW_SCHEMAS, bootstrap::flow_schemas()),
            ]
        });
        store.write(|st| {
            for (storage, objs) in DEFAULTS.iter() {
                for template in objs {
                    if st.get(storage, "", meta_str(template, "name")).is_some() {
                        continue;
                    }
                    let mut obj = template.clone();
                    obj["metadata"]["uid"] = Value::String(new_uid());
                    obj["metadata"]["creationTimestamp"] = Value::String(now_time());
                    // `write`, not `create`: the copy `create` hands back is not needed.
                    st.write(storage, obj);
                }
            }
        });
    }

    /// Total seats: `--max-requests-inflight` + `--max-mutating-requests-inflight`.
    pub fn server_concurrency(&self) -> usize {
        self.settings.max_requests_inflight + self.settings.max_mutating_requests_inflight
    }

    /// Re-reads the FlowSchemas and priority levels from the store.
    pub fn reload(&self, store: &Store) {
        let (schemas, levels) = store.read(|s| {
            (
                s.list(FLOW_SCHEMAS, None)
                    .into_iter()
                    .cloned()
                    .collect::<Vec<_>>(),
                s.list(PRIORITY_LEVELS, None)
                    .into_iter()
                    .cloned()
                    .collect::<Vec<_>>(),
            )
        });
        let previous = self.current();
        let next = Config::compile(&schemas, &levels, self.server_concurrency(), &previous);
        let live: std::collections::HashSet<&str> =
            next.schemas.iter().map(|s| s.name.as_str()).collect();
        self.stats_lock().retain(|(fs, _), s| {
            live.contains(fs.as_str())
                || s.inqueue.load(Ordering::Relaxed) != 0
                || s.executing.load(Ordering::Relaxed) != 0
        });
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(next);
    }

    fn current(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn stats_lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), Arc<FlowStats>>> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn stats_for(&self, fs: &str, pl: &str) -> Arc<FlowStats> {
        let mut m = self.stats_lock();
        if let Some(s) = m.get(&(fs.to_owned(), pl.to_owned())) {
            return s.clone();
        }
        m.entry((fs.to_owned(), pl.to_owned())).or_default().clone()
    }

    /// Follows the store: whenever a FlowSchema or PriorityLevelConfiguration changes, the
    /// dispatcher is reconfigured.
    pub fn spawn_config_watch(
        self: &Arc<Self>,
        store: Arc<Store>,
        shutdown: CancellationToken,
        tracker: &TaskTracker,
    ) {
        let fc = self.clone();
        tracker.spawn(async move {
            let mut rx = store.subscribe();
            let mut seen = store.resource_version();
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    r = rx.changed() => if r.is_err() { return },
                }
                let (relevant, now) = store.read(|s| {
                    let now = s.resource_version();
                    let relevant = match s.changes_since(seen) {
                        Ok(changes) => changes
                            .iter()
                            .any(|c| c.storage == FLOW_SCHEMAS || c.storage == PRIORITY_LEVELS),
                        Err(_) => true,
                    };
                    (relevant, now)
                });
                seen = now;
                if relevant {
                    fc.reload(&store);
                }
            }
        });
    }

    /// Classifies a request, then admits it (a [`Ticket`] to hold while it executes), makes it
    /// wait its turn, or rejects it with a 429. `pf` receives the header values either way
    /// (left empty when APF is off).
    pub async fn admit(&self, d: &RequestDigest<'_>, pf: &mut PfUids) -> Result<Ticket, ApiError> {
        if !self.settings.enabled {
            if d.is_long_running() {
                return Ok(Ticket {
                    _seat: None,
                    stats: None,
                    width: 0,
                });
            }
            let set = if d.is_mutating() {
                &self.inflight.1
            } else {
                &self.inflight.0
            };
            return match set.enqueue(0, 1) {
                Admission::Run(seat) => Ok(Ticket {
                    _seat: Some(seat),
                    stats: None,
                    width: 0,
                }),
                _ => Err(too_many_requests()),
            };
        }
        let config = self.current();
        let schema = config
            .schemas
            .iter()
            .find(|s| s.rules.iter().any(|r| r.matches(d)));
        let level = schema
            .and_then(|s| config.levels.get(&s.level))
            .or(config.fallback.as_ref());
        let Some(level) = level else {
            return Ok(Ticket {
                _seat: None,
                stats: None,
                width: 0,
            });
        };
        let fs_name = schema.map_or("catch-all", |s| s.name.as_str());
        pf.flow_schema = schema.map(|s| s.uid.clone()).unwrap_or_default();
        pf.priority_level = level.uid.clone();
        let stats = self.stats_for(fs_name, &level.name);
        let Some(set) = &level.set else {
            stats.dispatched.fetch_add(1, Ordering::Relaxed);
            stats.executing.fetch_add(1, Ordering::Relaxed);
            return Ok(Ticket {
                _seat: None,
                stats: Some(stats),
                width: 0,
            });
        };
        let distinguisher = match schema.map_or(Distinguisher::ByUser, |s| s.distinguisher) {
            Distinguisher::None => "",
            Distinguisher::ByUser => d.user.name.as_str(),
            Distinguisher::ByNamespace => d.namespace.as_str(),
        };
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (fs_name, distinguisher).hash(&mut h);
        let reject = |r: Rejection| {
            stats.rejected[rejection_index(r)].fetch_add(1, Ordering::Relaxed);
            tracing::debug!(flow_schema = fs_name, priority_level = %level.name,
                reason = r.as_str(), user = %d.user.name, "request rejected by priority and fairness");
            too_many_requests()
        };
        let seat = match set.enqueue(h.finish(), d.width.min(MAXIMUM_SEATS)) {
            Admission::Run(seat) => seat,
            Admission::Reject(r) => return Err(reject(r)),
            Admission::Wait(waiting) => {
                stats.inqueue.fetch_add(1, Ordering::Relaxed);
                let _in_queue = InQueue(stats.clone());
                match tokio::time::timeout(self.settings.queue_wait, waiting.granted()).await {
                    Ok(seat) => seat,
                    Err(_) => return Err(reject(Rejection::TimeOut)),
                }
            }
        };
        stats.dispatched.fetch_add(1, Ordering::Relaxed);
        stats.executing.fetch_add(1, Ordering::Relaxed);
        let width = seat.width();
        stats
            .executing_seats
            .fetch_add(width as i64, Ordering::Relaxed);
        Ok(Ticket {
            _seat: Some(seat),
            stats: Some(stats),
            width,
        })
    }

    /// The `apiserver_flowcontrol_*` metrics in the Prometheus text format.
    pub fn prometheus_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let stats: Vec<((String, String), Arc<FlowStats>)> = self
            .stats_lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let family = |out: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        family(
            &mut out,
            "apiserver_flowcontrol_dispatched_requests_total",
            "counter",
            "Number of requests executed by API Priority and Fairness subsystem",
        );
        for ((fs, pl), s) in &stats {
            let _ = writeln!(
                out,
                "apiserver_flowcontrol_dispatched_requests_total{{flow_schema=\"{fs}\",priority_level=\"{pl}\"}} {}",
                s.dispatched.load(Ordering::Relaxed)
            );
        }
        family(
            &mut out,
            "apiserver_flowcontrol_rejected_requests_total",
            "counter",
            "Number of requests rejected by API Priority and Fairness subsystem",
        );
        for ((fs, pl), s) in &stats {
            for r in REJECTIONS {
                let n = s.rejected[rejection_index(r)].load(Ordering::Relaxed);
                if n > 0 {
                    let _ = writeln!(
                        out,
                        "apiserver_flowcontrol_rejected_requests_total{{flow_schema=\"{fs}\",priority_level=\"{pl}\",reason=\"{}\"}} {n}",
                        r.as_str()
                    );
                }
            }
        }
        family(
            &mut out,
            "apiserver_flowcontrol_current_inqueue_requests",
            "gauge",
            "Number of requests currently pending in queues of the API Priority and Fairness subsystem",
        );
        for ((fs, pl), s) in &stats {
            let _ = writeln!(
                out,
                "apiserver_flowcontrol_current_inqueue_requests{{flow_schema=\"{fs}\",priority_level=\"{pl}\"}} {}",
                s.inqueue.load(Ordering::Relaxed)
            );
        }
        family(
            &mut out,
            "apiserver_flowcontrol_current_executing_requests",
            "gauge",
            "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API Priority and Fairness subsystem",
        );
        for ((fs, pl), s) in &stats {
            let _ = writeln!(
                out,
                "apiserver_flowcontrol_current_executing_requests{{flow_schema=\"{fs}\",priority_level=\"{pl}\"}} {}",
                s.executing.load(Ordering::Relaxed)
            );
        }
        family(
            &mut out,
            "apiserver_flowcontrol_current_executing_seats",
            "gauge",
            "Concurrency (number of seats) occupied by the currently executing (initial stage for a WATCH, any stage otherwise) requests in the API Priority and Fairness subsystem",
        );
        for ((fs, pl), s) in &stats {
            let _ = writeln!(
                out,
                "apiserver_flowcontrol_current_executing_seats{{flow_schema=\"{fs}\",priority_level=\"{pl}\"}} {}",
                s.executing_seats.load(Ordering::Relaxed)
            );
        }
        family(
            &mut out,
            "apiserver_flowcontrol_nominal_limit_seats",
            "gauge",
            "Nominal number of execution seats configured for each priority level",
        );
        let config = self.current();
        let mut levels: Vec<&Arc<Level>> = config.levels.values().collect();
        levels.sort_by(|a, b| a.name.cmp(&b.name));
        for l in levels {
            let seats = l.set.as_ref().map_or(0, |s| s.config().seats);
            let _ = writeln!(
                out,
                "apiserver_flowcontrol_nominal_limit_seats{{priority_level=\"{}\"}} {seats}",
                l.name
            );
        }
        out
    }

    /// Nominal seats of a priority level (`None` if unknown or exempt).
    #[cfg(test)]
    pub fn nominal_seats(&self, level: &str) -> Option<usize> {
        self.current()
            .levels
            .get(level)
            .and_then(|l| l.set.as_ref().map(|s| s.config().seats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    #[test]
    fn streaming_subresources_and_watches_are_long_running() {
        let u = user("alice", &[]);
        let d = |m: http::Method, path: &str, watch: bool| {
            RequestDigest::new(&m, path, watch, &u).is_long_running()
        };
        let pod = "/api/v1/namespaces/default/pods/p";
        assert!(d(http::Method::GET, &format!("{pod}/exec"), false));
        assert!(d(http::Method::POST, &format!("{pod}/attach"), false));
        assert!(d(http::Method::GET, &format!("{pod}/portforward"), false));
        assert!(d(http::Method::GET, &format!("{pod}/log"), false));
        assert!(d(http::Method::GET, "/api/v1/pods", true));
        assert!(!d(http::Method::GET, pod, false));
        assert!(!d(http::Method::GET, &format!("{pod}/status"), false));
        assert!(!d(http::Method::GET, "/version", false));
    }

    fn fc(settings: Settings) -> Arc<FlowControl> {
        let store = Store::new(100);
        FlowControl::seed(&store);
        FlowControl::new(settings, &store)
    }

    #[test]
    fn default_seats_split_600_by_shares() {
        let f = fc(Settings::default());
        // Σ shares = 30 + 40 + 10 + 40 + 100 + 20 + 5 = 245.
        assert_eq!(f.nominal_seats("workload-low"), Some(245)); // ceil(600*100/245)
        assert_eq!(f.nominal_seats("global-default"), Some(49)); // ceil(600*20/245)
        assert_eq!(f.nominal_seats("catch-all"), Some(13));
        assert_eq!(f.nominal_seats("exempt"), None);
    }

    #[tokio::test]
    async fn classification_follows_precedence() {
        let f = fc(Settings::default());
        let check = |u: &UserInfo, method: http::Method, path: &str| {
            let d = RequestDigest::new(&method, path, false, u);
            let config = f.current();
            config
                .schemas
                .iter()
                .find(|s| s.rules.iter().any(|r| r.matches(&d)))
                .map(|s| s.name.clone())
        };
        let admin = user("admin", &["system:masters", "system:authenticated"]);
        let alice = user("alice", &["system:authenticated"]);
        let sa = user(
            "system:serviceaccount:cnat:cnat",
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:cnat",
                "system:authenticated",
            ],
        );
        let kube_sa = user(
            "system:serviceaccount:kube-system:foo",
            &["system:serviceaccounts", "system:authenticated"],
        );
        assert_eq!(
            check(&admin, http::Method::GET, "/api/v1/pods").as_deref(),
            Some("exempt")
        );
        assert_eq!(
            check(&alice, http::Method::GET, "/healthz").as_deref(),
            Some("probes")
        );
        assert_eq!(
            check(&alice, http::Method::GET, "/api/v1/namespaces/a/pods").as_deref(),
            Some("global-default")
        );
        assert_eq!(
            check(
                &sa,
                http::Method::POST,
                "/apis/apps/v1/namespaces/a/deployments"
            )
            .as_deref(),
            Some("service-accounts")
        );
        assert_eq!(
            check(
                &kube_sa,
                http::Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/x/leases/l"
            )
            .as_deref(),
            Some("system-leader-election")
        );
        assert_eq!(
            check(&kube_sa, http::Method::GET, "/api/v1/namespaces/x/pods").as_deref(),
            Some("kube-system-service-accounts")
        );
        let d = RequestDigest::new(
            &http::Method::PUT,
            "/api/v1/namespaces/a/pods/p/status",
            false,
            &alice,
        );
        assert_eq!(
            (d.verb.as_str(), d.resource.as_str(), d.namespace.as_str()),
            ("update", "pods/status", "a")
        );
    }

    #[tokio::test]
    async fn admitted_requests_carry_uids_and_free_their_seat() {
        let f = fc(Settings::default());
        let alice = user("alice", &["system:authenticated"]);
        let d = RequestDigest::new(&http::Method::GET, "/api/v1/pods", false, &alice);
        let mut pf = PfUids::default();
        let ticket = f.admit(&d, &mut pf).await.expect("admitted");
        assert!(!pf.flow_schema.is_empty() && !pf.priority_level.is_empty());
        let text = f.prometheus_text();
        assert!(text.contains("apiserver_flowcontrol_current_executing_requests{flow_schema=\"global-default\",priority_level=\"global-default\"} 1"), "{text}");
        drop(ticket);
        let text = f.prometheus_text();
        assert!(text.contains("apiserver_flowcontrol_current_executing_requests{flow_schema=\"global-default\",priority_level=\"global-default\"} 0"), "{text}");
        assert!(text.contains("apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"global-default\",priority_level=\"global-default\"} 1"), "{text}");
    }

    #[tokio::test]
    async fn max_inflight_mode_rejects_at_the_limit() {
        let f = fc(Settings {
            enabled: false,
            max_requests_inflight: 1,
            max_mutating_requests_inflight: 1,
            ..Settings::default()
        });
        let alice = user("alice", &["system:authenticated"]);
        let get = RequestDigest::new(&http::Method::GET, "/api/v1/pods", false, &alice);
        let post = RequestDigest::new(
            &http::Method::POST,
            "/api/v1/namespaces/a/pods",
            false,
            &alice,
        );
        let mut pf = PfUids::default();
        let _a = f.admit(&get, &mut pf).await.expect("first read");
        let e = f.admit(&get, &mut pf).await.expect_err("second read");
        assert_eq!((e.code, e.retry_after), (429, Some(1)));
        let _b = f
            .admit(&post, &mut pf)
            .await
            .expect("mutating has its own limit");
        assert_eq!(pf, PfUids::default(), "no PF headers without APF");
    }
}
