//! Units and identifiers shared by the whole world model: integer simulated time, newtype ids.
//!
//! Owns no behaviour beyond parsing and formatting; depends on nothing else in the crate.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A point in simulated time, or a duration, in integer milliseconds.
///
/// Integer time keeps event order exact and runs reproducible across machines.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct SimTime(pub u64);

impl SimTime {
    pub const ZERO: SimTime = SimTime(0);
    pub const MAX: SimTime = SimTime(u64::MAX);

    pub const fn from_ms(ms: u64) -> Self {
        SimTime(ms)
    }
    pub const fn from_secs(s: u64) -> Self {
        SimTime(s.saturating_mul(1000))
    }
    /// Seconds as a float, rounded to the nearest millisecond; negative and non-finite are `None`.
    pub fn from_secs_f64(s: f64) -> Option<Self> {
        if !s.is_finite() || s < 0.0 || s > (u64::MAX / 1000) as f64 {
            return None;
        }
        Some(SimTime((s * 1000.0).round() as u64))
    }
    pub const fn ms(self) -> u64 {
        self.0
    }
    pub fn secs_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }
    pub fn saturating_sub(self, other: SimTime) -> SimTime {
        SimTime(self.0.saturating_sub(other.0))
    }
    pub fn saturating_add(self, other: SimTime) -> SimTime {
        SimTime(self.0.saturating_add(other.0))
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}s", self.secs_f64())
    }
}

/// Parse a human duration: a number with an optional unit `ms`, `s` (default), `m`, `h`, `d`.
///
/// ```
/// use lachesis_env::units::{parse_duration, SimTime};
/// assert_eq!(parse_duration("90").unwrap(), SimTime::from_secs(90));
/// assert_eq!(parse_duration("1.5h").unwrap(), SimTime::from_secs(5400));
/// assert_eq!(parse_duration("250ms").unwrap(), SimTime::from_ms(250));
/// assert!(parse_duration("soon").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<SimTime, String> {
    let t = text.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else if let Some(n) = t.strip_suffix('d') {
        (n, 86400.0)
    } else {
        (t, 1.0)
    };
    let value: f64 = num.trim().parse().map_err(|_| {
        format!("`{text}` is not a duration (expected e.g. 90, 250ms, 30s, 15m, 2h, 3d)")
    })?;
    SimTime::from_secs_f64(value * mult)
        .ok_or_else(|| format!("`{text}` is not a non-negative finite duration"))
}

macro_rules! id_newtype {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(pub u32);

        impl $name {
            /// The id as a dense index into the owning table.
            pub const fn index(self) -> usize {
                self.0 as usize
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id_newtype!(
    /// A job's dense index in its trace (0..n); the trace keeps the original name.
    JobId
);
id_newtype!(
    /// A node's dense index in its cluster (0..n); the cluster keeps the name.
    NodeId
);
id_newtype!(
    /// A GPU model's index in its cluster's model table.
    GpuModelId
);
id_newtype!(
    /// A tenant's (user, group, virtual cluster, queue) index in its trace's tenant table.
    TenantId
);

/// Milli-GPU in one whole GPU.
pub const GPU_MILLI: u32 = 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("2d").unwrap(), SimTime::from_secs(172_800));
        assert_eq!(parse_duration(" 15m ").unwrap(), SimTime::from_secs(900));
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("NaN").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn secs_round_to_ms() {
        assert_eq!(SimTime::from_secs_f64(1.0004), Some(SimTime(1000)));
        assert_eq!(SimTime::from_secs_f64(1.0006), Some(SimTime(1001)));
        assert_eq!(SimTime::from_secs_f64(f64::INFINITY), None);
    }
}
