//! Label selectors: parse `app=web,tier in (a,b),!canary` and match labels.
//!
//! Both sides of the wire speak this language (apimachinery's `pkg/labels`): the API server
//! filters `?labelSelector=` lists and watches with it, and a client's lister answers
//! `list(selector)` from its local cache with it. Here it is written once, for both the
//! embedded API server and the controller library. The grammar, requirement by requirement,
//! separated by commas:
//!
//! | text | meaning | matches when the label is missing? |
//! |---|---|---|
//! | `k=v`, `k==v` | label `k` equals `v` | no |
//! | `k!=v` | label `k` is not `v` | **yes** |
//! | `k in (a,b)` | label `k` is one of the values | no |
//! | `k notin (a,b)` | label `k` is none of the values | **yes** |
//! | `k` | label `k` exists | no |
//! | `!k` | label `k` does not exist | yes |
//! | `k>5`, `k<5` | label `k` is an integer greater / less than 5 | no |
//!
//! All requirements must hold (AND). The empty string selects everything; [`Selector::nothing`]
//! selects nothing (what a `nil` `metav1.LabelSelector` means). Keys are validated as qualified
//! names (optional DNS-subdomain prefix, `/`, a name of at most 63 characters) and values as
//! label values (at most 63 characters of `[A-Za-z0-9._-]`, alphanumeric at both ends, or
//! empty), and an error names the offending text. [`Selector::from_label_selector`] converts the
//! structured `metav1.LabelSelector` (`matchLabels` + `matchExpressions`) found in workload specs.
//!
//! `Display` prints the canonical form (requirements sorted by key, values sorted), which is
//! what apimachinery's `String()` prints, so a parsed selector can be sent back to a server.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Why a selector could not be parsed or converted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The text does not follow the grammar.
    #[error("invalid label selector {selector:?}: {reason}")]
    Syntax {
        /// The whole selector text.
        selector: String,
        /// What was wrong, naming the token.
        reason: String,
    },
    /// A key is not a valid qualified name.
    #[error("invalid label key {key:?}: {reason}")]
    InvalidKey {
        /// The key.
        key: String,
        /// Which rule it breaks.
        reason: String,
    },
    /// A value is not a valid label value.
    #[error("invalid label value {value:?} for key {key:?}: {reason}")]
    InvalidValue {
        /// The key the value belongs to.
        key: String,
        /// The value.
        value: String,
        /// Which rule it breaks.
        reason: String,
    },
}

/// A selection operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operator {
    /// `k=v` / `k==v`.
    Equals,
    /// `k!=v`.
    NotEquals,
    /// `k in (...)`.
    In,
    /// `k notin (...)`.
    NotIn,
    /// `k`.
    Exists,
    /// `!k`.
    DoesNotExist,
    /// `k>n`.
    GreaterThan,
    /// `k<n`.
    LessThan,
}

/// One requirement: a key, an operator and (depending on the operator) values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    op: Operator,
    /// Sorted and de-duplicated.
    values: Vec<String>,
}

impl Requirement {
    /// Builds a validated requirement.
    pub fn new(
        key: impl Into<String>,
        op: Operator,
        values: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<Self, SelectorError> {
        let key = key.into();
        validate_key(&key)?;
        let mut values: Vec<String> = values.into_iter().map(Into::into).collect();
        let bad = |reason: &str| SelectorError::InvalidValue {
            key: key.clone(),
            value: values.join(","),
            reason: reason.to_owned(),
        };
        match op {
            Operator::Equals | Operator::NotEquals if values.len() != 1 => {
                return Err(bad("exactly one value is required"));
            }
            Operator::In | Operator::NotIn if values.is_empty() => {
                return Err(bad("at least one value is required"));
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                return Err(bad("no values may be given"));
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    return Err(bad("exactly one value is required"));
                }
                if values[0].parse::<i64>().is_err() {
                    return Err(bad("the value must be an integer"));
                }
                values.sort();
                return Ok(Requirement { key, op, values });
            }
            _ => {}
        }
        for v in &values {
            validate_value(&key, v)?;
        }
        values.sort();
        values.dedup();
        Ok(Requirement { key, op, values })
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }
    /// The operator.
    pub fn operator(&self) -> Operator {
        self.op
    }
    /// The values (sorted).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Does this requirement hold for these labels?
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let got = labels.get(&self.key);
        match self.op {
            Operator::Equals | Operator::In => {
                got.is_some_and(|v| self.values.binary_search(v).is_ok())
            }
            Operator::NotEquals | Operator::NotIn => {
                got.is_none_or(|v| self.values.binary_search(v).is_err())
            }
            Operator::Exists => got.is_some(),
            Operator::DoesNotExist => got.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(have), Some(want)) = (
                    got.and_then(|v| v.parse::<i64>().ok()),
                    self.values.first().and_then(|v| v.parse::<i64>().ok()),
                ) else {
                    return false;
                };
                if self.op == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.values.first().map(String::as_str).unwrap_or_default();
        match self.op {
            Operator::Equals => write!(f, "{}={first}", self.key),
            Operator::NotEquals => write!(f, "{}!={first}", self.key),
            Operator::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            Operator::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
            Operator::Exists => f.write_str(&self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::GreaterThan => write!(f, "{}>{first}", self.key),
            Operator::LessThan => write!(f, "{}<{first}", self.key),
        }
    }
}

/// A label selector: nothing, or the AND of requirements (none = everything).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selector {
    /// Matches no object (a `nil` `metav1.LabelSelector`).
    Nothing,
    /// Matches objects satisfying every requirement; an empty list matches everything.
    Requirements(Vec<Requirement>),
}

impl Default for Selector {
    fn default() -> Self {
        Selector::everything()
    }
}

impl Selector {
    /// Matches every object.
    pub fn everything() -> Self {
        Selector::Requirements(Vec::new())
    }

    /// Matches no object.
    pub fn nothing() -> Self {
        Selector::Nothing
    }

    /// True for the selector that matches everything (listers skip label checks for it).
    pub fn is_everything(&self) -> bool {
        matches!(self, Selector::Requirements(r) if r.is_empty())
    }

    /// Builds a selector from requirements (sorted by key for a canonical form).
    pub fn from_requirements(mut reqs: Vec<Requirement>) -> Self {
        reqs.sort_by(|a, b| a.key.cmp(&b.key).then(a.op.cmp(&b.op)));
        Selector::Requirements(reqs)
    }

    /// `k1=v1,k2=v2`: every pair must match (a `matchLabels` map, or `labels.SelectorFromSet`).
    pub fn from_labels<'a>(
        labels: impl IntoIterator<Item = (&'a String, &'a String)>,
    ) -> Result<Self, SelectorError> {
        let reqs = labels
            .into_iter()
            .map(|(k, v)| Requirement::new(k.clone(), Operator::Equals, [v.clone()]))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Selector::from_requirements(reqs))
    }

    /// Converts a `metav1.LabelSelector`. An empty one selects everything; operators are `In`,
    /// `NotIn`, `Exists` and `DoesNotExist` (`LabelSelectorAsSelector`). `None` (a missing
    /// selector) should be mapped to [`Selector::nothing`] by the caller.
    pub fn from_label_selector(ls: &LabelSelector) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for (k, v) in ls.match_labels.iter().flatten() {
            reqs.push(Requirement::new(k.clone(), Operator::Equals, [v.clone()])?);
        }
        for expr in ls.match_expressions.iter().flatten() {
            let op = match expr.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(SelectorError::Syntax {
                        selector: format!("matchExpressions[key={}]", expr.key),
                        reason: format!("{other:?} is not a valid label selector operator"),
                    });
                }
            };
            reqs.push(Requirement::new(
                expr.key.clone(),
                op,
                expr.values.iter().flatten().cloned(),
            )?);
        }
        Ok(Selector::from_requirements(reqs))
    }

    /// Parses the text form (see the module doc).
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        Parser::new(text).parse()
    }

    /// Does the selector match these labels?
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Selector::Nothing => false,
            Selector::Requirements(reqs) => reqs.iter().all(|r| r.matches(labels)),
        }
    }

    /// Does the selector match an object's labels (`None` = no labels)?
    pub fn matches_opt(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.matches(labels.unwrap_or(&EMPTY))
    }

    /// The requirements (empty for everything and for nothing).
    pub fn requirements(&self) -> &[Requirement] {
        match self {
            Selector::Nothing => &[],
            Selector::Requirements(r) => r,
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // apimachinery prints the nothing selector as an empty string too; it is never sent.
            Selector::Nothing => Ok(()),
            Selector::Requirements(reqs) => {
                for (i, r) in reqs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{r}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::str::FromStr for Selector {
    type Err = SelectorError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Selector::parse(s)
    }
}

impl TryFrom<&str> for Selector {
    type Error = SelectorError;
    fn try_from(s: &str) -> Result<Self, Self::Error> {
        Selector::parse(s)
    }
}

impl TryFrom<&LabelSelector> for Selector {
    type Error = SelectorError;
    fn try_from(ls: &LabelSelector) -> Result<Self, Self::Error> {
        Selector::from_label_selector(ls)
    }
}

// ----- validation -----

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'
}

fn check_name_part(s: &str, max: usize) -> Result<(), String> {
    if s.is_empty() {
        return Err("the name part must not be empty".into());
    }
    if s.len() > max {
        return Err(format!("the name part must be at most {max} characters"));
    }
    if !s.chars().all(is_name_char) {
        return Err("the name part may contain only alphanumerics, '-', '_' and '.'".into());
    }
    let alnum_ends = s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !alnum_ends {
        return Err("the name part must start and end with an alphanumeric character".into());
    }
    Ok(())
}

fn check_dns_subdomain(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > 253 {
        return Err("the prefix must be a DNS subdomain of 1 to 253 characters".into());
    }
    for label in s.split('.') {
        let ok = !label.is_empty()
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(
                "the prefix must be lower-case alphanumerics and '-', dot-separated".into(),
            );
        }
    }
    Ok(())
}

fn validate_key(key: &str) -> Result<(), SelectorError> {
    let err = |reason: String| SelectorError::InvalidKey {
        key: key.to_owned(),
        reason,
    };
    match key.split_once('/') {
        Some((prefix, name)) => {
            check_dns_subdomain(prefix).map_err(err)?;
            check_name_part(name, 63).map_err(err)
        }
        None => check_name_part(key, 63).map_err(err),
    }
}

fn validate_value(key: &str, value: &str) -> Result<(), SelectorError> {
    if value.is_empty() {
        return Ok(());
    }
    check_name_part(value, 63).map_err(|reason| SelectorError::InvalidValue {
        key: key.to_owned(),
        value: value.to_owned(),
        reason: reason.replace("name part", "value"),
    })
}

// ----- parsing -----

#[derive(Clone, Debug, PartialEq)]
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
            Token::Ident(s) => write!(f, "{s:?}"),
            Token::Not => f.write_str("'!'"),
            Token::Eq => f.write_str("'='"),
            Token::DoubleEq => f.write_str("'=='"),
            Token::NotEq => f.write_str("'!='"),
            Token::Gt => f.write_str("'>'"),
            Token::Lt => f.write_str("'<'"),
            Token::Open => f.write_str("'('"),
            Token::Close => f.write_str("')'"),
            Token::Comma => f.write_str("','"),
        }
    }
}

fn lex(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '!' => {
                chars.next();
                if chars.peek() == Some(&'=') {
                    chars.next();
                    out.push(Token::NotEq);
                } else {
                    out.push(Token::Not);
                }
            }
            '=' => {
                chars.next();
                if chars.peek() == Some(&'=') {
                    chars.next();
                    out.push(Token::DoubleEq);
                } else {
                    out.push(Token::Eq);
                }
            }
            '>' => {
                chars.next();
                out.push(Token::Gt);
            }
            '<' => {
                chars.next();
                out.push(Token::Lt);
            }
            '(' => {
                chars.next();
                out.push(Token::Open);
            }
            ')' => {
                chars.next();
                out.push(Token::Close);
            }
            ',' => {
                chars.next();
                out.push(Token::Comma);
            }
            _ => {
                let mut s = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || "!=<>(),".contains(c) {
                        break;
                    }
                    s.push(c);
                    chars.next();
                }
                out.push(Token::Ident(s));
            }
        }
    }
    out
}

struct Parser<'a> {
    text: &'a str,
    tokens: Vec<Token>,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Self {
        Parser {
            text,
            tokens: lex(text),
            pos: 0,
        }
    }

    fn err(&self, reason: impl Into<String>) -> SelectorError {
        SelectorError::Syntax {
            selector: self.text.to_owned(),
            reason: reason.into(),
        }
    }

    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn ident(&mut self, what: &str) -> Result<String, SelectorError> {
        match self.next() {
            Some(Token::Ident(s)) => Ok(s),
            Some(t) => Err(self.err(format!("expected {what}, found {t}"))),
            None => Err(self.err(format!("expected {what}, found the end"))),
        }
    }

    fn parse(mut self) -> Result<Selector, SelectorError> {
        let mut reqs = Vec::new();
        if self.tokens.is_empty() {
            return Ok(Selector::everything());
        }
        loop {
            reqs.push(self.requirement()?);
            match self.next() {
                None => break,
                Some(Token::Comma) => {}
                Some(t) => return Err(self.err(format!("expected ',' or the end, found {t}"))),
            }
        }
        Ok(Selector::from_requirements(reqs))
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        if self.peek() == Some(&Token::Not) {
            self.pos += 1;
            let key = self.ident("a key after '!'")?;
            return Requirement::new(key, Operator::DoesNotExist, Vec::<String>::new());
        }
        let key = self.ident("a key")?;
        let op = match self.peek() {
            None | Some(Token::Comma) => {
                return Requirement::new(key, Operator::Exists, Vec::<String>::new());
            }
            Some(Token::Eq) | Some(Token::DoubleEq) => Operator::Equals,
            Some(Token::NotEq) => Operator::NotEquals,
            Some(Token::Gt) => Operator::GreaterThan,
            Some(Token::Lt) => Operator::LessThan,
            Some(Token::Ident(s)) if s == "in" => Operator::In,
            Some(Token::Ident(s)) if s == "notin" => Operator::NotIn,
            Some(t) => {
                return Err(self.err(format!("expected an operator after {key:?}, found {t}")));
            }
        };
        self.pos += 1;
        match op {
            Operator::In | Operator::NotIn => {
                match self.next() {
                    Some(Token::Open) => {}
                    _ => return Err(self.err(format!("expected '(' after {key:?} in/notin"))),
                }
                let mut values = Vec::new();
                loop {
                    match self.next() {
                        Some(Token::Ident(v)) => {
                            values.push(v);
                            match self.next() {
                                Some(Token::Comma) => {}
                                Some(Token::Close) => break,
                                _ => return Err(self.err("expected ',' or ')' in a value set")),
                            }
                        }
                        // `(a,,b)` and `()` carry empty values, as apimachinery accepts.
                        Some(Token::Comma) => values.push(String::new()),
                        Some(Token::Close) => {
                            values.push(String::new());
                            break;
                        }
                        _ => return Err(self.err("unterminated value set, expected ')'")),
                    }
                }
                Requirement::new(key, op, values)
            }
            _ => {
                let value = match self.peek() {
                    None | Some(Token::Comma) => String::new(),
                    _ => self.ident("a value")?,
                };
                Requirement::new(key, op, [value])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn equality_requirements() {
        let s = Selector::parse("app=web, tier==front").unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "front"), ("x", "y")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "db"), ("tier", "front")])));
        let s = Selector::parse("app!=web").unwrap();
        assert!(s.matches(&labels(&[])), "!= matches a missing label");
        assert!(s.matches(&labels(&[("app", "db")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
    }

    #[test]
    fn set_based_requirements() {
        let s = Selector::parse("env in (prod, staging),tier notin (db)").unwrap();
        assert!(s.matches(&labels(&[("env", "prod")])));
        assert!(s.matches(&labels(&[("env", "staging"), ("tier", "web")])));
        assert!(!s.matches(&labels(&[("env", "prod"), ("tier", "db")])));
        assert!(!s.matches(&labels(&[("env", "dev")])));
        assert!(!s.matches(&labels(&[])), "in needs the label");
        let s = Selector::parse("canary,!legacy").unwrap();
        assert!(s.matches(&labels(&[("canary", "")])));
        assert!(!s.matches(&labels(&[("canary", "1"), ("legacy", "1")])));
        assert!(!s.matches(&labels(&[])));
    }

    #[test]
    fn numeric_requirements() {
        let s = Selector::parse("replicas>2,replicas<10").unwrap();
        assert!(s.matches(&labels(&[("replicas", "5")])));
        assert!(!s.matches(&labels(&[("replicas", "2")])));
        assert!(!s.matches(&labels(&[("replicas", "ten")])));
        assert!(!s.matches(&labels(&[])));
        assert!(Selector::parse("replicas>two").is_err());
    }

    #[test]
    fn empty_selects_everything_nothing_selects_nothing() {
        let all = Selector::parse("  ").unwrap();
        assert!(all.is_everything());
        assert!(all.matches(&labels(&[])));
        assert!(!Selector::nothing().matches(&labels(&[("a", "b")])));
        assert!(!Selector::nothing().is_everything());
    }

    #[test]
    fn canonical_display_round_trips() {
        let s = Selector::parse("tier notin (b,a), app = web ,!x, y, n>3").unwrap();
        assert_eq!(s.to_string(), "app=web,n>3,tier notin (a,b),!x,y");
        assert_eq!(Selector::parse(&s.to_string()).unwrap(), s);
        assert_eq!(
            Selector::parse("k8s.io/app=v").unwrap().to_string(),
            "k8s.io/app=v"
        );
    }

    #[test]
    fn errors_name_the_problem() {
        let e = Selector::parse("app=web,").unwrap_err();
        assert!(e.to_string().contains("expected a key"), "{e}");
        let e = Selector::parse("app in web").unwrap_err();
        assert!(e.to_string().contains("expected '('"), "{e}");
        let e = Selector::parse("app in (a,b").unwrap_err();
        assert!(e.to_string().contains("expected ',' or ')'"), "{e}");
        let e = Selector::parse("-bad=1").unwrap_err();
        assert!(
            matches!(e, SelectorError::InvalidKey { ref key, .. } if key == "-bad"),
            "{e}"
        );
        let e = Selector::parse("app=no spaces").unwrap_err();
        assert!(e.to_string().contains("expected ',' or the end"), "{e}");
        let e = Selector::parse(&format!("app={}", "v".repeat(64))).unwrap_err();
        assert!(matches!(e, SelectorError::InvalidValue { .. }), "{e}");
        let e = Selector::parse("Bad_Prefix/app=1").unwrap_err();
        assert!(e.to_string().contains("prefix"), "{e}");
        let e = Selector::parse("app ~ x").unwrap_err();
        assert!(e.to_string().contains("expected an operator"), "{e}");
    }

    #[test]
    fn empty_values_are_allowed() {
        let s = Selector::parse("app=").unwrap();
        assert!(s.matches(&labels(&[("app", "")])));
        assert!(!s.matches(&labels(&[("app", "x")])));
    }

    #[test]
    fn from_metav1_label_selector() {
        let ls = LabelSelector {
            match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: "NotIn".into(),
                values: Some(vec!["dev".into()]),
            }]),
        };
        let s = Selector::from_label_selector(&ls).unwrap();
        assert_eq!(s.to_string(), "app=web,env notin (dev)");
        assert!(s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("env", "dev")])));
        assert!(
            Selector::from_label_selector(&LabelSelector::default())
                .unwrap()
                .is_everything()
        );
        let bad = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: "Exists".into(),
                values: Some(vec!["x".into()]),
            }]),
            ..Default::default()
        };
        assert!(Selector::from_label_selector(&bad).is_err());
        let bad = LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "env".into(),
                operator: "Like".into(),
                values: None,
            }]),
            ..Default::default()
        };
        let e = Selector::from_label_selector(&bad).unwrap_err();
        assert!(e.to_string().contains("\"Like\""), "{e}");
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn key() -> impl Strategy<Value = String> {
            "[a-z]([a-z0-9.-]{0,8}[a-z0-9])?"
        }
        fn value() -> impl Strategy<Value = String> {
            "([A-Za-z0-9]([A-Za-z0-9_.-]{0,6}[A-Za-z0-9])?)?"
        }
        fn requirement() -> impl Strategy<Value = Requirement> {
            (key(), 0..6usize, prop::collection::vec(value(), 1..4)).prop_map(
                |(key, op, values)| {
                    let (op, values) = match op {
                        0 => (Operator::Exists, vec![]),
                        1 => (Operator::DoesNotExist, vec![]),
                        2 => (Operator::Equals, vec![values[0].clone()]),
                        3 => (Operator::NotEquals, vec![values[0].clone()]),
                        4 => (Operator::In, values),
                        _ => (Operator::NotIn, values),
                    };
                    Requirement::new(key, op, values).expect("generated requirements are valid")
                },
            )
        }

        proptest! {
            /// Printing a selector and parsing it back gives the same selector, and the two
            /// agree on every label set (what a server and a lister rely on when one sends the
            /// other a selector).
            #[test]
            fn display_parse_round_trip(
                reqs in prop::collection::vec(requirement(), 0..4),
                labels in prop::collection::btree_map(key(), value(), 0..4),
            ) {
                let selector = Selector::from_requirements(reqs);
                let text = selector.to_string();
                let parsed = Selector::parse(&text).unwrap();
                prop_assert_eq!(&parsed, &selector, "text {}", text);
                prop_assert_eq!(parsed.matches(&labels), selector.matches(&labels));
            }

            /// Parsing arbitrary text never panics.
            #[test]
            fn parse_never_panics(text in "\\PC{0,40}") {
                let _ = Selector::parse(&text);
            }
        }
    }
}
