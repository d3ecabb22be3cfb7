//! NIC RX flow steering and RSS objects built from raw command inputs
//! (offsets from Linux `mlx5_ifc.h`, as `firmware_cmds::flow` and
//! `firmware_cmds::eth` declare them), with their teardown.

#![allow(dead_code)]

use super::dp::Node;
use super::{inp, setf};

/// The objects created, as destroy commands to run in reverse order.
#[derive(Default)]
pub struct Steering {
    undo: Vec<Vec<u8>>,
}

/// An `fte_match_set_lyr_2_4` image (64 bytes), for criteria and values.
#[derive(Clone, Copy, Debug)]
pub struct Outer(pub [u8; 64]);

impl Default for Outer {
    fn default() -> Self {
        Outer([0; 64])
    }
}

impl Outer {
    pub fn smac(mut self, m: [u8; 6]) -> Self {
        self.0[0..6].copy_from_slice(&m);
        self
    }
    pub fn ethertype(mut self, t: u16) -> Self {
        self.0[6..8].copy_from_slice(&t.to_be_bytes());
        self
    }
    pub fn dmac(mut self, m: [u8; 6]) -> Self {
        self.0[8..14].copy_from_slice(&m);
        self
    }
    /// `first_vid` (12 bits) and `cvlan_tag`.
    pub fn vid(mut self, vid: u16, cvlan: bool) -> Self {
        self.0[14..16].copy_from_slice(&(vid & 0xfff).to_be_bytes());
        self.0[18] = (self.0[18] & !0x80) | if cvlan { 0x80 } else { 0 };
        self
    }
    pub fn ip_protocol(mut self, p: u8) -> Self {
        self.0[16] = p;
        self
    }
    pub fn tcp_dport(mut self, p: u16) -> Self {
        self.0[22..24].copy_from_slice(&p.to_be_bytes());
        self
    }
    pub fn udp_dport(mut self, p: u16) -> Self {
        self.0[30..32].copy_from_slice(&p.to_be_bytes());
        self
    }
    pub fn src_ipv4(mut self, a: [u8; 4]) -> Self {
        self.0[44..48].copy_from_slice(&a);
        self
    }
    pub fn dst_ipv4(mut self, a: [u8; 4]) -> Self {
        self.0[60..64].copy_from_slice(&a);
        self
    }
    pub fn src_ipv6(mut self, a: [u8; 16]) -> Self {
        self.0[32..48].copy_from_slice(&a);
        self
    }
    pub fn dst_ipv6(mut self, a: [u8; 16]) -> Self {
        self.0[48..64].copy_from_slice(&a);
        self
    }
}

/// A full mask of the fields `o` sets (every non-zero byte becomes 0xff;
/// the byte holding `cvlan_tag` keeps only that bit).
pub fn mask_of(o: &Outer) -> Outer {
    let mut m = [0u8; 64];
    for (i, &b) in o.0.iter().enumerate() {
        m[i] = if i == 18 {
            b & 0x80
        } else if b != 0 {
            0xff
        } else {
            0
        };
    }
    Outer(m)
}

/// `dest_format_struct.destination_type`.
pub const DEST_TABLE: u8 = 1;
pub const DEST_TIR: u8 = 2;

impl Steering {
    /// CREATE_FLOW_TABLE (NIC RX) of `2^log_size` entries at `level`,
    /// missing to `miss` (or the default drop).
    pub fn table(&mut self, n: &mut Node, level: u8, log_size: u8, miss: Option<u32>) -> u32 {
        let mut m = inp(0x930, 0, 0x30);
        setf(&mut m, 0x18, 23, 16, u64::from(level));
        setf(&mut m, 0x18, 7, 0, u64::from(log_size));
        if let Some(t) = miss {
            setf(&mut m, 0x18, 27, 24, 1);
            setf(&mut m, 0x1c, 23, 0, u64::from(t));
        }
        let id = n.r.create(&m);
        let mut d = inp(0x931, 0, 0x40);
        setf(&mut d, 0x14, 23, 0, u64::from(id));
        self.undo.push(d);
        id
    }

    /// CREATE_FLOW_GROUP over `[start, end]` with outer-header criteria
    /// (none: a catch-all group).
    pub fn group(
        &mut self,
        n: &mut Node,
        table: u32,
        start: u32,
        end: u32,
        crit: Option<Outer>,
    ) -> u32 {
        let mut m = inp(0x933, 0, 0x400);
        setf(&mut m, 0x14, 23, 0, u64::from(table));
        setf(&mut m, 0x1c, 31, 0, u64::from(start));
        setf(&mut m, 0x24, 31, 0, u64::from(end));
        if let Some(c) = crit {
            setf(&mut m, 0x3c, 7, 0, 1);
            m[0x40..0x80].copy_from_slice(&c.0);
        }
        let g = n.r.create(&m);
        let mut d = inp(0x934, 0, 0x40);
        setf(&mut d, 0x14, 23, 0, u64::from(table));
        setf(&mut d, 0x18, 31, 0, u64::from(g));
        self.undo.push(d);
        g
    }

    /// SET_FLOW_TABLE_ENTRY input: forward to `dests` (none: drop).
    pub fn fte_input(
        table: u32,
        group: u32,
        index: u32,
        value: &Outer,
        dests: &[(u8, u32)],
    ) -> Vec<u8> {
        let mut m = inp(0x936, 0, 0x340 + 8 * dests.len());
        setf(&mut m, 0x14, 23, 0, u64::from(table));
        setf(&mut m, 0x20, 31, 0, u64::from(index));
        setf(&mut m, 0x44, 31, 0, u64::from(group));
        setf(&mut m, 0x4c, 15, 0, if dests.is_empty() { 2 } else { 4 });
        setf(&mut m, 0x50, 23, 0, dests.len() as u64);
        m[0x80..0xc0].copy_from_slice(&value.0);
        for (k, &(t, id)) in dests.iter().enumerate() {
            setf(&mut m, 0x340 + 8 * k, 31, 24, u64::from(t));
            setf(&mut m, 0x340 + 8 * k, 23, 0, u64::from(id));
        }
        m
    }

    /// SET_FLOW_TABLE_ENTRY; the entry is deleted at teardown.
    pub fn fte(
        &mut self,
        n: &mut Node,
        table: u32,
        group: u32,
        index: u32,
        value: &Outer,
        dests: &[(u8, u32)],
    ) {
        n.r.ok(&Self::fte_input(table, group, index, value, dests), 16);
        self.undo.push(Self::delete_input(table, index));
    }

    /// DELETE_FLOW_TABLE_ENTRY input.
    pub fn delete_input(table: u32, index: u32) -> Vec<u8> {
        let mut d = inp(0x938, 0, 0x40);
        setf(&mut d, 0x14, 23, 0, u64::from(table));
        setf(&mut d, 0x20, 31, 0, u64::from(index));
        d
    }

    /// Deletes an entry now (and forgets its teardown).
    pub fn delete(&mut self, n: &mut Node, table: u32, index: u32) {
        let d = Self::delete_input(table, index);
        n.r.ok(&d, 16);
        self.undo.retain(|u| *u != d);
    }

    /// SET_FLOW_TABLE_ROOT (NIC RX).
    pub fn root(&mut self, n: &mut Node, table: u32) {
        let mut m = inp(0x92f, 0, 0x40);
        setf(&mut m, 0x14, 23, 0, u64::from(table));
        n.r.ok(&m, 16);
    }

    /// A direct TIR on `rqn`.
    pub fn tir_direct(&mut self, n: &mut Node, td: u32, rqn: u32) -> u32 {
        let mut m = inp(0x900, 0, 0x110);
        setf(&mut m, 0x3c, 23, 0, u64::from(rqn));
        setf(&mut m, 0x44, 23, 0, u64::from(td));
        let t = n.r.create(&m);
        self.undo.push(destroy(0x902, t));
        t
    }

    /// CREATE_RQT over `rqs`.
    pub fn rqt(&mut self, n: &mut Node, rqs: &[u32]) -> u32 {
        let mut m = inp(0x916, 0, 0x110 + 4 * rqs.len());
        setf(&mut m, 0x20 + 0x14, 15, 0, rqs.len() as u64);
        setf(&mut m, 0x20 + 0x18, 15, 0, rqs.len() as u64);
        for (i, &r) in rqs.iter().enumerate() {
            setf(&mut m, 0x110 + 4 * i, 23, 0, u64::from(r));
        }
        let t = n.r.create(&m);
        self.undo.push(destroy(0x918, t));
        t
    }

    /// An indirect TIR over `rqt` with the Toeplitz hash: `key`, the L3/L4
    /// types and `selected_fields` as `(ipv6, udp, fields)`.
    pub fn tir_rss(
        &mut self,
        n: &mut Node,
        td: u32,
        rqt: u32,
        key: &[u8; 40],
        (ipv6, udp, fields): (bool, bool, u32),
    ) -> u32 {
        let mut m = inp(0x900, 0, 0x110);
        setf(&mut m, 0x24, 31, 28, 1);
        setf(&mut m, 0x40, 23, 0, u64::from(rqt));
        setf(&mut m, 0x44, 31, 28, 2);
        setf(&mut m, 0x44, 23, 0, u64::from(td));
        m[0x48..0x70].copy_from_slice(key);
        setf(&mut m, 0x70, 31, 31, u64::from(ipv6));
        setf(&mut m, 0x70, 30, 30, u64::from(udp));
        setf(&mut m, 0x70, 29, 0, u64::from(fields));
        let t = n.r.create(&m);
        self.undo.push(destroy(0x902, t));
        t
    }

    /// Destroys everything created here, newest first.
    pub fn teardown(mut self, n: &mut Node) {
        while let Some(d) = self.undo.pop() {
            n.r.ok(&d, 16);
        }
    }
}

fn destroy(opcode: u16, num: u32) -> Vec<u8> {
    let mut d = inp(opcode, 0, 16);
    setf(&mut d, 8, 23, 0, u64::from(num));
    d
}
