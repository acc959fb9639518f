//! Rust errors as Python exceptions, with the Rust error's whole message (file, line, field):
//! a missing file is `FileNotFoundError` (other I/O `OSError`), stepping an ended episode is
//! `lachesis.EpisodeOver` (a `RuntimeError`), bad input and configuration `ValueError`.

use lachesis_agent::harness::HarnessError;
use lachesis_env::gym::EnvError;
use lachesis_env::trace::TraceReadError;
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::{PyErr, create_exception};

create_exception!(
    _core,
    EpisodeOver,
    PyRuntimeError,
    "step() after the episode ended (or before reset()): call reset()."
);

/// The message of `e` with its causes, each once.
fn message(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

fn io_error(kind: std::io::ErrorKind, text: String) -> PyErr {
    if kind == std::io::ErrorKind::NotFound {
        PyFileNotFoundError::new_err(text)
    } else {
        PyOSError::new_err(text)
    }
}

/// The I/O error at the root of `e`, if any.
fn io_kind(e: &HarnessError) -> Option<std::io::ErrorKind> {
    match e {
        HarnessError::Io { source, .. } => Some(source.kind()),
        HarnessError::Trace(TraceReadError::Io { source, .. }) => Some(source.kind()),
        HarnessError::Context { source, .. } => io_kind(source),
        _ => None,
    }
}

pub fn harness(e: HarnessError) -> PyErr {
    let text = message(&e);
    match io_kind(&e) {
        Some(kind) => io_error(kind, text),
        None => PyValueError::new_err(text),
    }
}

pub fn env(e: EnvError) -> PyErr {
    match e {
        EnvError::EpisodeOver => EpisodeOver::new_err(e.to_string()),
        other => PyValueError::new_err(message(&other)),
    }
}

pub fn trace(e: TraceReadError) -> PyErr {
    harness(HarnessError::Trace(e))
}

pub fn value(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}
