//! Any PRM layout image as a tree of named fields, through the layout's
//! reflection table ([`LayoutInfo`]): used by `hca trace` (command inputs
//! and outputs) and `hca caps` (capability blocks).
//!
//! The tree serializes to JSON in declaration order (integers and flags as
//! numbers, byte arrays as hexadecimal strings, nested layouts as objects,
//! flexible arrays as arrays of numbers) and prints as indented text.

use std::io::Write;

use firmware_cmds::layout::{FieldKind, FieldReading, LayoutInfo};
use firmware_cmds::registry::Payload;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};

use crate::error::Result;
use crate::output::{hex_bytes, num};

/// One decoded field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The `mlx5_ifc` field name.
    pub name: &'static str,
    /// Its value.
    pub value: Value,
}

/// A decoded value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// An integer field.
    Uint(u64),
    /// A one-bit flag.
    Flag(bool),
    /// A byte array.
    Bytes(Vec<u8>),
    /// A nested layout: its `mlx5_ifc` name and fields.
    Struct(&'static str, Vec<Node>),
    /// A flexible array: the elements present in the image.
    Array(Vec<u64>),
}

impl Value {
    /// Whether the value is zero (all fields, bytes or elements zero).
    pub fn is_zero(&self) -> bool {
        match self {
            Value::Uint(v) => *v == 0,
            Value::Flag(b) => !b,
            Value::Bytes(b) => b.iter().all(|&x| x == 0),
            Value::Struct(_, f) => f.iter().all(|n| n.value.is_zero()),
            Value::Array(a) => a.is_empty(),
        }
    }
}

/// Decodes every field of `info` that `image` holds. Fields the image is
/// too short for (a dump that does not show the whole message) are left
/// out. A field that starts at `payload.offset` (the capability block of
/// QUERY_HCA_CAP, the register of ACCESS_REG) is decoded with the
/// payload's layout instead of its declared one.
pub fn decode(info: &'static LayoutInfo, image: &[u8], payload: Option<Payload>) -> Vec<Node> {
    let mut out = Vec::with_capacity(info.fields.len());
    for field in info.fields {
        let start = (field.offset / 8) as usize;
        if let Some(p) = payload {
            let embeds = matches!(field.kind, FieldKind::Struct(_) | FieldKind::Flex { .. });
            if embeds && start == p.offset && field.offset % 8 == 0 {
                if image.len() > start {
                    let end = image.len().min(start + p.layout.size);
                    out.push(Node {
                        name: field.name,
                        value: Value::Struct(
                            p.layout.ifc,
                            decode(p.layout, &image[start..end], None),
                        ),
                    });
                }
                continue;
            }
        }
        let Ok(reading) = info.read(image, field) else {
            continue;
        };
        let value = match (reading, field.kind) {
            (FieldReading::Uint(v), FieldKind::Flag) => Value::Flag(v != 0),
            (FieldReading::Uint(v), _) => Value::Uint(v),
            (FieldReading::Bytes(b), _) => Value::Bytes(b.to_vec()),
            (FieldReading::Struct(nested, b), _) => {
                Value::Struct(nested.ifc, decode(nested, b, None))
            }
            (FieldReading::Flex(b), FieldKind::Flex { element_bits }) => {
                let size = (element_bits / 8).clamp(1, 8) as usize;
                Value::Array(
                    b.chunks_exact(size)
                        .map(|c| c.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
                        .collect(),
                )
            }
            (FieldReading::Flex(b), _) => Value::Bytes(b.to_vec()),
        };
        out.push(Node {
            name: field.name,
            value,
        });
    }
    out
}

/// The value of `path` (field names separated by dots) in a tree.
#[cfg(test)]
pub fn lookup<'a>(nodes: &'a [Node], path: &str) -> Option<&'a Value> {
    let (head, rest) = match path.split_once('.') {
        Some((h, r)) => (h, Some(r)),
        None => (path, None),
    };
    let n = nodes.iter().find(|n| n.name == head)?;
    match (rest, &n.value) {
        (None, v) => Some(v),
        (Some(r), Value::Struct(_, f)) => lookup(f, r),
        _ => None,
    }
}

/// A list of fields, serialized as a JSON object in declaration order.
pub struct Fields<'a>(pub &'a [Node]);

impl Serialize for Fields<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for n in self.0 {
            m.serialize_entry(n.name, &n.value)?;
        }
        m.end()
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Value::Uint(v) => s.serialize_u64(*v),
            Value::Flag(b) => s.serialize_u64(u64::from(*b)),
            Value::Bytes(b) => s.serialize_str(&hex_bytes(b)),
            Value::Struct(_, f) => Fields(f).serialize(s),
            Value::Array(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    seq.serialize_element(v)?;
                }
                seq.end()
            }
        }
    }
}

/// How [`write_text`] prints.
#[derive(Clone, Copy, Debug)]
pub struct TextStyle {
    /// Print zero fields too.
    pub zeros: bool,
    /// Most elements of a flexible array to print (the count is always
    /// printed).
    pub max_elements: usize,
}

/// Writes fields as `name: value` lines indented by `indent` spaces, nested
/// layouts as a `name (ifc):` line followed by their fields.
pub fn write_text(
    out: &mut dyn Write,
    nodes: &[Node],
    indent: usize,
    style: TextStyle,
) -> Result<()> {
    let pad = " ".repeat(indent);
    for n in nodes {
        if !style.zeros && n.value.is_zero() {
            continue;
        }
        match &n.value {
            Value::Uint(v) => writeln!(out, "{pad}{}: {}", n.name, num(*v))?,
            Value::Flag(b) => writeln!(out, "{pad}{}: {}", n.name, u8::from(*b))?,
            Value::Bytes(b) => writeln!(out, "{pad}{}: {}", n.name, hex_bytes(b))?,
            Value::Struct(ifc, f) => {
                writeln!(out, "{pad}{} ({ifc}):", n.name)?;
                write_text(out, f, indent + 2, style)?;
            }
            Value::Array(a) => {
                let shown: Vec<String> = a
                    .iter()
                    .take(style.max_elements)
                    .map(|v| format!("{v:#x}"))
                    .collect();
                let more = a.len().saturating_sub(style.max_elements);
                let tail = if more > 0 {
                    format!(", ... ({more} more)")
                } else {
                    String::new()
                };
                writeln!(
                    out,
                    "{pad}{}: [{} elements] {}{tail}",
                    n.name,
                    a.len(),
                    shown.join(", ")
                )?;
            }
        }
    }
    Ok(())
}

/// Flattens a tree into `(dotted name, value)` rows for a table: nested
/// layouts become `outer.inner`.
pub fn flatten(nodes: &[Node], prefix: &str, out: &mut Vec<(String, String)>) {
    for n in nodes {
        let name = if prefix.is_empty() {
            n.name.to_string()
        } else {
            format!("{prefix}.{}", n.name)
        };
        match &n.value {
            Value::Uint(v) => out.push((name, num(*v))),
            Value::Flag(b) => out.push((name, u8::from(*b).to_string())),
            Value::Bytes(b) => out.push((name, hex_bytes(b))),
            Value::Struct(_, f) => flatten(f, &name, out),
            Value::Array(a) => out.push((name, format!("[{} elements]", a.len()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use firmware_cmds::caps::{CmdHcaCap, QueryHcaCapOut};
    use firmware_cmds::layout::Layout;
    use firmware_cmds::registry;

    #[test]
    fn payloads_replace_the_union_and_short_images_are_partial() {
        let mut out = vec![0u8; QueryHcaCapOut::SIZE];
        let cap = CmdHcaCap::new().with(CmdHcaCap::log_max_qp, 17).unwrap();
        out[0x10..0x10 + CmdHcaCap::SIZE].copy_from_slice(cap.bytes());
        let mut input = [0u8; 16];
        input[..2].copy_from_slice(&[0x01, 0x00]);
        input[7] = 1; // general, current
        let d = registry::lookup(&input).unwrap();
        let nodes = decode(d.output, &out, d.output_payload);
        assert_eq!(
            lookup(&nodes, "capability.log_max_qp"),
            Some(&Value::Uint(17))
        );
        match lookup(&nodes, "capability") {
            Some(Value::Struct(ifc, _)) => assert_eq!(*ifc, "cmd_hca_cap"),
            other => panic!("{other:?}"),
        }
        // A dump that ends inside the capability block decodes what it has.
        let short = decode(d.output, &out[..0x10 + 4], d.output_payload);
        assert!(lookup(&short, "capability.log_max_qp").is_none());
        assert!(lookup(&short, "status").is_some());
        let json = serde_json::to_value(Fields(&nodes)).unwrap();
        assert_eq!(json["capability"]["log_max_qp"], 17);
        assert_eq!(json["status"], 0);
    }
}
