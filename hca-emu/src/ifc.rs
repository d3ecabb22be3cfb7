//! The emulator's own table of PRM field offsets.
//!
//! Built once, at runtime, from `data/prm/ifc-layouts.json` (every
//! `mlx5_ifc_*_bits` layout, offsets in bits from the most significant bit of
//! byte 0). The firmware model decodes every command input and encodes every
//! output through it, never through `firmware-cmds`' typed structs, so that a
//! layout mistake on one side is caught by the other instead of cancelling
//! out.
//!
//! A field is named by a path from a layout: `"cq_context.log_cq_size"`
//! descends into the typed member `cq_context` (a `cqc`); `"pas[3]"` is the
//! fourth element of an array (flexible arrays use their `element_width`,
//! fixed ones `width / count`, arrays of 8-bit elements such as `rgid_rip`
//! count bytes); `"capability.cmd_hca_cap.log_max_qp"` picks a member of a
//! union. Unknown layouts or fields are broken internal invariants of the
//! emulator (its own code names them) and panic with the name.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

const LAYOUTS_JSON: &str = include_str!("../../data/prm/ifc-layouts.json");

/// Where a field lives: bit offset from the MSB of byte 0 and width in bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Offset in bits from the most significant bit of byte 0.
    pub offset: usize,
    /// Width in bits.
    pub width: usize,
}

impl Field {
    /// Byte offset of the field (it must start on a byte boundary).
    pub fn byte_offset(&self) -> usize {
        assert!(
            self.offset % 8 == 0,
            "field at bit {} is not byte aligned",
            self.offset
        );
        self.offset / 8
    }

    /// Byte length of the field (its width must be whole bytes).
    pub fn byte_len(&self) -> usize {
        assert!(
            self.width % 8 == 0,
            "field of {} bits is not whole bytes",
            self.width
        );
        self.width / 8
    }
}

#[derive(Debug)]
struct FieldDef {
    name: String,
    offset: usize,
    width: usize,
    ty: Option<String>,
    count: Option<usize>,
    element_width: Option<usize>,
    union_of: Vec<(String, Option<String>, usize)>,
}

#[derive(Debug)]
struct Layout {
    size: usize,
    fields: Vec<FieldDef>,
}

/// A field found by name: offset, width, type, count, element width.
type Found = (usize, usize, Option<String>, Option<usize>, Option<usize>);

/// The layout table. Get it with [`ifc()`].
#[derive(Debug)]
pub struct Ifc {
    layouts: HashMap<String, Layout>,
    cache: Mutex<HashMap<(String, String), Field>>,
}

/// The table, parsed on first use.
pub fn ifc() -> &'static Ifc {
    static IFC: OnceLock<Ifc> = OnceLock::new();
    IFC.get_or_init(|| Ifc::parse(LAYOUTS_JSON))
}

fn num(v: &Value, key: &str) -> Option<usize> {
    v.get(key).and_then(Value::as_u64).map(|x| x as usize)
}

impl Ifc {
    fn parse(json: &str) -> Self {
        let v: Value = serde_json::from_str(json).expect("data/prm/ifc-layouts.json is valid JSON");
        let obj = v.as_object().expect("ifc-layouts.json is an object");
        let mut layouts = HashMap::new();
        for (name, l) in obj {
            let size = num(l, "size").unwrap_or(0);
            let mut fields = Vec::new();
            for f in l
                .get("fields")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let (Some(fname), Some(offset)) =
                    (f.get("name").and_then(Value::as_str), num(f, "offset"))
                else {
                    continue; // unparsed members
                };
                let union_of = f
                    .get("union_of")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|u| {
                                Some((
                                    u.get("name")?.as_str()?.to_string(),
                                    u.get("type").and_then(Value::as_str).map(str::to_string),
                                    num(u, "width").unwrap_or(0),
                                ))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                fields.push(FieldDef {
                    name: fname.to_string(),
                    offset,
                    width: num(f, "width").unwrap_or(0),
                    ty: f.get("type").and_then(Value::as_str).map(str::to_string),
                    count: num(f, "count"),
                    element_width: num(f, "element_width"),
                    union_of,
                });
            }
            layouts.insert(name.clone(), Layout { size, fields });
        }
        Self {
            layouts,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a layout of that name exists.
    pub fn has(&self, layout: &str) -> bool {
        self.layouts.contains_key(layout)
    }

    /// Size of a layout in bytes (the fixed part, before any flexible array).
    pub fn size(&self, layout: &str) -> usize {
        self.layout(layout).size / 8
    }

    fn layout(&self, name: &str) -> &Layout {
        self.layouts
            .get(name)
            .unwrap_or_else(|| panic!("no layout {name:?} in ifc-layouts.json"))
    }

    /// Resolves a field path in a layout.
    pub fn field(&self, layout: &str, path: &str) -> Field {
        let key = (layout.to_string(), path.to_string());
        if let Some(f) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return *f;
        }
        let f = self
            .resolve(layout, path)
            .unwrap_or_else(|e| panic!("field {path:?} of layout {layout:?}: {e}"));
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, f);
        f
    }

    /// Resolves a field path, or says why it cannot.
    pub fn try_field(&self, layout: &str, path: &str) -> Result<Field, String> {
        self.resolve(layout, path)
    }

    fn resolve(&self, layout: &str, path: &str) -> Result<Field, String> {
        let mut cur_layout: Option<&str> = Some(layout);
        let mut base = 0usize;
        let mut cur = Field {
            offset: 0,
            width: self.layouts.get(layout).ok_or("no such layout")?.size,
        };
        for seg in path.split('.') {
            let (name, index) = match seg.find('[') {
                Some(i) => {
                    let idx = seg[i + 1..]
                        .strip_suffix(']')
                        .and_then(|s| s.parse::<usize>().ok())
                        .ok_or_else(|| format!("bad index in {seg:?}"))?;
                    (&seg[..i], Some(idx))
                }
                None => (seg, None),
            };
            let lname = cur_layout.ok_or_else(|| format!("{name:?} is inside an untyped field"))?;
            let l = self
                .layouts
                .get(lname)
                .ok_or_else(|| format!("no layout {lname:?}"))?;
            // A union member is found either as a field of a union layout or
            // inside an anonymous union field.
            let mut found: Option<Found> = None;
            for f in &l.fields {
                if f.name == name {
                    found = Some((f.offset, f.width, f.ty.clone(), f.count, f.element_width));
                    break;
                }
                if let Some(u) = f.union_of.iter().find(|u| u.0 == name) {
                    found = Some((f.offset, u.2, u.1.clone(), None, None));
                    break;
                }
            }
            let (off, width, ty, count, ew) =
                found.ok_or_else(|| format!("no field {name:?} in {lname:?}"))?;
            base += off;
            cur = Field {
                offset: base,
                width,
            };
            cur_layout = ty
                .as_deref()
                .and_then(|t| self.layouts.get_key_value(t))
                .map(|(k, _)| k.as_str());
            if let Some(i) = index {
                // `element_width` for flexible arrays; typed arrays count
                // elements of their type; for untyped fixed arrays the
                // layout file's `count` is the element width in bits
                // (`u8 rgid_rip[16][0x8]` has count 8).
                let elem = if let Some(ew) = ew {
                    ew
                } else if let Some(t) = ty.as_ref().filter(|_| count.is_some()) {
                    self.layouts.get(t).map(|l| l.size).ok_or("untyped array")?
                } else if let Some(c) = count {
                    c
                } else if let Some(t) = &ty {
                    self.layouts.get(t).map(|l| l.size).ok_or("untyped array")?
                } else {
                    return Err(format!("{name:?} is not an array"));
                };
                if elem == 0 {
                    return Err(format!("{name:?} has zero-width elements"));
                }
                if width > 0 && (i + 1) * elem > width {
                    return Err(format!("index {i} past the end of {name:?}"));
                }
                base += i * elem;
                cur = Field {
                    offset: base,
                    width: elem,
                };
                // An array of typed elements keeps its element type.
                if ew.is_some() || count.is_some() {
                    cur_layout = None;
                    if let Some(t) = &ty {
                        cur_layout = self
                            .layouts
                            .get_key_value(t.as_str())
                            .map(|(k, _)| k.as_str());
                    }
                }
            }
        }
        Ok(cur)
    }

    /// Reads a field of at most 64 bits. Bytes past the end of `bytes` read
    /// as zero.
    pub fn get(&self, bytes: &[u8], layout: &str, path: &str) -> u64 {
        get_bits(bytes, self.field(layout, path))
    }

    /// Writes a field of at most 64 bits (value truncated to the width).
    /// Bits past the end of `bytes` are not written.
    pub fn set(&self, bytes: &mut [u8], layout: &str, path: &str, value: u64) {
        set_bits(bytes, self.field(layout, path), value)
    }

    /// The bytes of a byte-aligned field (clamped to `bytes`).
    pub fn bytes<'a>(&self, bytes: &'a [u8], layout: &str, path: &str) -> &'a [u8] {
        let f = self.field(layout, path);
        let start = f.byte_offset().min(bytes.len());
        let end = (f.byte_offset() + f.byte_len()).min(bytes.len());
        &bytes[start..end]
    }

    /// Copies `src` into a byte-aligned field.
    pub fn set_bytes(&self, bytes: &mut [u8], layout: &str, path: &str, src: &[u8]) {
        let f = self.field(layout, path);
        let start = f.byte_offset();
        let n = src.len().min(f.byte_len());
        if start + n <= bytes.len() {
            bytes[start..start + n].copy_from_slice(&src[..n]);
        }
    }

    /// The top-level reserved fields of a layout (for checking that
    /// reserved fields are zero).
    pub fn reserved_fields(&self, layout: &str) -> Vec<Field> {
        let l = self.layout(layout);
        l.fields
            .iter()
            .filter(|f| f.name.starts_with("reserved") && f.width > 0)
            .map(|f| Field {
                offset: f.offset,
                width: f.width,
            })
            .collect()
    }

    /// Names and positions of the direct fields of a layout (not descending
    /// into typed members).
    pub fn fields(&self, layout: &str) -> Vec<(String, Field)> {
        self.layout(layout)
            .fields
            .iter()
            .filter(|f| f.width > 0)
            .map(|f| {
                (
                    f.name.clone(),
                    Field {
                        offset: f.offset,
                        width: f.width,
                    },
                )
            })
            .collect()
    }
}

/// Reads up to 64 bits at a bit position; bits past the end read as zero.
pub fn get_bits(bytes: &[u8], f: Field) -> u64 {
    assert!(
        f.width <= 64,
        "field of {} bits read as an integer",
        f.width
    );
    let mut v: u64 = 0;
    for i in 0..f.width {
        let bit = f.offset + i;
        let b = bytes.get(bit / 8).copied().unwrap_or(0);
        v = (v << 1) | u64::from((b >> (7 - bit % 8)) & 1);
    }
    v
}

/// Writes up to 64 bits at a bit position; bits past the end are dropped.
pub fn set_bits(bytes: &mut [u8], f: Field, value: u64) {
    assert!(
        f.width <= 64,
        "field of {} bits written as an integer",
        f.width
    );
    for i in 0..f.width {
        let bit = f.offset + i;
        let v = (value >> (f.width - 1 - i)) & 1;
        if let Some(b) = bytes.get_mut(bit / 8) {
            let mask = 1u8 << (7 - bit % 8);
            if v == 1 {
                *b |= mask;
            } else {
                *b &= !mask;
            }
        }
    }
}

/// Whether any bit of a (possibly wide) field is set.
pub fn any_bits(bytes: &[u8], f: Field) -> bool {
    (0..f.width).any(|i| {
        let bit = f.offset + i;
        bytes
            .get(bit / 8)
            .is_some_and(|b| (b >> (7 - bit % 8)) & 1 == 1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_resolve_like_the_prm() {
        let t = ifc();
        // cqc.log_cq_size: dword 3 bits 28:24 of the context at input 0x10.
        let f = t.field("create_cq_in", "cq_context.log_cq_size");
        assert_eq!(
            f,
            Field {
                offset: 0x10 * 8 + 0xc * 8 + 3,
                width: 5
            }
        );
        assert_eq!(
            t.field("manage_pages_in", "pas[2]"),
            Field {
                offset: 16 * 8 + 128,
                width: 64
            }
        );
        let f = t.field("query_hca_cap_out", "capability.cmd_hca_cap.log_max_qp");
        assert_eq!(f.width, 5);
        assert_eq!(t.size("create_cq_in"), 0x110);
        assert_eq!(
            t.field("create_eq_in", "event_bitmask[0]"),
            Field {
                offset: 0x58 * 8,
                width: 64
            }
        );
        let g = t.field("qpc", "primary_address_path.rgid_rip[15]");
        assert_eq!(
            g,
            Field {
                offset: (0x18 + 16 + 15) * 8,
                width: 8
            }
        );
        assert_eq!(
            t.field("eqc", "log_eq_size"),
            Field {
                offset: 99,
                width: 5
            }
        );
    }

    #[test]
    fn bit_access_round_trips() {
        let mut b = [0u8; 16];
        let f = Field {
            offset: 13,
            width: 11,
        };
        set_bits(&mut b, f, 0x5a5);
        assert_eq!(get_bits(&b, f), 0x5a5);
        assert_eq!(b[1], 0x05);
        assert_eq!(b[2], 0xa5);
        assert_eq!(get_bits(&b[..1], f), 0, "missing bytes read as zero");
        set_bits(
            &mut b[..2],
            Field {
                offset: 8,
                width: 16,
            },
            0xffff,
        );
        assert_eq!(b[1], 0xff);
    }
}
