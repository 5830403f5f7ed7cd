//! The limits that keep one request from taking the server down: kube-apiserver's and etcd's,
//! in one place.
//!
//! A real cluster bounds every request several times over, and each bound answers with its own
//! words. This server keeps the same bounds and the same answers, so no single body can make it
//! allocate more than a bounded multiple of that body, or hold a CPU for more than milliseconds:
//!
//! | bound | kube-apiserver / etcd | here | answer |
//! |---|---|---|---|
//! | request body | `MaxRequestBodyBytes` 3 MiB (`limitedReadBody`) | [`crate::endpoints::handlers::MAX_BODY`] | `413 RequestEntityTooLarge`, `Request entity too large: limit is 3145728` |
//! | JSON patch operations | `maxJSONPatchOperations` 10,000 | [`crate::registry::patch::json_patch_limited`] | `413`, `Request entity too large: The allowed maximum operations in a JSON patch is 10000, got N` |
//! | bytes added by JSON patch `copy` | `JSONPatchMaxCopyBytes` 3 MiB | the same | `422 Invalid` |
//! | JSON depth | `encoding/json`'s `maxNestingDepth` (`sigs.k8s.io/json`, `staging/src/k8s.io/apimachinery/pkg/util/json`), 10,000 | [`json_too_deep`] before parsing, 512 ([`MAX_JSON_DEPTH`]; serde_json's own limit of 128 lifted) | `400`, `error decoding JSON request body: exceeded max depth of 512` |
//! | YAML depth | go-yaml's `max_flow_level` / `max_indents`, 10,000 | [`parse_yaml`], 1,000 ([`MAX_YAML_DEPTH`]) | `400`, `yaml: line N: exceeded max depth of 1000` |
//! | YAML aliases expanding | go-yaml's "excessive aliasing" check | [`parse_yaml`] | `400`, `yaml: document contains excessive aliasing` |
//! | ConfigMap `data` + `binaryData`, Secret `data` | `core.MaxSecretSize` 1 MiB (`ValidateConfigMap`, `ValidateSecret`) | [`MAX_SECRET_SIZE`], checked by [`crate::registry::core::configmaps`] and [`crate::registry::core::secrets`] | `422`, `: Too long: may not be more than 1048576 bytes` (ConfigMap), `data: Too long: ...` (Secret) |
//! | a stored object | etcd `--max-request-bytes` 1.5 MiB | [`check_stored_size`] | `500`, `etcdserver: request is too large` (no reason: the real server passes etcd's error through) |
//! | field errors of one object | none (Go builds them all) | [`bounded_meta_errors`] | `422` with at most [`MAX_FIELD_ERRORS`] distinct causes |
//!
//! Over HTTP/2 the `413` for a body still being sent is a complete response (`HEADERS`, then
//! `DATA` with the Status and `END_STREAM`) followed by `RST_STREAM(NO_ERROR)`, RFC 9113 §8.1's
//! "the server has answered, stop sending", with or without a `Content-Length` (checked frame
//! by frame). curl 7.88 reports that reset as "Stream error in the HTTP/2 framing layer" after
//! writing the Status out; Go's server ends such a stream the same way.
//!
//! Two deviations, both on bodies no client sends by accident: the causes of one `422` are
//! de-duplicated and capped at [`MAX_FIELD_ERRORS`] (kube-apiserver lists a million identical
//! `metadata.ownerReferences.uid: Invalid value: ""` causes for a million empty references; its
//! message already de-duplicates them), and the YAML depth is estimated by a linear pre-scan of
//! the text (so a 100,000-deep document is refused in a millisecond instead of going through
//! libyaml's quadratic scanner) rather than measured by the parser.

use apimachinery::validation::{self as v, FieldError};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::api::status::ApiError;

/// etcd's default `--max-request-bytes`: a write whose object is larger is refused.
pub const MAX_OBJECT_BYTES: u64 = 1_572_864;

/// `core.MaxSecretSize`: the most bytes a ConfigMap's or a Secret's data may total.
pub const MAX_SECRET_SIZE: usize = 1024 * 1024;

/// The deepest YAML nesting parsed. go-yaml's limit (`max_flow_level`, `max_indents`) is
/// 10,000; the YAML decoder here refuses anything deeper than 128 levels anyway (its recursion
/// limit), and libyaml's scanner is quadratic in the depth (a 9,999-deep document costs it a
/// second), so the pre-scan refuses at 1,000, where the parse costs milliseconds.
pub const MAX_YAML_DEPTH: usize = 1_000;

/// The deepest JSON nesting a body (or a stored object) may have. serde_json's own recursion
/// limit, 128, refuses a CustomResourceDefinition whose schema nests 70 levels (each level is
/// an object and its `properties`), which kube-apiserver accepts: its JSON decoder
/// (`sigs.k8s.io/json`, Go's `encoding/json` scanner) refuses only past `maxNestingDepth`,
/// 10,000. Here the limit is 512, checked by a linear pre-scan of the text ([`json_too_deep`])
/// before a parse without serde_json's limit, so a 100,000-deep body is refused in one pass
/// over its bytes and the recursive walks over an accepted value (validation, pruning,
/// serialization, dropping it) stay within a thread's stack.
pub const MAX_JSON_DEPTH: usize = 512;

/// The most distinct field errors one validation reports.
pub const MAX_FIELD_ERRORS: usize = 1_000;

/// Collections longer than this are validated in chunks of this size, so the errors of a
/// million-entry list never exist all at once.
const CHUNK: usize = 1_000;

/// Counts bytes and fails once they pass a limit.
struct CountUpTo {
    count: u64,
    limit: u64,
}

impl std::io::Write for CountUpTo {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.count += buf.len() as u64;
        if self.count > self.limit {
            return Err(std::io::Error::other("over the limit"));
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether JSON text nests deeper than `max` arrays and objects, in one pass over the bytes
/// (brackets inside strings do not count; malformed text is left to the parser).
pub fn json_too_deep(text: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in text {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// A JSON deserializer over `text` bounded by [`MAX_JSON_DEPTH`] instead of serde_json's 128:
/// an error (`exceeded max depth of 512`) for deeper text, found before any parsing.
pub fn json_deserializer(
    text: &[u8],
) -> Result<serde_json::Deserializer<serde_json::de::SliceRead<'_>>, serde_json::Error> {
    if json_too_deep(text, MAX_JSON_DEPTH) {
        return Err(<serde_json::Error as serde::de::Error>::custom(format!(
            "exceeded max depth of {MAX_JSON_DEPTH}"
        )));
    }
    let mut de = serde_json::Deserializer::from_slice(text);
    de.disable_recursion_limit();
    Ok(de)
}

/// `serde_json::from_slice` bounded by [`MAX_JSON_DEPTH`] (see [`json_deserializer`]).
pub fn json_from_slice<T: serde::de::DeserializeOwned>(
    text: &[u8],
) -> Result<T, serde_json::Error> {
    let mut de = json_deserializer(text)?;
    let v = T::deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// Whether `v`'s JSON is longer than `limit` bytes, measured without building it and without
/// walking more than `limit` bytes of it. A bound first ([`json_len_bound`]: no formatting,
/// a walk of the tree), and the exact length only when the bound is over the limit: an object
/// far below it (every ordinary write against etcd's 1.5 MiB) is not encoded at all.
pub fn json_longer_than(v: &Value, limit: u64) -> bool {
    if json_len_bound(v, limit) <= limit {
        return false;
    }
    let mut w = CountUpTo { count: 0, limit };
    // As a client is served it: field sets unfolded ([`crate::api::folded`]).
    serde_json::to_writer(&mut w, &crate::api::folded::Unfolded(v)).is_err()
}

/// At least the length of `v`'s compact JSON, and at most `limit + 1` once it is over
/// `limit`: every string byte counted as the six of a `\u00XX` escape, every number as 24
/// bytes (the longest an `i64`, a `u64` or an `f64` is written).
fn json_len_bound(v: &Value, limit: u64) -> u64 {
    fn walk(v: &Value, total: &mut u64, limit: u64) {
        if *total > limit {
            return;
        }
        let str_bound = |s: &str| 2 + 6 * s.len() as u64;
        match v {
            Value::Null | Value::Bool(_) => *total += 5,
            Value::Number(_) => *total += 24,
            Value::String(s) => *total += str_bound(s),
            Value::Array(items) => {
                *total += 2 + items.len() as u64;
                for item in items {
                    walk(item, total, limit);
                }
            }
            Value::Object(m) => {
                *total += 2 + m.len() as u64;
                for (k, item) in m {
                    *total += str_bound(k) + 1;
                    walk(item, total, limit);
                }
            }
        }
    }
    let mut total = 0;
    walk(v, &mut total, limit);
    total.min(limit.saturating_add(1))
}

/// etcd's refusal of a write larger than [`MAX_OBJECT_BYTES`], as kube-apiserver passes it on:
/// `500` with the message `etcdserver: request is too large` and no reason. Checked just before
/// an object is stored (a `dryRun` write never reaches etcd, so it is not checked there).
pub fn check_stored_size(obj: &Value) -> Result<(), ApiError> {
    if json_longer_than(obj, MAX_OBJECT_BYTES) {
        return Err(ApiError::new(500, "", "etcdserver: request is too large"));
    }
    Ok(())
}

/// Keeps the distinct errors, in order, at most [`MAX_FIELD_ERRORS`] of them.
#[derive(Default)]
struct Distinct {
    seen: std::collections::HashSet<(String, String)>,
    out: Vec<FieldError>,
}

impl Distinct {
    fn full(&self) -> bool {
        self.out.len() >= MAX_FIELD_ERRORS
    }
    fn extend(&mut self, errs: Vec<FieldError>) {
        for e in errs {
            if self.full() {
                return;
            }
            if self.seen.insert((e.field.clone(), e.message.clone())) {
                self.out.push(e);
            }
        }
    }
}

/// Runs a list validator over `list` a chunk at a time (a list as long as [`CHUNK`] or shorter
/// in one call, exactly as before). Elements whose `key` was seen before are skipped: they
/// would repeat errors already found (`None` keeps the element whatever it is).
fn chunked_list(
    list: &Value,
    field: &str,
    f: fn(&Value, &str) -> Vec<FieldError>,
    key: impl Fn(&Value) -> Option<String>,
    acc: &mut Distinct,
) {
    match list.as_array() {
        Some(items) if items.len() > CHUNK => {
            let mut seen = std::collections::HashSet::new();
            let mut chunk = Vec::with_capacity(CHUNK);
            for item in items {
                if acc.full() {
                    return;
                }
                if key(item).is_some_and(|k| !seen.insert(k)) {
                    continue;
                }
                chunk.push(item.clone());
                if chunk.len() == CHUNK {
                    acc.extend(f(&Value::Array(std::mem::take(&mut chunk)), field));
                }
            }
            if !chunk.is_empty() && !acc.full() {
                acc.extend(f(&Value::Array(chunk), field));
            }
        }
        _ => acc.extend(f(list, field)),
    }
}

/// What of an owner reference its errors depend on: values only where they are invalid
/// (`ValidateOwnerReferences` prints the bad value, never a good one), so a million references
/// that differ only in valid names are one. The first two controllers are kept as they are
/// (two are enough to report "only one reference can have Controller set to true").
fn owner_ref_key(controllers: &std::cell::Cell<usize>) -> impl Fn(&Value) -> Option<String> + '_ {
    move |r| {
        let s = |k: &str| r[k].as_str().unwrap_or_default();
        if r["controller"].as_bool() == Some(true) {
            controllers.set(controllers.get() + 1);
            if controllers.get() <= 2 {
                return None;
            }
        }
        let api_version = s("apiVersion");
        let bad_version = api_version
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .is_empty();
        let event = s("kind") == "Event";
        Some(format!(
            "{}\u{0}{}\u{0}{}{}{}",
            if bad_version || event {
                api_version
            } else {
                ""
            },
            if event {
                "Event"
            } else if s("kind").is_empty() {
                ""
            } else {
                "k"
            },
            s("name").is_empty(),
            s("uid").is_empty(),
            r["controller"].as_bool() == Some(true),
        ))
    }
}

/// Runs a map validator over `map` a chunk of entries at a time.
fn chunked_map(
    map: &Value,
    field: &str,
    f: fn(&Value, &str) -> Vec<FieldError>,
    acc: &mut Distinct,
) {
    match map.as_object() {
        Some(m) if m.len() > CHUNK => {
            let entries: Vec<(&String, &Value)> = m.iter().collect();
            for chunk in entries.chunks(CHUNK) {
                if acc.full() {
                    return;
                }
                let part: Map<String, Value> = chunk
                    .iter()
                    .map(|(k, v)| ((*k).clone(), (*v).clone()))
                    .collect();
                acc.extend(f(&Value::Object(part), field));
            }
        }
        _ => acc.extend(f(map, field)),
    }
}

/// `ValidateObjectMeta`'s labels, annotations, ownerReferences and finalizers rules (the
/// rules of [`apimachinery::validation::validate_object_meta`], in its order), bounded: long
/// collections are checked a chunk at a time and the errors kept are distinct and at most
/// [`MAX_FIELD_ERRORS`], so a million empty `ownerReferences` cost four errors, not four million.
pub fn bounded_meta_errors(meta: &Value) -> Vec<FieldError> {
    let mut acc = Distinct::default();
    chunked_map(
        &meta["labels"],
        "metadata.labels",
        v::validate_labels,
        &mut acc,
    );
    let annotations = &meta["annotations"];
    chunked_map(
        annotations,
        "metadata.annotations",
        v::validate_annotations,
        &mut acc,
    );
    if let Some(m) = annotations.as_object()
        && m.len() > CHUNK
    {
        // The size rule is over the whole map; chunks see only parts of it.
        let total: usize = m
            .iter()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if total > v::TOTAL_ANNOTATION_SIZE_LIMIT_B {
            acc.extend(vec![FieldError::too_long_bytes(
                "metadata.annotations",
                v::TOTAL_ANNOTATION_SIZE_LIMIT_B,
            )]);
        }
    }
    let controllers = std::cell::Cell::new(0);
    chunked_list(
        &meta["ownerReferences"],
        "metadata.ownerReferences",
        v::validate_owner_references,
        owner_ref_key(&controllers),
        &mut acc,
    );
    let finalizers = &meta["finalizers"];
    chunked_list(
        finalizers,
        "metadata.finalizers",
        v::validate_finalizers,
        |f| Some(f.to_string()),
        &mut acc,
    );
    if let Some(list) = finalizers.as_array()
        && list.len() > CHUNK
    {
        // The "not both" rule is over the whole list.
        let has = |f: &str| list.iter().any(|x| x.as_str() == Some(f));
        if has("orphan") && has("foregroundDeletion") {
            acc.extend(vec![FieldError::invalid_value(
                "metadata.finalizers",
                finalizers,
                "finalizer orphan and foregroundDeletion cannot be both set",
            )]);
        }
    }
    acc.out
}

/// A body whose `metadata` holds a collection longer than `CHUNK` entries is validated as soon
/// as it is decoded, outside the store lock, and refused there when its metadata is invalid:
/// the later steps (typed decoding, which turns each empty `{}` of a million `ownerReferences`
/// into a full `OwnerReference`, and everything else done under the lock) never see it. Bodies
/// with ordinary metadata go on unchanged, so the real server's order of checks holds for them.
pub fn precheck_metadata(kind: &str, group: &str, body: &Value) -> Result<(), ApiError> {
    let meta = &body["metadata"];
    let large = ["ownerReferences", "finalizers"]
        .iter()
        .any(|k| meta[k].as_array().is_some_and(|a| a.len() > CHUNK))
        || ["labels", "annotations"]
            .iter()
            .any(|k| meta[k].as_object().is_some_and(|m| m.len() > CHUNK));
    if !large {
        return Ok(());
    }
    let errs = bounded_meta_errors(meta);
    if errs.is_empty() {
        return Ok(());
    }
    let name = meta["name"].as_str().unwrap_or_default();
    Err(ApiError::invalid(
        kind,
        group,
        name,
        crate::api::status::to_causes(errs),
    ))
}

// ---------------------------------------------------------------------------------------------
// YAML

/// The nesting a YAML text can reach, estimated in one pass over its bytes: the flow level
/// (`[` and `{` that open a collection, outside quotes, comments and block scalars) and, per
/// line, the indentation plus the chain of `- ` / `? ` indicators that open nested block
/// collections (`- - - x`). Both are upper bounds of what the parser builds, up to
/// indentation that is only text. Returns the first line whose nesting passes `max`.
pub fn yaml_too_deep(text: &[u8], max: usize) -> Option<usize> {
    let mut flow: usize = 0;
    let mut line = 1usize;
    let mut quote: Option<u8> = None;
    // Indentation of the line that opened a block scalar (`|`, `>`): deeper lines are text.
    let mut block_scalar: Option<usize> = None;
    for raw in text.split(|b| *b == b'\n') {
        let indent = raw.iter().take_while(|b| **b == b' ').count();
        let blank = raw[indent..].iter().all(|b| b.is_ascii_whitespace());
        if let Some(parent) = block_scalar {
            if blank || indent > parent {
                line += 1;
                continue;
            }
            block_scalar = None;
        }
        let mut i = indent;
        // The block indicator chain at the start of the line.
        let mut chain = 0usize;
        if quote.is_none() && flow == 0 {
            while i < raw.len()
                && matches!(raw[i], b'-' | b'?')
                && raw.get(i + 1).is_none_or(|c| *c == b' ' || *c == b'\t')
            {
                chain += 1;
                i += 1;
                while i < raw.len() && matches!(raw[i], b' ' | b'\t') {
                    i += 1;
                }
            }
            if indent + chain > max {
                return Some(line);
            }
        }
        let mut prev: u8 = b' ';
        let mut last_token_start = i;
        while i < raw.len() {
            let c = raw[i];
            match quote {
                Some(b'"') => {
                    if c == b'\\' {
                        i += 1;
                    } else if c == b'"' {
                        quote = None;
                    }
                }
                Some(_) => {
                    if c == b'\'' {
                        quote = None;
                    }
                }
                None => {
                    // In flow context `[`, `{`, `,` and `:` end a token; in block context only
                    // blanks do (`x[[[` is a plain scalar).
                    let token_start = matches!(prev, b' ' | b'\t')
                        || (flow > 0 && matches!(prev, b'[' | b'{' | b',' | b':'));
                    match c {
                        b'#' if matches!(prev, b' ' | b'\t') => break,
                        b'"' | b'\'' if token_start => quote = Some(c),
                        b'[' | b'{' if token_start || flow > 0 => {
                            flow += 1;
                            if flow > max {
                                return Some(line);
                            }
                        }
                        b']' | b'}' if flow > 0 => flow -= 1,
                        _ => {}
                    }
                    if token_start && !matches!(c, b' ' | b'\t') {
                        last_token_start = i;
                    }
                }
            }
            prev = c;
            i += 1;
        }
        // `key: |`, `- >-`, `key: |2+`: the next, deeper lines are a block scalar's text.
        if quote.is_none() && flow == 0 {
            let tail = raw[last_token_start..].trim_ascii_end();
            if tail.first().is_some_and(|c| *c == b'|' || *c == b'>')
                && tail[1..]
                    .iter()
                    .all(|c| matches!(c, b'-' | b'+' | b'0'..=b'9'))
            {
                block_scalar = Some(indent);
            }
        }
        line += 1;
    }
    None
}

/// Builds a JSON value from a deserializer (as `serde_json::Value` does) while counting what it
/// builds: nodes and string bytes. Past the budget it fails, so aliases that expand a small
/// document into a huge one stop early.
struct Bounded<'a> {
    budget: &'a std::cell::Cell<usize>,
}

impl Bounded<'_> {
    fn spend<E: serde::de::Error>(&self, n: usize) -> Result<(), E> {
        match self.budget.get().checked_sub(n) {
            Some(left) => {
                self.budget.set(left);
                Ok(())
            }
            None => Err(E::custom(EXCESSIVE_ALIASING)),
        }
    }
}

const EXCESSIVE_ALIASING: &str = "yaml: document contains excessive aliasing";

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any valid JSON value")
    }
    fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<Value, E> {
        self.spend(1)?;
        Ok(Value::Bool(b))
    }
    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Value, E> {
        self.spend(1)?;
        Ok(Value::from(n))
    }
    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Value, E> {
        self.spend(1)?;
        Ok(Value::from(n))
    }
    fn visit_i128<E: serde::de::Error>(self, n: i128) -> Result<Value, E> {
        self.spend(1)?;
        i64::try_from(n)
            .map(Value::from)
            .or_else(|_| u64::try_from(n).map(Value::from))
            .map_err(|_| E::custom("number out of range"))
    }
    fn visit_u128<E: serde::de::Error>(self, n: u128) -> Result<Value, E> {
        self.spend(1)?;
        u64::try_from(n)
            .map(Value::from)
            .map_err(|_| E::custom("number out of range"))
    }
    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Value, E> {
        self.spend(1)?;
        Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Value, E> {
        self.spend(1 + s.len())?;
        Ok(Value::String(s.to_owned()))
    }
    fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Value, E> {
        self.spend(1 + s.len())?;
        Ok(Value::String(s))
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.spend(1)?;
        Ok(Value::Null)
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.spend(1)?;
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
        self.spend(1)?;
        let mut out = vec![];
        while let Some(v) = a.next_element_seed(Bounded {
            budget: self.budget,
        })? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
        self.spend(1)?;
        let mut out = Map::new();
        while let Some(k) = a.next_key::<String>()? {
            self.spend(k.len())?;
            let v = a.next_value_seed(Bounded {
                budget: self.budget,
            })?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

/// YAML text to a JSON value, as `sigs.k8s.io/yaml` turns a YAML body into JSON, bounded:
/// nesting deeper than [`MAX_YAML_DEPTH`] is refused before the parser runs (`yaml: line N:
/// exceeded max depth of 1000`), and the value built may not be larger than the text allows
/// without aliases (a node per byte, string bytes twice the text), so an alias bomb fails with
/// `yaml: document contains excessive aliasing` after building no more than that.
pub fn parse_yaml(bytes: &[u8]) -> Result<Value, String> {
    if let Some(line) = yaml_too_deep(bytes, MAX_YAML_DEPTH) {
        return Err(format!(
            "yaml: line {line}: exceeded max depth of {MAX_YAML_DEPTH}"
        ));
    }
    let budget = std::cell::Cell::new(bytes.len().saturating_mul(3).saturating_add(1024));
    let de = serde_yaml_ng::Deserializer::from_slice(bytes);
    Bounded { budget: &budget }
        .deserialize(de)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The bound is never below the real length (escapes, numbers, nesting) and stops growing
    /// past the limit; the answer is the exact one on both sides of the limit.
    #[test]
    fn the_json_length_bound_is_at_least_the_length_and_the_answer_exact() {
        let values = [
            json!(null),
            json!({"a": [1, -9223372036854775808i64, 18446744073709551615u64, -1.7976931348623157e308, true]}),
            json!({"\u{1}\"\\": "\u{0}\u{1f}\n\"", "e": {}, "l": [], "s": ""}),
            json!([[[[{"k": "v"}]]]]),
        ];
        for v in &values {
            let len = serde_json::to_vec(v).unwrap().len() as u64;
            assert!(json_len_bound(v, u64::MAX) >= len, "{v}");
            assert!(!json_longer_than(v, len));
            assert!(json_longer_than(v, len - 1));
        }
        let long = json!({"a": "x".repeat(1000)});
        assert_eq!(json_len_bound(&long, 10), 11);
    }

    #[test]
    fn yaml_depth_is_estimated_in_one_pass() {
        assert_eq!(yaml_too_deep(b"a: [1, {b: [2]}]\n", 3), None);
        assert_eq!(yaml_too_deep(b"a: [1, {b: [2]}]\n", 2), Some(1));
        assert_eq!(yaml_too_deep(b"- - - x\n", 3), None);
        assert_eq!(yaml_too_deep(b"x: 1\n- - - - x\n", 3), Some(2));
        // Brackets in quotes, comments, plain scalars and block scalars are text.
        let text = b"a: \"[[[[\"\nb: '{{{{'\nc: x[[[[ # [[[[\nd: |\n  [[[[\n  {{{{\ne: 1\n";
        assert_eq!(yaml_too_deep(text, 1), None);
        // A document a hundred thousand levels deep is found at once.
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        assert_eq!(yaml_too_deep(deep.as_bytes(), MAX_YAML_DEPTH), Some(1));
        let chain = "- ".repeat(100_000) + "x\n";
        assert_eq!(yaml_too_deep(chain.as_bytes(), MAX_YAML_DEPTH), Some(1));
    }

    #[test]
    fn yaml_parses_as_serde_json_values_do_and_refuses_bombs() {
        let v = parse_yaml(b"a: 1\nb: [x, 2.5, true, null]\nc: {d: e}\n").unwrap();
        assert_eq!(
            v,
            json!({"a": 1, "b": ["x", 2.5, true, null], "c": {"d": "e"}})
        );
        let deep = "[".repeat(2_000) + &"]".repeat(2_000);
        assert_eq!(
            parse_yaml(deep.as_bytes()).unwrap_err(),
            "yaml: line 1: exceeded max depth of 1000"
        );
        // Nine levels of ten aliases: a billion strings from a few hundred bytes.
        let mut bomb = String::from(
            "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
        );
        for (prev, name) in ["a", "b", "c", "d", "e", "f", "g", "h"]
            .iter()
            .zip(["b", "c", "d", "e", "f", "g", "h", "i"])
        {
            let refs = vec![format!("*{prev}"); 9].join(",");
            bomb.push_str(&format!("{name}: &{name} [{refs}]\n"));
        }
        let err = parse_yaml(bomb.as_bytes()).unwrap_err();
        assert!(
            err.contains("excessive aliasing") || err.contains("repetition limit"),
            "{err}"
        );
    }

    #[test]
    fn many_empty_owner_references_are_four_errors() {
        let refs = Value::Array(vec![json!({}); 200_000]);
        let errs = bounded_meta_errors(&json!({"ownerReferences": refs}));
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "metadata.ownerReferences.apiVersion",
                "metadata.ownerReferences.kind",
                "metadata.ownerReferences.name",
                "metadata.ownerReferences.uid"
            ]
        );
        // Many controllers: the rule is reported once.
        let one =
            json!({"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": true});
        let refs = Value::Array(vec![one; 200_000]);
        let errs = bounded_meta_errors(&json!({"ownerReferences": refs}));
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0]
                .message
                .contains("Only one reference can have Controller set to true")
        );
        // Distinct errors are capped.
        let labels: Map<String, Value> = (0..5_000)
            .map(|i| (format!("bad key {i}"), json!("v")))
            .collect();
        let errs = bounded_meta_errors(&json!({"labels": labels}));
        assert_eq!(errs.len(), MAX_FIELD_ERRORS);
        // Short collections are checked exactly as before.
        let meta = json!({"finalizers": ["orphan", "foregroundDeletion"], "labels": {"a": "b"}});
        assert_eq!(bounded_meta_errors(&meta), v::validate_object_meta(&meta));
    }

    #[test]
    fn stored_objects_over_etcds_limit_are_refused() {
        let small = json!({"data": {"a": "x"}});
        assert!(check_stored_size(&small).is_ok());
        let big = json!({"data": {"a": "x".repeat(MAX_OBJECT_BYTES as usize)}});
        let e = check_stored_size(&big).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (500, "etcdserver: request is too large")
        );
        assert!(e.to_status().get("reason").is_none());
    }
}
