//! `sample-controller-codegen [--out DIR]`: writes one CRD per kind into `DIR`
//! (default: `artifacts/crds` of this workspace) and removes `*.yaml` files there that no
//! kind produces any more, so the directory always mirrors the Rust types exactly.
//! `hack/update-codegen.sh` runs it; `hack/verify-codegen.sh` runs it into a temporary
//! directory and diffs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use sample_controller_codegen::{file_names, generate_all};

const USAGE: &str = "usage: sample-controller-codegen [--out DIR]\n\n\
Writes artifacts/crds/<plural>.<group>.yaml for every custom resource kind.\n\
  --out DIR   directory to write into (default: <workspace>/artifacts/crds)\n";

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("sample-controller-codegen: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Vec<String>) -> Result<(), String> {
    let mut out: Option<PathBuf> = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--out" => {
                let dir = args
                    .next()
                    .ok_or_else(|| format!("--out needs a directory\n\n{USAGE}"))?;
                out = Some(PathBuf::from(dir));
            }
            s if s.starts_with("--out=") => out = Some(PathBuf::from(&s["--out=".len()..])),
            "-h" | "--help" => {
                print!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}\n\n{USAGE}")),
        }
    }
    let out = out.unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("artifacts")
            .join("crds")
    });

    write_all(&out)
}

/// Writes every CRD into `out`, removes `*.yaml` files no kind produces, and leaves files
/// whose contents are already right untouched (so their modification time says when they
/// last changed).
fn write_all(out: &Path) -> Result<(), String> {
    let files = generate_all().map_err(|e| e.to_string())?;
    std::fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let wanted = file_names(&files);
    let entries = std::fs::read_dir(out).map_err(|e| format!("reading {}: {e}", out.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("reading {}: {e}", out.display()))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".yaml") && !wanted.contains(name.as_ref()) {
            std::fs::remove_file(entry.path())
                .map_err(|e| format!("removing stale {}: {e}", entry.path().display()))?;
            println!("removed {}", entry.path().display());
        }
    }
    for file in &files {
        let path = out.join(&file.file_name);
        let unchanged = std::fs::read_to_string(&path).is_ok_and(|old| old == file.contents);
        if !unchanged {
            std::fs::write(&path, &file.contents)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn writes_every_crd_and_removes_stale_yaml_only() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("crds");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("widgets.example.com.yaml"), "stale").unwrap();
        std::fs::write(out.join("README"), "kept").unwrap();
        run(args(&["--out", out.to_str().unwrap()])).unwrap();

        let mut names: Vec<String> = std::fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "README",
                "ats.cnat.programming-kubernetes.info.yaml",
                "foos.samplecontroller.k8s.io.yaml",
                "myapps.example.com.yaml",
                "redisclusters.cache.example.com.yaml",
                "tdsets.schedule.rs.yaml",
            ]
        );
        let at =
            std::fs::read_to_string(out.join("ats.cnat.programming-kubernetes.info.yaml")).unwrap();
        assert!(at.starts_with(sample_controller_codegen::HEADER));

        // A hand edit is overwritten by the next run.
        std::fs::write(out.join("myapps.example.com.yaml"), "edited").unwrap();
        run(args(&[&format!("--out={}", out.display())])).unwrap();
        let myapp = std::fs::read_to_string(out.join("myapps.example.com.yaml")).unwrap();
        assert!(myapp.contains("kind: MyApp"), "{myapp}");
    }

    #[test]
    fn bad_arguments_are_errors_with_usage() {
        let err = run(args(&["--out"])).unwrap_err();
        assert!(
            err.contains("--out needs a directory") && err.contains("usage:"),
            "{err}"
        );
        let err = run(args(&["--frobnicate"])).unwrap_err();
        assert!(err.contains("\"--frobnicate\""), "{err}");
    }
}
