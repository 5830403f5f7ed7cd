//! # A string that stores itself inline when it is short: most strings of a cached object
//!
//! Look at what a cache of pods holds: `default`, `Succeeded`, `Ready`, `True`, `At`, a pod
//! name, a resourceVersion. Nearly every string in a cached summary is under 23 bytes. A
//! `String` keeps even those on the heap: 24 bytes inline (pointer, capacity, length) plus an
//! allocation, which glibc's malloc rounds up to a 32-byte chunk with its header. Counted per
//! string that is 56 bytes for `default`, and a pod summary has about ten of them.
//!
//! [`SmallString`] is 24 bytes, like a `String`, and keeps a string of up to [`INLINE_CAPACITY`]
//! (22) bytes inside those 24: no allocation at all. A longer one (a UID, a long name or
//! message) takes one allocation of exactly its length (`Box<str>`, no spare capacity). An
//! `Option<SmallString>` is 24 bytes too. It is immutable: a cache never edits a string in
//! place, it stores the next object.
//!
//! Decoding goes straight from the JSON text: serde hands over a borrowed `&str` whenever the
//! string has no escapes, and a short one is copied inline, so no temporary `String` is made
//! and freed for it either.
//!
//! The same idea as the `smol_str`/`compact_str` crates and as C++'s small-string optimisation,
//! written here without `unsafe` (this crate forbids it): the inline bytes are checked as UTF-8
//! each time they are read, which for 22 bytes costs a few nanoseconds.
//!
//! A string that is one of a few known long values (the API versions of this crate's kinds,
//! which every owner reference of a pod an operator created repeats) can be stored as a
//! pointer to the program's own copy instead ([`SmallString::known`]): no allocation either.
//!
//! It reads like a `&str` ([`std::ops::Deref`]), so `name.as_deref()`, `s.len()`,
//! `s.starts_with(..)` and `s == "Ready"` all work as they do on a `String`.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use serde::de::{self, Deserialize, Deserializer, Visitor};
use serde::{Serialize, Serializer};

/// The longest string kept inline (see the module documentation).
pub const INLINE_CAPACITY: usize = 22;

/// An immutable string, inline up to [`INLINE_CAPACITY`] bytes (see the module documentation).
#[derive(Clone)]
pub struct SmallString(Repr);

#[derive(Clone)]
enum Repr {
    Inline {
        len: u8,
        bytes: [u8; INLINE_CAPACITY],
    },
    Static(&'static str),
    Heap(Box<str>),
}

impl SmallString {
    /// The empty string (inline).
    pub const fn new() -> Self {
        SmallString(Repr::Inline {
            len: 0,
            bytes: [0; INLINE_CAPACITY],
        })
    }

    /// The string's text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Only ever filled from a `&str` (see `From<&str>`), cut at its end: valid UTF-8.
            Repr::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Repr::Static(s) => s,
            Repr::Heap(s) => s,
        }
    }

    /// `s`, pointing at the program's own copy when `s` is one of `known` (no allocation);
    /// otherwise as [`SmallString::from`] stores it.
    pub fn known(s: &str, known: &[&'static str]) -> Self {
        match known.iter().find(|k| **k == s) {
            Some(k) => SmallString(Repr::Static(k)),
            None => SmallString::from(s),
        }
    }

    /// Whether the text takes no allocation of its own (inline, or a known string).
    pub fn is_inline(&self) -> bool {
        !matches!(self.0, Repr::Heap(_))
    }
}

impl Default for SmallString {
    fn default() -> Self {
        SmallString::new()
    }
}

impl From<&str> for SmallString {
    fn from(s: &str) -> Self {
        if s.len() <= INLINE_CAPACITY {
            let mut bytes = [0; INLINE_CAPACITY];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            SmallString(Repr::Inline {
                len: s.len() as u8,
                bytes,
            })
        } else {
            SmallString(Repr::Heap(s.into()))
        }
    }
}

impl From<String> for SmallString {
    fn from(s: String) -> Self {
        if s.len() <= INLINE_CAPACITY {
            SmallString::from(s.as_str())
        } else {
            SmallString(Repr::Heap(s.into_boxed_str()))
        }
    }
}

impl From<&String> for SmallString {
    fn from(s: &String) -> Self {
        SmallString::from(s.as_str())
    }
}

impl From<SmallString> for String {
    fn from(s: SmallString) -> Self {
        match s.0 {
            Repr::Heap(b) => b.into_string(),
            Repr::Inline { .. } | Repr::Static(_) => s.as_str().to_owned(),
        }
    }
}

impl From<&SmallString> for String {
    fn from(s: &SmallString) -> Self {
        s.as_str().to_owned()
    }
}

impl Deref for SmallString {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for SmallString {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for SmallString {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for SmallString {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for SmallString {}

impl PartialEq<str> for SmallString {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SmallString {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for SmallString {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<SmallString> for str {
    fn eq(&self, other: &SmallString) -> bool {
        self == other.as_str()
    }
}

impl PartialEq<SmallString> for &str {
    fn eq(&self, other: &SmallString) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<SmallString> for String {
    fn eq(&self, other: &SmallString) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialOrd for SmallString {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SmallString {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for SmallString {
    /// Hashes as the `str` does, so a map keyed by `SmallString` can be read with a `&str`.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for SmallString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for SmallString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for SmallString {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for SmallString {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SmallStringVisitor;
        impl Visitor<'_> for SmallStringVisitor {
            type Value = SmallString;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<SmallString, E> {
                Ok(SmallString::from(v))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<SmallString, E> {
                Ok(SmallString::from(v))
            }
        }
        deserializer.deserialize_str(SmallStringVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn it_is_as_small_as_a_string_and_so_is_its_option() {
        assert_eq!(std::mem::size_of::<SmallString>(), 24);
        assert_eq!(std::mem::size_of::<Option<SmallString>>(), 24);
    }

    #[test]
    fn short_strings_stay_inline_and_long_ones_round_trip_on_the_heap() {
        for (text, inline) in [
            ("", true),
            ("default", true),
            ("ünïcödé-ß", true),
            (&"x".repeat(INLINE_CAPACITY), true),
            (&"x".repeat(INLINE_CAPACITY + 1), false),
            ("0f5d3c9e-1b7a-4e4f-9a57-5c1f0c1e2d3f", false),
        ] {
            for s in [SmallString::from(text), SmallString::from(text.to_owned())] {
                assert_eq!(s.as_str(), text);
                assert_eq!(s.is_inline(), inline, "{text}");
                assert_eq!(String::from(s.clone()), text);
                assert_eq!(s.to_string(), text);
                assert_eq!(format!("{s:?}"), format!("{text:?}"));
            }
        }
        // A multi-byte character that would straddle the inline limit goes to the heap whole.
        let straddling = format!("{}é", "x".repeat(INLINE_CAPACITY - 1));
        let s = SmallString::from(straddling.as_str());
        assert!(!s.is_inline());
        assert_eq!(s.as_str(), straddling);
    }

    #[test]
    fn a_known_string_points_at_the_programs_copy() {
        const KNOWN: [&str; 2] = [
            "cnat.programming-kubernetes.info/v1",
            "samplecontroller.k8s.io/v1alpha1",
        ];
        let s = SmallString::known("cnat.programming-kubernetes.info/v1", &KNOWN);
        assert!(s.is_inline(), "no allocation");
        assert!(std::ptr::eq(s.as_str(), KNOWN[0]));
        assert_eq!(s, SmallString::from(KNOWN[0]));
        assert_eq!(String::from(s), KNOWN[0]);
        let unknown = SmallString::known("example.com/v1beta1-of-something-long", &KNOWN);
        assert!(!unknown.is_inline());
        assert_eq!(unknown, "example.com/v1beta1-of-something-long");
    }

    #[test]
    fn it_compares_hashes_and_orders_as_its_text() {
        let a = SmallString::from("alpha");
        let long = SmallString::from("z".repeat(40));
        assert_eq!(a, "alpha");
        assert_eq!("alpha", a);
        assert_eq!(a, "alpha".to_string());
        assert_ne!(a, long);
        assert!(a < long);
        assert_eq!(SmallString::default(), "");
        let mut m = HashMap::new();
        m.insert(a.clone(), 1);
        m.insert(long.clone(), 2);
        assert_eq!(m.get("alpha"), Some(&1));
        assert_eq!(m.get(long.as_str()), Some(&2));
    }

    #[test]
    fn it_decodes_from_json_borrowed_or_escaped_and_encodes_as_a_string() {
        let s: SmallString = serde_json::from_str(r#""Succeeded""#).expect("plain");
        assert!(s.is_inline());
        assert_eq!(s, "Succeeded");
        let escaped: SmallString = serde_json::from_str(r#""a\"b\u00e9""#).expect("escaped");
        assert_eq!(escaped, "a\"bé");
        let long: SmallString =
            serde_json::from_value(serde_json::json!("y".repeat(100))).expect("owned");
        assert_eq!(long.len(), 100);
        assert_eq!(
            serde_json::to_string(&escaped).expect("encode"),
            r#""a\"bé""#
        );
        let err = serde_json::from_str::<SmallString>("42").expect_err("a number");
        assert!(err.to_string().contains("a string"), "{err}");
    }
}
