//! `At` **`v1`** (`cnat.programming-kubernetes.info/v1`): the storage version, and the one the
//! controller works on. [`super`] explains the change from `v1alpha1` field by field.
//!
//! ```yaml
//! apiVersion: cnat.programming-kubernetes.info/v1
//! kind: At
//! metadata:
//!   name: example-at
//! spec:
//!   schedule: "2019-04-12T10:12:00Z"
//!   run:
//!     command: "echo YAY"
//!     image: busybox:1.36            # the default, filled in by /mutate-at
//!     activeDeadlineSeconds: 60      # the pod is stopped after a minute: DONE, DeadlineExceeded
//!     ttlSecondsAfterFinished: 300   # the finished pod is deleted 5 minutes after DONE
//! ```
//!
//! The status has the `v1alpha1` fields, with one more `result`: `DeadlineExceeded`.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::apis::{AGE_COLUMN, Condition, CustomResourceExt, PrinterColumn, custom_resource};

pub use super::v1alpha1::AtPhase;

/// The image an At's pod runs when `spec.run.image` is not set: pinned (a `:latest` tag would
/// make every start pull), and the one the controller ran before `v1` made it a field.
pub const DEFAULT_IMAGE: &str = "busybox:1.36";

/// The CEL rule the v1 schema carries at its root (`x-kubernetes-validations`): the schedule is
/// frozen once the At has left `PENDING`. A transition rule (`oldSelf`), so the API server
/// evaluates it on updates only; `status` is the controller's, so a user cannot unfreeze the
/// schedule by editing it.
pub const SCHEDULE_FROZEN_RULE: &str = "!has(oldSelf.status) || !has(oldSelf.status.phase) || oldSelf.status.phase == 'PENDING' || self.spec.schedule == oldSelf.spec.schedule";

/// The `messageExpression` of [`SCHEDULE_FROZEN_RULE`]: says which phase and which schedule.
pub const SCHEDULE_FROZEN_MESSAGE: &str = "'spec.schedule cannot change once the At has left PENDING: it is ' + oldSelf.status.phase + ' with schedule ' + oldSelf.spec.schedule + '; delete and re-create it to run at another time'";

custom_resource! {
    /// An `At` object: run `spec.run` at `spec.schedule`.
    #[cfg_attr(
        feature = "schema",
        schemars(extend("x-kubernetes-validations" = [{
            "rule": SCHEDULE_FROZEN_RULE,
            "messageExpression": SCHEDULE_FROZEN_MESSAGE,
            "reason": "FieldValueForbidden",
            "fieldPath": ".spec.schedule",
        }]))
    )]
    pub struct At {
        spec: AtSpec,
        status: Option<AtStatus>,
    }
    group = "cnat.programming-kubernetes.info",
    version = "v1",
    kind = "At",
    plural = "ats",
}

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
            json_path: ".spec.run.command",
        },
        PrinterColumn {
            name: "Image",
            type_: "string",
            json_path: ".spec.run.image",
        },
        PrinterColumn {
            name: "Phase",
            type_: "string",
            json_path: ".status.phase",
        },
        // Scheduled, Running, Succeeded, Failed, DeadlineExceeded or InvalidSpec.
        PrinterColumn {
            name: "Reason",
            type_: "string",
            json_path: r#".status.conditions[?(@.type=="Ready")].reason"#,
        },
        AGE_COLUMN,
    ];
}

/// What the user asks for: when, and what to run.
///
/// On the wire a `v1` spec is written `{schedule, run: {command, ...}}`; the book's
/// `{schedule, command}` is accepted too, as a deprecated alias (the base CRD's `conversion:
/// None` needs both versions to accept the same objects: see [`super::v1alpha1::AtSpec`], the
/// wire form both versions share, whose schema this type takes). Either way the command lands
/// in `run.command`, so the controller reads one place; [`AtSpec::form`] remembers which form
/// the object used, and serializing writes that form back.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(from = "super::v1alpha1::AtSpec", into = "super::v1alpha1::AtSpec")]
pub struct AtSpec {
    /// When to run, RFC 3339 in UTC, e.g. `2019-04-12T10:12:00Z`. Frozen once the At has left
    /// PENDING.
    pub schedule: String,
    /// What runs, and under which limits (from `spec.run`, or from the book's `spec.command`).
    pub run: AtRun,
    /// Where the object wrote its command.
    pub form: CommandForm,
}

/// Where an At's spec gave its command: `v1`'s `spec.run.command`, or the book's `spec.command`
/// (the deprecated alias).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CommandForm {
    /// `spec.run.command` (with `spec.run`'s other fields).
    #[default]
    Run,
    /// `spec.command`, as the book's `v1alpha1` writes it.
    Book,
}

impl From<super::v1alpha1::AtSpec> for AtSpec {
    /// Either form to one: `run` wins when an object (against the schema's rule) has both.
    fn from(wire: super::v1alpha1::AtSpec) -> Self {
        match (wire.run, wire.command) {
            (Some(run), _) => AtSpec {
                schedule: wire.schedule,
                run,
                form: CommandForm::Run,
            },
            (None, Some(command)) => AtSpec {
                schedule: wire.schedule,
                run: AtRun {
                    command,
                    ..AtRun::default()
                },
                form: CommandForm::Book,
            },
            // Neither: an empty command, which the controller reports as an invalid spec.
            (None, None) => AtSpec {
                schedule: wire.schedule,
                run: AtRun::default(),
                form: CommandForm::Run,
            },
        }
    }
}

impl From<AtSpec> for super::v1alpha1::AtSpec {
    /// Back to the form the object used (the book's form keeps only the command: it has no
    /// place for the rest of `run`, and an object read in that form has none).
    fn from(spec: AtSpec) -> Self {
        match spec.form {
            CommandForm::Book if spec.run.has_command_only() => super::v1alpha1::AtSpec {
                schedule: spec.schedule,
                command: Some(spec.run.command),
                run: None,
            },
            _ => super::v1alpha1::AtSpec {
                schedule: spec.schedule,
                command: None,
                run: Some(spec.run),
            },
        }
    }
}

/// The run: a command line, the image it runs in, and the pod's lifetime limits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AtRun {
    /// The shell command line, run as `/bin/sh -c <command>`.
    #[cfg_attr(feature = "schema", schemars(length(min = 1)))]
    pub command: String,
    /// The container image; it must have `/bin/sh`. Defaults to `busybox:1.36`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(min = 1)))]
    pub image: Option<String>,
    /// Seconds the pod may run before the kubelet stops it (the pod's
    /// `spec.activeDeadlineSeconds`); the At then ends DONE with result `DeadlineExceeded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub active_deadline_seconds: Option<i64>,
    /// Seconds after the At went DONE when its finished pod is deleted (as a Job's
    /// `ttlSecondsAfterFinished`, but the At itself stays, DONE). Unset: the pod is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(range(min = 0)))]
    pub ttl_seconds_after_finished: Option<i32>,
}

impl AtSpec {
    /// A spec that runs `command` at `schedule` with every other field at its default.
    pub fn new(schedule: impl Into<String>, command: impl Into<String>) -> Self {
        AtSpec {
            schedule: schedule.into(),
            run: AtRun {
                command: command.into(),
                ..AtRun::default()
            },
            form: CommandForm::Run,
        }
    }

    /// The book's spec (`{schedule, command}`), as the `v1alpha1` example writes it.
    pub fn book(schedule: impl Into<String>, command: impl Into<String>) -> Self {
        AtSpec {
            form: CommandForm::Book,
            ..AtSpec::new(schedule, command)
        }
    }

    /// The field that holds the command, as a message names it: `spec.run.command`, or
    /// `spec.command` for the book's form.
    pub fn command_field(&self) -> &'static str {
        match self.form {
            CommandForm::Run => "spec.run.command",
            CommandForm::Book => "spec.command",
        }
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

impl AtRun {
    /// True when nothing but the command is set (the book's form can hold this run).
    pub fn has_command_only(&self) -> bool {
        self.image.is_none()
            && self.active_deadline_seconds.is_none()
            && self.ttl_seconds_after_finished.is_none()
    }

    /// The image the pod runs: `image`, or [`DEFAULT_IMAGE`].
    pub fn image(&self) -> &str {
        self.image.as_deref().unwrap_or(DEFAULT_IMAGE)
    }
}

/// How a finished At ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum AtResult {
    /// The command exited 0.
    Succeeded,
    /// The command exited non-zero, or the pod failed otherwise.
    Failed,
    /// The pod ran longer than `spec.run.activeDeadlineSeconds` and was stopped.
    DeadlineExceeded,
}

impl AtResult {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            AtResult::Succeeded => "Succeeded",
            AtResult::Failed => "Failed",
            AtResult::DeadlineExceeded => "DeadlineExceeded",
        }
    }
}

/// What the controller observed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AtStatus {
    /// `PENDING`, `RUNNING` or `DONE`; absent means `PENDING`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<AtPhase>,
    /// The pod that runs (or ran) the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    /// When the At went RUNNING.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>", extend("format" = "date-time")))]
    pub start_time: Option<Timestamp>,
    /// When the At went DONE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>", extend("format" = "date-time")))]
    pub completion_time: Option<Timestamp>,
    /// `Succeeded`, `Failed` or `DeadlineExceeded`, once DONE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<AtResult>,
    /// The command's exit code, once DONE (absent when the pod was stopped before it exited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// A human-readable explanation of the current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions (`Ready`, `InvalidSpec`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(
        feature = "schema",
        schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))
    )]
    pub conditions: Vec<Condition>,
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
    fn a_v1_example_parses_with_defaults() {
        let yaml = "apiVersion: cnat.programming-kubernetes.info/v1\nkind: At\nmetadata:\n  name: example-at\nspec:\n  schedule: \"2019-04-12T10:12:00Z\"\n  run:\n    command: \"echo YAY\"\n";
        let at: At = serde_yaml_ng::from_str(yaml).unwrap();
        assert_eq!(at.spec, AtSpec::new("2019-04-12T10:12:00Z", "echo YAY"));
        assert_eq!(at.spec.run.image(), DEFAULT_IMAGE);
        assert_eq!(at.phase(), AtPhase::Pending);
        assert_eq!(at.pod_name(), "example-at-pod");
    }

    #[test]
    fn a_v1alpha1_object_is_refused_by_the_v1_type() {
        let err = serde_json::from_str::<At>(
            r#"{"apiVersion":"cnat.programming-kubernetes.info/v1alpha1","kind":"At","spec":{"schedule":"x","run":{"command":"y"}}}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("apiVersion"), "{err}");
    }

    #[test]
    fn the_books_form_reads_into_run_and_writes_back_as_it_came() {
        let json = serde_json::json!({"apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
            "metadata": {"name": "example-at"},
            "spec": {"schedule": "2019-04-12T10:12:00Z", "command": "echo YAY"}});
        let at: At = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(at.spec.run.command, "echo YAY");
        assert_eq!(at.spec.run.image(), DEFAULT_IMAGE);
        assert_eq!(at.spec.form, CommandForm::Book);
        assert_eq!(at.spec.command_field(), "spec.command");
        assert_eq!(at.spec, AtSpec::book("2019-04-12T10:12:00Z", "echo YAY"));
        assert_eq!(serde_json::to_value(&at).unwrap()["spec"], json["spec"]);

        // A book-form spec given an image (a v1 edit) is written in v1's form: the book's has
        // no place for it.
        let mut edited = at.clone();
        edited.spec.run.image = Some("alpine:3.20".into());
        assert_eq!(
            serde_json::to_value(&edited).unwrap()["spec"],
            serde_json::json!({"schedule": "2019-04-12T10:12:00Z", "run": {"command": "echo YAY", "image": "alpine:3.20"}})
        );
    }

    #[test]
    fn a_spec_without_a_command_decodes_with_an_empty_one() {
        let at: At = serde_json::from_value(
            serde_json::json!({"spec": {"schedule": "2019-04-12T10:12:00Z"}}),
        )
        .unwrap();
        assert_eq!(at.spec.run.command, "");
        assert_eq!(at.spec.command_field(), "spec.run.command");
    }

    #[test]
    fn every_field_round_trips_with_camel_case() {
        let at: At = round_trip(
            r#"{"apiVersion":"cnat.programming-kubernetes.info/v1","kind":"At","metadata":{"name":"a","namespace":"default"},"spec":{"schedule":"2019-04-12T10:12:00Z","run":{"command":"sleep 9","image":"alpine:3.20","activeDeadlineSeconds":5,"ttlSecondsAfterFinished":0}},"status":{"phase":"DONE","podName":"a-pod","startTime":"2019-04-12T10:12:00Z","completionTime":"2019-04-12T10:12:05Z","result":"DeadlineExceeded","message":"stopped","observedGeneration":1}}"#,
        );
        assert_eq!(at.spec.run.image(), "alpine:3.20");
        assert_eq!(at.spec.run.active_deadline_seconds, Some(5));
        assert_eq!(at.spec.run.ttl_seconds_after_finished, Some(0));
        assert_eq!(at.status.unwrap().result, Some(AtResult::DeadlineExceeded));
    }
}
