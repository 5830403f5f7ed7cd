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
//! A UID (a 36-character UUID) is too long for it, and every cached object has one, a pod two
//! (its own and its owner's): [`UidString`] is the same type with room for 38 bytes inline, 40
//! bytes in all, where a `String` with its 48-byte chunk took 72.
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

/// The longest string a [`UidString`] keeps inline: a UID's 36 characters (and two to spare).
pub const UID_CAPACITY: usize = 38;

/// An immutable string, inline up to [`INLINE_CAPACITY`] bytes (see the module documentation).
pub type SmallString = InlineString<INLINE_CAPACITY>;

/// An immutable string, inline up to [`UID_CAPACITY`] bytes: 40 bytes, for the UIDs of the
/// cache (the API server's are 36-character UUIDs, which a [`SmallString`] would allocate).
pub type UidString = InlineString<UID_CAPACITY>;

/// An immutable string, inline up to `N` bytes (at most 255), else in one exact-size
/// allocation: [`SmallString`] and [`UidString`] (see the module documentation).
#[derive(Clone)]
pub struct InlineString<const N: usize>(Repr<N>);

#[derive(Clone)]
enum Repr<const N: usize> {
    Inline { len: u8, bytes: [u8; N] },
    Static(&'static str),
    Heap(Box<str>),
}

impl<const N: usize> InlineString<N> {
    /// The inline length is a `u8`: a capacity above 255 does not compile.
    const FITS_A_U8: () = assert!(N <= u8::MAX as usize, "InlineString<N>: N is at most 255");

    /// The empty string (inline).
    pub const fn new() -> Self {
        InlineString(Repr::Inline {
            len: 0,
            bytes: [0; N],
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
            Some(k) => InlineString(Repr::Static(k)),
            None => Self::from(s),
        }
    }

    /// `a`, `sep` and `b` in one string (`namespace/name`), built in place when it fits inline,
    /// so a short key takes no allocation at all (not even a temporary `String`).
    pub fn joined(a: &str, sep: char, b: &str) -> Self {
        let len = a.len() + sep.len_utf8() + b.len();
        if len > N {
            return InlineString(Repr::Heap(format!("{a}{sep}{b}").into_boxed_str()));
        }
        let mut bytes = [0; N];
        bytes[..a.len()].copy_from_slice(a.as_bytes());
        let rest = &mut bytes[a.len()..];
        let sep_len = sep.encode_utf8(rest).len();
        rest[sep_len..sep_len + b.len()].copy_from_slice(b.as_bytes());
        InlineString(Repr::Inline {
            len: len as u8,
            bytes,
        })
    }

    /// Whether the text takes no allocation of its own (inline, or a known string).
    pub fn is_inline(&self) -> bool {
        !matches!(self.0, Repr::Heap(_))
    }
}

impl<const N: usize> Default for InlineString<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> From<&str> for InlineString<N> {
    fn from(s: &str) -> Self {
        let () = Self::FITS_A_U8;
        if s.len() <= N {
            let mut bytes = [0; N];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            InlineString(Repr::Inline {
                len: s.len() as u8,
                bytes,
            })
        } else {
            InlineString(Repr::Heap(s.into()))
        }
    }
}

impl<const N: usize> From<String> for InlineString<N> {
    fn from(s: String) -> Self {
        if s.len() <= N {
            Self::from(s.as_str())
        } else {
            InlineString(Repr::Heap(s.into_boxed_str()))
        }
    }
}

impl<const N: usize> From<&String> for InlineString<N> {
    fn from(s: &String) -> Self {
        Self::from(s.as_str())
    }
}

impl<const N: usize> From<InlineString<N>> for String {
    fn from(s: InlineString<N>) -> Self {
        match s.0 {
            Repr::Heap(b) => b.into_string(),
            Repr::Inline { .. } | Repr::Static(_) => s.as_str().to_owned(),
        }
    }
}

impl<const N: usize> From<&InlineString<N>> for String {
    fn from(s: &InlineString<N>) -> Self {
        s.as_str().to_owned()
    }
}

impl<const N: usize> Deref for InlineString<N> {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> AsRef<str> for InlineString<N> {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> Borrow<str> for InlineString<N> {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> PartialEq for InlineString<N> {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl<const N: usize> Eq for InlineString<N> {}

impl<const N: usize> PartialEq<str> for InlineString<N> {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl<const N: usize> PartialEq<&str> for InlineString<N> {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl<const N: usize> PartialEq<String> for InlineString<N> {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other.as_str()
    }
}

impl<const N: usize> PartialEq<InlineString<N>> for str {
    fn eq(&self, other: &InlineString<N>) -> bool {
        self == other.as_str()
    }
}

impl<const N: usize> PartialEq<InlineString<N>> for &str {
    fn eq(&self, other: &InlineString<N>) -> bool {
        *self == other.as_str()
    }
}

impl<const N: usize> PartialEq<InlineString<N>> for String {
    fn eq(&self, other: &InlineString<N>) -> bool {
        self.as_str() == other.as_str()
    }
}

impl<const N: usize> PartialOrd for InlineString<N> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<const N: usize> Ord for InlineString<N> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl<const N: usize> Hash for InlineString<N> {
    /// Hashes as the `str` does, so a map keyed by `SmallString` can be read with a `&str`.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl<const N: usize> fmt::Debug for InlineString<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl<const N: usize> fmt::Display for InlineString<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<const N: usize> Serialize for InlineString<N> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de, const N: usize> Deserialize<'de> for InlineString<N> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InlineStringVisitor<const N: usize>;
        impl<const N: usize> Visitor<'_> for InlineStringVisitor<N> {
            type Value = InlineString<N>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<InlineString<N>, E> {
                Ok(InlineString::from(v))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<InlineString<N>, E> {
                Ok(InlineString::from(v))
            }
        }
        deserializer.deserialize_str(InlineStringVisitor::<N>)
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
        assert_eq!(std::mem::size_of::<UidString>(), 40);
        assert_eq!(std::mem::size_of::<Option<UidString>>(), 40);
    }

    #[test]
    fn a_uid_stays_inline_in_a_uid_string() {
        let uid = "0f5d3c9e-1b7a-4e4f-9a57-5c1f0c1e2d3f";
        let s: UidString = serde_json::from_value(serde_json::json!(uid)).expect("a UID");
        assert!(s.is_inline());
        assert_eq!(s, uid);
        assert!(
            !SmallString::from(uid).is_inline(),
            "too long for a SmallString"
        );
        let long = UidString::from("u".repeat(UID_CAPACITY + 1));
        assert!(!long.is_inline());
        assert_eq!(long.len(), UID_CAPACITY + 1);
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
