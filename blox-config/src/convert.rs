//! TOML values to the format-free values a [`Section`](crate::Section)
//! holds, and back (a sweep writes its cells' configs as TOML).

use blox_core::config::{Table, Value};

/// `t` as a section's table. A TOML date or time is kept as its text
/// (no module reads one; a key that wants a string then takes its text).
pub fn from_toml(t: &toml::Table) -> Table {
    t.iter()
        .map(|(k, v)| (k.clone(), value_from_toml(v)))
        .collect()
}

/// One TOML value as a section's value.
pub fn value_from_toml(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::Integer(*i),
        toml::Value::Float(f) => Value::Float(*f),
        toml::Value::Boolean(b) => Value::Boolean(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(value_from_toml).collect()),
        toml::Value::Table(t) => Value::Table(from_toml(t)),
    }
}

/// A section's table as TOML.
pub fn to_toml(t: &Table) -> toml::Table {
    t.iter()
        .map(|(k, v)| (k.clone(), value_to_toml(v)))
        .collect()
}

/// One section value as TOML.
pub fn value_to_toml(v: &Value) -> toml::Value {
    match v {
        Value::String(s) => toml::Value::String(s.clone()),
        Value::Integer(i) => toml::Value::Integer(*i),
        Value::Float(f) => toml::Value::Float(*f),
        Value::Boolean(b) => toml::Value::Boolean(*b),
        Value::Array(a) => toml::Value::Array(a.iter().map(value_to_toml).collect()),
        Value::Table(t) => toml::Value::Table(to_toml(t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_goes_to_a_section_and_back_unchanged() {
        let text = "a = 1\nb = 2.5\nc = \"x\"\nd = [true, { e = -3 }]\n[f]\ng = nan\n";
        let t: toml::Table = toml::from_str(text).unwrap();
        let v = from_toml(&t);
        assert_eq!(v["a"], Value::Integer(1));
        assert_eq!(v["d"].as_array().unwrap()[1]["e"], Value::Integer(-3));
        assert!(v["f"]["g"].as_float().unwrap().is_nan());
        let back = to_toml(&v);
        assert_eq!(back["c"], t["c"]);
        assert_eq!(back["d"], t["d"]);
        assert_eq!(back["a"].to_string(), "1");
        let when: toml::Table = toml::from_str("at = 2026-11-29T10:00:00Z").unwrap();
        assert_eq!(
            from_toml(&when)["at"].as_str(),
            Some("2026-11-29T10:00:00Z")
        );
    }
}

/// What a module reads from a section is what it would read from the TOML
/// itself: the same value, or an error in both.
#[cfg(test)]
mod same_as_toml {
    use super::*;
    use proptest::prelude::*;
    use serde::Deserialize;
    use std::collections::BTreeMap;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Params {
        a: Option<u32>,
        b: Option<f64>,
        c: Option<String>,
        d: Option<Vec<i64>>,
        e: Option<Mode>,
        f: Option<BTreeMap<String, f64>>,
        g: Option<bool>,
        h: Option<[u8; 2]>,
        i: Option<Inner>,
        #[serde(default)]
        j: Vec<Inner>,
        k: Option<BTreeMap<Key, u32>>,
        l: Option<Vec<Mode>>,
    }

    /// A key type of a module's own.
    #[derive(Debug, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
    struct Key(String);

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        x: i32,
        #[serde(default)]
        y: Option<crate::Positive>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "kebab-case")]
    enum Mode {
        Fixed,
        YoungDaly,
        Every(u32),
        Pair(u8, u8),
        Span { from: u32, to: Option<u32> },
    }

    fn leaf() -> impl Strategy<Value = toml::Value> {
        prop_oneof![
            (-3i64..300).prop_map(toml::Value::Integer),
            any::<i64>().prop_map(toml::Value::Integer),
            prop_oneof![Just(0.5), Just(-2.0), Just(3.0), Just(1e300)].prop_map(toml::Value::Float),
            any::<bool>().prop_map(toml::Value::Boolean),
            prop_oneof![Just("fixed"), Just("young-daly"), Just("x"), Just("3")]
                .prop_map(|s| toml::Value::String(s.into())),
        ]
    }

    fn value() -> impl Strategy<Value = toml::Value> {
        leaf().prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(toml::Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("x"),
                        Just("y"),
                        Just("every"),
                        Just("k"),
                        Just("fixed"),
                        Just("pair"),
                        Just("span"),
                        Just("from"),
                        Just("to"),
                        Just("0"),
                        Just("1"),
                    ],
                    inner,
                    0..3
                )
                .prop_map(|m| toml::Value::Table(
                    m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
                )),
            ]
        })
    }

    fn table() -> impl Strategy<Value = toml::Table> {
        proptest::collection::btree_map(
            prop_oneof![
                Just("a"),
                Just("b"),
                Just("c"),
                Just("d"),
                Just("e"),
                Just("f"),
                Just("g"),
                Just("h"),
                Just("i"),
                Just("j"),
                Just("k"),
                Just("l"),
                Just("zz")
            ],
            value(),
            0..6,
        )
        .prop_map(|m| m.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn a_section_reads_as_its_toml_does(t in table()) {
            let from_toml: Result<Params, _> = toml::Value::Table(t.clone()).try_into();
            let from_section: Result<Params, _> = Value::Table(from_toml_table(&t)).into_typed();
            prop_assert_eq!(from_toml.is_ok(), from_section.is_ok(),
                "toml: {:?}, section: {:?}", from_toml, from_section);
            prop_assert_eq!(from_toml.ok(), from_section.ok());
            prop_assert_eq!(to_toml(&from_toml_table(&t)), t);
        }
    }

    fn from_toml_table(t: &toml::Table) -> Table {
        from_toml(t)
    }
}
