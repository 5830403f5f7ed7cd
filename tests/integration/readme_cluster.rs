//! The README's "Running against minikube or a cluster" block, run as written.
//!
//! The block is read from README.md (the first `sh` block of that section) and run by bash
//! against the embedded API server standing in for minikube: `~/.kube/config` is the server's
//! kubeconfig (HOME is a temporary directory), the real `kubectl` is on the PATH, and the
//! working directory holds the repository's `artifacts/` (so `manager.log` lands in the
//! temporary directory, not in the repository). Two commands are stood in for, nothing else:
//!
//! * `cargo build --release` / `cargo run --release -- ARGS` run the `sample-controller` this
//!   test was built with (a nested cargo build would take minutes);
//! * `kubectl get ats -w` runs the real watch, and ends it once the At is `DONE` (a reader
//!   presses Ctrl-C).
//!
//! What the block promises is checked: the watch shows PENDING, RUNNING and DONE in that order,
//! and `kill %1` stops the manager, which exits 0.

use crate::cluster_support::{kubectl_bin, repo};

use std::process::Stdio;
use std::time::Duration;

use embedded_apiserver::ApiServer;

/// The first ```sh block after `heading` in README.md.
fn readme_block(heading: &str) -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let section = readme
        .split_once(heading)
        .unwrap_or_else(|| panic!("README.md has no {heading:?}"))
        .1;
    let block = section
        .split_once("```sh\n")
        .expect("a sh block in the section")
        .1;
    block
        .split_once("\n```")
        .expect("the block ends")
        .0
        .to_owned()
}

/// Stands in for cargo (the binary this test was built with) and ends `kubectl get ats -w`
/// once the At is DONE; everything else is the real command.
const PRELUDE: &str = r#"
# Whatever happens, no background job (the manager) outlives the block.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
cargo() {
  case "$1" in
    build) return 0 ;;
    run) while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done; shift; exec "$SAMPLE_CONTROLLER" "$@" ;;
    *) echo "the README test stands in for cargo build and cargo run only: $*" >&2; return 2 ;;
  esac
}
kubectl() {
  if [ "$*" = "get ats -w" ]; then
    command kubectl get ats -w > watch.out 2>&1 &
    local watch=$!
    for _ in $(seq 1 1200); do
      grep -q DONE watch.out && break
      sleep 0.1
    done
    kill "$watch"; wait "$watch" 2>/dev/null || true
    cat watch.out
  else
    command kubectl "$@"
  fi
}
"#;

#[tokio::test]
async fn the_readme_cluster_block_runs_as_written() {
    if kubectl_bin(None).is_none() {
        eprintln!("SKIPPED: the README's cluster block: kubectl not found on PATH");
        return;
    }
    sample_client_go::install_crypto_provider();
    let server = ApiServer::builder()
        .simulate(true)
        .start()
        .await
        .expect("server starts");
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".kube")).unwrap();
    server
        .write_kubeconfig(home.path().join(".kube/config"))
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(repo().join("artifacts"), work.path().join("artifacts")).unwrap();

    let block = readme_block("## Running against minikube or a cluster");
    let script = format!(
        "set -e\n{PRELUDE}\n{block}\nwait %1 && echo 'manager exited 0' || echo \"manager exited $?\"\n"
    );
    let child = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(work.path())
        .env("HOME", home.path())
        .env_remove("KUBECONFIG")
        .env("SAMPLE_CONTROLLER", env!("CARGO_BIN_EXE_sample-controller"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a timeout stops the manager it started too.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("bash runs");
    let group = child.id().map(|pid| format!("-{pid}"));
    let out = match tokio::time::timeout(Duration::from_secs(240), child.wait_with_output()).await {
        Ok(out) => out.expect("bash's output"),
        Err(_) => {
            if let Some(group) = group {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", "--", &group])
                    .status();
            }
            panic!("the README's cluster block did not finish within 4 minutes");
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let log = std::fs::read_to_string(work.path().join("manager.log")).unwrap_or_default();
    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}\nmanager.log:\n{log}");
    assert!(out.status.success(), "{context}");
    assert!(stdout.contains("created"), "the CRDs and the At: {context}");

    // `kubectl get ats -w`: PENDING, then RUNNING, then DONE.
    let phases: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("example-at "))
        .filter_map(|l| {
            ["PENDING", "RUNNING", "DONE"]
                .into_iter()
                .find(|p| l.split_whitespace().any(|c| c == *p))
        })
        .fold(Vec::new(), |mut seen, p| {
            if seen.last() != Some(&p) {
                seen.push(p);
            }
            seen
        });
    assert_eq!(phases, ["PENDING", "RUNNING", "DONE"], "{context}");
    assert!(stdout.contains("manager exited 0"), "{context}");
    server.shutdown().await;
}
