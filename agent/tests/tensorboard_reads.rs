//! A real TensorBoard reads the event files `SummaryWriter` writes: its `EventAccumulator`
//! must find every scalar (tag, step, value) and the text summary under the text plugin.
//!
//! Needs a Python with `tensorboard` installed, named by `LACHESIS_TB_PYTHON`:
//!
//! ```text
//! python3 -m venv /tmp/tbvenv && /tmp/tbvenv/bin/pip install tensorboard
//! LACHESIS_TB_PYTHON=/tmp/tbvenv/bin/python cargo test -p lachesis-agent --test tensorboard_reads
//! ```
//!
//! `.ci/run` sets it to the notebooks' virtual environment. Without it the test is skipped,
//! except where `CI` is set: there it fails, so CI cannot pass without having run it.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use lachesis_agent::SummaryWriter;

/// Prints one tab-separated line per scalar and per text summary that TensorBoard loaded.
const DUMP_EVENTS: &str = r#"
import sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0, "tensors": 0})
acc.Reload()
for tag in sorted(acc.Tags()["scalars"]):
    for e in acc.Scalars(tag):
        print("scalar", tag, e.step, repr(e.value), sep="\t")
for tag in sorted(acc.PluginTagToContent("text")):
    for e in acc.Tensors(tag):
        text = tensor_util.make_ndarray(e.tensor_proto)
        print("text", tag, e.step, text.shape, text.item().decode(), sep="\t")
"#;

/// The Python to run, or `None` where the test is to be skipped.
fn tensorboard_python() -> Option<PathBuf> {
    match std::env::var_os("LACHESIS_TB_PYTHON") {
        Some(python) => {
            let python = PathBuf::from(python);
            assert!(
                python.exists(),
                "LACHESIS_TB_PYTHON={} does not exist (pip install tensorboard into a venv)",
                python.display()
            );
            Some(python)
        }
        None if std::env::var_os("CI").is_some() => {
            panic!("CI is set but LACHESIS_TB_PYTHON is not: this test must run in CI")
        }
        None => None,
    }
}

#[test]
fn tensorboard_reads_scalars_and_text() {
    let Some(python) = tensorboard_python() else {
        eprintln!(
            "skipped: set LACHESIS_TB_PYTHON to a python with tensorboard installed \
             (python3 -m venv /tmp/tbvenv && /tmp/tbvenv/bin/pip install tensorboard)"
        );
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("tensorboard_reads-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);

    // Two writers on one directory in the same second: TensorBoard must see both files.
    let mut train = SummaryWriter::create(&dir).unwrap();
    let mut eval = SummaryWriter::create(&dir).unwrap();
    let losses = [2.0, 1.5, 0.75, 0.5];
    for (step, loss) in losses.iter().enumerate() {
        train
            .add_scalar("losses/value_loss", *loss, step as u64)
            .unwrap();
    }
    train
        .add_scalar("charts/episodic_return", -1250.0, 3)
        .unwrap();
    train
        .add_text("config", "**learning_rate** = 0.0003", 0)
        .unwrap();
    eval.add_scalar("eval/mean_wait_ms", 4096.25, 3).unwrap();
    train.flush().unwrap();
    eval.flush().unwrap();

    let output = Command::new(&python)
        .arg("-c")
        .arg(DUMP_EVENTS)
        .arg(&dir)
        .output()
        .unwrap_or_else(|err| panic!("running {}: {err}", python.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{} failed ({}):\n{stdout}\n{}",
        python.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );

    let mut expected: Vec<(String, u64, f64)> = losses
        .iter()
        .enumerate()
        .map(|(step, loss)| ("losses/value_loss".into(), step as u64, *loss))
        .collect();
    expected.push(("charts/episodic_return".into(), 3, -1250.0));
    expected.push(("eval/mean_wait_ms".into(), 3, 4096.25));
    expected.sort_by(|a, b| a.0.cmp(&b.0));

    let mut scalars = Vec::new();
    let mut texts = Vec::new();
    for line in stdout.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        match fields.as_slice() {
            ["scalar", tag, step, value] => scalars.push((
                tag.to_string(),
                step.parse::<u64>().unwrap(),
                value.parse::<f64>().unwrap(),
            )),
            ["text", tag, step, shape, text] => texts.push(format!("{tag} {step} {shape} {text}")),
            _ => panic!("unexpected line from the python dump: {line:?}\n{stdout}"),
        }
    }
    assert_eq!(scalars, expected, "TensorBoard's scalars:\n{stdout}");
    // A scalar string tensor (shape `()`), shown by the text plugin as Markdown.
    assert_eq!(texts, vec!["config 0 () **learning_rate** = 0.0003"]);
    fs::remove_dir_all(&dir).unwrap();
}
