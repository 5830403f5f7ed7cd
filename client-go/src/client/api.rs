//! `Api<K>`: the typed verbs for one kind, like client-go's generated typed clients
//! (`clientset.CoreV1().Pods(ns)`, `cnatClientset.CnatV1alpha1().Ats(ns)`), but generic.
//!
//! ## From a Rust type to a URL
//!
//! Every `K: k8s_openapi::Resource` knows its group, version and plural (`URL_PATH_SEGMENT`), for
//! built-in kinds and for this crate's CRDs alike. The collection URL is
//!
//! ```text
//! /api/v1[/namespaces/<ns>]/<plural>                       core group ("")
//! /apis/<group>/<version>[/namespaces/<ns>]/<plural>       every other group
//! ```
//!
//! with `/<name>` appended for one object and `/status` for the status subresource. An `Api`
//! built with [`Api::all`] or [`Api::cluster`] leaves out the namespace segment: for a namespaced
//! kind that lists across all namespaces, for a cluster-scoped kind it is the only form.
//!
//! ## Verbs
//!
//! | verb | HTTP | notes |
//! |---|---|---|
//! | `get` / `get_opt` | GET item | `get_opt` turns 404 into `None` |
//! | `list` | GET collection | one page when `limit` is set; `metadata.continue` names the next |
//! | `list_all` | GET pages | client-go's pager: follows `continue`, falls back to one full list when a token expired (410) |
//! | `create` | POST collection | |
//! | `update` / `update_status` | PUT item (`/status`) | optimistic concurrency: a stale `metadata.resourceVersion` is 409 Conflict |
//! | `patch` / `patch_status` | PATCH item | merge, JSON, strategic merge, server-side apply |
//! | `delete` | DELETE item | body is `DeleteOptions`; answer is the object (finalizers pending) or a Status |
//! | `delete_collection` | DELETE collection | label/field selectors pick what goes |
//! | `watch` | GET collection `?watch=true` | a stream of [`WatchEvent`](crate::client::WatchEvent)s, see [`crate::client::watch`] |
//!
//! The cache turns an `Api<K>` into the list-and-watch source of a reflector
//! (`cache::api_source`); this module knows nothing of the cache.

use std::marker::PhantomData;

use crate::keytrace;
use bytes::Bytes;
use http::{Method, Request};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use super::params::{push_query, url_encode};
use super::watch::{DEFAULT_MAX_LINE, WatchDecoder};
use super::{
    Client, DeleteParams, Error, ListParams, ObjectList, Patch, PatchParams, PostParams, Result,
    WatchParams, WatchStream,
};

/// The page size `list_all` uses when the params give none (client-go's pager default).
pub const DEFAULT_PAGE_SIZE: u32 = 500;

/// What a DELETE answered: the object itself (still present, e.g. waiting for finalizers or
/// foreground deletion) or a `Status` (it is gone).
#[derive(Clone, Debug, PartialEq)]
pub enum DeleteResponse<T> {
    /// The object, with `metadata.deletionTimestamp` set.
    Object(T),
    /// `status: Success`; the object is gone.
    Status(Box<Status>),
}

/// `metadata.name` and `metadata.namespace` of an object about to be written.
#[derive(Default, serde::Deserialize)]
struct WriteMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

/// Typed access to one kind of object in one namespace, all namespaces, or cluster-wide.
pub struct Api<K> {
    client: Client,
    namespace: Option<String>,
    /// Lists, watches and writes cut `metadata.managedFields` before decoding
    /// ([`Api::without_managed_fields`]).
    skip_managed_fields: bool,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Api<K> {
    fn clone(&self) -> Self {
        Api {
            client: self.client.clone(),
            namespace: self.namespace.clone(),
            skip_managed_fields: self.skip_managed_fields,
            _kind: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for Api<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("kind", &std::any::type_name::<K>())
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl<K> Api<K>
where
    K: k8s_openapi::Resource + Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
{
    /// Objects in namespace `ns`.
    pub fn namespaced(client: Client, ns: &str) -> Self {
        Api {
            client,
            namespace: Some(ns.to_owned()),
            skip_managed_fields: false,
            _kind: PhantomData,
        }
    }

    /// Objects in the client's default namespace (the context's, or the pod's).
    pub fn default_namespaced(client: Client) -> Self {
        let ns = client.default_namespace().to_owned();
        Self::namespaced(client, &ns)
    }

    /// A namespaced kind across all namespaces (list, watch; create uses the object's
    /// namespace).
    pub fn all(client: Client) -> Self {
        Api {
            client,
            namespace: None,
            skip_managed_fields: false,
            _kind: PhantomData,
        }
    }

    /// A cluster-scoped kind (Namespace, Node, CustomResourceDefinition, ...).
    pub fn cluster(client: Client) -> Self {
        Self::all(client)
    }

    /// This Api, with its lists, watches and writes (the object a create, update or patch
    /// answers) cutting `metadata.managedFields` out of each object's text before decoding it
    /// ([`super::skip_managed_fields`]): the objects come out as if decoded whole and cleared
    /// of the field, without building it first. For callers that drop the field anyway, such
    /// as an informer's cache, or a controller that writes a status or records an event and
    /// reads back only its revision; a GET answers the whole object as before.
    pub fn without_managed_fields(mut self) -> Self {
        self.skip_managed_fields = true;
        self
    }

    /// The namespace this Api is bound to, if any.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The client underneath.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// `/api/v1` or `/apis/<group>/<version>`.
    pub fn group_version_path() -> String {
        if K::GROUP.is_empty() {
            format!("/api/{}", K::VERSION)
        } else {
            format!("/apis/{}/{}", K::GROUP, K::VERSION)
        }
    }

    /// The collection path in `namespace` (or without a namespace segment).
    pub fn collection_path_in(namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) => format!(
                "{}/namespaces/{}/{}",
                Self::group_version_path(),
                url_encode(ns),
                K::URL_PATH_SEGMENT
            ),
            None => format!("{}/{}", Self::group_version_path(), K::URL_PATH_SEGMENT),
        }
    }

    /// This Api's collection path.
    pub fn collection_path(&self) -> String {
        Self::collection_path_in(self.namespace.as_deref())
    }

    fn item_path(&self, name: &str) -> Result<String> {
        if name.is_empty() {
            return Err(Error::Other(format!(
                "{}: an object name is required",
                K::KIND
            )));
        }
        Ok(format!("{}/{}", self.collection_path(), url_encode(name)))
    }

    fn request(method: Method, uri: String, body: Bytes) -> Result<Request<Bytes>> {
        Request::builder()
            .method(method)
            .uri(&uri)
            .body(body)
            .map_err(|e| Error::Other(format!("building request for {uri}: {e}")))
    }

    /// Sends a request inside a `request` span (`verb`, `resource`, `subresource`, `code`;
    /// see [`crate::controllers`], "Traces"), a child of the caller's span (a sync's), and
    /// returns the body of a 2xx answer.
    async fn send(&self, req: Request<Bytes>) -> Result<Bytes> {
        let path = req.uri().path();
        let subresource = ["status", "scale"]
            .into_iter()
            .find(|s| path.ends_with(&format!("/{s}")))
            .unwrap_or("");
        let span = tracing::debug_span!(
            "request",
            verb = %req.method(),
            resource = K::URL_PATH_SEGMENT,
            subresource,
            code = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        let answer = self.client.request_raw(req).instrument(span.clone()).await;
        match answer {
            Ok((status, body)) => {
                span.record("code", status.as_u16());
                if status.is_success() {
                    Ok(body)
                } else {
                    Err(Error::from_response(status.as_u16(), &body))
                }
            }
            Err(e) => {
                span.record("error", tracing::field::display(&e));
                Err(e)
            }
        }
    }

    async fn json<T: DeserializeOwned>(&self, req: Request<Bytes>, what: &str) -> Result<T> {
        let body = self.send(req).await?;
        Self::decode(&body, what)
    }

    /// `body` as a `T`; a decode error names `what` was read ("list of At").
    fn decode<T: DeserializeOwned>(body: &[u8], what: &str) -> Result<T> {
        serde_json::from_slice(body).map_err(|source| Error::Decode {
            what: format!("{what} {}", K::KIND),
            source,
        })
    }

    /// GET one object.
    pub async fn get(&self, name: &str) -> Result<K> {
        let req = Self::request(Method::GET, self.item_path(name)?, Bytes::new())?;
        self.json(req, "get").await
    }

    /// GET one object; `None` when it does not exist.
    pub async fn get_opt(&self, name: &str) -> Result<Option<K>> {
        match self.get(name).await {
            Ok(k) => Ok(Some(k)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One LIST request (one page when `params.limit` is set).
    pub async fn list(&self, params: &ListParams) -> Result<ObjectList<K>> {
        let uri = format!("{}{}", self.collection_path(), params.to_query());
        let req = Self::request(Method::GET, uri, Bytes::new())?;
        let body = self.send(req).await?;
        let cut = (self.skip_managed_fields)
            .then(|| super::skip_managed_fields::list_without_managed_fields(&body))
            .flatten();
        // Item by item: an object that does not decode as `K` is named in `undecodable`
        // instead of failing the whole list (see `super::undecodable`).
        super::undecodable::decode_list(cut.as_deref().unwrap_or(&body), K::KIND).map_err(
            |source| Error::Decode {
                what: format!("list of {}", K::KIND),
                source,
            },
        )
    }

    /// Lists everything, page by page (`limit` from the params, default 500), as client-go's
    /// `pager.List`. If a continue token expires mid-way (410), the pages read so far are
    /// dropped and one unpaged list is made instead, so the result is always one consistent
    /// snapshot. The returned list has no `continue` token and the snapshot's resourceVersion.
    pub async fn list_all(&self, params: &ListParams) -> Result<ObjectList<K>> {
        let mut page_params = params.clone();
        if page_params.limit.is_none_or(|l| l == 0) {
            page_params.limit = Some(DEFAULT_PAGE_SIZE);
        }
        let mut result: Option<ObjectList<K>> = None;
        loop {
            let page = match self.list(&page_params).await {
                Ok(p) => p,
                Err(e) if e.is_gone() && page_params.continue_token.is_some() => {
                    tracing::info!(
                        kind = K::KIND,
                        "continue token expired while paging; falling back to a full list"
                    );
                    let mut full = params.clone();
                    full.limit = None;
                    full.continue_token = None;
                    return self.list(&full).await;
                }
                Err(e) => return Err(e),
            };
            let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
            match &mut result {
                None => result = Some(page),
                Some(acc) => {
                    acc.items.extend(page.items);
                    acc.undecodable.extend(page.undecodable);
                    acc.metadata.continue_ = page.metadata.continue_;
                }
            }
            match next {
                Some(token) => {
                    page_params.continue_token = Some(token);
                    // A continue token carries the snapshot's resourceVersion itself; the
                    // server rejects both together.
                    page_params.resource_version = None;
                    page_params.resource_version_match = None;
                }
                None => break,
            }
        }
        let mut list = result.unwrap_or_else(|| ObjectList {
            metadata: Default::default(),
            items: Vec::new(),
            undecodable: Vec::new(),
        });
        list.metadata.continue_ = None;
        list.metadata.remaining_item_count = None;
        Ok(list)
    }

    fn post_query(pp: &PostParams) -> String {
        let mut q = String::new();
        if pp.dry_run {
            push_query(&mut q, "dryRun", "All");
        }
        if let Some(m) = pp.field_manager.as_deref().filter(|m| !m.is_empty()) {
            push_query(&mut q, "fieldManager", m);
        }
        q
    }

    /// Encodes `obj` once, straight to JSON bytes, and reads back only its
    /// `metadata.name`/`metadata.namespace` (the URL needs them): no intermediate
    /// `serde_json::Value` tree, which cost a second allocation of every field of every write.
    fn to_body(obj: &K) -> Result<(WriteMeta, Bytes)> {
        let bytes = serde_json::to_vec(obj).map_err(|source| Error::Decode {
            what: format!("encoding {}", K::KIND),
            source,
        })?;
        // The encoder writes `metadata` third (after apiVersion and kind): read up to it only.
        let meta = match super::skip_managed_fields::member_value(&bytes, 0, b"\"metadata\"") {
            Some(at) => serde_json::from_slice::<Option<WriteMeta>>(&bytes[at])
                .map_err(|source| Error::Decode {
                    what: format!("encoding {}", K::KIND),
                    source,
                })?
                .unwrap_or_default(),
            None => WriteMeta::default(),
        };
        Ok((meta, Bytes::from(bytes)))
    }

    /// The namespace a write of an object with `meta` goes to: this Api's, else the object's own.
    fn write_namespace<'a>(&'a self, meta: &'a WriteMeta) -> Option<&'a str> {
        self.namespace
            .as_deref()
            .or_else(|| meta.namespace.as_deref().filter(|n| !n.is_empty()))
    }

    /// POST a new object.
    pub async fn create(&self, pp: &PostParams, obj: &K) -> Result<K> {
        self.create_as(pp, obj).await
    }

    /// [`Api::create`], the answer decoded as `T`: a type with only the fields the caller keeps
    /// (the event sink's name, revision and count), or [`serde::de::IgnoredAny`] when the caller
    /// keeps nothing of it (a controller that creates a pod and learns of it from its informer).
    /// Decoding a whole object to drop it was a twentieth of a controller's CPU per create.
    pub async fn create_as<T: DeserializeOwned>(&self, pp: &PostParams, obj: &K) -> Result<T> {
        let (meta, body) = Self::to_body(obj)?;
        let uri = format!(
            "{}{}",
            Self::collection_path_in(self.write_namespace(&meta)),
            Self::post_query(pp)
        );
        let req = Self::request(Method::POST, uri, body)?;
        self.write(req, "create", None).await
    }

    /// Sends a write and decodes the object it answers with; when the sync this task runs is
    /// traced, the write is recorded as a hop of its key ([`crate::keytrace::record_write`]).
    async fn write<T: DeserializeOwned>(
        &self,
        req: Request<Bytes>,
        verb: &str,
        subresource: Option<&str>,
    ) -> Result<T> {
        let sent = keytrace::is_traced().then(tokio::time::Instant::now);
        let body = self.send(req).await?;
        if let Some(sent) = sent {
            record_written::<K>(&body, verb, subresource, sent);
        }
        if self.skip_managed_fields {
            super::skip_managed_fields::decode(&body, |text| Self::decode(text, verb))
        } else {
            Self::decode(&body, verb)
        }
    }

    async fn put<T: DeserializeOwned>(
        &self,
        pp: &PostParams,
        obj: &K,
        subresource: &str,
    ) -> Result<T> {
        let (meta, body) = Self::to_body(obj)?;
        let name = meta
            .name
            .as_deref()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                Error::Other(format!("update of {}: metadata.name is required", K::KIND))
            })?;
        let uri = format!(
            "{}/{}{subresource}{}",
            Self::collection_path_in(self.write_namespace(&meta)),
            url_encode(name),
            Self::post_query(pp)
        );
        let req = Self::request(Method::PUT, uri, body)?;
        let sub = subresource.strip_prefix('/').filter(|s| !s.is_empty());
        self.write(req, "update", sub).await
    }

    /// PUT the whole object (its `metadata.resourceVersion` guards against lost updates).
    pub async fn update(&self, pp: &PostParams, obj: &K) -> Result<K> {
        self.put(pp, obj, "").await
    }

    /// PUT the object's status (the `/status` subresource: spec changes are ignored).
    pub async fn update_status(&self, pp: &PostParams, obj: &K) -> Result<K> {
        self.put(pp, obj, "/status").await
    }

    /// [`Api::update_status`], the answer decoded as `T` (see [`Api::create_as`]): a status
    /// writer that keeps only the new resourceVersion and the status reads only those.
    pub async fn update_status_as<T: DeserializeOwned>(
        &self,
        pp: &PostParams,
        obj: &K,
    ) -> Result<T> {
        self.put(pp, obj, "/status").await
    }

    /// A PATCH, the answer decoded as `T` (see [`Api::create_as`]).
    pub(crate) async fn patch_at<T: DeserializeOwned>(
        &self,
        name: &str,
        pp: &PatchParams,
        patch: &Patch,
        subresource: &str,
    ) -> Result<T> {
        let mut q = String::new();
        if pp.dry_run {
            push_query(&mut q, "dryRun", "All");
        }
        match pp.field_manager.as_deref().filter(|m| !m.is_empty()) {
            Some(m) => push_query(&mut q, "fieldManager", m),
            None if matches!(patch, Patch::Apply(_)) => {
                return Err(Error::Other(
                    "server-side apply needs PatchParams::field_manager".into(),
                ));
            }
            None => {}
        }
        if pp.force {
            if !matches!(patch, Patch::Apply(_)) {
                return Err(Error::Other(
                    "PatchParams::force applies only to server-side apply patches".into(),
                ));
            }
            push_query(&mut q, "force", "true");
        }
        let body = serde_json::to_vec(patch.body()).map_err(|source| Error::Decode {
            what: "encoding patch".into(),
            source,
        })?;
        let uri = format!("{}{subresource}{q}", self.item_path(name)?);
        let mut req = Self::request(Method::PATCH, uri, Bytes::from(body))?;
        req.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(patch.content_type()),
        );
        let sub = subresource.strip_prefix('/').filter(|s| !s.is_empty());
        self.write(req, "patch", sub).await
    }

    /// PATCH the object.
    pub async fn patch(&self, name: &str, pp: &PatchParams, patch: &Patch) -> Result<K> {
        self.patch_at(name, pp, patch, "").await
    }

    /// PATCH the object's status subresource.
    pub async fn patch_status(&self, name: &str, pp: &PatchParams, patch: &Patch) -> Result<K> {
        self.patch_at(name, pp, patch, "/status").await
    }

    fn delete_body(dp: &DeleteParams) -> Result<Bytes> {
        let mut v = serde_json::to_value(dp).map_err(|source| Error::Decode {
            what: "encoding DeleteOptions".into(),
            source,
        })?;
        if let Some(o) = v.as_object_mut() {
            o.insert("kind".into(), "DeleteOptions".into());
            o.insert("apiVersion".into(), "v1".into());
        }
        serde_json::to_vec(&v)
            .map(Bytes::from)
            .map_err(|source| Error::Decode {
                what: "encoding DeleteOptions".into(),
                source,
            })
    }

    fn object_or_status<T: DeserializeOwned>(body: &[u8]) -> Result<DeleteResponse<T>> {
        /// Only the body's `kind`, to choose the type; the body is then decoded once, from its
        /// bytes (no `Value` tree, so `T` has one decoder, the one every other response uses).
        #[derive(serde::Deserialize)]
        struct KindOnly<'a> {
            #[serde(borrow, default)]
            kind: Option<std::borrow::Cow<'a, str>>,
        }
        let head: KindOnly<'_> = serde_json::from_slice(body).map_err(|source| Error::Decode {
            what: format!("delete response for {}", K::KIND),
            source,
        })?;
        if head.kind.as_deref() == Some("Status") {
            let s: Status = serde_json::from_slice(body).map_err(|source| Error::Decode {
                what: "delete Status".into(),
                source,
            })?;
            Ok(DeleteResponse::Status(Box::new(s)))
        } else {
            serde_json::from_slice(body)
                .map(DeleteResponse::Object)
                .map_err(|source| Error::Decode {
                    what: format!("delete response for {}", K::KIND),
                    source,
                })
        }
    }

    /// DELETE one object.
    pub async fn delete(&self, name: &str, dp: &DeleteParams) -> Result<DeleteResponse<K>> {
        let req = Self::request(
            Method::DELETE,
            self.item_path(name)?,
            Self::delete_body(dp)?,
        )?;
        let sent = keytrace::is_traced().then(tokio::time::Instant::now);
        let body = self.send(req).await?;
        if let Some(sent) = sent {
            record_written::<K>(&body, "delete", None, sent);
        }
        Self::object_or_status(&body)
    }

    /// DELETE every object matching the list params' selectors.
    pub async fn delete_collection(
        &self,
        dp: &DeleteParams,
        lp: &ListParams,
    ) -> Result<DeleteResponse<ObjectList<K>>> {
        let uri = format!("{}{}", self.collection_path(), lp.to_query());
        let req = Self::request(Method::DELETE, uri, Self::delete_body(dp)?)?;
        let body = self.send(req).await?;
        Self::object_or_status(&body)
    }

    /// Opens a watch (see [`crate::client::watch`]). The stream ends when the server closes it
    /// (after `timeoutSeconds`); a 410 arrives as `WatchEvent::Error` with code 410, or as an
    /// `Err` that `is_gone()` when the server refuses the request outright.
    pub async fn watch(&self, params: &WatchParams) -> Result<WatchStream<K>> {
        let uri = format!("{}{}", self.collection_path(), params.to_query());
        let req = Self::request(Method::GET, uri, Bytes::new())?;
        let mut decoder = WatchDecoder::with_max_line(DEFAULT_MAX_LINE);
        if self.skip_managed_fields {
            decoder = decoder.skipping_managed_fields();
        }
        self.client.request_stream_with(req, decoder).await
    }
}

/// Records a finished write of a traced sync: the object's kind, `namespace/name` and the
/// resourceVersion the server answered with, read from the answer (only while traced).
fn record_written<K: k8s_openapi::Resource>(
    body: &[u8],
    verb: &str,
    subresource: Option<&str>,
    sent: tokio::time::Instant,
) {
    #[derive(serde::Deserialize)]
    struct Answer<'a> {
        #[serde(borrow, default)]
        kind: Option<&'a str>,
        #[serde(borrow, default)]
        metadata: Option<AnswerMeta<'a>>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct AnswerMeta<'a> {
        #[serde(borrow, default)]
        name: Option<&'a str>,
        #[serde(borrow, default)]
        namespace: Option<&'a str>,
        #[serde(borrow, default)]
        resource_version: Option<&'a str>,
    }
    let Ok(answer) = serde_json::from_slice::<Answer<'_>>(body) else {
        return;
    };
    let meta = answer.metadata.as_ref();
    let name = meta.and_then(|m| m.name).unwrap_or_default();
    let object = match meta.and_then(|m| m.namespace).filter(|n| !n.is_empty()) {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    };
    // A delete answered with a Status names no object version.
    let rv = (answer.kind != Some("Status"))
        .then(|| meta.and_then(|m| m.resource_version))
        .flatten();
    keytrace::record_write(verb, K::KIND, &object, subresource, rv, sent);
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Namespace, Pod};

    #[test]
    fn paths_follow_group_and_scope() {
        assert_eq!(
            Api::<Pod>::collection_path_in(Some("kube-system")),
            "/api/v1/namespaces/kube-system/pods"
        );
        assert_eq!(Api::<Pod>::collection_path_in(None), "/api/v1/pods");
        assert_eq!(
            Api::<Deployment>::collection_path_in(Some("a")),
            "/apis/apps/v1/namespaces/a/deployments"
        );
        assert_eq!(
            Api::<Namespace>::collection_path_in(None),
            "/api/v1/namespaces"
        );
        assert_eq!(
            Api::<k8s_openapi::api::batch::v1::Job>::collection_path_in(Some("d")),
            "/apis/batch/v1/namespaces/d/jobs"
        );
    }

    #[test]
    fn delete_answer_is_object_or_status() {
        let s = Api::<Pod>::object_or_status::<Pod>(
            br#"{"kind":"Status","apiVersion":"v1","status":"Success","details":{"name":"p"}}"#,
        )
        .unwrap();
        assert!(matches!(s, DeleteResponse::Status(st) if st.status.as_deref() == Some("Success")));
        let o = Api::<Pod>::object_or_status::<Pod>(
            br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","deletionTimestamp":"2024-01-01T00:00:00Z"}}"#,
        )
        .unwrap();
        assert!(matches!(o, DeleteResponse::Object(p) if p.metadata.name.as_deref() == Some("p")));
    }
}
