//! The Python package's suite: builds the wheel of `python/` (maturin, PyO3), installs it into
//! a virtual environment with `python/requirements-test.txt`, and runs `pytest python/tests`
//! there (the Gymnasium checker, determinism, masks, episode ends, errors, compare parity with
//! this binary, a tiny training run).
//!
//! The venv is `LACHESIS_PY_VENV` (created if missing). The wheel is built in the dev profile
//! (`--locked`) in the workspace's own target directory, so that it reuses the dependencies
//! `cargo test` has just built (burn and the rest: a separate target directory cost a cold build
//! of them). That works because cargo holds the target directory's lock only while it builds,
//! not while test binaries run (checked with cargo 1.95: a `cargo build` started from a running
//! test takes the lock at once); `cargo test` itself never builds the cdylib (`test = false`),
//! so the two builds do not undo each other's pyo3 configuration. Reuse also needs the same
//! features for every dependency, which python/Cargo.toml's alignment list keeps and
//! `the_wheel_unifies_dependency_features_as_the_workspace_does` checks. Within `cargo test
//! --workspace` (CI) the wheel's build then compiles only pyo3, numpy and the package; run
//! alone (`--test python`) cargo unifies features over the root package and builds more.
//!
//! ```text
//! LACHESIS_PY_VENV=/tmp/lachesis-py-venv cargo test --test python
//! ```
//!
//! `.ci/run` sets it. Without it the test is skipped, except where `CI` is set: there it
//! fails, so CI cannot pass without having run the suite.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The venv to use, or `None` where the suite is to be skipped.
fn venv() -> Option<PathBuf> {
    match std::env::var_os("LACHESIS_PY_VENV") {
        Some(dir) => Some(PathBuf::from(dir)),
        None if std::env::var_os("CI").is_some() => {
            panic!("CI is set but LACHESIS_PY_VENV is not: the Python suite must run in CI")
        }
        None => None,
    }
}

/// Runs `cmd` in the repository root; panics with its output when it fails.
fn run(cmd: &mut Command, what: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = cmd
        .current_dir(root)
        .output()
        .unwrap_or_else(|e| panic!("{what}: could not start: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{what}:\n{text}");
    assert!(out.status.success(), "{what} failed ({})", out.status);
}

/// `python -m pip install --quiet` in the venv, to be given what to install.
fn pip_install(python: &Path) -> Command {
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]);
    cmd
}

/// The packages of `cargo tree ARGS` with their features, one `name vX.Y.Z [f,...]` each.
fn tree(args: &[&str]) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "--locked", "--prefix", "none", "--no-dedupe"])
        .args(["--format", "{p} [{f}]"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree starts");
    assert!(
        out.status.success(),
        "cargo tree {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// The wheel's build reuses what `cargo test --workspace` built only where each dependency has
/// the same features in both (cargo unifies features over the packages it is asked to build:
/// the whole workspace there, `lachesis-python` alone here). A dependency that differs is
/// rebuilt, and so is every crate above it: one differing `memchr` or `bytes` rebuilt burn.
/// The alignment list in python/Cargo.toml keeps them equal; this says when it falls behind.
/// Compared exactly on the target side (no build scripts or proc-macros, where a package has
/// one feature set), and on the whole graph as a subset (host packages may have two).
#[test]
fn the_wheel_unifies_dependency_features_as_the_workspace_does() {
    let sides = [
        ("normal,dev,no-proc-macro", "normal,no-proc-macro"),
        ("normal,build,dev", "normal,build"),
    ];
    for (workspace_edges, wheel_edges) in sides {
        let workspace = tree(&["--workspace", "--edges", workspace_edges]);
        let wheel = tree(&["--package", "lachesis-python", "--edges", wheel_edges]);
        let apart: Vec<_> = wheel.difference(&workspace).collect();
        assert!(
            apart.is_empty(),
            "built for the wheel with other features than `cargo test --workspace` builds them \
             with (add them, with the workspace's features, to python/Cargo.toml's alignment \
             list; edges {wheel_edges}):\n{}",
            apart
                .iter()
                .map(|p| format!("  {p}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

#[test]
fn the_python_package_builds_installs_and_passes_pytest() {
    let Some(venv) = venv() else {
        eprintln!(
            "skipped: set LACHESIS_PY_VENV to a virtual environment directory (created if \
             missing) to build the Python package and run pytest python/tests"
        );
        return;
    };
    let python = venv.join("bin").join("python");
    if !python.exists() {
        run(
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
            "python3 -m venv",
        );
    }
    run(
        pip_install(&python).args(["-r", "python/requirements-test.txt"]),
        "pip install -r python/requirements-test.txt",
    );
    // The build backend runs the venv's maturin: its bin/ first on PATH.
    let mut path = std::ffi::OsString::from(venv.join("bin"));
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    run(
        pip_install(&python)
            .args([
                "--no-build-isolation",
                "--force-reinstall",
                "--no-deps",
                "./python",
            ])
            .env("PATH", path)
            .env("MATURIN_PEP517_ARGS", "--profile dev --locked"),
        "pip install ./python",
    );
    run(
        Command::new(&python)
            .args([
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "python/tests",
            ])
            .env("LACHESIS_BIN", env!("CARGO_BIN_EXE_lachesis")),
        "pytest python/tests",
    );
}
