//! A user's own clone: the repository's committed HEAD, checked out where nothing lies beside
//! it (no `../shared`, no `$LACHESIS_SHARED_*`), passes the tests that once read the shared
//! data (`tests/train.rs`: the held-out card scenario read Sia's profiles from
//! `../shared/throughputs`). What is not committed is not in the clone, so a file the tests
//! need but nobody added fails here too.
//!
//! Cheap enough for CI (measured: 47 s to 1m28s of compiling and 25 s of tests on 2 shared
//! cores): the clone is built in its own target directory (so its binary never replaces the
//! one the other test binaries of this run use), seeded with hard links to this build's
//! dependencies (`deps`, `build`, `.fingerprint` of the same profile, the workspace's own
//! packages left out). Cargo's fingerprints of registry crates do not depend on where the
//! workspace is, so only the workspace's own crates are compiled again; `--workspace` keeps
//! the dependencies' features those of `cargo test --workspace`. Both live at fixed paths
//! under this target directory (`clone/lachesis`, `clone/target`), so a second run recompiles
//! only what changed.
//!
//! Runs where `CI` or `LACHESIS_CLONE_TEST` is set; elsewhere it says it was skipped.
//!
//! ```sh
//! LACHESIS_CLONE_TEST=1 cargo test --test clone
//! ```

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The test targets run in the clone.
const TESTS: &[&str] = &["train"];

/// The environment variables that point the tests at data outside the repository.
const OUTSIDE_DATA: &[&str] = &["LACHESIS_SHARED_TRACES", "LACHESIS_SHARED_THROUGHPUTS"];

fn wanted() -> bool {
    std::env::var_os("CI").is_some() || std::env::var_os("LACHESIS_CLONE_TEST").is_some()
}

/// Runs `cmd`; panics with its output unless it succeeds.
fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: could not start: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{text}",
        out.status
    );
    text
}

/// The profile directory this test binary was built in (`target/debug`): the binary is
/// `target/debug/deps/clone-HASH`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary has a path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test binary lies in <target>/<profile>/deps")
        .to_path_buf()
}

/// Whether a `deps`, `build` or `.fingerprint` entry belongs to one of the workspace's own
/// packages (`lachesis`, `lachesis-env`, ...; `liblachesis_env-HASH.rlib`). Those are built
/// again in the clone, and must not be linked: their artifacts carry the same hashes there, so
/// a build script writing into a linked `OUT_DIR` file would write into this build's copy too.
fn workspace_own(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    name.starts_with("lachesis") || name.starts_with("liblachesis")
}

/// Hard-links every file under `from` into `to` that `to` lacks (copies where a link cannot
/// be made), keeping the tree, except the workspace's own entries. Existing files are left
/// alone: they are the clone's own.
fn seed(from: &Path, to: &Path) -> std::io::Result<u64> {
    let mut linked = 0;
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        if workspace_own(&entry.file_name()) {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            linked += seed(&src, &dst)?;
        } else if kind.is_file() && !dst.exists() {
            if fs::hard_link(&src, &dst).is_err() {
                fs::copy(&src, &dst)?;
            }
            linked += 1;
        }
    }
    Ok(linked)
}

#[test]
fn a_clone_with_nothing_beside_it_passes_the_tests_that_read_shared_data() {
    if !wanted() {
        eprintln!(
            "skipped: set LACHESIS_CLONE_TEST=1 (CI sets CI) to clone the repository's HEAD \
             with nothing beside it and run tests/{}.rs there",
            TESTS.join(".rs, tests/")
        );
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let head = run(
        Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(root),
        "git rev-parse HEAD (the repository must be a git checkout)",
    );
    let head = head.trim();
    let profile = profile_dir();
    let base = profile
        .parent()
        .expect("the profile directory lies in the target directory")
        .join("clone");
    let clone = base.join("lachesis");
    let target = base.join("target");
    if clone.exists() {
        fs::remove_dir_all(&clone).expect("the old clone can be removed");
    }
    fs::create_dir_all(&clone).expect("the target directory is writable");
    // A clone of HEAD (this checkout's: a branch, or a detached commit), one commit deep.
    let git = |args: &[&str], what: &str| {
        run(
            Command::new("git").args(args).current_dir(&clone),
            &format!("git {what}"),
        )
    };
    git(&["init", "--quiet"], "init");
    let from = root.display().to_string();
    git(
        &["fetch", "--quiet", "--depth", "1", &from, "HEAD"],
        "fetch HEAD",
    );
    assert_eq!(git(&["rev-parse", "FETCH_HEAD"], "rev-parse").trim(), head);
    git(
        &["checkout", "--quiet", "--detach", "FETCH_HEAD"],
        "checkout",
    );
    for beside in ["shared", "../shared"] {
        assert!(
            !base.join(beside).exists(),
            "{} exists: the clone must have nothing beside it",
            base.join(beside).display()
        );
    }
    let profile_name = profile.file_name().expect("a profile name");
    let seeded: u64 = ["deps", "build", ".fingerprint"]
        .iter()
        .map(|d| {
            let from = profile.join(d);
            if from.is_dir() {
                seed(&from, &target.join(profile_name).join(d)).expect("the seed links")
            } else {
                0
            }
        })
        .sum();
    println!("seeded {seeded} files of {}", profile.display());

    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["test", "--workspace", "--locked", "--offline"])
        .args(TESTS.iter().flat_map(|t| ["--test", t]))
        .current_dir(&clone)
        .env("CARGO_TARGET_DIR", &target);
    for var in OUTSIDE_DATA {
        cargo.env_remove(var);
    }
    let text = run(&mut cargo, "cargo test in the clone");
    println!("{text}");
    // Every test ran and passed; none was skipped for want of outside data.
    assert!(text.contains("test result: ok."), "{text}");
    assert!(!text.contains("skipped:"), "{text}");
    assert!(!text.contains(" 0 passed"), "{text}");
}
