//! TensorBoard event files: a writer for scalar and text summaries, and a reader of scalars.
//!
//! An event file is a sequence of TFRecords (`u64` little-endian length, masked CRC32C of the
//! length bytes, the serialized `Event`, masked CRC32C of the data); its first event carries
//! `file_version = "brain.Event:2"`. The few protobuf messages needed are hand-written below
//! with prost, field numbers as in TensorBoard's `event.proto`, `summary.proto`, `tensor.proto`
//! and `tensor_shape.proto`, so no protoc or build script is involved. Depends on nothing else
//! in the workspace.
//!
//! ```text
//! tensorboard --logdir DIR    # shows what SummaryWriter::create(DIR) wrote
//! ```

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use prost::Message;

use proto::{
    Event, PluginData, Summary, SummaryMetadata, SummaryValue, TensorProto, TensorShapeProto,
    event, summary_value,
};

/// The hand-written subset of TensorBoard's protobuf messages (same field numbers and types).
mod proto {
    /// `tensorboard.Event` (event.proto): one record of an event file.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Event {
        #[prost(double, tag = "1")]
        pub wall_time: f64,
        #[prost(int64, tag = "2")]
        pub step: i64,
        #[prost(oneof = "event::What", tags = "3, 5")]
        pub what: Option<event::What>,
    }

    pub mod event {
        /// `oneof what` of `Event`, the two members we write.
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum What {
            #[prost(string, tag = "3")]
            FileVersion(String),
            #[prost(message, tag = "5")]
            Summary(super::Summary),
        }
    }

    /// `tensorboard.Summary` (summary.proto).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Summary {
        #[prost(message, repeated, tag = "1")]
        pub value: Vec<SummaryValue>,
    }

    /// `tensorboard.Summary.Value`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SummaryValue {
        #[prost(string, tag = "1")]
        pub tag: String,
        #[prost(message, optional, tag = "9")]
        pub metadata: Option<SummaryMetadata>,
        #[prost(oneof = "summary_value::Value", tags = "2, 8")]
        pub value: Option<summary_value::Value>,
    }

    pub mod summary_value {
        /// `oneof value` of `Summary.Value`, the two members we write.
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum Value {
            #[prost(float, tag = "2")]
            SimpleValue(f32),
            #[prost(message, tag = "8")]
            Tensor(super::TensorProto),
        }
    }

    /// `tensorboard.SummaryMetadata`: names the plugin that displays a tensor summary.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SummaryMetadata {
        #[prost(message, optional, tag = "1")]
        pub plugin_data: Option<PluginData>,
    }

    /// `tensorboard.SummaryMetadata.PluginData`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PluginData {
        #[prost(string, tag = "1")]
        pub plugin_name: String,
    }

    /// `tensorboard.TensorProto` (tensor.proto); `dtype` is the `DataType` enum (types.proto).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TensorProto {
        #[prost(int32, tag = "1")]
        pub dtype: i32,
        #[prost(message, optional, tag = "2")]
        pub tensor_shape: Option<TensorShapeProto>,
        #[prost(bytes = "vec", repeated, tag = "8")]
        pub string_val: Vec<Vec<u8>>,
    }

    /// `tensorboard.TensorShapeProto` (tensor_shape.proto); no dims is a scalar.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TensorShapeProto {
        #[prost(message, repeated, tag = "2")]
        pub dim: Vec<TensorShapeDim>,
    }

    /// `tensorboard.TensorShapeProto.Dim`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TensorShapeDim {
        #[prost(int64, tag = "1")]
        pub size: i64,
    }

    /// `DataType.DT_STRING` (types.proto).
    pub const DT_STRING: i32 = 7;
}

/// The first event of every file; TensorBoard reads version 2 (`SessionLog`-based restarts).
const FILE_VERSION: &str = "brain.Event:2";
/// The plugin that shows string tensors.
const TEXT_PLUGIN: &str = "text";
/// TFRecord header: the `u64` length and its masked CRC.
const HEADER_BYTES: usize = 12;
/// TFRecord footer: the data's masked CRC.
const FOOTER_BYTES: usize = 4;

/// Why an event file could not be written or read. Each names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TbError {
    #[error("{doing} {}: {source}", path.display())]
    Io {
        doing: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} at byte offset {offset}: {problem}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        problem: String,
    },
    #[error("{}: step {step} does not fit an event's int64 step", path.display())]
    StepOutOfRange { path: PathBuf, step: u64 },
}

/// One scalar read back from an event file.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalarEvent {
    pub step: u64,
    pub tag: String,
    /// As stored: TensorBoard keeps scalars as `f32`.
    pub value: f32,
}

/// Writes scalar and text summaries to a new event file, buffered.
///
/// Data reaches the file on [`flush`](Self::flush) or when the buffer fills; dropping the
/// writer flushes too, but ignores an error there, so call `flush` where a loss must be seen.
#[derive(Debug)]
pub struct SummaryWriter {
    path: PathBuf,
    file: BufWriter<File>,
}

impl SummaryWriter {
    /// Creates `dir` if needed and in it a new file
    /// `events.out.tfevents.{secs}.{hostname}.{pid}.{n}` (TensorFlow's naming), where `n` is
    /// the first counter whose file does not exist yet: the file is created exclusively, so
    /// writers started in the same second never share (and overwrite) a file. Writes and
    /// flushes the `file_version` event.
    pub fn create(dir: &Path) -> Result<Self, TbError> {
        fs::create_dir_all(dir).map_err(|source| TbError::Io {
            doing: "creating directory",
            path: dir.to_path_buf(),
            source,
        })?;
        let (path, file) = create_unique(dir)?;
        let mut writer = SummaryWriter {
            path,
            file: BufWriter::new(file),
        };
        writer.write_event(Event {
            wall_time: wall_time_secs(),
            step: 0,
            what: Some(event::What::FileVersion(FILE_VERSION.into())),
        })?;
        // A new file is a valid event file at once, and a disk that refuses it fails here.
        writer.flush()?;
        Ok(writer)
    }

    /// Appends `value` (stored as `f32`, as TensorBoard keeps scalars) under `tag` at `step`.
    pub fn add_scalar(&mut self, tag: &str, value: f64, step: u64) -> Result<(), TbError> {
        self.add_value(
            step,
            SummaryValue {
                tag: tag.into(),
                metadata: None,
                value: Some(summary_value::Value::SimpleValue(value as f32)),
            },
        )
    }

    /// Appends `text` (Markdown) under `tag` at `step`, for TensorBoard's text plugin: a scalar
    /// string tensor, as `tf.summary.text` writes it, so it is shown as Markdown, not a table.
    pub fn add_text(&mut self, tag: &str, text: &str, step: u64) -> Result<(), TbError> {
        self.add_value(
            step,
            SummaryValue {
                tag: tag.into(),
                metadata: Some(SummaryMetadata {
                    plugin_data: Some(PluginData {
                        plugin_name: TEXT_PLUGIN.into(),
                    }),
                }),
                value: Some(summary_value::Value::Tensor(TensorProto {
                    dtype: proto::DT_STRING,
                    tensor_shape: Some(TensorShapeProto { dim: Vec::new() }),
                    string_val: vec![text.as_bytes().to_vec()],
                })),
            },
        )
    }

    /// Writes the buffered events to the file.
    pub fn flush(&mut self) -> Result<(), TbError> {
        self.file.flush().map_err(|source| self.io_error(source))
    }

    /// The event file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn add_value(&mut self, step: u64, value: SummaryValue) -> Result<(), TbError> {
        let step = i64::try_from(step).map_err(|_| TbError::StepOutOfRange {
            path: self.path.clone(),
            step,
        })?;
        self.write_event(Event {
            wall_time: wall_time_secs(),
            step,
            what: Some(event::What::Summary(Summary { value: vec![value] })),
        })
    }

    fn write_event(&mut self, event: Event) -> Result<(), TbError> {
        let record = frame(&event.encode_to_vec());
        self.file
            .write_all(&record)
            .map_err(|source| self.io_error(source))
    }

    fn io_error(&self, source: io::Error) -> TbError {
        TbError::Io {
            doing: "writing",
            path: self.path.clone(),
            source,
        }
    }
}

impl Drop for SummaryWriter {
    fn drop(&mut self) {
        // Best effort: a caller who must see the error calls `flush` first.
        let _ = self.file.flush();
    }
}

/// Every scalar (`simple_value`) in the event file at `path`, in file order. Checks both CRCs
/// of every record; a bad or truncated record is an error naming its byte offset.
pub fn read_events(path: &Path) -> Result<Vec<ScalarEvent>, TbError> {
    let bytes = fs::read(path).map_err(|source| TbError::Io {
        doing: "reading",
        path: path.to_path_buf(),
        source,
    })?;
    let mut scalars = Vec::new();
    let mut offset = 0;
    while offset < bytes.len() {
        let corrupt = |problem: String| TbError::Corrupt {
            path: path.to_path_buf(),
            offset: offset as u64,
            problem,
        };
        let (data, record_len) = unframe(&bytes[offset..]).map_err(corrupt)?;
        let decoded =
            Event::decode(data).map_err(|err| corrupt(format!("record is not an Event: {err}")))?;
        if let Some(event::What::Summary(summary)) = decoded.what {
            let step = u64::try_from(decoded.step)
                .map_err(|_| corrupt(format!("negative step {}", decoded.step)))?;
            for value in summary.value {
                if let Some(summary_value::Value::SimpleValue(value_f32)) = value.value {
                    scalars.push(ScalarEvent {
                        step,
                        tag: value.tag,
                        value: value_f32,
                    });
                }
            }
        }
        offset += record_len;
    }
    Ok(scalars)
}

/// Creates `dir/events.out.tfevents.{secs}.{hostname}.{pid}.{n}` with the first free `n`.
fn create_unique(dir: &Path) -> Result<(PathBuf, File), TbError> {
    let prefix = format!(
        "events.out.tfevents.{:010}.{}.{}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs()),
        hostname(),
        std::process::id()
    );
    let mut n = 0u64;
    loop {
        let path = dir.join(format!("{prefix}.{n}"));
        match OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(file) => return Ok((path, file)),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => n += 1,
            Err(source) => {
                return Err(TbError::Io {
                    doing: "creating",
                    path,
                    source,
                });
            }
        }
    }
}

/// This machine's name, reduced to characters safe in a file name.
fn hostname() -> String {
    let raw = fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_default();
    let name: String = raw
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() {
        "localhost".into()
    } else {
        name
    }
}

fn wall_time_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

/// TFRecord's masked CRC32C: a CRC stored beside the data it covers is rotated and offset, so
/// that a CRC of bytes that themselves contain CRCs stays well distributed.
fn masked_crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
        .rotate_right(15)
        .wrapping_add(0xa282_ead8)
}

/// `data` as one TFRecord.
fn frame(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut record = Vec::with_capacity(HEADER_BYTES + data.len() + FOOTER_BYTES);
    record.extend_from_slice(&len);
    record.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    record.extend_from_slice(data);
    record.extend_from_slice(&masked_crc32c(data).to_le_bytes());
    record
}

/// The data of the TFRecord at the start of `bytes`, and the record's whole length.
fn unframe(bytes: &[u8]) -> Result<(&[u8], usize), String> {
    let truncated = || format!("truncated record ({} bytes left)", bytes.len());
    let header = bytes.get(..HEADER_BYTES).ok_or_else(truncated)?;
    let (len_bytes, len_crc) = header.split_at(8);
    check_crc("length", len_bytes, len_crc)?;
    let data_len = usize::try_from(u64::from_le_bytes(array(len_bytes)))
        .map_err(|_| "record length does not fit in memory".to_string())?;
    let record_len = HEADER_BYTES
        .checked_add(data_len)
        .and_then(|len| len.checked_add(FOOTER_BYTES))
        .ok_or_else(truncated)?;
    let record = bytes.get(..record_len).ok_or_else(truncated)?;
    let (data, data_crc) = record[HEADER_BYTES..].split_at(data_len);
    check_crc("data", data, data_crc)?;
    Ok((data, record_len))
}

fn check_crc(what: &str, bytes: &[u8], stored: &[u8]) -> Result<(), String> {
    let stored = u32::from_le_bytes(array(stored));
    let computed = masked_crc32c(bytes);
    if stored == computed {
        Ok(())
    } else {
        Err(format!(
            "{what} CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"
        ))
    }
}

/// The first `N` bytes of a slice the caller has sized to at least `N`.
fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&bytes[..N]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory for one test (removed first, in case an earlier run left it).
    fn temp_dir(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lachesis-tb-{test}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn event_files(dir: &Path) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        files.sort();
        files
    }

    #[test]
    fn crc32c_of_the_check_string() {
        // The CRC-32C catalogue's check value, and its mask ((crc >> 15 | crc << 17) +
        // 0xa282ead8) as TensorBoard's own `record_writer.masked_crc32c` computes it.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(masked_crc32c(b"123456789"), 0xC78A_B0E5);
    }

    #[test]
    fn scalars_round_trip() {
        let dir = temp_dir("round-trip");
        let mut writer = SummaryWriter::create(&dir).unwrap();
        writer.add_scalar("loss", 0.5, 1).unwrap();
        writer.add_text("config", "lr = 3e-4", 1).unwrap();
        writer.add_scalar("loss", -2.25, 2).unwrap();
        writer.add_scalar("charts/reward", 1e6, 2).unwrap();
        writer.flush().unwrap();
        let path = writer.path().to_path_buf();
        drop(writer);

        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("events.out.tfevents."), "{name}");
        assert!(
            name.ends_with(&format!(".{}.0", std::process::id())),
            "{name}"
        );
        let scalar = |step, tag: &str, value| ScalarEvent {
            step,
            tag: tag.into(),
            value,
        };
        assert_eq!(
            read_events(&path).unwrap(),
            vec![
                scalar(1, "loss", 0.5),
                scalar(2, "loss", -2.25),
                scalar(2, "charts/reward", 1e6),
            ]
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn first_record_is_the_file_version() {
        let dir = temp_dir("file-version");
        let path = SummaryWriter::create(&dir).unwrap().path().to_path_buf();
        let bytes = fs::read(&path).unwrap();
        let (data, record_len) = unframe(&bytes).unwrap();
        assert_eq!(record_len, bytes.len());
        let decoded = Event::decode(data).unwrap();
        assert_eq!(
            decoded.what,
            Some(event::What::FileVersion("brain.Event:2".into()))
        );
        assert!(decoded.wall_time > 1.6e9, "wall time {}", decoded.wall_time);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_corrupted_byte_is_reported_with_its_record_offset() {
        let dir = temp_dir("corrupt");
        let mut writer = SummaryWriter::create(&dir).unwrap();
        writer.add_scalar("loss", 0.5, 1).unwrap();
        writer.add_scalar("loss", 0.25, 2).unwrap();
        let path = writer.path().to_path_buf();
        drop(writer);
        let mut bytes = fs::read(&path).unwrap();
        // Records: file version, then the two scalars. Flip a data byte of the second.
        let record_len_at = |at: usize| {
            HEADER_BYTES + u64::from_le_bytes(array(&bytes[at..])) as usize + FOOTER_BYTES
        };
        let second = record_len_at(0);
        let third = second + record_len_at(second);
        bytes[third + HEADER_BYTES + 2] ^= 0x40;
        fs::write(&path, &bytes).unwrap();

        let err = read_events(&path).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(
            err.contains(&format!("at byte offset {third}: data CRC mismatch")),
            "{err}"
        );

        // A cut-off tail is named too.
        bytes[third + HEADER_BYTES + 2] ^= 0x40;
        fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        let err = read_events(&path).unwrap_err().to_string();
        assert!(
            err.contains(&format!("at byte offset {third}: truncated record")),
            "{err}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn writers_created_in_one_second_keep_separate_files() {
        let dir = temp_dir("two-writers");
        let mut first = SummaryWriter::create(&dir).unwrap();
        let mut second = SummaryWriter::create(&dir).unwrap();
        assert_ne!(first.path(), second.path());
        first.add_scalar("run", 1.0, 7).unwrap();
        second.add_scalar("run", 2.0, 7).unwrap();
        drop(first);
        drop(second);

        let files = event_files(&dir);
        assert_eq!(files.len(), 2, "{files:?}");
        let mut values: Vec<f32> = files
            .iter()
            .flat_map(|file| read_events(file).unwrap())
            .map(|scalar| scalar.value)
            .collect();
        values.sort_by(f32::total_cmp);
        assert_eq!(values, vec![1.0, 2.0]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn io_errors_name_the_path() {
        let dir = temp_dir("io-error");
        fs::create_dir_all(&dir).unwrap();
        let blocker = dir.join("not-a-dir");
        fs::write(&blocker, b"").unwrap();
        let err = SummaryWriter::create(&blocker.join("run")).unwrap_err();
        assert!(matches!(err, TbError::Io { .. }), "{err:?}");
        assert!(err.to_string().contains("not-a-dir"), "{err}");

        let err = read_events(&dir.join("missing")).unwrap_err().to_string();
        assert!(err.contains("reading") && err.contains("missing"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_step_beyond_int64_is_an_error() {
        let dir = temp_dir("big-step");
        let mut writer = SummaryWriter::create(&dir).unwrap();
        let err = writer.add_scalar("loss", 0.0, u64::MAX).unwrap_err();
        assert!(matches!(err, TbError::StepOutOfRange { .. }), "{err:?}");
        drop(writer);
        fs::remove_dir_all(&dir).unwrap();
    }
}
