//! # `At`, in two API versions: [`v1alpha1`] (the book's) and [`v1`] (the storage version)
//!
//! `ats.cnat.programming-kubernetes.info` is served in two versions by one CRD:
//!
//! | version | served | storage | module | what it is |
//! |---|---|---|---|---|
//! | `v1` | yes | **yes** | [`v1`] | the current shape; what the controller reads and writes ([`At`] here and in [`crate::apis`]) |
//! | `v1alpha1` | yes, `deprecated: true` | no | [`v1alpha1`] | the book's shape, so its example applies as written |
//!
//! ## A plain install serves both: one schema, two forms of the command
//!
//! The base CRD (`kubectl apply -f artifacts/crds/`, what the book, `hack/minikube.sh` and the
//! README do) says `conversion: {strategy: None}`: no webhook, no cert-manager. Under `None` the
//! API server converts between versions by rewriting `apiVersion` alone, so Kubernetes requires
//! that every object valid in one served version be valid in every other (otherwise the book's
//! object, stored under `v1`'s name in `v1alpha1`'s shape, fails every typed read, every
//! `kubectl patch`, and the whole cache of a typed controller). The two versions here therefore
//! share one schema ([`v1alpha1::AtSpec`], and `v1`'s status):
//!
//! * `spec.command` (the book's field) and `spec.run` (`v1`'s, with `command`, `image` and the
//!   limits) are both accepted, exactly one of them: two CEL rules on the spec
//!   ([`v1alpha1::COMMAND_OR_RUN_RULE`], [`v1alpha1::NOT_BOTH_RULE`]). In `v1`, `spec.command`
//!   is the deprecated alias of `spec.run.command`;
//! * the controller reads either: [`v1::AtSpec`] decodes both forms into `run` (and writes an
//!   object back in the form it came in, [`v1::CommandForm`]);
//! * `status.result` has `DeadlineExceeded` in both.
//!
//! A test in `codegen` checks the rule for every CRD that ships with `None` and several versions:
//! the versions' schemas are the same but for descriptions. The alternatives were weighed:
//! keeping `v1alpha1` the storage version until the webhook is installed changes nothing (under
//! `None` the stored shape is whatever the client wrote, whatever the storage version), and
//! serving `v1alpha1` only with the webhook breaks the book's first command on a plain install.
//!
//! The **webhook overlay** (`artifacts/deploy/webhook/`) stays the clean upgrade path: with
//! `strategy: Webhook` the manager's `/convert` turns each object into its version's own form
//! (the book's `spec.command` in `v1alpha1`, `spec.run` in `v1`), below.
//!
//! ## Why a version bump
//!
//! The Kubernetes API change guidelines (`contributors/devel/sig-architecture/api_changes.md`)
//! allow adding an *optional* field within a version, but not moving one: a client that wrote
//! `spec.command` must be able to read `spec.command` back, for as long as the version is
//! served. `v1` restructures the spec, so it is a new version, and `v1alpha1` stays served
//! (deprecated, with a `deprecationWarning` every `kubectl` call prints) until no stored object
//! or client needs it. Every object round-trips through both versions without loss
//! ([`conversion`]), which the same guidelines require of any two versions of a kind.
//!
//! ## What changed, field by field
//!
//! | `v1alpha1` | `v1` | why |
//! |---|---|---|
//! | `spec.schedule` | `spec.schedule` | unchanged: *when* is the At's identity; frozen once it runs (a CEL rule in the v1 schema, below) |
//! | `spec.command` | `spec.run.command` | *what* runs is now a struct: the command no longer stands alone (API conventions: group related fields, leave room to grow without new top-level fields) |
//! | (the controller's hard-coded `busybox:1.36`) | `spec.run.image`, optional, defaulted to `busybox:1.36` by `/mutate-at` | the command needs tools busybox lacks; optional with a default keeps the book's example meaning what it meant (conventions: a new field is optional, and its default is the old behaviour) |
//! | (none: a hung command ran for ever) | `spec.run.activeDeadlineSeconds`, optional, ≥ 1 | a bound on how long the pod runs; the same name and meaning as `PodSpec.activeDeadlineSeconds` and `JobSpec.activeDeadlineSeconds`, and passed to the pod as is, so the kubelet enforces it |
//! | (none: finished pods stayed) | `spec.run.ttlSecondsAfterFinished`, optional, ≥ 0 | cleans up finished pods; the name and meaning of `JobSpec.ttlSecondsAfterFinished`, except that the At itself stays (its status is the record of what ran) and only its pod is deleted |
//! | `status.result`: `Succeeded`, `Failed` | adds `DeadlineExceeded` | a deadline is a third way to end, as for a Job's `DeadlineExceeded` condition reason; an enum gains a value only in a new version, since old clients may switch over it exhaustively |
//!
//! Integer durations in seconds, with the unit in the name, follow the API conventions
//! ("duration fields ... `fooSeconds`"); every new field is a pointer (`Option`), so "unset" is
//! distinct from zero (`ttlSecondsAfterFinished: 0` means "delete at once").
//!
//! ## How conversion works: hub and spoke
//!
//! The API server stores every At in the storage version (`v1`) and converts on every request
//! in another version, by calling the manager's `/convert` webhook with a `ConversionReview`
//! (`crate::webhooks::convert`). With *n* versions, converting each to each would be n² functions;
//! controller-runtime's `conversion.Hub` / `conversion.Convertible` instead make one version
//! the **hub** (here `v1`, the storage version) and every other a **spoke** that converts to and
//! from the hub only (`ConvertTo(hub)`, `ConvertFrom(hub)`): [`conversion::to_v1`] and
//! [`conversion::to_v1alpha1`]. A third version would add one spoke, not four functions.
//!
//! Because the spoke cannot hold everything the hub can, the spoke's conversion keeps the rest
//! in an annotation ([`conversion::ANNOTATION`]) and the way back removes it, as Kubernetes' own
//! `autoscaling/v1` HorizontalPodAutoscaler does for `v2` metrics. So a `v1alpha1` client that
//! reads an At, changes the command and writes it back does not erase the image a `v1` client
//! set.
//!
//! The base CRD (`artifacts/crds/`) says `conversion: {strategy: None}`, as kubebuilder
//! generates it, and works as it is (above); `artifacts/deploy/webhook/crd-conversion-patch.yaml`
//! (and, for the demo and the tests, [`crate::apis::crds::at_crd_with_conversion_webhook`])
//! switches it to `strategy: Webhook`, pointing at the manager's `/convert`. An object written
//! under `None` in the other version's form converts by its `apiVersion` alone
//! ([`conversion`]).
//!
//! ## Validation rules in the schema (CEL)
//!
//! Both schemas carry one `x-kubernetes-validations` rule at their root,
//! [`v1::SCHEDULE_FROZEN_RULE`], a *transition rule* (it reads `oldSelf`, so the API server
//! evaluates it only on updates): the schedule cannot change once the At has left `PENDING`.
//! Its `messageExpression` ([`v1::SCHEDULE_FROZEN_MESSAGE`]) names the phase and the old schedule.
//! The admission webhook (`/validate-at`) freezes the whole spec of a running At; the rule holds
//! the schedule even where no webhook is installed.

pub mod conversion;
pub mod v1;
pub mod v1alpha1;

pub use v1::{At, AtPhase, AtResult, AtRun, AtSpec, AtStatus, CommandForm, DEFAULT_IMAGE};
