//! Pure request logic of the embedded API server: selectors, patches, schema validation and
//! pruning, tables, OpenAPI documents, protobuf decoding. No I/O lives here.
