//! Test helpers: a raw command-interface driver written against the
//! platform traits (entries and mailboxes built with `firmware-cmds`), input
//! builders with hand-written PRM offsets, and a parser of the real trace.
#![allow(dead_code)]

pub mod dp;
pub mod steer;
pub mod trace;

use std::time::Duration;

use firmware_cmds::cmdq::CmdQueueEntry;
use firmware_cmds::mailbox::{CmdIfBox, InputChain, blocks_for};
use hca_emu::{EmuBar, EmuConfig, EmuHca, EmuPlatform};
use platform::{Be32, DmaRegion, Mmio, Platform};

/// Command timeout of the raw driver (virtual time).
pub const CMD_TIMEOUT: Duration = Duration::from_secs(60);

/// A command answer.
#[derive(Debug)]
pub struct Answer {
    /// Delivery status from the entry.
    pub delivery: u8,
    /// Command status (output byte 0).
    pub status: u8,
    /// Syndrome (output bytes 4..8).
    pub syndrome: u32,
    /// The whole output message.
    pub out: Vec<u8>,
    /// The entry after completion.
    pub entry: [u8; 64],
}

impl Answer {
    pub fn be32(&self, off: usize) -> u32 {
        u32::from_be_bytes(self.out[off..off + 4].try_into().unwrap())
    }
}

/// A minimal driver of the command interface.
pub struct Raw {
    pub emu: EmuHca,
    pub p: EmuPlatform,
    pub bar: EmuBar,
    pub cmdq: Option<DmaRegion>,
    pub token: u8,
    /// Sign input mailboxes (when cmdif_checksum is on).
    pub sign: bool,
    /// Page regions given to firmware.
    pub pages: Vec<DmaRegion>,
    pub other: Vec<DmaRegion>,
}

/// Sets bits `hi..=lo` of the big-endian dword at `off`.
pub fn setf(b: &mut [u8], off: usize, hi: u32, lo: u32, v: u64) {
    let w = u32::from_be_bytes(b[off..off + 4].try_into().unwrap());
    let width = hi - lo + 1;
    let mask = if width == 32 {
        u32::MAX
    } else {
        ((1u32 << width) - 1) << lo
    };
    let w = (w & !mask) | (((v as u32) << lo) & mask);
    b[off..off + 4].copy_from_slice(&w.to_be_bytes());
}

/// Writes a big-endian u64.
pub fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_be_bytes());
}

/// Writes the addresses of `pages` consecutive 4 KiB pages from `buf` as
/// the 64-bit `pas` entries at byte `off` of a command input.
pub fn put_pas(b: &mut [u8], off: usize, buf: u64, pages: usize) {
    for i in 0..pages {
        put64(b, off + 8 * i, buf + 4096 * i as u64);
    }
}

/// A command input of `len` bytes with opcode and op_mod.
pub fn inp(opcode: u16, op_mod: u16, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len.max(16)];
    v[0..2].copy_from_slice(&opcode.to_be_bytes());
    v[6..8].copy_from_slice(&op_mod.to_be_bytes());
    v
}

impl Raw {
    /// A fresh device, bus master on, command queue set up and ready.
    pub fn new(cfg: EmuConfig) -> Self {
        let emu = EmuHca::new(cfg);
        let p = emu.platform();
        let bar = p.map_bar(0).unwrap();
        let mut r = Raw {
            emu,
            p,
            bar,
            cmdq: None,
            token: 0,
            sign: false,
            pages: Vec::new(),
            other: Vec::new(),
        };
        r.enable_pci();
        assert!(
            r.wait_init(Duration::from_secs(120)),
            "firmware never left initializing"
        );
        r.setup_cmdq();
        r
    }

    pub fn enable_pci(&self) {
        let mut c = [0u8; 2];
        self.p.config_read(4, &mut c).unwrap();
        let v = u16::from_le_bytes(c) | 0x6;
        self.p.config_write(4, &v.to_le_bytes()).unwrap();
    }

    /// Waits for `initializing` to clear; false on timeout.
    pub fn wait_init(&self, timeout: Duration) -> bool {
        let start = self.p.now();
        while self.bar.read32(0x1fc).get() >> 31 == 1 {
            if self.p.now() - start > timeout {
                return false;
            }
            self.p.delay(Duration::from_millis(2));
        }
        true
    }

    pub fn setup_cmdq(&mut self) {
        let q = self.p.alloc_dma(4096, 4096).unwrap();
        let a = q.iova();
        self.bar.write32(0x10, Be32::new((a >> 32) as u32));
        self.bar.write32(0x14, Be32::new(a as u32));
        self.cmdq = Some(q);
        assert!(self.wait_init(Duration::from_secs(2)));
    }

    pub fn cmdq(&self) -> &DmaRegion {
        self.cmdq.as_ref().unwrap()
    }

    /// Writes `entry` into `slot` and rings the doorbell.
    pub fn post(&self, slot: usize, entry: &[u8; 64]) {
        self.cmdq().write_bytes(slot * 64, entry);
        platform::barrier::udma_to_device_barrier();
        self.bar.write32(0x18, Be32::new(1 << slot));
    }

    /// Polls the slot's ownership bit; `None` on timeout.
    pub fn wait(&self, slot: usize, timeout: Duration) -> Option<[u8; 64]> {
        let start = self.p.now();
        loop {
            if self.cmdq().read_u8(slot * 64 + 0x3f) & 1 == 0 {
                let mut e = [0u8; 64];
                self.cmdq().read_bytes(slot * 64, &mut e);
                return Some(e);
            }
            if self.p.now() - start > timeout {
                return None;
            }
            self.p.delay(Duration::from_millis(1));
        }
    }

    fn next_token(&mut self) -> u8 {
        self.token = self.token.wrapping_add(1).max(1);
        self.token
    }

    /// Builds mailbox chains and the entry for `input`, runs it in slot 0.
    pub fn cmd(&mut self, input: &[u8], out_len: usize) -> Answer {
        let t = self.next_token();
        self.cmd_with(input, out_len, t, |_, _, _| {})
            .expect("command timed out")
    }

    /// Like `cmd`, with a hook that may tamper with the entry and the input
    /// and output chains before the doorbell (entry, input blocks, output
    /// blocks). `None` when the command never completes.
    pub fn cmd_with(
        &mut self,
        input: &[u8],
        out_len: usize,
        token: u8,
        tamper: impl FnOnce(&mut [u8; 64], &DmaRegion, &DmaRegion),
    ) -> Option<Answer> {
        let chain = InputChain::new(input, token, self.sign);
        let nin = chain.num_blocks();
        let nout = blocks_for(out_len);
        let inb = self.p.alloc_dma((nin.max(1)) * 1024, 4096).unwrap();
        let outb = self.p.alloc_dma((nout.max(1)) * 1024, 4096).unwrap();
        for i in 0..nin {
            let next = if i + 1 < nin {
                inb.iova() + (i as u64 + 1) * 1024
            } else {
                0
            };
            let b = chain.block(i, next).unwrap();
            inb.write_bytes(i * 1024, b.as_bytes());
        }
        for i in 0..nout {
            let next = if i + 1 < nout {
                outb.iova() + (i as u64 + 1) * 1024
            } else {
                0
            };
            let mut b = CmdIfBox::new();
            b.set_next_pointer(next).unwrap();
            b.set(CmdIfBox::block_number, i as u32).unwrap();
            b.set(CmdIfBox::token, token).unwrap();
            outb.write_bytes(i * 1024, b.as_bytes());
        }
        let e = CmdQueueEntry::build(
            &chain.inline(),
            input.len() as u32,
            if nin > 0 { inb.iova() } else { 0 },
            out_len as u32,
            if nout > 0 { outb.iova() } else { 0 },
            token,
        )
        .unwrap();
        let mut eb: [u8; 64] = *e.as_bytes();
        tamper(&mut eb, &inb, &outb);
        self.post(0, &eb);
        let done = self.wait(0, CMD_TIMEOUT);
        let r = done.map(|entry| {
            let mut out = entry[0x20..0x30].to_vec();
            for i in 0..nout {
                let mut d = vec![0u8; 512];
                outb.read_bytes(i * 1024, &mut d);
                out.extend_from_slice(&d);
            }
            out.truncate(out_len);
            Answer {
                delivery: entry[0x3f] >> 1,
                status: out[0],
                syndrome: u32::from_be_bytes(out[4..8].try_into().unwrap()),
                out,
                entry,
            }
        });
        if r.is_some() {
            self.p.free_dma(inb);
            self.p.free_dma(outb);
        } else {
            // The device may still own them: keep them mapped.
            self.other.push(inb);
            self.other.push(outb);
        }
        r
    }

    /// Runs a command that must succeed; returns the output.
    #[track_caller]
    pub fn ok(&mut self, input: &[u8], out_len: usize) -> Vec<u8> {
        let a = self.cmd(input, out_len);
        assert_eq!(
            (a.delivery, a.status),
            (0, 0),
            "opcode {:#x} failed: syndrome {:#x} {:?}",
            u16::from_be_bytes([input[0], input[1]]),
            a.syndrome,
            hca_emu::syndrome::describe(a.syndrome)
        );
        a.out
    }

    /// Runs a command that creates or allocates an object and must
    /// succeed; returns the object's number (the low 24 bits of output
    /// dword 2).
    #[track_caller]
    pub fn create(&mut self, input: &[u8]) -> u32 {
        let o = self.ok(input, 16);
        u32::from_be_bytes(o[8..12].try_into().unwrap()) & 0xff_ffff
    }

    /// Runs a command that must fail with `status`; returns the syndrome.
    #[track_caller]
    pub fn fails(&mut self, input: &[u8], out_len: usize, status: u8) -> u32 {
        let a = self.cmd(input, out_len);
        assert_eq!(a.delivery, 0, "delivery status");
        assert_eq!(
            a.status,
            status,
            "opcode {:#x}: status (syndrome {:#x} {:?})",
            u16::from_be_bytes([input[0], input[1]]),
            a.syndrome,
            hca_emu::syndrome::describe(a.syndrome)
        );
        a.syndrome
    }

    /// QUERY_PAGES.
    pub fn query_pages(&mut self, op_mod: u16) -> i32 {
        let o = self.ok(&inp(0x107, op_mod, 16), 16);
        i32::from_be_bytes(o[12..16].try_into().unwrap())
    }

    /// Allocates `n` pages and gives them with MANAGE_PAGES.
    pub fn give_pages(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let region = self.p.alloc_dma(n * 4096, 4096).unwrap();
        let mut m = inp(0x108, 1, 16 + 8 * n);
        setf(&mut m, 0xc, 31, 0, n as u64);
        for i in 0..n {
            put64(&mut m, 16 + 8 * i, region.iova() + (i * 4096) as u64);
        }
        self.ok(&m, 16);
        self.pages.push(region);
    }

    /// MANAGE_PAGES take of `n`; returns the addresses.
    pub fn take_pages(&mut self, n: usize) -> Vec<u64> {
        let mut m = inp(0x108, 2, 16);
        setf(&mut m, 0xc, 31, 0, n as u64);
        let o = self.ok(&m, 16 + 8 * n);
        let got = u32::from_be_bytes(o[8..12].try_into().unwrap()) as usize;
        assert!(got <= n);
        (0..got)
            .map(|i| u64::from_be_bytes(o[16 + 8 * i..24 + 8 * i].try_into().unwrap()))
            .collect()
    }

    /// ENABLE_HCA .. INIT_HCA in Linux order, at ISSI 1.
    pub fn init(&mut self) {
        self.init_at_issi(1);
    }

    /// ENABLE_HCA .. INIT_HCA in Linux order; SET_ISSI only for ISSI 1 (0
    /// is the ISSI a function starts with).
    pub fn init_at_issi(&mut self, issi: u16) {
        self.ok(&inp(0x104, 0, 16), 16);
        if issi == 1 {
            let answer = self.ok(&inp(0x10a, 0, 16), 0x70);
            assert_eq!(answer[0x6f] & 2, 2, "ISSI 1 supported");
            let mut s = inp(0x10b, 0, 16);
            setf(&mut s, 0x8, 15, 0, 1);
            self.ok(&s, 16);
        }
        let boot = self.query_pages(1);
        self.give_pages(boot as usize);
        self.ok(&inp(0x100, 1, 16), 0x1010);
        let init = self.query_pages(2);
        self.give_pages(init as usize);
        self.ok(&inp(0x102, 0, 16), 16);
    }

    /// TEARDOWN_HCA, reclaim everything, DISABLE_HCA, free the memory
    /// (the command queue stays).
    pub fn teardown(&mut self) {
        self.ok(&inp(0x103, 0, 16), 16);
        loop {
            let n = self.emu.firmware_pages();
            if n == 0 {
                break;
            }
            let got = self.take_pages(n.min(500));
            assert!(!got.is_empty(), "firmware returns no pages");
        }
        self.ok(&inp(0x105, 0, 16), 16);
        for r in self.pages.drain(..).chain(self.other.drain(..)) {
            self.p.free_dma(r);
        }
    }

    pub fn free_all(&mut self) {
        for r in self.pages.drain(..).chain(self.other.drain(..)) {
            self.p.free_dma(r);
        }
        if let Some(q) = self.cmdq.take() {
            self.p.free_dma(q);
        }
    }

    /// Allocates DMA memory the test keeps until `free_all`.
    pub fn dma(&mut self, len: usize) -> u64 {
        let r = self.p.alloc_dma(len, 4096).unwrap();
        let a = r.iova();
        self.other.push(r);
        a
    }

    pub fn region(&self, iova: u64) -> &DmaRegion {
        self.other
            .iter()
            .find(|r| r.contains_iova(iova, 1))
            .expect("region of this test")
    }
}

/// Resource builders with PRM offsets written by hand (from the PRM field
/// tables), independent of the emulator's layout table.
impl Raw {
    pub fn alloc_uar(&mut self) -> u32 {
        self.create(&inp(0x802, 0, 16))
    }

    pub fn alloc_pd(&mut self) -> u32 {
        self.create(&inp(0x800, 0, 16))
    }

    /// CREATE_EQ input: log size, UAR, events, buffer.
    pub fn eq_input(&mut self, log: u32, uar: u32, events: u64) -> (Vec<u8>, u64) {
        let buf = self.dma((64usize << log).max(4096));
        // Owner bytes initialised to 1.
        let r = self.region(buf);
        for i in 0..(1usize << log) {
            r.write_u8(i * 64 + 63, 1);
        }
        let mut m = inp(0x301, 0, 0x118);
        setf(&mut m, 0x1c, 28, 24, u64::from(log));
        setf(&mut m, 0x1c, 23, 0, u64::from(uar));
        let lps = ((64u64 << log).max(4096) / 4096).trailing_zeros();
        setf(&mut m, 0x28, 28, 24, u64::from(lps));
        put64(&mut m, 0x58, events);
        put64(&mut m, 0x110, buf);
        (m, buf)
    }

    pub fn create_eq(&mut self, log: u32, uar: u32, events: u64) -> (u32, u64) {
        let (m, buf) = self.eq_input(log, uar, events);
        let o = self.ok(&m, 16);
        (u32::from_be_bytes(o[8..12].try_into().unwrap()) & 0xff, buf)
    }

    /// CREATE_CQ input: log size, UAR, EQ; returns input, buffer, dbr.
    pub fn cq_input(&mut self, log: u32, uar: u32, eqn: u32) -> (Vec<u8>, u64, u64) {
        let size = (64usize << log).max(4096);
        let buf = self.dma(size);
        let r = self.region(buf);
        for i in 0..(1usize << log) {
            r.write_u8(i * 64 + 63, 0xf0);
        }
        let dbr = self.dma(64);
        let mut m = inp(0x400, 0, 0x110 + 8 * (size / 4096));
        setf(&mut m, 0x1c, 28, 24, u64::from(log));
        setf(&mut m, 0x1c, 23, 0, u64::from(uar));
        setf(&mut m, 0x24, 7, 0, u64::from(eqn));
        put64(&mut m, 0x48, dbr);
        put_pas(&mut m, 0x110, buf, size / 4096);
        (m, buf, dbr)
    }

    pub fn create_cq(&mut self, log: u32, uar: u32, eqn: u32) -> (u32, u64, u64) {
        let (m, buf, dbr) = self.cq_input(log, uar, eqn);
        (self.create(&m), buf, dbr)
    }

    /// CREATE_QP input for a service type with 2^4 RQ WQEs (stride 64) and
    /// 2^4 SQ WQEBBs.
    pub fn qp_input(&mut self, st: u32, pd: u32, uar: u32, cqn: u32) -> Vec<u8> {
        let buf = self.dma(4096 * 2);
        let dbr = self.dma(64);
        let mut m = inp(0x500, 0, 0x110 + 16);
        setf(&mut m, 0x18, 23, 16, u64::from(st));
        setf(&mut m, 0x1c, 23, 0, u64::from(pd));
        setf(&mut m, 0x20, 22, 19, 4); // log_rq_size
        setf(&mut m, 0x20, 18, 16, 2); // log_rq_stride: 64 B
        setf(&mut m, 0x20, 14, 11, 4); // log_sq_size
        setf(&mut m, 0x24, 23, 0, u64::from(uar));
        setf(&mut m, 0x94, 23, 0, u64::from(cqn));
        setf(&mut m, 0xb4, 23, 0, u64::from(cqn));
        put64(&mut m, 0xb8, dbr);
        put64(&mut m, 0x110, buf);
        put64(&mut m, 0x118, buf + 4096);
        m
    }

    pub fn create_qp(&mut self, st: u32, pd: u32, uar: u32, cqn: u32) -> u32 {
        let m = self.qp_input(st, pd, uar, cqn);
        self.create(&m)
    }

    /// A modify-QP input (0x110 bytes) for `opcode`.
    pub fn modify_input(opcode: u16, qpn: u32) -> Vec<u8> {
        let mut m = inp(
            opcode,
            0,
            if matches!(opcode, 0x507 | 0x50a) {
                16
            } else {
                0x110
            },
        );
        setf(&mut m, 0x08, 23, 0, u64::from(qpn));
        m
    }

    /// The QP state from QUERY_QP.
    pub fn query_qp_state(&mut self, qpn: u32) -> u32 {
        let mut m = inp(0x50b, 0, 16);
        setf(&mut m, 0x08, 23, 0, u64::from(qpn));
        let o = self.ok(&m, 0x110);
        u32::from_be_bytes(o[0x18..0x1c].try_into().unwrap()) >> 28
    }
}
