//! OpenAPI v3 documents: what `kubectl apply -f` and `kubectl create -f` download before they write.
//!
//! kubectl validates manifests by default (`--validate=strict`). Before sending anything it reads
//! `GET /openapi/v3`, an index of one document per group-version, then fetches the document of
//! the object's group-version and looks for a PATCH operation tagged with the object's
//! `x-kubernetes-group-version-kind` whose (inline) parameters include `fieldValidation`. If it
//! finds one, kubectl leaves validation to the server (`?fieldValidation=Strict`) and needs
//! nothing else from the document. If the index or the document is missing, kubectl fails with
//! `error validating data: failed to download openapi`. That query-parameter check
//! (`QueryParamVerifierV3`) is the whole contract this module serves:
//!
//! - [`v3_index`] builds the index: `{"paths": {"api/v1": {"serverRelativeURL":
//!   "/openapi/v3/api/v1?hash=<h>"}, "apis/apps/v1": {...}}}` (kube-openapi's
//!   `OpenAPIV3Discovery`). The hash lets clients cache a document forever; it must change when
//!   the document does, so the caller passes a `base` fingerprint (e.g. the resourceVersion of
//!   the last CRD change) that is mixed into every hash.
//! - [`gv_document`] builds one group-version's OpenAPI 3.0 document: a path per collection,
//!   object and subresource, with the verbs, their parameters (`fieldValidation`, `fieldManager`,
//!   `dryRun`, `force` on PATCH) and `x-kubernetes-group-version-kind`/`x-kubernetes-action`
//!   extensions, and `components.schemas` named like the real server's definitions
//!   ([`schema_name`]: `io.k8s.api.core.v1.Pod`, `io.k8s.api.apps.v1.Deployment`,
//!   `info.programming-kubernetes.cnat.v1alpha1.At` — the CRD group's domain reversed).
//!
//! # Schemas
//!
//! Custom resources get their CRD's `openAPIV3Schema`, with `metadata` pointing at `ObjectMeta`
//! and `apiVersion`/`kind` described, as the real server publishes them. Built-in kinds get a
//! **permissive schema** (`type: object` with `x-kubernetes-preserve-unknown-fields: true`):
//! this crate serves built-ins as JSON through `k8s-openapi` types, which carry no schemas, and
//! kubectl never reads the schemas when the server validates. The PATCH operations deliberately
//! do **not** list `application/strategic-merge-patch+json` in their request bodies: kubectl
//! would then try to compute strategic merge patches from these (merge-key-less) schemas and
//! warn `error calculating patch from openapi v3 spec`; without it, kubectl uses its compiled-in
//! types for built-ins and JSON merge patch for custom resources, exactly as against a real
//! server. What is lost: `kubectl explain` on built-in kinds shows no fields.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use serde_json::{Map, Value, json};

/// One kind served in a group-version, as the OpenAPI document describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenApiKind {
    /// API group; `""` for the core group.
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Resource name (plural), e.g. `pods`.
    pub plural: String,
    /// Namespaced (`true`) or cluster-scoped.
    pub namespaced: bool,
    /// The kind's OpenAPI v3 schema; `Value::Null` means "use the permissive schema".
    pub schema: Value,
    /// Subresources served (`status`, `scale`).
    pub subresources: Vec<String>,
}

impl OpenApiKind {
    /// A built-in kind with the permissive schema.
    #[cfg(test)]
    pub fn builtin(
        group: &str,
        version: &str,
        kind: &str,
        plural: &str,
        namespaced: bool,
        subresources: &[&str],
    ) -> Self {
        OpenApiKind {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            namespaced,
            schema: Value::Null,
            subresources: subresources.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// The definition name the real server uses for a kind: `io.k8s.api.<group>.<version>.<Kind>`
/// for built-in groups (core is `core`, `*.k8s.io` groups use their first label),
/// `io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.<version>.<Kind>` for CRDs
/// themselves, and the reversed group domain for custom resources
/// (`cnat.programming-kubernetes.info` → `info.programming-kubernetes.cnat.v1alpha1.At`).
pub fn schema_name(group: &str, version: &str, kind: &str) -> String {
    match group {
        "" => format!("io.k8s.api.core.{version}.{kind}"),
        "apiextensions.k8s.io" => {
            format!("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{version}.{kind}")
        }
        "apiregistration.k8s.io" => {
            format!("io.k8s.kube-aggregator.pkg.apis.apiregistration.{version}.{kind}")
        }
        g if !g.contains('.') => format!("io.k8s.api.{g}.{version}.{kind}"),
        g if g.ends_with(".k8s.io") => {
            let first = g.split('.').next().unwrap_or(g);
            format!("io.k8s.api.{first}.{version}.{kind}")
        }
        g => {
            let reversed: Vec<&str> = g.split('.').rev().collect();
            format!("{}.{version}.{kind}", reversed.join("."))
        }
    }
}

/// The index key of a group-version: `api/v1` for the core group, `apis/<g>/<v>` otherwise.
pub fn gv_path(gv: &str) -> String {
    if gv.contains('/') {
        format!("apis/{gv}")
    } else {
        format!("api/{gv}")
    }
}

/// A short, stable hash (hex) of `parts`, used for `?hash=` values.
pub fn content_hash(parts: &[&str]) -> String {
    let mut h = DefaultHasher::new();
    for p in parts {
        p.hash(&mut h);
    }
    format!("{:016X}", h.finish())
}

/// The `/openapi/v3` index for these group-versions (`"v1"`, `"apps/v1"`, ...). `base` is mixed
/// into every hash: pass a value that changes whenever any document changes.
pub fn v3_index(group_versions: &[String], base: &str) -> Value {
    let mut paths = Map::new();
    for gv in group_versions {
        let key = gv_path(gv);
        let hash = content_hash(&[base, gv]);
        paths.insert(
            key.clone(),
            json!({ "serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}") }),
        );
    }
    json!({ "paths": paths })
}

fn permissive() -> Value {
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn gvk_ext(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

fn query_param(name: &str, description: &str, type_: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": type_, "uniqueItems": true}})
}

fn write_params(patch: bool) -> Vec<Value> {
    let mut params = vec![
        query_param(
            "dryRun",
            "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
            "string",
        ),
        query_param(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.",
            "string",
        ),
        query_param(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict",
            "string",
        ),
    ];
    if patch {
        params.push(query_param(
            "force",
            "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.",
            "boolean",
        ));
    }
    params
}

fn list_params() -> Vec<Value> {
    [
        ("allowWatchBookmarks", "boolean"),
        ("continue", "string"),
        ("fieldSelector", "string"),
        ("labelSelector", "string"),
        ("limit", "integer"),
        ("resourceVersion", "string"),
        ("resourceVersionMatch", "string"),
        ("sendInitialEvents", "boolean"),
        ("timeoutSeconds", "integer"),
        ("watch", "boolean"),
    ]
    .iter()
    .map(|(n, t)| query_param(n, n, t))
    .collect()
}

fn ok_response(schema: &str, codes: &[&str]) -> Value {
    let mut responses = Map::new();
    for code in codes {
        responses.insert(
            code.to_string(),
            json!({
                "description": if *code == "201" { "Created" } else if *code == "202" { "Accepted" } else { "OK" },
                "content": {
                    "application/json": {"schema": schema_ref(schema)},
                    "application/yaml": {"schema": schema_ref(schema)}
                }
            }),
        );
    }
    responses.insert("401".into(), json!({"description": "Unauthorized"}));
    Value::Object(responses)
}

fn operation(
    action: &str,
    description: String,
    op_id: String,
    gvk: &Value,
    params: Vec<Value>,
    responses: Value,
) -> Value {
    json!({
        "tags": [],
        "description": description,
        "operationId": op_id,
        "parameters": params,
        "responses": responses,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
    })
}

fn body(schema: &str) -> Value {
    json!({"content": {"*/*": {"schema": schema_ref(schema)}}, "required": true})
}

/// The request body of a PATCH: JSON patch, merge patch and apply (see the module docs for why
/// strategic merge patch is not listed).
fn patch_body() -> Value {
    let patch = schema_ref("io.k8s.apimachinery.pkg.apis.meta.v1.Patch");
    json!({"content": {
        "application/apply-patch+yaml": {"schema": patch},
        "application/json-patch+json": {"schema": patch},
        "application/merge-patch+json": {"schema": patch}
    }, "required": true})
}

fn camel(s: &str) -> String {
    s.split(['.', '-'])
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

/// The object schema published for a kind (CRD schema with metadata/apiVersion/kind filled in,
/// or the permissive schema), carrying `x-kubernetes-group-version-kind`.
fn object_schema(k: &OpenApiKind) -> Value {
    let mut schema = if k.schema.is_object() {
        k.schema.clone()
    } else {
        permissive()
    };
    if let Value::Object(map) = &mut schema {
        if k.schema.is_object() {
            let props = map.entry("properties").or_insert_with(|| json!({}));
            if let Value::Object(props) = props {
                props.insert(
                    "apiVersion".into(),
                    json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
                );
                props.insert(
                    "kind".into(),
                    json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
                );
                props.insert(
                    "metadata".into(),
                    json!({"allOf": [schema_ref("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")], "default": {}}),
                );
            }
            map.entry("type").or_insert_with(|| json!("object"));
        }
        map.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([gvk_ext(&k.group, &k.version, &k.kind)]),
        );
    }
    schema
}

/// The OpenAPI 3.0 document of one group-version (`"v1"`, `"apps/v1"`, ...) serving `kinds`:
/// the shared `meta.k8s.io` schemas, then for each kind its object and list schemas and its
/// paths (the collection, the all-namespaces list of a namespaced kind, the object, and one
/// path per subresource), with operation ids named as the real server names them
/// (`listCoreV1NamespacedPod`, `readAppsV1NamespacedDeploymentScale`).
pub fn gv_document(gv: &str, kinds: &[OpenApiKind]) -> Value {
    let prefix = format!("/{}", gv_path(gv));
    let mut paths = Map::new();
    let mut schemas = meta_schemas();
    for k in kinds {
        let ops = KindPaths::new(k, &prefix);
        schemas.insert(ops.name.clone(), object_schema(k));
        schemas.insert(ops.list_name.clone(), list_schema(k, &ops.name));
        paths.insert(ops.collection.clone(), ops.collection_item());
        if k.namespaced {
            paths.insert(format!("{prefix}/{}", k.plural), ops.all_namespaces_item());
        }
        paths.insert(
            format!("{}/{{name}}", ops.collection),
            ops.object_item("", &ops.name, &ops.gvk, ""),
        );
        for sub in &k.subresources {
            let (schema, op_gvk) = if sub == "scale" {
                let scale = schema_name("autoscaling", "v1", "Scale");
                schemas.entry(scale.clone()).or_insert_with(|| {
                    let mut s = permissive();
                    s["x-kubernetes-group-version-kind"] =
                        json!([gvk_ext("autoscaling", "v1", "Scale")]);
                    s
                });
                (scale, gvk_ext("autoscaling", "v1", "Scale"))
            } else {
                (ops.name.clone(), ops.gvk.clone())
            };
            paths.insert(
                format!("{}/{{name}}/{sub}", ops.collection),
                ops.object_item(sub, &schema, &op_gvk, &camel(sub)),
            );
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// The `meta.k8s.io/v1` schemas every group-version document refers to (`ObjectMeta`,
/// `ListMeta`, `Status`, `DeleteOptions`, `Patch`), permissive.
fn meta_schemas() -> Map<String, Value> {
    let mut schemas = Map::new();
    for name in ["ObjectMeta", "ListMeta", "Status", "DeleteOptions"] {
        schemas.insert(
            format!("io.k8s.apimachinery.pkg.apis.meta.v1.{name}"),
            permissive(),
        );
    }
    schemas.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.Patch".into(),
        json!({"type": "object", "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body."}),
    );
    schemas
}

/// The `<Kind>List` schema: `items` of the kind's schema `name`, and `ListMeta`.
fn list_schema(k: &OpenApiKind, name: &str) -> Value {
    json!({
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "items": {"type": "array", "items": schema_ref(name)},
            "metadata": {"allOf": [schema_ref("io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta")], "default": {}}
        },
        "x-kubernetes-group-version-kind": [gvk_ext(&k.group, &k.version, &format!("{}List", k.kind))]
    })
}

/// What the path items of one kind share: its schema names, its group-version-kind extension,
/// the operation-id parts, its collection path and the path parameters.
struct KindPaths<'a> {
    /// The kind's names (`kind`, `plural`, scope).
    k: &'a OpenApiKind,
    /// The kind's schema name (`io.k8s.api.core.v1.Pod`).
    name: String,
    /// Its list's schema name (`...PodList`).
    list_name: String,
    /// `x-kubernetes-group-version-kind` of the kind.
    gvk: Value,
    /// The operation-id infix: the group and version in camel case (`CoreV1`, `AppsV1`).
    id_base: String,
    /// `Namespaced` in operation ids of namespaced kinds, empty otherwise.
    scope: &'static str,
    /// The collection path (`/api/v1/namespaces/{namespace}/pods`).
    collection: String,
    /// The path parameters of every path of the kind: `namespace` (namespaced kinds), `pretty`.
    path_params: Vec<Value>,
}

impl<'a> KindPaths<'a> {
    fn new(k: &'a OpenApiKind, prefix: &str) -> Self {
        let name = schema_name(&k.group, &k.version, &k.kind);
        let mut path_params = Vec::new();
        if k.namespaced {
            path_params.push(json!({"name": "namespace", "in": "path", "description": "object name and auth scope, such as for teams and projects", "required": true, "schema": {"type": "string", "uniqueItems": true}}));
        }
        path_params.push(query_param(
            "pretty",
            "If 'true', then the output is pretty printed.",
            "string",
        ));
        KindPaths {
            k,
            list_name: format!("{name}List"),
            name,
            gvk: gvk_ext(&k.group, &k.version, &k.kind),
            id_base: format!(
                "{}{}",
                camel(if k.group.is_empty() { "core" } else { &k.group }),
                camel(&k.version)
            ),
            scope: if k.namespaced { "Namespaced" } else { "" },
            collection: if k.namespaced {
                format!("{prefix}/namespaces/{{namespace}}/{}", k.plural)
            } else {
                format!("{prefix}/{}", k.plural)
            },
            path_params,
        }
    }

    /// The collection's path item: `list` (and watch), `create`, `deletecollection`.
    fn collection_item(&self) -> Value {
        let KindPaths {
            id_base,
            scope,
            gvk,
            name,
            list_name,
            ..
        } = self;
        let kind = &self.k.kind;
        json!({
            "get": operation("list", format!("list or watch objects of kind {kind}"), format!("list{id_base}{scope}{kind}"), gvk, list_params(), ok_response(list_name, &["200"])),
            "post": {
                "requestBody": body(name),
                "description": format!("create a {kind}"),
                "operationId": format!("create{id_base}{scope}{kind}"),
                "parameters": write_params(false),
                "responses": ok_response(name, &["200", "201", "202"]),
                "x-kubernetes-action": "post",
                "x-kubernetes-group-version-kind": gvk,
            },
            "delete": operation("deletecollection", format!("delete collection of {kind}"), format!("deletecollection{id_base}{scope}{kind}"), gvk, list_params(), ok_response("io.k8s.apimachinery.pkg.apis.meta.v1.Status", &["200"])),
            "parameters": self.path_params,
        })
    }

    /// The all-namespaces list of a namespaced kind (`/api/v1/pods`): `list` only.
    fn all_namespaces_item(&self) -> Value {
        let KindPaths {
            id_base,
            gvk,
            list_name,
            ..
        } = self;
        let kind = &self.k.kind;
        json!({
            "get": operation("list", format!("list or watch objects of kind {kind}"), format!("list{id_base}{kind}ForAllNamespaces"), gvk, list_params(), ok_response(list_name, &["200"])),
        })
    }

    /// The path item of the object (`sub` empty: `get`, `put`, `patch`, `delete`) or of one of
    /// its subresources (`get`, `put`, `patch` of `schema`, named with `sub_name`).
    fn object_item(&self, sub: &str, schema: &str, op_gvk: &Value, sub_name: &str) -> Value {
        let KindPaths { id_base, scope, .. } = self;
        let kind = &self.k.kind;
        let mut object_params = vec![
            json!({"name": "name", "in": "path", "description": format!("name of the {kind}"), "required": true, "schema": {"type": "string", "uniqueItems": true}}),
        ];
        object_params.extend(self.path_params.iter().cloned());
        let what = if sub.is_empty() {
            kind.to_string()
        } else {
            format!("{sub} of the specified {kind}")
        };
        let mut ops = json!({
            "get": operation("get", format!("read the specified {what}"), format!("read{id_base}{scope}{kind}{sub_name}"), op_gvk, vec![], ok_response(schema, &["200"])),
            "put": {
                "requestBody": body(schema),
                "description": format!("replace the specified {what}"),
                "operationId": format!("replace{id_base}{scope}{kind}{sub_name}"),
                "parameters": write_params(false),
                "responses": ok_response(schema, &["200", "201"]),
                "x-kubernetes-action": "put",
                "x-kubernetes-group-version-kind": op_gvk,
            },
            "patch": {
                "requestBody": patch_body(),
                "description": format!("partially update the specified {what}"),
                "operationId": format!("patch{id_base}{scope}{kind}{sub_name}"),
                "parameters": write_params(true),
                "responses": ok_response(schema, &["200", "201"]),
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": op_gvk,
            },
            "parameters": object_params,
        });
        if sub.is_empty() {
            ops["delete"] = operation(
                "delete",
                format!("delete a {kind}"),
                format!("delete{id_base}{scope}{kind}"),
                op_gvk,
                vec![
                    query_param("dryRun", "dryRun", "string"),
                    query_param("gracePeriodSeconds", "gracePeriodSeconds", "integer"),
                    query_param("propagationPolicy", "propagationPolicy", "string"),
                ],
                ok_response(
                    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
                    &["200", "202"],
                ),
            );
        }
        ops
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_kind() -> OpenApiKind {
        OpenApiKind {
            group: "cnat.programming-kubernetes.info".into(),
            version: "v1alpha1".into(),
            kind: "At".into(),
            plural: "ats".into(),
            namespaced: true,
            schema: json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"schedule": {"type": "string"}}}}}),
            subresources: vec!["status".into()],
        }
    }

    #[test]
    fn schema_names_follow_the_real_server() {
        assert_eq!(schema_name("", "v1", "Pod"), "io.k8s.api.core.v1.Pod");
        assert_eq!(
            schema_name("apps", "v1", "Deployment"),
            "io.k8s.api.apps.v1.Deployment"
        );
        assert_eq!(
            schema_name("coordination.k8s.io", "v1", "Lease"),
            "io.k8s.api.coordination.v1.Lease"
        );
        assert_eq!(
            schema_name("events.k8s.io", "v1", "Event"),
            "io.k8s.api.events.v1.Event"
        );
        assert_eq!(
            schema_name("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition"
        );
        assert_eq!(
            schema_name("cnat.programming-kubernetes.info", "v1alpha1", "At"),
            "info.programming-kubernetes.cnat.v1alpha1.At"
        );
    }

    #[test]
    fn index_lists_every_group_version_with_a_hash() {
        let idx = v3_index(&["v1".into(), "apps/v1".into()], "rv-1");
        let core = idx["paths"]["api/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        let apps = idx["paths"]["apis/apps/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        assert!(core.starts_with("/openapi/v3/api/v1?hash="), "{core}");
        assert!(apps.starts_with("/openapi/v3/apis/apps/v1?hash="), "{apps}");
        let again = v3_index(&["v1".into()], "rv-2");
        assert_ne!(
            again["paths"]["api/v1"]["serverRelativeURL"]
                .as_str()
                .unwrap(),
            core,
            "hash follows base"
        );
        let same = v3_index(&["v1".into()], "rv-1");
        assert_eq!(
            same["paths"]["api/v1"]["serverRelativeURL"]
                .as_str()
                .unwrap(),
            core
        );
    }

    /// The check kubectl's `QueryParamVerifierV3` performs: some PATCH operation tagged with the
    /// GVK lists `fieldValidation` among its own parameters.
    fn kubectl_would_use_server_validation(
        doc: &Value,
        group: &str,
        version: &str,
        kind: &str,
    ) -> bool {
        doc["paths"].as_object().unwrap().values().any(|p| {
            let Some(op) = p.get("patch") else {
                return false;
            };
            op["x-kubernetes-group-version-kind"] == gvk_ext(group, version, kind)
                && op["parameters"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|param| param["name"] == "fieldValidation")
        })
    }

    #[test]
    fn crd_document() {
        let doc = gv_document("cnat.programming-kubernetes.info/v1alpha1", &[at_kind()]);
        assert_eq!(doc["openapi"], "3.0.0");
        assert!(kubectl_would_use_server_validation(
            &doc,
            "cnat.programming-kubernetes.info",
            "v1alpha1",
            "At"
        ));
        let paths = doc["paths"].as_object().unwrap();
        for p in [
            "/apis/cnat.programming-kubernetes.info/v1alpha1/namespaces/{namespace}/ats",
            "/apis/cnat.programming-kubernetes.info/v1alpha1/namespaces/{namespace}/ats/{name}",
            "/apis/cnat.programming-kubernetes.info/v1alpha1/namespaces/{namespace}/ats/{name}/status",
            "/apis/cnat.programming-kubernetes.info/v1alpha1/ats",
        ] {
            assert!(paths.contains_key(p), "missing {p}");
        }
        let object = &paths["/apis/cnat.programming-kubernetes.info/v1alpha1/namespaces/{namespace}/ats/{name}"];
        let content = object["patch"]["requestBody"]["content"]
            .as_object()
            .unwrap();
        assert!(content.contains_key("application/merge-patch+json"));
        assert!(!content.contains_key("application/strategic-merge-patch+json"));
        assert_eq!(
            object["patch"]["operationId"],
            "patchCnatProgrammingKubernetesInfoV1alpha1NamespacedAt"
        );
        let schema = &doc["components"]["schemas"]["info.programming-kubernetes.cnat.v1alpha1.At"];
        assert_eq!(
            schema["properties"]["spec"]["properties"]["schedule"]["type"],
            "string"
        );
        assert_eq!(
            schema["properties"]["metadata"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        assert_eq!(schema["x-kubernetes-group-version-kind"][0]["kind"], "At");
        assert_eq!(
            doc["components"]["schemas"]["info.programming-kubernetes.cnat.v1alpha1.AtList"]["x-kubernetes-group-version-kind"]
                [0]["kind"],
            "AtList"
        );
        // Every $ref resolves inside the document.
        let text = doc.to_string();
        for piece in text.split("#/components/schemas/").skip(1) {
            let name = &piece[..piece.find('"').unwrap()];
            assert!(
                doc["components"]["schemas"].get(name).is_some(),
                "dangling $ref {name}"
            );
        }
    }

    #[test]
    fn builtin_documents_are_permissive() {
        let doc = gv_document(
            "v1",
            &[
                OpenApiKind::builtin("", "v1", "Namespace", "namespaces", false, &["status"]),
                OpenApiKind::builtin("", "v1", "ConfigMap", "configmaps", true, &[]),
            ],
        );
        assert!(kubectl_would_use_server_validation(
            &doc,
            "",
            "v1",
            "ConfigMap"
        ));
        assert!(kubectl_would_use_server_validation(
            &doc,
            "",
            "v1",
            "Namespace"
        ));
        assert!(!kubectl_would_use_server_validation(&doc, "", "v1", "Pod"));
        assert!(doc["paths"].get("/api/v1/namespaces/{name}").is_some());
        assert!(
            doc["paths"]
                .get("/api/v1/namespaces/{namespace}/configmaps/{name}")
                .is_some()
        );
        let cm = &doc["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"];
        assert_eq!(cm["type"], "object");
        assert_eq!(cm["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(
            cm["x-kubernetes-group-version-kind"][0],
            json!({"group": "", "version": "v1", "kind": "ConfigMap"})
        );
    }

    #[test]
    fn scale_subresource_is_autoscaling_scale() {
        let doc = gv_document(
            "apps/v1",
            &[OpenApiKind::builtin(
                "apps",
                "v1",
                "Deployment",
                "deployments",
                true,
                &["status", "scale"],
            )],
        );
        let scale =
            &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]["patch"];
        assert_eq!(
            scale["x-kubernetes-group-version-kind"],
            json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
        );
        assert!(
            doc["components"]["schemas"]
                .get("io.k8s.api.autoscaling.v1.Scale")
                .is_some()
        );
    }
}
