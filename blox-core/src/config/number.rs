//! Numbers of a config that mean an amount: seconds, rates, counts, sizes.
//!
//! Each is checked where it is typed: deserialising a [`Positive`] from
//! `-3`, `0`, `inf` or `nan` fails, and [`super::Section::parse`] turns that
//! failure into an error naming the file, the line and the key. A module's
//! own parameters use them the same way:
//!
//! ```
//! use blox_core::config::{NonNegative, Positive};
//! #[derive(serde::Deserialize)]
//! struct Params {
//!     interval_s: Positive,
//!     slack_s: Option<NonNegative>,
//! }
//! let p: Params = toml::from_str("interval_s = 30").unwrap();
//! assert_eq!(p.interval_s.get(), 30.0);
//! assert!(toml::from_str::<Params>("interval_s = 0").is_err());
//! assert!(toml::from_str::<Params>("interval_s = 1\nslack_s = -1").is_err());
//! ```

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

macro_rules! amount {
    ($name:ident, $what:literal, $ok:expr) => {
        #[doc = concat!("A finite number ", $what, " (integers are accepted).")]
        #[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
        pub struct $name(f64);

        impl $name {
            /// `v` if it is finite and
            #[doc = concat!($what, ";")]
            /// else a message saying what is wrong.
            pub fn new(v: f64) -> Result<Self, String> {
                let ok: fn(f64) -> bool = $ok;
                if v.is_finite() && ok(v) {
                    Ok($name(v))
                } else {
                    Err(format!(concat!("{} is not a finite number ", $what), v))
                }
            }

            /// The number.
            pub fn get(self) -> f64 {
                self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = f64;
            fn deref(&self) -> &f64 {
                &self.0
            }
        }

        impl From<$name> for f64 {
            fn from(v: $name) -> f64 {
                v.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let v = f64::deserialize(d)?;
                $name::new(v).map_err(serde::de::Error::custom)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_f64(self.0)
            }
        }
    };
}

amount!(Positive, "above 0", |v| v > 0.0);
amount!(NonNegative, "of 0 or more", |v| v >= 0.0);

impl Positive {
    /// For defaults written in code; panics on a value that is not positive
    /// (a bug in the default, never a user's input).
    pub const fn of(v: f64) -> Positive {
        assert!(v > 0.0 && v < f64::INFINITY, "a positive default");
        Positive(v)
    }
}

impl NonNegative {
    /// For defaults written in code (see [`Positive::of`]).
    pub const fn of(v: f64) -> NonNegative {
        assert!(v >= 0.0 && v < f64::INFINITY, "a non-negative default");
        NonNegative(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Debug)]
    struct P {
        a: Positive,
        b: Option<NonNegative>,
    }

    #[test]
    fn amounts_refuse_what_they_cannot_mean() {
        let p: P = toml::from_str("a = 2\nb = 0").unwrap();
        assert_eq!((p.a.get(), p.b.map(NonNegative::get)), (2.0, Some(0.0)));
        assert_eq!(*toml::from_str::<P>("a = 0.5").unwrap().a, 0.5);
        for (text, says) in [
            ("a = 0", "0 is not a finite number above 0"),
            ("a = -1.5", "-1.5 is not a finite number above 0"),
            ("a = inf", "inf is not a finite number above 0"),
            ("a = nan", "NaN is not a finite number above 0"),
            ("a = 1\nb = -1", "-1 is not a finite number of 0 or more"),
            (
                "a = 1\nb = -inf",
                "-inf is not a finite number of 0 or more",
            ),
            ("a = \"3\"", "expected f64"),
        ] {
            let e = toml::from_str::<P>(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
        assert!(Positive::new(f64::MIN_POSITIVE).is_ok());
        assert!(NonNegative::new(-0.0).is_ok());
    }
}
