//! Where profiles come from: the `traces/` folder beside a workload, a
//! cache that loads each application's profile once, and profiles derived
//! from a measured one (`imagenet(scale=0.5,epochs=4)`: ONES's dataset
//! subsets).

use super::*;

/// Where the artifacts keep the profiles of a workload file: the `traces/`
/// folder beside the workload's folder (Pollux: `…/workloads/workload-1.csv`
/// → `…/traces/`), or beside the folder of workload families (Sia:
/// `…/workloads/philly/workload-1.csv` → `…/traces/`): the nearest such
/// folder up the path, else the first.
pub fn profiles_beside(workload: &Path) -> PathBuf {
    let first = workload
        .parent()
        .and_then(|p| p.parent())
        .map(|p| p.join("traces"))
        .unwrap_or_else(|| PathBuf::from("traces"));
    if first.is_dir() {
        return first;
    }
    workload
        .ancestors()
        .skip(2)
        .take(3)
        .map(|p| p.join("traces"))
        .find(|t| t.is_dir())
        .unwrap_or(first)
}

/// Profiles by application, loaded on first use and shared.
#[derive(Clone, Debug)]
pub struct ProfileCache {
    traces: PathBuf,
    apps: BTreeMap<String, Arc<AppProfile>>,
}

impl ProfileCache {
    pub fn new(traces: &Path) -> Self {
        ProfileCache {
            traces: traces.to_path_buf(),
            apps: BTreeMap::new(),
        }
    }

    pub fn traces(&self) -> &Path {
        &self.traces
    }

    /// The profile of `app`, or of a derived application
    /// `base(scale=S;epochs=E)` ([`AppProfile::derive`]).
    pub fn get(&mut self, app: &str) -> Result<Arc<AppProfile>, ProfileError> {
        if let Some(p) = self.apps.get(app) {
            return Ok(p.clone());
        }
        let p = match parse_derived(app)? {
            Some((base, scale, epochs)) => {
                let base = self.get(base)?;
                let mut d = base.derive(scale, epochs)?;
                d.app = app.to_string();
                Arc::new(d)
            }
            None => Arc::new(AppProfile::load(&self.traces, app)?),
        };
        self.apps.insert(app.to_string(), p.clone());
        Ok(p)
    }
}

/// A derived application's parts: base name, dataset scale, epochs.
pub type Derived<'a> = (&'a str, f64, Option<usize>);

/// Splits `base(scale=S;epochs=E)` (either key may be left out); `None` for a
/// plain application name.
pub fn parse_derived(app: &str) -> Result<Option<Derived<'_>>, ProfileError> {
    let Some((base, rest)) = app.split_once('(') else {
        return Ok(None);
    };
    let bad = |m: &str| {
        ProfileError::Invalid(format!(
            "application `{app}`: {m} (expected `base(scale=S;epochs=E)`, e.g. `imagenet(scale=0.0156;epochs=30)`)"
        ))
    };
    let inner = rest.strip_suffix(')').ok_or_else(|| bad("missing `)`"))?;
    if base.is_empty() {
        return Err(bad("no base application"));
    }
    let (mut scale, mut epochs) = (1.0, None);
    for kv in inner.split(';').filter(|s| !s.trim().is_empty()) {
        let (k, v) = kv.split_once('=').ok_or_else(|| bad("a key without `=`"))?;
        match k.trim() {
            "scale" => {
                scale = v
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| bad("`scale` must be a positive number"))?
            }
            "epochs" => {
                epochs = Some(
                    v.trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|e| (1..=100_000).contains(e))
                        .ok_or_else(|| bad("`epochs` must be a whole number in 1..=100000"))?,
                )
            }
            other => return Err(bad(&format!("unknown key `{other}`"))),
        }
    }
    Ok(Some((base.trim(), scale, epochs)))
}

impl AppProfile {
    /// The same model on a dataset `scale` times the size, trained for `epochs`
    /// epochs (default: as measured): the same step times and batch limits;
    /// each epoch's progress and iterations scaled by `scale`; epochs beyond the
    /// measured ones repeat the last measured epoch's increments and gradient
    /// statistics. Used for workloads of dataset subsets (ONES, SC'21, §4.1:
    /// ImageNet subsets of 10k–20k images, CIFAR-10 subsets of 20k–40k).
    pub fn derive(&self, scale: f64, epochs: Option<usize>) -> Result<AppProfile, ProfileError> {
        if !(scale.is_finite() && scale > 0.0) {
            return Err(ProfileError::Invalid(format!(
                "{}: scale must be positive, got {scale}",
                self.app
            )));
        }
        let epochs = epochs.unwrap_or(self.max_epochs).max(1);
        let mut d = self.clone();
        for (_, rows) in d.validation.iter_mut() {
            let n = rows.len();
            let last = rows[n - 1].clone();
            let (dp, di) = if n >= 2 {
                (
                    last.progress - rows[n - 2].progress,
                    last.iteration - rows[n - 2].iteration,
                )
            } else {
                (last.progress, last.iteration)
            };
            rows.truncate(epochs);
            while rows.len() < epochs {
                let prev = rows[rows.len() - 1].clone();
                rows.push(EpochStats {
                    progress: prev.progress + dp,
                    iteration: prev.iteration + di,
                    ..last.clone()
                });
            }
            for r in rows.iter_mut() {
                r.progress *= scale;
                r.iteration *= scale;
            }
        }
        d.max_epochs = epochs;
        Ok(d)
    }
}
