//! The OpenAPI v2 document kubectl 1.27 and 1.28 need before `apply -f` and `create -f`.
//!
//! kubectl up to 1.28 checks server-side field validation against `GET /openapi/v2` instead of
//! `/openapi/v3` (the v3 verifier arrived in 1.29). It asks for the **protobuf** form
//! (`Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, the gnostic
//! `openapi.v2.Document` message) and, if that fails, tries the old `/swagger-2.0.0.pb-v1`; when
//! both fail it stops with `error validating data: failed to download openapi`. The check it
//! performs (`QueryParamVerifier.HasSupport`) is the same as in v3: some PATCH operation carries
//! the vendor extension `x-kubernetes-group-version-kind` (its YAML value is parsed) and a query
//! parameter named `fieldValidation`. For a custom resource whose kind is not found it
//! substitutes core/v1 Namespace, as in v3.
//!
//! So the document served here lists, for every kind, the object path with a PATCH operation and
//! its parameters, and nothing else: no definitions. That is deliberate. kubectl 1.28 also looks
//! the kind up among the definitions to compute strategic merge patches; finding none, it
//! quietly uses its compiled-in types (built-ins) or JSON merge patch (custom resources), which
//! is correct, whereas permissive definitions would make it warn `error calculating patch from
//! openapi spec`.
//!
//! [`v2_document`] gives the JSON form (`Accept: application/json`), [`v2_document_protobuf`]
//! the encoded gnostic message, served with [`PROTOBUF_CONTENT_TYPE`]. Verified against kubectl
//! 1.27 and 1.28: `apply -f` and `create -f` of a ConfigMap and a custom resource pass with the
//! default `--validate=strict`. The few gnostic message types needed are declared here with
//! their field numbers from `openapiv2/OpenAPIv2.proto`.

use prost::Message;
use serde_json::{Map, Value, json};

use crate::endpoints::openapi_docs::{OpenApiKind, gv_path};

/// The media type kubectl asks for.
pub const PROTOBUF_CONTENT_TYPE: &str =
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// gnostic `openapi.v2.Document` (subset).
#[derive(Clone, PartialEq, Message)]
pub struct Document {
    /// `swagger` (always "2.0").
    #[prost(string, tag = "1")]
    pub swagger: String,
    /// `info`.
    #[prost(message, optional, tag = "2")]
    pub info: Option<Info>,
    /// `paths`.
    #[prost(message, optional, tag = "8")]
    pub paths: Option<Paths>,
}

/// gnostic `Info`.
#[derive(Clone, PartialEq, Message)]
pub struct Info {
    /// API title.
    #[prost(string, tag = "1")]
    pub title: String,
    /// API version.
    #[prost(string, tag = "2")]
    pub version: String,
}

/// gnostic `Paths`.
#[derive(Clone, PartialEq, Message)]
pub struct Paths {
    /// Path items by path.
    #[prost(message, repeated, tag = "2")]
    pub path: Vec<NamedPathItem>,
}

/// gnostic `NamedPathItem`.
#[derive(Clone, PartialEq, Message)]
pub struct NamedPathItem {
    /// The path.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its operations.
    #[prost(message, optional, tag = "2")]
    pub value: Option<PathItem>,
}

/// gnostic `PathItem` (only PATCH is published).
#[derive(Clone, PartialEq, Message)]
pub struct PathItem {
    /// The PATCH operation.
    #[prost(message, optional, tag = "8")]
    pub patch: Option<Operation>,
}

/// gnostic `Operation` (subset).
#[derive(Clone, PartialEq, Message)]
pub struct Operation {
    /// Description.
    #[prost(string, tag = "3")]
    pub description: String,
    /// Operation id.
    #[prost(string, tag = "5")]
    pub operation_id: String,
    /// Accepted request media types.
    #[prost(string, repeated, tag = "7")]
    pub consumes: Vec<String>,
    /// Parameters.
    #[prost(message, repeated, tag = "8")]
    pub parameters: Vec<ParametersItem>,
    /// `x-kubernetes-*` extensions.
    #[prost(message, repeated, tag = "13")]
    pub vendor_extension: Vec<NamedAny>,
}

/// gnostic `ParametersItem` (the `parameter` arm of its oneof).
#[derive(Clone, PartialEq, Message)]
pub struct ParametersItem {
    /// An inline parameter.
    #[prost(message, optional, tag = "1")]
    pub parameter: Option<Parameter>,
}

/// gnostic `Parameter` (the `non_body_parameter` arm).
#[derive(Clone, PartialEq, Message)]
pub struct Parameter {
    /// A query or path parameter.
    #[prost(message, optional, tag = "2")]
    pub non_body_parameter: Option<NonBodyParameter>,
}

/// gnostic `NonBodyParameter` (query and path arms).
#[derive(Clone, PartialEq, Message)]
pub struct NonBodyParameter {
    /// A query parameter.
    #[prost(message, optional, tag = "3")]
    pub query_parameter_sub_schema: Option<QueryParameterSubSchema>,
    /// A path parameter.
    #[prost(message, optional, tag = "4")]
    pub path_parameter_sub_schema: Option<PathParameterSubSchema>,
}

/// gnostic `QueryParameterSubSchema` (subset).
#[derive(Clone, PartialEq, Message)]
pub struct QueryParameterSubSchema {
    /// Required?
    #[prost(bool, tag = "1")]
    pub required: bool,
    /// Always "query".
    #[prost(string, tag = "2")]
    pub r#in: String,
    /// Description.
    #[prost(string, tag = "3")]
    pub description: String,
    /// Parameter name.
    #[prost(string, tag = "4")]
    pub name: String,
    /// Type (`string`, `boolean`).
    #[prost(string, tag = "6")]
    pub r#type: String,
    /// `uniqueItems`, set as the real server does.
    #[prost(bool, tag = "20")]
    pub unique_items: bool,
}

/// gnostic `PathParameterSubSchema` (subset).
#[derive(Clone, PartialEq, Message)]
pub struct PathParameterSubSchema {
    /// Required?
    #[prost(bool, tag = "1")]
    pub required: bool,
    /// Always "path".
    #[prost(string, tag = "2")]
    pub r#in: String,
    /// Description.
    #[prost(string, tag = "3")]
    pub description: String,
    /// Parameter name.
    #[prost(string, tag = "4")]
    pub name: String,
    /// Type.
    #[prost(string, tag = "5")]
    pub r#type: String,
    /// `uniqueItems`.
    #[prost(bool, tag = "19")]
    pub unique_items: bool,
}

/// gnostic `NamedAny`: a vendor extension.
#[derive(Clone, PartialEq, Message)]
pub struct NamedAny {
    /// Extension name, e.g. `x-kubernetes-group-version-kind`.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its value.
    #[prost(message, optional, tag = "2")]
    pub value: Option<Any>,
}

/// gnostic `Any`: a value carried as YAML text.
#[derive(Clone, PartialEq, Message)]
pub struct Any {
    /// The YAML rendering of the value.
    #[prost(string, tag = "2")]
    pub yaml: String,
}

fn object_path(k: &OpenApiKind) -> String {
    let gv = if k.group.is_empty() {
        k.version.clone()
    } else {
        format!("{}/{}", k.group, k.version)
    };
    let prefix = format!("/{}", gv_path(&gv));
    if k.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", k.plural)
    } else {
        format!("{prefix}/{}/{{name}}", k.plural)
    }
}

const WRITE_QUERY_PARAMS: &[(&str, &str)] = &[
    ("dryRun", "string"),
    ("fieldManager", "string"),
    ("fieldValidation", "string"),
    ("force", "boolean"),
];

const CONSUMES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
];

/// The Swagger 2.0 document (JSON form) for every kind served, across group-versions.
pub fn v2_document(kinds: &[OpenApiKind]) -> Value {
    let mut paths = Map::new();
    for k in kinds {
        let mut params: Vec<Value> = Vec::new();
        if k.namespaced {
            params.push(json!({"name": "namespace", "in": "path", "required": true, "type": "string", "uniqueItems": true, "description": "object name and auth scope, such as for teams and projects"}));
        }
        params.push(json!({"name": "name", "in": "path", "required": true, "type": "string", "uniqueItems": true, "description": format!("name of the {}", k.kind)}));
        for (name, ty) in WRITE_QUERY_PARAMS {
            params.push(json!({"name": name, "in": "query", "type": ty, "uniqueItems": true, "description": name}));
        }
        paths.insert(
            object_path(k),
            json!({"patch": {
                "description": format!("partially update the specified {}", k.kind),
                "operationId": format!("patch{}", k.kind),
                "consumes": CONSUMES,
                "parameters": params,
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {"group": k.group, "kind": k.kind, "version": k.version},
            }}),
        );
    }
    json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.33.0"}, "paths": paths})
}

fn extension(name: &str, yaml: String) -> NamedAny {
    NamedAny {
        name: name.into(),
        value: Some(Any { yaml }),
    }
}

/// The same document as the encoded gnostic `openapi.v2.Document`.
pub fn v2_document_protobuf(kinds: &[OpenApiKind]) -> Vec<u8> {
    let path = kinds
        .iter()
        .map(|k| {
            let mut parameters = Vec::new();
            let path_param = |name: &str, description: String| ParametersItem {
                parameter: Some(Parameter {
                    non_body_parameter: Some(NonBodyParameter {
                        query_parameter_sub_schema: None,
                        path_parameter_sub_schema: Some(PathParameterSubSchema {
                            required: true,
                            r#in: "path".into(),
                            description,
                            name: name.into(),
                            r#type: "string".into(),
                            unique_items: true,
                        }),
                    }),
                }),
            };
            if k.namespaced {
                parameters.push(path_param(
                    "namespace",
                    "object name and auth scope, such as for teams and projects".into(),
                ));
            }
            parameters.push(path_param("name", format!("name of the {}", k.kind)));
            for (name, ty) in WRITE_QUERY_PARAMS {
                parameters.push(ParametersItem {
                    parameter: Some(Parameter {
                        non_body_parameter: Some(NonBodyParameter {
                            query_parameter_sub_schema: Some(QueryParameterSubSchema {
                                required: false,
                                r#in: "query".into(),
                                description: name.to_string(),
                                name: name.to_string(),
                                r#type: ty.to_string(),
                                unique_items: true,
                            }),
                            path_parameter_sub_schema: None,
                        }),
                    }),
                });
            }
            // YAML with JSON-quoted scalars is valid YAML and keeps "" groups intact.
            let gvk_yaml = format!(
                "group: {}\nkind: {}\nversion: {}\n",
                Value::String(k.group.clone()),
                Value::String(k.kind.clone()),
                Value::String(k.version.clone())
            );
            NamedPathItem {
                name: object_path(k),
                value: Some(PathItem {
                    patch: Some(Operation {
                        description: format!("partially update the specified {}", k.kind),
                        operation_id: format!("patch{}", k.kind),
                        consumes: CONSUMES.iter().map(|s| s.to_string()).collect(),
                        parameters,
                        vendor_extension: vec![
                            extension("x-kubernetes-action", "patch\n".into()),
                            extension("x-kubernetes-group-version-kind", gvk_yaml),
                        ],
                    }),
                }),
            }
        })
        .collect();
    Document {
        swagger: "2.0".into(),
        info: Some(Info {
            title: "Kubernetes".into(),
            version: "v1.33.0".into(),
        }),
        paths: Some(Paths { path }),
    }
    .encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds() -> Vec<OpenApiKind> {
        vec![
            OpenApiKind::builtin("", "v1", "ConfigMap", "configmaps", true, &[]),
            OpenApiKind::builtin("", "v1", "Namespace", "namespaces", false, &["status"]),
            OpenApiKind::builtin(
                "cnat.programming-kubernetes.info",
                "v1alpha1",
                "At",
                "ats",
                true,
                &["status"],
            ),
        ]
    }

    /// kubectl 1.28's `supportsQueryParam`, over the decoded protobuf document.
    fn supports_field_validation(doc: &Document, group: &str, version: &str, kind: &str) -> bool {
        for item in &doc.paths.as_ref().unwrap().path {
            let Some(op) = item.value.as_ref().and_then(|v| v.patch.as_ref()) else {
                continue;
            };
            let Some(ext) = op
                .vendor_extension
                .iter()
                .find(|e| e.name == "x-kubernetes-group-version-kind")
            else {
                continue;
            };
            let gvk: std::collections::BTreeMap<String, String> =
                serde_yaml_ng::from_str(&ext.value.as_ref().unwrap().yaml).unwrap();
            if gvk["group"] != group || gvk["version"] != version || gvk["kind"] != kind {
                continue;
            }
            return op.parameters.iter().any(|p| {
                p.parameter
                    .as_ref()
                    .and_then(|p| p.non_body_parameter.as_ref())
                    .and_then(|n| n.query_parameter_sub_schema.as_ref())
                    .is_some_and(|q| q.name == "fieldValidation")
            });
        }
        false
    }

    #[test]
    fn protobuf_document_round_trips_and_passes_the_verifier() {
        let bytes = v2_document_protobuf(&kinds());
        let doc = Document::decode(bytes.as_slice()).unwrap();
        assert_eq!(doc.swagger, "2.0");
        assert!(supports_field_validation(&doc, "", "v1", "ConfigMap"));
        assert!(supports_field_validation(&doc, "", "v1", "Namespace"));
        assert!(supports_field_validation(
            &doc,
            "cnat.programming-kubernetes.info",
            "v1alpha1",
            "At"
        ));
        assert!(!supports_field_validation(&doc, "apps", "v1", "Deployment"));
        let names: Vec<&str> = doc
            .paths
            .as_ref()
            .unwrap()
            .path
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "/api/v1/namespaces/{namespace}/configmaps/{name}",
                "/api/v1/namespaces/{name}",
                "/apis/cnat.programming-kubernetes.info/v1alpha1/namespaces/{namespace}/ats/{name}",
            ]
        );
    }

    #[test]
    fn json_document_has_the_same_operations() {
        let doc = v2_document(&kinds());
        assert_eq!(doc["swagger"], "2.0");
        let op = &doc["paths"]["/api/v1/namespaces/{name}"]["patch"];
        assert_eq!(
            op["x-kubernetes-group-version-kind"],
            json!({"group": "", "kind": "Namespace", "version": "v1"})
        );
        assert!(
            op["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
        );
        assert!(doc.get("definitions").is_none());
    }
}
