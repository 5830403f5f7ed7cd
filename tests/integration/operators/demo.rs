//! `sample-controller demo --operators ...`, run as a user runs it: the operators' stories end
//! and the demo exits 0, having printed what each controller did.

use std::time::Duration;

use tokio::process::Command;

/// The binary under test: this package's, or the one `SAMPLE_CONTROLLER_BIN` names.
use crate::support::bin;

async fn demo(args: &[&str]) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("demo.kubeconfig");
    let out = tokio::time::timeout(
        // A guard against a hung child, not a timing claim: the demo has its own --timeout.
        Duration::from_secs(120),
        Command::new(bin())
            .arg("demo")
            .args(args)
            .args([
                "--timeout=60s",
                "--kubeconfig-out",
                kubeconfig.to_str().unwrap(),
            ])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the demo ends within its bound")
    .expect("the demo starts");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_operators_demo_shows_each_operator_working_and_exits_0() {
    let (code, stdout, stderr) = demo(&["--operators=tdset,rediscluster,myapp,foo"]).await;
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    for line in [
        "installed the CRD tdsets.schedule.rs",
        "deployment/office-hours scaled to 4",
        "DriftCorrected",
        "deployment/office-hours is back at 4",
        "rediscluster/example-rediscluster status.nodes = example-rediscluster-0, example-rediscluster-1, example-rediscluster-2, example-rediscluster-3, example-rediscluster-4",
        "rediscluster/example-rediscluster status.nodes = example-rediscluster-0, example-rediscluster-1\n",
        "CleanedUp",
        "rediscluster/example-rediscluster is gone",
        "myapp/example-myapp: 2 replicas available",
        "foo/example-foo: 1 replica available",
        "Synced",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    assert!(
        !stdout.contains("at/example-at"),
        "At was not selected:\n{stdout}"
    );
}

/// Without `at` nothing of the At story is started or printed: no At CRD is installed, so an
/// At informer would only fail its lists and log warnings about them.
#[tokio::test]
async fn without_at_nothing_of_the_at_story_is_started_or_printed() {
    let (code, stdout, stderr) = demo(&["--operators=tdset"]).await;
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("sample-controller demo: the tdset operator on an embedded API server"),
        "{stdout}"
    );
    assert!(stdout.contains("get tdsets -w"), "{stdout}");
    assert!(
        stdout.contains("deployment/office-hours is back at 4"),
        "{stdout}"
    );
    for absent in ["get ats", "at/", "ats.cnat", "pod creations"] {
        assert!(!stdout.contains(absent), "{absent:?} in:\n{stdout}");
    }
    // Nothing asked the server about Ats: no failed list, no watch, no warning.
    assert!(
        !stderr.contains("cnat.programming-kubernetes.info"),
        "{stderr}"
    );
    assert!(!stderr.contains("WARN"), "{stderr}");
}

#[tokio::test]
async fn an_unknown_operator_is_refused_by_name() {
    let (code, stdout, stderr) = demo(&["--operators=tdset,nope"]).await;
    assert_ne!(code, Some(0), "stdout:\n{stdout}");
    assert!(stderr.contains("\"nope\""), "stderr:\n{stderr}");
}
