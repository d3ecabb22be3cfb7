//! Output helpers shared by every command: aligned text tables, JSON
//! documents and JSON lines, number formatting.
//!
//! Every command writes into a `&mut dyn Write` (stdout, buffered, in
//! `main`), so a closed pipe surfaces as an error the caller turns into a
//! quiet exit.

use std::io::Write;

use serde::Serialize;

use crate::error::Result;

/// A text table: a header row and data rows, columns padded to the widest
/// cell, two spaces apart; the last column is not padded.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells print empty).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Writes the table.
    pub fn write(&self, out: &mut dyn Write) -> Result<()> {
        let cols = self.header.len();
        let mut width = vec![0usize; cols];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        for r in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, w) in width.iter().enumerate() {
                let cell = r.get(i).map(String::as_str).unwrap_or("");
                if i + 1 == cols {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<w$}  "));
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

/// Writes `value` as one pretty-printed JSON document and a newline.
pub fn json(out: &mut dyn Write, value: &impl Serialize) -> Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}

/// Writes `value` as one compact JSON line (JSON Lines).
pub fn json_line(out: &mut dyn Write, value: &impl Serialize) -> Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    writeln!(out)?;
    Ok(())
}

/// A field value for text output: small numbers in decimal, others in
/// decimal with their hexadecimal form (`17 (0x11)`).
pub fn num(v: u64) -> String {
    if v < 10 {
        v.to_string()
    } else {
        format!("{v} ({v:#x})")
    }
}

/// Bytes as one hexadecimal string.
pub fn hex_bytes(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_numbers_format() {
        let mut t = Table::new(&["A", "LONGER", "C"]);
        t.row(vec!["xxxxx".into(), "y".into(), "z z".into()]);
        t.row(vec!["1".into()]);
        let mut v = Vec::new();
        t.write(&mut v).unwrap();
        let s = String::from_utf8(v).unwrap();
        assert_eq!(s, "A      LONGER  C\nxxxxx  y       z z\n1\n");
        assert_eq!(num(9), "9");
        assert_eq!(num(17), "17 (0x11)");
        assert_eq!(hex_bytes(&[0, 0xab]), "00ab");
    }
}
