//! Pure request logic of the embedded API server: selectors, patches, schema validation and
//! pruning, tables, OpenAPI documents, protobuf decoding. No I/O lives here.
//!
//! Each submodule is a set of functions from JSON values (and request parameters) to JSON values
//! or errors, so it can be tested without a socket and reused by anyone who wants, for example,
//! to apply a strategic merge patch to an object in memory. The HTTP layer in the parent module
//! decides *when* to call them and turns their errors into `metav1.Status` answers.
//!
//! | module | what it mirrors in Kubernetes |
//! |---|---|
//! | [`openapi_docs`] | building the OpenAPI v3 documents of kube-openapi `handler3` (the `/openapi/v3` index and per-group-version documents) |
//! | [`openapi_v2_docs`] | building the `/openapi/v2` document (gnostic protobuf) that kubectl ≤ 1.28 verifies against |
//! | [`patch`] | the PATCH handlers of `apiserver/pkg/endpoints/handlers/patch.go`, `jsonpatch`, `strategicpatch`, the SSA field manager |
//! | [`protobuf`] | `runtime/serializer/protobuf`: the `k8s\\0` + `runtime.Unknown` request envelope |
//! | [`schema`] | apiextensions structural schemas: `validation.go`, `pruning`, `NewStructural`, kube-openapi validate |
//! | [`selectors`] | `labels.Parse` and `fields.ParseSelector` from apimachinery |
//! | [`printers`] | server-side printing, `rest.TableConvertor`: the CRD `tableconvertor`, the pod printer, the default convertor |

pub mod openapi_docs;
pub mod openapi_v2_docs;
pub mod patch;
pub mod printers;
pub mod protobuf;
pub mod schema;
pub mod selectors;
