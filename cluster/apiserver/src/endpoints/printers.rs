//! Server-side printing: the `meta.k8s.io/v1` Table that `kubectl get` asks for.
//!
//! `kubectl get` does not know how to print a Pod or an `At`; it asks the server to do it, with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io, ..., application/json`. The server
//! answers with a **Table**: column definitions (name, type, format, description, priority) and
//! one row per object, each row holding ready-made cells plus the object's metadata (as a
//! `PartialObjectMetadata`, which kubectl reads for `-A`, `--show-labels` and `-L`). Columns with
//! `priority > 0` are shown only with `-o wide`; kubectl prints the cells as they come.
//!
//! Three column sets exist, as in the real server:
//!
//! - [`pod_columns`]: `NAME READY STATUS RESTARTS AGE` and, at priority 1, `IP NODE NOMINATED
//!   NODE READINESS GATES`, computed by the same rules as the kubelet-aware pod printer
//!   (`printPod` in `pkg/printers/internalversion`): waiting/terminated reasons win over the
//!   phase, init containers show `Init:1/2`, a deleted pod is `Terminating`, restarts read
//!   `2 (5m ago)`.
//! - [`builtin_columns`]: the real printers of the other served built-ins — namespaces
//!   (`STATUS`), configmaps (`DATA`), secrets (`TYPE DATA`), resourcequotas (`AGE REQUEST
//!   LIMIT`), serviceaccounts (`SECRETS`),
//!   services (`TYPE CLUSTER-IP EXTERNAL-IP PORT(S)`), events (`LAST SEEN TYPE REASON OBJECT
//!   MESSAGE`), deployments (`READY UP-TO-DATE AVAILABLE`), statefulsets (`READY`),
//!   replicasets (`DESIRED CURRENT READY`), daemonsets (`DESIRED CURRENT READY UP-TO-DATE
//!   AVAILABLE NODE SELECTOR`), jobs (`STATUS COMPLETIONS DURATION`), cronjobs (`SCHEDULE
//!   TIMEZONE SUSPEND ACTIVE LAST SCHEDULE`), rolebindings and clusterrolebindings (`ROLE`),
//!   nodes (`STATUS ROLES AGE VERSION`), leases (`HOLDER`), ingresses (`CLASS HOSTS ADDRESS
//!   PORTS`), ingress classes (`CONTROLLER PARAMETERS`), network policies (`POD-SELECTOR`), each with its `-o wide` extras
//!   (the server always fills them in, as the real one does with `GenerateOptions{Wide: true}`).
//! - [`default_columns`]: `Name` and `Created At` (an RFC 3339 timestamp, type `date`), for
//!   built-in kinds without a printer (`rest.DefaultTableConvertor`). Roles, cluster roles and
//!   CRDs print exactly these columns on a real server too (their printers are `Name` /
//!   `Created At`).
//! - [`crd_columns`]: `Name`, then the CRD version's `additionalPrinterColumns`, each evaluated
//!   with a simple JSONPath (`.spec.schedule`, `.status.conditions[0].type`); missing values are
//!   `null` cells. A CRD without printer columns gets an `Age` column
//!   (`serveDefaultColumnsIfEmpty`).
//!
//! # Dates
//!
//! The server, not kubectl, turns times into ages: a `date` printer column and a pod's `AGE` hold
//! human durations such as `5m`, `3h10m` or `2d` (`duration.HumanDuration`), `<invalid>` for an
//! unparsable timestamp and `<unknown>` for a missing one. kubectl prints those strings verbatim
//! (its own printing only handles the no-Table fallback). The default convertor's `Created At` is
//! the exception: it carries the raw RFC 3339 string. [`to_table`] uses the current time;
//! [`to_table_at`] takes the time explicitly, which keeps tests exact.

use jiff::Timestamp;
use serde_json::{Map, Value, json};

/// Computes a cell from an object and the current time (for the pod printer's columns).
pub type CellFn = fn(&Value, Timestamp) -> Value;

/// One column of a Table.
#[derive(Debug, Clone)]
pub struct ColumnDef {
    /// The header (`Name`, `Schedule`, ...); kubectl upper-cases it.
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    /// An OpenAPI format hint; `name` marks the primary column.
    pub format: String,
    /// Human-readable description (shown by `kubectl explain`-like tools).
    pub description: String,
    /// 0 = always shown, >0 = only with `-o wide`.
    pub priority: i32,
    /// The simple JSONPath the cell is read from (`.metadata.name`); ignored when `compute`
    /// is set.
    pub json_path: String,
    /// A computed cell (pod printer), instead of a JSONPath lookup.
    pub compute: Option<CellFn>,
}

impl ColumnDef {
    fn path(
        name: &str,
        type_: &str,
        format: &str,
        description: &str,
        priority: i32,
        json_path: &str,
    ) -> Self {
        ColumnDef {
            name: name.into(),
            type_: type_.into(),
            format: format.into(),
            description: description.into(),
            priority,
            json_path: json_path.into(),
            compute: None,
        }
    }

    fn computed(name: &str, description: &str, priority: i32, compute: CellFn) -> Self {
        ColumnDef {
            name: name.into(),
            type_: "string".into(),
            format: String::new(),
            description: description.into(),
            priority,
            json_path: String::new(),
            compute: Some(compute),
        }
    }

    /// The `columnDefinitions` entry.
    pub fn definition(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.type_,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }

    /// The cell for one object at time `now`.
    pub fn cell(&self, obj: &Value, now: Timestamp) -> Value {
        if let Some(f) = self.compute {
            return f(obj, now);
        }
        let Some(value) = eval_json_path(obj, &self.json_path) else {
            return Value::Null;
        };
        match self.type_.as_str() {
            "string" => match value {
                Value::String(s) => Value::String(s.clone()),
                Value::Null => Value::Null,
                other => Value::String(other.to_string()),
            },
            "integer" => match value {
                Value::Number(n) => n
                    .as_i64()
                    .or_else(|| n.as_f64().map(|f| f as i64))
                    .map(Value::from)
                    .unwrap_or(Value::Null),
                _ => Value::Null,
            },
            "number" => match value {
                Value::Number(n) => n.as_f64().map(Value::from).unwrap_or(Value::Null),
                _ => Value::Null,
            },
            "boolean" => match value {
                Value::Bool(b) => Value::Bool(*b),
                _ => Value::Null,
            },
            "date" => match value {
                Value::String(s) => Value::String(match s.parse::<Timestamp>() {
                    Ok(t) => human_duration(now, t),
                    Err(_) => "<invalid>".to_string(),
                }),
                _ => Value::Null,
            },
            _ => Value::Null,
        }
    }
}

/// One step of a simple JSONPath.
#[derive(Debug, PartialEq)]
enum Step {
    Key(String),
    Index(usize),
    /// `[?(@.key=="value")]`: the first array element whose `key` is the string `value` (the
    /// condition idiom, `.status.conditions[?(@.type=="Ready")].reason`).
    Filter(String, String),
}

/// `?(@.key=="value")` (or single quotes) as (key, value).
fn parse_filter(inner: &str) -> Option<(String, String)> {
    let body = inner.strip_prefix("?(")?.strip_suffix(')')?.trim();
    let (lhs, rhs) = body.split_once("==")?;
    let key = lhs.trim().strip_prefix("@.")?;
    if key.is_empty() || key.contains(['.', '[', '*', '@', '(']) {
        return None;
    }
    let rhs = rhs.trim();
    let value = rhs
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| rhs.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))?;
    Some((key.to_string(), value.to_string()))
}

/// Parses the simple JSONPaths CRD printer columns use: `.a.b`, `.a[0].b`, `.a['x.y']`,
/// `.a[?(@.type=="Ready")].b`, optionally wrapped in `{}`. Returns `None` for anything richer
/// (wildcards, ranges, other filter expressions).
fn parse_json_path(path: &str) -> Option<Vec<Step>> {
    let path = path.trim();
    let path = path
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(path);
    let mut steps = Vec::new();
    let mut rest = path.strip_prefix('$').unwrap_or(path);
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let key = &r[..end];
            if key.is_empty() || key.contains(['*', '?', '@', '(']) {
                return None;
            }
            steps.push(Step::Key(key.to_string()));
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = r[..end].trim();
            if let Some(q) = inner
                .strip_prefix('\'')
                .and_then(|q| q.strip_suffix('\''))
                .or_else(|| inner.strip_prefix('"').and_then(|q| q.strip_suffix('"')))
            {
                steps.push(Step::Key(q.to_string()));
            } else if let Some((key, value)) = parse_filter(inner) {
                steps.push(Step::Filter(key, value));
            } else {
                steps.push(Step::Index(inner.parse().ok()?));
            }
            rest = &r[end + 1..];
        } else {
            return None;
        }
    }
    Some(steps)
}

/// Evaluates a simple JSONPath against `obj`; `None` when a key is missing (missing keys are
/// allowed, as in the real convertor) or the path is not simple.
pub fn eval_json_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for step in parse_json_path(path)? {
        cur = match step {
            Step::Key(k) => cur.get(k.as_str())?,
            Step::Index(i) => cur.get(i)?,
            Step::Filter(key, value) => cur
                .as_array()?
                .iter()
                .find(|e| e.get(key.as_str()).and_then(Value::as_str) == Some(value.as_str()))?,
        };
    }
    Some(cur)
}

/// Is `path` a JSONPath this module can evaluate? (CRD validation rejects other paths.)
#[cfg(test)]
pub fn is_simple_json_path(path: &str) -> bool {
    parse_json_path(path).is_some_and(|s| !s.is_empty())
}

/// `duration.HumanDuration(now - then)`: `45s`, `2m`, `7m30s`, `3h10m`, `20h`, `3d4h`, `40d`,
/// `2y10d`; `<invalid>` when `then` is more than a second in the future.
pub fn human_duration(now: Timestamp, then: Timestamp) -> String {
    let seconds = now.as_second() - then.as_second();
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// The age of a timestamp field as the pod printer shows it (`<unknown>` when absent).
fn age_of(value: Option<&Value>, now: Timestamp) -> String {
    match value.and_then(Value::as_str) {
        None | Some("") => "<unknown>".into(),
        Some(s) => match s.parse::<Timestamp>() {
            Ok(t) => human_duration(now, t),
            Err(_) => "<invalid>".into(),
        },
    }
}

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const CREATED_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

fn name_column() -> ColumnDef {
    ColumnDef::path(
        "Name",
        "string",
        "name",
        NAME_DESCRIPTION,
        0,
        ".metadata.name",
    )
}

/// `Name` and `Created At`: the default convertor for kinds without a printer.
pub fn default_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed("Created At", CREATED_DESCRIPTION, 0, |obj, _| {
            obj.pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .map(|s| Value::String(s.to_string()))
                .unwrap_or(Value::Null)
        })
        .with_type("date"),
    ]
}

impl ColumnDef {
    fn with_type(mut self, type_: &str) -> Self {
        self.type_ = type_.into();
        self
    }
}

/// `Name`, then the CRD version's `additionalPrinterColumns` (a JSON array of
/// `{name, type, format, description, priority, jsonPath}`); `Age` when there are none.
pub fn crd_columns(printer_columns: &Value) -> Vec<ColumnDef> {
    let mut columns = vec![name_column()];
    let defined = printer_columns
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if defined.is_empty() {
        columns.push(ColumnDef::path(
            "Age",
            "date",
            "",
            CREATED_DESCRIPTION,
            0,
            ".metadata.creationTimestamp",
        ));
        return columns;
    }
    for col in defined {
        let s = |k: &str| col.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let json_path = s("jsonPath");
        let description = match s("description") {
            d if d.is_empty() => {
                format!("Custom resource definition column (in JSONPath format): {json_path}")
            }
            d => d,
        };
        columns.push(ColumnDef {
            name: s("name"),
            type_: s("type"),
            format: s("format"),
            description,
            priority: col
                .get("priority")
                .and_then(Value::as_i64)
                .and_then(|p| i32::try_from(p).ok())
                .unwrap_or(0),
            json_path,
            compute: None,
        });
    }
    columns
}

/// A pod's Ready count, container total, Status text, restart count and last restart, as the
/// real server's pod printer works them out (`printPod`).
fn pod_status(pod: &Value) -> (usize, usize, String, i64, Option<Timestamp>) {
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    let status = pod.get("status").unwrap_or(&Value::Null);
    let total = array_at(spec, "containers").len();
    let mut summary = PodSummary {
        ready: 0,
        restarts: 0,
        last_restart: None,
        reason: str_at(status, "/phase"),
    };
    if !str_at(status, "/reason").is_empty() {
        summary.reason = str_at(status, "/reason");
    }
    let (initializing, sidecar_restarts) = summary.init_containers(spec, status);
    let conditions = array_at(status, "conditions");
    let condition_true = |t: &str| {
        conditions.iter().any(|c| {
            c.get("type").and_then(Value::as_str) == Some(t)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
    };
    if !initializing || condition_true("Initialized") {
        summary.restarts = sidecar_restarts;
        let has_running = summary.containers(status);
        if summary.reason == "Completed" && has_running {
            summary.reason = if condition_true("Ready") {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }
    let phase = str_at(status, "/phase");
    if pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|d| !d.is_null())
    {
        if str_at(status, "/reason") == "NodeLost" {
            summary.reason = "Unknown".into();
        } else if phase != "Succeeded" && phase != "Failed" {
            summary.reason = "Terminating".into();
        }
    }
    let PodSummary {
        ready,
        restarts,
        last_restart,
        reason,
    } = summary;
    (ready, total, reason, restarts, last_restart)
}

/// The array under `key` (a copy), or an empty one.
fn array_at(v: &Value, key: &str) -> Vec<Value> {
    v.get(key)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The string at a JSON pointer, or "".
fn str_at(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// What [`pod_status`] gathers while it walks a pod's container statuses.
struct PodSummary {
    ready: usize,
    restarts: i64,
    last_restart: Option<Timestamp>,
    reason: String,
}

impl PodSummary {
    /// Keeps the latest `lastState.terminated.finishedAt` seen: the last restart.
    fn track(&mut self, c: &Value) {
        if let Some(t) = c
            .pointer("/lastState/terminated/finishedAt")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<Timestamp>().ok())
            && self.last_restart.is_none_or(|l| t > l)
        {
            self.last_restart = Some(t);
        }
    }

    /// Walks the init containers: counts their restarts, and the first one not done yet gives
    /// the Status (`Init:<reason>`, `Init:ExitCode:<n>`, `Init:<i>/<n>`...). Returns whether
    /// the pod is still initializing, and the restarts of its sidecars (init containers that
    /// keep running).
    fn init_containers(&mut self, spec: &Value, status: &Value) -> (bool, i64) {
        let init_specs = array_at(spec, "initContainers");
        let mut sidecar_restarts = 0i64;
        for (i, c) in array_at(status, "initContainerStatuses").iter().enumerate() {
            let count = c.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
            self.restarts += count;
            self.track(c);
            let name = c.get("name");
            let sidecar = init_specs.iter().any(|sp| {
                sp.get("name") == name
                    && sp.get("restartPolicy").and_then(Value::as_str) == Some("Always")
            });
            if sidecar {
                sidecar_restarts += count;
            }
            let exit = c
                .pointer("/state/terminated/exitCode")
                .and_then(Value::as_i64);
            let waiting = str_at(c, "/state/waiting/reason");
            if exit == Some(0)
                || (sidecar && c.get("started").and_then(Value::as_bool) == Some(true))
            {
                continue;
            }
            if c.pointer("/state/terminated").is_some() {
                let r = str_at(c, "/state/terminated/reason");
                let signal = c
                    .pointer("/state/terminated/signal")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                self.reason = if !r.is_empty() {
                    format!("Init:{r}")
                } else if signal != 0 {
                    format!("Init:Signal:{signal}")
                } else {
                    format!("Init:ExitCode:{}", exit.unwrap_or(0))
                };
            } else if !waiting.is_empty() && waiting != "PodInitializing" {
                self.reason = format!("Init:{waiting}");
            } else {
                self.reason = format!("Init:{i}/{}", init_specs.len());
            }
            return (true, sidecar_restarts);
        }
        (false, sidecar_restarts)
    }

    /// Walks the app containers, last first: adds their restarts, counts the ready running
    /// ones, and a waiting or terminated one gives the Status. Returns whether any is running.
    fn containers(&mut self, status: &Value) -> bool {
        let mut has_running = false;
        for c in array_at(status, "containerStatuses").iter().rev() {
            self.restarts += c.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
            self.track(c);
            let waiting = str_at(c, "/state/waiting/reason");
            let terminated = c.pointer("/state/terminated");
            if !waiting.is_empty() {
                self.reason = waiting;
            } else if let Some(t) = terminated {
                let r = str_at(t, "/reason");
                let signal = t.get("signal").and_then(Value::as_i64).unwrap_or(0);
                self.reason = if !r.is_empty() {
                    r
                } else if signal != 0 {
                    format!("Signal:{signal}")
                } else {
                    format!(
                        "ExitCode:{}",
                        t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)
                    )
                };
            } else if c.get("ready").and_then(Value::as_bool) == Some(true)
                && c.pointer("/state/running").is_some()
            {
                has_running = true;
                self.ready += 1;
            }
        }
        has_running
    }
}

/// The pod columns of the real server's printer: Name, Ready, Status, Restarts, Age, and at
/// priority 1 IP, Node, Nominated Node, Readiness Gates.
pub fn pod_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed(
            "Ready",
            "The aggregate readiness state of this pod for accepting traffic.",
            0,
            |pod, _| {
                let (ready, total, ..) = pod_status(pod);
                Value::String(format!("{ready}/{total}"))
            },
        ),
        ColumnDef::computed(
            "Status",
            "The aggregate status of the containers in this pod.",
            0,
            |pod, _| Value::String(pod_status(pod).2),
        ),
        ColumnDef::computed(
            "Restarts",
            "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            0,
            |pod, now| {
                let (_, _, _, restarts, last) = pod_status(pod);
                Value::String(match last {
                    Some(t) if restarts != 0 => {
                        format!("{restarts} ({} ago)", human_duration(now, t))
                    }
                    _ => restarts.to_string(),
                })
            },
        ),
        ColumnDef::computed("Age", CREATED_DESCRIPTION, 0, |pod, now| {
            Value::String(age_of(pod.pointer("/metadata/creationTimestamp"), now))
        }),
        ColumnDef::computed(
            "IP",
            "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
            1,
            |pod, _| {
                let ip = pod
                    .pointer("/status/podIPs/0/ip")
                    .or_else(|| pod.pointer("/status/podIP"))
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .unwrap_or("<none>");
                Value::String(ip.into())
            },
        ),
        ColumnDef::computed(
            "Node",
            "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for preemption or has not been scheduled.",
            1,
            |pod, _| none_if_empty(pod.pointer("/spec/nodeName")),
        ),
        ColumnDef::computed(
            "Nominated Node",
            "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.",
            1,
            |pod, _| none_if_empty(pod.pointer("/status/nominatedNodeName")),
        ),
        ColumnDef::computed(
            "Readiness Gates",
            "If specified, all readiness gates will be evaluated for pod readiness.",
            1,
            |pod, _| {
                let gates = pod
                    .pointer("/spec/readinessGates")
                    .and_then(Value::as_array);
                let Some(gates) = gates.filter(|g| !g.is_empty()) else {
                    return Value::String("<none>".into());
                };
                let conditions = pod
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let met = gates
                    .iter()
                    .filter(|g| {
                        conditions.iter().any(|c| {
                            c.get("type") == g.get("conditionType")
                                && c.get("status").and_then(Value::as_str) == Some("True")
                        })
                    })
                    .count();
                Value::String(format!("{met}/{}", gates.len()))
            },
        ),
    ]
}

/// A PriorityLevelConfiguration's `spec.limited.limitResponse.queuing.<field>`, or `<none>`
/// (exempt levels and levels that reject instead of queuing), as the real printer shows it.
fn plc_queuing(o: &Value, field: &str) -> Value {
    o.pointer(&format!("/spec/limited/limitResponse/queuing/{field}"))
        .cloned()
        .unwrap_or_else(|| Value::String("<none>".into()))
}

fn none_if_empty(v: Option<&Value>) -> Value {
    Value::String(
        v.and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or("<none>")
            .to_string(),
    )
}

fn text(obj: &Value, pointer: &str) -> String {
    obj.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn len_of(obj: &Value, pointer: &str) -> usize {
    match obj.pointer(pointer) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

fn age_column() -> ColumnDef {
    ColumnDef::computed("Age", CREATED_DESCRIPTION, 0, |obj, now| {
        Value::String(age_of(obj.pointer("/metadata/creationTimestamp"), now))
    })
}

fn selector_string(selector: Option<&Value>) -> String {
    match selector {
        Some(sel) => match crate::api::selectors::LabelSelector::from_json(sel) {
            Ok(s) if !s.is_empty() => s.to_string(),
            Ok(_) => "<none>".into(),
            Err(_) => "<invalid>".into(),
        },
        None => "<none>".into(),
    }
}

fn container_field(obj: &Value, field: &str) -> Value {
    template_containers(obj, "/spec/template", field)
}

/// The subjects of a binding with `kind`, joined by `, ` (`rbac.SubjectsStrings`): users and
/// groups by name, service accounts as `namespace:name`.
fn subjects_of(binding: &Value, kind: &str) -> Value {
    let names: Vec<String> = binding
        .get("subjects")
        .and_then(Value::as_array)
        .map(|subjects| {
            subjects
                .iter()
                .filter(|s| s.get("kind").and_then(Value::as_str) == Some(kind))
                .map(|s| match kind {
                    "ServiceAccount" => {
                        format!("{}:{}", text(s, "/namespace"), text(s, "/name"))
                    }
                    _ => text(s, "/name"),
                })
                .collect()
        })
        .unwrap_or_default();
    Value::String(names.join(", "))
}

/// A node's `STATUS`: `Ready` / `NotReady` from its Ready condition (`Unknown` without one),
/// plus `SchedulingDisabled` when cordoned.
fn node_status(node: &Value) -> String {
    let ready = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .rev()
                .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        });
    let mut status = vec![match ready {
        Some(c) if c.get("status").and_then(Value::as_str) == Some("True") => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled");
    }
    status.join(",")
}

/// A node's `ROLES`: the `node-role.kubernetes.io/<role>` label suffixes and the
/// `kubernetes.io/role` label value, sorted, or `<none>`.
fn node_roles(node: &Value) -> String {
    let mut roles = std::collections::BTreeSet::new();
    if let Some(labels) = node.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.insert(role.to_string());
                }
            } else if k == "kubernetes.io/role"
                && let Some(role) = v.as_str().filter(|r| !r.is_empty())
            {
                roles.insert(role.to_string());
            }
        }
    }
    if roles.is_empty() {
        "<none>".into()
    } else {
        roles.into_iter().collect::<Vec<_>>().join(",")
    }
}

/// The first address of `kind` (`InternalIP`, `ExternalIP`) in a node's status, or `<none>`.
fn node_address(node: &Value, kind: &str) -> String {
    node.pointer("/status/addresses")
        .and_then(Value::as_array)
        .and_then(|a| {
            a.iter()
                .find(|addr| addr.get("type").and_then(Value::as_str) == Some(kind))
        })
        .map(|addr| text(addr, "/address"))
        .unwrap_or_else(|| "<none>".into())
}

fn unknown_if_empty(obj: &Value, pointer: &str) -> Value {
    Value::String(match text(obj, pointer) {
        t if t.is_empty() => "<unknown>".into(),
        t => t,
    })
}

fn event_time(obj: &Value, pointer: &str, now: Timestamp) -> Option<String> {
    obj.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(|s| match s.parse::<Timestamp>() {
            Ok(t) => human_duration(now, t),
            Err(_) => "<invalid>".into(),
        })
}

fn event_first_seen(ev: &Value, now: Timestamp) -> String {
    event_time(ev, "/firstTimestamp", now)
        .or_else(|| event_time(ev, "/eventTime", now))
        .unwrap_or_else(|| "<unknown>".into())
}

fn event_last_seen(ev: &Value, now: Timestamp) -> String {
    if ev.get("series").is_some_and(Value::is_object) {
        return event_time(ev, "/series/lastObservedTime", now)
            .unwrap_or_else(|| "<unknown>".into());
    }
    event_time(ev, "/lastTimestamp", now).unwrap_or_else(|| event_first_seen(ev, now))
}

fn service_ports(svc: &Value) -> String {
    let ports = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if ports.is_empty() {
        return "<none>".into();
    }
    ports
        .iter()
        .map(|p| {
            let port = p.get("port").map(|v| v.to_string()).unwrap_or_default();
            let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
            match p
                .get("nodePort")
                .and_then(Value::as_i64)
                .filter(|n| *n != 0)
            {
                Some(node) => format!("{port}:{node}/{protocol}"),
                None => format!("{port}/{protocol}"),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn service_external_ip(svc: &Value) -> String {
    let external: Vec<String> = svc
        .pointer("/spec/externalIPs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    match text(svc, "/spec/type").as_str() {
        "" | "ClusterIP" | "NodePort" => {
            if external.is_empty() {
                "<none>".into()
            } else {
                external.join(",")
            }
        }
        "LoadBalancer" => {
            let mut ips: Vec<String> = svc
                .pointer("/status/loadBalancer/ingress")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|i| {
                            i.get("ip")
                                .or_else(|| i.get("hostname"))
                                .and_then(Value::as_str)
                        })
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            ips.extend(external);
            if ips.is_empty() {
                "<pending>".into()
            } else {
                ips.join(",")
            }
        }
        "ExternalName" => text(svc, "/spec/externalName"),
        _ => "<unknown>".into(),
    }
}

/// The columns of the real server's printers for the other built-in kinds this crate serves,
/// by group and resource: namespaces (Status), configmaps (Data), secrets (Type, Data),
/// serviceaccounts (Secrets), services (Type, Cluster-IP, External-IP, Port(s), Selector),
/// events (Last Seen, Type, Reason, Object, Message, ...), deployments (Ready, Up-to-date,
/// Available, ...), statefulsets (Ready, ...), replicasets (Desired, Current, Ready, ...),
/// rolebindings and clusterrolebindings (Role, ...), nodes (Status, Roles, Age, Version, ...),
/// leases (Holder), flow schemas and priority level configurations, and pods
/// ([`pod_columns`]), looked up in one table of printers.
/// `None` for kinds printed by the default convertor ([`default_columns`]).
pub fn builtin_columns(group: &str, resource: &str) -> Option<Vec<ColumnDef>> {
    BUILTIN_PRINTERS
        .iter()
        .find(|(g, r, _)| *g == group && *r == resource)
        .map(|(_, _, columns)| columns())
}

/// A built-in kind's printer: the columns of its Table.
type Printer = fn() -> Vec<ColumnDef>;

/// The real server's printers for the built-in kinds this server serves, by group and resource
/// (`pkg/printers/internalversion/printers.go` registers one handler per kind the same way).
/// A kind not listed here is printed by the default convertor ([`default_columns`]).
#[rustfmt::skip]
const BUILTIN_PRINTERS: &[(&str, &str, Printer)] = &[
    ("",                             "pods",                        pod_columns),
    ("",                             "namespaces",                  namespace_columns),
    ("",                             "configmaps",                  configmap_columns),
    ("",                             "secrets",                     secret_columns),
    ("",                             "resourcequotas",              resourcequota_columns),
    ("",                             "serviceaccounts",             serviceaccount_columns),
    ("",                             "services",                    service_columns),
    ("",                             "events",                      event_columns),
    ("events.k8s.io",                "events",                      event_columns),
    ("flowcontrol.apiserver.k8s.io", "flowschemas",                 flowschema_columns),
    ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations", prioritylevelconfiguration_columns),
    ("apps",                         "deployments",                 deployment_columns),
    ("apps",                         "statefulsets",                statefulset_columns),
    ("apps",                         "replicasets",                 replicaset_columns),
    ("apps",                         "daemonsets",                  daemonset_columns),
    ("batch",                        "jobs",                        job_columns),
    ("batch",                        "cronjobs",                    cronjob_columns),
    ("rbac.authorization.k8s.io",    "rolebindings",                rolebinding_columns),
    ("rbac.authorization.k8s.io",    "clusterrolebindings",         rolebinding_columns),
    ("",                             "nodes",                       node_columns),
    ("",                             "componentstatuses",           componentstatus_columns),
    ("coordination.k8s.io",          "leases",                      lease_columns),
    ("networking.k8s.io",            "ingresses",                   ingress_columns),
    ("networking.k8s.io",            "ingressclasses",              ingressclass_columns),
    ("networking.k8s.io",            "networkpolicies",             networkpolicy_columns),
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations", webhookconfiguration_columns),
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations",   webhookconfiguration_columns),
];

/// The real server's printer columns for namespaces: `Status`.
fn namespace_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed("Status", "The status of the namespace", 0, |o, _| {
            Value::String(text(o, "/status/phase"))
        }),
        age_column(),
    ]
}

/// The real server's printer columns for config maps: `Data` (the number of `data` and `binaryData` keys).
fn configmap_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed("Data", "Number of data in configmap", 0, |o, _| {
            Value::from(len_of(o, "/data") + len_of(o, "/binaryData"))
        })
        .with_type("integer"),
        age_column(),
    ]
}

/// The real server's printer columns for component statuses (`printComponentStatus`):
/// `Status` (`Healthy` when the `Healthy` condition is `True`), `Message`, `Error`.
fn componentstatus_columns() -> Vec<ColumnDef> {
    fn healthy(o: &Value) -> Option<&Value> {
        o["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Healthy")
    }
    vec![
        name_column(),
        ColumnDef::computed("Status", "Status of the component conditions", 0, |o, _| {
            let ok = healthy(o).is_some_and(|c| c["status"] == "True");
            Value::String(if ok { "Healthy" } else { "Unhealthy" }.into())
        }),
        ColumnDef::computed(
            "Message",
            "Message of the component conditions",
            0,
            |o, _| {
                Value::String(
                    healthy(o)
                        .and_then(|c| c["message"].as_str())
                        .unwrap_or_default()
                        .into(),
                )
            },
        ),
        ColumnDef::computed("Error", "Error of the component conditions", 0, |o, _| {
            Value::String(
                healthy(o)
                    .and_then(|c| c["error"].as_str())
                    .unwrap_or_default()
                    .into(),
            )
        }),
    ]
}

/// The real server's printer columns for secrets: `Type`, `Data`.
fn secret_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed("Type", "The type of the secret", 0, |o, _| {
            Value::String(text(o, "/type"))
        }),
        ColumnDef::computed("Data", "Number of data in secret", 0, |o, _| {
            Value::from(len_of(o, "/data"))
        })
        .with_type("integer"),
        age_column(),
    ]
}

/// The real server's printer columns for resource quotas (`printResourceQuota`): `Age`, then
/// `Request` and `Limit`, each `<name>: <used>/<hard>` for the quota's `spec.hard` names in
/// name order (`limits.*` names under `Limit`, every other under `Request`), joined by `, `.
fn resourcequota_columns() -> Vec<ColumnDef> {
    fn usage(o: &Value, limits: bool) -> Value {
        let mut names: Vec<&String> = o
            .pointer("/spec/hard")
            .and_then(Value::as_object)
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        names.sort();
        let cells: Vec<String> = names
            .into_iter()
            .filter(|n| {
                let is_limit = n.split('.').count() > 1 && n.split('.').next() == Some("limits");
                is_limit == limits
            })
            .map(|n| {
                let at = |part: &str| {
                    o.pointer(&format!("/status/{part}"))
                        .and_then(|m| m.get(n.as_str()))
                        .and_then(Value::as_str)
                        .unwrap_or("0")
                        .to_owned()
                };
                format!("{n}: {}/{}", at("used"), at("hard"))
            })
            .collect();
        Value::String(cells.join(", "))
    }
    vec![
        name_column(),
        age_column(),
        ColumnDef::computed(
            "Request",
            "Request represents a minimum amount of cpu/memory that a container may consume.",
            0,
            |o, _| usage(o, false),
        ),
        ColumnDef::computed(
            "Limit",
            "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
            0,
            |o, _| usage(o, true),
        ),
    ]
}

/// The real server's printer columns for service accounts: `Secrets`.
fn serviceaccount_columns() -> Vec<ColumnDef> {
    vec![
            name_column(),
            ColumnDef::computed("Secrets", "Secrets is the list of secrets allowed to be used by pods running using this ServiceAccount.", 0, |o, _| {
                Value::from(len_of(o, "/secrets"))
            })
            .with_type("integer"),
            age_column(),
        ]
}

/// The real server's printer columns for services: `Type`, `Cluster-IP`, `External-IP`, `Port(s)`, and wide `Selector`.
fn service_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed("Type", "The type of the service.", 0, |o, _| {
            Value::String(match text(o, "/spec/type") {
                t if t.is_empty() => "ClusterIP".into(),
                t => t,
            })
        }),
        ColumnDef::computed("Cluster-IP", "The cluster IP of the service.", 0, |o, _| {
            none_if_empty(o.pointer("/spec/clusterIP"))
        }),
        ColumnDef::computed(
            "External-IP",
            "The external IP of the service.",
            0,
            |o, _| Value::String(service_external_ip(o)),
        ),
        ColumnDef::computed("Port(s)", "The ports of the service.", 0, |o, _| {
            Value::String(service_ports(o))
        }),
        age_column(),
        ColumnDef::computed(
            "Selector",
            "Route service traffic to pods with label keys and values matching this selector.",
            1,
            |o, _| {
                let sel = o
                    .pointer("/spec/selector")
                    .map(|m| serde_json::json!({"matchLabels": m}));
                Value::String(selector_string(sel.as_ref()))
            },
        ),
    ]
}

/// The real server's printer columns for events (core and `events.k8s.io`): `Last Seen`, `Type`, `Reason`, `Object`, `Message`, and wide `Subobject`, `Source`, `First Seen`, `Count`, `Name`.
fn event_columns() -> Vec<ColumnDef> {
    vec![
        ColumnDef::computed(
            "Last Seen",
            "The time of the last occurrence of the event.",
            0,
            |o, now| Value::String(event_last_seen(o, now)),
        ),
        ColumnDef::computed(
            "Type",
            "Type of this event (Normal, Warning), new types could be added in the future.",
            0,
            |o, _| Value::String(text(o, "/type")),
        ),
        ColumnDef::computed("Reason", "The reason for the event.", 0, |o, _| {
            Value::String(text(o, "/reason"))
        }),
        ColumnDef::computed(
            "Object",
            "The object that this event is about.",
            0,
            |o, _| {
                let kind = text(o, "/involvedObject/kind").to_lowercase();
                let name = text(o, "/involvedObject/name");
                Value::String(if name.is_empty() {
                    kind
                } else {
                    format!("{kind}/{name}")
                })
            },
        ),
        ColumnDef::computed(
            "Subobject",
            "The subobject that this event is about.",
            1,
            |o, _| Value::String(text(o, "/involvedObject/fieldPath")),
        ),
        ColumnDef::computed(
            "Source",
            "The component reporting this event.",
            1,
            |o, _| {
                let first = |a: &str, b: &str| {
                    let v = text(o, a);
                    if v.is_empty() { text(o, b) } else { v }
                };
                let component = first("/source/component", "/reportingComponent");
                let instance = first("/source/host", "/reportingInstance");
                Value::String(if instance.is_empty() {
                    component
                } else {
                    format!("{component}, {instance}")
                })
            },
        ),
        ColumnDef::computed(
            "Message",
            "A human-readable description of the status of this operation.",
            0,
            |o, _| Value::String(text(o, "/message").trim().to_string()),
        ),
        ColumnDef::computed(
            "First Seen",
            "The time of the first occurrence of the event.",
            1,
            |o, now| Value::String(event_first_seen(o, now)),
        ),
        ColumnDef::computed(
            "Count",
            "The number of times this event has occurred.",
            1,
            |o, _| {
                let count = if o.get("series").is_some_and(Value::is_object) {
                    o.pointer("/series/count")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                } else {
                    o.get("count")
                        .and_then(Value::as_i64)
                        .filter(|c| *c != 0)
                        .unwrap_or(1)
                };
                Value::from(count)
            },
        )
        .with_type("integer"),
        ColumnDef::computed("Name", "The name of the referenced object.", 1, |o, _| {
            Value::String(text(o, "/metadata/name"))
        }),
    ]
}

/// The real server's printer columns for flow schemas: `PriorityLevel`, `MatchingPrecedence`, `DistinguisherMethod`, `MissingPL`.
fn flowschema_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed(
            "PriorityLevel",
            "The priority level of this FlowSchema.",
            0,
            |o, _| Value::String(text(o, "/spec/priorityLevelConfiguration/name")),
        ),
        ColumnDef::computed(
            "MatchingPrecedence",
            "The matching precedence of this FlowSchema.",
            0,
            |o, _| {
                Value::from(
                    o.pointer("/spec/matchingPrecedence")
                        .and_then(Value::as_i64)
                        .unwrap_or(1000),
                )
            },
        )
        .with_type("integer"),
        ColumnDef::computed(
            "DistinguisherMethod",
            "The distinguisher method of this FlowSchema.",
            0,
            |o, _| {
                Value::String(match text(o, "/spec/distinguisherMethod/type") {
                    t if t.is_empty() => "*".into(),
                    t => t,
                })
            },
        ),
        age_column(),
        ColumnDef::computed(
            "MissingPL",
            "The PriorityLevelConfiguration references this FlowSchema is missing.",
            0,
            |o, _| {
                let dangling = o
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .and_then(|cs| {
                        cs.iter()
                            .find(|c| c["type"] == "Dangling")
                            .map(|c| c["status"].as_str().unwrap_or_default().to_owned())
                    });
                Value::String(dangling.unwrap_or_else(|| "?".into()))
            },
        ),
    ]
}

/// The real server's printer columns for priority level configurations: `Type`, `NominalConcurrencyShares`, `Queues`, `HandSize`, `QueueLengthLimit`.
fn prioritylevelconfiguration_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed("Type", "The type of the configuration.", 0, |o, _| {
            Value::String(text(o, "/spec/type"))
        }),
        ColumnDef::computed(
            "NominalConcurrencyShares",
            "NominalConcurrencyShares of the configuration.",
            0,
            |o, _| {
                o.pointer("/spec/limited")
                    .map(|l| {
                        l.get("nominalConcurrencyShares")
                            .cloned()
                            .unwrap_or(Value::from(30))
                    })
                    .unwrap_or_else(|| Value::String("<none>".into()))
            },
        ),
        ColumnDef::computed("Queues", "Queues of the configuration.", 0, |o, _| {
            plc_queuing(o, "queues")
        }),
        ColumnDef::computed("HandSize", "HandSize of the configuration.", 0, |o, _| {
            plc_queuing(o, "handSize")
        }),
        ColumnDef::computed(
            "QueueLengthLimit",
            "QueueLengthLimit of the configuration.",
            0,
            |o, _| plc_queuing(o, "queueLengthLimit"),
        ),
        age_column(),
    ]
}

/// The real server's printer columns for deployments: `Ready`, `Up-to-date`, `Available`, and wide `Containers`, `Images`, `Selector`.
fn deployment_columns() -> Vec<ColumnDef> {
    vec![
            name_column(),
            ColumnDef::computed("Ready", "Number of the pod with ready state", 0, |o, _| {
                let ready = o.pointer("/status/readyReplicas").and_then(Value::as_i64).unwrap_or(0);
                let want = o.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
                Value::String(format!("{ready}/{want}"))
            }),
            ColumnDef::computed("Up-to-date", "Total number of non-terminated pods targeted by this deployment that have the desired template spec.", 0, |o, _| {
                Value::from(o.pointer("/status/updatedReplicas").and_then(Value::as_i64).unwrap_or(0))
            })
            .with_type("integer"),
            ColumnDef::computed("Available", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.", 0, |o, _| {
                Value::from(o.pointer("/status/availableReplicas").and_then(Value::as_i64).unwrap_or(0))
            })
            .with_type("integer"),
            age_column(),
            ColumnDef::computed("Containers", "Names of each container in the template.", 1, |o, _| container_field(o, "name")),
            ColumnDef::computed("Images", "Images referenced by each container in the template.", 1, |o, _| container_field(o, "image")),
            ColumnDef::computed("Selector", "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.", 1, |o, _| {
                Value::String(selector_string(o.pointer("/spec/selector")))
            }),
        ]
}

/// The real server's printer columns for stateful sets: `Ready`, and wide `Containers`, `Images`.
fn statefulset_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed("Ready", "Number of the pod with ready state", 0, |o, _| {
            let ready = o
                .pointer("/status/readyReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let want = o
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            Value::String(format!("{ready}/{want}"))
        }),
        age_column(),
        ColumnDef::computed(
            "Containers",
            "Names of each container in the template.",
            1,
            |o, _| container_field(o, "name"),
        ),
        ColumnDef::computed(
            "Images",
            "Images referenced by each container in the template.",
            1,
            |o, _| container_field(o, "image"),
        ),
    ]
}

/// The real server's printer columns for replica sets: `Desired`, `Current`, `Ready`, and wide `Containers`, `Images`, `Selector`.
fn replicaset_columns() -> Vec<ColumnDef> {
    vec![
            name_column(),
            ColumnDef::computed("Desired", "Replicas is the number of desired pods.", 0, |o, _| {
                Value::from(o.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1))
            })
            .with_type("integer"),
            ColumnDef::computed("Current", "Replicas is the most recently observed number of non-terminating pods.", 0, |o, _| {
                Value::from(o.pointer("/status/replicas").and_then(Value::as_i64).unwrap_or(0))
            })
            .with_type("integer"),
            ColumnDef::computed("Ready", "The number of non-terminating pods targeted by this ReplicaSet with a Ready Condition.", 0, |o, _| {
                Value::from(o.pointer("/status/readyReplicas").and_then(Value::as_i64).unwrap_or(0))
            })
            .with_type("integer"),
            age_column(),
            ColumnDef::computed("Containers", "Names of each container in the template.", 1, |o, _| container_field(o, "name")),
            ColumnDef::computed("Images", "Images referenced by each container in the template.", 1, |o, _| container_field(o, "image")),
            ColumnDef::computed("Selector", "Selector is a label query over pods that should match the replica count.", 1, |o, _| {
                Value::String(selector_string(o.pointer("/spec/selector")))
            }),
        ]
}

/// The containers' `field`s of the pod template at `template` (`layoutContainerCells`).
fn template_containers(obj: &Value, template: &str, field: &str) -> Value {
    let names: Vec<String> = obj
        .pointer(&format!("{template}/spec/containers"))
        .and_then(Value::as_array)
        .map(|cs| cs.iter().map(|c| text(c, &format!("/{field}"))).collect())
        .unwrap_or_default();
    Value::String(names.join(","))
}

fn int_at(obj: &Value, pointer: &str) -> Value {
    Value::from(obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0))
}

/// The real server's printer columns for daemon sets: `Desired`, `Current`, `Ready`,
/// `Up-to-date`, `Available`, `Node Selector`, and wide `Containers`, `Images`, `Selector`.
fn daemonset_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed("Desired", "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod).", 0, |o, _| int_at(o, "/status/desiredNumberScheduled")).with_type("integer"),
        ColumnDef::computed("Current", "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.", 0, |o, _| int_at(o, "/status/currentNumberScheduled")).with_type("integer"),
        ColumnDef::computed("Ready", "numberReady is the number of nodes that should be running the daemon pod and have one or more of the daemon pod running with a Ready Condition.", 0, |o, _| int_at(o, "/status/numberReady")).with_type("integer"),
        ColumnDef::computed("Up-to-date", "The total number of nodes that are running updated daemon pod", 0, |o, _| int_at(o, "/status/updatedNumberScheduled")).with_type("integer"),
        ColumnDef::computed("Available", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)", 0, |o, _| int_at(o, "/status/numberAvailable")).with_type("integer"),
        ColumnDef::computed("Node Selector", "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node.", 0, |o, _| {
            let labels: Vec<String> = o
                .pointer("/spec/template/spec/nodeSelector")
                .and_then(Value::as_object)
                .map(|m| m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect())
                .unwrap_or_default();
            Value::String(if labels.is_empty() { "<none>".into() } else { labels.join(",") })
        }),
        age_column(),
        ColumnDef::computed("Containers", "Names of each container in the template.", 1, |o, _| container_field(o, "name")),
        ColumnDef::computed("Images", "Images referenced by each container in the template.", 1, |o, _| container_field(o, "image")),
        ColumnDef::computed("Selector", "A label query over pods that are managed by the daemon set.", 1, |o, _| {
            Value::String(selector_string(o.pointer("/spec/selector")))
        }),
    ]
}

/// A Job condition of `kind` whose status is `True` (`hasJobCondition`).
fn job_condition(job: &Value, kind: &str) -> bool {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == kind && c["status"] == "True")
        })
}

/// The Job printer's `Status` cell: the first of `Complete`, `Failed`, `Terminating`,
/// `SuccessCriteriaMet`, `Suspended`, `FailureTarget` that holds, else `Running`.
fn job_status(job: &Value) -> &'static str {
    if job_condition(job, "Complete") {
        "Complete"
    } else if job_condition(job, "Failed") {
        "Failed"
    } else if job
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        "Terminating"
    } else if job_condition(job, "SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else if job_condition(job, "Suspended") {
        "Suspended"
    } else if job_condition(job, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    }
}

/// The real server's printer columns for jobs: `Status`, `Completions` (`1/3`, `0/1 of 2`),
/// `Duration`, and wide `Containers`, `Images`, `Selector`.
fn job_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed("Status", "Status of the job.", 0, |o, _| {
            Value::String(job_status(o).into())
        }),
        ColumnDef::computed(
            "Completions",
            "The completion status of the job.",
            0,
            |o, _| {
                let succeeded = o
                    .pointer("/status/succeeded")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let text = match o.pointer("/spec/completions").and_then(Value::as_i64) {
                    Some(c) => format!("{succeeded}/{c}"),
                    None => match o
                        .pointer("/spec/parallelism")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                    {
                        p if p > 1 => format!("{succeeded}/1 of {p}"),
                        _ => format!("{succeeded}/1"),
                    },
                };
                Value::String(text)
            },
        ),
        ColumnDef::computed(
            "Duration",
            "Time required to complete the job.",
            0,
            |o, now| {
                let time = |p: &str| {
                    o.pointer(p)
                        .and_then(Value::as_str)
                        .and_then(|s| s.parse::<Timestamp>().ok())
                };
                Value::String(
                    match (time("/status/startTime"), time("/status/completionTime")) {
                        (None, _) => String::new(),
                        (Some(start), None) => human_duration(now, start),
                        (Some(start), Some(end)) => human_duration(end, start),
                    },
                )
            },
        ),
        age_column(),
        ColumnDef::computed(
            "Containers",
            "Names of each container in the template.",
            1,
            |o, _| container_field(o, "name"),
        ),
        ColumnDef::computed(
            "Images",
            "Images referenced by each container in the template.",
            1,
            |o, _| container_field(o, "image"),
        ),
        ColumnDef::computed(
            "Selector",
            "Selector is a label query over pods that should match the pod count.",
            1,
            |o, _| Value::String(selector_string(o.pointer("/spec/selector"))),
        ),
    ]
}

/// The real server's printer columns for cron jobs: `Schedule`, `Timezone`, `Suspend`,
/// `Active`, `Last Schedule`, and wide `Containers`, `Images`, `Selector`.
fn cronjob_columns() -> Vec<ColumnDef> {
    const TEMPLATE: &str = "/spec/jobTemplate/spec/template";
    vec![
        name_column(),
        ColumnDef::computed(
            "Schedule",
            "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.",
            0,
            |o, _| Value::String(text(o, "/spec/schedule")),
        ),
        ColumnDef::computed(
            "Timezone",
            "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.",
            0,
            |o, _| {
                Value::String(match o.pointer("/spec/timeZone").and_then(Value::as_str) {
                    Some(tz) => tz.to_owned(),
                    None => "<none>".into(),
                })
            },
        ),
        ColumnDef::computed(
            "Suspend",
            "This flag tells the controller to suspend subsequent executions.",
            0,
            |o, _| {
                let on = o
                    .pointer("/spec/suspend")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                Value::String(if on { "True" } else { "False" }.into())
            },
        ),
        ColumnDef::computed(
            "Active",
            "A list of pointers to currently running jobs.",
            0,
            |o, _| Value::from(len_of(o, "/status/active")),
        )
        .with_type("integer"),
        ColumnDef::computed(
            "Last Schedule",
            "Information when was the last time the job was successfully scheduled.",
            0,
            |o, now| {
                Value::String(match o.pointer("/status/lastScheduleTime") {
                    Some(t) if !t.is_null() => age_of(Some(t), now),
                    _ => "<none>".into(),
                })
            },
        ),
        age_column(),
        ColumnDef::computed(
            "Containers",
            "Names of each container in the template.",
            1,
            |o, _| template_containers(o, TEMPLATE, "name"),
        ),
        ColumnDef::computed(
            "Images",
            "Images referenced by each container in the template.",
            1,
            |o, _| template_containers(o, TEMPLATE, "image"),
        ),
        ColumnDef::computed(
            "Selector",
            "Selector is a label query over pods that should match the pod count.",
            1,
            |o, _| {
                Value::String(selector_string(
                    o.pointer("/spec/jobTemplate/spec/selector"),
                ))
            },
        ),
    ]
}

/// The real server's printer columns for role bindings and cluster role bindings: `Role`, and wide `Users`, `Groups`, `ServiceAccounts`.
fn rolebinding_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed(
            "Role",
            "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace.",
            0,
            |o, _| {
                Value::String(format!(
                    "{}/{}",
                    text(o, "/roleRef/kind"),
                    text(o, "/roleRef/name")
                ))
            },
        ),
        age_column(),
        ColumnDef::computed("Users", "Users in the roleBinding", 1, |o, _| {
            subjects_of(o, "User")
        }),
        ColumnDef::computed("Groups", "Groups in the roleBinding", 1, |o, _| {
            subjects_of(o, "Group")
        }),
        ColumnDef::computed(
            "ServiceAccounts",
            "ServiceAccounts in the roleBinding",
            1,
            |o, _| subjects_of(o, "ServiceAccount"),
        ),
    ]
}

/// The real server's printer columns for nodes: `Status`, `Roles`, `Age`, `Version`, and wide `Internal-IP`, `External-IP`, `OS-Image`, `Kernel-Version`, `Container-Runtime`.
fn node_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed("Status", "The status of the node", 0, |o, _| {
            Value::String(node_status(o))
        }),
        ColumnDef::computed("Roles", "The roles of the node", 0, |o, _| {
            Value::String(node_roles(o))
        }),
        age_column(),
        ColumnDef::computed(
            "Version",
            "Kubelet Version reported by the node.",
            0,
            |o, _| Value::String(text(o, "/status/nodeInfo/kubeletVersion")),
        ),
        ColumnDef::computed(
            "Internal-IP",
            "List of addresses reachable to the node.",
            1,
            |o, _| Value::String(node_address(o, "InternalIP")),
        ),
        ColumnDef::computed(
            "External-IP",
            "List of addresses reachable to the node.",
            1,
            |o, _| Value::String(node_address(o, "ExternalIP")),
        ),
        ColumnDef::computed(
            "OS-Image",
            "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
            1,
            |o, _| unknown_if_empty(o, "/status/nodeInfo/osImage"),
        ),
        ColumnDef::computed(
            "Kernel-Version",
            "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
            1,
            |o, _| unknown_if_empty(o, "/status/nodeInfo/kernelVersion"),
        ),
        ColumnDef::computed(
            "Container-Runtime",
            "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
            1,
            |o, _| unknown_if_empty(o, "/status/nodeInfo/containerRuntimeVersion"),
        ),
    ]
}

/// The real server's printer columns for leases: `Holder`.
fn lease_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed("Holder", "The holder of the lease", 0, |o, _| {
            Value::String(text(o, "/spec/holderIdentity"))
        }),
        age_column(),
    ]
}

/// The real server's printer columns for ingresses (`printIngress`): `Class` (`<none>`
/// without `ingressClassName`), `Hosts` (the first three rules' hosts, `*` when none names
/// one, `+ N more...` past three), `Address` (the load balancer's IPs or hostnames, sorted and
/// deduplicated), `Ports` (`80`, or `80, 443` with TLS).
fn ingress_columns() -> Vec<ColumnDef> {
    fn hosts(o: &Value) -> String {
        let rules = o["spec"]["rules"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let mut list: Vec<&str> = vec![];
        let mut more = false;
        for rule in rules {
            if list.len() == 3 {
                more = true;
            }
            let host = rule["host"].as_str().unwrap_or_default();
            if !more && !host.is_empty() {
                list.push(host);
            }
        }
        if list.is_empty() {
            return "*".into();
        }
        let joined = list.join(",");
        if more {
            return format!("{joined} + {} more...", rules.len() - 3);
        }
        joined
    }
    fn address(o: &Value) -> String {
        let mut set = std::collections::BTreeSet::new();
        for ing in o
            .pointer("/status/loadBalancer/ingress")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
        {
            match (ing["ip"].as_str(), ing["hostname"].as_str()) {
                (Some(ip), _) if !ip.is_empty() => set.insert(ip.to_owned()),
                (_, Some(h)) if !h.is_empty() => set.insert(h.to_owned()),
                _ => false,
            };
        }
        set.into_iter().collect::<Vec<_>>().join(",")
    }
    vec![
        name_column(),
        ColumnDef::computed(
            "Class",
            "The name of the IngressClass resource that should be used for additional configuration",
            0,
            |o, _| none_if_empty(o.pointer("/spec/ingressClassName")),
        ),
        ColumnDef::computed(
            "Hosts",
            "Hosts that incoming requests are matched against before the ingress rule",
            0,
            |o, _| Value::String(hosts(o)),
        ),
        ColumnDef::computed(
            "Address",
            "Address is a list containing ingress points for the load-balancer",
            0,
            |o, _| Value::String(address(o)),
        ),
        ColumnDef::computed(
            "Ports",
            "Ports of TLS configurations that open",
            0,
            |o, _| {
                let tls = len_of(o, "/spec/tls") > 0;
                Value::String(if tls { "80, 443" } else { "80" }.into())
            },
        ),
        age_column(),
    ]
}

/// The real server's printer columns for ingress classes (`printIngressClass`): `Controller`,
/// `Parameters` (`<Kind>[.<apiGroup>]/<name>`, `<none>` without parameters).
fn ingressclass_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed(
            "Controller",
            "Controller that is responsible for handling this class",
            0,
            |o, _| Value::String(text(o, "/spec/controller")),
        ),
        ColumnDef::computed(
            "Parameters",
            "A reference to a resource with additional parameters",
            0,
            |o, _| {
                let Some(p) = o.pointer("/spec/parameters").filter(|p| p.is_object()) else {
                    return Value::String("<none>".into());
                };
                let mut s = text(p, "/kind");
                if let Some(group) = p["apiGroup"].as_str() {
                    s = format!("{s}.{group}");
                }
                Value::String(format!("{s}/{}", text(p, "/name")))
            },
        ),
        age_column(),
    ]
}

/// The real server's printer columns for network policies (`printNetworkPolicy`):
/// `Pod-Selector` (`<none>` for the empty selector, which selects every pod).
fn networkpolicy_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed(
            "Pod-Selector",
            "Selects the pods to which this NetworkPolicy object applies. The array of ingress rules is applied to any pods selected by this field. Multiple network policies can select the same set of pods. In this case, the ingress rules for each are combined additively. This field is NOT optional and follows standard label selector semantics. An empty podSelector matches all pods in this namespace.",
            0,
            |o, _| Value::String(selector_string(o.pointer("/spec/podSelector"))),
        ),
        age_column(),
    ]
}

/// The real server's printer columns for validating and mutating webhook configurations:
/// `Webhooks` (how many the configuration holds).
fn webhookconfiguration_columns() -> Vec<ColumnDef> {
    vec![
        name_column(),
        ColumnDef::computed(
            "Webhooks",
            "Webhooks indicates the number of webhooks in the configuration",
            0,
            |o, _| Value::from(len_of(o, "/webhooks")),
        )
        .with_type("integer"),
        age_column(),
    ]
}

/// What each row's `object` holds (`?includeObject=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// `PartialObjectMetadata` with the object's metadata (the default).
    #[default]
    Metadata,
    /// The whole object (kubectl asks for it with `--sort-by`).
    Object,
    /// No object.
    None,
}

impl IncludeObject {
    /// Parses the `includeObject` query value (`Metadata`, `Object`, `None`; empty = default).
    pub fn parse(s: &str) -> Result<IncludeObject, String> {
        match s {
            "" | "Metadata" => Ok(IncludeObject::Metadata),
            "Object" => Ok(IncludeObject::Object),
            "None" => Ok(IncludeObject::None),
            other => Err(format!(
                "includeObject: Unsupported value: {other:?}: supported values: \"Metadata\", \"None\", \"Object\""
            )),
        }
    }
}

/// Builds a `meta.k8s.io/v1` Table: `metadata.resourceVersion` = `list_rv`, `metadata.continue`
/// when paging, one row per item with its cells computed at `now`.
pub fn to_table_at(
    items: &[Value],
    columns: &[ColumnDef],
    list_rv: &str,
    continue_: Option<&str>,
    include: IncludeObject,
    now: Timestamp,
) -> Value {
    let mut metadata = Map::new();
    metadata.insert("resourceVersion".into(), Value::String(list_rv.into()));
    if let Some(c) = continue_.filter(|c| !c.is_empty()) {
        metadata.insert("continue".into(), Value::String(c.into()));
    }
    let rows: Vec<Value> = items
        .iter()
        .map(|item| {
            let cells: Vec<Value> = columns.iter().map(|c| c.cell(item, now)).collect();
            let mut row = Map::new();
            row.insert("cells".into(), Value::Array(cells));
            match include {
                IncludeObject::Metadata => {
                    row.insert(
                        "object".into(),
                        json!({
                            "kind": "PartialObjectMetadata",
                            "apiVersion": "meta.k8s.io/v1",
                            "metadata": item.get("metadata").cloned().unwrap_or_else(|| json!({})),
                        }),
                    );
                }
                IncludeObject::Object => {
                    row.insert("object".into(), item.clone());
                }
                IncludeObject::None => {}
            }
            Value::Object(row)
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": Value::Object(metadata),
        "columnDefinitions": columns.iter().map(ColumnDef::definition).collect::<Vec<_>>(),
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn human_durations_match_apimachinery() {
        let now = ts("2024-05-01T00:00:00Z");
        let ago = |secs: i64| {
            human_duration(now, Timestamp::from_second(now.as_second() - secs).unwrap())
        };
        assert_eq!(ago(-5), "<invalid>");
        assert_eq!(ago(-1), "0s");
        assert_eq!(ago(0), "0s");
        assert_eq!(ago(119), "119s");
        assert_eq!(ago(120), "2m");
        assert_eq!(ago(450), "7m30s");
        assert_eq!(ago(600), "10m");
        assert_eq!(ago(179 * 60), "179m");
        assert_eq!(ago(3 * 3600 + 600), "3h10m");
        assert_eq!(ago(5 * 3600), "5h");
        assert_eq!(ago(20 * 3600), "20h");
        assert_eq!(ago(3 * 86400 + 4 * 3600), "3d4h");
        assert_eq!(ago(40 * 86400), "40d");
        assert_eq!(ago(2 * 365 * 86400 + 10 * 86400), "2y10d");
        assert_eq!(ago(9 * 365 * 86400), "9y");
    }

    #[test]
    fn json_paths() {
        let obj =
            json!({"spec": {"a": [{"b": 1}, {"b": 2}], "x.y": "dot"}, "metadata": {"name": "n"}});
        assert_eq!(eval_json_path(&obj, ".spec.a[1].b"), Some(&json!(2)));
        assert_eq!(eval_json_path(&obj, "{.metadata.name}"), Some(&json!("n")));
        assert_eq!(eval_json_path(&obj, ".spec['x.y']"), Some(&json!("dot")));
        assert_eq!(eval_json_path(&obj, ".spec.missing"), None);
        assert_eq!(eval_json_path(&obj, ".spec.a[5]"), None);
        assert!(!is_simple_json_path(".spec.a[*].b"));
        let conds = json!({"status": {"conditions": [
            {"type": "InvalidSpec", "reason": "Bad"}, {"type": "Ready", "reason": "Scheduled"}]}});
        let ready = r#".status.conditions[?(@.type=="Ready")].reason"#;
        assert!(is_simple_json_path(ready));
        assert_eq!(eval_json_path(&conds, ready), Some(&json!("Scheduled")));
        assert_eq!(
            eval_json_path(&conds, ".status.conditions[?(@.type=='Gone')].reason"),
            None
        );
        assert!(!is_simple_json_path(".a[?(@.b>1)]"));
        assert!(!is_simple_json_path("spec"));
        assert!(is_simple_json_path(".status.phase"));
    }

    fn at(name: &str, phase: Option<&str>) -> Value {
        let mut v = json!({"apiVersion": "cnat.programming-kubernetes.info/v1alpha1", "kind": "At",
            "metadata": {"name": name, "namespace": "default", "uid": "u", "creationTimestamp": "2024-05-01T00:00:00Z",
                         "labels": {"app": "x"}},
            "spec": {"schedule": "2024-05-01T10:00:00Z", "command": "echo", "replicas": 3.0}});
        if let Some(p) = phase {
            v["status"] = json!({"phase": p});
        }
        v
    }

    #[test]
    fn crd_table_with_printer_columns() {
        let columns = crd_columns(&json!([
            {"name": "Schedule", "type": "string", "jsonPath": ".spec.schedule"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase", "description": "Where it is"},
            {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
        ]));
        let now = ts("2024-05-01T00:05:00Z");
        let table = to_table_at(
            &[at("a", Some("DONE")), at("b", None)],
            &columns,
            "42",
            Some("tok"),
            IncludeObject::Metadata,
            now,
        );
        assert_eq!(table["kind"], "Table");
        assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(
            table["metadata"],
            json!({"resourceVersion": "42", "continue": "tok"})
        );
        let defs = table["columnDefinitions"].as_array().unwrap();
        assert_eq!(defs[0]["name"], "Name");
        assert_eq!(defs[0]["format"], "name");
        assert_eq!(
            defs[1]["description"],
            "Custom resource definition column (in JSONPath format): .spec.schedule"
        );
        assert_eq!(defs[2]["description"], "Where it is");
        assert_eq!(defs[3]["priority"], 1);
        assert_eq!(
            table["rows"][0]["cells"],
            json!(["a", "2024-05-01T10:00:00Z", "DONE", 3, "5m"])
        );
        assert_eq!(
            table["rows"][1]["cells"],
            json!(["b", "2024-05-01T10:00:00Z", null, 3, "5m"])
        );
        let obj = &table["rows"][0]["object"];
        assert_eq!(obj["kind"], "PartialObjectMetadata");
        assert_eq!(obj["metadata"]["labels"]["app"], "x");
        assert!(obj.get("spec").is_none());
    }

    #[test]
    fn crd_without_printer_columns_gets_age_and_include_object_variants() {
        let columns = crd_columns(&json!([]));
        assert_eq!(
            columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["Name", "Age"]
        );
        let mut bad = at("x", None);
        bad["metadata"]["creationTimestamp"] = json!("yesterday");
        let now = ts("2024-05-03T00:00:00Z");
        let t = to_table_at(
            &[at("a", None), bad],
            &columns,
            "1",
            None,
            IncludeObject::Object,
            now,
        );
        assert_eq!(t["rows"][0]["cells"], json!(["a", "2d"]));
        assert_eq!(t["rows"][1]["cells"], json!(["x", "<invalid>"]));
        assert_eq!(t["rows"][0]["object"]["kind"], "At");
        assert!(t["metadata"].get("continue").is_none());
        let t = to_table_at(
            &[at("a", None)],
            &columns,
            "1",
            None,
            IncludeObject::None,
            now,
        );
        assert!(t["rows"][0].get("object").is_none());
        assert_eq!(IncludeObject::parse("Object"), Ok(IncludeObject::Object));
        assert!(IncludeObject::parse("All").unwrap_err().contains("\"All\""));
    }

    #[test]
    fn default_columns_show_raw_creation_time() {
        let t = to_table_at(
            &[json!({"metadata": {"name": "cm", "creationTimestamp": "2024-05-01T00:00:00Z"}})],
            &default_columns(),
            "7",
            None,
            IncludeObject::Metadata,
            ts("2024-06-01T00:00:00Z"),
        );
        assert_eq!(t["rows"][0]["cells"], json!(["cm", "2024-05-01T00:00:00Z"]));
        assert_eq!(t["columnDefinitions"][1]["name"], "Created At");
        assert_eq!(t["columnDefinitions"][1]["type"], "date");
    }

    fn pod(status: Value) -> Value {
        json!({"metadata": {"name": "p", "creationTimestamp": "2024-05-01T00:00:00Z"},
               "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "node-1"},
               "status": status})
    }

    fn cells(p: &Value) -> Value {
        let t = to_table_at(
            std::slice::from_ref(p),
            &pod_columns(),
            "1",
            None,
            IncludeObject::Metadata,
            ts("2024-05-01T01:00:00Z"),
        );
        t["rows"][0]["cells"].clone()
    }

    #[test]
    fn pod_printer() {
        let running = pod(json!({"phase": "Running", "podIP": "10.0.0.5",
        "containerStatuses": [
            {"name": "a", "ready": true, "restartCount": 0, "state": {"running": {}}},
            {"name": "b", "ready": true, "restartCount": 2, "state": {"running": {}},
             "lastState": {"terminated": {"finishedAt": "2024-05-01T00:55:00Z", "exitCode": 1}}}
        ]}));
        assert_eq!(
            cells(&running),
            json!([
                "p",
                "2/2",
                "Running",
                "2 (5m ago)",
                "60m",
                "10.0.0.5",
                "node-1",
                "<none>",
                "<none>"
            ])
        );
        let crash = pod(json!({"phase": "Running", "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 3, "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
            {"name": "b", "ready": true, "restartCount": 0, "state": {"running": {}}}
        ]}));
        let c = cells(&crash);
        assert_eq!(c[1], "1/2");
        assert_eq!(c[2], "CrashLoopBackOff");
        assert_eq!(c[3], "3");
        let pending = pod(json!({"phase": "Pending"}));
        let c = cells(&pending);
        assert_eq!((&c[1], &c[2]), (&json!("0/2"), &json!("Pending")));
        let mut init = pod(json!({"phase": "Pending", "initContainerStatuses": [
            {"name": "i1", "restartCount": 0, "state": {"terminated": {"exitCode": 0}}},
            {"name": "i2", "restartCount": 0, "state": {"running": {}}}
        ]}));
        init["spec"]["initContainers"] = json!([{"name": "i1"}, {"name": "i2"}]);
        assert_eq!(cells(&init)[2], "Init:1/2");
        let mut deleting = running.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2024-05-01T00:59:00Z");
        assert_eq!(cells(&deleting)[2], "Terminating");
        let done = pod(json!({"phase": "Succeeded", "containerStatuses": [
            {"name": "a", "ready": false, "restartCount": 0, "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}
        ]}));
        assert_eq!(cells(&done)[2], "Completed");
        let mut gated = running.clone();
        gated["spec"]["readinessGates"] = json!([{"conditionType": "x/ready"}]);
        gated["status"]["conditions"] = json!([{"type": "x/ready", "status": "True"}]);
        assert_eq!(cells(&gated)[8], "1/1");
        let defs: Vec<(String, i64)> = pod_columns()
            .iter()
            .map(|c| (c.name.clone(), i64::from(c.priority)))
            .collect();
        assert_eq!(defs[4], ("Age".to_string(), 0));
        assert_eq!(defs[5], ("IP".to_string(), 1));
    }

    fn row(group: &str, resource: &str, obj: Value, now: &str) -> Value {
        let cols = builtin_columns(group, resource).unwrap();
        let t = to_table_at(&[obj], &cols, "1", None, IncludeObject::None, ts(now));
        t["rows"][0]["cells"].clone()
    }

    #[test]
    fn builtin_printers() {
        let created = json!({"name": "x", "creationTimestamp": "2024-05-01T00:00:00Z"});
        let now = "2024-05-01T00:10:00Z";
        assert_eq!(
            row(
                "",
                "namespaces",
                json!({"metadata": created, "status": {"phase": "Active"}}),
                now
            ),
            json!(["x", "Active", "10m"])
        );
        assert_eq!(
            row(
                "",
                "configmaps",
                json!({"metadata": created, "data": {"a": "1", "b": "2"}, "binaryData": {"c": ""}}),
                now
            ),
            json!(["x", 3, "10m"])
        );
        assert_eq!(
            row(
                "",
                "secrets",
                json!({"metadata": created, "type": "Opaque", "data": {"p": "aA=="}}),
                now
            ),
            json!(["x", "Opaque", 1, "10m"])
        );
        assert_eq!(
            row("", "serviceaccounts", json!({"metadata": created}), now),
            json!(["x", 0, "10m"])
        );
        assert_eq!(
            row(
                "",
                "services",
                json!({"metadata": created, "spec": {"type": "NodePort", "clusterIP": "10.0.0.1",
                "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}], "selector": {"app": "web"}}}),
                now
            ),
            json!([
                "x",
                "NodePort",
                "10.0.0.1",
                "<none>",
                "80:30080/TCP,53/UDP",
                "10m",
                "app=web"
            ])
        );
        assert_eq!(
            row(
                "",
                "services",
                json!({"metadata": created, "spec": {"type": "LoadBalancer"}}),
                now
            ),
            json!([
                "x",
                "LoadBalancer",
                "<none>",
                "<pending>",
                "<none>",
                "10m",
                "<none>"
            ])
        );
        assert_eq!(
            row(
                "apps",
                "deployments",
                json!({"metadata": created,
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                         "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}, {"name": "log", "image": "busybox"}]}}},
                "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}}),
                now
            ),
            json!([
                "x",
                "2/3",
                3,
                2,
                "10m",
                "web,log",
                "nginx,busybox",
                "app=web"
            ])
        );
        assert_eq!(
            row(
                "apps",
                "statefulsets",
                json!({"metadata": created, "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "redis", "image": "redis:7"}]}}},
                "status": {"readyReplicas": 1}}),
                now
            ),
            json!(["x", "1/2", "10m", "redis", "redis:7"])
        );
        assert_eq!(
            row(
                "coordination.k8s.io",
                "leases",
                json!({"metadata": created, "spec": {"holderIdentity": "pod-a"}}),
                now
            ),
            json!(["x", "pod-a", "10m"])
        );
        assert_eq!(
            row(
                "apps",
                "replicasets",
                json!({"metadata": created,
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                         "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
                "status": {"replicas": 3, "readyReplicas": 1}}),
                now
            ),
            json!(["x", 3, 3, 1, "10m", "web", "nginx", "app=web"])
        );
        let subjects = json!([
            {"kind": "User", "name": "alice"},
            {"kind": "User", "name": "bob"},
            {"kind": "Group", "name": "devs"},
            {"kind": "ServiceAccount", "name": "cnat", "namespace": "cnat"},
        ]);
        assert_eq!(
            row(
                "rbac.authorization.k8s.io",
                "rolebindings",
                json!({"metadata": created, "roleRef": {"kind": "Role", "name": "pod-reader"}, "subjects": subjects}),
                now
            ),
            json!([
                "x",
                "Role/pod-reader",
                "10m",
                "alice, bob",
                "devs",
                "cnat:cnat"
            ])
        );
        assert_eq!(
            row(
                "rbac.authorization.k8s.io",
                "clusterrolebindings",
                json!({"metadata": created, "roleRef": {"kind": "ClusterRole", "name": "view"}}),
                now
            ),
            json!(["x", "ClusterRole/view", "10m", "", "", ""])
        );
        assert_eq!(
            row(
                "",
                "nodes",
                json!({"metadata": {"name": "x", "creationTimestamp": "2024-05-01T00:00:00Z",
                    "labels": {"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/control-plane": ""}},
                "spec": {"unschedulable": true},
                "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
                    "addresses": [{"type": "Hostname", "address": "x"}, {"type": "InternalIP", "address": "10.0.0.5"}],
                    "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Debian", "kernelVersion": "6.1", "containerRuntimeVersion": "containerd://1.7"}}}),
                now
            ),
            json!([
                "x",
                "Ready,SchedulingDisabled",
                "control-plane,worker",
                "10m",
                "v1.33.0",
                "10.0.0.5",
                "<none>",
                "Debian",
                "6.1",
                "containerd://1.7"
            ])
        );
        assert_eq!(
            row("", "nodes", json!({"metadata": created}), now),
            json!([
                "x",
                "Unknown",
                "<none>",
                "10m",
                "",
                "<none>",
                "<none>",
                "<unknown>",
                "<unknown>",
                "<unknown>"
            ])
        );
        // Roles, cluster roles and CRDs print `Name` / `Created At`, as on a real server.
        assert!(builtin_columns("apiextensions.k8s.io", "customresourcedefinitions").is_none());
        assert!(builtin_columns("rbac.authorization.k8s.io", "roles").is_none());
        assert!(builtin_columns("rbac.authorization.k8s.io", "clusterroles").is_none());
    }

    #[test]
    fn event_printer() {
        let ev = json!({"metadata": {"name": "example.17"}, "type": "Normal", "reason": "Scheduled",
            "involvedObject": {"kind": "At", "name": "example", "fieldPath": "spec"},
            "source": {"component": "cnat"}, "message": " pod created \n",
            "firstTimestamp": "2024-05-01T00:00:00Z", "lastTimestamp": "2024-05-01T00:08:00Z", "count": 3});
        assert_eq!(
            row("", "events", ev.clone(), "2024-05-01T00:10:00Z"),
            json!([
                "2m",
                "Normal",
                "Scheduled",
                "at/example",
                "spec",
                "cnat",
                "pod created",
                "10m",
                3,
                "example.17"
            ])
        );
        let mut series = ev;
        series.as_object_mut().unwrap().remove("lastTimestamp");
        series.as_object_mut().unwrap().remove("firstTimestamp");
        series.as_object_mut().unwrap().remove("source");
        series["eventTime"] = json!("2024-05-01T00:00:00.000000Z");
        series["series"] = json!({"count": 5, "lastObservedTime": "2024-05-01T00:09:00.000000Z"});
        series["reportingComponent"] = json!("cnat-controller");
        series["reportingInstance"] = json!("pod-a");
        let cells = row("", "events", series, "2024-05-01T00:10:00Z");
        assert_eq!(cells[0], "60s");
        assert_eq!(cells[5], "cnat-controller, pod-a");
        assert_eq!(cells[7], "10m");
        assert_eq!(cells[8], 5);
    }

    /// The At CRD's own printer columns on the book's example, as `kubectl get ats` shows them.
    #[test]
    fn at_crd_printer_columns() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../artifacts");
        let read = |p: &str| -> Value {
            serde_yaml_ng::from_str(&std::fs::read_to_string(root.join(p)).unwrap()).unwrap()
        };
        let crd = read("crds/ats.cnat.programming-kubernetes.info.yaml");
        // The book's example is a v1alpha1 object: that version's columns.
        let v1alpha1 = crd["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "v1alpha1")
            .unwrap();
        let columns = crd_columns(&v1alpha1["additionalPrinterColumns"]);
        let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["Name", "Schedule", "Command", "Phase", "Reason", "Age"]
        );
        let mut at = read("examples/cnat-example.yaml");
        at["metadata"]["creationTimestamp"] = json!("2024-05-01T00:00:00Z");
        at["status"] = json!({"phase": "PENDING", "conditions": [
            {"type": "InvalidSpec", "status": "True", "reason": "InvalidSpec"},
            {"type": "Ready", "status": "False", "reason": "Scheduled"}]});
        let t = to_table_at(
            &[at],
            &columns,
            "9",
            None,
            IncludeObject::Metadata,
            ts("2024-05-01T03:00:00Z"),
        );
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "example-at",
                "2019-04-12T10:12:00Z",
                "echo YAY",
                "PENDING",
                "Scheduled",
                "3h"
            ])
        );
    }
}
