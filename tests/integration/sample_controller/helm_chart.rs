//! The Helm chart (`artifacts/charts/sample-controller/`) with real Helm: this runs the pytest
//! suite of `tests/helm/` with this build's `sample-controller` binary. The suite drives Helm v4's
//! own Go library (the PyPI package helm-sdkpy, pinned in `tests/helm/requirements.txt`) against
//! the embedded API server with RBAC enforced: lint, the rendered objects against
//! `kubectl kustomize artifacts/deploy/` (and the webhook and sharded overlays), install, the
//! manager under the chart's ServiceAccount, upgrade, rollback and uninstall.
//!
//! Python packages are not Rust dependencies: `.ci/run` installs them with pip before the tests
//! run. Where python3, pytest or the suite's packages are missing the test says which and skips
//! (pytest's exit code 5, "no tests collected", is what a module skipped for a missing package
//! gives).

use std::process::Command;

/// How to install what the suite needs.
const INSTALL: &str =
    "python3 -m pip install --ignore-requires-python -r tests/helm/requirements.txt";

#[test]
fn helm_chart_lint_render_install_upgrade_rollback_uninstall() {
    let repo = env!("CARGO_MANIFEST_DIR");
    match Command::new("python3")
        .args(["-c", "import pytest"])
        .output()
    {
        Err(e) => {
            eprintln!("SKIPPED: tests/helm needs python3 ({e}), then: {INSTALL}");
            return;
        }
        Ok(probe) if !probe.status.success() => {
            eprintln!("SKIPPED: tests/helm needs the Python package pytest: {INSTALL}");
            return;
        }
        Ok(_) => {}
    }
    let out = Command::new("python3")
        .args([
            "-m",
            "pytest",
            "-rs",
            "-p",
            "no:cacheprovider",
            "tests/helm",
        ])
        .current_dir(repo)
        .env(
            "SAMPLE_CONTROLLER_BIN",
            env!("CARGO_BIN_EXE_sample-controller"),
        )
        .output()
        .expect("python3 ran a moment ago");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => println!("{stdout}"),
        // Every test skipped at collection: pytest's summary names the missing package.
        Some(5) => eprintln!("SKIPPED: tests/helm collected no tests:\n{stdout}{stderr}"),
        code => panic!("pytest tests/helm failed (exit code {code:?}):\n{stdout}\n{stderr}"),
    }
}
