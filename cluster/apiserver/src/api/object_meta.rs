//! Server-managed object metadata: names, uids, timestamps, generation.
//!
//! On create the real server fills `metadata.uid` (a fresh UUID), `creationTimestamp` (now,
//! second precision, UTC) and, for kinds that track it, `generation: 1`; it turns
//! `generateName` into a name by appending five random characters, and validates the name
//! (see [`crate::registry::validation`]). On update those fields are copied from the stored object whatever the request
//! says, and `generation` moves by one whenever the object's *spec* (everything outside
//! `metadata` and, with a status subresource, `status`) changes. These helpers are the rules;
//! the handlers apply them.

use serde_json::{Value, json};

/// Now as a `metav1.Time` (RFC 3339, seconds, UTC).
pub fn now_time() -> String {
    metav1_time(jiff::Timestamp::now())
}

/// `now + secs` as a `metav1.Time`.
pub fn time_in(secs: i64) -> String {
    let t = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(secs))
        .unwrap_or_else(|_| jiff::Timestamp::now());
    metav1_time(t)
}

/// `t` as a `metav1.Time`, whole seconds. Every write stamps one or more of these, many in the
/// same second, so each thread keeps the text of the last second it formatted.
fn metav1_time(t: jiff::Timestamp) -> String {
    use std::cell::RefCell;
    thread_local! {
        static LAST: RefCell<Option<(i64, String)>> = const { RefCell::new(None) };
    }
    let second = t.as_second();
    LAST.with_borrow_mut(|last| match last {
        Some((s, text)) if *s == second => text.clone(),
        _ => {
            let text = t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            *last = Some((second, text.clone()));
            text
        }
    })
}

/// A random version-4 UUID for `metadata.uid` (`apimachinery::uuid`).
pub use apimachinery::uuid::new_v4 as new_uid;

/// `generateName` → name: the base cut to 58 characters plus five characters from
/// `bcdfghjklmnpqrstvwxz2456789` (apiserver `names.SimpleNameGenerator`).
pub fn generate_name(base: &str) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let base: String = base.chars().take(58).collect();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect();
    format!("{base}{suffix}")
}

/// Reads a dotted JSON path (`.spec.replicas`) out of an object.
pub fn get_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for seg in path.trim_start_matches('.').split('.') {
        if seg.is_empty() {
            continue;
        }
        cur = cur.get(seg)?;
    }
    Some(cur)
}

/// Writes a dotted JSON path, creating objects on the way.
pub fn set_path(obj: &mut Value, path: &str, value: Value) {
    let segs: Vec<&str> = path
        .trim_start_matches('.')
        .split('.')
        .filter(|s| !s.is_empty())
        .collect();
    let mut cur = obj;
    for (i, seg) in segs.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(map) = cur.as_object_mut() else {
            return;
        };
        if i + 1 == segs.len() {
            map.insert((*seg).to_owned(), value);
            return;
        }
        cur = map.entry((*seg).to_owned()).or_insert_with(|| json!({}));
    }
}

/// `metadata.<field>` as a string.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj["metadata"][field].as_str().unwrap_or_default()
}

/// `metadata.labels` as a map (non-string values skipped).
pub fn labels_of(obj: &Value) -> std::collections::BTreeMap<String, String> {
    obj["metadata"]["labels"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// The finalizers of an object.
pub fn finalizers_of(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-second memo never serves one second's text for another.
    #[test]
    fn metav1_times_are_whole_seconds_in_utc_even_when_remembered() {
        // In this order: the second one is served from the memo, the last one is not.
        for (at, text) in [
            ("2030-06-01T09:30:00.2Z", "2030-06-01T09:30:00Z"),
            ("2030-06-01T09:30:00.9Z", "2030-06-01T09:30:00Z"),
            ("2030-06-01T09:30:01Z", "2030-06-01T09:30:01Z"),
            ("2030-06-01T09:30:00Z", "2030-06-01T09:30:00Z"),
        ] {
            assert_eq!(metav1_time(at.parse().unwrap()), text, "{at}");
        }
        let now = now_time();
        assert!(now.ends_with('Z') && now.len() == 20, "{now}");
    }

    #[test]
    fn generated_names_keep_the_base_and_add_five_characters() {
        let n = generate_name("web-");
        assert!(n.starts_with("web-"));
        assert_eq!(n.len(), 9);
    }

    #[test]
    fn uids_look_like_uuids() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }

    #[test]
    fn paths_read_and_write() {
        let mut v = json!({});
        set_path(&mut v, ".spec.replicas", json!(3));
        assert_eq!(get_path(&v, ".spec.replicas"), Some(&json!(3)));
    }
}
