//! Helpers shared by the fuzz targets: walking a PRM layout image field by
//! field the way `hca trace` and `hca caps` do, and a register window that
//! swallows doorbells.
#![forbid(unsafe_code)]

use std::fmt::{self, Write as _};

use firmware_cmds::layout::{FieldKind, FieldReading, LayoutInfo};
use firmware_cmds::registry::Payload;
use platform::{Be32, Be64, Mmio};

/// Reads every field of `info` that `image` holds, nested layouts and the
/// payload (capability block, register) included, and formats the image;
/// returns a checksum of what was read so nothing is optimised away.
pub fn walk_layout(info: &'static LayoutInfo, image: &[u8], payload: Option<Payload>) -> u64 {
    let mut acc = 0u64;
    for field in info.fields {
        let start = (field.offset / 8) as usize;
        if let Some(p) = payload {
            let embeds = matches!(field.kind, FieldKind::Struct(_) | FieldKind::Flex { .. });
            if embeds && start == p.offset && field.offset % 8 == 0 {
                if image.len() > start {
                    let end = image.len().min(start + p.layout.size);
                    acc = acc.wrapping_add(walk_layout(p.layout, &image[start..end], None));
                }
                continue;
            }
        }
        let Ok(reading) = info.read(image, field) else {
            continue;
        };
        acc = acc.wrapping_add(match reading {
            FieldReading::Uint(v) => v,
            FieldReading::Bytes(b) | FieldReading::Flex(b) => b.len() as u64,
            FieldReading::Struct(nested, b) => walk_layout(nested, b, None),
        });
    }
    let mut s = String::new();
    let _ = write!(s, "{}", Image(info, image));
    acc.wrapping_add(s.len() as u64)
}

/// Formats an image through [`LayoutInfo::fmt_image`].
struct Image<'a>(&'static LayoutInfo, &'a [u8]);

impl fmt::Display for Image<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt_image(self.1, f)
    }
}

/// A UAR page that accepts (and checks) every doorbell and reads zero: the
/// CQ's arm doorbell goes nowhere.
#[derive(Debug, Default)]
pub struct SinkUar;

impl Mmio for SinkUar {
    fn len(&self) -> usize {
        4096
    }
    fn read32(&self, offset: usize) -> Be32 {
        self.check(offset, 4).expect("aligned read inside the page");
        Be32::ZERO
    }
    fn write32(&self, offset: usize, _: Be32) {
        self.check(offset, 4)
            .expect("aligned write inside the page");
    }
    fn write64(&self, offset: usize, _: Be64) {
        self.check(offset, 8)
            .expect("aligned write inside the page");
    }
}
