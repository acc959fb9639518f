//! `RecordedReader`: replays readings from a JSON file (`lachesis probe --recorded FILE`), for
//! tests, demos and machines without a GPU. The file holds one `NodeReading` (read every time)
//! or an array of them (read in turn, the last one repeated). `lachesis probe --record FILE`
//! writes one from the real GPUs.

use super::reading::NodeReading;
use super::{NodeReader, ProbeError};
use std::path::{Path, PathBuf};

/// Readings from a file.
#[derive(Debug, Clone)]
pub struct RecordedReader {
    path: PathBuf,
    readings: Vec<NodeReading>,
    next: usize,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    Many(Vec<serde_json::Value>),
    One(serde_json::Value),
}

impl RecordedReader {
    /// Reads and checks every reading in `path`; an error names the file and the field
    /// (`[1].gpus[3].memory_used_bytes`).
    pub fn open(path: &Path) -> Result<Self, ProbeError> {
        let err = |field: String, message: String| ProbeError::Recorded {
            path: path.to_path_buf(),
            field,
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(String::new(), e.to_string()))?;
        let parsed: OneOrMany =
            serde_json::from_str(&text).map_err(|e| err(String::new(), e.to_string()))?;
        let (values, prefix): (Vec<serde_json::Value>, fn(usize) -> String) = match parsed {
            OneOrMany::One(v) => (vec![v], |_| String::new()),
            OneOrMany::Many(vs) => (vs, |i| format!("[{i}]")),
        };
        if values.is_empty() {
            return Err(err(String::new(), "no readings (an empty array)".into()));
        }
        let mut readings = Vec::with_capacity(values.len());
        for (i, value) in values.into_iter().enumerate() {
            let at = |field: &str| join(&prefix(i), field);
            let reading: NodeReading = serde_path_to_error::deserialize(value).map_err(|e| {
                let field = e.path().to_string();
                let field = if field == "." { String::new() } else { field };
                err(at(&field), e.into_inner().to_string())
            })?;
            reading.check().map_err(|e| err(at(&e.field), e.message))?;
            readings.push(reading);
        }
        Ok(RecordedReader {
            path: path.to_path_buf(),
            readings,
            next: 0,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn join(prefix: &str, field: &str) -> String {
    match (prefix.is_empty(), field.is_empty()) {
        (_, true) => prefix.to_string(),
        (true, false) => field.to_string(),
        (false, false) if field.starts_with('[') => format!("{prefix}{field}"),
        (false, false) => format!("{prefix}.{field}"),
    }
}

impl NodeReader for RecordedReader {
    fn read(&mut self) -> Result<NodeReading, ProbeError> {
        let i = self.next.min(self.readings.len() - 1);
        self.next = (i + 1).min(self.readings.len() - 1);
        Ok(self.readings[i].clone())
    }

    fn source(&self) -> String {
        format!("recorded {}", self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lachesis-recorded-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    const NODE: &str = r#"{"hostname": "n0", "cpus": 4, "mem_total_kib": 1048576,
        "mem_available_kib": 524288, "gpus": [
        {"index": 0, "name": "Tesla T4", "uuid": "GPU-1", "memory_total_bytes": 16106127360,
         "memory_used_bytes": 0}]}"#;

    #[test]
    fn one_reading_is_read_every_time_and_an_array_in_turn() {
        let mut one = RecordedReader::open(&write("one.json", NODE)).unwrap();
        assert_eq!(one.read().unwrap().hostname, "n0");
        assert_eq!(one.read().unwrap().hostname, "n0");
        let two = format!("[{NODE}, {}]", NODE.replace("\"n0\"", "\"n1\""));
        let mut many = RecordedReader::open(&write("many.json", &two)).unwrap();
        let names: Vec<String> = (0..3).map(|_| many.read().unwrap().hostname).collect();
        assert_eq!(names, ["n0", "n1", "n1"]);
    }

    /// Each bad file is refused with an error naming the file and the field at fault.
    #[test]
    fn bad_files_name_the_file_and_the_field() {
        for (name, text, field, says) in [
            ("syntax.json", "{\"hostname\": ", "", "EOF"),
            ("empty.json", "[]", "", "no readings"),
            (
                "type.json",
                &NODE.replace("\"cpus\": 4", "\"cpus\": \"four\""),
                "cpus",
                "invalid type",
            ),
            (
                "missing.json",
                &NODE.replace("\"uuid\": \"GPU-1\", ", ""),
                "gpus[0]",
                "missing field `uuid`",
            ),
            (
                "unknown.json",
                &NODE.replace("\"cpus\"", "\"cores\": 4, \"cpus\""),
                "cores",
                "unknown field",
            ),
            (
                "used.json",
                &NODE.replace(
                    "\"memory_used_bytes\": 0",
                    "\"memory_used_bytes\": 16106127361",
                ),
                "gpus[0].memory_used_bytes",
                "used of",
            ),
            (
                "second.json",
                &format!(
                    "[{NODE}, {}]",
                    NODE.replace("\"index\": 0", "\"index\": -1")
                ),
                "[1].gpus[0].index",
                "invalid value",
            ),
        ] {
            let path = write(name, text);
            let err = RecordedReader::open(&path).unwrap_err();
            let ProbeError::Recorded {
                path: at,
                field: f,
                message,
            } = &err
            else {
                panic!("{name}: {err}");
            };
            assert_eq!(at, &path, "{name}");
            assert_eq!(f, field, "{name}: {err}");
            assert!(message.contains(says), "{name}: {err}");
            assert!(err.to_string().contains(name), "{err}");
        }
    }
}
