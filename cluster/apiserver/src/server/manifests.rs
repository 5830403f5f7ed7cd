//! Loading manifests into a server: the standalone command's `--manifests` and
//! [`crate::ApiServerHandle::load_manifests`]. Each document is created, or updated when it
//! exists, through the generic store as a client's write would be (Namespaces and CRDs first,
//! so what lives in them can follow in the same file).

use std::path::Path;

use serde_json::Value;

use crate::api::query::Query;
use crate::api::status::ApiError;
use crate::registry::Store;
use crate::registry::generic::{self as verbs, Target};

/// Why manifests could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A document is not valid YAML or lacks `apiVersion`/`kind`.
    #[error("{origin}: document {index}: {message}")]
    Parse {
        /// File name or `<string>`.
        origin: String,
        /// 1-based document number.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// The server refused an object.
    #[error("{origin}: {kind} {name:?}: {error}")]
    Rejected {
        /// File name or `<string>`.
        origin: String,
        /// The object's kind.
        kind: String,
        /// The object's name.
        name: String,
        /// The server's answer.
        error: Box<ApiError>,
    },
}

/// Creates every object in a multi-document YAML string (any kind the server serves; an
/// object that already exists is replaced). Namespaces and CustomResourceDefinitions go first,
/// so objects inside a namespace or of a custom kind may come before them in the text, as
/// `kustomize` orders them. Returns `Kind/name` of each object, in the order created.
pub fn load_manifests(
    store: &Store,
    yaml: &str,
    origin: &str,
) -> Result<Vec<String>, ManifestError> {
    let mut out = load_documents(store, yaml, origin, Pass::Prerequisites)?;
    out.extend(load_documents(store, yaml, origin, Pass::Rest)?);
    Ok(out)
}

/// Which documents a pass over manifests creates.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Namespaces and CustomResourceDefinitions: what other objects need to exist first.
    Prerequisites,
    /// Everything else.
    Rest,
}

impl Pass {
    fn of(kind: &str) -> Self {
        if matches!(kind, "Namespace" | "CustomResourceDefinition") {
            Pass::Prerequisites
        } else {
            Pass::Rest
        }
    }
}

fn load_documents(
    store: &Store,
    yaml: &str,
    origin: &str,
    pass: Pass,
) -> Result<Vec<String>, ManifestError> {
    use serde::Deserialize;
    let mut out = vec![];
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(yaml).enumerate() {
        let parse_err = |message: String| ManifestError::Parse {
            origin: origin.to_owned(),
            index: i + 1,
            message,
        };
        let v = Value::deserialize(doc).map_err(|e| parse_err(e.to_string()))?;
        if v.is_null() {
            continue;
        }
        let api_version = v["apiVersion"]
            .as_str()
            .ok_or_else(|| parse_err("field apiVersion: required".into()))?
            .to_owned();
        let kind = v["kind"]
            .as_str()
            .ok_or_else(|| parse_err("field kind: required".into()))?
            .to_owned();
        if Pass::of(&kind) != pass {
            continue;
        }
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let (group, version) = api_version
            .split_once('/')
            .unwrap_or(("", api_version.as_str()));
        let reject = |error: ApiError| ManifestError::Rejected {
            origin: origin.to_owned(),
            kind: kind.clone(),
            name: name.clone(),
            error: Box::new(error),
        };
        store.write(|st| {
            let def = st
                .registry
                .in_group_version(group, version)
                .into_iter()
                .find(|d| d.kind == kind)
                .ok_or_else(|| {
                    reject(
                        ApiError::not_found(&kind, group, &name).with_message(format!(
                            "no resource of kind {kind:?} is served in {api_version}"
                        )),
                    )
                })?;
            let namespace = if def.namespaced {
                Some(
                    v["metadata"]["namespace"]
                        .as_str()
                        .unwrap_or("default")
                        .to_owned(),
                )
            } else {
                None
            };
            let mut target = Target {
                def: def.clone(),
                namespace,
                name: None,
                subresource: None,
            };
            let exists = st
                .get(
                    &def.storage,
                    target.namespace.as_deref().unwrap_or_default(),
                    &name,
                )
                .cloned();
            let q = Query::parse(None);
            match exists {
                None => verbs::create(st, &target, v.clone(), &q).map_err(reject)?,
                Some(old) => {
                    target.name = Some(name.clone());
                    let mut new = v.clone();
                    new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
                    verbs::update(st, &target, new, &q).map_err(reject)?
                }
            };
            Ok::<(), ManifestError>(())
        })?;
        out.push(format!("{kind}/{name}"));
    }
    Ok(out)
}

/// [`load_manifests`] for a file, or for every `.yaml`/`.yml` file of a directory (sorted by
/// name, `kustomization.yaml` skipped; the Namespaces and CRDs of every file first).
pub fn load_manifest_path(store: &Store, path: &Path) -> Result<Vec<String>, ManifestError> {
    let read_err = |p: &Path, source| ManifestError::Read {
        path: p.display().to_string(),
        source,
    };
    let files: Vec<std::path::PathBuf> = if path.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(path)
            .map_err(|e| read_err(path, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                (name.ends_with(".yaml") || name.ends_with(".yml"))
                    && !name.starts_with("kustomization.")
            })
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_owned()]
    };
    let mut texts = vec![];
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| read_err(&f, e))?;
        texts.push((f.display().to_string(), text));
    }
    let mut out = vec![];
    for pass in [Pass::Prerequisites, Pass::Rest] {
        for (origin, text) in &texts {
            out.extend(load_documents(store, text, origin, pass)?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_create_namespaces_before_what_lives_in_them() {
        let store = Store::new(100);
        let dir = std::env::temp_dir().join(format!("rbac-manifests-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // `a-*.yaml` sorts before the namespace file, as deployment.yaml does in artifacts/deploy.
        std::fs::write(
            dir.join("a-role.yaml"),
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r, namespace: late}\nrules: []\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("b-namespace.yaml"),
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: late}\n",
        )
        .unwrap();
        let loaded = load_manifest_path(&store, &dir).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(loaded, ["Namespace/late", "Role/r"]);
        assert!(store.read(|st| {
            st.get("rbac.authorization.k8s.io/roles", "late", "r")
                .is_some()
        }));
    }
}
