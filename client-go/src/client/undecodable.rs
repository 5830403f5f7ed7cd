//! Objects the server sent that do not decode as the typed kind: named, not fatal.
//!
//! A typed client reads every object of a collection into one Rust type. When one object does
//! not fit it (a field the type requires is missing, a value of the wrong type: a CRD loosened
//! by an older operator, an object written before a schema change), client-go fails the whole
//! LIST and ends the watch with a decode error, and the reflector relists, fails again and
//! retries with backoff for ever: **one** object stalls the cache of **every** object of the
//! kind.
//!
//! This client decodes a list's items and a watch's objects one by one instead. An object that
//! does not decode becomes an [`UndecodableObject`], which says what it is (kind,
//! `namespace/name`, UID, resourceVersion, read from the object's text with a lenient reader
//! that needs nothing else to be well-formed) and why it does not decode (serde's message,
//! which names the field: ``missing field `run` ``). Lists carry them in
//! [`ObjectList::undecodable`](super::ObjectList::undecodable); a watch yields them as
//! [`Error::UndecodableObject`](super::Error::UndecodableObject), after which the stream goes
//! on. The reflector leaves such objects out of its cache, reports each once per
//! resourceVersion, and keeps every other object in sync (see
//! [`crate::cache::reflector`]).
//!
//! Text that is not an object at all (not JSON, or without `metadata.name`) stays a plain
//! decode error: there is nothing to name, and the response itself is broken.

use serde::Deserialize;

/// An object of a list or watch that does not decode as the typed kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UndecodableObject {
    /// The object's `kind` (or the typed kind's, when the object has none).
    pub kind: String,
    /// The object's `apiVersion`, when it has one.
    pub api_version: Option<String>,
    /// `metadata.namespace`, for a namespaced object.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: Option<String>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// Why it does not decode: serde's message, which names the field.
    pub error: String,
}

impl UndecodableObject {
    /// The object's cache key, `namespace/name` (or `name`).
    pub fn key(&self) -> String {
        match &self.namespace {
            Some(ns) if !ns.is_empty() => format!("{ns}/{}", self.name),
            _ => self.name.clone(),
        }
    }

    /// Names the object in `text` (one object's JSON) that failed to decode with `error`, or
    /// `None` when the text is not an object with a `metadata.name`.
    pub fn from_text(text: &[u8], default_kind: &str, error: &serde_json::Error) -> Option<Self> {
        #[derive(Deserialize)]
        struct Head {
            #[serde(default)]
            kind: Option<Lenient>,
            #[serde(default, rename = "apiVersion")]
            api_version: Option<Lenient>,
            #[serde(default)]
            metadata: Option<HeadMeta>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct HeadMeta {
            #[serde(default)]
            name: Option<Lenient>,
            #[serde(default)]
            namespace: Option<Lenient>,
            #[serde(default)]
            uid: Option<Lenient>,
            #[serde(default)]
            resource_version: Option<Lenient>,
        }
        let head: Head = serde_json::from_slice(text).ok()?;
        let meta = head.metadata?;
        let name = meta.name.and_then(Lenient::text)?;
        Some(UndecodableObject {
            kind: head
                .kind
                .and_then(Lenient::text)
                .unwrap_or_else(|| default_kind.to_owned()),
            api_version: head.api_version.and_then(Lenient::text),
            namespace: meta.namespace.and_then(Lenient::text),
            name,
            uid: meta.uid.and_then(Lenient::text),
            resource_version: meta.resource_version.and_then(Lenient::text),
            error: error.to_string(),
        })
    }
}

impl std::fmt::Display for UndecodableObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.key())?;
        if let Some(rv) = &self.resource_version {
            write!(f, " (resourceVersion {rv})")?;
        }
        write!(f, " does not decode: {}", self.error)
    }
}

/// A metadata value read without failing: a string, or anything else (ignored).
#[derive(Deserialize)]
#[serde(untagged)]
enum Lenient {
    Text(String),
    Other(serde::de::IgnoredAny),
}

impl Lenient {
    fn text(self) -> Option<String> {
        match self {
            Lenient::Text(s) if !s.is_empty() => Some(s),
            _ => None,
        }
    }
}

/// Decodes a list response item by item: the list's metadata and the items that decode, and
/// an [`UndecodableObject`] for each item that does not. A body that is not a list at all is a
/// plain [`serde_json::Error`].
pub fn decode_list<K: serde::de::DeserializeOwned>(
    body: &[u8],
    kind: &str,
) -> Result<super::ObjectList<K>, serde_json::Error> {
    #[derive(Deserialize)]
    struct RawList<'a> {
        #[serde(default)]
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta,
        #[serde(default, borrow)]
        items: Option<Vec<&'a serde_json::value::RawValue>>,
    }
    let raw: RawList = serde_json::from_slice(body)?;
    let raw_items = raw.items.unwrap_or_default();
    let mut items = Vec::with_capacity(raw_items.len());
    let mut undecodable = Vec::new();
    for item in raw_items {
        let text = item.get().as_bytes();
        match serde_json::from_slice::<K>(text) {
            Ok(k) => items.push(k),
            Err(e) => match UndecodableObject::from_text(text, kind, &e) {
                Some(u) => undecodable.push(u),
                None => return Err(e),
            },
        }
    }
    Ok(super::ObjectList {
        metadata: raw.metadata,
        items,
        undecodable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn a_list_keeps_what_decodes_and_names_what_does_not() {
        let body = br#"{"kind":"ConfigMapList","metadata":{"resourceVersion":"9"},"items":[
            {"metadata":{"name":"good","namespace":"a","resourceVersion":"3"},"data":{"k":"v"}},
            {"kind":"ConfigMap","metadata":{"name":"bad","namespace":"a","uid":"u-1","resourceVersion":"4"},"data":{"k":7}},
            {"metadata":{"name":"good2","namespace":"b"}}
        ]}"#;
        let list = decode_list::<ConfigMap>(body, "ConfigMap").unwrap();
        assert_eq!(list.metadata.resource_version.as_deref(), Some("9"));
        let names: Vec<_> = list
            .items
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["good", "good2"]);
        assert_eq!(list.undecodable.len(), 1);
        let u = &list.undecodable[0];
        assert_eq!(u.key(), "a/bad");
        assert_eq!(u.uid.as_deref(), Some("u-1"));
        assert_eq!(u.resource_version.as_deref(), Some("4"));
        assert!(u.error.contains("invalid type: integer `7`"), "{}", u.error);
        assert_eq!(
            u.to_string(),
            format!(
                "ConfigMap a/bad (resourceVersion 4) does not decode: {}",
                u.error
            )
        );
    }

    #[test]
    fn a_body_that_is_not_a_list_or_an_item_without_a_name_is_an_error() {
        assert!(decode_list::<ConfigMap>(b"not json", "ConfigMap").is_err());
        assert!(decode_list::<ConfigMap>(br#"{"items":[{"data":7}]}"#, "ConfigMap").is_err());
        assert!(decode_list::<ConfigMap>(br#"{"items":[3]}"#, "ConfigMap").is_err());
        // null items read as none.
        let empty = decode_list::<ConfigMap>(br#"{"items":null}"#, "ConfigMap").unwrap();
        assert!(empty.items.is_empty() && empty.undecodable.is_empty());
    }

    #[test]
    fn the_kind_falls_back_to_the_typed_one_and_odd_metadata_is_ignored() {
        let err = serde_json::from_str::<ConfigMap>("{\"data\":1}").unwrap_err();
        let u = UndecodableObject::from_text(
            br#"{"metadata":{"name":"x","namespace":5,"uid":null}}"#,
            "ConfigMap",
            &err,
        )
        .unwrap();
        assert_eq!(u.kind, "ConfigMap");
        assert_eq!(u.namespace, None);
        assert_eq!(u.key(), "x");
    }
}
