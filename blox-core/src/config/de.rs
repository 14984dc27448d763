//! How serde reads a config [`Value`]: the deserialiser a module's
//! parameter struct is read through, and its error, which says where in the
//! value it arose.

use super::value::{Table, Value};
use serde::de::{self, IntoDeserializer, Unexpected, Visitor};
use std::fmt;

/// The error of deserialising a [`Value`]: serde's message (its `Display`)
/// and where in the value it arose (the section adds where the key was
/// written).
///
/// The path is tracked by the deserialiser itself, each table, array and
/// variant naming itself as an error passes out through it, so a module's
/// parameter struct is compiled against this one deserialiser only.
#[derive(Clone, Debug, PartialEq)]
pub struct ValueError {
    message: String,
    /// From the innermost segment out.
    within: Vec<String>,
}

impl ValueError {
    /// serde's words for what went wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Where the error arose, from the top: table keys, array indices (`0`,
    /// `1`, …) and the variants of enums written as a table of one key.
    pub fn path(&self) -> impl Iterator<Item = &str> {
        self.within.iter().rev().map(String::as_str)
    }

    fn within(mut self, segment: String) -> Self {
        self.within.push(segment);
        self
    }
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ValueError {}

impl de::Error for ValueError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        ValueError {
            message: msg.to_string(),
            within: Vec::new(),
        }
    }
}

/// What a table or array that was not read to its end expected, worded as
/// serde words it (`invalid length 3, expected 2 elements in map`).
struct Read(usize, &'static str);

impl de::Expected for Read {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            1 => write!(f, "1 element in {}", self.1),
            n => write!(f, "{n} elements in {}", self.1),
        }
    }
}

/// An error if a visitor left `left` of a table's or array's items unread
/// after reading `read`.
fn read_to_end(read: usize, left: usize, what: &'static str) -> Result<(), ValueError> {
    match left {
        0 => Ok(()),
        _ => Err(de::Error::invalid_length(read + left, &Read(read, what))),
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
                let mut items = Items {
                    iter: a.into_iter(),
                    read: 0,
                };
                let out = v.visit_seq(&mut items)?;
                read_to_end(items.read, items.iter.len(), "sequence")?;
                Ok(out)
            }
            Value::Table(t) => {
                let mut entries = Entries {
                    iter: t.into_iter(),
                    value: None,
                    read: 0,
                };
                let out = v.visit_map(&mut entries)?;
                read_to_end(entries.read, entries.iter.len(), "map")?;
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
            Value::String(name) => v.visit_enum(Variant { name, value: None }),
            Value::Table(t) if t.len() == 1 => match t.into_iter().next() {
                Some((name, value)) => v.visit_enum(Variant {
                    name,
                    value: Some(value),
                }),
                None => Err(de::Error::custom("a table of one key has none")),
            },
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

/// An array's elements, each error naming its index.
struct Items {
    iter: std::vec::IntoIter<Value>,
    read: usize,
}

impl<'de> de::SeqAccess<'de> for Items {
    type Error = ValueError;

    fn next_element_seed<S: de::DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, ValueError> {
        let Some(value) = self.iter.next() else {
            return Ok(None);
        };
        let index = self.read;
        self.read += 1;
        seed.deserialize(value)
            .map(Some)
            .map_err(|e| e.within(index.to_string()))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// A table's entries, each error naming its key. Keys are read as values,
/// so that a key type of a module's own (a newtype over a string) reads as
/// it does from the file.
struct Entries {
    iter: std::collections::btree_map::IntoIter<String, Value>,
    /// The value of the key just read.
    value: Option<(String, Value)>,
    read: usize,
}

impl<'de> de::MapAccess<'de> for Entries {
    type Error = ValueError;

    fn next_key_seed<S: de::DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, ValueError> {
        let Some((key, value)) = self.iter.next() else {
            return Ok(None);
        };
        self.read += 1;
        let k = seed
            .deserialize(Value::String(key.clone()))
            .map_err(|e| e.within(key.clone()))?;
        self.value = Some((key, value));
        Ok(Some(k))
    }

    fn next_value_seed<S: de::DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, ValueError> {
        let Some((key, value)) = self.value.take() else {
            return Err(de::Error::custom("a value was asked for before its key"));
        };
        seed.deserialize(value).map_err(|e| e.within(key))
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// A variant written as its name (`"young-daly"`, no value) or as a table
/// of one key (`{ every = 3 }`).
struct Variant {
    name: String,
    value: Option<Value>,
}

impl<'de> de::EnumAccess<'de> for Variant {
    type Error = ValueError;
    type Variant = Variant;
    fn variant_seed<S: de::DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Variant), ValueError> {
        Ok((seed.deserialize(Value::String(self.name.clone()))?, self))
    }
}

/// A variant's data; an error in it names the variant.
impl<'de> de::VariantAccess<'de> for Variant {
    type Error = ValueError;

    /// A variant without data is its name alone, or takes an empty table
    /// or array.
    fn unit_variant(self) -> Result<(), ValueError> {
        match self.value {
            None => Ok(()),
            Some(Value::Table(t)) if t.is_empty() => Ok(()),
            Some(Value::Array(a)) if a.is_empty() => Ok(()),
            Some(other) => Err(de::Error::invalid_type(
                other.unexpected(),
                &"an empty table (the variant takes no value)",
            )),
        }
        .map_err(|e: ValueError| e.within(self.name))
    }

    fn newtype_variant_seed<S: de::DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<S::Value, ValueError> {
        match self.value {
            None => Err(unit_only("newtype variant")),
            Some(v) => seed.deserialize(v),
        }
        .map_err(|e| e.within(self.name))
    }

    /// An array, or a table keyed `0`, `1`, … in order.
    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, v: V) -> Result<V::Value, ValueError> {
        match self.value {
            None => Err(unit_only("tuple variant")),
            Some(Value::Table(t)) => tuple_of(t, v),
            Some(other) => de::Deserializer::deserialize_seq(other, v),
        }
        .map_err(|e| e.within(self.name))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, ValueError> {
        match self.value {
            None => Err(unit_only("struct variant")),
            Some(value) => de::Deserializer::deserialize_any(value, v),
        }
        .map_err(|e| e.within(self.name))
    }
}

/// A variant written as its name alone where the type wants `what` (a
/// newtype, tuple or struct variant), in serde's words.
fn unit_only(what: &'static str) -> ValueError {
    de::Error::invalid_type(Unexpected::UnitVariant, &what)
}

/// A tuple written as a table keyed `0`, `1`, … without a gap.
fn tuple_of<'de, V: Visitor<'de>>(t: Table, v: V) -> Result<V::Value, ValueError> {
    let mut items: Vec<(usize, Value)> = Vec::with_capacity(t.len());
    for (k, x) in t {
        let i = k
            .parse::<usize>()
            .map_err(|_| de::Error::invalid_value(Unexpected::Str(&k), &"an index 0, 1, …"))?;
        items.push((i, x));
    }
    items.sort_by_key(|(i, _)| *i);
    if items.iter().enumerate().any(|(n, (i, _))| n != *i) {
        return Err(de::Error::custom(
            "a tuple's indices must run 0, 1, … without a gap",
        ));
    }
    de::Deserializer::deserialize_seq(Value::Array(items.into_iter().map(|(_, x)| x).collect()), v)
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

    #[test]
    fn an_error_names_the_keys_indices_and_variant_where_it_arose() {
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Outer {
            inner: Vec<Inner>,
            mode: Option<Mode>,
        }
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Inner {
            x: u32,
        }
        let err = |v: Value| {
            let e = v.into_typed::<Outer>().unwrap_err();
            (e.path().collect::<Vec<_>>().join("."), e.to_string())
        };
        let inner = |items: Vec<Value>| ("inner", Value::Array(items));
        let two = inner(vec![table(&[("x", 1.into())]), table(&[("x", "a".into())])]);
        assert_eq!(
            err(table(&[two])),
            (
                "inner.1.x".to_string(),
                "invalid type: string \"a\", expected u32".to_string()
            )
        );
        let (at, message) = err(table(&[inner(vec![table(&[("y", 1.into())])])]));
        assert_eq!(at, "inner.0.y");
        assert!(message.starts_with("unknown field `y`"), "{message}");
        assert_eq!(
            err(table(&[inner(vec![table(&[])])])),
            ("inner.0".to_string(), "missing field `x`".to_string())
        );
        let mode = |m: Value| table(&[inner(vec![]), ("mode", m)]);
        assert_eq!(
            err(mode(table(&[("every", "3".into())]))),
            (
                "mode.every".to_string(),
                "invalid type: string \"3\", expected u32".to_string()
            )
        );
        assert_eq!(
            err(mode("every".into())),
            (
                "mode.every".to_string(),
                "invalid type: unit variant, expected newtype variant".to_string()
            )
        );
        let (at, message) = err(mode("sometimes".into()));
        assert_eq!(at, "mode");
        assert!(
            message.starts_with("unknown variant `sometimes`"),
            "{message}"
        );
        // Nothing wrong: no error, and an empty path at the top.
        assert!(table(&[inner(vec![])]).into_typed::<Outer>().is_ok());
        let top = table(&[]).into_typed::<Outer>().unwrap_err();
        assert_eq!(
            (top.path().count(), top.message()),
            (0, "missing field `inner`")
        );
    }

    #[test]
    fn what_a_visitor_leaves_unread_is_an_error_in_serdes_words() {
        let two = Value::Array(vec![1.into(), 2.into()]);
        assert_eq!(
            two.into_typed::<(u32,)>().unwrap_err().to_string(),
            "invalid length 2, expected 1 element in sequence"
        );
        let three = Value::Array(vec![1.into(), 2.into(), 3.into()]);
        assert_eq!(
            three.into_typed::<(u32, u32)>().unwrap_err().to_string(),
            "invalid length 3, expected 2 elements in sequence"
        );
    }
}
