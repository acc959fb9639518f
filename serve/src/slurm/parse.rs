//! Parsers for what Slurm's command-line tools print: `key=value` records
//! (`scontrol -o show ...`), host lists (`gpu-a-[1-3,7]`), memory (`62.50G`), GRES
//! (`gpu:a100:4(IDX:0-1,3)`), time limits (`1-02:00:00`). Every parser returns a message
//! naming what it could not read instead of guessing.

use std::collections::BTreeSet;

/// The `key=value` fields of one `scontrol -o` record, in order. Values run to the next
/// space; a few fields (`Command`, `WorkDir`, `StdOut`, `Comment`...) may contain spaces, so a
/// token without `=` is appended to the previous value.
pub fn fields(line: &str) -> Vec<(&str, String)> {
    let mut out: Vec<(&str, String)> = Vec::new();
    for token in line.split_whitespace() {
        match token.split_once('=') {
            Some((k, v))
                if !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "_:/".contains(c)) =>
            {
                out.push((k, v.to_string()));
            }
            _ => {
                if let Some(last) = out.last_mut() {
                    last.1.push(' ');
                    last.1.push_str(token);
                }
            }
        }
    }
    out
}

/// The first value of `key` in `fields`.
pub fn get<'a>(fields: &'a [(&str, String)], key: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.as_str())
}

/// Whether a value means "none" in Slurm's output.
pub fn is_null(v: &str) -> bool {
    matches!(v, "" | "(null)" | "N/A" | "None" | "Unknown" | "n/a")
}

/// Expands a Slurm host list (`a-[1-3,5],b7,c[01-02]x`) into names, in order. Zero-padding of
/// ranges is kept (`c[01-02]` → `c01`, `c02`).
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    if is_null(list) {
        return Ok(out);
    }
    // Split on commas outside brackets.
    let mut depth = 0i32;
    let mut start = 0;
    let bytes = list.as_bytes();
    let mut parts = Vec::new();
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'[' => depth += 1,
            b']' => depth -= 1,
            b',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if depth < 0 {
            return Err(format!("host list {list:?}: unbalanced ']'"));
        }
    }
    if depth != 0 {
        return Err(format!("host list {list:?}: unbalanced '['"));
    }
    parts.push(&list[start..]);
    for part in parts {
        if part.is_empty() {
            continue;
        }
        expand_one(part, &mut out).map_err(|e| format!("host list {list:?}: {e}"))?;
    }
    Ok(out)
}

fn expand_one(part: &str, out: &mut Vec<String>) -> Result<(), String> {
    let Some(open) = part.find('[') else {
        out.push(part.to_string());
        return Ok(());
    };
    let close = part[open..]
        .find(']')
        .map(|c| open + c)
        .ok_or_else(|| format!("{part:?}: no ']'"))?;
    let prefix = &part[..open];
    let suffix = &part[close + 1..];
    let mut rest = Vec::new();
    expand_one(suffix, &mut rest)?;
    if suffix.is_empty() {
        rest = vec![String::new()];
    }
    for range in part[open + 1..close].split(',') {
        let (lo, hi) = match range.split_once('-') {
            Some((a, b)) => (a, b),
            None => (range, range),
        };
        let width = lo.len();
        let a: u64 = lo
            .parse()
            .map_err(|_| format!("{range:?} is not a number range"))?;
        let b: u64 = hi
            .parse()
            .map_err(|_| format!("{range:?} is not a number range"))?;
        if b < a || b - a > 100_000 {
            return Err(format!("{range:?} is not an increasing range"));
        }
        for n in a..=b {
            for r in &rest {
                out.push(format!("{prefix}{n:0width$}{r}"));
            }
        }
    }
    Ok(())
}

/// Memory as Slurm prints it (`8G`, `62.50G`, `2048M`, `2048`, `1T`), in MiB.
pub fn mem_mib(v: &str) -> Result<u64, String> {
    let v = v.trim();
    let (num, mult) = match v.chars().last() {
        Some('K') => (&v[..v.len() - 1], 1.0 / 1024.0),
        Some('M') => (&v[..v.len() - 1], 1.0),
        Some('G') => (&v[..v.len() - 1], 1024.0),
        Some('T') => (&v[..v.len() - 1], 1024.0 * 1024.0),
        Some('P') => (&v[..v.len() - 1], 1024.0 * 1024.0 * 1024.0),
        _ => (v, 1.0),
    };
    let x: f64 = num
        .parse()
        .map_err(|_| format!("{v:?} is not a memory size"))?;
    if !x.is_finite() || x < 0.0 {
        return Err(format!("{v:?} is not a memory size"));
    }
    Ok((x * mult).round() as u64)
}

/// A time limit (`UNLIMITED`, `30:00`, `02:00:00`, `1-00:00:00`, `5`), in ms; `None` for
/// unlimited or not given.
pub fn time_limit_ms(v: &str) -> Result<Option<u64>, String> {
    let v = v.trim();
    if is_null(v) || v == "UNLIMITED" || v == "Partition_Limit" || v == "INFINITE" {
        return Ok(None);
    }
    let bad = || format!("{v:?} is not a time limit");
    let (days, rest) = match v.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().map_err(|_| bad())?, r),
        None => (0, v),
    };
    let nums: Vec<u64> = rest
        .split(':')
        .map(|p| p.parse::<u64>().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    let secs = match (v.contains('-'), nums.as_slice()) {
        (false, [m]) => m * 60,
        (true, [h]) => h * 3600,
        (_, [m, s]) if !v.contains('-') => m * 60 + s,
        (_, [h, m]) => h * 3600 + m * 60,
        (_, [h, m, s]) => h * 3600 + m * 60 + s,
        _ => return Err(bad()),
    };
    Ok(Some((days * 86_400 + secs) * 1000))
}

/// Index ranges (`0-1,3`) as a set.
pub fn indices(v: &str) -> Result<BTreeSet<u32>, String> {
    let mut out = BTreeSet::new();
    if is_null(v) {
        return Ok(out);
    }
    for part in v.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let a: u32 = a
            .parse()
            .map_err(|_| format!("{v:?} is not an index list"))?;
        let b: u32 = b
            .parse()
            .map_err(|_| format!("{v:?} is not an index list"))?;
        if b < a || b - a > 4096 {
            return Err(format!("{v:?} is not an index list"));
        }
        out.extend(a..=b);
    }
    Ok(out)
}

/// One GPU GRES entry: `gpu:a100:4(IDX:0-1)`, `gpu:2`, `gres:gpu:a100:2`, `gres/gpu:v100=1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gres {
    /// The GPU type, if the entry names one.
    pub kind: Option<String>,
    pub count: u32,
    /// GPU indices, when the entry carries `(IDX:...)`.
    pub idx: Option<BTreeSet<u32>>,
}

/// The GPU entries of a GRES list (`gpu:a100:4(IDX:0-3),nic:1`); other GRES are skipped.
/// `(null)` and `N/A` give no entries.
pub fn gpu_gres(v: &str) -> Result<Vec<Gres>, String> {
    let mut out = Vec::new();
    if is_null(v) {
        return Ok(out);
    }
    // Split on commas outside parentheses.
    let mut depth = 0i32;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in v.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&v[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&v[start..]);
    for part in parts {
        let (body, idx) = match part.split_once('(') {
            Some((b, rest)) => {
                let inner = rest.trim_end_matches(')');
                let idx = match inner.strip_prefix("IDX:") {
                    Some(list) => Some(indices(list)?),
                    None => None,
                };
                (b, idx)
            }
            None => (part, None),
        };
        let body = body
            .strip_prefix("gres:")
            .or_else(|| body.strip_prefix("gres/"))
            .unwrap_or(body);
        let body = body.replace('=', ":");
        let tokens: Vec<&str> = body.split(':').collect();
        if tokens.first() != Some(&"gpu") {
            continue;
        }
        let (kind, count) = match tokens.as_slice() {
            ["gpu"] => (None, "1"),
            ["gpu", n] if n.chars().all(|c| c.is_ascii_digit()) => (None, *n),
            ["gpu", t] => (Some(t.to_string()), "1"),
            ["gpu", t, n] => (Some(t.to_string()), *n),
            _ => return Err(format!("{part:?} is not a GPU GRES entry")),
        };
        let count: u32 = count
            .parse()
            .map_err(|_| format!("{part:?}: {count:?} is not a GPU count"))?;
        out.push(Gres { kind, count, idx });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists_expand_like_slurm() {
        assert_eq!(
            expand_hostlist("gpu-a-[1-3,7],b1,c[01-02]x").unwrap(),
            [
                "gpu-a-1", "gpu-a-2", "gpu-a-3", "gpu-a-7", "b1", "c01x", "c02x"
            ]
        );
        assert_eq!(expand_hostlist("(null)").unwrap(), Vec::<String>::new());
        assert_eq!(
            expand_hostlist("r[1-2]n[1-2]").unwrap(),
            ["r1n1", "r1n2", "r2n1", "r2n2"]
        );
        assert!(expand_hostlist("a[1-").is_err());
        assert!(expand_hostlist("a[3-1]").is_err());
    }

    #[test]
    fn memory_time_and_indices() {
        assert_eq!(mem_mib("8G").unwrap(), 8192);
        assert_eq!(mem_mib("62.50G").unwrap(), 64000);
        assert_eq!(mem_mib("2048").unwrap(), 2048);
        assert!(mem_mib("lots").is_err());
        assert_eq!(time_limit_ms("00:30:00").unwrap(), Some(1_800_000));
        assert_eq!(time_limit_ms("1-02:00:00").unwrap(), Some(93_600_000));
        assert_eq!(time_limit_ms("30").unwrap(), Some(1_800_000));
        assert_eq!(time_limit_ms("UNLIMITED").unwrap(), None);
        assert!(time_limit_ms("soon").is_err());
        assert_eq!(
            indices("0-1,3").unwrap().into_iter().collect::<Vec<_>>(),
            [0, 1, 3]
        );
    }

    #[test]
    fn gpu_gres_entries() {
        assert_eq!(
            gpu_gres("gpu:a100:4(IDX:0-1,3),nic:1").unwrap(),
            [Gres {
                kind: Some("a100".into()),
                count: 4,
                idx: Some([0, 1, 3].into_iter().collect())
            }]
        );
        assert_eq!(
            gpu_gres("gres:gpu:2").unwrap(),
            [Gres {
                kind: None,
                count: 2,
                idx: None
            }]
        );
        assert_eq!(
            gpu_gres("gres/gpu:v100=1").unwrap(),
            [Gres {
                kind: Some("v100".into()),
                count: 1,
                idx: None
            }]
        );
        assert_eq!(
            gpu_gres("gpu:a100:0(IDX:N/A)").unwrap()[0].idx,
            Some(BTreeSet::new())
        );
        assert!(gpu_gres("gpu:a100:x").is_err());
        assert!(gpu_gres("(null)").unwrap().is_empty());
    }

    #[test]
    fn records_keep_values_with_spaces() {
        let f = fields("JobId=7 Command=/bin/sh -c x WorkDir=/tmp AdminComment=lachesis:managed");
        assert_eq!(get(&f, "Command"), Some("/bin/sh -c x"));
        assert_eq!(get(&f, "AdminComment"), Some("lachesis:managed"));
    }
}
