//! Table output: what `kubectl get` prints.
//!
//! `kubectl get` does not format objects itself. It asks the server for a
//! `meta.k8s.io/v1` **Table** (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`) and
//! prints the columns and cells it gets back. So the server decides what `kubectl get ats`
//! shows: for a custom resource, `Name` plus the CRD version's `additionalPrinterColumns`; for
//! a built-in kind with a printer, the real server's columns (pods: the familiar `NAME READY
//! STATUS RESTARTS AGE`, deployments: `NAME READY UP-TO-DATE AVAILABLE AGE`, ...); for any other
//! kind the default `Name` / `Created At`. The cell logic lives in [`crate::endpoints::printers`]; this module picks the
//! columns for a resource and applies them to gets, lists and watch events. In a watch, only the
//! first event's Table carries `columnDefinitions` (the real server sets `NoHeaders` after it).

use std::sync::Arc;

use serde_json::Value;

use crate::api::query::Query;
use crate::api::status::ApiError;
use crate::endpoints::printers::{self as cells, ColumnDef, IncludeObject};
use crate::endpoints::watch::Renderer;
use crate::registry::resources::ResourceDef;

/// The response `Content-Type` of a Table.
pub const CONTENT_TYPE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// The columns `kubectl get` shows for a resource.
pub fn columns(def: &ResourceDef) -> Vec<ColumnDef> {
    if let Some(custom) = &def.custom {
        return cells::crd_columns(&Value::Array(custom.printer_columns.clone()));
    }
    cells::builtin_columns(&def.group, &def.plural).unwrap_or_else(cells::default_columns)
}

/// What each row carries, from the `includeObject` query parameter (`Metadata` by default:
/// a `PartialObjectMetadata`; `Object`, which `kubectl get --sort-by` asks for; or `None`).
pub fn include_object(q: &Query) -> Result<IncludeObject, ApiError> {
    IncludeObject::parse(q.get("includeObject").unwrap_or_default()).map_err(ApiError::bad_request)
}

/// A Table of `items` (as served) at list revision `rv`.
pub fn render(
    def: &ResourceDef,
    items: &[Value],
    rv: &str,
    continue_: Option<&str>,
    include: IncludeObject,
) -> Value {
    cells::to_table_at(
        items,
        &columns(def),
        rv,
        continue_,
        include,
        jiff::Timestamp::now(),
    )
}

/// Renders each watch event's object as a one-row Table.
pub fn renderer(def: Arc<ResourceDef>, include: IncludeObject) -> Renderer {
    let cols = columns(&def);
    Arc::new(move |obj: &Value, first: bool| {
        let rv = obj["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut t = cells::to_table_at(
            std::slice::from_ref(obj),
            &cols,
            &rv,
            None,
            include,
            jiff::Timestamp::now(),
        );
        if !first && let Some(m) = t.as_object_mut() {
            m.insert("columnDefinitions".into(), Value::Null);
        }
        t
    })
}
