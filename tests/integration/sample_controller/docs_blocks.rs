//! Every runnable command block of README.md and docs/*.md, run as written.
//!
//! The documentation marks each shell block by its info string (see docs/README.md, "How the
//! commands here are tested"):
//!
//! * ```` ```sh runnable ````: this test runs it;
//! * ```` ```sh cluster ````: it needs a real cluster (minikube, cert-manager, Helm on a cluster);
//! * ```` ```sh manual ````: not run here for a reason the text gives (a benchmark of minutes, a
//!   container runtime, the test command itself).
//!
//! A ```` ```text expected ```` block right after a runnable block is its output: each of its
//! lines must appear in what the block printed (stdout and stderr together), in that order, with
//! runs of spaces compared as one space; `...` inside a line matches any text, and a line of
//! `...` alone only marks lines left out.
//!
//! Each block runs in `bash` with `set -euo pipefail`, in a temporary directory holding a link to
//! the repository's `artifacts/`, with a temporary `HOME` and no `KUBECONFIG`, and with the
//! `sample-controller` this test was built with first on the `PATH`. `cargo run -- ARGS`
//! (with or without `--release`) runs that binary and `cargo build` does nothing (a nested build would take
//! minutes). Each fixed `127.0.0.1:PORT` the block names (the text says which ports a recipe
//! takes) is replaced, in the block and in its expected output, by a port this test found free
//! below Linux's ephemeral range, so nothing another test bound to port 0 can take it. bash runs
//! in a process group of its own with an EXIT trap that kills the block's jobs; whatever is left
//! of the group afterwards (or after a timeout, or a panic) is killed.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The files whose blocks are run: the README and every chapter (`every_chapter_is_tested`
/// keeps this list complete).
const FILES: &[&str] = &[
    "README.md",
    "docs/README.md",
    "docs/01-client.md",
    "docs/02-cache.md",
    "docs/03-workqueue.md",
    "docs/04-controllers.md",
    "docs/05-events.md",
    "docs/06-leader-election.md",
    "docs/07-manager.md",
    "docs/08-versions-and-webhooks.md",
    "docs/09-embedded-apiserver.md",
    "docs/10-cluster.md",
    "docs/11-sharding.md",
    "docs/12-observability.md",
    "docs/13-performance.md",
    "docs/14-follow-one-key.md",
    "docs/flags.md",
];

/// How long one block may take.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(240);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A fenced block of a Markdown file.
#[derive(Debug)]
struct Fence {
    /// 1-based line of the opening fence.
    line: usize,
    /// The info string's words: the language first, then the tags.
    info: Vec<String>,
    text: String,
}

fn fences(markdown: &str) -> Vec<Fence> {
    let mut out = Vec::new();
    let mut open: Option<Fence> = None;
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        match open.take() {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some(Fence {
                        line: i + 1,
                        info: info.split_whitespace().map(str::to_owned).collect(),
                        text: String::new(),
                    });
                }
            }
            Some(mut fence) => {
                if trimmed.starts_with("```") {
                    out.push(fence);
                } else {
                    fence.text.push_str(line);
                    fence.text.push('\n');
                    open = Some(fence);
                }
            }
        }
    }
    assert!(open.is_none(), "a fenced block is never closed");
    out
}

fn is_shell(fence: &Fence) -> bool {
    matches!(
        fence.info.first().map(String::as_str),
        Some("sh" | "bash" | "shell" | "console")
    )
}

fn has_tag(fence: &Fence, tag: &str) -> bool {
    fence.info.iter().skip(1).any(|t| t == tag)
}

/// The runnable blocks of `file`, each with its expected output if the text shows one.
fn runnable_blocks(file: &str) -> Vec<(Fence, Option<Fence>)> {
    let text = std::fs::read_to_string(repo().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let mut blocks = Vec::new();
    let mut all = fences(&text).into_iter().peekable();
    while let Some(fence) = all.next() {
        if !(is_shell(&fence) && has_tag(&fence, "runnable")) {
            continue;
        }
        let expected = all.next_if(|next| {
            next.info.first().map(String::as_str) == Some("text") && has_tag(next, "expected")
        });
        blocks.push((fence, expected));
    }
    blocks
}

/// Stands in for cargo (the binary this test was built with is already on the PATH).
const PRELUDE: &str = r#"set -euo pipefail
exec 2>&1
# Whatever happens, no background job of the block outlives it.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
cargo() {
  case "$1" in
    build) return 0 ;;
    run) while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done; shift; sample-controller "$@" ;;
    *) echo "the docs test stands in for cargo build and cargo run only: cargo $*" >&2; return 2 ;;
  esac
}
"#;

/// A port below Linux's ephemeral range (32768-60999) that nothing listens on now. Ports bound
/// to 0 come from the ephemeral range, so another test's server cannot take this one.
fn free_fixed_port(taken: &mut Vec<u16>) -> u16 {
    loop {
        let port = fastrand::u16(20000..32000);
        if taken.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            taken.push(port);
            return port;
        }
    }
}

/// Every fixed `127.0.0.1:PORT` and `localhost:PORT` in `text`, as numbers.
fn fixed_ports(text: &str) -> Vec<u16> {
    let mut ports = Vec::new();
    for host in ["127.0.0.1:", "localhost:"] {
        for (at, _) in text.match_indices(host) {
            let digits: String = text[at + host.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            if let Ok(port) = digits.parse::<u16>()
                && port != 0
                && !ports.contains(&port)
            {
                ports.push(port);
            }
        }
    }
    ports
}

fn replace_ports(text: &str, map: &BTreeMap<u16, u16>) -> String {
    let mut out = text.to_owned();
    for host in ["127.0.0.1:", "localhost:"] {
        let mut result = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(at) = rest.find(host) {
            let (before, after) = rest.split_at(at + host.len());
            result.push_str(before);
            let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
            match digits.parse::<u16>().ok().and_then(|p| map.get(&p)) {
                Some(new) => result.push_str(&new.to_string()),
                None => result.push_str(&digits),
            }
            rest = &after[digits.len()..];
        }
        result.push_str(rest);
        out = result;
    }
    out
}

fn collapse(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `line` matches the expected line `pattern` (`...` matches any text; without one at
/// either end, the line starts or ends as the pattern does).
fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split("...").map(str::trim).collect();
    let last = parts.len() - 1;
    let mut rest = line;
    for (i, part) in parts.iter().enumerate() {
        if part.is_empty() {
            continue;
        }
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == last {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    (last > 0 && parts[last].is_empty()) || rest.is_empty()
}

/// The first expected line not found, in order, in `output`.
fn first_missing(expected: &str, output: &str) -> Option<String> {
    let lines: Vec<String> = output.lines().map(collapse).collect();
    let mut at = 0;
    for want in expected.lines().map(collapse) {
        if want.is_empty() || want == "..." {
            continue;
        }
        match lines[at..].iter().position(|l| line_matches(&want, l)) {
            Some(i) => at += i + 1,
            None => return Some(want),
        }
    }
    None
}

/// Kills what is left of a process group when dropped (a timeout, a panic).
struct Group(i32);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0)])
            .stderr(Stdio::null())
            .status();
    }
}

/// Runs one block; returns what it printed, or panics with it.
fn run_block(file: &str, block: &Fence, expected: Option<&Fence>, bin_dir: &Path) {
    let mut taken = Vec::new();
    let mut ports = fixed_ports(&block.text);
    if let Some(e) = expected {
        for p in fixed_ports(&e.text) {
            if !ports.contains(&p) {
                ports.push(p);
            }
        }
    }
    let map: BTreeMap<u16, u16> = ports
        .into_iter()
        .map(|p| (p, free_fixed_port(&mut taken)))
        .collect();
    let script = format!("{PRELUDE}\n{}", replace_ports(&block.text, &map));

    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(repo().join("artifacts"), work.path().join("artifacts")).unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(work.path())
        .env("HOME", home.path())
        .env("PATH", path)
        .env_remove("KUBECONFIG")
        .env_remove("SAMPLE_CONTROLLER_APISERVER_TOKEN")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        // Its own process group, so what the block started can be killed with it.
        .process_group(0)
        .spawn()
        .expect("bash runs");
    let group = Group(child.id() as i32);
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = stdout.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for bash") {
            break Some(status);
        }
        if start.elapsed() > BLOCK_TIMEOUT {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // Anything the block left running goes now (it holds the pipe open otherwise).
    drop(group);
    let _ = child.wait();
    let output = reader.join().unwrap_or_default();
    let context = format!(
        "{file}:{}: the block\n{}\nprinted:\n{output}",
        block.line, block.text
    );
    let Some(status) = status else {
        panic!("{context}\ndid not finish within {BLOCK_TIMEOUT:?}");
    };
    assert!(status.success(), "{context}\nexited with {status}");
    if let Some(expected) = expected {
        let want = replace_ports(&expected.text, &map);
        if let Some(missing) = first_missing(&want, &output) {
            panic!(
                "{context}\nthe expected output at {file}:{} has a line not printed (in that order): {missing:?}",
                expected.line
            );
        }
    }
    eprintln!(
        "{file}:{}: ran in {:.1}s",
        block.line,
        start.elapsed().as_secs_f64()
    );
}

/// A directory with `sample-controller` in it, for the front of the PATH.
fn bin_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_sample-controller"),
        dir.path().join("sample-controller"),
    )
    .unwrap();
    dir
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run_file(file: &str) {
    let blocks = runnable_blocks(file);
    if blocks.is_empty() {
        return;
    }
    let missing: Vec<&str> = ["kubectl", "curl", "openssl", "base64"]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
    if !missing.is_empty() {
        eprintln!("SKIPPED: the runnable blocks of {file}: not on PATH: {missing:?}");
        return;
    }
    let bin = bin_dir();
    for (block, expected) in &blocks {
        run_block(file, block, expected.as_ref(), bin.path());
    }
}

macro_rules! file_tests {
    ($($name:ident => $file:literal,)*) => {
        $(
            #[test]
            fn $name() {
                run_file($file);
            }
        )*
        /// The files the tests above run, to check against `FILES`.
        const TESTED: &[&str] = &[$($file),*];
    };
}

file_tests! {
    readme => "README.md",
    docs_index => "docs/README.md",
    docs_01_client => "docs/01-client.md",
    docs_02_cache => "docs/02-cache.md",
    docs_03_workqueue => "docs/03-workqueue.md",
    docs_04_controllers => "docs/04-controllers.md",
    docs_05_events => "docs/05-events.md",
    docs_06_leader_election => "docs/06-leader-election.md",
    docs_07_manager => "docs/07-manager.md",
    docs_08_versions_and_webhooks => "docs/08-versions-and-webhooks.md",
    docs_09_embedded_apiserver => "docs/09-embedded-apiserver.md",
    docs_10_cluster => "docs/10-cluster.md",
    docs_11_sharding => "docs/11-sharding.md",
    docs_12_observability => "docs/12-observability.md",
    docs_13_performance => "docs/13-performance.md",
    docs_14_follow_one_key => "docs/14-follow-one-key.md",
    docs_flags => "docs/flags.md",
}

/// Every chapter in docs/ is in `FILES` and has a test above, so a new chapter's commands are
/// run too.
#[test]
fn every_chapter_is_tested() {
    let mut on_disk: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    on_disk.push("README.md".into());
    on_disk.sort();
    let mut listed: Vec<String> = FILES.iter().map(|f| f.to_string()).collect();
    listed.sort();
    let mut tested: Vec<String> = TESTED.iter().map(|f| f.to_string()).collect();
    tested.sort();
    assert_eq!(on_disk, listed, "docs/*.md and README.md against FILES");
    assert_eq!(listed, tested, "FILES against the tests of file_tests!");
}

/// Every block names its language; every shell block says whether it runs here (`runnable`)
/// or why not (`cluster`, `manual`); and every `text expected` block follows a runnable one.
#[test]
fn every_shell_block_is_marked() {
    let mut unmarked = Vec::new();
    for file in FILES {
        let text = std::fs::read_to_string(repo().join(file)).unwrap();
        let all = fences(&text);
        for (i, fence) in all.iter().enumerate() {
            if fence.info.is_empty() {
                unmarked.push(format!(
                    "{file}:{}: a block without a language (`sh`, `text`, `yaml`, ...)",
                    fence.line
                ));
            }
            if !is_shell(fence) && has_tag(fence, "runnable") {
                unmarked.push(format!("{file}:{}: only shell blocks run", fence.line));
            }
            if is_shell(fence) {
                let marks = ["runnable", "cluster", "manual"]
                    .iter()
                    .filter(|m| has_tag(fence, m))
                    .count();
                if marks != 1 {
                    unmarked.push(format!("{file}:{}: {:?}", fence.line, fence.info));
                }
            }
            if fence.info.first().map(String::as_str) == Some("text") && has_tag(fence, "expected")
            {
                let after_runnable =
                    i > 0 && is_shell(&all[i - 1]) && has_tag(&all[i - 1], "runnable");
                if !after_runnable {
                    unmarked.push(format!(
                        "{file}:{}: expected output after no runnable block",
                        fence.line
                    ));
                }
            }
        }
    }
    assert!(
        unmarked.is_empty(),
        "shell blocks need exactly one of `runnable`, `cluster`, `manual` after the language:\n{}",
        unmarked.join("\n")
    );
}

/// The manager's flags have one source, their clap definitions (`sample-controller run
/// --help`): no document keeps a copy of the flag table.
#[test]
fn no_document_copies_the_flag_table() {
    for file in FILES {
        let text = std::fs::read_to_string(repo().join(file)).unwrap();
        let rows = text
            .lines()
            .filter(|l| {
                ["| `--workers`", "| `--resync-period`", "| `--kube-api-qps`"]
                    .iter()
                    .any(|r| l.trim_start().starts_with(r))
            })
            .count();
        assert_eq!(
            rows, 0,
            "{file} copies rows of the flag table; point to `sample-controller run --help`"
        );
    }
}

/// The matcher itself.
#[test]
fn expected_output_matching() {
    let out = "at/example-at     DONE     result Succeeded exit code 0\nYAY\n";
    assert_eq!(first_missing("...example-at DONE...\nYAY", out), None);
    assert_eq!(
        first_missing("at/example-at DONE ... exit code 0", out),
        None
    );
    assert_eq!(
        first_missing("YAY\n...example-at...", out),
        Some("...example-at...".into())
    );
    assert_eq!(first_missing("example-at", out), Some("example-at".into()));
    assert_eq!(first_missing("...\nYA", out), Some("YA".into()));
    assert_eq!(
        first_missing(r#"{"a":1,...}"#, r#"{"a":1,"m":{},"s":2}"#),
        None
    );
    assert_eq!(first_missing("...DONE", out), Some("...DONE".into()));
    let map = BTreeMap::from([(9443, 21000)]);
    assert_eq!(
        replace_ports(
            "--listen 127.0.0.1:0 x=127.0.0.1:9443 localhost:9443/",
            &map
        ),
        "--listen 127.0.0.1:0 x=127.0.0.1:21000 localhost:21000/"
    );
    assert_eq!(
        fixed_ports("127.0.0.1:0 127.0.0.1:9443 https://localhost:8443/m"),
        [9443, 8443]
    );
}

/// The README stays a front door (at most 400 lines), and keeps one command style: the built
/// `sample-controller`, with `cargo run --` only in its first command.
#[test]
fn the_readme_is_a_front_door_with_one_command_style() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 400,
        "README.md has {lines} lines; move detail to docs/"
    );
    let mut uses = Vec::new();
    for file in FILES {
        let text = std::fs::read_to_string(repo().join(file)).unwrap();
        for fence in fences(&text).iter().filter(|f| is_shell(f)) {
            for line in fence.text.lines() {
                if line.contains("cargo run ") {
                    uses.push(format!("{file}:{}: {line}", fence.line));
                }
            }
        }
    }
    assert_eq!(
        uses.len(),
        1,
        "only the README's first command is written `cargo run -- ...`; the rest run \
         `sample-controller`:\n{}",
        uses.join("\n")
    );
    assert!(uses[0].contains("cargo run -- demo"), "{uses:?}");
}
