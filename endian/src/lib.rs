//! # hca-endian: aligned big-endian integers
//!
//! Every multi-byte field the ConnectX reads or writes is big-endian. The types
//! here hold a value in device byte order in a naturally aligned integer, so a
//! volatile access of one compiles to a single load or store (unlike
//! `zerocopy::byteorder::U32<BigEndian>`, which is a byte array and is read one
//! byte at a time). Use them for registers, doorbell words and any word the
//! device may read while the host writes it.
//!
//! A leaf crate (no dependencies) so that both `firmware-cmds` (PRM layouts)
//! and `platform` (registers, DMA memory) use the same types without one
//! depending on the other; they re-export them as `firmware_cmds::endian`
//! and `platform::{Be16, Be32, Be64}`.
//!
//! ```
//! use hca_endian::Be32;
//! let w = Be32::new(0x0102_0304);
//! assert_eq!(w.to_raw().to_ne_bytes(), [1, 2, 3, 4]);
//! assert_eq!(w.get(), 0x0102_0304);
//! ```
#![no_std]
#![forbid(unsafe_code)]

use core::fmt;

macro_rules! be_type {
    ($(#[$meta:meta])* $name:ident, $int:ty) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        #[repr(transparent)]
        pub struct $name($int);

        impl $name {
            /// Zero.
            pub const ZERO: Self = Self(0);

            /// Converts a host-order value to device (big-endian) order.
            #[inline(always)]
            pub const fn new(host: $int) -> Self {
                Self(host.to_be())
            }

            /// The value in host order.
            #[inline(always)]
            pub const fn get(self) -> $int {
                <$int>::from_be(self.0)
            }

            /// Wraps a value that is already in device byte order, e.g. one read
            /// from device memory with a native-endian load.
            #[inline(always)]
            pub const fn from_raw(raw: $int) -> Self {
                Self(raw)
            }

            /// The value as stored in memory (device byte order), suitable for a
            /// native-endian store.
            #[inline(always)]
            pub const fn to_raw(self) -> $int {
                self.0
            }

            /// The bytes in memory order.
            #[inline(always)]
            pub const fn to_bytes(self) -> [u8; core::mem::size_of::<$int>()] {
                self.get().to_be_bytes()
            }

            /// From bytes in memory order.
            #[inline(always)]
            pub const fn from_bytes(bytes: [u8; core::mem::size_of::<$int>()]) -> Self {
                Self::new(<$int>::from_be_bytes(bytes))
            }
        }

        impl From<$int> for $name {
            #[inline(always)]
            fn from(host: $int) -> Self {
                Self::new(host)
            }
        }

        impl From<$name> for $int {
            #[inline(always)]
            fn from(be: $name) -> Self {
                be.get()
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:#x})", stringify!($name), self.get())
            }
        }

        impl fmt::LowerHex for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::LowerHex::fmt(&self.get(), f)
            }
        }
    };
}

be_type!(
    /// A big-endian `u16` with 2-byte alignment.
    Be16,
    u16
);
be_type!(
    /// A big-endian `u32` with 4-byte alignment.
    Be32,
    u32
);
be_type!(
    /// A big-endian `u64` with 8-byte alignment.
    Be64,
    u64
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_order_is_big_endian() {
        assert_eq!(Be32::new(0x0102_0304).to_raw().to_ne_bytes(), [1, 2, 3, 4]);
        assert_eq!(
            Be64::new(0x0102_0304_0506_0708).to_bytes(),
            [1, 2, 3, 4, 5, 6, 7, 8]
        );
        assert_eq!(Be16::from_bytes([0xab, 0xcd]).get(), 0xabcd);
        assert_eq!(core::mem::align_of::<Be64>(), 8);
    }
}
