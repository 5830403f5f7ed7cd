//! Label and field selectors: the `?labelSelector=` and `?fieldSelector=` filters of list and watch.
//!
//! A client that wants only some objects of a collection sends a selector with its list or watch
//! request. The API server parses it once, before it answers (a parse error is a **400 BadRequest**,
//! sent before any watch stream starts), and then asks the parsed selector about every object.
//!
//! # Label selectors (`labels.Parse` in apimachinery)
//!
//! ```text
//! selector    := requirement ("," requirement)*          (all requirements must hold: AND)
//! requirement := KEY                                      exists
//!              | "!" KEY                                  does not exist
//!              | KEY ("=" | "==" | "!=") VALUE            equality
//!              | KEY ("in" | "notin") "(" VALUE ("," VALUE)* ")"   set-based
//!              | KEY (">" | "<") INTEGER                  numeric comparison
//! ```
//!
//! Two rules surprise people: `!=` and `notin` **match objects that do not carry the key at all**
//! (an absent label is "not equal" to anything), and the empty selector matches everything. Keys are
//! qualified names (`[prefix/]name`, the name at most 63 characters of `[A-Za-z0-9_.-]` starting
//! and ending alphanumeric); values follow the same rule and may be empty (`env in (prod,,dev)`).
//!
//! # Field selectors (`fields.ParseSelector`)
//!
//! Field selectors are much simpler: comma-joined `path=value`, `path==value` or `path!=value` terms,
//! with `\,`, `\=` and `\\` escapes in values. The path is a dotted JSON path into the object
//! (`metadata.name`, `involvedObject.uid`, `status.phase`, `spec.nodeName`). A missing field reads
//! as the empty string, so `spec.nodeName=` selects unscheduled pods and `status.phase!=Running`
//! selects pods without a phase. The real server supports only a fixed set of paths per kind and
//! rejects the rest with 400 `field label not supported: <path>`; that policy belongs to the
//! caller, which can ask [`FieldSelector::unsupported_field`] about its allowed set. One alias is
//! built in, as in the events storage: `source` means `source.component`.
//!
//! Both selectors are plain values: parse once, then call `matches` as often as needed.
//! [`LabelSelector::from_json`] builds one from the structured `metav1.LabelSelector` of a
//! Deployment's `spec.selector`; its `Display` form is the string `kubectl` shows.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

/// The operator of one label requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelOp {
    /// `key` — the label is present (any value).
    Exists,
    /// `!key` — the label is absent.
    DoesNotExist,
    /// `key=value` or `key==value`.
    Equals,
    /// `key!=value` — also true when the label is absent.
    NotEquals,
    /// `key in (a,b)`.
    In,
    /// `key notin (a,b)` — also true when the label is absent.
    NotIn,
    /// `key>N` — the label is present and its value is an integer greater than N.
    GreaterThan,
    /// `key<N` — the label is present and its value is an integer less than N.
    LessThan,
}

/// One term of a label selector: a key, an operator and the values the operator compares with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelRequirement {
    /// The label key, e.g. `app` or `example.com/tier`.
    pub key: String,
    /// The comparison.
    pub op: LabelOp,
    /// Values for `=`, `!=`, `in`, `notin` (one for equality, one or more for sets), the single
    /// integer for `>`/`<`, none for existence tests.
    pub values: Vec<String>,
}

impl LabelRequirement {
    /// Does this single requirement hold for `labels`?
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.op {
            LabelOp::Exists => value.is_some(),
            LabelOp::DoesNotExist => value.is_none(),
            LabelOp::Equals | LabelOp::In => value.is_some_and(|v| self.values.contains(v)),
            LabelOp::NotEquals | LabelOp::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            LabelOp::GreaterThan | LabelOp::LessThan => {
                let (Some(have), Some(want)) = (
                    value.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|v| v.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.op == LabelOp::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for LabelRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = &self.key;
        match self.op {
            LabelOp::Exists => write!(f, "{key}"),
            LabelOp::DoesNotExist => write!(f, "!{key}"),
            LabelOp::Equals => write!(f, "{key}={}", self.values.join("")),
            LabelOp::NotEquals => write!(f, "{key}!={}", self.values.join("")),
            LabelOp::In => write!(f, "{key} in ({})", self.values.join(",")),
            LabelOp::NotIn => write!(f, "{key} notin ({})", self.values.join(",")),
            LabelOp::GreaterThan => write!(f, "{key}>{}", self.values.join("")),
            LabelOp::LessThan => write!(f, "{key}<{}", self.values.join("")),
        }
    }
}

/// A parsed label selector: the AND of its requirements. The default (empty) selector matches
/// every object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Not,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Ident(s) => write!(f, "{s}"),
            Token::Not => f.write_str("!"),
            Token::Eq => f.write_str("="),
            Token::DoubleEq => f.write_str("=="),
            Token::NotEq => f.write_str("!="),
            Token::Gt => f.write_str(">"),
            Token::Lt => f.write_str("<"),
            Token::Open => f.write_str("("),
            Token::Close => f.write_str(")"),
            Token::Comma => f.write_str(","),
        }
    }
}

fn is_special(c: char) -> bool {
    c.is_whitespace() || matches!(c, ',' | '(' | ')' | '=' | '!' | '<' | '>')
}

fn tokenize(input: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = input.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let token = match c {
            ',' => Token::Comma,
            '(' => Token::Open,
            ')' => Token::Close,
            '>' => Token::Gt,
            '<' => Token::Lt,
            '!' | '=' => {
                chars.next();
                let doubled = chars.peek() == Some(&'=');
                if doubled {
                    chars.next();
                }
                tokens.push(match (c, doubled) {
                    ('!', true) => Token::NotEq,
                    ('!', false) => Token::Not,
                    (_, true) => Token::DoubleEq,
                    (_, false) => Token::Eq,
                });
                continue;
            }
            _ => {
                let mut ident = String::new();
                while let Some(&c) = chars.peek() {
                    if is_special(c) {
                        break;
                    }
                    ident.push(c);
                    chars.next();
                }
                tokens.push(Token::Ident(ident));
                continue;
            }
        };
        chars.next();
        tokens.push(token);
    }
    tokens
}

/// Is `s` a valid label value (or the name part of a key)? At most 63 characters of
/// `[A-Za-z0-9_.-]`, beginning and ending alphanumeric; the empty string is allowed for values.
fn is_label_value(s: &str) -> bool {
    if s.is_empty() {
        return true;
    }
    let bytes = s.as_bytes();
    s.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
}

/// Is `s` a DNS-1123 subdomain (the optional prefix of a label key)?
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
        })
}

fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return Err(format!(
            "invalid label key {key:?}: prefix part must be a lowercase RFC 1123 subdomain"
        ));
    }
    if name.is_empty() || !is_label_value(name) {
        return Err(format!(
            "invalid label key {key:?}: name part must consist of alphanumeric characters, '-', '_' or '.', \
             and must start and end with an alphanumeric character (at most 63 characters)"
        ));
    }
    Ok(())
}

fn validate_value(key: &str, value: &str) -> Result<(), String> {
    if is_label_value(value) {
        Ok(())
    } else {
        Err(format!(
            "invalid label value {value:?} for key {key:?}: a valid label value must be an empty string \
             or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an \
             alphanumeric character (at most 63 characters)"
        ))
    }
}

struct Parser<'a> {
    input: &'a str,
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn err(&self, what: impl fmt::Display) -> String {
        format!("unable to parse label selector {:?}: {what}", self.input)
    }

    fn found(t: Option<&Token>) -> String {
        match t {
            Some(t) => format!("found '{t}'"),
            None => "found end of input".to_string(),
        }
    }

    fn requirement(&mut self) -> Result<LabelRequirement, String> {
        let negated = if self.peek() == Some(&Token::Not) {
            self.next();
            true
        } else {
            false
        };
        let key = match self.next() {
            Some(Token::Ident(k)) => k,
            other => {
                return Err(self.err(format!(
                    "expected a label key, {}",
                    Self::found(other.as_ref())
                )));
            }
        };
        validate_key(&key).map_err(|e| self.err(e))?;
        if negated {
            return match self.peek() {
                None | Some(Token::Comma) => Ok(LabelRequirement {
                    key,
                    op: LabelOp::DoesNotExist,
                    values: Vec::new(),
                }),
                other => Err(self.err(format!(
                    "in requirement \"!{key}\": expected ',' or end of input, {}",
                    Self::found(other)
                ))),
            };
        }
        let op = match self.peek() {
            None | Some(Token::Comma) => {
                return Ok(LabelRequirement {
                    key,
                    op: LabelOp::Exists,
                    values: Vec::new(),
                });
            }
            Some(Token::Eq | Token::DoubleEq) => LabelOp::Equals,
            Some(Token::NotEq) => LabelOp::NotEquals,
            Some(Token::Gt) => LabelOp::GreaterThan,
            Some(Token::Lt) => LabelOp::LessThan,
            Some(Token::Ident(word)) if word == "in" => LabelOp::In,
            Some(Token::Ident(word)) if word == "notin" => LabelOp::NotIn,
            other => {
                return Err(self.err(format!(
                    "in requirement on key {key:?}: expected one of '=', '==', '!=', 'in', 'notin', \
                     '>', '<', ',' or end of input, {}",
                    Self::found(other)
                )));
            }
        };
        self.next();
        let values = match op {
            LabelOp::In | LabelOp::NotIn => self.value_set(&key)?,
            _ => {
                let value = match self.peek() {
                    Some(Token::Ident(v)) => {
                        let v = v.clone();
                        self.next();
                        v
                    }
                    // `key=` selects the empty value.
                    None | Some(Token::Comma) => String::new(),
                    other => {
                        return Err(self.err(format!(
                            "in requirement on key {key:?}: expected a value, {}",
                            Self::found(other)
                        )));
                    }
                };
                if matches!(op, LabelOp::GreaterThan | LabelOp::LessThan) {
                    if value.parse::<i64>().is_err() {
                        return Err(self.err(format!(
                            "in requirement on key {key:?}: {value:?} is not an integer, as '>' and '<' require"
                        )));
                    }
                } else {
                    validate_value(&key, &value).map_err(|e| self.err(e))?;
                }
                vec![value]
            }
        };
        Ok(LabelRequirement { key, op, values })
    }

    fn value_set(&mut self, key: &str) -> Result<Vec<String>, String> {
        match self.next() {
            Some(Token::Open) => {}
            other => {
                return Err(self.err(format!(
                    "in set requirement on key {key:?}: expected '(', {}",
                    Self::found(other.as_ref())
                )));
            }
        }
        let mut values = Vec::new();
        let mut current = String::new();
        loop {
            match self.next() {
                Some(Token::Ident(v)) => {
                    if !current.is_empty() {
                        return Err(self.err(format!(
                            "in set requirement on key {key:?}: expected ',' or ')' after {current:?}, found '{v}'"
                        )));
                    }
                    current = v;
                }
                Some(Token::Comma) => {
                    validate_value(key, &current).map_err(|e| self.err(e))?;
                    values.push(std::mem::take(&mut current));
                }
                Some(Token::Close) => {
                    validate_value(key, &current).map_err(|e| self.err(e))?;
                    values.push(current);
                    return Ok(values);
                }
                other => {
                    return Err(self.err(format!(
                        "in set requirement on key {key:?}: expected a value, ',' or ')', {}",
                        Self::found(other.as_ref())
                    )));
                }
            }
        }
    }
}

impl LabelSelector {
    /// Parses a `labelSelector` query value. The empty string (or only whitespace) gives the
    /// selector that matches everything. Errors name the selector and the offending term.
    pub fn parse(input: &str) -> Result<LabelSelector, String> {
        let mut parser = Parser {
            input,
            tokens: tokenize(input),
            pos: 0,
        };
        let mut requirements = Vec::new();
        if parser.tokens.is_empty() {
            return Ok(LabelSelector { requirements });
        }
        loop {
            requirements.push(parser.requirement()?);
            match parser.next() {
                None => break,
                Some(Token::Comma) => {
                    if parser.peek().is_none() {
                        return Err(parser.err("expected a requirement after ','"));
                    }
                }
                Some(other) => {
                    return Err(
                        parser.err(format!("expected ',' or end of input, found '{other}'"))
                    );
                }
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// A selector requiring each given label to have exactly the given value (the form of a
    /// Deployment's `spec.selector.matchLabels`).
    pub fn from_match_labels(labels: &BTreeMap<String, String>) -> LabelSelector {
        LabelSelector {
            requirements: labels
                .iter()
                .map(|(k, v)| LabelRequirement {
                    key: k.clone(),
                    op: LabelOp::Equals,
                    values: vec![v.clone()],
                })
                .collect(),
        }
    }

    /// Converts a structured `metav1.LabelSelector` (`{"matchLabels": {...}, "matchExpressions":
    /// [{"key", "operator": In|NotIn|Exists|DoesNotExist, "values"}]}`), as found in
    /// `spec.selector` of Deployments and StatefulSets. `null` or `{}` selects everything.
    /// Errors name the offending expression. Its `Display` form is the string the `/scale`
    /// subresource reports in `status.selector`.
    pub fn from_json(selector: &Value) -> Result<LabelSelector, String> {
        let mut requirements = Vec::new();
        if selector.is_null() {
            return Ok(LabelSelector { requirements });
        }
        let Some(obj) = selector.as_object() else {
            return Err(format!(
                "a label selector must be an object, got {selector}"
            ));
        };
        if let Some(labels) = obj.get("matchLabels").filter(|v| !v.is_null()) {
            let Some(labels) = labels.as_object() else {
                return Err(format!("matchLabels must be an object, got {labels}"));
            };
            for (k, v) in labels {
                let Some(v) = v.as_str() else {
                    return Err(format!("matchLabels.{k}: value must be a string, got {v}"));
                };
                validate_key(k)?;
                validate_value(k, v)?;
                requirements.push(LabelRequirement {
                    key: k.clone(),
                    op: LabelOp::Equals,
                    values: vec![v.to_string()],
                });
            }
        }
        if let Some(exprs) = obj.get("matchExpressions").filter(|v| !v.is_null()) {
            let Some(exprs) = exprs.as_array() else {
                return Err(format!("matchExpressions must be a list, got {exprs}"));
            };
            for (i, e) in exprs.iter().enumerate() {
                let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
                validate_key(key).map_err(|err| format!("matchExpressions[{i}].key: {err}"))?;
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|vs| {
                        vs.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                let operator = e
                    .get("operator")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let op = match operator {
                    "In" => LabelOp::In,
                    "NotIn" => LabelOp::NotIn,
                    "Exists" => LabelOp::Exists,
                    "DoesNotExist" => LabelOp::DoesNotExist,
                    other => {
                        return Err(format!(
                            "matchExpressions[{i}].operator: {other:?} is not a valid label selector operator (In, NotIn, Exists, DoesNotExist)"
                        ));
                    }
                };
                let set_op = matches!(op, LabelOp::In | LabelOp::NotIn);
                if set_op && values.is_empty() {
                    return Err(format!(
                        "matchExpressions[{i}].values: must be specified when `operator` is 'In' or 'NotIn'"
                    ));
                }
                if !set_op && !values.is_empty() {
                    return Err(format!(
                        "matchExpressions[{i}].values: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                    ));
                }
                for v in &values {
                    validate_value(key, v)
                        .map_err(|err| format!("matchExpressions[{i}].values: {err}"))?;
                }
                requirements.push(LabelRequirement {
                    key: key.to_string(),
                    op,
                    values,
                });
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// Does every requirement hold for `labels`?
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Reads `metadata.labels` of a JSON object (missing labels are an empty set) and matches.
    pub fn matches_object(&self, obj: &Value) -> bool {
        if self.requirements.is_empty() {
            return true;
        }
        let labels: BTreeMap<String, String> = obj
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        self.matches(&labels)
    }

    /// True when the selector has no requirements and so matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The parsed requirements, in the order written.
    pub fn requirements(&self) -> &[LabelRequirement] {
        &self.requirements
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// One term of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The dotted path, as written (`metadata.name`).
    pub field: String,
    /// `true` for `!=`, `false` for `=` / `==`.
    pub negated: bool,
    /// The (unescaped) value compared with.
    pub value: String,
}

/// A parsed field selector: the AND of its terms. The default selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

/// Splits on commas not preceded by a backslash escape.
fn split_unescaped(input: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in input.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            parts.push(&input[start..i]);
            start = i + 1;
        }
    }
    parts.push(&input[start..]);
    parts
}

fn unescape_field_value(term: &str, value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(other) => {
                    return Err(format!(
                        "invalid field selector term {term:?}: invalid escape sequence '\\{other}'"
                    ));
                }
                None => {
                    return Err(format!(
                        "invalid field selector term {term:?}: value ends with an unfinished escape"
                    ));
                }
            }
        } else if c == ',' || c == '=' {
            return Err(format!(
                "invalid field selector term {term:?}: unescaped '{c}' in value {value:?}"
            ));
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// The value a field selector sees at a dotted `path` in `obj`: strings as they are, numbers and
/// booleans rendered, anything missing or null as the empty string.
pub fn field_value(obj: &Value, path: &str) -> String {
    let path = match path {
        "source" => "source.component",
        other => other,
    };
    let mut cur = obj;
    for part in path.split('.') {
        match cur.get(part) {
            Some(next) => cur = next,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => String::new(),
    }
}

impl FieldSelector {
    /// Parses a `fieldSelector` query value (`a=b,c!=d`). The empty string matches everything.
    /// Errors name the term that could not be understood.
    pub fn parse(input: &str) -> Result<FieldSelector, String> {
        let mut requirements = Vec::new();
        if input.trim().is_empty() {
            return Ok(FieldSelector { requirements });
        }
        for term in split_unescaped(input, ',') {
            // The earliest operator wins; at one position `!=` and `==` beat `=`.
            let mut found = None;
            for (i, _) in term.char_indices() {
                let rest = &term[i..];
                if let Some(op) = ["!=", "==", "="]
                    .into_iter()
                    .find(|op| rest.starts_with(op))
                {
                    found = Some((i, op));
                    break;
                }
            }
            let Some((i, op)) = found else {
                return Err(format!(
                    "invalid selector: '{input}'; can't understand '{term}': expected one of '=', '==', '!='"
                ));
            };
            let field = term[..i].trim();
            if field.is_empty() {
                return Err(format!(
                    "invalid selector: '{input}'; can't understand '{term}': missing field name"
                ));
            }
            let value = unescape_field_value(term, &term[i + op.len()..])?;
            requirements.push(FieldRequirement {
                field: field.to_string(),
                negated: op == "!=",
                value,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// Does every term hold for `obj`? See [`field_value`] for how a path is read.
    pub fn matches(&self, obj: &Value) -> bool {
        self.requirements
            .iter()
            .all(|r| (field_value(obj, &r.field) == r.value) != r.negated)
    }

    /// The first field not in `allowed`, for the server's `field label not supported: <field>`
    /// answer. `None` when every field is allowed.
    pub fn unsupported_field(&self, allowed: &[&str]) -> Option<&str> {
        self.requirements
            .iter()
            .map(|r| r.field.as_str())
            .find(|f| !allowed.contains(f))
    }

    /// The name demanded by a `metadata.name=<n>` term, if any (watch on an object URL compares
    /// it with the name in the URL).
    pub fn required_name(&self) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == "metadata.name" && !r.negated)
            .map(|r| r.value.as_str())
    }

    /// The selector `metadata.name=<name>`, which the server uses for a watch on an object URL.
    pub fn for_name(name: &str) -> FieldSelector {
        FieldSelector {
            requirements: vec![FieldRequirement {
                field: "metadata.name".into(),
                negated: false,
                value: name.into(),
            }],
        }
    }

    /// True when the selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The parsed terms, in the order written.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn empty_selector_matches_everything() {
        let s = LabelSelector::parse("").unwrap();
        assert!(s.is_empty());
        assert!(s.matches(&labels(&[])));
        assert!(s.matches(&labels(&[("a", "b")])));
        assert!(LabelSelector::parse("   ").unwrap().is_empty());
    }

    #[test]
    fn equality_forms() {
        for text in ["app=web", "app==web", " app = web "] {
            let s = LabelSelector::parse(text).unwrap();
            assert!(s.matches(&labels(&[("app", "web")])), "{text}");
            assert!(!s.matches(&labels(&[("app", "db")])), "{text}");
            assert!(!s.matches(&labels(&[])), "{text}");
        }
    }

    #[test]
    fn not_equals_matches_missing_key() {
        let s = LabelSelector::parse("app!=web").unwrap();
        assert!(s.matches(&labels(&[])));
        assert!(s.matches(&labels(&[("app", "db")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
    }

    #[test]
    fn set_based() {
        let s = LabelSelector::parse("env in (prod, dev),tier notin (cache)").unwrap();
        assert!(s.matches(&labels(&[("env", "prod")])));
        assert!(s.matches(&labels(&[("env", "dev"), ("tier", "web")])));
        assert!(!s.matches(&labels(&[("env", "prod"), ("tier", "cache")])));
        assert!(!s.matches(&labels(&[("env", "qa")])));
        assert!(!s.matches(&labels(&[])));
        assert_eq!(s.to_string(), "env in (prod,dev),tier notin (cache)");
    }

    #[test]
    fn empty_values_in_sets() {
        let s = LabelSelector::parse("x in (foo,,baz)").unwrap();
        assert_eq!(s.requirements()[0].values, vec!["foo", "", "baz"]);
        assert!(s.matches(&labels(&[("x", "")])));
    }

    #[test]
    fn existence() {
        let s = LabelSelector::parse("app,!canary").unwrap();
        assert!(s.matches(&labels(&[("app", "x")])));
        assert!(!s.matches(&labels(&[("app", "x"), ("canary", "")])));
        assert!(!s.matches(&labels(&[])));
    }

    #[test]
    fn numeric_comparisons() {
        let s = LabelSelector::parse("replicas>2,replicas<10").unwrap();
        assert!(s.matches(&labels(&[("replicas", "5")])));
        assert!(!s.matches(&labels(&[("replicas", "2")])));
        assert!(!s.matches(&labels(&[("replicas", "ten")])));
        assert!(!s.matches(&labels(&[])));
        let err = LabelSelector::parse("replicas>many").unwrap_err();
        assert!(err.contains("\"many\" is not an integer"), "{err}");
    }

    #[test]
    fn prefixed_keys() {
        let s = LabelSelector::parse("app.kubernetes.io/name=cnat").unwrap();
        assert!(s.matches(&labels(&[("app.kubernetes.io/name", "cnat")])));
        let err = LabelSelector::parse("Bad_Prefix/x=y").unwrap_err();
        assert!(err.contains("prefix part"), "{err}");
    }

    #[test]
    fn errors_name_the_bad_term() {
        let err = LabelSelector::parse("env in prod").unwrap_err();
        assert!(
            err.contains("key \"env\"") && err.contains("expected '('"),
            "{err}"
        );
        let err = LabelSelector::parse("env in (prod").unwrap_err();
        assert!(err.contains("found end of input"), "{err}");
        let err = LabelSelector::parse("a=b,").unwrap_err();
        assert!(err.contains("after ','"), "{err}");
        let err = LabelSelector::parse("a=-bad-").unwrap_err();
        assert!(err.contains("\"-bad-\""), "{err}");
        let err = LabelSelector::parse("a b").unwrap_err();
        assert!(
            err.contains("key \"a\"") && err.contains("found 'b'"),
            "{err}"
        );
        let err = LabelSelector::parse("=x").unwrap_err();
        assert!(err.contains("expected a label key, found '='"), "{err}");
        let err = LabelSelector::parse("!a=b").unwrap_err();
        assert!(err.contains("\"!a\""), "{err}");
        let long = "x".repeat(64);
        assert!(LabelSelector::parse(&format!("a={long}")).is_err());
    }

    #[test]
    fn matches_object_reads_metadata_labels() {
        let s = LabelSelector::parse("app=web").unwrap();
        assert!(s.matches_object(&json!({"metadata": {"labels": {"app": "web"}}})));
        assert!(!s.matches_object(&json!({"metadata": {}})));
        assert!(LabelSelector::default().matches_object(&json!({})));
    }

    #[test]
    fn match_labels_selector() {
        let s = LabelSelector::from_match_labels(&labels(&[("a", "1"), ("b", "2")]));
        assert!(s.matches(&labels(&[("a", "1"), ("b", "2"), ("c", "3")])));
        assert!(!s.matches(&labels(&[("a", "1")])));
    }

    fn event() -> Value {
        json!({
            "metadata": {"name": "at.1", "namespace": "default"},
            "involvedObject": {"kind": "At", "name": "example", "namespace": "default", "uid": "u-1"},
            "source": {"component": "cnat"},
            "count": 3,
            "type": "Normal"
        })
    }

    #[test]
    fn field_selector_like_kubectl_describe() {
        let s = FieldSelector::parse(
            "involvedObject.kind=At,involvedObject.name=example,involvedObject.namespace=default,involvedObject.uid=u-1",
        )
        .unwrap();
        assert!(s.matches(&event()));
        let s = FieldSelector::parse("involvedObject.uid=u-2").unwrap();
        assert!(!s.matches(&event()));
    }

    #[test]
    fn field_selector_operators_and_missing_fields() {
        assert!(
            FieldSelector::parse("metadata.name==at.1")
                .unwrap()
                .matches(&event())
        );
        assert!(
            !FieldSelector::parse("metadata.name!=at.1")
                .unwrap()
                .matches(&event())
        );
        assert!(
            FieldSelector::parse("status.phase!=Running")
                .unwrap()
                .matches(&event())
        );
        assert!(
            FieldSelector::parse("spec.nodeName=")
                .unwrap()
                .matches(&event())
        );
        assert!(FieldSelector::parse("count=3").unwrap().matches(&event()));
        assert!(
            FieldSelector::parse("source=cnat")
                .unwrap()
                .matches(&event())
        );
        assert!(FieldSelector::parse("").unwrap().matches(&event()));
    }

    #[test]
    fn field_selector_escapes() {
        let s = FieldSelector::parse(r"metadata.name=a\,b\=c\\d").unwrap();
        assert_eq!(s.requirements()[0].value, r"a,b=c\d");
        assert!(s.matches(&json!({"metadata": {"name": r"a,b=c\d"}})));
        let err = FieldSelector::parse(r"metadata.name=a\x").unwrap_err();
        assert!(err.contains("invalid escape"), "{err}");
    }

    #[test]
    fn field_selector_errors() {
        let err = FieldSelector::parse("metadata.name").unwrap_err();
        assert!(err.contains("can't understand 'metadata.name'"), "{err}");
        let err = FieldSelector::parse("=x").unwrap_err();
        assert!(err.contains("missing field name"), "{err}");
        let err = FieldSelector::parse("a=b=c").unwrap_err();
        assert!(err.contains("unescaped '='"), "{err}");
    }

    #[test]
    fn field_selector_helpers() {
        let s = FieldSelector::parse("metadata.name=x,spec.foo=y").unwrap();
        assert_eq!(s.required_name(), Some("x"));
        assert_eq!(
            s.unsupported_field(&["metadata.name", "metadata.namespace"]),
            Some("spec.foo")
        );
        assert_eq!(s.unsupported_field(&["metadata.name", "spec.foo"]), None);
        assert!(FieldSelector::for_name("x").matches(&json!({"metadata": {"name": "x"}})));
    }

    #[test]
    fn structured_selectors() {
        let s = LabelSelector::from_json(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]},
                                 {"key": "canary", "operator": "DoesNotExist"}]
        }))
        .unwrap();
        assert_eq!(s.to_string(), "app=web,tier in (fe,be),!canary");
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "fe")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "fe"), ("canary", "1")])));
        assert!(LabelSelector::from_json(&Value::Null).unwrap().is_empty());
        assert!(LabelSelector::from_json(&json!({})).unwrap().is_empty());
        let err = LabelSelector::from_json(
            &json!({"matchExpressions": [{"key": "a", "operator": "Gt"}]}),
        )
        .unwrap_err();
        assert!(
            err.contains("matchExpressions[0].operator") && err.contains("\"Gt\""),
            "{err}"
        );
        let err = LabelSelector::from_json(
            &json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
        )
        .unwrap_err();
        assert!(err.contains("must be specified"), "{err}");
        let err = LabelSelector::from_json(&json!({"matchLabels": {"a": 1}})).unwrap_err();
        assert!(err.contains("matchLabels.a"), "{err}");
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        fn key() -> impl Strategy<Value = String> {
            "[a-z]([a-z0-9.-]{0,8}[a-z0-9])?"
        }
        fn value() -> impl Strategy<Value = String> {
            "([A-Za-z0-9]([A-Za-z0-9_.-]{0,6}[A-Za-z0-9])?)?"
        }
        fn requirement() -> impl Strategy<Value = LabelRequirement> {
            (key(), 0..6usize, prop::collection::vec(value(), 1..4)).prop_map(
                |(key, op, values)| {
                    let (op, values) = match op {
                        0 => (LabelOp::Exists, vec![]),
                        1 => (LabelOp::DoesNotExist, vec![]),
                        2 => (LabelOp::Equals, vec![values[0].clone()]),
                        3 => (LabelOp::NotEquals, vec![values[0].clone()]),
                        4 => (LabelOp::In, values),
                        _ => (LabelOp::NotIn, values),
                    };
                    LabelRequirement { key, op, values }
                },
            )
        }

        proptest! {
            /// Printing a selector and parsing it back gives the same selector, and the two
            /// agree on every label set.
            #[test]
            fn display_parse_round_trip(
                reqs in prop::collection::vec(requirement(), 0..4),
                labels in prop::collection::btree_map(key(), value(), 0..4),
            ) {
                let selector = LabelSelector { requirements: reqs };
                let text = selector.to_string();
                let parsed = LabelSelector::parse(&text).unwrap();
                prop_assert_eq!(&parsed, &selector, "text {}", text);
                prop_assert_eq!(parsed.matches(&labels), selector.matches(&labels));
            }

            /// Parsing arbitrary text never panics.
            #[test]
            fn parse_never_panics(text in "\\PC{0,40}") {
                let _ = LabelSelector::parse(&text);
                let _ = FieldSelector::parse(&text);
            }
        }
    }
}
