//! Numbers of a config that mean an amount: seconds, rates, counts, sizes.
//!
//! Each is checked where it is typed: deserialising a [`Positive`] from
//! `-3`, `0`, `inf` or `nan` fails, and [`super::Section::parse`] turns that
//! failure into an error naming the file, the line and the key. A module's
//! own parameters use them the same way:
//!
//! ```
//! use blox_core::config::{NonNegative, Positive, Section, Value};
//! #[derive(serde::Deserialize)]
//! struct Params {
//!     interval_s: Positive,
//!     slack_s: Option<NonNegative>,
//! }
//! // A section as a config file's `interval_s = 30` gives it.
//! let section = |keys: &[(&str, f64)]| {
//!     let table = keys.iter().map(|(k, v)| (k.to_string(), Value::from(*v)));
//!     Section::from_table("p", table.collect())
//! };
//! let p: Params = section(&[("interval_s", 30.0)]).parse().unwrap();
//! assert_eq!(p.interval_s.get(), 30.0);
//! assert!(section(&[("interval_s", 0.0)]).parse::<Params>().is_err());
//! assert!(section(&[("interval_s", 1.0), ("slack_s", -1.0)]).parse::<Params>().is_err());
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
    use crate::config::{Table, Value};

    #[derive(Deserialize, Debug)]
    struct P {
        a: Positive,
        b: Option<NonNegative>,
    }

    /// `P` read from a table of these keys, as a config file writes them.
    fn read(keys: &[(&str, Value)]) -> Result<P, String> {
        let t: Table = keys
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        Value::Table(t).into_typed().map_err(|e| e.to_string())
    }

    #[test]
    fn amounts_refuse_what_they_cannot_mean() {
        let p = read(&[("a", 2.into()), ("b", 0.into())]).unwrap();
        assert_eq!((p.a.get(), p.b.map(NonNegative::get)), (2.0, Some(0.0)));
        assert_eq!(*read(&[("a", 0.5.into())]).unwrap().a, 0.5);
        let one = || ("a", Value::from(1));
        for (keys, says) in [
            (vec![("a", 0.into())], "0 is not a finite number above 0"),
            (
                vec![("a", (-1.5).into())],
                "-1.5 is not a finite number above 0",
            ),
            (
                vec![("a", f64::INFINITY.into())],
                "inf is not a finite number above 0",
            ),
            (
                vec![("a", f64::NAN.into())],
                "NaN is not a finite number above 0",
            ),
            (
                vec![one(), ("b", (-1).into())],
                "-1 is not a finite number of 0 or more",
            ),
            (
                vec![one(), ("b", f64::NEG_INFINITY.into())],
                "-inf is not a finite number of 0 or more",
            ),
            (vec![("a", "3".into())], "expected f64"),
        ] {
            let e = read(&keys).unwrap_err();
            assert!(e.contains(says), "{keys:?}: {e}");
        }
        assert!(Positive::new(f64::MIN_POSITIVE).is_ok());
        assert!(NonNegative::new(-0.0).is_ok());
    }
}
