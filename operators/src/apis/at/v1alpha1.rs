//! `At` **`v1alpha1`** (`cnat.programming-kubernetes.info/v1alpha1`): the book's shape, still
//! served, deprecated in favour of [`super::v1`] (see [`super`] for why and how the two versions
//! convert). The book's object applies and reads back exactly as it was written. Its spec also
//! accepts `v1`'s `run` (see [`AtSpec`]), and its status is `v1`'s, so that the two versions
//! share one schema, which the base CRD's `conversion: None` requires.
//!
//! The book's example, which applies unchanged:
//!
//! ```yaml
//! apiVersion: cnat.programming-kubernetes.info/v1alpha1
//! kind: At
//! metadata:
//!   name: example-at
//! spec:
//!   schedule: "2019-04-12T10:12:00Z"
//!   command: "echo YAY"
//! ```
//!
//! Its life, driven by the `At` controller (`controllers::at`): `PENDING` until `schedule` is reached,
//! `RUNNING` while a pod runs `/bin/sh -c <command>`, `DONE` when the pod finished, with
//! `result`, `exitCode` and `message` saying how. An object without status is `PENDING`.
//!
//! ## What `custom_resource!` writes
//!
//! The five kinds share one shape, so the type is declared with the `custom_resource!` macro
//! of [`crate::apis`]: below, the invocation gives the doc comment, the spec and status
//! types, group, version, kind and plural. For `At` it expands to what k8s-openapi generates
//! for a built-in kind such as `Pod`:
//!
//! ```text
//! #[derive(Clone, Debug, Default, PartialEq)]          // + schemars::JsonSchema for codegen
//! pub struct At {
//!     pub metadata: ObjectMeta,                         // name, namespace, uid, resourceVersion...
//!     pub spec: AtSpec,                                 // desired state, written by the user
//!     pub status: Option<AtStatus>,                     // observed state, via the /status subresource
//! }
//!
//! impl k8s_openapi::Resource for At {                  // where it lives in the API server's URL space
//!     const API_VERSION: &'static str = "cnat.programming-kubernetes.info/v1alpha1";
//!     const GROUP: &'static str = "cnat.programming-kubernetes.info";
//!     const KIND: &'static str = "At";
//!     const VERSION: &'static str = "v1alpha1";
//!     const URL_PATH_SEGMENT: &'static str = "ats";  // /apis/<group>/<version>/namespaces/<ns>/ats
//!     type Scope = k8s_openapi::NamespaceResourceScope;
//! }
//! impl k8s_openapi::ListableResource for At {          // a LIST answers with kind "AtList"
//!     const LIST_KIND: &'static str = "AtList";
//! }
//! impl k8s_openapi::Metadata for At {                  // how the cache and client reach metadata
//!     type Ty = ObjectMeta;
//!     fn metadata(&self) -> &ObjectMeta { &self.metadata }
//!     fn metadata_mut(&mut self) -> &mut ObjectMeta { &mut self.metadata }
//! }
//! impl Serialize for At { .. }      // writes apiVersion and kind first, omits a None status
//! impl Deserialize for At { .. }    // accepts apiVersion/kind missing, rejects them wrong:
//!                                   // `kind: expected "At", got "Pod"`
//! ```
//!
//! With these, `Api::<At>`, `Lister<At>` and the informers treat an `At` exactly like a `Pod`.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::apis::{AGE_COLUMN, CustomResourceExt, PrinterColumn, custom_resource};

pub use super::v1::{AtResult, AtRun, AtStatus};

custom_resource! {
    /// An `At` object: run `spec.command` at `spec.schedule`.
    #[cfg_attr(
        feature = "schema",
        schemars(extend("x-kubernetes-validations" = [{
            "rule": super::v1::SCHEDULE_FROZEN_RULE,
            "messageExpression": super::v1::SCHEDULE_FROZEN_MESSAGE,
            "reason": "FieldValueForbidden",
            "fieldPath": ".spec.schedule",
        }]))
    )]
    pub struct At {
        spec: AtSpec,
        status: Option<AtStatus>,
    }
    group = "cnat.programming-kubernetes.info",
    version = "v1alpha1",
    kind = "At",
    plural = "ats",
}

/// The `deprecationWarning` of this version in the CRD: what `kubectl` prints (as a
/// `Warning:` line) on every request that uses it.
pub const DEPRECATION_WARNING: &str = "cnat.programming-kubernetes.info/v1alpha1 At is deprecated; use cnat.programming-kubernetes.info/v1 At";

impl CustomResourceExt for At {
    const SINGULAR: &'static str = "at";
    const PRINTER_COLUMNS: &'static [PrinterColumn] = &[
        PrinterColumn {
            name: "Schedule",
            type_: "string",
            json_path: ".spec.schedule",
        },
        PrinterColumn {
            name: "Command",
            type_: "string",
            json_path: ".spec.command",
        },
        PrinterColumn {
            name: "Phase",
            type_: "string",
            json_path: ".status.phase",
        },
        // Why the At is (not yet) done: Scheduled, Running, Succeeded, Failed, or
        // InvalidSpec for an At that will never run (it stays PENDING: the book's three
        // phases have no "invalid" state, the Ready condition says it).
        PrinterColumn {
            name: "Reason",
            type_: "string",
            json_path: r#".status.conditions[?(@.type=="Ready")].reason"#,
        },
        AGE_COLUMN,
    ];
}

/// What the user asks for, as both versions write it on the wire: the book's `command`, or
/// `v1`'s `run`, exactly one of them.
///
/// The book's type had two fields, `schedule` and `command`. The base CRD serves `v1alpha1`
/// and `v1` with `conversion: {strategy: None}`: the API server then converts by rewriting
/// `apiVersion` alone, which Kubernetes allows only when every object valid in one served
/// version is valid in every other (otherwise the book's object, stored as `v1`, fails every
/// typed read and every `kubectl patch`). So the two versions share this one spec schema:
/// `v1alpha1` also accepts `run` (an object written in `v1`, read back as `v1alpha1`, keeps
/// its image and limits), and `v1` accepts `command` as a deprecated alias of `run.command`
/// ([`super::v1::AtSpec`] reads either). Two CEL rules on the spec ([`COMMAND_OR_RUN_RULE`],
/// [`NOT_BOTH_RULE`]) ask for exactly one of the two.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schema",
    schemars(extend("x-kubernetes-validations" = [
        {
            "rule": COMMAND_OR_RUN_RULE,
            "message": "spec.run.command is required (or spec.command, the book's v1alpha1 form)",
            "reason": "FieldValueRequired",
            "fieldPath": ".run",
        },
        {
            "rule": NOT_BOTH_RULE,
            "message": "spec.command (the book's v1alpha1 form) and spec.run cannot both be set: give the command once",
            "reason": "FieldValueForbidden",
            "fieldPath": ".command",
        },
    ]))
)]
#[serde(rename_all = "camelCase")]
pub struct AtSpec {
    /// When to run, RFC 3339 in UTC, e.g. `2019-04-12T10:12:00Z`. Frozen once the At has left
    /// PENDING.
    #[cfg_attr(feature = "schema", schemars(extend("format" = "date-time")))]
    pub schedule: String,
    /// The shell command line, run as `/bin/sh -c <command>` (the book's field; in `v1` a
    /// deprecated alias of `run.command`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "String", length(min = 1)))]
    pub command: Option<String>,
    /// What runs, and under which limits (`v1`'s form of the command, with its image and
    /// limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "AtRun"))]
    pub run: Option<AtRun>,
}

/// The spec's rule that a command is given: `run` (v1) or `command` (the book's).
pub const COMMAND_OR_RUN_RULE: &str = "has(self.run) || has(self.command)";
/// The spec's rule that the command is given once: not both `run` and `command`.
pub const NOT_BOTH_RULE: &str = "!(has(self.run) && has(self.command))";

impl AtSpec {
    /// The book's spec: run `command` at `schedule`.
    pub fn new(schedule: impl Into<String>, command: impl Into<String>) -> Self {
        AtSpec {
            schedule: schedule.into(),
            command: Some(command.into()),
            run: None,
        }
    }

    /// The command, from whichever field holds it (`command`, else `run.command`); empty when
    /// neither does.
    pub fn command(&self) -> &str {
        self.command
            .as_deref()
            .or(self.run.as_ref().map(|r| r.command.as_str()))
            .unwrap_or_default()
    }

    /// Parses `schedule` as RFC 3339. The error names the field and the value.
    pub fn parse_schedule(&self) -> Result<Timestamp, String> {
        self.schedule.parse::<Timestamp>().map_err(|e| {
            format!(
                "spec.schedule: {:?} is not an RFC 3339 time such as 2019-04-12T10:12:00Z: {e}",
                self.schedule
            )
        })
    }
}

/// The three phases, with the book's upper-case strings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum AtPhase {
    /// Waiting for the schedule.
    #[default]
    #[serde(rename = "PENDING")]
    Pending,
    /// The pod runs.
    #[serde(rename = "RUNNING")]
    Running,
    /// Finished; nothing ever happens again.
    #[serde(rename = "DONE")]
    Done,
}

impl AtPhase {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            AtPhase::Pending => "PENDING",
            AtPhase::Running => "RUNNING",
            AtPhase::Done => "DONE",
        }
    }
}

impl std::fmt::Display for AtPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl At {
    /// The phase, treating a missing status or phase as `PENDING`.
    pub fn phase(&self) -> AtPhase {
        self.status
            .as_ref()
            .and_then(|s| s.phase)
            .unwrap_or_default()
    }

    /// The name of the pod an At runs: `<name>-pod`, as in the book.
    pub fn pod_name(&self) -> String {
        format!("{}-pod", self.metadata.name.as_deref().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::test_util::round_trip;

    #[test]
    fn the_books_example_parses() {
        let yaml = "apiVersion: cnat.programming-kubernetes.info/v1alpha1\nkind: At\nmetadata:\n  name: example-at\nspec:\n  schedule: \"2019-04-12T10:12:00Z\"\n  command: \"echo YAY\"\n";
        let at: At = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(at.spec.command.as_deref(), Some("echo YAY"));
        assert_eq!(at.spec.run, None);
        assert_eq!(at.phase(), AtPhase::Pending);
        assert_eq!(at.pod_name(), "example-at-pod");
        assert_eq!(at.spec.parse_schedule().unwrap().as_second(), 1555063920);
    }

    #[test]
    fn full_status_round_trips_with_camel_case() {
        let at: At = round_trip(
            r#"{"apiVersion":"cnat.programming-kubernetes.info/v1alpha1","kind":"At","metadata":{"name":"a","namespace":"default"},"spec":{"schedule":"2019-04-12T10:12:00Z","command":"exit 3"},"status":{"phase":"DONE","podName":"a-pod","startTime":"2019-04-12T10:12:00Z","completionTime":"2019-04-12T10:12:05Z","result":"Failed","exitCode":3,"message":"command exited with 3","observedGeneration":1,"conditions":[{"type":"Ready","status":"False","lastTransitionTime":"2019-04-12T10:12:05Z","reason":"PodFailed","message":"x"}]}}"#,
        );
        let st = at.status.unwrap();
        assert_eq!(st.phase, Some(AtPhase::Done));
        assert_eq!(st.result, Some(AtResult::Failed));
        assert_eq!(st.exit_code, Some(3));
    }

    #[test]
    fn wrong_kind_is_rejected_and_missing_kind_accepted() {
        let err =
            serde_json::from_str::<At>(r#"{"kind":"Pod","spec":{"schedule":"x","command":"y"}}"#)
                .unwrap_err();
        assert!(err.to_string().contains("kind"), "{err}");
        let ok: At = serde_json::from_str(r#"{"spec":{"schedule":"x","command":"y"}}"#).unwrap();
        assert_eq!(ok.spec.schedule, "x");
    }

    #[test]
    fn bad_schedule_error_names_field_and_value() {
        let spec = AtSpec::new("tomorrow", "true");
        let err = spec.parse_schedule().unwrap_err();
        assert!(
            err.contains("spec.schedule") && err.contains("tomorrow"),
            "{err}"
        );
    }
}
