//! `docs/flags.md` is generated from the manager's clap definitions (the one source of the flag
//! table): this test fails when the two differ, and `UPDATE_FLAGS_DOC=1` rewrites the file.

use std::path::Path;
use std::process::Command;

fn rendered() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sample-controller"))
        .args(["run", "--help"])
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let help = String::from_utf8(out.stdout).expect("UTF-8 help");
    format!(
        "# `sample-controller run` flags\n\n\
         Generated from the clap definitions (`ManagerOptions` in\n\
         `controller-runtime/src/manager/options.rs`) by `UPDATE_FLAGS_DOC=1 cargo nextest run\n\
         flags_doc`; `sample-controller run --help` and `controller-manager run --help` print the\n\
         same. Durations use Go's syntax (`300ms`, `1.5h`).\n\n\
         ```text\n{}\n```\n",
        help.trim_end()
    )
}

#[test]
fn docs_flags_md_is_the_run_commands_help() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/flags.md");
    let want = rendered();
    if std::env::var_os("UPDATE_FLAGS_DOC").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/flags.md differs from `sample-controller run --help`; regenerate it with \
         UPDATE_FLAGS_DOC=1 cargo nextest run flags_doc"
    );
}

/// The commands' help is for people at a terminal: no rustdoc link syntax or "this module"
/// (the clap help texts are doc comments, which rustdoc reads too).
#[test]
fn no_help_text_carries_rustdoc_syntax() {
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["apiserver", "--help"],
        &["demo", "--help"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_sample-controller"))
            .args(args)
            .output()
            .expect("the binary runs");
        let help = String::from_utf8_lossy(&out.stdout);
        for bad in ["[`", "`]", "(this module)", "crate::", "super::"] {
            assert!(
                !help.contains(bad),
                "`{}` prints {bad:?}:\n{help}",
                args.join(" ")
            );
        }
    }
}
