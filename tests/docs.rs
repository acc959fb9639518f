//! The commands the README and the guides show must parse: every `lachesis ...` and
//! `cargo run --release -- ...` line in their shell code blocks is given to the real binary
//! with `--help` appended. clap reads the arguments left to right, so an unknown subcommand, an
//! unknown flag or a value its parser refuses fails before `--help` is reached; a command that
//! parses prints its help and exits 0. Nothing is run.
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

/// One command found in a document: where, and the arguments after the program.
#[derive(Debug)]
struct Shown {
    at: String,
    args: Vec<String>,
}

/// Every `lachesis` / `cargo run ... --` command in the shell code blocks of `text`: every line
/// of a ` ```sh `, `bash` or `shell` block, and the `$ ` lines of a `console` or untagged one
/// (whose other lines are output or diagrams); continuation lines joined, comments, shell
/// operators and redirections cut off.
fn commands(name: &str, text: &str) -> Vec<Shown> {
    let mut found = Vec::new();
    let mut in_block = false;
    let mut shell = false;
    let mut prompted = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(lang) = trimmed.strip_prefix("```") {
            in_block = !in_block;
            shell = in_block && matches!(lang.trim(), "sh" | "bash" | "shell");
            prompted = in_block && matches!(lang.trim(), "" | "console");
            continue;
        }
        let trimmed = match (in_block && shell, in_block && prompted) {
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
        for segment in segments(&words(&joined)) {
            if let Some(args) = lachesis_args(&segment) {
                found.push(Shown {
                    at: format!("{name}:{start}"),
                    args,
                });
            }
        }
    }
    found
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
fn the_service_guide_lists_every_config_field_once_with_its_default() {
    let block = toml_block("docs/serve.md", "## Configuration reference");
    let parsed: lachesis_serve::ServeConfig =
        toml::from_str(&block).expect("the reference parses as serve.toml");
    let defaults = format!("{:?}", lachesis_serve::ServeConfig::default());
    assert_eq!(
        format!("{parsed:?}"),
        defaults,
        "the values shown are the defaults"
    );
    assert_eq!(
        once(documented_fields(&block), "docs/serve.md"),
        once(debug_fields(&defaults), "ServeConfig"),
        "docs/serve.md's reference and ServeConfig name different fields"
    );
}

#[test]
fn the_training_guide_lists_every_config_field_once_with_its_default() {
    let block = toml_block("docs/training.md", "## Configuration reference");
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
        once(documented_fields(&block), "docs/training.md"),
        once(fields, "TrainConfig"),
        "docs/training.md's reference and TrainConfig name different fields"
    );
}
