//! The Python package's suite: builds the wheel of `python/` (maturin, PyO3), installs it into
//! a virtual environment with `python/requirements-test.txt`, and runs `pytest python/tests`
//! there (the Gymnasium checker, determinism, masks, episode ends, errors, compare parity with
//! this binary, a tiny training run).
//!
//! The venv is `LACHESIS_PY_VENV` (created if missing); the wheel is built in the dev profile
//! into `target/python-build` (its own target directory: this test runs while cargo holds
//! this one):
//!
//! ```text
//! LACHESIS_PY_VENV=/tmp/lachesis-py-venv cargo test --test python
//! ```
//!
//! `.ci/run` sets it. Without it the test is skipped, except where `CI` is set: there it
//! fails, so CI cannot pass without having run the suite.

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
    let pip = |args: &[&str], what: &str| {
        run(
            Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                ])
                .args(args),
            what,
        )
    };
    pip(
        &["-r", "python/requirements-test.txt"],
        "pip install -r python/requirements-test.txt",
    );
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/python-build");
    // The build backend runs the venv's maturin: its bin/ first on PATH.
    let mut path = std::ffi::OsString::from(venv.join("bin"));
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    run(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-build-isolation",
                "--force-reinstall",
                "--no-deps",
                "./python",
            ])
            .env("CARGO_TARGET_DIR", &target)
            .env("PATH", path)
            .env("MATURIN_PEP517_ARGS", "--profile dev")
            .env(
                "CARGO_BUILD_JOBS",
                std::env::var("CARGO_BUILD_JOBS").unwrap_or("2".into()),
            ),
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
