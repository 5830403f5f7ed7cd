//! # CustomResourceDefinitions (apiextensions-apiserver)
//!
//! kube-apiserver serves CRDs through an aggregated server of its own,
//! `apiextensions-apiserver`: it stores CustomResourceDefinitions, checks that each version's
//! `openAPIV3Schema` is *structural* (every field typed, no free-form `anyOf` at the top), and
//! serves each CRD's custom resources the moment it is established, pruning the fields a
//! schema does not describe, applying its defaults, validating against it, then evaluating its
//! CEL rules (`x-kubernetes-validations`), and converting between served versions through the
//! CRD's conversion webhook. This server does the same, in process, inside the one server.
//!
//! ## Checking a schema offline
//!
//! The three functions of this module run the server's own schema code on a schema and an
//! object, without a server: a project that generates its CRDs from types (as `codegen/` does
//! here) can test its examples and its controllers' statuses against what the server will
//! answer, field error for field error.
//!
//! ```
//! use serde_json::json;
//!
//! let schema = json!({"type": "object", "properties": {"spec": {
//!     "type": "object", "required": ["command"],
//!     "properties": {"command": {"type": "string"}}}}});
//! assert_eq!(embedded_apiserver::apiextensions::check_structural(&schema), Ok(()));
//! let errors = embedded_apiserver::apiextensions::validate(&schema, &json!({"spec": {}}));
//! assert_eq!(errors, Ok(vec!["spec.command: Required value".to_owned()]));
//! ```
//!
//! Where it departs from Kubernetes: one schema code for every served version (no per-version
//! validators cached across CRD updates), and CEL's cost limits are checked with this server's
//! own estimator, which follows kube's limits but not its exact arithmetic.

pub(crate) mod cel_rules;
pub(crate) mod conversion;
pub(crate) mod crd;
pub(crate) mod custom_resources;
pub(crate) mod schema;

use serde_json::Value;

/// Whether `schema` (a CRD version's `openAPIV3Schema`) is structural, as the server requires
/// before it accepts the CRD: `Err` holds each violation, as the server words it.
pub fn check_structural(schema: &Value) -> Result<(), Vec<String>> {
    schema::check_structural(schema)
}

/// Removes from `object` every field `schema` does not describe (and does not preserve with
/// `x-kubernetes-preserve-unknown-fields`), as the server prunes a custom resource before it
/// stores it.
pub fn prune(schema: &Value, object: &mut Value) {
    schema::prune(schema, object);
}

/// What the server reports for `object` on create: the schema's field errors
/// (`spec.command: Required value`), then, when the schema passes, the errors of its
/// `x-kubernetes-validations` rules; empty when the object is valid. `Err` holds the rules'
/// compile errors (`field: message`), for which the server would refuse the CRD itself.
pub fn validate(schema: &Value, object: &Value) -> Result<Vec<String>, Vec<String>> {
    let mut errors: Vec<String> = schema::validate(schema, object)
        .iter()
        .map(|e| e.message())
        .collect();
    if errors.is_empty() {
        let rules = cel_rules::compile(schema, "").map_err(|causes| {
            causes
                .iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect::<Vec<_>>()
        })?;
        if let Some(rules) = rules {
            errors.extend(rules.validate(object, None).iter().map(|e| e.message()));
        }
    }
    Ok(errors)
}
