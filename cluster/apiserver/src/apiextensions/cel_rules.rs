//! CRD validation rules: the `x-kubernetes-validations` of a structural schema, written in CEL,
//! compiled when the CRD is written and evaluated on every create and update of its resources.
//!
//! This mirrors kube-apiserver's `apiextensions-apiserver/pkg/apiserver/schema/cel` (the
//! `Validator` built per CRD version and run by the custom resource strategy) together with the
//! checks `apiextensions/validation` applies to the rules when the CRD itself is written. The CEL
//! language is provided by the `cel` crate (formerly `cel-interpreter`): parser, macros (`has`,
//! `all`, `exists`, `exists_one`, `map`, `filter`) and interpreter, plus its `strings`, `lists`
//! and `math` extension libraries.
//!
//! # Data in and out
//!
//! * **CRD write** ([`compile`]): every rule of every schema node is parsed once; a rule that does
//!   not parse, refers to a variable other than `self`, `oldSelf` or a macro variable, names an
//!   unknown `reason`, an invalid `fieldPath`, or whose estimated cost is too high, makes the CRD
//!   invalid (422) with the real server's message, e.g.
//!   `spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid
//!   value: apiextensions.ValidationRule{Rule:"self.a >", ...}: compilation failed: ERROR:
//!   <input>:1:9: ...`. The compiled [`Validator`] is stored in the served version's definition
//!   (`CustomInfo::validation_rules`), so it lives exactly as long as that CRD generation and no
//!   request re-parses a rule.
//! * **Custom resource create / update / status update** ([`Validator::validate`]): the object
//!   (after defaulting and pruning, when the schema keywords pass) is walked together with the
//!   validator tree; each node with rules binds `self` to its value (and `oldSelf` to the old
//!   value at the same place on update) and runs its rules. Every failure becomes a field error;
//!   all of them are reported together in one 422, after the schema's own errors.
//!
//! # Semantics (as the real server)
//!
//! * A rule runs only on non-null values. On the status subresource the same rules run on the
//!   whole object (whose spec the status strategy has reset to the stored one), as
//!   `statusStrategy.ValidateUpdate` does.
//! * **Transition rules** (a rule mentioning `oldSelf`) run only on update and only when an old
//!   value exists at that path: object properties and `additionalProperties` entries correlate by
//!   key (unless `x-kubernetes-map-type: atomic`), list items only in
//!   `x-kubernetes-list-type: map` lists (by their `x-kubernetes-list-map-keys`). With
//!   `optionalOldSelf: true` the rule also runs on create, with `oldSelf` an optional
//!   (`oldSelf.hasValue()`, `oldSelf.orValue(x)`).
//! * **Ratcheting** (`CRDValidationRatcheting`, on by default since 1.30): on update, a failing rule
//!   that does not use `oldSelf` is not reported when the value it looked at is unchanged (the
//!   real server turns it into a warning).
//! * **Messages**: `messageExpression` (a string; trimmed; on error, empty, over 5 KiB or with a
//!   line break the server falls back), else `message`, else `failed rule: <rule>`. `reason`
//!   picks the error type: `FieldValueInvalid` (default, `Invalid value: "<type>": msg`),
//!   `FieldValueForbidden` (`Forbidden: msg`), `FieldValueRequired` (`Required value: msg`),
//!   `FieldValueDuplicate` (`Duplicate value: "<type>"`). `<type>` is the node's schema type
//!   (`"object"`, `"string"`, ...). `fieldPath` (e.g. `.spec.replicas`, `.labels['x']`) is
//!   appended to the node's path. A rule on the root has no path: it reports as `<nil>`, so
//!   `kubectl` prints `The At "x" is invalid: <nil>: Invalid value: "object": ...`.
//! * **Evaluation errors** read as cel-go's: `no such key: x evaluating rule: <rule>`, and
//!   `'no such overload': call arguments did not match a supported operator, function or macro
//!   signature for rule: <rule>`.
//! * If the schema keywords already failed with a *blocking* error (required, type, enum, too
//!   long, too many) the rules are not run and `<nil>: Invalid value: "null": some validation
//!   rules were not checked because the object was invalid; correct the existing errors to
//!   complete validation` is added, as `hasBlockingErr` does.
//!
//! # The value mapping (`UnstructuredToVal`)
//!
//! `integer` → `int`; `number` → `double` (also when the JSON has no fraction); `boolean` →
//! `bool`; `string` → `string` (`format: byte` → `bytes`); arrays → `list`; objects with
//! `properties` → a map of the *declared* properties that are present (so `has(self.x)` tests
//! presence, and unknown fields kept by `x-kubernetes-preserve-unknown-fields` stay invisible);
//! property names that are not CEL identifiers are escaped as the real server does (`foo-bar` →
//! `foo__dash__bar`, `a.b` → `a__dot__b`, `x/y` → `x__slash__y`, `__` → `__underscores__`,
//! keywords such as `namespace` → `__namespace__`); objects with `additionalProperties` → a map of
//! every entry; `x-kubernetes-int-or-string` → `int` or `string` as given; nodes without a type
//! (`x-kubernetes-preserve-unknown-fields`) → the JSON as it is. The root (and every
//! `x-kubernetes-embedded-resource`) also exposes `apiVersion`, `kind` and `metadata.name` /
//! `metadata.generateName`.
//!
//! Differences, by design of the crate: the `cel` crate is dynamically typed, so type errors the
//! real server's checker reports at CRD time (`self.replicas == "a"`) surface at evaluation as
//! `no such overload`; `format: date-time`, `date` and `duration` stay strings (the real server
//! maps them to `timestamp` / `duration`; the crate has those types only with its `chrono`
//! feature, which pulls `chrono-tz` into the build, so it is left off); list-type `set` / `map`
//! lists compare in order; rules inside `allOf` are not run; the Kubernetes CEL libraries
//! (`quantity`, `url`, `ip`, `cidr`, `isSorted`, ...) are not there.
//!
//! # Bounds
//!
//! The real server bounds CEL with cost units (roughly one per AST node visited, one per ten
//! characters of string traversed, one per list element iterated): a CRD is refused if a rule's
//! *estimated* cost exceeds `StaticEstimatedCostLimit` = 10,000,000 or the sum over the schema of
//! cost × cardinality exceeds `StaticEstimatedCRDCostLimit` = 100,000,000; a single evaluation
//! is stopped at `PerCallLimit` = 1,000,000 and one request may spend
//! `RuntimeCELCostBudget` = 10,000,000 over all its rules. Estimates take list, map and string
//! sizes from `maxItems`, `maxProperties` and `maxLength`, and for unbounded ones the most that
//! fits in a request (`MaxRequestSizeBytes` = 3 MiB).
//!
//! The `cel` crate has neither cost tracking nor interruption, so this module bounds work *before*
//! running a program, with the same numbers:
//!
//! * **source**: a rule or `messageExpression` over [`MAX_RULE_LENGTH`] characters is refused, and
//!   so is an expression nested deeper than [`MAX_EXPRESSION_DEPTH`] (the crate's parser also
//!   stops at 96 levels of recursion); together they bound the interpreter's recursion. How
//!   much stack a level takes depends on how `cel` was compiled (tens of kilobytes unoptimised),
//!   so a long source is parsed, and a schema with a deeply nested rule evaluated, on a thread
//!   with a large stack of its own (`on_a_large_stack`), never on a request's 2 MiB.
//! * **static estimate** (CRD write): [`estimate_cost`] walks the AST; selections resolve to
//!   schema nodes (`self.spec.items` → its `maxItems`), comprehensions multiply the cost of their
//!   body by the size of their range, string functions cost a tenth of the characters they scan
//!   (a product for `contains`, `matches`, ...). Over the limits above the CRD is refused with the
//!   real message (`estimated rule cost exceeds budget by factor of 2.5x (try simplifying ...)`).
//! * **per call** (every evaluation): the same estimate with the sizes *observed* in the value
//!   (the longest string, list and map at each schema node). Over `PerCallLimit` the rule is not
//!   run and the server answers as the real one does when it cancels a call; the estimate is also
//!   charged to the request's budget of `RuntimeCELCostBudget`, and once that is spent no more
//!   rules run (`validation failed due to running out of cost budget, no further validation rules
//!   will be run`).
//!
//! Since the estimate bounds the number of steps the interpreter takes (every step is a node
//! visit, an iteration over an observed collection or a scan over an observed string, and the
//! crate's `regex` is linear-time), the time of one request's rules is bounded without a clock.

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::objects::{Key, Map, OptionalValue};
use cel::{Context, Env, ExecutionError, Program, Value as Cel};
use serde_json::Value;

use crate::api::status::Cause;
use crate::apiextensions::schema::{FieldError, FieldErrorKind};

/// `celconfig.PerCallLimit`: the most one evaluation of one expression may cost.
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// `celconfig.RuntimeCELCostBudget`: what all the rules of one request may cost together.
pub const RUNTIME_COST_BUDGET: u64 = 10_000_000;
/// `apiextensions.StaticEstimatedCostLimit`: the most a rule's estimated cost may be.
pub const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;
/// `apiextensions.StaticEstimatedCRDCostLimit`: the most the estimated costs of all rules of a
/// schema, each times how often its node can occur, may add up to.
pub const STATIC_ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;
/// `celconfig.MaxRequestSizeBytes`: the size used to bound unbounded strings, lists and maps.
pub const MAX_REQUEST_SIZE_BYTES: u64 = 3 * 1024 * 1024;
/// `celconfig.MaxEvaluatedMessageExpressionSizeBytes`.
pub const MAX_MESSAGE_EXPRESSION_SIZE: usize = 5 * 1024;
/// The longest rule or `messageExpression` accepted (cel-go's default
/// `ExpressionSizeCodePointLimit`), in characters.
pub const MAX_RULE_LENGTH: usize = 100_000;
/// The deepest expression tree accepted (cel-go's default parser recursion limit).
pub const MAX_EXPRESSION_DEPTH: usize = 250;

const REASONS: [&str; 4] = [
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

/// The CEL environment every rule runs in: the standard library with optional values, and the
/// `strings`, `lists` and `math` extensions. Built once.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // Each extension declares functions the standard library does not; failing to add one only
    // leaves its functions undeclared (evaluation then reports them), it never breaks the rest.
    let _ = env.add_extension(cel::extensions::strings);
    let _ = env.add_extension(cel::extensions::lists);
    let _ = env.add_extension(cel::extensions::math);
    Arc::new(env)
});

/// One compiled `x-kubernetes-validations` entry.
struct Rule {
    source: String,
    program: Arc<Program>,
    message: String,
    message_expression: Option<(String, Arc<Program>)>,
    reason: Option<String>,
    /// The normalized `fieldPath` (`spec.replicas`, `labels[x]`), empty when unset.
    field_path: String,
    uses_old_self: bool,
    optional_old_self: bool,
    /// The rule or its `messageExpression` reads `oldSelf` (or the rule declares
    /// `optionalOldSelf`): only then is the old value converted and bound.
    reads_old_self: bool,
}

impl Rule {
    /// `ruleErrorString`: the message if there is one, else the rule.
    fn error_string(&self) -> &str {
        if self.message.is_empty() {
            &self.source
        } else {
            &self.message
        }
    }
}

/// The validator tree of one schema node: its rules and the children that have rules below them.
struct Node {
    schema: Value,
    rules: Vec<Rule>,
    properties: BTreeMap<String, Node>,
    items: Option<Box<Node>>,
    additional: Option<Box<Node>>,
    resource_root: bool,
    /// What of `self` the node's rules and message expressions read ([`Reads`]).
    self_reads: Reads,
    /// What of `oldSelf` they read.
    old_reads: Reads,
}

/// What of a variable (`self` or `oldSelf`) a node's expressions read. A rule that only
/// selects fields (`self.spec.schedule`, `has(self.run)`, `oldSelf.status.phase`) reads only
/// those subtrees, so only they are converted to CEL values for it: an At's root rule reads
/// three fields, not the whole object with its status on every status write. Any other use of
/// the variable (compared, passed to a function, iterated, indexed) reads all of it.
#[derive(Clone, Debug, PartialEq)]
enum Reads {
    /// These field paths, none a prefix of another (empty: the variable is not read).
    Paths(Vec<Vec<String>>),
    /// The whole value.
    Everything,
}

impl Reads {
    fn merge(&mut self, other: Reads) {
        match (&mut *self, other) {
            (Reads::Everything, _) => {}
            (_, Reads::Everything) => *self = Reads::Everything,
            (Reads::Paths(a), Reads::Paths(b)) => {
                a.extend(b);
                a.sort();
                a.dedup();
                // A path under another one is read with it.
                let all = std::mem::take(a);
                for p in &all {
                    if !all.iter().any(|q| q.len() < p.len() && p.starts_with(q)) {
                        a.push(p.clone());
                    }
                }
            }
        }
    }

    /// `v` with only the subtrees read (the whole of `v` if everything is, or if it is not an
    /// object). A path that meets a value that is not an object keeps that value whole.
    fn view<'v>(&self, v: &'v Value) -> std::borrow::Cow<'v, Value> {
        let Reads::Paths(paths) = self else {
            return std::borrow::Cow::Borrowed(v);
        };
        if !v.is_object() {
            return std::borrow::Cow::Borrowed(v);
        }
        let mut out = Value::Object(serde_json::Map::new());
        for p in paths {
            copy_path(v, &mut out, p);
        }
        std::borrow::Cow::Owned(out)
    }
}

/// The schema property whose CEL name (its name escaped, [`escape_property`]) is `field`: looked
/// up by name when the name is its own CEL name (nearly always), else found among all of them.
fn property_named<'a>(
    properties: &'a serde_json::Map<String, Value>,
    field: &str,
) -> Option<&'a Value> {
    if let Some(v) = properties.get(field)
        && escape_property(field).as_deref() == Some(field)
    {
        return Some(v);
    }
    properties
        .iter()
        .find(|(k, _)| escape_property(k).as_deref() == Some(field))
        .map(|(_, v)| v)
}

fn copy_path(src: &Value, dst: &mut Value, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        *dst = src.clone();
        return;
    };
    let (Value::Object(from), Value::Object(to)) = (src, &mut *dst) else {
        *dst = src.clone();
        return;
    };
    // The selected name is the property's CEL name (`__namespace__` for `namespace`).
    let plain = escape_property(first).as_deref() == Some(first.as_str());
    let found = from
        .get_key_value(first.as_str())
        .filter(|_| plain)
        .or_else(|| {
            from.iter()
                .find(|(k, _)| escape_property(k).as_deref() == Some(first.as_str()))
        });
    let Some((key, child)) = found else {
        return;
    };
    if rest.is_empty() {
        to.insert(key.clone(), child.clone());
        return;
    }
    let slot = to
        .entry(key.clone())
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    copy_path(child, slot, rest);
}

/// What `e` reads of the variable `var` ([`Reads`]); a comprehension that binds the same
/// name hides it inside.
fn reads_of(e: &IdedExpr, var: &str) -> Reads {
    let mut out = Reads::Paths(vec![]);
    // Depth-first without recursion (a hostile tree cannot overflow the stack); each entry
    // carries how many of the comprehension-bound `names` apply to it.
    let mut stack = vec![(e, 0)];
    let mut names: Vec<String> = vec![];
    while let Some((e, depth)) = stack.pop() {
        names.truncate(depth);
        if out == Reads::Everything {
            break;
        }
        match &e.expr {
            Expr::Ident(name) if name == var && !names.iter().any(|b| b == var) => {
                return Reads::Everything;
            }
            Expr::Select(_) => {
                let mut fields = vec![];
                let mut at = e;
                while let Expr::Select(s) = &at.expr {
                    fields.push(s.field.clone());
                    at = &s.operand;
                }
                match &at.expr {
                    Expr::Ident(name) if name == var && !names.iter().any(|b| b == var) => {
                        fields.reverse();
                        out.merge(Reads::Paths(vec![fields]));
                    }
                    _ => stack.push((at, depth)),
                }
            }
            Expr::Comprehension(c) => {
                stack.push((&c.iter_range, depth));
                stack.push((&c.accu_init, depth));
                names.push(c.iter_var.clone());
                if let Some(v) = &c.iter_var2 {
                    names.push(v.clone());
                }
                names.push(c.accu_var.clone());
                let inner = names.len();
                for x in [&c.loop_cond, &c.loop_step, &c.result] {
                    stack.push((x, inner));
                }
            }
            _ => {
                for c in children(e) {
                    stack.push((c, depth));
                }
            }
        }
    }
    out
}

/// The compiled validation rules of one CRD version's schema.
pub struct Validator {
    schema: Value,
    root: Node,
    /// Whether a rule is nested deeper than [`SHALLOW_DEPTH`]: its evaluation then runs on a
    /// stack of its own ([`on_a_large_stack`]).
    deep: bool,
}

/// The deepest expression evaluated on the caller's stack; deeper ones (up to
/// [`MAX_EXPRESSION_DEPTH`]) run on a thread with [`LARGE_STACK`] bytes of stack. An
/// unoptimised `cel` takes tens of kilobytes of stack a level (at opt-level 0, 32 levels
/// overflow 2 MiB; a project's dev profile builds its dependencies so unless it says
/// otherwise), an optimised one a few (245 levels fit in 2 MiB at opt-level 1), so a build
/// with debug assertions, the dev profile's mark, keeps fewer on the caller's stack.
const SHALLOW_DEPTH: usize = if cfg!(debug_assertions) { 12 } else { 64 };

/// The longest source parsed on the caller's stack (an expression of this length nests at most
/// half as deep), for the same reason smaller with debug assertions.
const SHORT_SOURCE: usize = if cfg!(debug_assertions) { 32 } else { 256 };

/// The stack of the thread that parses a long source or evaluates a deep rule. The interpreter
/// and the parser recurse once or more per level of the expression; how many bytes a level takes
/// depends on how the `cel` crate was compiled (at opt-level 0 the deepest accepted rule
/// overflows a 2 MiB stack, tokio's and a test thread's). Reserved, not committed: the pages a
/// run does not touch cost nothing.
const LARGE_STACK: usize = 64 << 20;

/// Runs `f` on a scoped thread with [`LARGE_STACK`] bytes of stack, so that a deep expression
/// does not depend on the caller's stack (a tokio worker's or a test's 2 MiB, or the build's
/// optimisation level). If the thread cannot be started, `f` runs on the caller's stack.
fn on_a_large_stack<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let mut f = Some(f);
    let ran = std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new()
            .name("cel-deep".into())
            .stack_size(LARGE_STACK)
            .spawn_scoped(scope, || f.take().map(|f| f()));
        match spawned {
            Ok(handle) => match handle.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            },
            Err(_) => None,
        }
    });
    match (ran, f) {
        (Some(r), _) => r,
        (None, Some(f)) => f(),
        (None, None) => unreachable!("the closure ran or is still here"),
    }
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn sources<'a>(n: &'a Node, out: &mut Vec<&'a str>) {
            out.extend(n.rules.iter().map(|r| r.source.as_str()));
            n.properties.values().for_each(|c| sources(c, out));
            n.items
                .iter()
                .chain(&n.additional)
                .for_each(|c| sources(c, out));
        }
        let mut out = vec![];
        sources(&self.root, &mut out);
        f.debug_struct("Validator").field("rules", &out).finish()
    }
}

impl PartialEq for Validator {
    fn eq(&self, other: &Self) -> bool {
        self.schema == other.schema
    }
}

// ---------------------------------------------------------------------------------------------
// schema helpers

fn ty(schema: &Value) -> &str {
    schema["type"].as_str().unwrap_or_default()
}

fn props(schema: &Value) -> Option<&serde_json::Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object)
}

fn additional(schema: &Value) -> Option<&Value> {
    schema.get("additionalProperties").filter(|v| v.is_object())
}

fn items(schema: &Value) -> Option<&Value> {
    schema.get("items").filter(|v| v.is_object())
}

fn flag(schema: &Value, key: &str) -> bool {
    schema[key].as_bool() == Some(true)
}

fn is_resource(schema: &Value) -> bool {
    flag(schema, "x-kubernetes-embedded-resource")
}

/// The least bytes one value of this schema takes in JSON, to bound unbounded collections.
fn min_serialized_size(schema: &Value) -> u64 {
    match ty(schema) {
        "string" => 2,
        "boolean" => 4,
        "array" | "object" => 2,
        _ => 1,
    }
}

/// The declared (or, unbounded, the largest possible) size of a string, list or map node.
fn declared_bound(schema: &Value) -> u64 {
    let get = |k: &str| schema.get(k).and_then(Value::as_u64);
    match ty(schema) {
        "string" => get("maxLength").unwrap_or(MAX_REQUEST_SIZE_BYTES - 2),
        "array" => get("maxItems").unwrap_or_else(|| {
            let item = items(schema).map(min_serialized_size).unwrap_or(1);
            MAX_REQUEST_SIZE_BYTES / (item + 1)
        }),
        "object" if additional(schema).is_some() || props(schema).is_none() => {
            get("maxProperties").unwrap_or_else(|| {
                let value = additional(schema).map(min_serialized_size).unwrap_or(1);
                // `"":` before each value, a comma after.
                MAX_REQUEST_SIZE_BYTES / (value + 4)
            })
        }
        "object" => props(schema).map(|p| p.len() as u64).unwrap_or(0),
        // int-or-string and untyped nodes may hold a string.
        "" => get("maxLength").unwrap_or(MAX_REQUEST_SIZE_BYTES - 2),
        _ => 1,
    }
}

/// `cel.Escape`: the CEL field name of a property, or `None` when it cannot be one.
pub fn escape_property(name: &str) -> Option<String> {
    const RESERVED: [&str; 22] = [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
        "__proto__",
    ];
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let escaped = name
        .replace("__", "__underscores__")
        .replace('.', "__dot__")
        .replace('-', "__dash__")
        .replace('/', "__slash__");
    let mut chars = escaped.chars();
    let ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    ok.then_some(escaped)
}

// ---------------------------------------------------------------------------------------------
// compilation (CRD write)

/// The rendering of a rule in compile errors: Go's `%#v` of `apiextensions.ValidationRule`.
/// Go prints the address of the pointer fields when set; their value is shown here instead.
fn go_rule(rule: &Value) -> String {
    let s =
        |k: &str| serde_json::to_string(rule[k].as_str().unwrap_or_default()).unwrap_or_default();
    let reason = match rule["reason"].as_str() {
        Some(r) => format!(
            "(*apiextensions.FieldValueErrorReason)({})",
            serde_json::json!(r)
        ),
        None => "(*apiextensions.FieldValueErrorReason)(nil)".to_owned(),
    };
    let optional = match rule["optionalOldSelf"].as_bool() {
        Some(b) => format!("(*bool)({b})"),
        None => "(*bool)(nil)".to_owned(),
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{reason}, FieldPath:{}, OptionalOldSelf:{optional}}}",
        s("rule"),
        s("message"),
        s("messageExpression"),
        s("fieldPath"),
    )
}

/// The deepest nesting of `e`, counted without recursion (so a hostile tree cannot overflow
/// the stack while being measured).
fn depth(e: &IdedExpr) -> usize {
    let mut max = 0;
    let mut stack = vec![(e, 1usize)];
    while let Some((e, d)) = stack.pop() {
        max = max.max(d);
        if d > MAX_EXPRESSION_DEPTH {
            return d;
        }
        for c in children(e) {
            stack.push((c, d + 1));
        }
    }
    max
}

fn children(e: &IdedExpr) -> Vec<&IdedExpr> {
    match &e.expr {
        Expr::Call(c) => c.target.iter().map(|t| &**t).chain(&c.args).collect(),
        Expr::Comprehension(c) => vec![
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ],
        Expr::List(l) => l.elements.iter().collect(),
        Expr::Map(m) => entries(&m.entries),
        Expr::Struct(s) => entries(&s.entries),
        Expr::Select(s) => vec![&*s.operand],
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => vec![],
    }
}

fn entries(es: &[cel::common::ast::IdedEntryExpr]) -> Vec<&IdedExpr> {
    es.iter()
        .flat_map(|e| match &e.expr {
            EntryExpr::StructField(f) => vec![&f.value],
            EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
        })
        .collect()
}

/// The identifiers `e` reads that no comprehension binds, with the node id of their first use.
fn free_identifiers(e: &IdedExpr, bound: &mut Vec<String>, out: &mut Vec<(String, u64)>) {
    match &e.expr {
        Expr::Ident(name) => {
            if !bound.iter().any(|b| b == name) && !out.iter().any(|(n, _)| n == name) {
                out.push((name.clone(), e.id));
            }
        }
        Expr::Comprehension(c) => {
            free_identifiers(&c.iter_range, bound, out);
            free_identifiers(&c.accu_init, bound, out);
            let before = bound.len();
            bound.push(c.iter_var.clone());
            if let Some(v) = &c.iter_var2 {
                bound.push(v.clone());
            }
            bound.push(c.accu_var.clone());
            free_identifiers(&c.loop_cond, bound, out);
            free_identifiers(&c.loop_step, bound, out);
            free_identifiers(&c.result, bound, out);
            bound.truncate(before);
        }
        // `optional.of(x)`, `optional.none()`: `optional` names a namespace, not a variable.
        Expr::Call(c)
            if c.target
                .as_ref()
                .is_some_and(|t| matches!(&t.expr, Expr::Ident(n) if n == "optional")) =>
        {
            for a in &c.args {
                free_identifiers(a, bound, out);
            }
        }
        _ => {
            for c in children(e) {
                free_identifiers(c, bound, out);
            }
        }
    }
}

/// Whether `e`'s result is certainly not a bool (a literal of another type): what cel-go's
/// checker reports as `cel expression must evaluate to a bool` (the `cel` crate does not type
/// check, so only the evident cases are caught here).
fn certainly_not(e: &IdedExpr, want_bool: bool) -> bool {
    match &e.expr {
        Expr::Literal(LiteralValue::Boolean(_)) => !want_bool,
        Expr::Literal(LiteralValue::String(_)) => want_bool,
        Expr::Literal(_) | Expr::List(_) | Expr::Map(_) => true,
        _ => false,
    }
}

/// What the parsed expressions kept by [`parse`] may hold: this many sources, of at most
/// [`PARSED_MAX_BYTES`] together; past either, the cache starts over.
const PARSED_MAX_ENTRIES: usize = 4096;
/// See [`PARSED_MAX_ENTRIES`].
const PARSED_MAX_BYTES: usize = 4 << 20;

/// The expressions parsed so far in this process, by source, with the error of each that does
/// not parse, and the bytes of their sources.
type Parsed = (HashMap<String, Result<Arc<Program>, String>>, usize);

static PARSED: LazyLock<std::sync::Mutex<Parsed>> = LazyLock::new(Default::default);

/// Parses `source` as a rule or message expression: `Err` carries the text after
/// `compilation failed: ` (cel-go's issues).
///
/// A program depends on its source only, so each source is parsed once per process and its
/// program shared: a CRD's versions often repeat their rules, and a test suite creates the same
/// CRDs in every server it starts. (kube-apiserver compiles each CRD's rules when it builds
/// the CRD's handler; the parse is most of that cost here.)
fn parse(source: &str) -> Result<Arc<Program>, String> {
    let lock = || PARSED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(known) = lock().0.get(source) {
        return known.clone();
    }
    let parsed = parse_uncached(source).map(Arc::new);
    if source.len() <= PARSED_MAX_BYTES {
        let mut kept = lock();
        if kept.0.len() >= PARSED_MAX_ENTRIES || kept.1 + source.len() > PARSED_MAX_BYTES {
            *kept = Parsed::default();
        }
        if kept.0.insert(source.to_owned(), parsed.clone()).is_none() {
            kept.1 += source.len();
        }
    }
    parsed
}

/// [`parse`] without the cache.
fn parse_uncached(source: &str) -> Result<Program, String> {
    if source.chars().count() > MAX_RULE_LENGTH {
        return Err(format!(
            "ERROR: <input>:-1:0: expression code point size exceeds limit: size: {}, limit {MAX_RULE_LENGTH}",
            source.chars().count()
        ));
    }
    // cel-go indents the snippet lines of its issues by one space more than the crate does.
    let compile = || {
        ENV.compile(source)
            .map_err(|e| e.to_string().replace("\n| ", "\n | "))
    };
    let program = if source.len() > SHORT_SOURCE {
        on_a_large_stack(compile)?
    } else {
        compile()?
    };
    if depth(program.expression()) > MAX_EXPRESSION_DEPTH {
        return Err(format!(
            "ERROR: <input>:1:1: expression recursion limit exceeded: {MAX_EXPRESSION_DEPTH}"
        ));
    }
    let mut free = vec![];
    free_identifiers(
        program.expression(),
        &mut vec!["self".into(), "oldSelf".into()],
        &mut free,
    );
    if let Some((name, id)) = free.first() {
        let start = program
            .source_info()
            .offset_for(*id)
            .map(|(start, _)| start as usize)
            .unwrap_or(0)
            .min(source.len());
        let before = source.get(..start).unwrap_or_default();
        let line = before.matches('\n').count() + 1;
        let col = before
            .rsplit('\n')
            .next()
            .unwrap_or_default()
            .chars()
            .count()
            + 1;
        let snippet = source.lines().nth(line - 1).unwrap_or_default();
        return Err(format!(
            "ERROR: <input>:{line}:{col}: undeclared reference to '{name}' (in container '')\n | {snippet}\n | {:.>width$}",
            "^",
            width = col
        ));
    }
    Ok(program)
}

fn uses_old_self(e: &IdedExpr) -> bool {
    let mut free = vec![];
    free_identifiers(e, &mut vec![], &mut free);
    free.iter().any(|(n, _)| n == "oldSelf")
}

/// `ValidFieldPath`: `fieldPath` resolved against the node's schema, as the path the error
/// names (`spec.replicas`, `labels[key]`), or why it does not resolve.
fn normalize_field_path(path: &str, schema: &Value) -> Result<String, String> {
    let mut out = String::new();
    let mut node = schema;
    let mut rest = path;
    let step = |name: &str, node: &mut &Value, out: &mut String| -> Result<(), String> {
        if let Some(p) = props(node) {
            let child = p.get(name).ok_or("does not refer to a valid field")?;
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(name);
            *node = child;
        } else if let Some(a) = additional(node) {
            out.push_str(&format!("[{name}]"));
            *node = a;
        } else {
            return Err("does not refer to a valid field".into());
        }
        Ok(())
    };
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return Err("unexpected end of JSON path".into());
            }
            step(&r[..end], &mut node, &mut out)?;
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("['") {
            let end = r.find("']").ok_or("unexpected end of JSON path")?;
            step(&r[..end], &mut node, &mut out)?;
            rest = &r[end + 2..];
        } else {
            let tok: String = rest
                .chars()
                .take_while(|c| !matches!(c, '.' | '['))
                .collect();
            return Err(format!(
                "expected [ or . but got: {}",
                if tok.is_empty() { rest } else { &tok }
            ));
        }
    }
    Ok(out)
}

/// Compile errors and estimated costs gathered while walking a schema.
struct Compiling<'a> {
    base: &'a str,
    causes: Vec<Cause>,
    /// Sum of estimated cost × cardinality over every rule.
    total: u64,
}

/// Compiles every rule of `schema` (an `openAPIV3Schema`). `base` names the schema in errors
/// (`spec.validation.openAPIV3Schema` or `spec.versions[1].schema.openAPIV3Schema`). `Ok(None)`
/// when the schema has no rules; `Err` lists the causes that make the CRD invalid.
pub fn compile(schema: &Value, base: &str) -> Result<Option<Validator>, Vec<Cause>> {
    let mut c = Compiling {
        base,
        causes: vec![],
        total: 0,
    };
    let root = compile_node(schema, "", true, 1, None, &mut c);
    if c.total > STATIC_ESTIMATED_CRD_COST_LIMIT {
        c.causes.push(Cause::new(
            "FieldValueForbidden",
            base,
            format!(
                "Forbidden: {}",
                cost_error(
                    "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                    c.total,
                    STATIC_ESTIMATED_CRD_COST_LIMIT
                )
            ),
        ));
    }
    if !c.causes.is_empty() {
        return Err(c.causes);
    }
    Ok(root.map(|root| {
        let deep = deepest(&root) > SHALLOW_DEPTH;
        Validator {
            schema: schema.clone(),
            root,
            deep,
        }
    }))
}

/// `getCostErrorMessage`.
fn cost_error(what: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_owned()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// Compiles one entry of a node's `x-kubernetes-validations`: the rule, its message or
/// messageExpression, reason, fieldPath and optionalOldSelf, each checked as the API server
/// checks them when the CRD is written (every problem becomes a cause, with `field` naming
/// where), and the rule's estimated cost added to the CRD's total. `None` when the rule cannot
/// be kept.
fn compile_rule(
    raw: &Value,
    field: &dyn Fn(&str) -> String,
    schema: &Value,
    cardinality: u64,
    uncorrelatable: Option<&str>,
    c: &mut Compiling,
) -> Option<Rule> {
    let source = raw["rule"].as_str().unwrap_or_default();
    if source.trim().is_empty() {
        c.causes.push(Cause::new(
            "FieldValueRequired",
            &field("rule"),
            "Required value",
        ));
        return None;
    }
    let program = match parse(source) {
        Ok(p) => p,
        Err(e) => {
            c.causes.push(Cause::new(
                "FieldValueInvalid",
                &field("rule"),
                format!("Invalid value: {}: compilation failed: {e}", go_rule(raw)),
            ));
            return None;
        }
    };
    if certainly_not(program.expression(), true) {
        c.causes.push(Cause::new(
            "FieldValueInvalid",
            &field("rule"),
            format!(
                "Invalid value: {}: cel expression must evaluate to a bool",
                go_rule(raw)
            ),
        ));
        return None;
    }
    let (message, reason, field_path, mut ok) = check_rule_fields(raw, field, schema, c);
    let old = uses_old_self(program.expression());
    if old && let Some(within) = uncorrelatable {
        c.causes.push(Cause::new(
            "FieldValueInvalid",
            &field("rule"),
            format!(
                "Invalid value: {}: oldSelf cannot be used on the uncorrelatable portion of the schema within {within}",
                serde_json::json!(source)
            ),
        ));
        return None;
    }
    let optional_old_self = raw["optionalOldSelf"].as_bool() == Some(true);
    if optional_old_self && !old {
        c.causes.push(Cause::new(
            "FieldValueForbidden",
            &field("optionalOldSelf"),
            "Forbidden: may not be set if oldSelf is not used in rule",
        ));
        ok = false;
    }
    let (message_expression, expression_ok) = compile_message_expression(raw, field, c);
    ok &= expression_ok;
    let mut cost = estimate_cost(program.expression(), schema, &Bounds::Declared);
    if let Some((_, p)) = &message_expression {
        cost = cost.saturating_add(estimate_cost(p.expression(), schema, &Bounds::Declared));
    }
    if cost > STATIC_ESTIMATED_COST_LIMIT {
        c.causes.push(Cause::new(
            "FieldValueForbidden",
            &field("rule"),
            format!(
                "Forbidden: {}",
                cost_error("estimated rule cost", cost, STATIC_ESTIMATED_COST_LIMIT)
            ),
        ));
        ok = false;
    }
    c.total = c.total.saturating_add(cost.saturating_mul(cardinality));
    if !ok {
        return None;
    }
    let reads_old_self = old
        || optional_old_self
        || message_expression
            .as_ref()
            .is_some_and(|(_, p)| uses_old_self(p.expression()));
    Some(Rule {
        reads_old_self,
        source: source.to_owned(),
        program,
        message: message.trim().to_owned(),
        message_expression,
        reason,
        field_path,
        uses_old_self: old,
        optional_old_self,
    })
}

/// A rule's `message`, `reason` and `fieldPath`, each checked as the API server checks them
/// (a cause for each problem). Returns the message, the reason, the normalized field path and
/// whether all three are valid.
fn check_rule_fields(
    raw: &Value,
    field: &dyn Fn(&str) -> String,
    schema: &Value,
    c: &mut Compiling,
) -> (String, Option<String>, String, bool) {
    let mut ok = true;
    let message = raw["message"].as_str().unwrap_or_default();
    if raw.get("message").is_some() && message.trim().is_empty() {
        c.causes.push(Cause::new(
            "FieldValueRequired",
            &field("message"),
            "Required value: message must be non-empty if specified",
        ));
        ok = false;
    } else if message.contains('\n') {
        c.causes.push(Cause::new(
            "FieldValueInvalid",
            &field("message"),
            format!(
                "Invalid value: {}: message must not contain line breaks",
                serde_json::json!(message)
            ),
        ));
        ok = false;
    }
    let reason = raw["reason"].as_str().map(str::to_owned);
    if let Some(r) = &reason
        && !REASONS.contains(&r.as_str())
    {
        let supported: Vec<String> = REASONS.iter().map(|r| format!("\"{r}\"")).collect();
        c.causes.push(Cause::new(
            "FieldValueNotSupported",
            &field("reason"),
            format!(
                "Unsupported value: \"{r}\": supported values: {}",
                supported.join(", ")
            ),
        ));
        ok = false;
    }
    let field_path = match raw["fieldPath"].as_str().filter(|p| !p.is_empty()) {
        None => String::new(),
        Some(fp) => match normalize_field_path(fp, schema) {
            Ok(p) => p,
            Err(e) => {
                c.causes.push(Cause::new(
                    "FieldValueInvalid",
                    &field("fieldPath"),
                    format!(
                        "Invalid value: {}: fieldPath must be a valid path: {e}",
                        serde_json::json!(fp)
                    ),
                ));
                ok = false;
                String::new()
            }
        },
    };
    (message.to_owned(), reason, field_path, ok)
}

/// A rule's `messageExpression`, compiled (a cause when it does not compile or cannot be a
/// string). Returns it with its source, and whether it is valid.
fn compile_message_expression(
    raw: &Value,
    field: &dyn Fn(&str) -> String,
    c: &mut Compiling,
) -> (Option<(String, Arc<Program>)>, bool) {
    let mut ok = true;
    let message_expression = match raw["messageExpression"].as_str().filter(|m| !m.is_empty()) {
        None => None,
        Some(src) => match parse(src) {
            Ok(p) if certainly_not(p.expression(), false) => {
                c.causes.push(Cause::new(
                    "FieldValueInvalid",
                    &field("messageExpression"),
                    format!(
                        "Invalid value: {}: messageExpression must evaluate to a string",
                        go_rule(raw)
                    ),
                ));
                ok = false;
                None
            }
            Ok(p) => Some((src.to_owned(), p)),
            Err(e) => {
                c.causes.push(Cause::new(
                    "FieldValueInvalid",
                    &field("messageExpression"),
                    format!(
                        "Invalid value: {}: messageExpression compilation failed: {e}",
                        go_rule(raw)
                    ),
                ));
                ok = false;
                None
            }
        },
    };
    (message_expression, ok)
}

/// Compiles the rules of `schema` (at `path` below the base) and of the nodes below it.
/// `cardinality` is how often the node can occur in one object; `uncorrelatable` the schema path
/// of the nearest list above that is not a `x-kubernetes-list-type: map` list, under which
/// `oldSelf` can never be bound.
fn compile_node(
    schema: &Value,
    path: &str,
    resource_root: bool,
    cardinality: u64,
    uncorrelatable: Option<&str>,
    c: &mut Compiling,
) -> Option<Node> {
    let base = c.base.to_owned();
    let at = |rest: &str| -> String {
        if path.is_empty() {
            format!("{base}{rest}")
        } else {
            format!("{base}.{path}{rest}")
        }
    };
    let mut rules = vec![];
    let list = schema["x-kubernetes-validations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, raw) in list.iter().enumerate() {
        let field = |f: &str| at(&format!(".x-kubernetes-validations[{i}].{f}"));
        if let Some(rule) = compile_rule(raw, &field, schema, cardinality, uncorrelatable, c) {
            rules.push(rule);
        }
    }
    let mut properties = BTreeMap::new();
    if let Some(p) = props(schema) {
        for (k, child) in p {
            let child_path = if path.is_empty() {
                format!("properties[{k}]")
            } else {
                format!("{path}.properties[{k}]")
            };
            if let Some(n) = compile_node(
                child,
                &child_path,
                is_resource(child),
                cardinality,
                uncorrelatable,
                c,
            ) {
                properties.insert(k.clone(), n);
            }
        }
    }
    let join = |s: &str| {
        if path.is_empty() {
            s.to_owned()
        } else {
            format!("{path}.{s}")
        }
    };
    let times = cardinality.saturating_mul(declared_bound(schema).max(1));
    let items_path = join("items");
    let items_uncorrelatable = if schema["x-kubernetes-list-type"] == "map" {
        uncorrelatable.map(str::to_owned)
    } else {
        Some(format!("{base}.{items_path}"))
    };
    let items_node = items(schema)
        .and_then(|i| {
            let u = items_uncorrelatable.as_deref();
            compile_node(i, &items_path, is_resource(i), times, u, c)
        })
        .map(Box::new);
    let additional_node = additional(schema)
        .and_then(|a| {
            let p = join("additionalProperties");
            compile_node(a, &p, is_resource(a), times, uncorrelatable, c)
        })
        .map(Box::new);
    if rules.is_empty()
        && properties.is_empty()
        && items_node.is_none()
        && additional_node.is_none()
    {
        return None;
    }
    let mut self_reads = Reads::Paths(vec![]);
    let mut old_reads = Reads::Paths(vec![]);
    for r in &rules {
        let programs =
            std::iter::once(&r.program).chain(r.message_expression.iter().map(|(_, p)| p));
        for p in programs {
            self_reads.merge(reads_of(p.expression(), "self"));
            old_reads.merge(reads_of(p.expression(), "oldSelf"));
        }
    }
    Some(Node {
        schema: schema.clone(),
        rules,
        properties,
        items: items_node,
        additional: additional_node,
        resource_root,
        self_reads,
        old_reads,
    })
}

// ---------------------------------------------------------------------------------------------
// cost estimation

/// Where the estimator takes collection and string sizes from.
pub enum Bounds {
    /// The schema's `maxItems` / `maxProperties` / `maxLength`, or the request-size bound.
    Declared,
    /// The largest value seen at each schema node (keyed by the node's address).
    Observed(HashMap<usize, u64>),
}

impl Bounds {
    fn of(&self, node: &Value) -> u64 {
        match self {
            Bounds::Declared => declared_bound(node),
            Bounds::Observed(m) => m
                .get(&(node as *const Value as usize))
                .copied()
                .unwrap_or(0),
        }
    }

    /// The sizes observed in `value` (and `old`) at every node of `schema`.
    fn observe(schema: &Value, value: &Value, old: Option<&Value>) -> Bounds {
        fn walk(schema: &Value, v: &Value, out: &mut HashMap<usize, u64>) {
            let len = match v {
                Value::String(s) => s.chars().count() as u64,
                Value::Array(a) => a.len() as u64,
                Value::Object(o) => o.len() as u64,
                _ => 1,
            };
            let e = out.entry(schema as *const Value as usize).or_insert(0);
            *e = (*e).max(len);
            match v {
                Value::Array(a) => {
                    if let Some(i) = items(schema) {
                        a.iter().for_each(|x| walk(i, x, out));
                    }
                }
                Value::Object(o) => {
                    if let Some(p) = props(schema) {
                        for (k, s) in p {
                            if let Some(x) = o.get(k) {
                                walk(s, x, out);
                            }
                        }
                    }
                    if let Some(a) = additional(schema) {
                        o.values().for_each(|x| walk(a, x, out));
                    }
                }
                _ => {}
            }
        }
        let mut out = HashMap::new();
        walk(schema, value, &mut out);
        if let Some(old) = old {
            walk(schema, old, &mut out);
        }
        Bounds::Observed(out)
    }
}

/// An upper bound of what evaluating `e` with `self` described by `schema` costs, in the real
/// server's units: one per node visited, the range size times the body for comprehensions, a
/// tenth of the characters scanned by string functions, the elements compared by equality.
pub fn estimate_cost(e: &IdedExpr, schema: &Value, bounds: &Bounds) -> u64 {
    let mut scope: Vec<(String, Option<&Value>)> = vec![];
    estimate(e, schema, bounds, &mut scope).0
}

/// (cost, size of the result, schema node of the result)
fn estimate<'a>(
    e: &IdedExpr,
    root: &'a Value,
    b: &Bounds,
    scope: &mut Vec<(String, Option<&'a Value>)>,
) -> (u64, u64, Option<&'a Value>) {
    let sized = |n: Option<&'a Value>| (n.map(|n| b.of(n)).unwrap_or(1), n);
    match &e.expr {
        Expr::Ident(name) => {
            let node = scope
                .iter()
                .rev()
                .find(|(n, _)| n == name)
                .map(|(_, s)| *s)
                .unwrap_or_else(|| (name == "self" || name == "oldSelf").then_some(root));
            let (size, node) = sized(node);
            (1, size, node)
        }
        Expr::Select(s) => {
            let (cost, _, node) = estimate(&s.operand, root, b, scope);
            if s.test {
                return (cost.saturating_add(1), 1, None);
            }
            let child = node.and_then(|n| {
                props(n)
                    .and_then(|p| property_named(p, &s.field))
                    .or_else(|| additional(n))
            });
            let (size, child) = sized(child);
            (cost.saturating_add(1), size, child)
        }
        Expr::Call(c) => {
            let mut cost: u64 = 1;
            let mut sizes = vec![];
            let mut nodes = vec![];
            for o in c.target.iter().map(|t| &**t).chain(&c.args) {
                let (oc, os, on) = estimate(o, root, b, scope);
                cost = cost.saturating_add(oc);
                sizes.push(os);
                nodes.push(on);
            }
            let first = sizes.first().copied().unwrap_or(1);
            let second = sizes.get(1).copied().unwrap_or(1);
            let tenth = |n: u64| n.div_ceil(10);
            let (extra, size, node) = match c.func_name.as_str() {
                "_==_" | "_!=_" => (tenth(first.min(second)), 1, None),
                "_+_" => (
                    tenth(first.saturating_add(second)),
                    first.saturating_add(second),
                    None,
                ),
                "@in" => (second, 1, None),
                "contains" | "startsWith" | "endsWith" | "matches" | "indexOf" | "lastIndexOf"
                | "replace" | "split" => (tenth(first.saturating_mul(second.max(1))), first, None),
                "lowerAscii" | "upperAscii" | "trim" | "join" | "format" | "substring"
                | "charAt" | "reverse" | "string" | "bytes" => (tenth(first), first, None),
                "_[_]" => {
                    let child = nodes
                        .first()
                        .copied()
                        .flatten()
                        .and_then(|n| items(n).or_else(|| additional(n)));
                    let (size, child) = sized(child);
                    (0, size, child)
                }
                _ => (0, 1, None),
            };
            (cost.saturating_add(extra), size, node)
        }
        Expr::Comprehension(c) => {
            let (range_cost, range_size, range_node) = estimate(&c.iter_range, root, b, scope);
            let elem = range_node.and_then(|n| items(n).or_else(|| additional(n)));
            let init = estimate(&c.accu_init, root, b, scope).0;
            let before = scope.len();
            // For a map, the first variable is the key (a string of unknown schema).
            let first = if range_node.is_some_and(|n| items(n).is_some()) {
                elem
            } else {
                None
            };
            scope.push((c.iter_var.clone(), first));
            if let Some(v) = &c.iter_var2 {
                scope.push((v.clone(), elem));
            }
            scope.push((c.accu_var.clone(), None));
            let cond = estimate(&c.loop_cond, root, b, scope).0;
            let step = estimate(&c.loop_step, root, b, scope).0;
            let result = estimate(&c.result, root, b, scope).0;
            scope.truncate(before);
            let cost = range_cost
                .saturating_add(init)
                .saturating_add(range_size.max(1).saturating_mul(cond.saturating_add(step)))
                .saturating_add(result);
            (cost, range_size, None)
        }
        Expr::List(l) => {
            let cost = l.elements.iter().fold(1u64, |acc, x| {
                acc.saturating_add(estimate(x, root, b, scope).0)
            });
            (cost, l.elements.len() as u64, None)
        }
        Expr::Map(_) | Expr::Struct(_) => {
            let kids = children(e);
            let n = kids.len() as u64;
            let cost = kids.into_iter().fold(1u64, |acc, x| {
                acc.saturating_add(estimate(x, root, b, scope).0)
            });
            (cost, n, None)
        }
        Expr::Literal(LiteralValue::String(s)) => (1, s.inner().chars().count() as u64, None),
        Expr::Literal(_) | Expr::Unspecified => (1, 1, None),
    }
}

// ---------------------------------------------------------------------------------------------
// the value mapping

fn string(s: &str) -> Cel {
    Cel::String(Arc::new(s.to_owned()))
}

fn map(entries: HashMap<Key, Cel>) -> Cel {
    Cel::Map(Map {
        map: Arc::new(entries),
    })
}

/// `UnstructuredToVal`: `v` as a CEL value, typed by `schema` (see the module docs).
pub fn to_cel(schema: Option<&Value>, v: &Value, resource: bool) -> Cel {
    let t = schema.map(ty).unwrap_or_default();
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => {
            if t == "number" {
                Cel::Float(n.as_f64().unwrap_or_default())
            } else if let Some(i) = n.as_i64() {
                Cel::Int(i)
            } else if let Some(u) = n.as_u64() {
                Cel::UInt(u)
            } else {
                Cel::Float(n.as_f64().unwrap_or_default())
            }
        }
        Value::String(s) => {
            use base64::Engine as _;
            if schema.is_some_and(|s| s["format"] == "byte")
                && let Ok(b) = base64::engine::general_purpose::STANDARD.decode(s)
            {
                return Cel::Bytes(Arc::new(b));
            }
            string(s)
        }
        Value::Array(a) => {
            let item = schema.and_then(items);
            Cel::List(Arc::new(
                a.iter()
                    .map(|x| to_cel(item, x, item.is_some_and(is_resource)))
                    .collect(),
            ))
        }
        Value::Object(o) => {
            let mut out = HashMap::new();
            if resource {
                for k in ["apiVersion", "kind"] {
                    if let Some(Value::String(s)) = o.get(k) {
                        out.insert(Key::String(Arc::new(k.to_owned())), string(s));
                    }
                }
                if let Some(m) = o.get("metadata").and_then(Value::as_object) {
                    let mut meta = HashMap::new();
                    for k in ["name", "generateName"] {
                        if let Some(Value::String(s)) = m.get(k) {
                            meta.insert(Key::String(Arc::new(k.to_owned())), string(s));
                        }
                    }
                    out.insert(Key::String(Arc::new("metadata".into())), map(meta));
                }
            }
            match schema {
                Some(s) if props(s).is_some() => {
                    for (k, ps) in props(s).into_iter().flatten() {
                        if let (Some(x), Some(name)) = (o.get(k), escape_property(k)) {
                            out.insert(
                                Key::String(Arc::new(name)),
                                to_cel(Some(ps), x, is_resource(ps)),
                            );
                        }
                    }
                }
                Some(s) if additional(s).is_some() => {
                    let a = additional(s);
                    for (k, x) in o {
                        out.insert(
                            Key::String(Arc::new(k.clone())),
                            to_cel(a, x, a.is_some_and(is_resource)),
                        );
                    }
                }
                _ => {
                    for (k, x) in o {
                        if resource && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                            continue;
                        }
                        out.insert(Key::String(Arc::new(k.clone())), to_cel(None, x, false));
                    }
                }
            }
            map(out)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// evaluation

/// Where in the object a node sits, rendered like `field.Path` (`spec.items[0]`,
/// `spec.labels[key]`; the root is empty).
fn child_path(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_owned()
    } else {
        format!("{path}.{k}")
    }
}

/// cel-go's wording of an evaluation error (`no such key: x`, `division by zero`, ...).
fn error_text(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::NoSuchOverload(_) => "no such overload".to_owned(),
        ExecutionError::DivisionByZero(_) => "division by zero".to_owned(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".to_owned(),
        ExecutionError::Overflow(..) => "integer overflow".to_owned(),
        ExecutionError::IndexOutOfBounds(i) => {
            format!("index out of bounds: {}", crate_value_text(i))
        }
        ExecutionError::UndeclaredReference(n) => format!("undeclared reference to '{n}'"),
        other => {
            let s = other.to_string();
            let mut c = s.chars();
            match c.next() {
                Some(f) => f.to_lowercase().chain(c).collect(),
                None => s,
            }
        }
    }
}

fn crate_value_text(v: &Cel) -> String {
    match v {
        Cel::Int(i) => i.to_string(),
        Cel::UInt(u) => u.to_string(),
        other => format!("{other:?}"),
    }
}

/// The running state of one request's validation.
struct Run {
    budget: u64,
    errors: Vec<FieldError>,
    stopped: bool,
}

impl Run {
    fn invalid(&mut self, path: &str, ty: &str, detail: String) {
        self.errors.push(FieldError {
            path: if path.is_empty() {
                "<nil>".into()
            } else {
                path.into()
            },
            kind: FieldErrorKind::Invalid,
            detail,
            value: Some(Value::String(ty.into())),
        });
    }
}

impl Validator {
    /// Runs every rule on `obj` (a whole custom resource, after defaulting and pruning) with
    /// `old` the stored object on update. Returns every failure (empty when all rules pass).
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
        self.validate_with_budget(obj, old, RUNTIME_COST_BUDGET)
    }

    /// [`Validator::validate`] with a cost budget other than [`RUNTIME_COST_BUDGET`].
    pub fn validate_with_budget(
        &self,
        obj: &Value,
        old: Option<&Value>,
        budget: u64,
    ) -> Vec<FieldError> {
        let run = || {
            let mut run = Run {
                budget,
                errors: vec![],
                stopped: false,
            };
            validate_node(&self.root, "", obj, old, &mut run);
            run.errors
        };
        if self.deep {
            on_a_large_stack(run)
        } else {
            run()
        }
    }
}

/// The depth of the deepest rule or message expression below `node`.
fn deepest(node: &Node) -> usize {
    let own = node.rules.iter().flat_map(|r| {
        std::iter::once(depth(r.program.expression())).chain(
            r.message_expression
                .as_ref()
                .map(|(_, p)| depth(p.expression())),
        )
    });
    own.chain(node.properties.values().map(deepest))
        .chain(
            node.items
                .iter()
                .chain(&node.additional)
                .map(|c| deepest(c)),
        )
        .max()
        .unwrap_or(0)
}

fn validate_node(node: &Node, path: &str, v: &Value, old: Option<&Value>, run: &mut Run) {
    if run.stopped || v.is_null() {
        return;
    }
    let old = old.filter(|o| !o.is_null());
    if !node.rules.is_empty() {
        run_rules(node, path, v, old, run);
        if run.stopped {
            return;
        }
    }
    match v {
        Value::Object(o) => {
            let correlate = node.schema["x-kubernetes-map-type"].as_str() != Some("atomic");
            for (k, child) in &node.properties {
                if let Some(x) = o.get(k) {
                    let ox = old.filter(|_| correlate).and_then(|m| m.get(k));
                    validate_node(child, &child_path(path, k), x, ox, run);
                }
            }
            if let Some(a) = &node.additional {
                for (k, x) in o {
                    let ox = old.filter(|_| correlate).and_then(|m| m.get(k));
                    validate_node(a, &format!("{path}[{k}]"), x, ox, run);
                }
            }
        }
        Value::Array(a) => {
            if let Some(item) = &node.items {
                let keys: Option<Vec<&str>> = (node.schema["x-kubernetes-list-type"] == "map")
                    .then(|| {
                        node.schema["x-kubernetes-list-map-keys"]
                            .as_array()
                            .map(|ks| ks.iter().filter_map(Value::as_str).collect())
                            .unwrap_or_default()
                    });
                for (i, x) in a.iter().enumerate() {
                    let ox = keys.as_ref().and_then(|keys| {
                        old.and_then(Value::as_array).and_then(|olds| {
                            olds.iter()
                                .find(|o| keys.iter().all(|k| o.get(*k) == x.get(*k)))
                        })
                    });
                    validate_node(item, &format!("{path}[{i}]"), x, ox, run);
                }
            }
        }
        _ => {}
    }
}

fn run_rules(node: &Node, path: &str, v: &Value, old: Option<&Value>, run: &mut Run) {
    let t = ty(&node.schema).to_owned();
    if run.budget == 0 {
        run.invalid(
            path,
            &t,
            "validation failed due to running out of cost budget, no further validation rules will be run".into(),
        );
        run.stopped = true;
        return;
    }
    let observed = Bounds::observe(&node.schema, v, old);
    let this = to_cel(
        Some(&node.schema),
        &node.self_reads.view(v),
        node.resource_root,
    );
    // `oldSelf` is converted only when a rule of the node reads it: a rule that does not
    // cannot tell whether it is bound (a status write's spec rules, `has(self.run)`, skip the
    // copy of the old spec).
    let previous = old
        .filter(|_| node.rules.iter().any(|r| r.reads_old_self))
        .map(|o| {
            to_cel(
                Some(&node.schema),
                &node.old_reads.view(o),
                node.resource_root,
            )
        });
    for rule in &node.rules {
        if rule.uses_old_self && old.is_none() && !rule.optional_old_self {
            continue;
        }
        let cost = estimate_cost(rule.program.expression(), &node.schema, &observed);
        if cost > PER_CALL_LIMIT {
            run.invalid(
                path,
                &t,
                format!(
                    "'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                    rule.error_string()
                ),
            );
            run.stopped = true;
            return;
        }
        if cost > run.budget {
            run.invalid(
                path,
                &t,
                "validation failed due to running out of cost budget, no further validation rules will be run".into(),
            );
            run.stopped = true;
            return;
        }
        run.budget -= cost;
        let ctx = rule_context(rule, &this, previous.as_ref());
        if !returned_false(rule, &ctx, path, &t, run) {
            continue;
        }
        // Ratcheting: an unchanged value keeps passing what it passed when stored.
        if !rule.uses_old_self && old == Some(v) {
            continue;
        }
        let at = failure_path(path, &rule.field_path);
        let ControlFlow::Continue(detail) =
            message_expression(rule, node, &observed, &ctx, &at, &t, run)
        else {
            return;
        };
        let detail = detail.unwrap_or_else(|| {
            if rule.message.is_empty() {
                format!("failed rule: {}", rule.source.trim())
            } else {
                rule.message.clone()
            }
        });
        run.errors.push(rule_failure(rule, at, &t, detail));
    }
}

/// The variables a rule sees: `self`, and `oldSelf` when there is an old value (always, as
/// an optional, for a rule that declares `optionalOldSelf`).
fn rule_context(rule: &Rule, this: &Cel, previous: Option<&Cel>) -> Context<'static, 'static> {
    let mut ctx = Context::with_env(Arc::clone(&ENV));
    ctx.add_variable_from_value("self", this.clone());
    if !rule.reads_old_self {
        return ctx;
    }
    if rule.optional_old_self {
        let opt = match previous {
            Some(p) => OptionalValue::of(p.clone()),
            None => OptionalValue::none(),
        };
        ctx.add_variable_from_value("oldSelf", Cel::Opaque(Arc::new(opt)));
    } else if let Some(p) = previous {
        ctx.add_variable_from_value("oldSelf", p.clone());
    }
    ctx
}

/// Runs a rule. True when it returned false: a failure, which the caller reports with the
/// rule's message. A rule that returns true passes; an error, or a result that is not a
/// boolean, is reported here.
fn returned_false(rule: &Rule, ctx: &Context, path: &str, t: &str, run: &mut Run) -> bool {
    match rule.program.execute(ctx) {
        Ok(Cel::Bool(true)) => false,
        Ok(Cel::Bool(false)) => true,
        Ok(_) => {
            run.invalid(
                path,
                t,
                format!(
                    "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {}",
                    rule.error_string()
                ),
            );
            false
        }
        Err(e) => {
            let text = error_text(&e);
            let detail = if text == "no such overload" {
                format!(
                    "'{text}': call arguments did not match a supported operator, function or macro signature for rule: {}",
                    rule.error_string()
                )
            } else {
                format!("{text} evaluating rule: {}", rule.error_string())
            };
            run.invalid(path, t, detail);
            false
        }
    }
}

/// Where a failed rule is reported: at the node itself, or at its `fieldPath` under the node.
fn failure_path(path: &str, field_path: &str) -> String {
    if field_path.is_empty() {
        path.to_owned()
    } else if field_path.starts_with('[') {
        format!("{path}{field_path}")
    } else {
        child_path(path, field_path)
    }
}

/// A failed rule's `messageExpression`, evaluated: its text when it gives a usable one (not
/// empty, not too long, one line), `None` otherwise. It breaks when its cost goes over a
/// limit, having reported that and stopped the run.
fn message_expression(
    rule: &Rule,
    node: &Node,
    observed: &Bounds,
    ctx: &Context,
    at: &str,
    t: &str,
    run: &mut Run,
) -> ControlFlow<(), Option<String>> {
    let Some((src, program)) = &rule.message_expression else {
        return ControlFlow::Continue(None);
    };
    let cost = estimate_cost(program.expression(), &node.schema, observed);
    if cost > PER_CALL_LIMIT {
        run.invalid(
            at,
            t,
            format!(
                "no further validation rules will be run due to call cost exceeds limit for messageExpression: {}",
                serde_json::json!(src)
            ),
        );
        run.stopped = true;
        return ControlFlow::Break(());
    }
    if cost > run.budget {
        run.invalid(
            at,
            t,
            "messageExpression evaluation failed due to running out of cost budget, no further validation rules will be run".into(),
        );
        run.stopped = true;
        return ControlFlow::Break(());
    }
    run.budget -= cost;
    let mut detail = None;
    if let Ok(Cel::String(s)) = program.execute(ctx) {
        let s = s.trim();
        if !s.is_empty() && s.len() <= MAX_MESSAGE_EXPRESSION_SIZE && !s.contains('\n') {
            detail = Some(s.to_owned());
        }
    }
    ControlFlow::Continue(detail)
}
/// A failed rule as a field error: at `at` (`<nil>` for the root), of the kind its `reason`
/// names (`FieldValueInvalid` when it names none), showing the node's type `t` as the value.
fn rule_failure(rule: &Rule, at: String, t: &str, detail: String) -> FieldError {
    let path = if at.is_empty() {
        "<nil>".to_owned()
    } else {
        at
    };
    let shown = Some(Value::String(t.to_owned()));
    let (kind, value, detail) = match rule.reason.as_deref() {
        Some("FieldValueForbidden") => (FieldErrorKind::Forbidden, None, detail),
        Some("FieldValueRequired") => (FieldErrorKind::Required, None, detail),
        Some("FieldValueDuplicate") => (FieldErrorKind::Duplicate, shown, String::new()),
        _ => (FieldErrorKind::Invalid, shown, detail),
    };
    FieldError {
        path,
        kind,
        detail,
        value,
    }
}

/// Whether schema errors keep the rules from running (`hasBlockingErr`): a missing field, a
/// wrong type, an unsupported value, a string or list over its bound.
pub fn has_blocking_error(errs: &[FieldError]) -> bool {
    errs.iter().any(|e| {
        matches!(
            e.kind,
            FieldErrorKind::Required
                | FieldErrorKind::TypeInvalid
                | FieldErrorKind::NotSupported
                | FieldErrorKind::TooLong
                | FieldErrorKind::TooMany
        )
    })
}

/// The error `hasBlockingErr` adds when rules were skipped.
pub fn rules_not_checked() -> FieldError {
    FieldError {
        path: "<nil>".into(),
        kind: FieldErrorKind::Invalid,
        detail: "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation".into(),
        value: Some(Value::String("null".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Field selections read their subtrees only; any other use of the variable reads it all;
    /// a comprehension variable of the same name hides it.
    #[test]
    fn rules_read_the_fields_they_select() {
        let reads = |src: &str, var: &str| reads_of(parse(src).unwrap().expression(), var);
        let paths = |ps: &[&[&str]]| {
            Reads::Paths(
                ps.iter()
                    .map(|p| p.iter().map(|s| (*s).to_owned()).collect())
                    .collect(),
            )
        };
        let root = "!has(oldSelf.status) || !has(oldSelf.status.phase) || \
                    oldSelf.status.phase == 'PENDING' || self.spec.schedule == oldSelf.spec.schedule";
        assert_eq!(reads(root, "self"), paths(&[&["spec", "schedule"]]));
        assert_eq!(
            reads(root, "oldSelf"),
            paths(&[&["spec", "schedule"], &["status"]])
        );
        assert_eq!(
            reads("has(self.run) || has(self.command)", "oldSelf"),
            paths(&[])
        );
        assert_eq!(
            reads("self.items.all(x, x.a > 0)", "self"),
            paths(&[&["items"]])
        );
        assert_eq!(
            reads("self.items[0].name == 'x'", "self"),
            paths(&[&["items"]])
        );
        for everything in ["self == oldSelf", "size(self) < 3", "self.all(k, k != 'x')"] {
            assert_eq!(reads(everything, "self"), Reads::Everything, "{everything}");
        }
        assert_eq!(
            reads("self.items.all(self, self.a > 0)", "self"),
            paths(&[&["items"]])
        );
    }

    /// The view of a value keeps exactly the subtrees read, and the whole value otherwise.
    #[test]
    fn a_view_keeps_the_subtrees_read() {
        let v = json!({"spec": {"schedule": "s", "run": {"command": "c"}},
                       "status": {"phase": "RUNNING", "x": 1}, "metadata": {"name": "a"}});
        let view = Reads::Paths(vec![
            vec!["spec".into(), "schedule".into()],
            vec!["status".into()],
            vec!["missing".into(), "field".into()],
        ])
        .view(&v);
        assert_eq!(
            *view,
            json!({"spec": {"schedule": "s"}, "status": {"phase": "RUNNING", "x": 1}})
        );
        assert_eq!(*Reads::Everything.view(&v), v);
        assert_eq!(*Reads::Paths(vec![]).view(&v), json!({}));
        let scalar = json!(3);
        assert_eq!(*Reads::Paths(vec![vec!["a".into()]]).view(&scalar), scalar);
    }

    #[test]
    fn each_source_is_parsed_once_and_its_program_shared() {
        let source = "self.spec.replicas >= 0 && size(self.metadata.name) < 64";
        let (a, b) = (parse(source).unwrap(), parse(source).unwrap());
        assert!(Arc::ptr_eq(&a, &b));
        // Errors are kept too, with the same words.
        let bad = "self.spec.replicas >=";
        assert_eq!(parse(bad).unwrap_err(), parse_uncached(bad).unwrap_err());
        assert_eq!(parse(bad).unwrap_err(), parse(bad).unwrap_err());
        // Two schemas with the same rule share its program.
        let schema = root(
            json!({"replicas": {"type": "integer"}}),
            json!([{"rule": source}]),
        );
        let (one, two) = (
            compile(&schema, "").unwrap().unwrap(),
            compile(&schema, "").unwrap().unwrap(),
        );
        assert!(Arc::ptr_eq(
            &one.root.rules[0].program,
            &two.root.rules[0].program
        ));
    }

    /// A CRD-like root schema with `spec` holding `props`, and `rules` at the root.
    fn root(props: Value, rules: Value) -> Value {
        json!({"type": "object", "x-kubernetes-validations": rules,
               "properties": {"spec": {"type": "object", "properties": props}}})
    }

    fn spec_rules(props: Value, rules: Value) -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object",
               "x-kubernetes-validations": rules, "properties": props}}})
    }

    fn compiled(schema: &Value) -> Validator {
        match compile(schema, "spec.validation.openAPIV3Schema") {
            Ok(Some(v)) => v,
            Ok(None) => panic!("no rules compiled"),
            Err(e) => panic!("compile failed: {e:?}"),
        }
    }

    fn compile_errors(schema: &Value) -> Vec<String> {
        match compile(schema, "spec.validation.openAPIV3Schema") {
            Ok(_) => vec![],
            Err(causes) => causes
                .into_iter()
                .map(|c| format!("{}: {}", c.field, c.message))
                .collect(),
        }
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(FieldError::message).collect()
    }

    fn obj(spec: Value) -> Value {
        json!({"apiVersion": "cnat.programming-kubernetes.info/v1", "kind": "At",
               "metadata": {"name": "x", "namespace": "default", "uid": "u"}, "spec": spec})
    }

    #[test]
    fn a_failing_rule_reports_the_node_type_and_its_message() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"schedule": {"type": "string", "maxLength": 64,
                "x-kubernetes-validations": [{"rule": "self != ''", "message": "must not be empty"}]},
                "replicas": {"type": "integer",
                "x-kubernetes-validations": [{"rule": "self >= 0"}]}}}}});
        let v = compiled(&schema);
        assert!(
            v.validate(&obj(json!({"schedule": "x", "replicas": 1})), None)
                .is_empty()
        );
        let errs = v.validate(&obj(json!({"schedule": "", "replicas": -1})), None);
        assert_eq!(
            messages(&errs),
            [
                "spec.replicas: Invalid value: \"integer\": failed rule: self >= 0",
                "spec.schedule: Invalid value: \"string\": must not be empty",
            ]
        );
        assert_eq!(
            errs[0].to_cause().reason.as_deref(),
            Some("FieldValueInvalid")
        );
    }

    #[test]
    fn a_root_rule_has_no_path_and_sees_the_name() {
        let schema = root(
            json!({"min": {"type": "integer"}, "max": {"type": "integer"}}),
            json!([{"rule": "self.metadata.name.startsWith('x')"},
                   {"rule": "!has(self.spec.min) || !has(self.spec.max) || self.spec.min <= self.spec.max",
                    "message": "min must not exceed max", "fieldPath": ".spec.min"}]),
        );
        let v = compiled(&schema);
        assert!(
            v.validate(&obj(json!({"min": 1, "max": 2})), None)
                .is_empty()
        );
        assert!(v.validate(&obj(json!({"min": 1})), None).is_empty());
        let mut other = obj(json!({"min": 3, "max": 2}));
        other["metadata"]["name"] = json!("y");
        assert_eq!(
            messages(&v.validate(&other, None)),
            [
                "<nil>: Invalid value: \"object\": failed rule: self.metadata.name.startsWith('x')",
                "spec.min: Invalid value: \"object\": min must not exceed max",
            ]
        );
    }

    #[test]
    fn each_reason_picks_its_error_type() {
        let rule = |reason: &str| {
            spec_rules(
                json!({"a": {"type": "string"}}),
                json!([{"rule": "has(self.a)", "message": "a is needed", "reason": reason}]),
            )
        };
        let cases = [
            (
                "FieldValueInvalid",
                "FieldValueInvalid",
                "spec: Invalid value: \"object\": a is needed",
            ),
            (
                "FieldValueForbidden",
                "FieldValueForbidden",
                "spec: Forbidden: a is needed",
            ),
            (
                "FieldValueRequired",
                "FieldValueRequired",
                "spec: Required value: a is needed",
            ),
            (
                "FieldValueDuplicate",
                "FieldValueDuplicate",
                "spec: Duplicate value: \"object\"",
            ),
        ];
        for (reason, want_reason, want) in cases {
            let errs = compiled(&rule(reason)).validate(&obj(json!({})), None);
            assert_eq!(messages(&errs), [want], "{reason}");
            assert_eq!(errs[0].to_cause().reason.as_deref(), Some(want_reason));
        }
        assert_eq!(
            compile_errors(&rule("Nope")),
            [
                "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].reason: Unsupported value: \"Nope\": supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""
            ]
        );
    }

    #[test]
    fn transition_rules_run_only_on_update_with_an_old_value() {
        let schema = spec_rules(
            json!({"schedule": {"type": "string",
                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "schedule is immutable"}]}}),
            json!([]),
        );
        let v = compiled(&schema);
        let before = obj(json!({}));
        let set = obj(json!({"schedule": "a"}));
        let changed = obj(json!({"schedule": "b"}));
        // Create, and an update that sets the field for the first time: no old value there.
        assert!(v.validate(&set, None).is_empty());
        assert!(v.validate(&set, Some(&before)).is_empty());
        assert!(v.validate(&set, Some(&set)).is_empty());
        assert_eq!(
            messages(&v.validate(&changed, Some(&set))),
            ["spec.schedule: Invalid value: \"string\": schedule is immutable"]
        );
    }

    #[test]
    fn transition_rules_are_refused_below_lists_that_do_not_correlate() {
        let schema = spec_rules(
            json!({"xs": {"type": "array", "maxItems": 4, "items": {"type": "string",
                "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}}),
            json!([]),
        );
        assert_eq!(
            compile_errors(&schema),
            [
                "spec.validation.openAPIV3Schema.properties[spec].properties[xs].items.x-kubernetes-validations[0].rule: Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable portion of the schema within spec.validation.openAPIV3Schema.properties[spec].properties[xs].items"
            ]
        );
    }

    #[test]
    fn optional_old_self_runs_on_create_with_an_empty_optional() {
        let schema = spec_rules(
            json!({"n": {"type": "integer", "x-kubernetes-validations": [
                {"rule": "!oldSelf.hasValue() ? self < 10 : self >= oldSelf.value()",
                 "optionalOldSelf": true, "message": "n starts below 10 and never decreases"}]}}),
            json!([]),
        );
        let v = compiled(&schema);
        assert!(v.validate(&obj(json!({"n": 5})), None).is_empty());
        assert_eq!(v.validate(&obj(json!({"n": 50})), None).len(), 1);
        assert!(
            v.validate(&obj(json!({"n": 50})), Some(&obj(json!({"n": 5}))))
                .is_empty()
        );
        assert_eq!(
            v.validate(&obj(json!({"n": 4})), Some(&obj(json!({"n": 5}))))
                .len(),
            1
        );
        // optionalOldSelf on a rule without oldSelf is refused.
        let bad = spec_rules(
            json!({}),
            json!([{"rule": "true", "optionalOldSelf": true}]),
        );
        assert_eq!(
            compile_errors(&bad),
            [
                "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].optionalOldSelf: Forbidden: may not be set if oldSelf is not used in rule"
            ]
        );
    }

    #[test]
    fn message_expression_is_used_and_falls_back_to_message() {
        let rule = |expr: &str| {
            spec_rules(
                json!({"n": {"type": "integer"}}),
                json!([{"rule": "self.n < 3", "message": "n is too big", "messageExpression": expr}]),
            )
        };
        let run =
            |expr: &str| messages(&compiled(&rule(expr)).validate(&obj(json!({"n": 7})), None));
        assert_eq!(
            run("'n is ' + string(self.n) + ', the most is 2'"),
            ["spec: Invalid value: \"object\": n is 7, the most is 2"]
        );
        // An error, an empty string, a non-string, a line break: the message is used.
        for fallback in ["self.missing + 'x'", "'  '", "self.n", "'a\\nb'"] {
            assert_eq!(
                run(fallback),
                ["spec: Invalid value: \"object\": n is too big"],
                "{fallback}"
            );
        }
        assert!(compile_errors(&rule("'abc"))[0].contains(
            "x-kubernetes-validations[0].messageExpression: Invalid value: apiextensions.ValidationRule{Rule:\"self.n < 3\", Message:\"n is too big\", MessageExpression:\"'abc\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}: messageExpression compilation failed: ERROR: <input>:1:1:"
        ));
        assert!(
            compile_errors(&rule("42"))[0].ends_with("messageExpression must evaluate to a string")
        );
    }

    #[test]
    fn rules_that_do_not_compile_make_the_crd_invalid() {
        let errs = compile_errors(&spec_rules(json!({}), json!([{"rule": "self.a >"}])));
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with("spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{Rule:\"self.a >\", Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}: compilation failed: ERROR: <input>:1:"),
            "{errs:?}"
        );
        let errs = compile_errors(&root(json!({}), json!([{"rule": "size(foo) > 0"}])));
        assert!(
            errs[0].ends_with("compilation failed: ERROR: <input>:1:6: undeclared reference to 'foo' (in container '')\n | size(foo) > 0\n | .....^"),
            "{errs:?}"
        );
        let errs = compile_errors(&root(json!({}), json!([{"rule": "  "}, {"rule": "'abc'"}])));
        assert_eq!(
            errs,
            [
                "spec.validation.openAPIV3Schema.x-kubernetes-validations[0].rule: Required value",
                "spec.validation.openAPIV3Schema.x-kubernetes-validations[1].rule: Invalid value: apiextensions.ValidationRule{Rule:\"'abc'\", Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}: cel expression must evaluate to a bool",
            ]
        );
        // Macro variables are bound; a bad fieldPath is named.
        assert!(
            compile_errors(&spec_rules(
                json!({"xs": {"type": "array", "maxItems": 5, "items": {"type": "integer"}}}),
                json!([{"rule": "self.xs.all(x, x > 0)"}])
            ))
            .is_empty()
        );
        assert_eq!(
            compile_errors(&spec_rules(
                json!({"a": {"type": "string"}}),
                json!([{"rule": "true", "fieldPath": ".b"}])
            )),
            [
                "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].fieldPath: Invalid value: \".b\": fieldPath must be a valid path: does not refer to a valid field"
            ]
        );
    }

    #[test]
    fn evaluation_errors_read_as_cel_go() {
        let schema = spec_rules(
            json!({"a": {"type": "string"}, "n": {"type": "x-kubernetes-int-or-string"}}),
            json!([{"rule": "self.a == 'x'"}]),
        );
        assert_eq!(
            messages(&compiled(&schema).validate(&obj(json!({})), None)),
            ["spec: Invalid value: \"object\": no such key: a evaluating rule: self.a == 'x'"]
        );
        let schema = spec_rules(
            json!({"n": {"x-kubernetes-int-or-string": true}}),
            json!([{"rule": "self.n > 1"}]),
        );
        let v = compiled(&schema);
        assert!(v.validate(&obj(json!({"n": 2})), None).is_empty());
        assert_eq!(
            messages(&v.validate(&obj(json!({"n": "2"})), None)),
            [
                "spec: Invalid value: \"object\": 'no such overload': call arguments did not match a supported operator, function or macro signature for rule: self.n > 1"
            ]
        );
    }

    #[test]
    fn the_value_mapping_follows_the_schema() {
        let schema = spec_rules(
            json!({
                "ratio": {"type": "number"},
                "foo-bar": {"type": "string"},
                "namespace": {"type": "string"},
                "data": {"type": "string", "format": "byte"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "known": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                          "properties": {"a": {"type": "integer"}}},
            }),
            json!([
                {"rule": "self.ratio == 1.0", "message": "number is double"},
                {"rule": "self.foo__dash__bar == 'v' && self.__namespace__ == 'ns'", "message": "escaped"},
                {"rule": "self.data == b'hi'", "message": "bytes"},
                {"rule": "self.labels['app'] == 'web' && 'app' in self.labels", "message": "map"},
                {"rule": "self.free.anything.deep == 1", "message": "preserved"},
                {"rule": "!has(self.known.b) && self.known.a == 1", "message": "declared only"},
            ]),
        );
        let v = compiled(&schema);
        let spec = json!({"ratio": 1, "foo-bar": "v", "namespace": "ns", "data": "aGk=",
            "labels": {"app": "web"}, "free": {"anything": {"deep": 1}}, "known": {"a": 1, "b": 2}});
        assert_eq!(
            messages(&v.validate(&obj(spec), None)),
            Vec::<String>::new()
        );
    }

    /// A property is found by its CEL name: directly when the name is its own CEL name, else
    /// among the escaped names (a literal property spelled like another's escape is not it).
    #[test]
    fn a_property_is_found_by_its_cel_name() {
        let props = json!({"spec": 1, "foo-bar": 2, "foo__dash__bar": 3, "namespace": 4, "__namespace__": 5});
        let props = props.as_object().unwrap();
        assert_eq!(property_named(props, "spec"), Some(&json!(1)));
        assert_eq!(property_named(props, "foo__dash__bar"), Some(&json!(2)));
        assert_eq!(
            property_named(props, "foo__underscores__dash__underscores__bar"),
            Some(&json!(3))
        );
        assert_eq!(property_named(props, "__namespace__"), Some(&json!(4)));
        assert_eq!(property_named(props, "namespace"), None);
        assert_eq!(property_named(props, "missing"), None);
    }

    #[test]
    fn ratcheting_keeps_an_unchanged_value_valid() {
        let schema = spec_rules(
            json!({"a": {"type": "string", "x-kubernetes-validations": [{"rule": "self.size() < 3"}]},
                   "b": {"type": "string"}}),
            json!([]),
        );
        let v = compiled(&schema);
        let stored = obj(json!({"a": "long", "b": "1"}));
        assert_eq!(v.validate(&stored, None).len(), 1);
        assert!(
            v.validate(&obj(json!({"a": "long", "b": "2"})), Some(&stored))
                .is_empty()
        );
        assert_eq!(
            v.validate(&obj(json!({"a": "longer"})), Some(&stored))
                .len(),
            1
        );
    }

    #[test]
    fn list_items_correlate_by_their_map_keys() {
        let schema = spec_rules(
            json!({"m": {"type": "array", "maxItems": 10, "x-kubernetes-list-type": "map",
                         "x-kubernetes-list-map-keys": ["name"], "items": {"type": "object",
                "properties": {"name": {"type": "string"}, "v": {"type": "integer"}},
                "x-kubernetes-validations": [{"rule": "self.v >= oldSelf.v", "message": "v never decreases"}]}}}),
            json!([]),
        );
        let v = compiled(&schema);
        let old = obj(json!({"m": [{"name": "x", "v": 2}, {"name": "y", "v": 1}]}));
        // Reordered, x lowered, z new (no old value: its transition rule does not run).
        let new = obj(
            json!({"m": [{"name": "y", "v": 1}, {"name": "x", "v": 1}, {"name": "z", "v": 0}]}),
        );
        assert_eq!(
            messages(&v.validate(&new, Some(&old))),
            ["spec.m[1]: Invalid value: \"object\": v never decreases"]
        );
    }

    #[test]
    fn the_estimated_cost_refuses_unbounded_rules_and_bounds_each_call() {
        let pairs = |max: Option<u64>| {
            let mut list = json!({"type": "array", "items": {"type": "string", "maxLength": 10}});
            if let Some(m) = max {
                list["maxItems"] = json!(m);
            }
            spec_rules(
                json!({"xs": list}),
                json!([{"rule": "self.xs.all(x, self.xs.exists_one(y, y == x))", "message": "unique"}]),
            )
        };
        let errs = compile_errors(&pairs(None));
        assert!(
            errs.iter().any(|e| e == "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"),
            "{errs:?}"
        );
        let v = compiled(&pairs(Some(500)));
        let few: Vec<String> = (0..10).map(|i| format!("s{i}")).collect();
        assert!(v.validate(&obj(json!({"xs": few})), None).is_empty());
        let many: Vec<String> = (0..500).map(|i| format!("s{i}")).collect();
        assert_eq!(
            messages(&v.validate(&obj(json!({"xs": many})), None)),
            [
                "spec: Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: unique"
            ]
        );
    }

    #[test]
    fn a_request_stops_when_its_budget_is_spent() {
        let schema = spec_rules(
            json!({"xs": {"type": "array", "maxItems": 100, "items": {"type": "integer",
                "x-kubernetes-validations": [{"rule": "self >= 0"}]}}}),
            json!([]),
        );
        let v = compiled(&schema);
        let spec = obj(json!({"xs": (0..100).collect::<Vec<i64>>()}));
        assert!(v.validate(&spec, None).is_empty());
        let errs = v.validate_with_budget(&spec, None, 50);
        assert_eq!(
            messages(&errs).last().map(String::as_str),
            Some(
                "spec.xs[16]: Invalid value: \"integer\": validation failed due to running out of cost budget, no further validation rules will be run"
            )
        );
        assert_eq!(errs.len(), 1);
    }

    #[test]
    fn the_whole_schema_total_is_bounded_by_cardinality() {
        // Each item's rule is cheap, but unbounded lists of unbounded lists multiply it.
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "rows": {"type": "array", "items": {"type": "array", "items": {"type": "string",
                "x-kubernetes-validations": [{"rule": "self.startsWith('a')"}]}}}}}}});
        let errs = compile_errors(&schema);
        assert!(
            errs.iter().any(|e| e.starts_with("spec.validation.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of")),
            "{errs:?}"
        );
    }

    #[test]
    fn oversized_and_deeply_nested_sources_are_refused_without_crashing() {
        let long = format!("self.a == '{}'", "x".repeat(MAX_RULE_LENGTH));
        let errs = compile_errors(&spec_rules(
            json!({"a": {"type": "string"}}),
            json!([{"rule": long}]),
        ));
        assert!(
            errs[0].contains("expression code point size exceeds limit"),
            "{errs:?}"
        );
        let nested = format!("{}true{}", "(".repeat(400), ")".repeat(400));
        assert_eq!(
            compile_errors(&root(json!({}), json!([{"rule": nested}]))).len(),
            1
        );
        let chain = vec!["1"; 2000].join(" + ") + " > 0";
        assert_eq!(
            compile_errors(&root(json!({}), json!([{"rule": chain}]))).len(),
            1
        );
    }

    #[test]
    fn the_deepest_accepted_expression_evaluates_on_a_small_stack() {
        // Just under the depth limit: a left-leaning chain of additions, evaluated on a thread
        // with tokio's default worker stack (2 MiB).
        let chain = format!("self.n{} > 0", " + 1".repeat(MAX_EXPRESSION_DEPTH - 5));
        let schema = spec_rules(json!({"n": {"type": "integer"}}), json!([{"rule": chain}]));
        let v = compiled(&schema);
        let errs = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || v.validate(&obj(json!({"n": 1})), None))
            .expect("thread")
            .join()
            .expect("evaluation finished");
        assert!(errs.is_empty(), "{errs:?}");
    }

    #[test]
    fn the_largest_expressions_run_on_the_callers_stack_fit_a_small_one() {
        // The deepest rule evaluated on the caller's stack, and the longest source parsed
        // there (nested as deep as its length allows), compiled and evaluated on a thread
        // with tokio's default worker stack (2 MiB).
        let chain = format!("self.n{} > 0", " + 1".repeat(SHALLOW_DEPTH - 5));
        // (At most 40 parentheses: the crate's parser stops at 96 levels of recursion.)
        let parens = ((SHORT_SOURCE - "self.n > 0".len()) / 2).min(40);
        let nested = format!("{}self.n{} > 0", "(".repeat(parens), ")".repeat(parens));
        assert!(nested.len() <= SHORT_SOURCE);
        let errs = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || {
                let v = compiled(&spec_rules(
                    json!({"n": {"type": "integer"}}),
                    json!([{"rule": chain}, {"rule": nested}]),
                ));
                assert!(!v.deep, "{v:?}");
                v.validate(&obj(json!({"n": 1})), None)
            })
            .expect("thread")
            .join()
            .expect("compiled and evaluated");
        assert!(errs.is_empty(), "{errs:?}");
    }

    #[test]
    fn blocking_schema_errors_skip_the_rules() {
        let required = FieldError {
            path: "spec.a".into(),
            kind: FieldErrorKind::Required,
            detail: String::new(),
            value: None,
        };
        assert!(has_blocking_error(std::slice::from_ref(&required)));
        assert_eq!(
            rules_not_checked().message(),
            "<nil>: Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
        );
    }
}
