//! A CSV file read whole, with typed field access that reports file, line and
//! column on any bad value.

use super::WorkloadError;
use std::path::{Path, PathBuf};

pub struct CsvTable {
    pub path: PathBuf,
    pub headers: Vec<String>,
    /// Every field's text, back to back (one allocation for the file, not
    /// one per row: a trace has hundreds of thousands).
    text: String,
    /// Where each field ends in `text`, the rows' fields back to back.
    ends: Vec<u32>,
    /// Per row: (1-based line number, index of its first field in `ends`,
    /// how many fields it has).
    pub rows: Vec<(u64, usize, usize)>,
}

impl CsvTable {
    /// The whole file.
    pub fn read(path: &Path) -> Result<Self, WorkloadError> {
        let (mut rdr, mut t) = Self::open(path)?;
        t.text
            .reserve(std::fs::metadata(path).map_or(0, |m| m.len() as usize));
        let mut rec = csv::ByteRecord::new();
        while t.next_record(&mut rdr, &mut rec)? {
            t.push(&rec)?;
        }
        Ok(t)
    }

    /// The file row by row, without keeping it: after checking that it has
    /// the columns `need`, `f` sees a table of one row (row 0) at a time,
    /// with the same typed access and errors as [`read`].
    ///
    /// [`read`]: CsvTable::read
    pub fn scan(
        path: &Path,
        need: &[&str],
        mut f: impl FnMut(&CsvTable) -> Result<(), WorkloadError>,
    ) -> Result<(), WorkloadError> {
        let (mut rdr, mut t) = Self::open(path)?;
        t.require(need)?;
        let mut rec = csv::ByteRecord::new();
        while t.next_record(&mut rdr, &mut rec)? {
            t.text.clear();
            t.ends.clear();
            t.rows.clear();
            if t.push(&rec)? {
                f(&t)?;
            }
        }
        Ok(())
    }

    /// A reader past the header, and an empty table with its columns.
    fn open(path: &Path) -> Result<(csv::Reader<std::fs::File>, CsvTable), WorkloadError> {
        let io = |e: csv::Error| WorkloadError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        // Fields are trimmed where they are read (`field`), not here: most
        // columns of a large trace are never read.
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(true)
            .flexible(true)
            .buffer_capacity(1 << 16)
            .from_path(path)
            .map_err(io)?;
        let headers: Vec<String> = rdr
            .headers()
            .map_err(io)?
            .iter()
            .map(|h| h.trim_start_matches('\u{feff}').trim().to_string())
            .collect();
        let t = CsvTable {
            path: path.to_path_buf(),
            headers,
            text: String::new(),
            ends: Vec::new(),
            rows: Vec::new(),
        };
        Ok((rdr, t))
    }

    fn next_record(
        &self,
        rdr: &mut csv::Reader<std::fs::File>,
        rec: &mut csv::ByteRecord,
    ) -> Result<bool, WorkloadError> {
        rdr.read_byte_record(rec).map_err(|e| WorkloadError::Io {
            path: self.path.clone(),
            message: e.to_string(),
        })
    }

    /// Appends `rec` as a row unless it is blank; whether it did.
    fn push(&mut self, rec: &csv::ByteRecord) -> Result<bool, WorkloadError> {
        let line = rec.position().map_or(0, |p| p.line());
        let fields = std::str::from_utf8(rec.as_slice())
            .map_err(|_| self.err(line, "(any)", "the row is not valid UTF-8".into()))?;
        if fields.trim().is_empty() {
            return Ok(false);
        }
        let (first, mut start) = (self.ends.len(), 0);
        for end in (0..rec.len()).filter_map(|i| rec.range(i)).map(|r| r.end) {
            self.text.push_str(&fields[start..end]);
            let Ok(at) = u32::try_from(self.text.len()) else {
                return Err(WorkloadError::Io {
                    path: self.path.clone(),
                    message: "more than 4 GiB of fields; split the trace".into(),
                });
            };
            self.ends.push(at);
            start = end;
        }
        self.rows.push((line, first, rec.len()));
        Ok(true)
    }

    pub fn has(&self, col: &str) -> bool {
        self.column(col).is_some()
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

    pub(crate) fn err(&self, line: u64, column: &str, message: String) -> WorkloadError {
        WorkloadError::Field {
            path: self.path.clone(),
            line,
            column: column.to_string(),
            message,
        }
    }

    /// The position of column `col` (a scan: a trace has a handful of
    /// columns, and this runs for every field read).
    fn column(&self, col: &str) -> Option<usize> {
        self.headers.iter().position(|h| h == col)
    }

    /// Field `col` of `row`, trimmed ("" where the row is short).
    fn field(&self, row: usize, col: &str) -> &str {
        let (_, first, n) = self.rows[row];
        match self.column(col) {
            Some(i) if i < n => {
                let k = first + i;
                let start = if k == 0 { 0 } else { self.ends[k - 1] as usize };
                self.text[start..self.ends[k] as usize].trim()
            }
            _ => "",
        }
    }

    /// The text of a field, trimmed; empty or missing is an error.
    pub fn str(&self, row: usize, col: &str) -> Result<&str, WorkloadError> {
        let line = self.rows[row].0;
        let v = self.field(row, col);
        if v.is_empty() {
            return Err(self.err(line, col, "missing value".into()));
        }
        Ok(v)
    }

    /// An optional text field (absent column or empty → None).
    pub fn opt_str(&self, row: usize, col: &str) -> Option<&str> {
        Some(self.field(row, col)).filter(|s| !s.is_empty())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.csv");
        std::fs::write(&p, text).unwrap();
        (d, p)
    }

    #[test]
    fn read_and_scan_give_the_same_rows_lines_and_errors() {
        let (_d, p) = file(b"\xef\xbb\xbfid , name,gpus\n1, a ,2\n\n , ,\n2,\"b, c\",x\n3,\"d\"\n");
        let t = CsvTable::read(&p).unwrap();
        assert_eq!(t.headers, ["id", "name", "gpus"]);
        assert_eq!(t.rows.iter().map(|r| r.0).collect::<Vec<_>>(), [2, 5, 6]);
        assert_eq!(t.str(0, "name").unwrap(), "a");
        assert_eq!(t.str(1, "name").unwrap(), "b, c");
        assert_eq!(t.u32(0, "gpus").unwrap(), 2);
        let e = t.u32(1, "gpus").unwrap_err().to_string();
        assert!(
            e.contains("t.csv:5") && e.contains("gpus") && e.contains("`x`"),
            "{e}"
        );
        // A short row: the missing field is missing, not another row's.
        assert_eq!(t.opt_str(2, "gpus"), None);
        let mut seen = Vec::new();
        let r = CsvTable::scan(&p, &["id", "gpus"], |row| {
            seen.push(row.str(0, "name")?.to_string());
            row.u32(0, "gpus").map(|_| ())
        });
        assert_eq!(seen, ["a", "b, c"]);
        assert!(r.unwrap_err().to_string().contains("t.csv:5"));
        let e = CsvTable::scan(&p, &["id", "duration"], |_| Ok(())).unwrap_err();
        assert!(e.to_string().contains("duration"), "{e}");
    }

    #[test]
    fn a_row_that_is_not_utf8_is_an_error_naming_its_line() {
        let (_d, p) = file(b"a,b\n1,2\n3,\xff\n");
        let e = CsvTable::read(&p).err().unwrap().to_string();
        assert!(e.contains("t.csv:3") && e.contains("UTF-8"), "{e}");
    }
}
