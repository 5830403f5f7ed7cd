//! # Skipping `metadata.managedFields` before an object is decoded
//!
//! Every object the API server returns carries `metadata.managedFields`: one entry per field
//! manager, each with a `fieldsV1` tree naming every field that manager set. It is what
//! server-side apply needs, and it is often the largest part of an object (kubectl, the
//! kubelet, a controller and an admission plugin make four entries, a few KB on a real pod).
//! An informer drops it (the default transform, as controller-runtime's
//! `cache.TransformStripManagedFields`), but only *after* the decoder has built it: a
//! `Vec<ManagedFieldsEntry>`, each with a `serde_json::Value` tree for `fieldsV1`, allocated to be
//! freed at once. At 10,000 Ats that decode and free was a tenth of the manager's CPU.
//!
//! [`without_managed_fields`] cuts the member out of the object's JSON text instead, and
//! [`list_without_managed_fields`] out of every item of a `<Kind>List`, so the decoder never sees
//! it. [`Api::without_managed_fields`](super::Api::without_managed_fields) turns this on for an
//! `Api`'s lists, watches and write answers; the informer factory's
//! [`ClientSource`](crate::cache::ClientSource) does so for the caches, whose transforms drop
//! the field anyway, and the At controller and the event sink for the objects their writes
//! answer, of which they keep the revision and the status.
//!
//! ## How, and what it guarantees
//!
//! A small scanner walks the JSON text: strings (with their escapes), nested objects and arrays,
//! and scalars, tracking only where each member's key and value begin and end. It finds the
//! top-level `metadata` object (or each item's, in a list), finds `managedFields` among its
//! members, and copies the text around that member (taking one neighbouring comma with it). The
//! rest of the object is copied byte for byte, so decoding the result gives exactly what
//! decoding the original and then clearing `metadata.managedFields` gives; a property test
//! checks that on generated objects, compact and pretty-printed.
//!
//! Anything the scanner does not recognise up to the end of `metadata` (text that is not a JSON
//! object, a truncated document, a key spelled with escapes) is left as it is: the functions
//! return `None` and the caller decodes the original text. Text broken after `metadata` is cut
//! unread and fails to decode as the original would; [`decode`] then decodes the original, so a
//! malformed body always gets the decoder's own error, naming what was wrong. Nothing is ever
//! dropped that the decoder would have kept.
//!
//! The cost is one pass over the text up to the end of the top-level `metadata` (the rest, the
//! spec and status, is copied unread), with no allocation until a cut is found; strings are
//! skipped with a SIMD search for their closing quote. A body without the key at all (the common
//! case for a watch of objects no one applies) is recognised by a substring search and returned
//! untouched. A caller that keeps only a few fields of an answer does better still: it decodes
//! a type with just those fields and serde skips the rest, managedFields included
//! ([`Api::create_as`](super::Api::create_as)).

/// The member's key as it appears in the text.
const MANAGED_FIELDS: &[u8] = b"\"managedFields\"";

/// The key of the object's metadata, as it appears in the text.
const METADATA: &[u8] = b"\"metadata\"";

/// The object's JSON text without `metadata.managedFields`, or `None` when there is nothing to
/// cut (no such member, or text the scanner does not recognise: decode the original then).
///
/// The scan stops at the end of the top-level `metadata` member: what follows it (the spec and
/// the status, most of an object) is copied unread. Text that is malformed after `metadata` is
/// therefore cut too, and fails to decode just as the original would; [`decode`] then decodes
/// the original to report the decoder's own error about it. An object with a second top-level
/// `metadata` (the decoder keeps one of them) is scanned to its end and has both cut.
pub fn without_managed_fields(object: &[u8]) -> Option<Vec<u8>> {
    memchr::memmem::find(object, MANAGED_FIELDS)?;
    let start = skip_ws(object, 0);
    let mut cuts = Vec::with_capacity(1);
    let metadata = member_value(object, start, METADATA)?;
    if memchr::memmem::find(&object[metadata.end..], METADATA).is_some() {
        let end = object_cut(object, start, &mut cuts)?;
        if skip_ws(object, end) != object.len() {
            return None;
        }
    } else {
        metadata_cut(object, metadata.start, &mut cuts)?;
    }
    splice(object, &cuts)
}

/// Decodes `text` as `T` with `metadata.managedFields` cut first ([`without_managed_fields`]);
/// when the cut text does not decode, decodes the original, so an error names what is wrong in
/// the text as it came.
pub fn decode<T, E>(text: &[u8], decode: impl Fn(&[u8]) -> Result<T, E>) -> Result<T, E> {
    match without_managed_fields(text) {
        Some(cut) => decode(&cut).or_else(|_| decode(text)),
        None => decode(text),
    }
}

/// Where the value of the object's top-level member `key` (its text with the quotes) is, found
/// without reading past it; `None` when there is no such member or the text before it is not a
/// JSON object's.
pub fn member_value(b: &[u8], start: usize, key: &[u8]) -> Option<std::ops::Range<usize>> {
    let mut found = None;
    members(b, start, |k, v| {
        if &b[k] == key {
            found = Some(v);
            return Some(Walk::Stop);
        }
        Some(Walk::Next)
    });
    found
}

/// A `<Kind>List`'s JSON text without `metadata.managedFields` in any of its `items`, or `None`
/// when there is nothing to cut (see [`without_managed_fields`]).
pub fn list_without_managed_fields(list: &[u8]) -> Option<Vec<u8>> {
    memchr::memmem::find(list, MANAGED_FIELDS)?;
    let mut cuts = Vec::new();
    let end = members(list, skip_ws(list, 0), |key, value| {
        if &list[key] == b"\"items\"" && list.get(value.start) == Some(&b'[') {
            return elements(list, value.start, |item| {
                if list.get(item.start) == Some(&b'{') {
                    object_cut(list, item.start, &mut cuts)?;
                }
                Some(())
            })
            .map(|_| Walk::Next);
        }
        Some(Walk::Next)
    })?;
    if skip_ws(list, end) != list.len() {
        return None;
    }
    splice(list, &cuts)
}

/// Scans the object at `start`; pushes the span of its `metadata.managedFields` member (with
/// one comma) to `cuts`. Returns the index just past the object.
fn object_cut(b: &[u8], start: usize, cuts: &mut Vec<std::ops::Range<usize>>) -> Option<usize> {
    members(b, start, |key, value| {
        if &b[key] == METADATA && b.get(value.start) == Some(&b'{') {
            metadata_cut(b, value.start, cuts)?;
        }
        Some(Walk::Next)
    })
}

/// Finds `managedFields` among the members of the metadata object at `start` and records the
/// text to cut: the member with one neighbouring comma.
fn metadata_cut(b: &[u8], start: usize, cuts: &mut Vec<std::ops::Range<usize>>) -> Option<()> {
    if b.get(start) != Some(&b'{') {
        return Some(());
    }
    let mut spans = Vec::new();
    members(b, start, |k, v| {
        spans.push((k.start, v.end, &b[k] == MANAGED_FIELDS));
        Some(Walk::Next)
    })?;
    if let Some(i) = spans.iter().position(|s| s.2) {
        let (key_start, value_end, _) = spans[i];
        let cut = match (i.checked_sub(1).map(|p| spans[p]), spans.get(i + 1)) {
            (Some(prev), _) => prev.1..value_end,
            (None, Some(next)) => key_start..next.0,
            (None, None) => key_start..value_end,
        };
        cuts.push(cut);
    }
    Some(())
}

fn splice(b: &[u8], cuts: &[std::ops::Range<usize>]) -> Option<Vec<u8>> {
    if cuts.is_empty() {
        return None;
    }
    let removed: usize = cuts.iter().map(|c| c.len()).sum();
    let mut out = Vec::with_capacity(b.len() - removed);
    let mut at = 0;
    for cut in cuts {
        out.extend_from_slice(&b[at..cut.start]);
        at = cut.end;
    }
    out.extend_from_slice(&b[at..]);
    Some(out)
}

/// What a member's visitor tells [`members`]: go on, or stop here unread past this member.
enum Walk {
    Next,
    Stop,
}

/// Walks the members of the object at `start` (`b[start] == '{'`), calling `each` with the
/// span of every key (quotes included) and value. Returns the index just past the `}`, or just
/// past the value where `each` said [`Walk::Stop`]; `None` where `each` did or the text is not
/// an object's.
fn members(
    b: &[u8],
    start: usize,
    mut each: impl FnMut(std::ops::Range<usize>, std::ops::Range<usize>) -> Option<Walk>,
) -> Option<usize> {
    if b.get(start) != Some(&b'{') {
        return None;
    }
    let mut i = skip_ws(b, start + 1);
    if b.get(i) == Some(&b'}') {
        return Some(i + 1);
    }
    loop {
        let key_start = i;
        let key_end = string_end(b, key_start)?;
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let value_start = skip_ws(b, i + 1);
        let value_end = value_end(b, value_start)?;
        if let Walk::Stop = each(key_start..key_end, value_start..value_end)? {
            return Some(value_end);
        }
        i = skip_ws(b, value_end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return Some(i + 1),
            _ => return None,
        }
    }
}

/// Walks the elements of the array at `start` (`b[start] == '['`). Returns the index just past
/// the `]`.
fn elements(
    b: &[u8],
    start: usize,
    mut each: impl FnMut(std::ops::Range<usize>) -> Option<()>,
) -> Option<usize> {
    if b.get(start) != Some(&b'[') {
        return None;
    }
    let mut i = skip_ws(b, start + 1);
    if b.get(i) == Some(&b']') {
        return Some(i + 1);
    }
    loop {
        let end = value_end(b, i)?;
        each(i..end)?;
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b']') => return Some(i + 1),
            _ => return None,
        }
    }
}

/// The index just past the JSON value starting at `i`.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => string_end(b, i),
        b'{' | b'[' => {
            // Brackets are only counted outside strings; the scanner checks nesting no further
            // (the decoder does, on the text that is left).
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = string_end(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        // A number, `true`, `false` or `null`: up to the next delimiter.
        _ => {
            let len = b[i..]
                .iter()
                .position(|c| matches!(c, b',' | b'}' | b']') || c.is_ascii_whitespace())
                .unwrap_or(b.len() - i);
            (len > 0).then_some(i + len)
        }
    }
}

/// The index just past the string starting at `i` (`b[i] == '"'`), escapes skipped.
fn string_end(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    while let Some(at) = memchr::memchr2(b'"', b'\\', b.get(j..)?) {
        j += at;
        if b[j] == b'"' {
            return Some(j + 1);
        }
        j += 2;
    }
    None
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b.get(i).is_some_and(|c| c.is_ascii_whitespace()) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn cut(text: &str) -> Option<String> {
        without_managed_fields(text.as_bytes()).map(|b| String::from_utf8(b).unwrap())
    }

    /// The value with `metadata.managedFields` removed: what the decoder plus the default
    /// transform leave.
    fn cleared(mut v: Value) -> Value {
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        v
    }

    #[test]
    fn the_member_goes_with_one_comma_wherever_it_stands() {
        let mf = r#""managedFields":[{"manager":"kubectl","fieldsV1":{"f:a":{}}}]"#;
        assert_eq!(
            cut(&format!(
                r#"{{"metadata":{{"name":"a",{mf},"uid":"u"}},"spec":{{}}}}"#
            ))
            .unwrap(),
            r#"{"metadata":{"name":"a","uid":"u"},"spec":{}}"#
        );
        assert_eq!(
            cut(&format!(r#"{{"metadata":{{{mf},"name":"a"}}}}"#)).unwrap(),
            r#"{"metadata":{"name":"a"}}"#
        );
        assert_eq!(
            cut(&format!(r#"{{"metadata":{{"name":"a",{mf}}}}}"#)).unwrap(),
            r#"{"metadata":{"name":"a"}}"#
        );
        assert_eq!(
            cut(&format!(r#"{{"metadata":{{{mf}}}}}"#)).unwrap(),
            r#"{"metadata":{}}"#
        );
        assert_eq!(
            cut(&format!(
                "{{ \"metadata\" : {{ \"name\" : \"a\" ,\n {mf} \n}} }}"
            ))
            .unwrap(),
            "{ \"metadata\" : { \"name\" : \"a\" \n} }"
        );
    }

    #[test]
    fn only_the_metadata_member_is_cut() {
        // Elsewhere (in the spec, in a string, deeper in metadata) the name is data.
        let text = r#"{"spec":{"managedFields":[1]},"metadata":{"annotations":{"managedFields":"x"},"labels":{"a":"\"managedFields\""}}}"#;
        assert_eq!(cut(text), None);
        assert_eq!(cut(r#"{"metadata":{"name":"a"}}"#), None);
    }

    #[test]
    fn text_it_does_not_recognise_is_left_to_the_decoder() {
        for text in [
            r#"{"metadata":{"managedFields":[}"#,
            r#"["managedFields"]"#,
            r#""managedFields""#,
            r#"{"metadata":{"managedFields" []}}"#,
            r#"{"metadata":{"managedFields":"unterminated}}"#,
        ] {
            assert_eq!(cut(text), None, "{text}");
        }
    }

    #[test]
    fn text_broken_after_the_metadata_fails_with_the_decoders_own_error() {
        // The scan stops at the end of metadata: the cut text fails as the original does, and
        // `decode` reports the error about the original.
        for text in [
            r#"{"metadata":{"managedFields":[]}"#,
            r#"{"metadata":{"managedFields":[]}} trailing"#,
            r#"{"metadata":{"managedFields":[],"name":"a"},"spec":{"x":}}"#,
        ] {
            assert!(cut(text).is_some(), "{text}");
            let original = serde_json::from_slice::<Value>(text.as_bytes()).unwrap_err();
            let got = decode(text.as_bytes(), |t| serde_json::from_slice::<Value>(t)).unwrap_err();
            assert_eq!(got.to_string(), original.to_string(), "{text}");
        }
        let fine = br#"{"metadata":{"managedFields":[1],"name":"a"},"spec":{}}"#;
        assert_eq!(
            decode(fine, |t| serde_json::from_slice::<Value>(t)).unwrap(),
            json!({"metadata": {"name": "a"}, "spec": {}})
        );
    }

    #[test]
    fn a_second_top_level_metadata_is_cut_too() {
        let text = r#"{"metadata":{"managedFields":[1]},"spec":{"metadata":"x"},"metadata":{"managedFields":[2],"name":"b"}}"#;
        assert_eq!(
            cut(text).as_deref(),
            Some(r#"{"metadata":{},"spec":{"metadata":"x"},"metadata":{"name":"b"}}"#)
        );
    }

    #[test]
    fn member_value_stops_at_the_member() {
        let text = br#" {"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"#;
        let at = member_value(text, 1, METADATA).unwrap();
        assert_eq!(&text[at], br#"{"name":"a"}"#);
        assert_eq!(member_value(text, 1, b"\"status\""), None);
        assert_eq!(member_value(br#"{"a":1}"#, 0, METADATA), None);
        assert_eq!(member_value(br#"[1]"#, 0, METADATA), None);
    }

    #[test]
    fn every_item_of_a_list_is_cut() {
        let list = json!({
            "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"},
            "items": [
                {"metadata": {"name": "a", "managedFields": [{"manager": "m"}]}},
                {"metadata": {"name": "b"}},
                {"metadata": {"managedFields": [], "name": "c"}},
            ],
        });
        let text = serde_json::to_vec(&list).unwrap();
        let out: Value =
            serde_json::from_slice(&list_without_managed_fields(&text).unwrap()).unwrap();
        let mut want = list.clone();
        for item in want["items"].as_array_mut().unwrap() {
            *item = cleared(item.take());
        }
        assert_eq!(out, want);
        let none = json!({"items": [{"metadata": {"name": "a"}}], "managedFields": 1});
        assert_eq!(
            list_without_managed_fields(&serde_json::to_vec(&none).unwrap()),
            None
        );
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "[a-z\"\\\\{}\\[\\],: \u{e9}]{0,8}".prop_map(Value::String),
            Just(Value::String("managedFields".into())),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof!["[a-z]{1,6}", Just("managedFields".to_owned())],
                    inner,
                    0..5
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Cutting the text and decoding it equals decoding the original and clearing the
        /// field, compact or pretty-printed; `None` exactly when there was nothing to clear.
        #[test]
        fn cutting_the_text_equals_clearing_the_decoded_field(
            metadata in prop::collection::btree_map("[a-z]{1,6}", json_value(), 0..4),
            managed in prop::option::of(json_value()),
            rest in prop::collection::btree_map("[a-z]{1,6}", json_value(), 0..4),
            pretty in any::<bool>(),
        ) {
            let mut meta: serde_json::Map<String, Value> = metadata.into_iter().collect();
            if let Some(m) = managed {
                meta.insert("managedFields".into(), m);
            }
            let had = meta.contains_key("managedFields");
            let mut obj: serde_json::Map<String, Value> = rest.into_iter().collect();
            obj.insert("metadata".into(), Value::Object(meta));
            let obj = Value::Object(obj);
            let text = if pretty {
                serde_json::to_vec_pretty(&obj).unwrap()
            } else {
                serde_json::to_vec(&obj).unwrap()
            };
            let original: Value = serde_json::from_slice(&text).unwrap();
            match without_managed_fields(&text) {
                Some(out) => {
                    prop_assert!(had);
                    let decoded: Value = serde_json::from_slice(&out).unwrap();
                    prop_assert_eq!(decoded, cleared(original));
                }
                None => prop_assert!(!had),
            }
        }
    }
}
