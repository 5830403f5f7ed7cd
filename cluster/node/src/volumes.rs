//! Volumes of the process node: `configMap`, `secret` and `emptyDir` volumes as directories
//! on the host, and how a command finds them.
//!
//! ## What the kubelet does
//!
//! Before it starts a pod's containers, the kubelet's volume manager sets up each volume in
//! the pod's directory (`/var/lib/kubelet/pods/<uid>/volumes/...`): for a `configMap` or
//! `secret` volume it writes each key of the object as a file (`pkg/volume/configmap`,
//! `pkg/volume/secret`, through the atomic writer): all keys, or only the `items` listed
//! (`key` → `path`, with an optional `mode`), with `defaultMode` (0644) as the files' mode.
//! A volume whose object is missing (or that lists a key the object lacks) keeps the pod in
//! `ContainerCreating` with a Warning `FailedMount` event, retried until the object appears,
//! unless the volume is `optional`, which then mounts empty. The container runtime then
//! bind-mounts each volume at the container's `volumeMounts[].mountPath` (or a `subPath` of
//! it) in the container's own mount namespace. The directory goes when the pod goes.
//!
//! ## What the process node does
//!
//! Each pod that runs gets a directory of its own under the system's temporary directory
//! (`sample-controller-pod-<uid>`), removed when the pod's processes are done (its end,
//! deletion, or the server's shutdown). `configMap` and `secret` volumes are written into
//! `<pod dir>/volumes/<volume name>/` as above (`items`, modes, `optional`, waiting with a
//! `FailedMount` event when the object or a key is missing); `emptyDir` is an empty directory.
//! Other volume types are not set up.
//!
//! A process on the host has no mount namespace, so it cannot see a file at the real
//! `mountPath`. Instead the node **rewrites paths**: in the container's `command` and `args`,
//! in its `workingDir`, in its `env` values, and in an exec's command, every occurrence of a
//! volume mount's `mountPath` that is a whole path prefix (`/etc/config`, `/etc/config/key`,
//! `cat /etc/config/key` inside a shell script, but not `/etc/configs`) is replaced by the
//! volume's directory on the host (with its `subPath`). So `sh -c 'cat /etc/config/key'` with
//! a `configMap` volume mounted at `/etc/config` prints the key's value. A path the command
//! builds at run time (`$DIR/key`) is not rewritten; for those the environment variable
//! [`POD_ROOT_ENV`] names the pod's directory (`$POD_ROOT/volumes/<volume>/<key>`). Volumes
//! are read-only in intent but not enforced; later changes to the ConfigMap or Secret are not
//! propagated into the files.

use std::collections::BTreeMap;
use std::path::PathBuf;

use base64::Engine;
use serde_json::Value;

use embedded_apiserver::loopback::Resource;

use super::client::{NodeApi, meta_str};

/// The environment variable that names the pod's directory in every process of the pod.
pub const POD_ROOT_ENV: &str = "POD_ROOT";

/// The default mode of a volume's files (0644), as the API defaults `defaultMode`.
const DEFAULT_MODE: u32 = 0o644;

/// A pod's directory on the host; removed when dropped.
#[derive(Debug)]
pub(crate) struct PodDir {
    root: PathBuf,
}

impl PodDir {
    /// The directory ([`POD_ROOT_ENV`]).
    pub(crate) fn root(&self) -> &std::path::Path {
        &self.root
    }
}

impl Drop for PodDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Where a container's volume mounts are on the host, for rewriting paths.
#[derive(Clone, Debug, Default)]
pub(crate) struct Mounts {
    /// The pod's directory ([`POD_ROOT_ENV`]).
    pub(crate) root: Option<PathBuf>,
    /// `(mountPath, host path)`, longest mount path first.
    pairs: Vec<(String, String)>,
}

impl Mounts {
    /// The mounts of container `c` of a pod whose volumes were set up in `dir`.
    pub(crate) fn of(dir: &PodDir, pod: &Value, c: &Value) -> Self {
        let set_up: Vec<&str> = pod["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| kind_of(v).is_some())
            .filter_map(|v| v["name"].as_str())
            .collect();
        let mut pairs: Vec<(String, String)> = c["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| {
                let name = m["name"].as_str()?;
                let mount = m["mountPath"].as_str()?.trim_end_matches('/');
                if mount.is_empty() || !set_up.contains(&name) || !safe_name(name) {
                    return None;
                }
                let mut host = dir.root.join("volumes").join(name);
                if let Some(sub) = m["subPath"].as_str().filter(|s| !s.is_empty()) {
                    if !safe_relative(sub) {
                        return None;
                    }
                    host = host.join(sub);
                }
                Some((mount.to_owned(), host.to_string_lossy().into_owned()))
            })
            .collect();
        pairs.sort_by_key(|(m, _)| std::cmp::Reverse(m.len()));
        Mounts {
            root: Some(dir.root.clone()),
            pairs,
        }
    }

    /// These mounts and one more: `mount_path` in the container is `host` on the host (the
    /// ServiceAccount's directory, [`super::serviceaccount`]). A volume mount of the
    /// container at the same path wins, as a container's own mount shadows the injected one.
    pub(crate) fn with_mount(mut self, mount_path: &str, host: &std::path::Path) -> Self {
        if !self.pairs.iter().any(|(m, _)| m == mount_path) {
            self.pairs
                .push((mount_path.to_owned(), host.to_string_lossy().into_owned()));
            self.pairs.sort_by_key(|(m, _)| std::cmp::Reverse(m.len()));
        }
        self
    }

    /// `word` with every mount path in it replaced by its host directory (see the module doc).
    pub(crate) fn rewrite(&self, word: &str) -> String {
        if self.pairs.is_empty() {
            return word.to_owned();
        }
        let mut out = String::with_capacity(word.len());
        let mut i = 0;
        'scan: while i < word.len() {
            let prev = word[..i].chars().next_back();
            let at_start = prev.is_none_or(|c| !is_path_char(c));
            if at_start && word.as_bytes()[i] == b'/' {
                for (mount, host) in &self.pairs {
                    if word[i..].starts_with(mount.as_str()) {
                        let next = word[i + mount.len()..].chars().next();
                        if next.is_none_or(|c| c == '/' || !is_path_char(c)) {
                            out.push_str(host);
                            i += mount.len();
                            continue 'scan;
                        }
                    }
                }
            }
            let Some(c) = word[i..].chars().next() else {
                break;
            };
            out.push(c);
            i += c.len_utf8();
        }
        out
    }
}

/// Characters that continue a path (a mount path followed by one of them is another path).
fn is_path_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | '~' | '+' | '@')
}

/// A volume or key name usable as one path component.
fn safe_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('\0')
}

/// A relative path without `..` (an item's `path`, a `subPath`).
fn safe_relative(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && !p.contains('\0')
        && p.split('/').all(|c| !c.is_empty() && c != "..")
}

/// The kind of volume this node sets up, if any.
fn kind_of(v: &Value) -> Option<&'static str> {
    ["configMap", "secret", "emptyDir"]
        .into_iter()
        .find(|k| v.get(*k).is_some_and(Value::is_object))
}

/// Why a pod's volumes cannot be set up yet (the message of the `FailedMount` event).
#[derive(Debug)]
pub(crate) struct MountError(pub(crate) String);

/// The ConfigMaps and Secrets a pod's volumes name, as the node read them through the API:
/// `(volume kind, object name)` → the object; one that was not found is absent.
pub(crate) type Sources = BTreeMap<(&'static str, String), Value>;

/// Reads the ConfigMaps and Secrets the pod's `configMap` and `secret` volumes name (GET, as
/// the node's user). A read that fails for another reason than not found is a [`MountError`]
/// (the caller retries).
pub(crate) async fn fetch_sources(api: &NodeApi, pod: &Value) -> Result<Sources, MountError> {
    let ns = meta_str(pod, "namespace");
    let mut sources = Sources::new();
    for v in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        let (resource, kind, name) = match kind_of(v) {
            Some("secret") => ("secrets", "secret", v["secret"]["secretName"].as_str()),
            Some("configMap") => ("configmaps", "configMap", v["configMap"]["name"].as_str()),
            _ => continue,
        };
        let name = name.unwrap_or_default().to_owned();
        if name.is_empty() || sources.contains_key(&(kind, name.clone())) {
            continue;
        }
        match api.get(&Resource::core(resource), ns, &name).await {
            Ok(Some(obj)) => {
                sources.insert((kind, name), obj);
            }
            Ok(None) => {}
            Err(e) => {
                return Err(MountError(format!(
                    "MountVolume.SetUp failed for volume {:?} : {}",
                    v["name"].as_str().unwrap_or_default(),
                    e.message
                )));
            }
        }
    }
    Ok(sources)
}

/// Creates the pod's directory and writes its volumes from `sources`
/// ([`fetch_sources`]). `Err` with the kubelet's message when an object or key is missing
/// (the caller retries); a host error (the directory cannot be written) is an `Err` too.
pub(crate) fn set_up(sources: &Sources, pod: &Value) -> Result<PodDir, MountError> {
    let uid = meta_str(pod, "uid");
    let safe_uid: String = uid
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    let root = std::env::temp_dir().join(format!("sample-controller-pod-{safe_uid}"));
    let _ = std::fs::remove_dir_all(&root);
    let dir = PodDir { root };
    let host = |e: std::io::Error| MountError(format!("setting up the pod's directory: {e}"));
    std::fs::create_dir_all(dir.root.join("volumes")).map_err(host)?;
    for v in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        let (Some(kind), Some(name)) = (kind_of(v), v["name"].as_str()) else {
            continue;
        };
        if !safe_name(name) {
            continue;
        }
        let vdir = dir.root.join("volumes").join(name);
        std::fs::create_dir_all(&vdir).map_err(host)?;
        if kind == "emptyDir" {
            continue;
        }
        let files = files_of(sources, name, kind, &v[kind])?;
        for (path, (bytes, mode)) in files {
            let file = vdir.join(&path);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent).map_err(host)?;
            }
            std::fs::write(&file, bytes).map_err(host)?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode & 0o777))
                .map_err(host)?;
        }
    }
    Ok(dir)
}

/// The files of one `configMap` or `secret` volume: relative path → (bytes, mode).
fn files_of(
    sources: &Sources,
    volume: &str,
    kind: &str,
    src: &Value,
) -> Result<BTreeMap<String, (Vec<u8>, u32)>, MountError> {
    let (object_name, kind, what) = if kind == "secret" {
        (src["secretName"].as_str(), "secret", "secret")
    } else {
        (src["name"].as_str(), "configMap", "configmap")
    };
    let optional = src["optional"] == true;
    let object_name = object_name.unwrap_or_default();
    let default_mode = src["defaultMode"]
        .as_u64()
        .and_then(|m| u32::try_from(m).ok())
        .unwrap_or(DEFAULT_MODE);
    let Some(obj) = sources.get(&(kind, object_name.to_owned())) else {
        if optional {
            return Ok(BTreeMap::new());
        }
        return Err(MountError(format!(
            "MountVolume.SetUp failed for volume \"{volume}\" : {what} \"{object_name}\" not found"
        )));
    };
    // Every key with its bytes: `data` (text; base64 for a Secret) and `binaryData`.
    let mut keys: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (k, v) in obj["data"].as_object().into_iter().flatten() {
        let text = v.as_str().unwrap_or_default();
        let bytes = if kind == "secret" {
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .unwrap_or_default()
        } else {
            text.as_bytes().to_vec()
        };
        keys.insert(k.clone(), bytes);
    }
    for (k, v) in obj["binaryData"].as_object().into_iter().flatten() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .unwrap_or_default();
        keys.insert(k.clone(), bytes);
    }
    let mut files = BTreeMap::new();
    match src["items"].as_array().filter(|i| !i.is_empty()) {
        None => {
            for (k, bytes) in keys {
                if safe_name(&k) {
                    files.insert(k, (bytes, default_mode));
                }
            }
        }
        Some(items) => {
            for item in items {
                let key = item["key"].as_str().unwrap_or_default();
                let path = item["path"].as_str().unwrap_or_default();
                let Some(bytes) = keys.get(key) else {
                    if optional {
                        continue;
                    }
                    return Err(MountError(format!(
                        "MountVolume.SetUp failed for volume \"{volume}\" : {what} references non-existent {what} key: {key}"
                    )));
                };
                if !safe_relative(path) {
                    continue;
                }
                let mode = item["mode"]
                    .as_u64()
                    .and_then(|m| u32::try_from(m).ok())
                    .unwrap_or(default_mode);
                files.insert(path.to_owned(), (bytes.clone(), mode));
            }
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mounts(pairs: &[(&str, &str)]) -> Mounts {
        let mut pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect();
        pairs.sort_by_key(|(m, _)| std::cmp::Reverse(m.len()));
        Mounts { root: None, pairs }
    }

    #[test]
    fn mount_paths_are_rewritten_where_they_are_whole_path_prefixes() {
        let m = mounts(&[
            ("/etc/config", "/tmp/p/volumes/cfg"),
            ("/data", "/tmp/p/volumes/d"),
        ]);
        assert_eq!(m.rewrite("/etc/config/key"), "/tmp/p/volumes/cfg/key");
        assert_eq!(
            m.rewrite("cat /etc/config/key; ls /data"),
            "cat /tmp/p/volumes/cfg/key; ls /tmp/p/volumes/d"
        );
        assert_eq!(m.rewrite("--file=/etc/config"), "--file=/tmp/p/volumes/cfg");
        assert_eq!(m.rewrite("'/etc/config/a b'"), "'/tmp/p/volumes/cfg/a b'");
        assert_eq!(m.rewrite("/etc/configs/x"), "/etc/configs/x");
        assert_eq!(m.rewrite("/x/etc/config"), "/x/etc/config");
        assert_eq!(m.rewrite("/database"), "/database");
        assert_eq!(m.rewrite("héllo /data"), "héllo /tmp/p/volumes/d");
    }

    #[test]
    fn items_modes_and_optional_are_honoured() {
        let src =
            json!({"name": "cm", "items": [{"key": "a", "path": "sub/a.txt", "mode": 0o600}]});
        let mut sources = Sources::new();
        sources.insert(
            ("configMap", "cm".to_owned()),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "cm", "namespace": "default"},
                   "data": {"a": "A", "b": "B"}}),
        );
        check_files(&sources, &src);
    }

    fn check_files(st: &Sources, src: &Value) {
        let files = files_of(st, "v", "configMap", src).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files["sub/a.txt"], (b"A".to_vec(), 0o600));
        let all = files_of(
            st,
            "v",
            "configMap",
            &json!({"name": "cm", "defaultMode": 0o400}),
        )
        .unwrap();
        assert_eq!(all["b"], (b"B".to_vec(), 0o400));
        let e = files_of(st, "v", "configMap", &json!({"name": "nope"})).unwrap_err();
        assert_eq!(
            e.0,
            "MountVolume.SetUp failed for volume \"v\" : configmap \"nope\" not found"
        );
        assert!(
            files_of(
                st,
                "v",
                "configMap",
                &json!({"name": "nope", "optional": true})
            )
            .unwrap()
            .is_empty()
        );
        let e = files_of(
            st,
            "v",
            "configMap",
            &json!({"name": "cm", "items": [{"key": "z", "path": "z"}]}),
        )
        .unwrap_err();
        assert!(e.0.contains("non-existent configmap key: z"), "{}", e.0);
    }
}
