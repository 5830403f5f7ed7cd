//! Resource quantities (`500m`, `64Mi`, `1.5`, `2e3`): apimachinery's `resource.Quantity`,
//! parsed, added, compared and printed as Kubernetes does.
//!
//! A quantity is a number with an optional suffix: a binary one (`Ki`, `Mi`, `Gi`, `Ti`, `Pi`,
//! `Ei`, powers of 1024), a decimal SI one (`n`, `u`, `m`, `k`, `M`, `G`, `T`, `P`, `E`), or a
//! decimal exponent (`1e3`, `2E-3`). Its *format* is the family of the suffix it was written
//! with, and it is printed back in that family in canonical form (its `Display`, Go's
//! `Quantity.String()`): the largest suffix that keeps an integer mantissa, so `1000m` prints
//! `1`, `1536Mi` stays `1536Mi`, `1.5Gi` prints `1536Mi`, `0.5` prints `500m`. A binary value
//! that is not a whole number or lies strictly between -1024 and 1024 prints in decimal SI
//! (`0.5Ki` is `512`). Sums keep the format of the left operand (a zero takes the right one's),
//! as `Quantity.Add` does.
//!
//! Values are held exactly in nano units (`10^-9`) in an `i128`, which covers every quantity
//! Kubernetes accepts (up to `8E`, and fractions down to `1n`); a finer fraction is rounded up
//! to the next nano unit, as Go rounds it up when it parses.

use std::cmp::Ordering;
use std::fmt;

/// How a quantity prints: the suffix family it was written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `Ki`, `Mi`, ... (powers of 1024).
    BinarySi,
    /// `m`, `k`, `M`, ... or no suffix.
    DecimalSi,
    /// `e3`, `E-3`.
    DecimalExponent,
}

/// A parsed quantity (see the module docs).
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

/// Go's message for a string that is not a quantity (`resource.ErrFormatWrong`).
pub const FORMAT_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// A whole number in decimal SI (`count/pods=3`).
    pub fn from_int(n: i64) -> Self {
        Quantity {
            nanos: i128::from(n) * NANO,
            format: Format::DecimalSi,
        }
    }

    /// Zero, printed `0`.
    pub fn zero() -> Self {
        Self::from_int(0)
    }

    /// Parses `s` as `resource.ParseQuantity` does; the error is Go's message.
    pub fn parse(s: &str) -> Result<Self, String> {
        let err = || FORMAT_ERROR.to_owned();
        if s.is_empty() {
            return Err(err());
        }
        let (negative, rest) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(num_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(err());
        }
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        // The suffix: binary, decimal SI, or an exponent.
        let (base, exp, format) = match suffix {
            "" => (10u32, 0i32, Format::DecimalSi),
            "Ki" => (2, 10, Format::BinarySi),
            "Mi" => (2, 20, Format::BinarySi),
            "Gi" => (2, 30, Format::BinarySi),
            "Ti" => (2, 40, Format::BinarySi),
            "Pi" => (2, 50, Format::BinarySi),
            "Ei" => (2, 60, Format::BinarySi),
            "n" => (10, -9, Format::DecimalSi),
            "u" => (10, -6, Format::DecimalSi),
            "m" => (10, -3, Format::DecimalSi),
            "k" => (10, 3, Format::DecimalSi),
            "M" => (10, 6, Format::DecimalSi),
            "G" => (10, 9, Format::DecimalSi),
            "T" => (10, 12, Format::DecimalSi),
            "P" => (10, 15, Format::DecimalSi),
            "E" => (10, 18, Format::DecimalSi),
            other => {
                let digits = other
                    .strip_prefix('e')
                    .or_else(|| other.strip_prefix('E'))
                    .ok_or_else(err)?;
                let e: i32 = digits.parse().map_err(|_| err())?;
                (10, e, Format::DecimalExponent)
            }
        };
        // The number as an integer `mantissa` times 10^-frac_digits.
        let digits = format!("{int_part}{frac_part}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > 30 {
            return Err(err());
        }
        let mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| err())?
        };
        let frac_digits = frac_part.len() as i32;
        // nanos = mantissa * base^exp * 10^(9 - frac_digits), rounded up.
        let (mut num, mut den): (i128, i128) = (mantissa, 1);
        if base == 2 {
            num = num.checked_shl(exp as u32).ok_or_else(err)?;
        }
        let ten_exp = 9 - frac_digits + if base == 10 { exp } else { 0 };
        if ten_exp >= 0 {
            num = num
                .checked_mul(10i128.checked_pow(ten_exp as u32).ok_or_else(err)?)
                .ok_or_else(err)?;
        } else {
            den = 10i128.checked_pow((-ten_exp) as u32).ok_or_else(err)?;
        }
        let mut nanos = num / den + i128::from(num % den != 0);
        if nanos > i128::from(i64::MAX) * NANO {
            return Err(err());
        }
        if negative {
            nanos = -nanos;
        }
        Ok(Quantity { nanos, format })
    }

    /// The format (suffix family) this quantity prints in.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// Whether the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// The value in thousandths, rounded up (Go's `MilliValue`).
    pub fn milli_value(&self) -> i128 {
        let (q, r) = (self.nanos / 1_000_000, self.nanos % 1_000_000);
        q + i128::from(r > 0)
    }

    /// `self + other`, in `self`'s format (or `other`'s when `self` is zero), as `Quantity.Add`.
    pub fn add(&self, other: &Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos + other.nanos,
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        }
    }

    /// The larger of the two (the first when equal), as `quota.Max` keeps one.
    pub fn max(self, other: Quantity) -> Quantity {
        if other.nanos > self.nanos {
            other
        } else {
            self
        }
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

/// `mantissa` without its factors of `base`, and how many were removed.
fn remove_factors(mut mantissa: i128, base: i128) -> (i128, i32) {
    let mut times = 0;
    while mantissa != 0 && mantissa % base == 0 {
        mantissa /= base;
        times += 1;
    }
    (mantissa, times)
}

impl fmt::Display for Quantity {
    /// The canonical form, as Go's `Quantity.String()` (see the module docs).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let whole = self.nanos % NANO == 0;
        let binary = self.format == Format::BinarySi
            && whole
            && !(-1024 * NANO < self.nanos && self.nanos < 1024 * NANO);
        if binary {
            let (amount, times) = remove_factors(self.nanos / NANO, 1024);
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
            return match suffix.get(times as usize) {
                Some(s) => write!(f, "{amount}{s}"),
                None => write!(f, "{}Ei", amount * 1024i128.pow(times as u32 - 6)),
            };
        }
        // Decimal: mantissa * 10^exponent with the exponent a multiple of 3.
        let (mut amount, times) = remove_factors(self.nanos, 10);
        let mut exponent = times - 9;
        match exponent.rem_euclid(3) {
            1 => {
                amount *= 10;
                exponent -= 1;
            }
            2 => {
                amount *= 100;
                exponent -= 2;
            }
            _ => {}
        }
        if self.format == Format::DecimalExponent {
            return if exponent == 0 {
                write!(f, "{amount}")
            } else {
                write!(f, "{amount}e{exponent}")
            };
        }
        let suffix = match exponent {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            0 => "",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            18 => "E",
            _ => return write!(f, "{amount}e{exponent}"),
        };
        write!(f, "{amount}{suffix}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> String {
        Quantity::parse(s).unwrap().to_string()
    }

    #[test]
    fn canonical_forms_as_go_prints_them() {
        for (input, want) in [
            ("0", "0"),
            ("1", "1"),
            ("1000m", "1"),
            ("100m", "100m"),
            ("0.5", "500m"),
            ("1.5", "1500m"),
            ("1500", "1500"),
            ("2000", "2k"),
            ("64Mi", "64Mi"),
            ("1.5Gi", "1536Mi"),
            ("1024", "1024"),
            ("1024Ki", "1Mi"),
            ("0.5Ki", "512"),
            ("1e3", "1e3"),
            ("1E6", "1e6"),
            ("128974848", "128974848"),
            ("129e6", "129e6"),
            ("123Mi", "123Mi"),
            ("1n", "1n"),
            ("10G", "10G"),
            ("-1", "-1"),
            ("+5", "5"),
            (".5", "500m"),
        ] {
            assert_eq!(canon(input), want, "{input}");
        }
    }

    #[test]
    fn sums_keep_the_left_format() {
        let a = Quantity::parse("500m").unwrap();
        let b = Quantity::parse("1").unwrap();
        assert_eq!(a.add(&b).to_string(), "1500m");
        let mi = Quantity::parse("64Mi").unwrap();
        assert_eq!(
            mi.add(&Quantity::parse("128Mi").unwrap()).to_string(),
            "192Mi"
        );
        assert_eq!(Quantity::zero().add(&mi).to_string(), "64Mi");
        assert!(Quantity::parse("1").unwrap() < Quantity::parse("1001m").unwrap());
        assert_eq!(
            Quantity::parse("1Ki").unwrap(),
            Quantity::parse("1024").unwrap()
        );
    }

    #[test]
    fn what_is_not_a_quantity() {
        for bad in ["", "abc", "1x", "1..0", "Mi", "1Mib", "--1", "1e"] {
            assert_eq!(Quantity::parse(bad).unwrap_err(), FORMAT_ERROR, "{bad}");
        }
        assert_eq!(
            Quantity::parse("1.0000000001").unwrap().to_string(),
            "1000000001n"
        );
        assert_eq!(Quantity::parse("250m").unwrap().milli_value(), 250);
    }
}
