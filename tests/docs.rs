//! The commands the README and the guides show. Every `lachesis ...` and `cargo run --release
//! -- ...` line in their shell code blocks must parse: each is given to the real binary with
//! `--help` appended (clap reads the arguments left to right, so an unknown subcommand, an
//! unknown flag or a value its parser refuses fails before `--help` is reached). And the README's
//! tour and the guides' examples run as printed, on the bundled data, in a directory that looks
//! like a fresh clone: each must succeed, and the lines a document shows for it must be among
//! those it prints (`...` standing for lines left out; wall times and thread counts aside).
//!
//! ```sh
//! cargo test --test docs
//! ```

mod common;

use common::lachesis;
use std::fs;
use std::path::{Path, PathBuf};

/// The README and every guide (`docs/*.md`; the dated logs in `docs/perf/` are records, not
/// instructions).
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs = vec![root.join("README.md")];
    let mut guides: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("docs/ is readable")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    guides.sort();
    docs.extend(guides);
    docs
}

/// One command found in a document: where, the arguments after the program, and what the
/// line pipes into it (`echo 'TEXT' | lachesis ...`).
#[derive(Debug)]
struct Shown {
    at: String,
    args: Vec<String>,
    stdin: Option<String>,
}

/// A shell block of a document: its commands, and the lines of the untagged block right after
/// it (what they print), if one follows.
#[derive(Debug)]
struct Block {
    commands: Vec<Shown>,
    printed: Option<Vec<String>>,
}

/// Every `lachesis` / `cargo run ... --` command in the shell code blocks of `text`.
fn commands(name: &str, text: &str) -> Vec<Shown> {
    blocks(name, text)
        .into_iter()
        .flat_map(|b| b.commands)
        .collect()
}

/// The code blocks of `text` holding commands: every line of a ` ```sh `, `bash` or `shell`
/// block, and the `$ ` lines of a `console` or untagged one (whose other lines are output or
/// diagrams); continuation lines joined, comments, shell operators and redirections cut off.
/// An untagged block after a shell block (blank lines between) is what its commands print.
fn blocks(name: &str, text: &str) -> Vec<Block> {
    let mut found: Vec<Block> = Vec::new();
    let mut in_block = false;
    let mut shell = false;
    let mut prompted = false;
    let mut pending: Option<(usize, String)> = None;
    // Whether the last thing seen was a shell block (only blank lines since).
    let mut after_shell = false;
    let mut printed: Option<Vec<String>> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(lang) = trimmed.strip_prefix("```") {
            in_block = !in_block;
            let lang = lang.trim();
            if in_block {
                shell = matches!(lang, "sh" | "bash" | "shell");
                prompted = matches!(lang, "" | "console");
                if shell {
                    found.push(Block {
                        commands: Vec::new(),
                        printed: None,
                    });
                }
                printed = (after_shell && lang.is_empty() && !prompts(text, i)).then(Vec::new);
            } else {
                if let (Some(lines), Some(block)) = (printed.take(), found.last_mut()) {
                    block.printed = Some(lines);
                }
                after_shell = shell;
                shell = false;
                prompted = false;
            }
            continue;
        }
        if !in_block {
            after_shell &= trimmed.is_empty();
            continue;
        }
        if let Some(lines) = printed.as_mut() {
            lines.push(line.trim_end().to_string());
            continue;
        }
        let trimmed = match (shell, prompted) {
            (true, _) => trimmed,
            (false, true) if pending.is_some() => trimmed,
            (false, true) => match trimmed.strip_prefix("$ ") {
                Some(command) => command,
                None => continue,
            },
            (false, false) => continue,
        };
        let (start, mut joined) = pending.take().unwrap_or((i + 1, String::new()));
        joined.push_str(trimmed);
        if let Some(head) = joined.strip_suffix('\\') {
            pending = Some((start, format!("{head} ")));
            continue;
        }
        if joined.ends_with('|') {
            pending = Some((start, format!("{joined} ")));
            continue;
        }
        let mut stdin = None;
        for segment in segments(&words(&joined)) {
            if let Some(args) = lachesis_args(&segment) {
                if !shell {
                    found.push(Block {
                        commands: Vec::new(),
                        printed: None,
                    });
                }
                found
                    .last_mut()
                    .expect("a block for the command")
                    .commands
                    .push(Shown {
                        at: format!("{name}:{start}"),
                        args,
                        stdin: stdin.take(),
                    });
            } else if segment.first().is_some_and(|w| w == "echo") {
                stdin = Some(format!("{}\n", segment[1..].join(" ")));
            }
        }
    }
    found.retain(|b| !b.commands.is_empty());
    found
}

/// Whether the code block opening at line `i` (0-based) of `text` holds `$ ` prompts: such a
/// block shows commands, not what the block before it prints.
fn prompts(text: &str, i: usize) -> bool {
    text.lines()
        .skip(i + 1)
        .take_while(|l| !l.trim_start().starts_with("```"))
        .any(|l| l.trim_start().starts_with("$ "))
}

/// Shell words: whitespace-separated, single and double quotes grouping (their contents kept
/// as written), a word starting with `#` ending the line.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            None if c == '#' && !in_word => break,
            None => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(word);
    }
    out
}

/// The simple commands of a line: split at `&&`, `||`, `;` and `|`, each cut at its first
/// redirection.
fn segments(words: &[String]) -> Vec<Vec<String>> {
    let mut out = vec![Vec::new()];
    let mut redirected = false;
    for w in words {
        if matches!(w.as_str(), "&&" | "||" | ";" | "|") {
            out.push(Vec::new());
            redirected = false;
        } else if w.starts_with('>') || w.starts_with('<') || w.starts_with("2>") {
            redirected = true;
        } else if !redirected {
            out.last_mut()
                .expect("one segment at least")
                .push(w.clone());
        }
    }
    out
}

/// The arguments of a `lachesis` command (`lachesis` or a path ending in `/lachesis`, after
/// optional `VAR=value` assignments) or of `cargo run ... -- ARGS`.
fn lachesis_args(segment: &[String]) -> Option<Vec<String>> {
    let mut words = segment
        .iter()
        .skip_while(|w| w.contains('=') && !w.starts_with('-'));
    let first = words.next()?;
    let rest: Vec<String> = words.cloned().collect();
    if first == "lachesis" || first.ends_with("/lachesis") {
        return Some(rest);
    }
    if first == "cargo" && rest.first().is_some_and(|w| w == "run") {
        let dashes = rest.iter().position(|w| w == "--")?;
        return Some(rest[dashes + 1..].to_vec());
    }
    None
}

/// Why `args` does not parse, or `None` when the binary accepts them.
fn parse_error(args: &[String]) -> Option<String> {
    let mut with_help: Vec<&str> = args.iter().map(String::as_str).collect();
    with_help.push("--help");
    let out = lachesis(&with_help);
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).trim().to_string())
}

#[test]
fn every_command_in_the_readme_and_the_guides_parses() {
    let mut shown = Vec::new();
    for path in documents() {
        let text = fs::read_to_string(&path).expect("a readable document");
        let name = path
            .strip_prefix(env!("CARGO_MANIFEST_DIR"))
            .unwrap_or(&path)
            .display()
            .to_string();
        shown.extend(commands(&name, &text));
    }
    // The README's set-up command and the guides' main commands are among them.
    assert!(
        shown
            .iter()
            .any(|c| c.at.starts_with("README.md") && c.args == ["compare"]),
        "the README shows no `cargo run --release -- compare`: {shown:#?}"
    );
    assert!(shown.len() >= 20, "too few commands found: {shown:#?}");
    let failures: Vec<String> = shown
        .iter()
        .filter_map(|c| {
            parse_error(&c.args)
                .map(|e| format!("{}: lachesis {}\n    {e}", c.at, c.args.join(" ")))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} documented commands do not parse:\n{}",
        failures.len(),
        shown.len(),
        failures.join("\n")
    );
}

#[test]
fn a_documented_flag_that_does_not_exist_is_caught() {
    let doc = "Text.\n\n```sh\ncargo run --release -- compare --no-such-flag 3   # comment\n\
               lachesis simulate --trace t.csv \\\n    --clustr 4x8:V100 > out.txt\n\
               lachesis no-such-command\nlachesis policies && lachesis compare --windows x\n```\n\n\
               ```\nlachesis serve: gRPC on 127.0.0.1:50051 (output, not a command)\n\
               $ lachesis probe --jsn\n```\n";
    let shown = commands("doc.md", doc);
    let args: Vec<Vec<String>> = shown.iter().map(|c| c.args.clone()).collect();
    let expected: Vec<Vec<String>> = [
        &["compare", "--no-such-flag", "3"][..],
        &["simulate", "--trace", "t.csv", "--clustr", "4x8:V100"],
        &["no-such-command"],
        &["policies"],
        &["compare", "--windows", "x"],
        &["probe", "--jsn"],
    ]
    .iter()
    .map(|a| a.iter().map(|w| w.to_string()).collect())
    .collect();
    assert_eq!(args, expected);
    assert_eq!(shown[1].at, "doc.md:5");
    for (c, ok) in shown.iter().zip([false, false, false, true, false, false]) {
        assert_eq!(
            parse_error(&c.args).is_none(),
            ok,
            "{}: lachesis {}",
            c.at,
            c.args.join(" ")
        );
    }
}

/// The documents whose commands run on what the repository ships (the others drive installed
/// services, hardware, benchmarks or other programs: deploy, kubernetes, slurm, probe,
/// simulator's benches, python's pip).
const RUN: &[&str] = &[
    "README.md",
    "docs/baselines.md",
    "docs/dashboard.md",
    "docs/gavel.md",
    "docs/heterogeneity.md",
    "docs/quotas.md",
    "docs/serve.md",
    "docs/sweeps.md",
    "docs/training.md",
];

/// Commands of those documents that are not run: (document, the command's first words, why).
/// Each must still be there.
const NOT_RUN: &[(&str, &str, &str)] = &[
    (
        "docs/baselines.md",
        "compare --trace ../shared/",
        "the full ITP trace, outside the repository",
    ),
    ("docs/baselines.md", "bench fgd", "a benchmark"),
    (
        "docs/training.md",
        "train --config models/default/train.toml",
        "the shipped model's recipe: the full traces, minutes",
    ),
    (
        "docs/training.md",
        "train --from models/default --trace my-cluster.csv",
        "the user's own trace (tests/train.rs fine-tunes on the bundled excerpt)",
    ),
    (
        "docs/serve.md",
        "replay /var/lib/",
        "a deployed service's decision log",
    ),
    (
        "docs/gavel.md",
        "compare --trace ../shared/",
        "the full ITP trace, outside the repository",
    ),
    (
        "docs/gavel.md",
        "simulate --generate gavel:4.0:7000:1",
        "7,000 jobs under Gavel's rounds, three times: half a minute each in a release \
         build, minutes with space sharing (docs/perf/gavel.md has the figures)",
    ),
    (
        "docs/sweeps.md",
        "compare --trace traces/itp/cluster10.csv --windows 24 --slurm",
        "a Slurm cluster (tests/slurm.rs runs an array on a test cluster)",
    ),
];

/// The reason `args` of `doc` is not run, if it is not.
fn not_run(doc: &str, args: &[String]) -> Option<&'static str> {
    let line = args.join(" ");
    NOT_RUN
        .iter()
        .find(|(d, start, _)| *d == doc && line.starts_with(start))
        .map(|(_, _, why)| *why)
}

/// A directory that looks like a fresh clone to the commands run in it: the repository's
/// files linked in (`models/`'s entries one by one, so that a new model lands here), no
/// `out/`, no `target/`.
fn sandbox(doc: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!(
        "lachesis-docs-{}-{}",
        std::process::id(),
        doc.replace(['/', '.'], "-")
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("models")).expect("a scratch directory");
    let link = |from: &Path, to: &Path| {
        std::os::unix::fs::symlink(from, to).expect("a link in the scratch directory")
    };
    for entry in fs::read_dir(root).expect("the workspace is readable") {
        let path = entry.expect("a workspace entry").path();
        let name = path.file_name().expect("an entry has a name");
        if !matches!(name.to_str(), Some("target" | "out" | "models" | ".git")) {
            link(&path, &dir.join(name));
        }
    }
    for entry in fs::read_dir(root.join("models")).expect("models/ is readable") {
        let path = entry.expect("a models/ entry").path();
        link(
            &path,
            &dir.join("models").join(path.file_name().expect("a name")),
        );
    }
    dir
}

/// Runs a document's commands in order in one sandbox, as a user would in one clone: `serve`
/// stays up (on free ports rather than the fixed ones, which other tests may hold) for the
/// `decide` commands after it.
struct Runner {
    dir: PathBuf,
    service: Option<(common::server::Server, String, String)>,
    /// What each command run so far printed: a command shown twice (the README's set-up
    /// `compare` is also its tour's second step) runs once.
    printed: std::collections::HashMap<Vec<String>, String>,
}

impl Runner {
    fn new(doc: &str) -> Runner {
        Runner {
            dir: sandbox(doc),
            service: None,
            printed: Default::default(),
        }
    }

    /// The documented addresses replaced by the ones the service listens on.
    fn local(&self, text: &str) -> String {
        match &self.service {
            Some((_, grpc, http)) => text
                .replace("127.0.0.1:50051", grpc)
                .replace("127.0.0.1:9090", http),
            None => text.to_string(),
        }
    }

    /// What `lachesis ARGS` prints on stdout, or why it failed.
    fn run(&mut self, shown: &Shown) -> Result<String, String> {
        use std::io::{BufRead, Write};
        use std::process::{Command, Stdio};
        let mut args: Vec<String> = shown.args.iter().map(|a| self.local(a)).collect();
        let mut command = Command::new(env!("CARGO_BIN_EXE_lachesis"));
        command.current_dir(&self.dir);
        if args.first().is_some_and(|a| a == "serve") {
            args.extend(["--grpc", "127.0.0.1:0", "--http", "127.0.0.1:0"].map(String::from));
            let mut child = command
                .args(&args)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| e.to_string())?;
            let mut line = String::new();
            std::io::BufReader::new(child.stdout.take().expect("piped stdout"))
                .read_line(&mut line)
                .map_err(|e| e.to_string())?;
            let server = common::server::Server(child);
            if line.is_empty() {
                return Err("the service printed nothing (did it start?)".into());
            }
            let (grpc, http) = common::server::listen_addrs(&line);
            self.service = Some((server, grpc, http.unwrap_or_default()));
            return Ok(line);
        }
        if args.first().is_some_and(|a| a == "decide") && !args.iter().any(|a| a == "--server") {
            let (_, grpc, _) = self
                .service
                .as_ref()
                .ok_or("no `serve` before it in the document")?;
            args.extend(["--server".to_string(), grpc.clone()]);
        }
        if let Some(out) = self.printed.get(&args).filter(|_| shown.stdin.is_none()) {
            return Ok(out.clone());
        }
        let mut child = command
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        if let Some(text) = &shown.stdin {
            stdin
                .write_all(text.as_bytes())
                .map_err(|e| e.to_string())?;
        }
        drop(stdin);
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        self.printed.insert(args, stdout.clone());
        Ok(stdout)
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.service = None;
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// `line` with what differs between runs and machines blanked: wall times (`in 0.6 s`) and
/// thread counts (`on 2 threads`).
fn steady(line: &str) -> String {
    let words: Vec<&str> = line.split(' ').collect();
    let blank = |i: usize| {
        let number = words[i].parse::<f64>().is_ok();
        let before = i.checked_sub(1).map_or("", |j| words[j]);
        let after = words
            .get(i + 1)
            .map_or("", |w| w.trim_end_matches([';', ',']));
        number && ((before == "in" && after == "s") || (before == "on" && after == "threads"))
    };
    (0..words.len())
        .map(|i| if blank(i) { "_" } else { words[i] })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why `printed` (a document's lines, `...` standing for any lines) is not what `actual`
/// shows: each run of lines between `...` must appear in `actual`, consecutively and in order
/// (wall times and thread counts aside).
fn mismatch(printed: &[String], actual: &str) -> Option<String> {
    let actual: Vec<String> = actual.lines().map(|l| steady(l.trim_end())).collect();
    let mut from = 0;
    for run in printed.split(|l| l.trim() == "...") {
        let run: Vec<String> = run.iter().map(|l| steady(l)).collect();
        if run.is_empty() {
            continue;
        }
        let at = (from..=actual.len().saturating_sub(run.len()))
            .find(|&i| actual.get(i..i + run.len()) == Some(&run[..]));
        match at {
            Some(i) => from = i + run.len(),
            None => {
                let first = (from..actual.len()).find(|&i| actual[i] == run[0]);
                let detail = match first {
                    None => format!("no line `{}`", run[0]),
                    Some(i) => {
                        let k = (0..run.len())
                            .find(|&k| actual.get(i + k) != Some(&run[k]))
                            .expect("the run differs somewhere");
                        format!(
                            "shown `{}`, printed `{}`",
                            run[k],
                            actual.get(i + k).map_or("(end)", String::as_str)
                        )
                    }
                };
                return Some(format!("{detail}\n--- it printed:\n{}", actual.join("\n")));
            }
        }
    }
    None
}

/// The README's tour and the guides' examples, run as printed on the bundled data (the
/// binary this test built stands for `lachesis` and `cargo run --release --`): each command
/// must succeed, and the lines a document shows for it must be among those it prints.
#[test]
fn documented_commands_run_and_print_what_the_documents_show() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut failures = Vec::new();
    let mut ran = 0;
    let mut checked = 0;
    let mut skipped = Vec::new();
    for doc in RUN {
        let text = fs::read_to_string(root.join(doc)).expect("a readable document");
        let mut runner = Runner::new(doc);
        for block in blocks(doc, &text) {
            let last = block.commands.len() - 1;
            for (i, shown) in block.commands.iter().enumerate() {
                if let Some(why) = not_run(doc, &shown.args) {
                    skipped.push((doc, shown.args.join(" "), why));
                    continue;
                }
                ran += 1;
                let line = format!("{}: lachesis {}", shown.at, shown.args.join(" "));
                let started = std::time::Instant::now();
                let result = runner.run(shown);
                eprintln!("{line}: {:.1} s", started.elapsed().as_secs_f64());
                match (result, &block.printed) {
                    (Err(e), _) => failures.push(format!("{line}\n    failed: {e}")),
                    (Ok(out), Some(printed)) if i == last => {
                        checked += 1;
                        let printed: Vec<String> =
                            printed.iter().map(|l| runner.local(l)).collect();
                        if let Some(why) = mismatch(&printed, &out) {
                            failures.push(format!("{line}\n    {why}"));
                        }
                    }
                    (Ok(_), _) => {}
                }
            }
        }
    }
    for (doc, start, _) in NOT_RUN {
        assert!(
            skipped
                .iter()
                .any(|(d, args, _)| **d == *doc && args.starts_with(start)),
            "{doc} no longer shows `lachesis {start}`: drop it from NOT_RUN"
        );
    }
    assert!(
        ran >= 12 && checked >= 5,
        "too few commands run ({ran}) or outputs checked ({checked})"
    );
    assert!(
        failures.is_empty(),
        "{} of {ran} documented commands do not do as shown:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn a_stale_output_line_is_caught() {
    let doc =
        "```sh\nlachesis compare\n```\n\n```\nfirst\n...\nruns in 0.6 s on 2 threads\nlast\n```\n";
    let found = blocks("doc.md", doc);
    let printed = found[0].printed.clone().expect("the output block");
    assert_eq!(
        printed,
        ["first", "...", "runs in 0.6 s on 2 threads", "last"]
    );
    let fine = "first\nmiddle\nruns in 9.1 s on 16 threads\nlast\n";
    assert_eq!(mismatch(&printed, fine), None);
    for stale in [
        "first\nruns in 9.1 s on 16 threads\nchanged\n",
        "middle\nruns in 9.1 s on 16 threads\nlast\n",
        "first\nlast\nruns in 9.1 s on 16 threads\n",
        "first\nruns in 9.1 s on 16 thread\nlast\n",
    ] {
        assert!(mismatch(&printed, stale).is_some(), "{stale:?} passed");
    }
}

/// The first ` ```toml ` block after `heading` in `doc` (a path from the workspace root).
fn toml_block(doc: &str, heading: &str) -> String {
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(doc))
        .expect("a readable guide");
    let after = &text[text
        .find(heading)
        .unwrap_or_else(|| panic!("{doc} has no `{heading}`"))..];
    let start = after.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let len = after[start..].find("```").expect("a closed block");
    after[start..start + len].to_string()
}

/// (table, field) for every field a TOML block names, commented out (`# key = ...`) or not.
fn documented_fields(block: &str) -> Vec<(String, String)> {
    let mut table = String::new();
    let mut fields = Vec::new();
    for line in block.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            let name = line.trim_start_matches('[');
            table = name[..name.find(']').expect("a closed table header")].to_string();
            continue;
        }
        let line = line.trim_start_matches('#').trim_start();
        if let Some((key, _)) = line.split_once('=') {
            let key = key.trim();
            if !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                fields.push((table.clone(), key.to_string()));
            }
        }
    }
    fields
}

/// (table, field) for every field of a struct's `Debug` output (`Name { a: 1, b: Inner { c:
/// 2 } }`): nested structs are tables, named by the dotted path of their fields.
fn debug_fields(debug: &str) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    let mut tables: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut last_key = String::new();
    let mut chars = debug.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                // Skip a string literal (escapes included).
                while let Some(s) = chars.next() {
                    match s {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '{' => {
                // The field whose value this struct is names a table, not a field.
                if !last_key.is_empty() {
                    fields.pop();
                }
                tables.push(std::mem::take(&mut last_key));
            }
            '}' => {
                tables.pop();
            }
            ':' if chars.peek() == Some(&' ') && !word.is_empty() => {
                let table = tables.iter().skip(1).cloned().collect::<Vec<_>>().join(".");
                fields.push((table, word.clone()));
                last_key = word.clone();
            }
            _ => {}
        }
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            word.clear();
        }
    }
    fields
}

/// (table, field) for every field of a serialized value: objects are tables, an array of
/// objects (`[[data]]`) a table named after it.
fn json_fields(table: &str, value: &serde_json::Value, out: &mut Vec<(String, String)>) {
    let Some(object) = value.as_object() else {
        return;
    };
    for (key, v) in object {
        let nested = if table.is_empty() {
            key.clone()
        } else {
            format!("{table}.{key}")
        };
        match v {
            serde_json::Value::Object(_) => json_fields(&nested, v, out),
            serde_json::Value::Array(items) if items.first().is_some_and(|i| i.is_object()) => {
                json_fields(&nested, &items[0], out)
            }
            _ => out.push((table.to_string(), key.clone())),
        }
    }
}

/// Sorted, and no field listed twice.
fn once(mut fields: Vec<(String, String)>, what: &str) -> Vec<(String, String)> {
    fields.sort();
    let before = fields.len();
    fields.dedup();
    assert_eq!(
        before,
        fields.len(),
        "{what} lists a field twice: {fields:?}"
    );
    fields
}

#[test]
fn the_service_reference_lists_every_config_field_once_with_its_default() {
    let block = toml_block("docs/serve-config.md", "## Configuration reference");
    let parsed: lachesis_serve::ServeConfig =
        toml::from_str(&block).expect("the reference parses as serve.toml");
    let defaults = format!("{:?}", lachesis_serve::ServeConfig::default());
    assert_eq!(
        format!("{parsed:?}"),
        defaults,
        "the values shown are the defaults"
    );
    assert_eq!(
        once(documented_fields(&block), "docs/serve-config.md"),
        once(debug_fields(&defaults), "ServeConfig"),
        "docs/serve-config.md's reference and ServeConfig name different fields"
    );
}

#[test]
fn the_training_reference_lists_every_config_field_once_with_its_default() {
    let block = toml_block("docs/training-config.md", "## Configuration reference");
    let parsed = lachesis_agent::train::TrainConfig::parse(&block, &[])
        .expect("the reference parses as a training config");
    let defaults = lachesis_agent::train::TrainConfig::default();
    assert_eq!(parsed, defaults, "the values shown are the defaults");
    let mut fields = Vec::new();
    json_fields(
        "",
        &serde_json::to_value(&defaults).expect("the config serializes"),
        &mut fields,
    );
    assert_eq!(
        once(documented_fields(&block), "docs/training-config.md"),
        once(fields, "TrainConfig"),
        "docs/training-config.md's reference and TrainConfig name different fields"
    );
}
