//! Receive-side scaling: the Toeplitz hash that a TIR with `rx_hash_fn` =
//! [`RX_HASH_FN_TOEPLITZ`](crate::eth::RX_HASH_FN_TOEPLITZ) computes over the
//! fields its `rx_hash_field_selector_outer` selects, and the input those
//! fields make.
//!
//! The input is the selected fields in the order of Microsoft's RSS
//! specification (source address, destination address, source port,
//! destination port), each in network byte order; the key is the TIR's
//! `rx_hash_toeplitz_key` (40 bytes). The receive CQE reports the result
//! in `rx_hash_result` and the RQ table entry is chosen from its low bits.

use crate::eth::{
    RX_HASH_FIELD_SELECT_DST_IP, RX_HASH_FIELD_SELECT_L4_DPORT, RX_HASH_FIELD_SELECT_L4_SPORT,
    RX_HASH_FIELD_SELECT_SRC_IP,
};

/// Length of `tirc.rx_hash_toeplitz_key` in bytes.
pub const TOEPLITZ_KEY_LEN: usize = 40;

/// The longest hash input this module builds: two IPv6 addresses and two
/// ports.
pub const MAX_HASH_INPUT: usize = 36;

/// The Toeplitz hash of `input` under `key`: for every set bit of the
/// input (most significant bit of byte 0 first), the 32-bit window of the
/// key starting at that bit position is XORed into the result.
///
/// Key bits beyond the end of `key` count as zero, so an input longer than
/// `key.len() - 4` bytes hashes its tail against zeros (the 40-byte key
/// covers the 36 bytes of an IPv6 4-tuple).
pub fn toeplitz(key: &[u8], input: &[u8]) -> u32 {
    let kbit = |i: usize| -> u32 {
        key.get(i / 8)
            .map_or(0, |b| u32::from((b >> (7 - i % 8)) & 1))
    };
    // The window starts as the key's first 32 bits and slides one bit per
    // input bit.
    let mut window: u32 = 0;
    for i in 0..32 {
        window = (window << 1) | kbit(i);
    }
    let mut hash = 0u32;
    for (n, byte) in input.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                hash ^= window;
            }
            window = (window << 1) | kbit(n * 8 + bit + 32);
        }
    }
    hash
}

/// The addresses and ports of one packet, for [`hash_input`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashFields<'a> {
    /// Source address: 4 bytes (IPv4) or 16 (IPv6).
    pub src_ip: &'a [u8],
    /// Destination address, the same length as `src_ip`.
    pub dst_ip: &'a [u8],
    /// L4 source and destination ports, when the packet has the L4 type
    /// the selector names.
    pub ports: Option<(u16, u16)>,
}

/// Writes the hash input for the fields `selected` (a
/// `rx_hash_field_select.selected_fields` value) into `out` and returns
/// its length. Ports are only included when `fields.ports` is present.
pub fn hash_input(fields: &HashFields<'_>, selected: u32, out: &mut [u8; MAX_HASH_INPUT]) -> usize {
    let mut n = 0;
    let mut put = |b: &[u8]| {
        let b = &b[..b.len().min(16)];
        out[n..n + b.len()].copy_from_slice(b);
        n += b.len();
    };
    if selected & RX_HASH_FIELD_SELECT_SRC_IP != 0 {
        put(fields.src_ip);
    }
    if selected & RX_HASH_FIELD_SELECT_DST_IP != 0 {
        put(fields.dst_ip);
    }
    if let Some((sp, dp)) = fields.ports {
        if selected & RX_HASH_FIELD_SELECT_L4_SPORT != 0 {
            put(&sp.to_be_bytes());
        }
        if selected & RX_HASH_FIELD_SELECT_L4_DPORT != 0 {
            put(&dp.to_be_bytes());
        }
    }
    n
}
