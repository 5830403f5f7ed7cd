//! The workspace's module graph: no crate has a cycle between its top-level modules, and the
//! API server has at most 15 of them.
//!
//! A crate's top-level modules are the files and folders beside its `lib.rs` (or `main.rs`);
//! files inside one folder may use each other, as Go files of one package do, so a folder is
//! one node. An edge `a -> b` is a path from a file of `a` to `b`: `crate::b::...`,
//! `use crate::{b, ...}`, or a `super::` chain that climbs out of `a` into `b`. Comments, doc
//! comments, string literals and `#[cfg(test)]` modules are left out (tests may reach anywhere),
//! and so is the crate root itself, which declares and re-exports the modules.
//!
//! A cycle is reported with the path of every edge, so a failure says which `use` to move.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The workspace's library and binary crates: their source folders.
const CRATES: &[&str] = &[
    "apimachinery/src",
    "client-go/src",
    "controller-runtime/src",
    "operators/src",
    "cluster/src",
    "cluster/apiserver/src",
    "cluster/controller-manager/src",
    "cluster/node/src",
    "codegen/src",
    "src",
];

/// Most top-level modules the API server crate may have.
const API_SERVER_MAX_MODULES: usize = 15;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// `text` with comments and string and character literals blanked out (newlines kept).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |s: &[u8], out: &mut String| {
        for &c in s {
            out.push(if c == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            let end = text[i..].find('\n').map_or(b.len(), |n| i + n);
            blank(&b[i..end], &mut out);
            i = end;
        } else if b[i..].starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(b.len(), |n| i + 2 + n + 2);
            blank(&b[i..end], &mut out);
            i = end;
        } else if b[i] == b'r' && (b[i..].starts_with(b"r\"") || b[i..].starts_with(b"r#")) {
            // Raw strings: r"..." or r#"..."# (any number of #).
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let close = format!("\"{}", "#".repeat(hashes));
            let start = i + 2 + hashes;
            let end = text[start..]
                .find(&close)
                .map_or(b.len(), |n| start + n + close.len());
            blank(&b[i..end], &mut out);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(b.len());
            blank(&b[i..end], &mut out);
            i = end;
        } else if b[i] == b'\'' {
            // A character literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            let lit = if b.get(i + 1) == Some(&b'\\') {
                text[i + 2..].find('\'').map(|n| i + 2 + n + 1)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 3)
            } else {
                None
            };
            match lit {
                Some(end) => {
                    blank(&b[i..end], &mut out);
                    i = end;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = text[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// `code` with every `#[cfg(test)]`-gated `mod ... { ... }` blanked out.
fn without_test_modules(code: &str) -> String {
    let mut out = code.to_owned();
    let mut from = 0;
    while let Some(at) = out[from..].find("#[cfg(test)]").map(|n| from + n) {
        let after = &out[at..];
        let Some(open) = after.find('{') else { break };
        let header = &after[..open];
        if !header.contains("mod ") || header.contains(';') {
            from = at + 1;
            continue;
        }
        let bytes = out.as_bytes();
        let mut depth = 0usize;
        let mut end = at + open;
        for (k, &c) in bytes[at + open..].iter().enumerate() {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = at + open + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        let blanked: String = out[at..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(at..end, &blanked);
        from = end;
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The identifier starting at `s`.
fn ident(s: &str) -> &str {
    let end = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    &s[..end]
}

/// One crate's module graph: node -> (target -> the first `file:line` with that edge).
type Graph = BTreeMap<String, BTreeMap<String, String>>;

fn graph_of(src: &Path) -> (BTreeSet<String>, Graph) {
    let mut files = vec![];
    rust_files(src, &mut files);
    let mut modules = BTreeSet::new();
    for f in &files {
        let rel = f.strip_prefix(src).unwrap_or(f);
        let first = rel
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned());
        if let Some(first) = first {
            let name = first.trim_end_matches(".rs").to_owned();
            if name != "lib" && name != "main" && name != "bin" {
                modules.insert(name);
            }
        }
    }
    let mut graph = Graph::new();
    for f in &files {
        let rel = f.strip_prefix(src).unwrap_or(f);
        let parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let node = parts[0].trim_end_matches(".rs").to_owned();
        if !modules.contains(&node) {
            continue;
        }
        // The module path of the file: `a/b/mod.rs` is `a::b`, `a/b.rs` is `a::b`.
        let mut path: Vec<String> = parts
            .iter()
            .map(|p| p.trim_end_matches(".rs").to_owned())
            .collect();
        if path.last().is_some_and(|l| l == "mod") {
            path.pop();
        }
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let code = without_test_modules(&code_only(&text));
        let mut add = |target: &str, line: usize| {
            if target != node && modules.contains(target) {
                graph
                    .entry(node.clone())
                    .or_default()
                    .entry(target.to_owned())
                    .or_insert_with(|| format!("{}:{line}", f.display()));
            }
        };
        for (n, line) in code.lines().enumerate() {
            let line_no = n + 1;
            let mut rest = line;
            while let Some(at) = rest.find("crate::") {
                let before = rest[..at].chars().last();
                let after = &rest[at + "crate::".len()..];
                if before.is_none_or(|c| !is_ident(c) && c != ':') {
                    if let Some(group) = after.strip_prefix('{') {
                        let inner = &group[..group.find('}').unwrap_or(group.len())];
                        for item in inner.split(',') {
                            add(ident(item.trim()), line_no);
                        }
                    } else {
                        add(ident(after), line_no);
                    }
                }
                rest = after;
            }
            let mut rest = line;
            while let Some(at) = rest.find("super::") {
                let before = rest[..at].chars().last();
                if before.is_some_and(|c| is_ident(c) || c == ':') {
                    rest = &rest[at + "super::".len()..];
                    continue;
                }
                let mut tail = &rest[at..];
                let mut ups = 0;
                while let Some(t) = tail.strip_prefix("super::") {
                    ups += 1;
                    tail = t;
                }
                // Climbing `ups` levels from the file's module: at the crate root when `ups`
                // equals the file's depth, the next segment is a top-level module.
                if ups == path.len() {
                    if let Some(group) = tail.strip_prefix('{') {
                        let inner = &group[..group.find('}').unwrap_or(group.len())];
                        for item in inner.split(',') {
                            add(ident(item.trim()), line_no);
                        }
                    } else {
                        add(ident(tail), line_no);
                    }
                }
                rest = tail;
            }
        }
    }
    (modules, graph)
}

/// The strongly connected components with more than one module (Tarjan).
fn cycles(modules: &BTreeSet<String>, graph: &Graph) -> Vec<Vec<String>> {
    struct T<'g> {
        graph: &'g Graph,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on: BTreeSet<String>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit(t: &mut T<'_>, v: &str) {
        t.index.insert(v.to_owned(), t.next);
        t.low.insert(v.to_owned(), t.next);
        t.next += 1;
        t.stack.push(v.to_owned());
        t.on.insert(v.to_owned());
        let targets: Vec<String> = t
            .graph
            .get(v)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for w in targets {
            if !t.index.contains_key(&w) {
                visit(t, &w);
                let lw = t.low[&w];
                let lv = t.low[v];
                t.low.insert(v.to_owned(), lv.min(lw));
            } else if t.on.contains(&w) {
                let iw = t.index[&w];
                let lv = t.low[v];
                t.low.insert(v.to_owned(), lv.min(iw));
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = vec![];
            while let Some(w) = t.stack.pop() {
                t.on.remove(&w);
                let done = w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        on: BTreeSet::new(),
        next: 0,
        out: vec![],
    };
    for m in modules {
        if !t.index.contains_key(m) {
            visit(&mut t, m);
        }
    }
    t.out
}

#[test]
fn no_crate_has_a_cycle_between_its_top_level_modules() {
    let mut report = vec![];
    for krate in CRATES {
        let (modules, graph) = graph_of(&root().join(krate));
        for comp in cycles(&modules, &graph) {
            let members: BTreeSet<&String> = comp.iter().collect();
            let mut edges = vec![];
            for from in &comp {
                for (to, at) in graph.get(from).into_iter().flatten() {
                    if members.contains(to) {
                        edges.push(format!("    {from} -> {to}  ({at})"));
                    }
                }
            }
            report.push(format!(
                "{krate}: {} modules in one cycle: {}\n{}",
                comp.len(),
                comp.join(", "),
                edges.join("\n")
            ));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn the_api_server_has_at_most_fifteen_top_level_modules() {
    let (modules, _) = graph_of(&root().join("cluster/apiserver/src"));
    assert!(
        modules.len() <= API_SERVER_MAX_MODULES,
        "{} top-level modules: {modules:?}",
        modules.len()
    );
}

/// The check itself finds what it is meant to find: a cycle written through `use crate::`
/// paths, through inline paths and through `super::` chains, but not through comments,
/// strings or test modules.
#[test]
fn the_check_sees_paths_and_ignores_comments_strings_and_tests() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let src = dir.path();
    std::fs::create_dir_all(src.join("c")).expect("a folder");
    std::fs::write(
        src.join("lib.rs"),
        "pub mod a; pub mod b; pub mod c; pub mod d;",
    )
    .expect("lib.rs");
    std::fs::write(
        src.join("a.rs"),
        "use crate::{b, d};\n// crate::c is only mentioned\nfn f() { let _ = \"crate::c\"; }\n",
    )
    .expect("a.rs");
    std::fs::write(src.join("b.rs"), "fn g() { super::c::h(); }\n").expect("b.rs");
    std::fs::write(
        src.join("c").join("mod.rs"),
        "pub mod inner;\n#[cfg(test)]\nmod tests { use crate::d; }\n",
    )
    .expect("c/mod.rs");
    std::fs::write(
        src.join("c").join("inner.rs"),
        "pub fn h() { super::super::a::f(); }\n",
    )
    .expect("c/inner.rs");
    std::fs::write(src.join("d.rs"), "pub fn x() {}\n").expect("d.rs");
    let (modules, graph) = graph_of(src);
    assert_eq!(modules.len(), 4);
    let targets = |m: &str| -> Vec<String> {
        graph
            .get(m)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(targets("a"), ["b", "d"]);
    assert_eq!(targets("b"), ["c"]);
    assert_eq!(targets("c"), ["a"]);
    assert_eq!(targets("d"), Vec::<String>::new());
    assert_eq!(
        cycles(&modules, &graph),
        vec![vec!["a".to_owned(), "b".into(), "c".into()]]
    );
}
