//! `sample-controller demo`, the README's first command, run as a user runs it.

use std::time::Duration;

use tokio::process::Command;

/// The binary under test: this package's, or the one `SAMPLE_CONTROLLER_BIN` names.
use crate::support::bin;

#[tokio::test]
async fn the_demo_reaches_every_end_state_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("demo.kubeconfig");
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        Command::new(bin())
            .args([
                "demo",
                "--delay=2s",
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
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("get ats -w"), "{stdout}");
    assert!(
        stdout.contains("at/example-at     DONE     result Succeeded exit code 0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("at/failing-at     DONE     result Failed exit code 3"),
        "{stdout}"
    );
    // Versions: the book's At created in v1alpha1 reads back as v1, with the image /mutate-at
    // defaulted; a v1 At reads back as v1alpha1 with v1's fields kept in the annotation; and
    // the manager's /validate-at refuses a blank command before it is stored.
    assert!(
        stdout.contains("created at/example-at     in v1alpha1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("read back as v1:          spec.run.command \"echo YAY\"  spec.run.image \"busybox:1.36\""),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "read back as v1alpha1:    spec.command \"exit 3\"; kept for v1 in annotation cnat.programming-kubernetes.info/v1-fields: {\"run\":{\"activeDeadlineSeconds\":60"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("the manager's /validate-at webhook refused at/blank-command at admission: 422 (Invalid): admission webhook \"vat.cnat.programming-kubernetes.info\" denied the request"),
        "{stdout}"
    );
    // Every timed line says which story it belongs to, so the interleaved stories can be read
    // apart; each default story has lines of its own.
    for line in stdout.lines().filter(|l| l.starts_with('[')) {
        let story = line
            .split_once("] ")
            .and_then(|(_, rest)| rest.split_once(" | "))
            .map(|(story, _)| story.trim())
            .unwrap_or_else(|| panic!("a line without its story: {line:?}"));
        assert!(
            ["demo", "at", "tdset", "rediscluster", "cluster"].contains(&story),
            "{line}"
        );
    }
    for story in ["at", "tdset", "rediscluster"] {
        let tag = format!("] {story:<12} | ");
        assert!(
            stdout.contains(&tag),
            "no line of the {story} story:\n{stdout}"
        );
    }
    // Without --serve it says how to keep the server running.
    assert!(stdout.contains("add --serve"), "{stdout}");
    // The pods really ran: the book's `kubectl logs example-at-pod` prints YAY.
    assert!(
        stdout.contains("$ kubectl logs example-at-pod\nYAY\n"),
        "{stdout}"
    );
    // "Exactly once, at its schedule" is measured, not claimed: one pod creation per runnable
    // At in the server's request log, each pod created at or after the At's schedule.
    assert!(
        stdout.contains(
            "the API server saw 2 pod creations: one per runnable At, none before its schedule:"
        ),
        "{stdout}"
    );
    for at in ["example-at", "failing-at"] {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("at/{at} ")))
            .unwrap_or_else(|| panic!("no measured run of {at} in:\n{stdout}"));
        assert!(
            line.contains(&format!("pod/{at}-pod created ")) && line.contains("after its schedule"),
            "{line}"
        );
    }
    // The kubeconfig it wrote is private (it holds a token) and usable.
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(text.contains("token"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&kubeconfig).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "kubeconfig mode {mode:o}");
    }
}

/// `demo --trace example-at`: the demo's story with the example's every hop inline, from its
/// watch event to the sync that writes DONE; and the manager's page and stream announced.
#[tokio::test]
async fn the_demo_traces_one_at_inline() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("demo.kubeconfig");
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        Command::new(bin())
            .args([
                "demo",
                "--operators=at",
                "--delay=2s",
                "--timeout=60s",
                "--trace=example-at",
                "--kubeconfig-out",
                kubeconfig.to_str().unwrap(),
            ])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the demo ends within its bound")
    .expect("the demo starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let trace: Vec<&str> = stdout.lines().filter(|l| l.contains("] trace ")).collect();
    let mut from = 0;
    for want in [
        "following default/example-at",
        "watch    ADDED At default/example-at",
        "worker   get: a worker took it",
        "note     plan: PENDING with no pod → write PENDING",
        "queue    came due: add_after(",
        "write    create Pod default/example-at-pod",
        "mapped to its owner → add(default/example-at)",
        "note     plan: RUNNING with pod Succeeded → write DONE",
    ] {
        let at = trace[from..]
            .iter()
            .position(|l| l.contains(want))
            .unwrap_or_else(|| panic!("no trace line {want:?} after line {from}:\n{stdout}"));
        from += at + 1;
    }
    assert!(
        trace.iter().all(|l| !l.contains("default/failing-at")),
        "only the traced At: {stdout}"
    );
    assert!(
        stdout.contains("/machinery?key=default/example-at"),
        "the page is announced: {stdout}"
    );
}
