//! GPUs of one model are not equal: a slowdown factor per GPU and
//! application class (PAL, SC'24, §III: measured on TACC's Frontera,
//! Longhorn and Lonestar6, tens of percent apart per class).
//!
//! A job belongs to a class by its model (`classes`, else `default_class`);
//! on a set of GPUs it runs at the pace of its slowest one for its class
//! (the PAL artifact's `blox_manager.py`: the largest factor of the GPUs a
//! launch gets multiplies the iteration time). Placements that order GPUs
//! by speed (`pm-first`, `pal`) read the factors here.
//!
//! The factors come from a CSV (`[cluster.variability] factors`), read by
//! `blox-config`'s `variability` module, or from a worker's speed probe
//! ([`Variability::measured`]).

use crate::ids::GpuId;
use std::collections::BTreeMap;

/// The one class of factors measured on the GPUs themselves (a worker's
/// speed probe, a node's `gpu_slowdown`): every job belongs to it.
pub const MEASURED: &str = "measured";

/// Per-GPU, per-class slowdown factors (1 = the median GPU; 1.2 = 20 %
/// slower).
#[derive(Clone, Debug, PartialEq)]
pub struct Variability {
    classes: Vec<String>,
    /// `factor[gpu * classes.len() + class]`.
    factor: Vec<f64>,
    /// A model's class; others get `default_class`.
    class_of_model: BTreeMap<String, String>,
    default_class: String,
}

impl Variability {
    /// From `classes` and each GPU's factors in that order (one row per
    /// GPU, by GPU id). Factors must be finite and positive.
    pub fn new(
        classes: Vec<String>,
        rows: Vec<Vec<f64>>,
        class_of_model: BTreeMap<String, String>,
        default_class: String,
    ) -> Result<Self, String> {
        if classes.is_empty() {
            return Err("no classes".into());
        }
        let mut factor = Vec::with_capacity(rows.len() * classes.len());
        for (g, r) in rows.iter().enumerate() {
            if r.len() != classes.len() {
                return Err(format!(
                    "GPU {g}: {} factors for {} classes",
                    r.len(),
                    classes.len()
                ));
            }
            for (c, f) in r.iter().enumerate() {
                if !(f.is_finite() && *f > 0.0) {
                    return Err(format!(
                        "GPU {g}: class {}: factor {f} (must be finite and above 0)",
                        classes[c]
                    ));
                }
            }
            factor.extend_from_slice(r);
        }
        for c in class_of_model.values().chain([&default_class]) {
            if !classes.contains(c) {
                return Err(format!(
                    "class `{c}` has no factors (the classes are {})",
                    classes.join(", ")
                ));
            }
        }
        Ok(Variability {
            classes,
            factor,
            class_of_model,
            default_class,
        })
    }

    /// Factors of one class, [`MEASURED`], from each GPU's relative time
    /// (by GPU id; `None`: not measured, factor 1): each over the median
    /// of the measured ones. `None` when no GPU was measured.
    pub fn measured(times: &[Option<f64>]) -> Option<Self> {
        let mut m: Vec<f64> = times.iter().flatten().copied().collect();
        if m.is_empty() {
            return None;
        }
        m.sort_by(f64::total_cmp);
        let n = m.len();
        let median = if n % 2 == 1 {
            m[n / 2]
        } else {
            (m[n / 2 - 1] + m[n / 2]) / 2.0
        };
        let rows = times
            .iter()
            .map(|t| vec![t.map_or(1.0, |v| v / median)])
            .collect();
        Self::new(
            vec![MEASURED.to_string()],
            rows,
            BTreeMap::new(),
            MEASURED.to_string(),
        )
        .ok()
    }

    /// The classes, in the file's order.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// GPUs described.
    pub fn gpus(&self) -> usize {
        self.factor.len() / self.classes.len()
    }

    /// The class of a job running `model`.
    pub fn class_of(&self, model: Option<&str>) -> &str {
        model
            .and_then(|m| self.class_of_model.get(m))
            .unwrap_or(&self.default_class)
    }

    fn class_index(&self, class: &str) -> Option<usize> {
        self.classes.iter().position(|c| c == class)
    }

    /// `gpu`'s factor for `class` (`None`: GPU or class unknown).
    pub fn factor(&self, gpu: GpuId, class: &str) -> Option<f64> {
        let c = self.class_index(class)?;
        self.factor
            .get(gpu.index() * self.classes.len() + c)
            .copied()
    }

    /// The factors of every GPU for `class`, by GPU id.
    pub fn column(&self, class: &str) -> Option<Vec<f64>> {
        let c = self.class_index(class)?;
        Some(
            self.factor
                .chunks(self.classes.len())
                .map(|r| r[c])
                .collect(),
        )
    }

    /// The pace of a job of `class` on `gpus`: its slowest GPU's factor
    /// (1 for none, or for GPUs the table lacks).
    pub fn slowest(&self, gpus: &[GpuId], class: &str) -> f64 {
        gpus.iter()
            .filter_map(|g| self.factor(*g, class))
            .fold(None, |m: Option<f64>, f| Some(m.map_or(f, |m| m.max(f))))
            .unwrap_or(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_times_become_factors_over_their_median() {
        let v = Variability::measured(&[Some(2.0), Some(1.0), None, Some(1.0), Some(3.0)]).unwrap();
        // Median of 1, 1, 2, 3: 1.5; the unmeasured GPU counts 1.
        let f = v.column(MEASURED).unwrap();
        assert_eq!(f, vec![2.0 / 1.5, 1.0 / 1.5, 1.0, 1.0 / 1.5, 2.0]);
        assert_eq!(v.class_of(Some("anything")), MEASURED);
        assert!(Variability::measured(&[None, None]).is_none());
    }
}
