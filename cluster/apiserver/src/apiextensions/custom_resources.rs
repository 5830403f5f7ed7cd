//! Custom resources: what their CRD's version adds to the generic store's writes (kube's
//! `customResourceStrategy` in apiextensions-apiserver's `pkg/registry/customresource`): the
//! structural schema's defaults, pruning and validation ([`crate::apiextensions::schema`]) and the
//! `x-kubernetes-validations` CEL rules ([`crate::apiextensions::cel_rules`]).

use std::sync::Arc;

use serde_json::Value;

use crate::api::object_meta::meta_str;
use crate::api::status::ApiError;
use crate::apiextensions::cel_rules::{self, Validator};
use crate::apiextensions::schema;
use crate::registry::generic::dropped_fields;
use crate::registry::resources::ResourceDef;
use crate::registry::strategy::Strategy;

/// The strategy of one served version of a custom resource.
#[derive(Debug, Default)]
pub struct CustomResourceStrategy {
    /// The version's `x-kubernetes-validations`, compiled once per CRD generation.
    pub rules: Option<Arc<Validator>>,
}

impl Strategy for CustomResourceStrategy {
    fn validate(
        &self,
        def: &ResourceDef,
        obj: &mut Value,
        old: Option<&Value>,
        strict: bool,
    ) -> Result<(), ApiError> {
        validate_custom(def, self.rules.as_deref(), obj, old, strict)
    }
}

/// Defaults, prunes and validates a custom resource against its CRD's structural schema: schema
/// `default`s fill missing fields, unknown fields are dropped, and failures are a 422 Invalid with
/// one cause per failing field. With `fieldValidation=Strict` (what
/// kubectl sends by default) an unknown field is a 400 `strict decoding error` instead, as on
/// the real server. Then the CRD's CEL rules run ([`crate::apiextensions::cel_rules`]) with `old`, the stored
/// object on update; their failures join the schema's in the same 422.
fn validate_custom(
    def: &ResourceDef,
    rules: Option<&Validator>,
    obj: &mut Value,
    old: Option<&Value>,
    strict: bool,
) -> Result<(), ApiError> {
    let Some(schema) = def.custom.as_ref().and_then(|c| c.schema.as_ref()) else {
        return Ok(());
    };
    // apiVersion, kind and metadata are the server's, not the schema's.
    let mut body = obj.clone();
    if let Some(m) = body.as_object_mut() {
        m.remove("metadata");
        m.remove("apiVersion");
        m.remove("kind");
    }
    if strict {
        let mut pruned = body.clone();
        schema::prune(schema, &mut pruned);
        let mut dropped = vec![];
        dropped_fields(&body, &pruned, "", &mut dropped);
        if !dropped.is_empty() {
            let list: Vec<String> = dropped
                .iter()
                .map(|f| format!("unknown field \"{f}\""))
                .collect();
            return Err(ApiError::bad_request(format!(
                "strict decoding error: {}",
                list.join(", ")
            )));
        }
    }
    schema::apply_defaults(schema, &mut body);
    schema::prune(schema, &mut body);
    let mut errors = schema::validate(schema, &body);
    if let Some(rules) = rules {
        if cel_rules::has_blocking_error(&errors) {
            errors.push(cel_rules::rules_not_checked());
        } else {
            let mut whole = body.clone();
            for key in ["metadata", "apiVersion", "kind"] {
                if let (Some(w), Some(v)) = (whole.as_object_mut(), obj.get(key)) {
                    w.insert(key.to_owned(), v.clone());
                }
            }
            errors.extend(rules.validate(&whole, old));
        }
    }
    if !errors.is_empty() {
        let causes = errors
            .iter()
            .map(|e| {
                let c = e.to_cause();
                crate::api::status::Cause::new(
                    c.reason.as_deref().unwrap_or("FieldValueInvalid"),
                    c.field.as_deref().unwrap_or_default(),
                    c.message.unwrap_or_default(),
                )
            })
            .collect();
        return Err(ApiError::invalid(
            &def.kind,
            &def.group,
            meta_str(obj, "name"),
            causes,
        ));
    }
    if let (Some(pruned), Some(o)) = (body.as_object_mut(), obj.as_object_mut()) {
        for key in ["metadata", "apiVersion", "kind"] {
            if let Some(v) = o.remove(key) {
                pruned.insert(key.to_owned(), v);
            }
        }
        *o = std::mem::take(pruned);
    }
    Ok(())
}
