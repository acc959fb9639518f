//! Kubernetes `resource.Quantity` text ("500m", "2", "1.5", "1Gi", "512Mi", "1G", "1e3",
//! "100k"), parsed exactly (no floating point) into the units the service counts in:
//! milli-cores, MiB, whole devices.
//!
//! The grammar is apimachinery's: `[+-]? (digits | digits.digits | digits. | .digits)` then one
//! suffix, binary (`Ki Mi Gi Ti Pi Ei`), decimal (`n u m "" k M G T P E`) or a decimal exponent
//! (`e3`, `E-2`). No spaces. Owns nothing but the arithmetic.

use std::fmt;

/// A parsed quantity: `mantissa x 10^exp10 x 2^pow2`, with a sign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    mantissa: u128,
    exp10: i32,
    pow2: u32,
}

/// Why a text is not a quantity (the caller adds the field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityError(pub String);

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Most significant digits kept exactly (more would not fit the arithmetic below).
const MAX_DIGITS: usize = 30;
/// Largest decimal exponent accepted either way (Kubernetes itself caps far lower in practice).
const MAX_EXP10: i32 = 60;

impl Quantity {
    /// Parses `text`; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Quantity, QuantityError> {
        let err = |why: &str| Err(QuantityError(format!("{text:?} is not a quantity ({why})")));
        let bytes = text.as_bytes();
        if bytes.is_empty() {
            return err("empty");
        }
        let (negative, rest) = match bytes[0] {
            b'-' => (true, &text[1..]),
            b'+' => (false, &text[1..]),
            _ => (false, text),
        };
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        let (int_part, frac_part) = match number.split_once('.') {
            Some((i, f)) => (i, f),
            None => (number, ""),
        };
        if frac_part.contains('.') {
            return err("two decimal points");
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return err("no digits");
        }
        // Exact digits: leading zeros dropped, trailing fractional zeros too.
        let frac_part = frac_part.trim_end_matches('0');
        let digits: String = format!("{int_part}{frac_part}")
            .trim_start_matches('0')
            .to_string();
        if digits.len() > MAX_DIGITS {
            return err("more than 30 significant digits");
        }
        let mantissa: u128 = if digits.is_empty() {
            0
        } else {
            match digits.parse() {
                Ok(m) => m,
                Err(_) => return err("bad digits"),
            }
        };
        let mut exp10 = -(frac_part.len() as i32);
        let mut pow2 = 0;
        match suffix {
            "" => {}
            "Ki" => pow2 = 10,
            "Mi" => pow2 = 20,
            "Gi" => pow2 = 30,
            "Ti" => pow2 = 40,
            "Pi" => pow2 = 50,
            "Ei" => pow2 = 60,
            "n" => exp10 -= 9,
            "u" => exp10 -= 6,
            "m" => exp10 -= 3,
            "k" => exp10 += 3,
            "M" => exp10 += 6,
            "G" => exp10 += 9,
            "T" => exp10 += 12,
            "P" => exp10 += 15,
            "E" => exp10 += 18,
            s if s.starts_with(['e', 'E']) => {
                let exp = &s[1..];
                let body = exp.strip_prefix(['+', '-']).unwrap_or(exp);
                if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) || body.len() > 4 {
                    return err("bad exponent");
                }
                let e: i32 = match exp.parse() {
                    Ok(e) => e,
                    Err(_) => return err("bad exponent"),
                };
                exp10 += e;
            }
            _ => return err("unknown suffix"),
        }
        if exp10.abs() > MAX_EXP10 {
            return err("exponent out of range");
        }
        Ok(Quantity {
            negative: negative && mantissa != 0,
            mantissa,
            exp10,
            pow2,
        })
    }

    pub fn is_negative(&self) -> bool {
        self.negative
    }

    pub fn is_zero(&self) -> bool {
        self.mantissa == 0
    }

    /// `|value| x 10^scale10 / 2^div2`, rounded up or down; `None` when it does not fit a u64.
    fn scaled(&self, scale10: i32, div2: u32, round_up: bool) -> Option<u64> {
        if self.mantissa == 0 {
            return Some(0);
        }
        let e = self.exp10 + scale10;
        let mut num = self.mantissa;
        let mut den: u128 = 1;
        // Binary parts cancel first so that `Mi` read in MiB stays exact and small.
        let (p_num, p_den) = if self.pow2 >= div2 {
            (self.pow2 - div2, 0)
        } else {
            (0, div2 - self.pow2)
        };
        num = num.checked_mul(1u128.checked_shl(p_num)?)?;
        den = den.checked_mul(1u128.checked_shl(p_den)?)?;
        if e >= 0 {
            num = num.checked_mul(10u128.checked_pow(e as u32)?)?;
        } else {
            match 10u128
                .checked_pow((-e) as u32)
                .and_then(|p| den.checked_mul(p))
            {
                Some(d) => den = d,
                // The denominator is beyond u128 while the numerator fits: below one unit.
                None => return Some(u64::from(round_up)),
            }
        }
        let q = num / den;
        let q = if round_up && !num.is_multiple_of(den) {
            q + 1
        } else {
            q
        };
        u64::try_from(q).ok()
    }

    /// Thousandths, rounded up (Kubernetes' `MilliValue`): CPU requests in milli-cores.
    pub fn milli_ceil(&self) -> Option<u64> {
        self.scaled(3, 0, true)
    }
    /// Thousandths, rounded down (capacity: never claim more than there is).
    pub fn milli_floor(&self) -> Option<u64> {
        self.scaled(3, 0, false)
    }
    /// MiB from a byte count, rounded up (requests).
    pub fn mib_ceil(&self) -> Option<u64> {
        self.scaled(0, 20, true)
    }
    /// MiB from a byte count, rounded down (capacity).
    pub fn mib_floor(&self) -> Option<u64> {
        self.scaled(0, 20, false)
    }
    /// The value as a whole number, `None` if it has a fraction or does not fit.
    pub fn whole(&self) -> Option<u64> {
        let up = self.scaled(0, 0, true)?;
        (self.scaled(0, 0, false)? == up).then_some(up)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn cpu_in_milli_cores() {
        // (text, milli-cores rounded up)
        let table = [
            ("500m", 500),
            ("2", 2000),
            ("1.5", 1500),
            ("0.1", 100),
            (".5", 500),
            ("5.", 5000),
            ("1e3", 1_000_000),
            ("1E-3", 1),
            ("100k", 100_000_000),
            ("250000u", 250),
            ("1n", 1), // 0.000001 milli, rounded up as Kubernetes does
            ("+3", 3000),
            ("0", 0),
            ("00.000", 0),
        ];
        for (text, milli) in table {
            assert_eq!(q(text).milli_ceil(), Some(milli), "{text}");
        }
        assert_eq!(q("1n").milli_floor(), Some(0));
    }

    #[test]
    fn memory_in_mib() {
        // (text, MiB rounded up, MiB rounded down)
        let table = [
            ("512Mi", 512, 512),
            ("1Gi", 1024, 1024),
            ("1.5Gi", 1536, 1536),
            ("1G", 954, 953),  // 10^9 / 2^20 = 953.67
            ("1048576", 1, 1), // bytes
            ("1048577", 2, 1), // one byte over a MiB
            ("2Ti", 2 * 1024 * 1024, 2 * 1024 * 1024),
            ("131072Ki", 128, 128),
            ("1e9", 954, 953),
            ("1500M", 1431, 1430), // 1.5e9 / 2^20 = 1430.51
        ];
        for (text, up, down) in table {
            assert_eq!(q(text).mib_ceil(), Some(up), "{text}");
            assert_eq!(q(text).mib_floor(), Some(down), "{text}");
        }
    }

    #[test]
    fn whole_devices() {
        assert_eq!(q("8").whole(), Some(8));
        assert_eq!(q("8000m").whole(), Some(8));
        assert_eq!(q("1k").whole(), Some(1000));
        assert_eq!(q("1.5").whole(), None);
        assert_eq!(q("500m").whole(), None);
    }

    #[test]
    fn signs_and_zero() {
        assert!(q("-1").is_negative());
        assert!(!q("-0").is_negative());
        assert!(q("0Gi").is_zero());
    }

    #[test]
    fn not_quantities() {
        for bad in [
            "", "12Qi", "1.2.3", "abc", "1 Gi", " 1", "Gi", ".", "1e", "1e+", "1ee3", "--1",
            "1e99999", "1e61", "0x10", "1,5", "1Gb", "1mi",
        ] {
            let e = Quantity::parse(bad).unwrap_err();
            assert!(e.0.contains("is not a quantity"), "{bad}: {e}");
        }
    }

    #[test]
    fn too_large_is_none_not_a_wrap() {
        assert_eq!(q("1E").mib_ceil(), Some(953_674_316_407)); // 10^18 / 2^20 = ...406.25, up
        assert_eq!(q("100Ei").milli_ceil(), None);
        assert_eq!(q("999999999999999999999999999999e30").milli_floor(), None);
        assert_eq!(q("1e-60").milli_ceil(), Some(1));
        assert_eq!(q("1e-60").milli_floor(), Some(0));
    }
}
