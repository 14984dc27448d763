//! A CSV file read whole, with typed field access that reports file, line and
//! column on any bad value.

use super::WorkloadError;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub struct CsvTable {
    pub path: PathBuf,
    pub headers: Vec<String>,
    index: HashMap<String, usize>,
    /// (1-based line number, fields)
    pub rows: Vec<(u64, csv::StringRecord)>,
}

impl CsvTable {
    pub fn read(path: &Path) -> Result<Self, WorkloadError> {
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(true)
            .trim(csv::Trim::All)
            .flexible(true)
            .from_path(path)
            .map_err(|e| WorkloadError::Io {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        let headers: Vec<String> = rdr
            .headers()
            .map_err(|e| WorkloadError::Io {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?
            .iter()
            .map(|h| h.trim_start_matches('\u{feff}').to_string())
            .collect();
        let index = headers
            .iter()
            .enumerate()
            .map(|(i, h)| (h.clone(), i))
            .collect();
        let mut rows = Vec::new();
        for rec in rdr.records() {
            let rec = rec.map_err(|e| WorkloadError::Io {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
            let line = rec.position().map(|p| p.line()).unwrap_or(0);
            if rec.iter().all(|f| f.is_empty()) {
                continue;
            }
            rows.push((line, rec));
        }
        Ok(CsvTable {
            path: path.to_path_buf(),
            headers,
            index,
            rows,
        })
    }

    pub fn has(&self, col: &str) -> bool {
        self.index.contains_key(col)
    }

    /// Fails unless every column in `cols` is present.
    pub fn require(&self, cols: &[&str]) -> Result<(), WorkloadError> {
        for c in cols {
            if !self.has(c) {
                return Err(WorkloadError::MissingColumn {
                    path: self.path.clone(),
                    column: c.to_string(),
                    found: self.headers.join(","),
                });
            }
        }
        Ok(())
    }

    fn err(&self, line: u64, column: &str, message: String) -> WorkloadError {
        WorkloadError::Field {
            path: self.path.clone(),
            line,
            column: column.to_string(),
            message,
        }
    }

    /// The raw text of a field; empty or missing is an error.
    pub fn str(&self, row: usize, col: &str) -> Result<&str, WorkloadError> {
        let (line, rec) = &self.rows[row];
        let v = self.index.get(col).and_then(|&i| rec.get(i)).unwrap_or("");
        if v.is_empty() {
            return Err(self.err(*line, col, "missing value".into()));
        }
        Ok(v)
    }

    /// An optional text field (absent column or empty → None).
    pub fn opt_str(&self, row: usize, col: &str) -> Option<&str> {
        let (_, rec) = &self.rows[row];
        self.index
            .get(col)
            .and_then(|&i| rec.get(i))
            .filter(|s| !s.is_empty())
    }

    /// A finite, non-negative number.
    pub fn f64(&self, row: usize, col: &str) -> Result<f64, WorkloadError> {
        let line = self.rows[row].0;
        let s = self.str(row, col)?;
        let v: f64 = s
            .parse()
            .map_err(|_| self.err(line, col, format!("`{s}` is not a number")))?;
        if !v.is_finite() {
            return Err(self.err(line, col, format!("`{s}` is not a finite number")));
        }
        if v < 0.0 {
            return Err(self.err(line, col, format!("`{s}` is negative")));
        }
        Ok(v)
    }

    /// A non-negative integer.
    pub fn u64(&self, row: usize, col: &str) -> Result<u64, WorkloadError> {
        let line = self.rows[row].0;
        let s = self.str(row, col)?;
        if let Ok(v) = s.parse::<u64>() {
            return Ok(v);
        }
        // Accept integral floats like "4.0".
        match s.parse::<f64>() {
            Ok(v) if v < 0.0 => Err(self.err(line, col, format!("`{s}` is negative"))),
            Ok(v) if v.fract() == 0.0 && v.is_finite() => Ok(v as u64),
            _ => Err(self.err(line, col, format!("`{s}` is not a whole number"))),
        }
    }

    /// A non-negative integer that fits 32 bits (GPU counts, batch sizes).
    pub fn u32(&self, row: usize, col: &str) -> Result<u32, WorkloadError> {
        let v = self.u64(row, col)?;
        u32::try_from(v).map_err(|_| {
            self.err(
                self.rows[row].0,
                col,
                format!("`{v}` is too large (at most {})", u32::MAX),
            )
        })
    }

    /// An optional number (absent column or empty → None).
    pub fn opt_f64(&self, row: usize, col: &str) -> Result<Option<f64>, WorkloadError> {
        match self.opt_str(row, col) {
            None => Ok(None),
            Some(_) => self.f64(row, col).map(Some),
        }
    }

    pub fn opt_u32(&self, row: usize, col: &str) -> Result<Option<u32>, WorkloadError> {
        match self.opt_str(row, col) {
            None => Ok(None),
            Some(_) => self.u32(row, col).map(Some),
        }
    }

    pub fn opt_u64(&self, row: usize, col: &str) -> Result<Option<u64>, WorkloadError> {
        match self.opt_str(row, col) {
            None => Ok(None),
            Some(_) => self.u64(row, col).map(Some),
        }
    }

    pub fn line(&self, row: usize) -> u64 {
        self.rows[row].0
    }
}
