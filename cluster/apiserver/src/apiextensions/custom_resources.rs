//! Custom resources: what their CRD's version adds to the generic store's writes (kube's
//! `customResourceStrategy` in apiextensions-apiserver's `pkg/registry/customresource`): the
//! structural schema's defaults, pruning and validation ([`crate::apiextensions::schema`]) and the
//! `x-kubernetes-validations` CEL rules ([`crate::apiextensions::cel_rules`]).

use std::sync::Arc;

use serde_json::Value;

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
    let Some(fields) = obj.as_object_mut() else {
        // Not an object: the schema says what is wrong with it.
        let body = obj.clone();
        return check_body(
            def,
            schema,
            rules,
            body,
            old,
            strict,
            &mut serde_json::Map::new(),
        )
        .1;
    };
    // apiVersion, kind and metadata are the server's, not the schema's: moved out while the
    // schema's defaults, pruning and validation run on the rest, and back in after.
    let mut server = serde_json::Map::new();
    for key in ["metadata", "apiVersion", "kind"] {
        if let Some(v) = fields.remove(key) {
            server.insert(key.to_owned(), v);
        }
    }
    let body = Value::Object(std::mem::take(fields));
    let checked = check_body(def, schema, rules, body, old, strict, &mut server);
    let Some(fields) = obj.as_object_mut() else {
        return checked.1;
    };
    let (mut body, result) = checked;
    if let Some(b) = body.as_object_mut() {
        *fields = std::mem::take(b);
    }
    fields.extend(server);
    result
}

/// The schema's part of [`validate_custom`] on `body` (the object without the server's
/// fields, which `server` holds): the body (defaulted and pruned when it passed) and the
/// verdict. The CEL rules see the server's fields too (`self.metadata.name`): they
/// are lent to the body for the rules and taken back.
fn check_body(
    def: &ResourceDef,
    schema: &Value,
    rules: Option<&Validator>,
    mut body: Value,
    old: Option<&Value>,
    strict: bool,
    server: &mut serde_json::Map<String, Value>,
) -> (Value, Result<(), ApiError>) {
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
            let e = ApiError::bad_request(format!("strict decoding error: {}", list.join(", ")));
            return (body, Err(e));
        }
    }
    schema::apply_defaults(schema, &mut body);
    schema::prune(schema, &mut body);
    let mut errors = schema::validate(schema, &body);
    if let Some(rules) = rules {
        if cel_rules::has_blocking_error(&errors) {
            errors.push(cel_rules::rules_not_checked());
        } else if let Some(b) = body.as_object_mut() {
            let lent: Vec<String> = server.keys().cloned().collect();
            b.extend(std::mem::take(server));
            errors.extend(rules.validate(&body, old));
            if let Some(b) = body.as_object_mut() {
                for key in lent {
                    if let Some(v) = b.remove(&key) {
                        server.insert(key, v);
                    }
                }
            }
        } else {
            errors.extend(rules.validate(&body, old));
        }
    }
    if errors.is_empty() {
        return (body, Ok(()));
    }
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
    let name = server
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let e = ApiError::invalid(&def.kind, &def.group, name, causes);
    (body, Err(e))
}
