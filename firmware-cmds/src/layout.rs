//! PRM layouts: typed, copyable images of the big-endian structures the
//! firmware reads and writes, with a reflection table for every field.
//!
//! A layout is declared with [`prm_struct!`](crate::prm_struct) the way the PRM
//! tables are written: the byte offset of the dword and the bit range inside
//! it, most significant bit first, using the `mlx5_ifc` field names.
//!
//! ```
//! use firmware_cmds::cq::Cqc;
//!
//! let mut cqc = Cqc::new();
//! cqc.set(Cqc::log_cq_size, 10)?.set(Cqc::uar_page, 7)?;
//! assert_eq!(cqc.get(Cqc::log_cq_size), 10);
//! // A value wider than its field is an error, never silently truncated.
//! assert!(cqc.set(Cqc::log_cq_size, 32).is_err());
//! # Ok::<(), firmware_cmds::Error>(())
//! ```
//!
//! Every layout also carries a [`LayoutInfo`]: its `mlx5_ifc` name, size and
//! the name, bit offset and width of every field. Tests check these against the
//! layout facts extracted from the `mlx5_ifc` headers, and tools use them to
//! print any image field by field.

use core::fmt;
use core::marker::PhantomData;

use crate::Error;

/// What a field holds.
#[derive(Clone, Copy, Debug)]
pub enum FieldKind {
    /// An unsigned integer stored in a Rust integer of `bits` bits.
    Uint {
        /// Width of the Rust type that carries the value.
        bits: u32,
    },
    /// A one-bit flag.
    Flag,
    /// A byte-aligned array of bytes (GIDs, MAC addresses, strings).
    Bytes,
    /// A nested layout.
    Struct(&'static LayoutInfo),
    /// A flexible array that follows the fixed part of a command (page
    /// addresses, translation entries); it has no width of its own.
    Flex {
        /// Width of one element in bits.
        element_bits: u32,
    },
}

/// One field of a layout, as the PRM names and places it.
#[derive(Clone, Copy, Debug)]
pub struct FieldInfo {
    /// The `mlx5_ifc` field name.
    pub name: &'static str,
    /// Bit offset from the most significant bit of byte 0.
    pub offset: u32,
    /// Width in bits (0 for flexible arrays).
    pub width: u32,
    /// What the field holds.
    pub kind: FieldKind,
}

/// The reflection table of a layout.
#[derive(Debug)]
pub struct LayoutInfo {
    /// The Rust type name.
    pub name: &'static str,
    /// The `mlx5_ifc` structure name (`create_cq_in`, `cqc`, ...).
    pub ifc: &'static str,
    /// Size of the fixed part in bytes.
    pub size: usize,
    /// Every declared field, in declaration order.
    pub fields: &'static [FieldInfo],
}

/// The value of one field read out of an image through its [`FieldInfo`].
#[derive(Clone, Copy, Debug)]
pub enum FieldReading<'a> {
    /// An integer or flag.
    Uint(u64),
    /// A byte array.
    Bytes(&'a [u8]),
    /// A nested layout and its bytes.
    Struct(&'static LayoutInfo, &'a [u8]),
    /// A flexible array: the bytes of the image after its start (possibly
    /// empty when the image holds only the fixed part).
    Flex(&'a [u8]),
}

impl PartialEq for FieldReading<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Uint(a), Self::Uint(b)) => a == b,
            (Self::Bytes(a), Self::Bytes(b)) | (Self::Flex(a), Self::Flex(b)) => a == b,
            (Self::Struct(i, a), Self::Struct(j, b)) => core::ptr::eq(*i, *j) && a == b,
            _ => false,
        }
    }
}

impl Eq for FieldReading<'_> {}

impl LayoutInfo {
    /// The field called `name`, if declared.
    pub fn field(&self, name: &str) -> Option<&'static FieldInfo> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Reads `field` out of `image`.
    ///
    /// Returns [`Error::Truncated`] if `image` is too short to hold the field.
    pub fn read<'a>(&self, image: &'a [u8], field: &FieldInfo) -> Result<FieldReading<'a>, Error> {
        let start = (field.offset / 8) as usize;
        let end = (field.offset as usize + field.width as usize).div_ceil(8);
        if let FieldKind::Flex { .. } = field.kind {
            return Ok(FieldReading::Flex(image.get(start..).unwrap_or(&[])));
        }
        if image.len() < end {
            return Err(Error::Truncated {
                what: self.ifc,
                need: end,
                got: image.len(),
            });
        }
        Ok(match field.kind {
            FieldKind::Uint { .. } | FieldKind::Flag => {
                FieldReading::Uint(read_bits(image, field.offset, field.width))
            }
            FieldKind::Bytes => FieldReading::Bytes(&image[start..end]),
            FieldKind::Struct(info) => FieldReading::Struct(info, &image[start..end]),
            FieldKind::Flex { .. } => unreachable!("handled above"),
        })
    }

    /// Formats every field of `image` that is not zero as `name: value` pairs,
    /// nested layouts in braces. Fields the image is too short for are skipped.
    pub fn fmt_image(&self, image: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {{", self.ifc)?;
        let mut first = true;
        for field in self.fields {
            let Ok(reading) = self.read(image, field) else {
                continue;
            };
            let sep = if first { " " } else { ", " };
            match reading {
                FieldReading::Uint(0) => continue,
                FieldReading::Uint(v) => write!(f, "{sep}{}: {v:#x}", field.name)?,
                FieldReading::Bytes(b) => {
                    if b.iter().all(|&x| x == 0) {
                        continue;
                    }
                    write!(f, "{sep}{}: ", field.name)?;
                    for x in b {
                        write!(f, "{x:02x}")?;
                    }
                }
                FieldReading::Struct(info, b) => {
                    if b.iter().all(|&x| x == 0) {
                        continue;
                    }
                    write!(f, "{sep}{}: ", field.name)?;
                    info.fmt_image(b, f)?;
                }
                FieldReading::Flex(b) => {
                    if b.is_empty() {
                        continue;
                    }
                    write!(f, "{sep}{}: [{} bytes]", field.name, b.len())?;
                }
            }
            first = false;
        }
        write!(f, " }}")
    }
}

/// Reads `width` (1..=64) bits at bit `offset` (from the most significant
/// bit of byte 0) of a big-endian image.
///
/// # Panics
///
/// If the field does not lie inside `image`; layouts check this at compile
/// time for their own fields.
#[inline]
pub fn read_bits(image: &[u8], offset: u32, width: u32) -> u64 {
    debug_assert!((1..=64).contains(&width));
    let first = (offset / 8) as usize;
    let last = ((offset + width - 1) / 8) as usize;
    let mut acc: u128 = 0;
    for &b in &image[first..=last] {
        acc = (acc << 8) | u128::from(b);
    }
    let shift = 7 - (offset + width - 1) % 8;
    let mask = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    ((acc >> shift) as u64) & mask
}

/// Writes the low `width` (1..=64) bits of `value` at bit `offset` of a
/// big-endian image, leaving the neighbouring bits alone.
///
/// # Panics
///
/// If the field does not lie inside `image`.
#[inline]
pub fn write_bits(image: &mut [u8], offset: u32, width: u32, value: u64) {
    debug_assert!((1..=64).contains(&width));
    let first = (offset / 8) as usize;
    let last = ((offset + width - 1) / 8) as usize;
    let shift = 7 - (offset + width - 1) % 8;
    let mask = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    let field_mask = u128::from(mask) << shift;
    let bits = u128::from(value & mask) << shift;
    let n = last - first + 1;
    for (i, byte) in image[first..=last].iter_mut().enumerate() {
        let s = 8 * (n - 1 - i);
        let m = (field_mask >> s) as u8;
        *byte = (*byte & !m) | ((bits >> s) as u8 & m);
    }
}

/// A value that can live in a layout field.
pub trait FieldValue: Sized {
    /// Reads the value of the field at `offset`/`width` out of `image`.
    fn read_field(image: &[u8], offset: u32, width: u32) -> Self;
    /// Writes the value; `Err(value)` (the value as a number, saturated to
    /// `u64`) if it does not fit in `width` bits.
    fn write_field(&self, image: &mut [u8], offset: u32, width: u32) -> Result<(), u64>;
}

macro_rules! uint_field_value {
    ($($t:ty),*) => {$(
        impl FieldValue for $t {
            #[inline]
            fn read_field(image: &[u8], offset: u32, width: u32) -> Self {
                read_bits(image, offset, width) as $t
            }
            #[inline]
            fn write_field(&self, image: &mut [u8], offset: u32, width: u32) -> Result<(), u64> {
                let v = u64::from(*self);
                if width < 64 && v >> width != 0 {
                    return Err(v);
                }
                write_bits(image, offset, width, v);
                Ok(())
            }
        }
    )*};
}
uint_field_value!(u8, u16, u32, u64);

impl FieldValue for bool {
    #[inline]
    fn read_field(image: &[u8], offset: u32, width: u32) -> Self {
        read_bits(image, offset, width) != 0
    }
    #[inline]
    fn write_field(&self, image: &mut [u8], offset: u32, width: u32) -> Result<(), u64> {
        write_bits(image, offset, width, u64::from(*self));
        Ok(())
    }
}

impl<const N: usize> FieldValue for [u8; N] {
    #[inline]
    fn read_field(image: &[u8], offset: u32, _width: u32) -> Self {
        let start = (offset / 8) as usize;
        let mut out = [0u8; N];
        out.copy_from_slice(&image[start..start + N]);
        out
    }
    #[inline]
    fn write_field(&self, image: &mut [u8], offset: u32, _width: u32) -> Result<(), u64> {
        let start = (offset / 8) as usize;
        image[start..start + N].copy_from_slice(self);
        Ok(())
    }
}

/// Marker for a flexible array field of `T` elements; see [`FieldKind::Flex`].
#[derive(Debug)]
pub struct Flex<T>(PhantomData<T>);

/// A typed handle on one field of layout `S`, holding a `T`.
///
/// The handles are associated constants named exactly like the PRM field
/// (`Cqc::log_cq_size`), used with the layout's `get`/`set`/`with`.
pub struct Field<S, T> {
    name: &'static str,
    offset: u32,
    width: u32,
    _marker: PhantomData<fn() -> (S, T)>,
}

impl<S, T> Clone for Field<S, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S, T> Copy for Field<S, T> {}

impl<S, T> fmt::Debug for Field<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}+{}]", self.name, self.offset, self.width)
    }
}

impl<S, T> Field<S, T> {
    /// Declares a field. Used by [`prm_struct!`](crate::prm_struct).
    #[doc(hidden)]
    pub const fn new(name: &'static str, offset: u32, width: u32) -> Self {
        Self {
            name,
            offset,
            width,
            _marker: PhantomData,
        }
    }
    /// The PRM field name.
    pub const fn name(&self) -> &'static str {
        self.name
    }
    /// Bit offset from the most significant bit of byte 0.
    pub const fn offset(&self) -> u32 {
        self.offset
    }
    /// Width in bits.
    pub const fn width(&self) -> u32 {
        self.width
    }
    /// Byte offset of the field (of its first byte).
    pub const fn byte_offset(&self) -> usize {
        (self.offset / 8) as usize
    }
}

/// A fixed-size PRM structure image.
pub trait Layout: Sized + Clone {
    /// The reflection table.
    const INFO: LayoutInfo;
    /// Size of the fixed part in bytes.
    const SIZE: usize;
    /// An all-zero image (for a command input: with its opcode set).
    fn zeroed() -> Self;
    /// The image bytes.
    fn bytes(&self) -> &[u8];
    /// The image bytes, mutable.
    fn bytes_mut(&mut self) -> &mut [u8];

    /// Copies the fixed part out of `image`, which may be longer (a command
    /// output with a flexible array, for example).
    fn decode(image: &[u8]) -> Result<Self, Error> {
        if image.len() < Self::SIZE {
            return Err(Error::Truncated {
                what: Self::INFO.ifc,
                need: Self::SIZE,
                got: image.len(),
            });
        }
        let mut s = Self::zeroed();
        s.bytes_mut().copy_from_slice(&image[..Self::SIZE]);
        Ok(s)
    }
}

/// Compile-time check of a layout's table: every field inside the structure,
/// integers no wider than their Rust type, byte arrays and nested layouts byte
/// aligned. Evaluated by `prm_struct!` for every layout.
#[doc(hidden)]
pub const fn check_layout(info: &LayoutInfo) {
    let size_bits = info.size as u32 * 8;
    let mut i = 0;
    while i < info.fields.len() {
        let f = &info.fields[i];
        match f.kind {
            FieldKind::Uint { bits } => {
                assert!(
                    f.width >= 1 && f.width <= bits,
                    "integer field wider than its type"
                );
                assert!(f.offset + f.width <= size_bits, "field outside its layout");
            }
            FieldKind::Flag => {
                assert!(f.width == 1, "flag fields are one bit");
                assert!(f.offset + f.width <= size_bits, "field outside its layout");
            }
            FieldKind::Bytes | FieldKind::Struct(_) => {
                assert!(
                    f.offset % 8 == 0 && f.width % 8 == 0,
                    "byte field not byte aligned"
                );
                assert!(f.offset + f.width <= size_bits, "field outside its layout");
            }
            FieldKind::Flex { .. } => {
                assert!(
                    f.offset % 8 == 0 && f.offset <= size_bits,
                    "flexible array misplaced"
                );
            }
        }
        i += 1;
    }
}

/// Bit offset (from the most significant bit of byte 0) of the field whose
/// most significant bit is bit `hi` of the dword (or, for `hi >= 32`, the
/// qword) at byte offset `byte`.
#[doc(hidden)]
pub const fn bit_offset(byte: u32, hi: u32) -> u32 {
    if hi < 32 {
        byte * 8 + (31 - hi)
    } else {
        byte * 8 + (63 - hi)
    }
}

/// `r#type` -> `type`.
#[doc(hidden)]
pub const fn strip_raw(name: &'static str) -> &'static str {
    let b = name.as_bytes();
    if b.len() > 2 && b[0] == b'r' && b[1] == b'#' {
        let (_, rest) = b.split_at(2);
        match core::str::from_utf8(rest) {
            Ok(s) => s,
            Err(_) => name,
        }
    } else {
        name
    }
}

/// Declares a PRM layout: a copyable big-endian image with a typed field
/// handle per field and a reflection table.
///
/// ```
/// firmware_cmds::prm_struct! {
///     /// An example.
///     pub struct Example("example", 0x10) {
///         /// A 4-bit integer in bits 31:28 of dword 0.
///         state: u8 = 0x00[31:28],
///         /// A flag.
///         armed: bool = 0x00[20:20],
///         /// A 64-bit field spanning dwords 2 and 3.
///         addr: u64 = 0x08[63:0],
///         /// Bytes.
///         mac: [u8; 4] = 0x04,
///     }
/// }
/// let e = Example::new().with(Example::state, 3).unwrap();
/// assert_eq!(e.as_bytes()[0], 0x30);
/// ```
///
/// Field kinds: `u8`/`u16`/`u32`/`u64` with a `[hi:lo]` bit range; `bool`
/// with a one-bit range; `[u8; N]` at a byte offset; a nested layout type at a
/// byte offset; `[u64]`/`[u32]`/`[u8]` for the flexible array after the fixed
/// part. A command input adds `: command OPCODE -> Output` after the size; its
/// `new()` then writes the opcode.
#[macro_export]
macro_rules! prm_struct {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident($ifc:literal, $size:expr) $(: command $opcode:ident -> $out:ty)? {
            $(
                $(#[$fmeta:meta])*
                $field:ident : $kind:tt = $byte:literal $([$hi:literal : $lo:literal])?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, Hash)]
        $vis struct $name([u8; $size]);

        #[allow(non_upper_case_globals)]
        impl $name {
            /// Size of the fixed part in bytes.
            pub const SIZE: usize = $size;

            $(
                $(#[$fmeta])*
                pub const $field: $crate::layout::Field<$name, $crate::prm_struct!(@ty $kind)> =
                    $crate::layout::Field::new(
                        $crate::layout::strip_raw(stringify!($field)),
                        $crate::prm_struct!(@offset $byte $(, $hi)?),
                        $crate::prm_struct!(@width $kind $(, $hi, $lo)?),
                    );
            )*

            /// An all-zero image; for a command input, with its opcode set.
            #[allow(unused_mut)]
            pub const fn new() -> Self {
                let mut bytes = [0u8; $size];
                $(
                    let op = $crate::opcode::Opcode::$opcode.0.to_be_bytes();
                    bytes[0] = op[0];
                    bytes[1] = op[1];
                )?
                Self(bytes)
            }

            /// Wraps a complete image.
            pub const fn from_array(bytes: [u8; $size]) -> Self {
                Self(bytes)
            }

            /// The image.
            pub const fn as_bytes(&self) -> &[u8; $size] {
                &self.0
            }

            /// Reads a field.
            #[inline]
            pub fn get<V: $crate::layout::FieldValue>(&self, field: $crate::layout::Field<$name, V>) -> V {
                V::read_field(&self.0, field.offset(), field.width())
            }

            /// Writes a field; a value that does not fit its width is an error.
            #[inline]
            pub fn set<V: $crate::layout::FieldValue>(
                &mut self,
                field: $crate::layout::Field<$name, V>,
                value: V,
            ) -> ::core::result::Result<&mut Self, $crate::Error> {
                match value.write_field(&mut self.0, field.offset(), field.width()) {
                    Ok(()) => Ok(self),
                    Err(value) => Err($crate::Error::FieldOverflow {
                        layout: $ifc,
                        field: field.name(),
                        value,
                        width: field.width(),
                    }),
                }
            }

            /// Builder form of [`set`](Self::set).
            #[inline]
            pub fn with<V: $crate::layout::FieldValue>(
                mut self,
                field: $crate::layout::Field<$name, V>,
                value: V,
            ) -> ::core::result::Result<Self, $crate::Error> {
                self.set(field, value)?;
                Ok(self)
            }
        }

        impl ::core::default::Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl ::core::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                <Self as $crate::layout::Layout>::INFO.fmt_image(&self.0, f)
            }
        }

        impl $crate::layout::Layout for $name {
            const INFO: $crate::layout::LayoutInfo = $crate::layout::LayoutInfo {
                name: stringify!($name),
                ifc: $ifc,
                size: $size,
                fields: &[
                    $(
                        $crate::layout::FieldInfo {
                            name: $crate::layout::strip_raw(stringify!($field)),
                            offset: $crate::prm_struct!(@offset $byte $(, $hi)?),
                            width: $crate::prm_struct!(@width $kind $(, $hi, $lo)?),
                            kind: $crate::prm_struct!(@kind $kind $(, $hi)?),
                        },
                    )*
                ],
            };
            const SIZE: usize = $size;
            fn zeroed() -> Self {
                Self::new()
            }
            fn bytes(&self) -> &[u8] {
                &self.0
            }
            fn bytes_mut(&mut self) -> &mut [u8] {
                &mut self.0
            }
        }

        impl $crate::layout::FieldValue for $name {
            fn read_field(image: &[u8], offset: u32, _width: u32) -> Self {
                let start = (offset / 8) as usize;
                let mut bytes = [0u8; $size];
                bytes.copy_from_slice(&image[start..start + $size]);
                Self(bytes)
            }
            fn write_field(&self, image: &mut [u8], offset: u32, _width: u32) -> ::core::result::Result<(), u64> {
                let start = (offset / 8) as usize;
                image[start..start + $size].copy_from_slice(&self.0);
                Ok(())
            }
        }

        const _: () = $crate::layout::check_layout(&<$name as $crate::layout::Layout>::INFO);

        $(
            impl $crate::command::Command for $name {
                const OPCODE: $crate::opcode::Opcode = $crate::opcode::Opcode::$opcode;
                type Output = $out;
            }
        )?
    };

    (@ty [u8; $n:expr]) => { [u8; $n] };
    (@ty [$e:ty]) => { $crate::layout::Flex<$e> };
    (@ty $t:ty) => { $t };

    (@offset $byte:literal) => { ($byte as u32) * 8 };
    (@offset $byte:literal, $hi:literal) => { $crate::layout::bit_offset($byte as u32, $hi) };

    (@width $kind:tt, $hi:literal, $lo:literal) => { ($hi - $lo + 1) as u32 };
    (@width [u8; $n:expr]) => { ($n as u32) * 8 };
    (@width [$e:ty]) => { 0u32 };
    (@width $t:ty) => { (<$t as $crate::layout::Layout>::SIZE as u32) * 8 };

    (@kind bool, $hi:literal) => { $crate::layout::FieldKind::Flag };
    (@kind $t:ty, $hi:literal) => {
        $crate::layout::FieldKind::Uint { bits: (::core::mem::size_of::<$t>() * 8) as u32 }
    };
    (@kind [u8; $n:expr]) => { $crate::layout::FieldKind::Bytes };
    (@kind [$e:ty]) => {
        $crate::layout::FieldKind::Flex { element_bits: (::core::mem::size_of::<$e>() * 8) as u32 }
    };
    (@kind $t:ty) => { $crate::layout::FieldKind::Struct(&<$t as $crate::layout::Layout>::INFO) };
}

#[cfg(test)]
#[allow(dead_code)]
mod tests {
    use super::*;

    crate::prm_struct! {
        /// Test layout.
        pub struct T("t", 0x18) {
            /// 4 bits at the top of dword 0.
            a: u8 = 0x00[31:28],
            /// A flag.
            b: bool = 0x00[20:20],
            /// 24 bits.
            c: u32 = 0x04[23:0],
            /// A qword.
            d: u64 = 0x08[63:0],
            /// A field crossing a byte boundary.
            e: u16 = 0x10[11:2],
            /// Bytes.
            f: [u8; 4] = 0x14,
        }
    }

    #[test]
    fn offsets_follow_the_prm_convention() {
        assert_eq!(T::a.offset(), 0);
        assert_eq!(T::a.width(), 4);
        assert_eq!(T::b.offset(), 11);
        assert_eq!(T::c.offset(), 40);
        assert_eq!(T::d.offset(), 64);
        assert_eq!(T::d.width(), 64);
        assert_eq!(T::e.offset(), 128 + 20);
        assert_eq!(T::e.width(), 10);
        assert_eq!(T::f.offset(), 0x14 * 8);
        assert_eq!(T::f.width(), 32);
    }

    #[test]
    fn set_and_get_round_trip_without_touching_neighbours() {
        let mut t = T::new();
        t.0 = [0xa5; 0x18];
        t.set(T::a, 0x3)
            .unwrap()
            .set(T::b, false)
            .unwrap()
            .set(T::e, 0x3ff)
            .unwrap();
        assert_eq!(t.0[0], 0x35);
        assert_eq!(t.0[1], 0xa5 & !0x10);
        assert_eq!(t.get(T::e), 0x3ff);
        // Bits 1:0 and 15:12 of dword 0x10 untouched.
        assert_eq!(t.0[0x12] >> 4, 0xa5 >> 4);
        assert_eq!(t.0[0x13] & 0x3, 0xa5 & 0x3);
        t.set(T::d, 0x0102_0304_0506_0708).unwrap();
        assert_eq!(&t.0[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        t.set(T::f, [9, 8, 7, 6]).unwrap();
        assert_eq!(t.get(T::f), [9, 8, 7, 6]);
    }

    #[test]
    fn overflow_is_an_error_naming_the_field() {
        let err = T::new().with(T::a, 16).unwrap_err();
        match err {
            Error::FieldOverflow {
                layout,
                field,
                value,
                width,
            } => {
                assert_eq!((layout, field, value, width), ("t", "a", 16, 4));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn reflection_reads_fields_and_refuses_short_images() {
        let t = T::new().with(T::c, 0xabcdef).unwrap();
        let info = &<T as Layout>::INFO;
        let c = info.field("c").unwrap();
        assert_eq!(
            info.read(t.as_bytes(), c).unwrap(),
            FieldReading::Uint(0xabcdef)
        );
        assert!(matches!(
            info.read(&t.as_bytes()[..4], c),
            Err(Error::Truncated { .. })
        ));
        assert!(T::decode(&[0u8; 3]).is_err());
    }

    #[test]
    fn strip_raw_identifiers() {
        assert_eq!(strip_raw("r#type"), "type");
        assert_eq!(strip_raw("rtype"), "rtype");
    }
}
