//! CustomResourceDefinitions: turning a stored CRD into served resources.
//!
//! In a real cluster, creating a CRD starts a small pipeline of controllers: the naming
//! controller accepts the names (`NamesAccepted=True`), the establishing controller marks the
//! CRD `Established=True`, and the discovery controller publishes the new resources; only then
//! do `kubectl get ats` and `kubectl apply -f at.yaml` work. This server runs those steps
//! **synchronously inside the create or update of the CRD**: the object the client gets back
//! already carries both conditions, its `acceptedNames` and `storedVersions`, and the custom
//! resources are routable and listed in discovery before the response is written. So
//! `kubectl wait --for condition=established` returns at once, and there is no window in which
//! the CRD exists but its resources 404.
//!
//! Each served version becomes one [`ResourceDef`] sharing the storage `<group>/<plural>`
//! (conversion strategy `None`: versions differ only in `apiVersion`; `Webhook`: objects are
//! converted between versions by the CRD's webhook, see [`crate::apiextensions::conversion`]). The definition carries the
//! version's schema (for validation and pruning), its printer columns (for `kubectl get`), its
//! `status` / `scale` subresources, its `selectableFields` and its CEL validation rules, compiled
//! here once per CRD write ([`crate::apiextensions::cel_rules`]; a rule that does not compile makes the CRD
//! invalid). A version marked `deprecated: true` answers every request with a
//! `Warning: 299 - "<deprecationWarning>"` header (default `<group>/<version> <Kind> is
//! deprecated`, as `customresource_handler.go` words it), which kubectl prints as
//! `Warning: ...`. Custom resources follow the CR
//! strategy: `generation` is tracked, updates need a `resourceVersion`, PUT never creates, and
//! strategic merge patch is refused with 415.
//!
//! Deleting a CRD deletes every custom resource stored under it (watchers see DELETED events)
//! and removes the definitions, so the URLs answer `404 page not found` again.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::api::object_meta::{self as meta, meta_str};
use crate::api::status::{ApiError, Cause};
use crate::apiextensions::custom_resources::CustomResourceStrategy;
use crate::registry::State;
use crate::registry::resources::StrategyRef;
use crate::registry::resources::{CustomInfo, ResourceDef, ScaleSpec, View};
use crate::registry::strategy::Strategy;

const CRD_KIND: &str = "CustomResourceDefinition";
const CRD_GROUP: &str = "apiextensions.k8s.io";

fn invalid(name: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid(CRD_KIND, CRD_GROUP, name, causes)
}

fn required(field: &str) -> Cause {
    Cause::new("FieldValueRequired", field, "Required value")
}

/// The resource definitions a CRD object describes, or 422 naming what is wrong with it: one
/// per served version, the storage version first (discovery lists the preferred first).
pub fn definitions(crd: &Value) -> Result<Vec<ResourceDef>, ApiError> {
    let mut crd = crd.clone();
    crate::apiextensions::conversion::set_defaults(&mut crd);
    let crd = &crd;
    let name = meta_str(crd, "name").to_owned();
    let causes = spec_causes(crd, &name);
    if !causes.is_empty() {
        return Err(invalid(&name, causes));
    }
    let versions = crd["spec"]["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut ordered: Vec<&Value> = versions
        .iter()
        .filter(|v| v["served"].as_bool() != Some(false))
        .collect();
    ordered.sort_by_key(|v| v["storage"].as_bool() != Some(true));
    let conversion = crate::apiextensions::conversion::WebhookConversion::of_crd(crd).map(Arc::new);
    let storage_version = ordered
        .first()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
        .unwrap_or_default()
        .to_owned();
    Ok(ordered
        .into_iter()
        .map(|v| {
            let mut d = version_definition(crd, &name, v);
            if let Some(c) = d.custom.as_mut() {
                c.storage_version = storage_version.clone();
                c.conversion = conversion.clone();
            }
            d
        })
        .collect())
}

/// What the real server's CRD validation would refuse in this CRD (named `name`): missing
/// group, plural, kind or versions, a name other than `<plural>.<group>`, an unknown scope,
/// not exactly one storage version, a version without a name, a schema that is not
/// structural. Empty when the CRD can be served.
fn spec_causes(crd: &Value, name: &str) -> Vec<Cause> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or_default();
    let kind = names["kind"].as_str().unwrap_or_default();
    let mut causes = vec![];
    if group.is_empty() {
        causes.push(required("spec.group"));
    }
    if plural.is_empty() {
        causes.push(required("spec.names.plural"));
    }
    if kind.is_empty() {
        causes.push(required("spec.names.kind"));
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    let scope = spec["scope"].as_str().unwrap_or_default();
    if scope != "Namespaced" && scope != "Cluster" {
        causes.push(Cause::new(
            "FieldValueNotSupported",
            "spec.scope",
            format!(
                "Unsupported value: \"{scope}\": supported values: \"Cluster\", \"Namespaced\""
            ),
        ));
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(required("spec.versions"));
    }
    causes.extend(crate::apiextensions::conversion::validate(spec));
    let storage_count = versions
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .count();
    if !versions.is_empty() && storage_count != 1 {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "spec.versions",
            format!(
                "Invalid value: {storage_count}: must have exactly one version marked as storage version"
            ),
        ));
    }
    causes.extend(rule_causes(&versions));
    for (i, v) in versions.iter().enumerate() {
        if v["name"].as_str().unwrap_or_default().is_empty() {
            causes.push(required(&format!("spec.versions[{i}].name")));
        }
        if let Some(schema) = v["schema"].get("openAPIV3Schema")
            && let Err(errs) = crate::apiextensions::schema::check_structural(schema)
        {
            for e in errs {
                let (path, message) = e.split_once(": ").unwrap_or(("", e.as_str()));
                let base = format!("spec.versions[{i}].schema.openAPIV3Schema");
                let field = if path.is_empty() {
                    base
                } else {
                    format!("{base}.{path}")
                };
                causes.push(Cause::new("FieldValueInvalid", &field, message));
            }
        }
    }
    causes
}

/// Why the CEL rules (`x-kubernetes-validations`) of these versions' schemas cannot be served.
/// Errors name the schema as the real server does after converting the CRD to its internal
/// form: `spec.validation.openAPIV3Schema` when every version has the same schema (reported
/// once), else `spec.versions[i].schema.openAPIV3Schema`.
fn rule_causes(versions: &[Value]) -> Vec<Cause> {
    let schemas: Vec<Option<&Value>> = versions
        .iter()
        .map(|v| v["schema"].get("openAPIV3Schema"))
        .collect();
    let shared = schemas.len() > 1 && schemas.iter().all(|s| *s == schemas[0]);
    let mut causes = vec![];
    for (i, schema) in schemas.iter().enumerate() {
        let Some(schema) = schema else { continue };
        let base = if shared || schemas.len() == 1 {
            "spec.validation.openAPIV3Schema".to_owned()
        } else {
            format!("spec.versions[{i}].schema.openAPIV3Schema")
        };
        if let Err(errs) = crate::apiextensions::cel_rules::compile(schema, &base) {
            causes.extend(errs);
        }
        if shared {
            break;
        }
    }
    causes
}

/// The definition of one served version `v` of a valid CRD named `crd_name`: the CRD's names
/// (singular defaulting to the lower-cased kind, list kind to `<Kind>List`), the version's
/// subresources, selectable fields, schema and printer columns, storage `<group>/<plural>`, and
/// the CR strategy (generation tracked, updates conditional, no strategic merge patch).
fn version_definition(crd: &Value, crd_name: &str, v: &Value) -> ResourceDef {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or_default();
    let kind = names["kind"].as_str().unwrap_or_default();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let singular = names["singular"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| kind.to_ascii_lowercase());
    let list_kind = names["listKind"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{kind}List"));
    let subs = &v["subresources"];
    let scale = subs.get("scale").map(|s| ScaleSpec {
        spec_replicas_path: s["specReplicasPath"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        status_replicas_path: s["statusReplicasPath"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        label_selector_path: s["labelSelectorPath"].as_str().map(str::to_owned),
    });
    ResourceDef {
        group: group.to_owned(),
        version: v["name"].as_str().unwrap_or_default().to_owned(),
        plural: plural.to_owned(),
        singular,
        kind: kind.to_owned(),
        list_kind,
        namespaced: spec["scope"].as_str() == Some("Namespaced"),
        short_names: strings(&names["shortNames"]),
        categories: strings(&names["categories"]),
        status_subresource: subs.get("status").is_some(),
        scale,
        tracks_generation: true,
        unconditional_update: false,
        create_on_update: false,
        return_deleted_object: false,
        strategic_merge: false,
        field_labels: v["selectableFields"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|f| f["jsonPath"].as_str())
                    .map(|p| p.trim_start_matches('.').to_owned())
                    .collect()
            })
            .unwrap_or_default(),
        storage: format!("{group}/{plural}"),
        view: View::Native,
        custom: Some(CustomInfo {
            schema: v["schema"].get("openAPIV3Schema").cloned(),
            printer_columns: v["additionalPrinterColumns"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
            selectable_fields: vec![],
            crd_name: crd_name.to_owned(),
            storage_version: String::new(),
            conversion: None,
            // apiextensions-apiserver's `customresource_handler.go`: a deprecated version
            // warns on every request, with its own text or the default one.
            deprecation_warning: (v["deprecated"].as_bool() == Some(true)).then(|| {
                v["deprecationWarning"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| {
                        format!(
                            "{group}/{} {} is deprecated",
                            v["name"].as_str().unwrap_or_default(),
                            names["kind"].as_str().unwrap_or_default()
                        )
                    })
            }),
        }),
        // Compiled once here, per CRD generation; `spec_causes` already refused rules that
        // do not compile, so an error cannot occur for a CRD that got this far.
        strategy: StrategyRef(Some(Arc::new(CustomResourceStrategy {
            rules: v["schema"]
                .get("openAPIV3Schema")
                .and_then(|s| {
                    crate::apiextensions::cel_rules::compile(s, "")
                        .ok()
                        .flatten()
                })
                .map(Arc::new),
        }))),
    }
}

/// Checks that a CRD's names do not collide with another resource of the same group.
fn check_conflicts(st: &State, crd_name: &str, defs: &[ResourceDef]) -> Result<(), ApiError> {
    for d in defs {
        let clash = st.registry.all().iter().any(|e| {
            e.group == d.group
                && e.custom.as_ref().is_none_or(|c| c.crd_name != crd_name)
                && (e.plural == d.plural || e.kind == d.kind)
        });
        if clash {
            return Err(invalid(
                crd_name,
                vec![Cause::new(
                    "FieldValueInvalid",
                    "spec.names.plural",
                    format!(
                        "Invalid value: \"{}\": the name or kind is already in use in group {}",
                        d.plural, d.group
                    ),
                )],
            ));
        }
    }
    Ok(())
}

/// Validates a CRD about to be stored, fills its status as the naming and establishing
/// controllers would, and (re)registers its resources. Runs under the store lock.
pub fn establish(st: &mut State, crd: &mut Value, dry_run: bool) -> Result<(), ApiError> {
    let defs = definitions(crd)?;
    let name = meta_str(crd, "name").to_owned();
    check_conflicts(st, &name, &defs)?;
    let now = meta::now_time();
    let names = crd["spec"]["names"].clone();
    let mut accepted = names.clone();
    if let Some(first) = defs.first() {
        accepted["singular"] = json!(first.singular);
        accepted["listKind"] = json!(first.list_kind);
    }
    let storage_version = crd["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["storage"].as_bool() == Some(true)))
        .and_then(|v| v["name"].as_str())
        .unwrap_or_default()
        .to_owned();
    let mut stored: Vec<String> = crd["status"]["storedVersions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if !stored.contains(&storage_version) {
        stored.push(storage_version);
    }
    // `ValidateCustomResourceDefinitionStoredVersions`: a version objects may still be stored
    // in cannot leave spec.versions (migrate the objects and drop it from storedVersions first).
    let declared: Vec<&str> = crd["spec"]["versions"]
        .as_array()
        .map(|vs| vs.iter().filter_map(|v| v["name"].as_str()).collect())
        .unwrap_or_default();
    let causes: Vec<Cause> = stored
        .iter()
        .enumerate()
        .filter(|(_, v)| !declared.contains(&v.as_str()))
        .map(|(i, v)| {
            Cause::new(
                "FieldValueInvalid",
                &format!("status.storedVersions[{i}]"),
                format!("Invalid value: {v:?}: must appear in spec.versions"),
            )
        })
        .collect();
    if !causes.is_empty() {
        return Err(invalid(&name, causes));
    }
    let keep_time = |ty: &str| -> String {
        crd["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == ty))
            .and_then(|c| c["lastTransitionTime"].as_str())
            .map(str::to_owned)
            .unwrap_or_else(|| now.clone())
    };
    let status = json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": keep_time("NamesAccepted"),
             "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": keep_time("Established"),
             "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}
        ],
        "acceptedNames": accepted,
        "storedVersions": stored,
    });
    if let Some(o) = crd.as_object_mut() {
        o.insert("status".into(), status);
    }
    crate::apiextensions::conversion::set_defaults(crd);
    if !dry_run {
        st.registry.remove_crd(&name);
        for d in defs {
            st.registry.upsert(Arc::new(d));
        }
    }
    Ok(())
}

/// Removes a CRD's resources: deletes every custom resource (recording DELETED events) and
/// unregisters the definitions. Runs under the store lock.
pub fn remove(st: &mut State, crd: &Value) {
    let name = meta_str(crd, "name").to_owned();
    let group = crd["spec"]["group"].as_str().unwrap_or_default();
    let plural = crd["spec"]["names"]["plural"].as_str().unwrap_or_default();
    st.delete_all(&format!("{group}/{plural}"));
    st.registry.remove_crd(&name);
}

/// Serves the CustomResourceDefinitions a data directory held again (the store calls this when
/// it opens one): each is established as if it had just been created; one that no longer
/// validates is logged and left unserved.
pub fn serve_stored(state: &mut State) {
    let crds: Vec<Value> = state.list(CRD_STORAGE, None).into_iter().cloned().collect();
    for mut crd in crds {
        if let Err(e) = establish(state, &mut crd, false) {
            tracing::warn!(crd = %crate::storage::store::key_of(&crd).1, error = ?e, "stored CustomResourceDefinition not served");
        }
    }
}

/// Where CustomResourceDefinitions are stored.
const CRD_STORAGE: &str = "apiextensions.k8s.io/customresourcedefinitions";

/// The strategy of `customresourcedefinitions` themselves: a CRD is established (validated
/// and its resources served) before it is stored, and its custom resources go when it goes.
#[derive(Debug, Default)]
pub struct CrdStrategy;

impl Strategy for CrdStrategy {
    /// Its store hooks read the stored objects: writes run under the lock.
    fn store_free_writes(&self) -> bool {
        false
    }

    fn before_store(&self, st: &mut State, obj: &mut Value, dry_run: bool) -> Result<(), ApiError> {
        establish(st, obj, dry_run)
    }

    fn after_remove(&self, st: &mut State, removed: &Value) {
        remove(st, removed);
    }
}

/// Plugs apiextensions into a resource table: CustomResourceDefinitions get [`CrdStrategy`]
/// (the table of built-ins serves them with the generic store's rules alone).
pub fn install(registry: &mut crate::registry::resources::Registry) {
    let strategy: Arc<dyn Strategy> = Arc::new(CrdStrategy);
    registry.set_strategy(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        strategy,
    );
}
