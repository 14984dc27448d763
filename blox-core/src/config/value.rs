//! The values a config section holds, independent of the file format that
//! wrote them: strings, integers, floats, booleans, arrays and tables (the
//! types TOML has; a reader maps its format onto them). A section is
//! deserialised from these by serde, so a module's parameter struct reads
//! the same whatever file format the config came in.

use serde::de::value::{MapDeserializer, SeqDeserializer};
use serde::de::{self, IntoDeserializer, Unexpected, Visitor};
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

/// The error of deserialising a [`Value`]: its message only (the section
/// adds where the key was written).
pub type ValueError = de::value::Error;

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

    fn unexpected(&self) -> Unexpected<'_> {
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

impl<'de> de::Deserializer<'de> for Value {
    type Error = ValueError;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, ValueError> {
        match self {
            Value::String(s) => v.visit_string(s),
            Value::Integer(i) => v.visit_i64(i),
            Value::Float(f) => v.visit_f64(f),
            Value::Boolean(b) => v.visit_bool(b),
            Value::Array(a) => {
                let mut seq = SeqDeserializer::new(a.into_iter());
                let out = v.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(out)
            }
            Value::Table(t) => {
                // Keys as values, so that a key type of a module's own (a
                // newtype over a string) reads as it does from the file.
                let mut map =
                    MapDeserializer::new(t.into_iter().map(|(k, v)| (Value::String(k), v)));
                let out = v.visit_map(&mut map)?;
                map.end()?;
                Ok(out)
            }
        }
    }

    /// A config has no null: a value that is written is `Some`.
    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, ValueError> {
        v.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, ValueError> {
        v.visit_newtype_struct(self)
    }

    /// A unit variant is its name (`"young-daly"`); a variant with data is
    /// a table of one key (`{ every = 3 }`).
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, ValueError> {
        match self {
            Value::String(s) => v.visit_enum(s.into_deserializer()),
            Value::Table(t) if t.len() == 1 => {
                let (name, value) = t.into_iter().next().expect("a table of one key");
                v.visit_enum(Variant { name, value })
            }
            other => Err(de::Error::invalid_type(
                other.unexpected(),
                &"a variant's name, or a table of one key",
            )),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 u8 u16 u32 u64 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}

/// A variant written as a table of one key: `{ every = 3 }`.
struct Variant {
    name: String,
    value: Value,
}

impl<'de> de::EnumAccess<'de> for Variant {
    type Error = ValueError;
    type Variant = Value;
    fn variant_seed<S: de::DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Value), ValueError> {
        Ok((seed.deserialize(Value::String(self.name))?, self.value))
    }
}

/// The data of a variant written as `{ name = data }`.
impl<'de> de::VariantAccess<'de> for Value {
    type Error = ValueError;

    /// A variant without data takes an empty table or array.
    fn unit_variant(self) -> Result<(), ValueError> {
        match self {
            Value::Table(t) if t.is_empty() => Ok(()),
            Value::Array(a) if a.is_empty() => Ok(()),
            other => Err(de::Error::invalid_type(
                other.unexpected(),
                &"an empty table (the variant takes no value)",
            )),
        }
    }

    fn newtype_variant_seed<S: de::DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<S::Value, ValueError> {
        seed.deserialize(self)
    }

    /// An array, or a table keyed `0`, `1`, … in order.
    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, v: V) -> Result<V::Value, ValueError> {
        match self {
            Value::Table(t) => {
                let mut items: Vec<(usize, Value)> = Vec::with_capacity(t.len());
                for (k, x) in t {
                    let i = k.parse::<usize>().map_err(|_| {
                        de::Error::invalid_value(Unexpected::Str(&k), &"an index 0, 1, …")
                    })?;
                    items.push((i, x));
                }
                items.sort_by_key(|(i, _)| *i);
                if items.iter().enumerate().any(|(n, (i, _))| n != *i) {
                    return Err(de::Error::custom(
                        "a tuple's indices must run 0, 1, … without a gap",
                    ));
                }
                de::Deserializer::deserialize_seq(
                    Value::Array(items.into_iter().map(|(_, x)| x).collect()),
                    v,
                )
            }
            other => de::Deserializer::deserialize_seq(other, v),
        }
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, ValueError> {
        de::Deserializer::deserialize_any(self, v)
    }
}

impl<'de> IntoDeserializer<'de, ValueError> for Value {
    type Deserializer = Value;
    fn into_deserializer(self) -> Value {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    fn table(pairs: &[(&str, Value)]) -> Value {
        Value::Table(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct P {
        a: u32,
        b: Option<f64>,
        c: Vec<String>,
        #[serde(default)]
        mode: Mode,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(rename_all = "kebab-case")]
    enum Mode {
        #[default]
        Fixed,
        YoungDaly,
        Every(u32),
    }

    #[test]
    fn a_table_reads_into_a_typed_struct_as_serde_would_from_a_file() {
        let v = table(&[
            ("a", 3.into()),
            ("b", 2.into()),
            ("c", Value::Array(vec!["x".into()])),
            ("mode", "young-daly".into()),
        ]);
        let p: P = v.clone().into_typed().unwrap();
        assert_eq!(
            p,
            P {
                a: 3,
                b: Some(2.0),
                c: vec!["x".into()],
                mode: Mode::YoungDaly
            }
        );
        let every = table(&[
            ("a", 0.into()),
            ("c", Value::Array(vec![])),
            ("mode", table(&[("every", 4.into())])),
        ]);
        assert_eq!(every.into_typed::<P>().unwrap().mode, Mode::Every(4));
        // The value round-trips through itself.
        assert_eq!(Value::deserialize(v.clone()).unwrap(), v);
    }

    #[test]
    fn mistakes_read_as_serde_words_them() {
        let bad = |v: Value| v.into_typed::<P>().unwrap_err().to_string();
        let base = || vec![("a", Value::from(1)), ("c", Value::Array(vec![]))];
        let mut with = base();
        with.push(("zz", 1.into()));
        assert!(bad(table(&with)).starts_with("unknown field `zz`"));
        assert_eq!(bad(table(&[("a", 1.into())])), "missing field `c`");
        let mut neg = base();
        neg[0].1 = (-1).into();
        assert_eq!(
            bad(table(&neg)),
            "invalid value: integer `-1`, expected u32"
        );
        let mut float = base();
        float[0].1 = 1.5.into();
        assert_eq!(
            bad(table(&float)),
            "invalid type: floating point `1.5`, expected u32"
        );
        let mut mode = base();
        mode.push(("mode", 3.into()));
        assert!(bad(table(&mode)).contains("expected a variant's name"));
    }
}
