//! The values a config section holds, independent of the file format that
//! wrote them: strings, integers, floats, booleans, arrays and tables (the
//! types TOML has; a reader maps its format onto them). A section is
//! deserialised from these by serde, so a module's parameter struct reads
//! the same whatever file format the config came in.

use super::de::ValueError;
use serde::de::{self, Unexpected, Visitor};
use serde::ser::{SerializeMap, SerializeSeq};
use std::collections::BTreeMap;
use std::fmt;

/// A table of keys and values, in key order.
pub type Table = BTreeMap<String, Value>;

/// One value of a config.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    String(String),
    Integer(i64),
    Float(f64),
    Boolean(bool),
    Array(Vec<Value>),
    Table(Table),
}

impl Value {
    /// The type's name as a config file calls it (`string`, `integer`,
    /// `float`, `boolean`, `array`, `table`), for messages.
    pub fn type_str(&self) -> &'static str {
        match self {
            Value::String(_) => "string",
            Value::Integer(_) => "integer",
            Value::Float(_) => "float",
            Value::Boolean(_) => "boolean",
            Value::Array(_) => "array",
            Value::Table(_) => "table",
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_integer(&self) -> Option<i64> {
        match self {
            Value::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// A float (an integer is not one: see [`Value::as_number`]).
    pub fn as_float(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// A float, or an integer read as one.
    pub fn as_number(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            Value::Integer(i) => Some(*i as f64),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Boolean(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Vec<Value>> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    pub fn as_table(&self) -> Option<&Table> {
        match self {
            Value::Table(t) => Some(t),
            _ => None,
        }
    }

    pub fn as_table_mut(&mut self) -> Option<&mut Table> {
        match self {
            Value::Table(t) => Some(t),
            _ => None,
        }
    }

    pub fn is_table(&self) -> bool {
        matches!(self, Value::Table(_))
    }

    /// Deserialises `T` from this value (`Value::Table(t).into_typed()`).
    pub fn into_typed<T: de::DeserializeOwned>(self) -> Result<T, ValueError> {
        T::deserialize(self)
    }

    pub(super) fn unexpected(&self) -> Unexpected<'_> {
        match self {
            Value::String(s) => Unexpected::Str(s),
            Value::Integer(i) => Unexpected::Signed(*i),
            Value::Float(f) => Unexpected::Float(*f),
            Value::Boolean(b) => Unexpected::Bool(*b),
            Value::Array(_) => Unexpected::Seq,
            Value::Table(_) => Unexpected::Map,
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::String(s)
    }
}
impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Integer(i)
    }
}
impl From<f64> for Value {
    fn from(f: f64) -> Self {
        Value::Float(f)
    }
}
impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Boolean(b)
    }
}
impl From<Table> for Value {
    fn from(t: Table) -> Self {
        Value::Table(t)
    }
}

impl std::ops::Index<&str> for Value {
    type Output = Value;
    /// The value at `key` of a table; panics if this is no table or the key
    /// is missing (tests; code uses [`Value::as_table`]).
    fn index(&self, key: &str) -> &Value {
        match self.as_table().and_then(|t| t.get(key)) {
            Some(v) => v,
            None => panic!("no key `{key}` in this {}", self.type_str()),
        }
    }
}

impl serde::Serialize for Value {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::String(v) => s.serialize_str(v),
            Value::Integer(v) => s.serialize_i64(*v),
            Value::Float(v) => s.serialize_f64(*v),
            Value::Boolean(v) => s.serialize_bool(*v),
            Value::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    seq.serialize_element(v)?;
                }
                seq.end()
            }
            Value::Table(t) => {
                let mut map = s.serialize_map(Some(t.len()))?;
                for (k, v) in t {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> serde::Deserialize<'de> for Value {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Value;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a config value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
                Ok(Value::Boolean(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
                Ok(Value::Integer(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
                i64::try_from(v).map(Value::Integer).map_err(|_| {
                    E::invalid_value(Unexpected::Unsigned(v), &"an integer below 2^63")
                })
            }
            fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
                Ok(Value::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Value, E> {
                Ok(Value::String(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> Result<Value, E> {
                Ok(Value::String(v))
            }
            fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
                <Value as serde::Deserialize>::deserialize(d)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = a.next_element()? {
                    out.push(v);
                }
                Ok(Value::Array(out))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut a: A) -> Result<Value, A::Error> {
                let mut out = Table::new();
                while let Some((k, v)) = a.next_entry::<String, Value>()? {
                    out.insert(k, v);
                }
                Ok(Value::Table(out))
            }
        }
        d.deserialize_any(V)
    }
}
