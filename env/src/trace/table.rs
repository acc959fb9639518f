//! CSV access shared by the trace readers: the header's column positions, row width checks, and
//! field parsers whose errors name the file, the line and the column.
//!
//! Owns no trace format: each reader says which columns it needs and what their values mean.

use super::TraceReadError;
use crate::units::SimTime;
use csv::StringRecord;
use std::io::Read;
use std::ops::RangeInclusive;
use std::str::FromStr;

/// Longest value quoted back in an error message, in characters.
const MAX_QUOTED: usize = 40;

/// A CSV reader that leaves headers and row widths to [`Table`], so that every line, including
/// a version line before the header, keeps its true line number.
pub(crate) fn csv_reader<R: Read>(input: R) -> csv::Reader<R> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(input)
}

/// Reads the next record; `false` at the end of the input.
pub(crate) fn next_record<R: Read>(
    file: &str,
    reader: &mut csv::Reader<R>,
    record: &mut StringRecord,
) -> Result<bool, TraceReadError> {
    reader
        .read_record(record)
        .map_err(|err| csv_error(file, None, err))
}

/// The line a record starts on (1-based).
pub(crate) fn line_of(record: &StringRecord) -> u64 {
    record.position().map_or(0, |p| p.line())
}

/// The error for a file that ends where its header should be.
pub(crate) fn missing_header<R: Read>(
    file: &str,
    reader: &csv::Reader<R>,
    columns: &[&str],
) -> TraceReadError {
    TraceReadError::Line {
        file: file.into(),
        line: reader.position().line(),
        problem: format!(
            "expected a header with columns {}, found the end of the file",
            columns.join(",")
        ),
    }
}

/// What to do with header columns a reader does not use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unknown {
    /// Foreign formats: extra columns are ignored.
    Ignore,
    /// Lachesis' own format: an unknown or repeated column is an error.
    Reject,
}

/// The rows of one CSV file after its header, with the positions of the columns a reader needs.
pub(crate) struct Table<'f, R> {
    file: &'f str,
    reader: csv::Reader<R>,
    header: StringRecord,
    columns: Vec<&'static str>,
    index: Vec<usize>,
    record: StringRecord,
}

impl<'f, R: Read> Table<'f, R> {
    /// Reads the header as the next record and checks it holds every column in `columns`.
    pub fn new(
        file: &'f str,
        mut reader: csv::Reader<R>,
        columns: &'static [&'static str],
        unknown: Unknown,
    ) -> Result<Self, TraceReadError> {
        let mut header = StringRecord::new();
        if !next_record(file, &mut reader, &mut header)? {
            return Err(missing_header(file, &reader, columns));
        }
        Self::with_header(file, reader, header, columns, unknown)
    }

    /// Like [`Table::new`] with a header record the caller has already read.
    pub fn with_header(
        file: &'f str,
        reader: csv::Reader<R>,
        header: StringRecord,
        columns: &[&'static str],
        unknown: Unknown,
    ) -> Result<Self, TraceReadError> {
        let line = line_of(&header);
        let header_error = |problem: String| TraceReadError::Line {
            file: file.into(),
            line,
            problem,
        };
        let index =
            columns
                .iter()
                .map(|column| {
                    header.iter().position(|h| h.trim() == *column).ok_or_else(|| {
                    header_error(format!(
                        "missing column {column}: expected a header with columns {}, got {}",
                        columns.join(","),
                        quote(&header.iter().collect::<Vec<_>>().join(","))
                    ))
                })
                })
                .collect::<Result<Vec<_>, _>>()?;
        if unknown == Unknown::Reject {
            if let Some(extra) = header.iter().find(|h| !columns.contains(&h.trim())) {
                return Err(header_error(format!(
                    "unknown column {}: expected only {}",
                    quote(extra),
                    columns.join(",")
                )));
            }
            if header.len() != columns.len() {
                return Err(header_error("a column appears twice in the header".into()));
            }
        }
        Ok(Table {
            file,
            reader,
            header,
            columns: columns.to_vec(),
            index,
            record: StringRecord::new(),
        })
    }

    /// The next data row, checked to have as many fields as the header.
    pub fn next_row(&mut self) -> Result<Option<Row<'_>>, TraceReadError> {
        let more = self
            .reader
            .read_record(&mut self.record)
            .map_err(|err| csv_error(self.file, Some(&self.header), err))?;
        if !more {
            return Ok(None);
        }
        let line = line_of(&self.record);
        if self.record.len() != self.header.len() {
            return Err(TraceReadError::Line {
                file: self.file.into(),
                line,
                problem: format!(
                    "expected {} fields like the header, got {}",
                    self.header.len(),
                    self.record.len()
                ),
            });
        }
        Ok(Some(Row {
            file: self.file,
            line,
            record: &self.record,
            columns: &self.columns,
            index: &self.index,
        }))
    }
}

/// One data row; every accessor's error names the file, the line and the column.
pub(crate) struct Row<'a> {
    file: &'a str,
    pub line: u64,
    record: &'a StringRecord,
    columns: &'a [&'static str],
    index: &'a [usize],
}

impl<'a> Row<'a> {
    /// The raw text of `column`, which the reader listed when it opened the table.
    pub fn str(&self, column: &'static str) -> &'a str {
        // Readers pass the same `&'static str` constants they listed, so the address usually
        // matches and the text comparison is a fallback.
        let i = self
            .columns
            .iter()
            .position(|c| std::ptr::eq(c.as_ptr(), column.as_ptr()) || *c == column)
            .expect("readers only ask for columns they listed");
        self.record
            .get(self.index[i])
            .expect("the row has as many fields as the header")
    }

    /// Every field of the row as written, joined by a character CSV text does not hold
    /// unquoted: equal exactly for rows equal field by field.
    pub fn fields_key(&self) -> String {
        self.record.iter().collect::<Vec<_>>().join("\u{1f}")
    }

    /// An error about `column` in this row.
    pub fn error(&self, column: &str, problem: impl Into<String>) -> TraceReadError {
        TraceReadError::Field {
            file: self.file.into(),
            line: self.line,
            field: column.into(),
            problem: problem.into(),
        }
    }

    /// "expected `expected`, got "<the value>"" about `column`.
    pub fn expected(&self, column: &'static str, expected: &str) -> TraceReadError {
        self.error(
            column,
            format!("expected {expected}, got {}", quote(self.str(column))),
        )
    }

    /// The value parsed as `T` (surrounding spaces ignored).
    pub fn parse<T: FromStr>(
        &self,
        column: &'static str,
        expected: &str,
    ) -> Result<T, TraceReadError> {
        self.str(column)
            .trim()
            .parse()
            .map_err(|_| self.expected(column, expected))
    }

    /// An integer within `range`.
    pub fn int_in<T>(
        &self,
        column: &'static str,
        range: RangeInclusive<T>,
    ) -> Result<T, TraceReadError>
    where
        T: FromStr + PartialOrd + std::fmt::Display,
    {
        // The message is built only on failure: this runs for every field of every row.
        let expected = || format!("an integer {}..={}", range.start(), range.end());
        match self.str(column).trim().parse::<T>() {
            Ok(value) if range.contains(&value) => Ok(value),
            _ => Err(self.expected(column, &expected())),
        }
    }

    /// Seconds, non-negative, with at most 3 decimals (exact milliseconds).
    pub fn secs(&self, column: &'static str) -> Result<SimTime, TraceReadError> {
        parse_secs(self.str(column)).ok_or_else(|| self.expected(column, SECS_EXPECTED))
    }

    /// Like [`Row::opt_secs`], but any number of decimals, rounded to the nearest millisecond:
    /// for times written from binary floats (`475.00000000000006`).
    pub fn opt_secs_rounded(
        &self,
        column: &'static str,
    ) -> Result<Option<SimTime>, TraceReadError> {
        let text = self.str(column).trim();
        if text.is_empty() {
            return Ok(None);
        }
        parse_milli_rounded(text)
            .map(|ms| Some(SimTime(ms)))
            .ok_or_else(|| self.expected(column, "seconds >= 0 (decimals rounded to ms)"))
    }

    /// A non-negative decimal with at most 3 decimals, in thousandths of `unit` (`1.5` ->
    /// 1500).
    pub fn milli(&self, column: &'static str, unit: &str) -> Result<u64, TraceReadError> {
        parse_milli(self.str(column)).ok_or_else(|| {
            self.expected(
                column,
                &format!("a number >= 0 with at most 3 decimals ({unit})"),
            )
        })
    }

    /// Like [`Row::secs`], but an empty field is `None`.
    pub fn opt_secs(&self, column: &'static str) -> Result<Option<SimTime>, TraceReadError> {
        if self.str(column).trim().is_empty() {
            Ok(None)
        } else {
            self.secs(column).map(Some)
        }
    }

    /// A `|`-separated list of names, each trimmed and non-empty; an empty field is `[]`.
    pub fn names(&self, column: &'static str) -> Result<Vec<String>, TraceReadError> {
        let text = self.str(column).trim();
        if text.is_empty() {
            return Ok(Vec::new());
        }
        text.split('|')
            .map(|name| match name.trim() {
                "" => Err(self.expected(column, "names separated by '|' (none empty)")),
                name => Ok(name.to_string()),
            })
            .collect()
    }
}

const SECS_EXPECTED: &str = "seconds >= 0 with at most 3 decimals";

/// Parses `123`, `123.4`, `123.456` seconds into exact milliseconds, without going through
/// floating point. Negative numbers, exponents and more than 3 decimals are refused.
pub(crate) fn parse_secs(text: &str) -> Option<SimTime> {
    parse_milli(text).map(SimTime)
}

/// Parses a non-negative decimal with at most 3 decimals (`12`, `0.5`, `1.001`) into exact
/// thousandths (`12000`, `500`, `1001`). Signs, exponents, a bare `.` at either end and more
/// decimals are refused, as are values whose thousandths overflow a `u64`.
pub(crate) fn parse_milli(text: &str) -> Option<u64> {
    decimal_milli(text, false)
}

/// Like [`parse_milli`], but any number of decimals, rounded half up to the nearest thousandth
/// (`475.00000000000006` -> 475000, `0.0005` -> 1): for numbers written from binary floats.
pub(crate) fn parse_milli_rounded(text: &str) -> Option<u64> {
    decimal_milli(text, true)
}

fn decimal_milli(text: &str, round: bool) -> Option<u64> {
    let text = text.trim();
    let (whole, frac) = match text.split_once('.') {
        Some((whole, frac)) if !frac.is_empty() => (whole, frac),
        Some(_) => return None,
        None => (text, ""),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(frac) || (!round && frac.len() > 3) {
        return None;
    }
    let whole: u64 = whole.parse().ok()?;
    let frac = frac.as_bytes();
    let digit = |i: usize| frac.get(i).map_or(0, |d| u64::from(d - b'0'));
    let frac_milli = digit(0) * 100 + digit(1) * 10 + digit(2) + u64::from(digit(3) >= 5);
    whole.checked_mul(1000)?.checked_add(frac_milli)
}

/// `value` quoted for an error message, cut to `MAX_QUOTED` characters.
pub(crate) fn quote(value: &str) -> String {
    if value.chars().count() <= MAX_QUOTED {
        format!("{value:?}")
    } else {
        let cut: String = value.chars().take(MAX_QUOTED).collect();
        format!("{cut:?}...")
    }
}

/// Turns a CSV reading error into one that names the file, the line and, when the header is
/// known, the column.
fn csv_error(file: &str, header: Option<&StringRecord>, err: csv::Error) -> TraceReadError {
    let line = err.position().map_or(0, |p| p.line());
    match err.into_kind() {
        csv::ErrorKind::Io(source) => TraceReadError::Io {
            file: file.into(),
            source,
        },
        csv::ErrorKind::Utf8 { err, .. } => {
            match header.and_then(|h| h.get(err.field())).map(str::trim) {
                Some(field) => TraceReadError::Field {
                    file: file.into(),
                    line,
                    field: field.into(),
                    problem: "expected UTF-8 text".into(),
                },
                None => TraceReadError::Line {
                    file: file.into(),
                    line,
                    problem: format!("field {} is not UTF-8 text", err.field() + 1),
                },
            }
        }
        // Reading string records from a flexible reader raises no other kind.
        other => TraceReadError::Line {
            file: file.into(),
            line,
            problem: format!("unreadable CSV: {other:?}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_parse_exactly() {
        assert_eq!(parse_secs("12"), Some(SimTime(12_000)));
        assert_eq!(parse_secs(" 0.5 "), Some(SimTime(500)));
        assert_eq!(parse_secs("1.001"), Some(SimTime(1_001)));
        assert_eq!(parse_secs("18446744073709551.615"), Some(SimTime(u64::MAX)));
        for bad in [
            "",
            ".5",
            "1.",
            "-1",
            "1e3",
            "1.0001",
            "+1",
            "18446744073709552",
            "1 2",
        ] {
            assert_eq!(parse_secs(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn thousandths_parse_exactly() {
        assert_eq!(parse_milli("120.5"), Some(120_500));
        assert_eq!(parse_milli("0.25"), Some(250));
        assert_eq!(parse_milli("7"), Some(7_000));
        for bad in ["", "1.", ".", "-0.5", "0.0001", "1,5"] {
            assert_eq!(parse_milli(bad), None, "{bad:?}");
        }
        assert_eq!(parse_milli_rounded("475.00000000000006"), Some(475_000));
        assert_eq!(parse_milli_rounded("7494.000999"), Some(7_494_001));
        assert_eq!(parse_milli_rounded("0.0004"), Some(0));
        assert_eq!(parse_milli_rounded("0.0005"), Some(1));
        assert_eq!(parse_milli_rounded("1.9996"), Some(2_000));
        for bad in ["", "1.", "-1", "1e3", "1.2.3"] {
            assert_eq!(parse_milli_rounded(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn long_values_are_cut_in_messages() {
        assert_eq!(quote("abc"), "\"abc\"");
        assert!(quote(&"x".repeat(100)).ends_with("\"..."));
    }
}
