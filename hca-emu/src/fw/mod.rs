//! The firmware model: the command interface (entry and mailbox chain
//! delivery, validation, answers) and the firmware state.
//!
//! Delivery checks, in the order the model applies them, each answered with
//! the delivery status in the entry's `status_own` byte (the entry's output
//! area is left untouched):
//!
//! | check | delivery status |
//! |---|---|
//! | `type` is not 7 | 0x10 bad command descriptor type |
//! | `cmdif_checksum` = 3 (on) and the entry's bytes do not XOR to 0xff | 0x1 signature error |
//! | a reserved field of the entry is not zero | 0x9 reserved fields not cleared |
//! | `input_length` < 16 or > 4 MiB | 0x7 input length error |
//! | `output_length` < 8 or > 4 MiB | 0x8 output length error |
//! | input chain pointer not 1 KiB aligned | 0x5 input pointer not aligned |
//! | output chain pointer not 1 KiB aligned | 0x4 output pointer not aligned |
//! | a block's `block_number` is not its index | 0x3 bad block number |
//! | a block's `token` differs from the entry's | 0x2 token error |
//! | checksum on and a block's signatures are wrong | 0x1 signature error |
//! | a block cannot be read or written (IOMMU fault) | 0x6 firmware internal error |
//!
//! A chain pointer of 0 where blocks are needed is read like any other
//! address: IOVA 0 is never mapped, so it is an IOMMU fault.
//!
//! Then the command itself: unknown opcode (bad operation), wrong firmware
//! state (bad system state), input/output shorter than the layout (bad
//! input/output length), reserved fields of the top-level input layout not
//! zero (bad parameter), then the command's own checks. A failing command has
//! no effect. See [`crate::syndrome`] for the syndromes.

mod cmds;
mod eq;
mod hca;
mod mad;
pub(crate) mod objects;
mod port;
mod pp;
mod qp;
mod ts;
mod umem;

pub(crate) use hca::RESD_LKEY;
pub(crate) use objects::Objects;
pub use objects::{Cq, Mkey, ObjKind, Qp, QpState, Srq, Wq, buf_addr};
pub(crate) use port::Port;
pub use pp::RateLimit;
pub(crate) use pp::sq_pp_index;
pub use umem::Umem;

use std::sync::atomic::{Ordering, fence};

use crate::config::EmuConfig;
use crate::device::{CommandRecord, Device, LOG_CMDQ_SIZE};
use crate::faults::{OutputCorruption, fire};
use crate::ifc::{any_bits, ifc};
use crate::personality::Caps;
use crate::rng::Rng;
use crate::syndrome as syn;

const ENTRY: &str = "cmd_queue_entry";
const BOX: &str = "cmd_if_box";
const BLOCK: usize = 576;
const BLOCK_DATA: usize = 512;
const MAX_MSG: usize = 16 + BLOCK_DATA * 8192;
/// The shortest output a command may ask for: status and syndrome (8
/// bytes). ENABLE_HCA's and DISABLE_HCA's outputs are 12 bytes long
/// (`enable_hca_out`), and rdma-core's mlx5_vfio asks for exactly that.
const MIN_OUT: usize = 8;

/// Delivery status values (PRM names).
mod ds {
    pub const SIGNATURE_ERR: u8 = 0x01;
    pub const TOKEN_ERR: u8 = 0x02;
    pub const BAD_BLOCK_NUMBER: u8 = 0x03;
    pub const OUTPUT_POINTER_NOT_ALIGNED: u8 = 0x04;
    pub const INPUT_POINTER_NOT_ALIGNED: u8 = 0x05;
    pub const FW_INTERNAL_ERR: u8 = 0x06;
    pub const INPUT_LEN_ERR: u8 = 0x07;
    pub const OUTPUT_LEN_ERR: u8 = 0x08;
    pub const RES_FLD_NOT_CLR_ERR: u8 = 0x09;
    pub const CMD_DESCRIPTOR_TYPE_ERR: u8 = 0x10;
}

/// Command status values (PRM names).
pub(crate) mod st {
    pub const BAD_OP: u8 = 0x02;
    pub const BAD_PARAM: u8 = 0x03;
    pub const BAD_SYS_STATE: u8 = 0x04;
    pub const BAD_RES: u8 = 0x05;
    pub const LIM_EXCEEDED: u8 = 0x08;
    pub const BAD_RES_STATE: u8 = 0x09;
    pub const BAD_INP_LEN: u8 = 0x50;
    pub const BAD_OUTP_LEN: u8 = 0x51;
}

/// The HCA's firmware state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcaState {
    /// Before ENABLE_HCA (or after DISABLE_HCA).
    Disabled,
    /// After ENABLE_HCA, before INIT_HCA.
    Enabled,
    /// After INIT_HCA.
    Initialized,
    /// After TEARDOWN_HCA.
    TornDown,
}

/// A failing command: status and syndrome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fail {
    pub(crate) status: u8,
    pub(crate) syndrome: u32,
}

pub(crate) fn fail<T>(status: u8, syndrome: u32) -> Result<T, Fail> {
    Err(Fail { status, syndrome })
}

pub(crate) type R = Result<Vec<u8>, Fail>;

/// A decoded command: its input message and the layouts it is read and
/// answered through.
pub(crate) struct Cmd {
    pub(crate) opcode: u16,
    pub(crate) op_mod: u16,
    pub(crate) input: Vec<u8>,
    pub(crate) out_len: usize,
    pub(crate) lin: &'static str,
    pub(crate) lout: &'static str,
}

impl Cmd {
    /// An input field of at most 64 bits.
    pub(crate) fn get(&self, path: &str) -> u64 {
        ifc().get(&self.input, self.lin, path)
    }

    /// Input bytes of a field.
    pub(crate) fn bytes(&self, path: &str) -> &[u8] {
        ifc().bytes(&self.input, self.lin, path)
    }

    /// Byte offset of a field of the input layout.
    pub(crate) fn off(&self, path: &str) -> usize {
        ifc().field(self.lin, path).byte_offset()
    }

    /// A zeroed output of the output layout's size.
    pub(crate) fn out(&self) -> Out {
        Out {
            b: vec![0; ifc().size(self.lout).max(16)],
            layout: self.lout,
        }
    }

    /// The i-th 64-bit entry of a flexible page-address array of the input.
    pub(crate) fn pas(&self, path: &str, i: usize) -> u64 {
        let f = ifc().field(self.lin, path);
        crate::ifc::get_bits(
            &self.input,
            crate::ifc::Field {
                offset: f.offset + 64 * i,
                width: 64,
            },
        )
    }

    /// How many 64-bit entries of a flexible array fit in the input.
    pub(crate) fn pas_room(&self, path: &str) -> usize {
        let off = ifc().field(self.lin, path).byte_offset();
        self.input.len().saturating_sub(off) / 8
    }
}

/// An output message under construction.
pub(crate) struct Out {
    pub(crate) b: Vec<u8>,
    pub(crate) layout: &'static str,
}

impl Out {
    pub(crate) fn set(&mut self, path: &str, v: u64) -> &mut Self {
        ifc().set(&mut self.b, self.layout, path, v);
        self
    }

    /// Copies `src` at a byte offset, growing the output if needed.
    pub(crate) fn put(&mut self, off: usize, src: &[u8]) -> &mut Self {
        if self.b.len() < off + src.len() {
            self.b.resize(off + src.len(), 0);
        }
        self.b[off..off + src.len()].copy_from_slice(src);
        self
    }

    pub(crate) fn done(&mut self) -> R {
        Ok(std::mem::take(&mut self.b))
    }
}

/// Object number allocation like firmware: never 0, from a per-type base
/// and stride drawn from the seeded generator, so numbers are not
/// predictable from 1.
#[derive(Clone, Debug)]
pub(crate) struct NumberPool {
    base: u32,
    stride: u32,
    max: u32,
    next: u32,
}

impl NumberPool {
    pub(crate) fn new(rng: &mut Rng, lo: u32, hi: u32, stride_max: u32, max: u32) -> Self {
        Self {
            base: rng.range(u64::from(lo), u64::from(hi)) as u32,
            stride: rng.range(1, u64::from(stride_max) + 1) as u32,
            max,
            next: 0,
        }
    }

    /// The next free number, given which ones are taken.
    pub(crate) fn alloc(&mut self, taken: impl Fn(u32) -> bool) -> Option<u32> {
        let span = (self.max.saturating_sub(self.base)) / self.stride + 1;
        for _ in 0..span.min(1 << 20) {
            let i = self.next % span;
            self.next = self.next.wrapping_add(1);
            let n = self.base + i * self.stride;
            if n != 0 && n <= self.max && !taken(n) {
                return Some(n);
            }
        }
        None
    }
}

/// Pages the firmware holds and wants.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pages {
    /// Every page held, by IOVA.
    pub(crate) held: std::collections::BTreeSet<u64>,
    pub(crate) boot_wanted: u32,
    pub(crate) init_wanted: u32,
    pub(crate) boot_given: u32,
    pub(crate) init_given: u32,
    /// Regular pages asked for through PAGE_REQUEST and not given yet.
    pub(crate) regular_wanted: u32,
    /// Pages the firmware asked (negative PAGE_REQUEST) to give back.
    pub(crate) to_return: u32,
    /// Boot and init pages: not returned while the HCA is initialized.
    pub(crate) pinned: std::collections::BTreeSet<u64>,
}

/// The firmware's state.
pub(crate) struct Fw {
    pub(crate) state: HcaState,
    pub(crate) issi: u16,
    pub(crate) caps: Caps,
    pub(crate) pages: Pages,
    pub(crate) objs: Objects,
    pub(crate) ports: Vec<Port>,
    pub(crate) host_endianness: u8,
    pub(crate) driver_version: Vec<u8>,
    /// Objects alive at TEARDOWN_HCA (destroyed by it, never by the driver).
    pub(crate) leaked_at_teardown: Vec<(ObjKind, u32)>,
    /// Pages still held at DISABLE_HCA or reset.
    pub(crate) pages_lost: Vec<u64>,
    /// Multicast groups (ATTACH_TO_MCG): MGID -> the attached UD QPs, in
    /// attach order.
    pub(crate) mcast: std::collections::BTreeMap<[u8; 16], Vec<u32>>,
    /// The packet pacing rate-limit table (SET_PP_RATE_LIMIT): the set
    /// entries by index.
    pub(crate) rate_limits: std::collections::BTreeMap<u16, RateLimit>,
}

impl Fw {
    pub(crate) fn new(cfg: &EmuConfig) -> Self {
        let mut rng = Rng::new(cfg.seed);
        let caps = Caps::for_config(cfg);
        let nports = cfg.ports.max(1);
        let ports = (1..=nports).map(|p| Port::new(cfg.seed, p)).collect();
        Self {
            state: HcaState::Disabled,
            issi: 0,
            objs: Objects::new(&mut rng),
            caps,
            pages: Pages {
                boot_wanted: cfg.pages.boot,
                init_wanted: cfg.pages.init,
                ..Default::default()
            },
            ports,
            host_endianness: 0,
            driver_version: Vec::new(),
            leaked_at_teardown: Vec::new(),
            pages_lost: Vec::new(),
            mcast: std::collections::BTreeMap::new(),
            rate_limits: std::collections::BTreeMap::new(),
        }
    }

    pub(crate) fn checksum_on(&self) -> bool {
        self.caps.general("cmdif_checksum") == 3
    }

    /// Whether the ports are InfiniBand (`port_type` 0).
    pub(crate) fn infiniband(&self) -> bool {
        self.caps.general("port_type") == 0
    }
}

fn xor8(b: &[u8]) -> u8 {
    b.iter().fold(0, |a, &x| a ^ x)
}

fn be64(b: &[u8], off: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[off..off + 8]);
    u64::from_be_bytes(x)
}

enum Delivery {
    Failed(u8),
    /// The device could not even finish: leave the entry owned.
    Abandon,
}

impl Device {
    /// Executes the commands of a doorbell write.
    pub(crate) fn exec_commands(&mut self, bits: u32) {
        if self.gone || self.fatal() {
            self.ignored_doorbells
                .push(format!("command doorbell {bits:#x}: device dead"));
            return;
        }
        if !self.dma_enabled() {
            self.ignored_doorbells
                .push(format!("command doorbell {bits:#x}: bus master disabled"));
            return;
        }
        if !self.cmdq_written || self.initializing() {
            self.ignored_doorbells.push(format!(
                "command doorbell {bits:#x}: command queue not ready (initializing)"
            ));
            return;
        }
        for slot in 0..(1u32 << LOG_CMDQ_SIZE) {
            if bits & (1 << slot) != 0 {
                self.exec_slot(slot as u8);
            }
        }
    }

    fn exec_slot(&mut self, slot: u8) {
        let base = self.cmdq_addr() + u64::from(slot) * 64;
        let mut e = [0u8; 64];
        if self
            .iommu
            .read(base, &mut e, &|| format!("command entry slot {slot}"))
            .is_err()
        {
            return;
        }
        let t = ifc();
        if t.get(&e, ENTRY, "ownership") == 0 {
            self.ignored_doorbells.push(format!(
                "slot {slot}: doorbell for an entry the driver owns"
            ));
            return;
        }
        let opcode = u16::from_be_bytes([e[0x10], e[0x11]]);
        let op_mod = u16::from_be_bytes([e[0x16], e[0x17]]);
        let mut rules: Vec<_> = self
            .faults
            .never_complete
            .drain(..)
            .map(|r| (r, ()))
            .collect();
        let never = fire(&mut rules, &mut self.faults.hits, opcode).is_some();
        self.faults.never_complete = rules.into_iter().map(|(r, _)| r).collect();
        if never {
            log::debug!("slot {slot}: command {opcode:#x} will never complete (injected)");
            return;
        }
        let token = t.get(&e, ENTRY, "token") as u8;
        let in_len = t.get(&e, ENTRY, "input_length") as usize;
        let out_len = t.get(&e, ENTRY, "output_length") as usize;
        let mut rec = CommandRecord {
            slot,
            opcode,
            op_mod,
            delivery_status: 0,
            status: 0,
            syndrome: 0,
            input_length: in_len as u32,
            output_length: out_len as u32,
        };
        let corrupt = {
            let f = &mut self.faults;
            fire(&mut f.corrupt_output, &mut f.hits, opcode)
        };
        // Only an EQ that existed when the command started hears of it.
        let notify = self.eq_for(eq::event::CMD);
        match self.deliver(slot, &e, token, in_len, out_len, corrupt) {
            Ok((status, syndrome)) => {
                rec.status = status;
                rec.syndrome = syndrome;
            }
            Err(Delivery::Abandon) => return,
            Err(Delivery::Failed(d)) => {
                rec.delivery_status = d;
                let mut tail = [e[0x3c], e[0x3d], e[0x3e], d << 1];
                if self.fw.checksum_on() {
                    let mut ee = e;
                    ee[0x3f] = tail[3];
                    ee[0x3d] = 0;
                    tail[1] = !xor8(&ee);
                }
                fence(Ordering::SeqCst);
                let _ = self.iommu.write(base + 0x3c, &tail, &|| {
                    format!("command entry slot {slot} status")
                });
            }
        }
        log::trace!(
            "slot {slot}: {:?} op_mod {op_mod:#x} delivery {:#x} status {:#x} syndrome {:#x}",
            firmware_cmds::Opcode(opcode),
            rec.delivery_status,
            rec.status,
            rec.syndrome
        );
        self.cmd_log.push(rec);
        if let Some(eqn) = notify {
            self.post_cmd_completion(eqn, slot);
        }
    }

    fn deliver(
        &mut self,
        slot: u8,
        e: &[u8; 64],
        token: u8,
        in_len: usize,
        out_len: usize,
        corrupt: Option<OutputCorruption>,
    ) -> Result<(u8, u32), Delivery> {
        let t = ifc();
        let base = self.cmdq_addr() + u64::from(slot) * 64;
        let checksum = self.fw.checksum_on();
        if t.get(e, ENTRY, "type") != 7 {
            return Err(Delivery::Failed(ds::CMD_DESCRIPTOR_TYPE_ERR));
        }
        if checksum && xor8(e) != 0xff {
            return Err(Delivery::Failed(ds::SIGNATURE_ERR));
        }
        if any_bits(e, t.field(ENTRY, "reserved_at_8"))
            || any_bits(e, t.field(ENTRY, "reserved_at_1f0"))
        {
            return Err(Delivery::Failed(ds::RES_FLD_NOT_CLR_ERR));
        }
        if !(16..=MAX_MSG).contains(&in_len) {
            return Err(Delivery::Failed(ds::INPUT_LEN_ERR));
        }
        if !(MIN_OUT..=MAX_MSG).contains(&out_len) {
            return Err(Delivery::Failed(ds::OUTPUT_LEN_ERR));
        }
        let in_ptr = be64(e, 0x08);
        let out_ptr = be64(e, 0x30);
        let in_blocks = in_len.saturating_sub(16).div_ceil(BLOCK_DATA);
        let out_blocks = out_len.saturating_sub(16).div_ceil(BLOCK_DATA);
        if in_blocks > 0 && in_ptr & 0x3ff != 0 {
            return Err(Delivery::Failed(ds::INPUT_POINTER_NOT_ALIGNED));
        }
        if out_blocks > 0 && out_ptr & 0x3ff != 0 {
            return Err(Delivery::Failed(ds::OUTPUT_POINTER_NOT_ALIGNED));
        }
        // Input chain.
        let mut input = Vec::with_capacity(in_len);
        input.extend_from_slice(&e[0x10..0x20]);
        let mut ptr = in_ptr;
        for i in 0..in_blocks {
            let mut b = vec![0u8; BLOCK];
            if self
                .iommu
                .read(ptr, &mut b, &|| {
                    format!("input mailbox block {i} of slot {slot}")
                })
                .is_err()
            {
                return Err(Delivery::Failed(ds::FW_INTERNAL_ERR));
            }
            if t.get(&b, BOX, "block_number") != i as u64 {
                return Err(Delivery::Failed(ds::BAD_BLOCK_NUMBER));
            }
            if t.get(&b, BOX, "token") != u64::from(token) {
                return Err(Delivery::Failed(ds::TOKEN_ERR));
            }
            if checksum && (xor8(&b[BLOCK_DATA..BLOCK - 1]) != 0xff || xor8(&b) != 0xff) {
                return Err(Delivery::Failed(ds::SIGNATURE_ERR));
            }
            input.extend_from_slice(&b[..BLOCK_DATA]);
            let next = be64(&b, 0x230);
            if i + 1 < in_blocks && next & 0x3ff != 0 {
                return Err(Delivery::Failed(ds::INPUT_POINTER_NOT_ALIGNED));
            }
            ptr = next;
        }
        input.truncate(in_len);
        // Output chain: learn the block addresses (the driver prepared the
        // trailers).
        let mut out_addrs = Vec::with_capacity(out_blocks);
        let mut ptr = out_ptr;
        for i in 0..out_blocks {
            let mut tr = [0u8; 16];
            if self
                .iommu
                .read(ptr + 0x230, &mut tr, &|| {
                    format!("output mailbox block {i} of slot {slot}")
                })
                .is_err()
            {
                return Err(Delivery::Failed(ds::FW_INTERNAL_ERR));
            }
            if u32::from_be_bytes([tr[8], tr[9], tr[10], tr[11]]) != i as u32 {
                return Err(Delivery::Failed(ds::BAD_BLOCK_NUMBER));
            }
            if tr[13] != token {
                return Err(Delivery::Failed(ds::TOKEN_ERR));
            }
            out_addrs.push(ptr);
            let next = be64(&tr, 0);
            if i + 1 < out_blocks && next & 0x3ff != 0 {
                return Err(Delivery::Failed(ds::OUTPUT_POINTER_NOT_ALIGNED));
            }
            ptr = next;
        }

        let mut out = self.execute(input, out_len);
        let status = out[0];
        let syndrome = u32::from_be_bytes([out[4], out[5], out[6], out[7]]);
        if let Some(OutputCorruption::OutputByte { offset, xor }) = corrupt {
            if let Some(b) = out.get_mut(offset) {
                *b ^= xor;
            }
        }

        // Output blocks.
        for (i, &addr) in out_addrs.iter().enumerate() {
            let start = 16 + i * BLOCK_DATA;
            let mut data = vec![0u8; BLOCK_DATA];
            let n = out.len().saturating_sub(start).min(BLOCK_DATA);
            data[..n].copy_from_slice(&out[start..start + n]);
            if self
                .iommu
                .write(addr, &data, &|| {
                    format!("output mailbox block {i} of slot {slot}")
                })
                .is_err()
            {
                return Err(Delivery::Failed(ds::FW_INTERNAL_ERR));
            }
            let mut tr = [0u8; 16];
            let _ = self.iommu.read(addr + 0x230, &mut tr, &|| String::new());
            match corrupt {
                Some(OutputCorruption::BlockNumber) => tr[11] ^= 0x5a,
                Some(OutputCorruption::Token) => tr[13] ^= 0xa5,
                _ => {}
            }
            let sign = checksum || corrupt == Some(OutputCorruption::Signature);
            if sign {
                // Whole block: data + 0x30 reserved + trailer.
                let mut whole = vec![0u8; BLOCK];
                whole[..BLOCK_DATA].copy_from_slice(&data);
                let mut mid = [0u8; 0x30];
                let _ = self.iommu.read(addr + 0x200, &mut mid, &|| String::new());
                whole[0x200..0x230].copy_from_slice(&mid);
                whole[0x230..].copy_from_slice(&tr);
                whole[0x23e] = 0;
                whole[0x23f] = 0;
                whole[0x23e] = !xor8(&whole[BLOCK_DATA..BLOCK - 1]);
                whole[0x23f] = !xor8(&whole[..BLOCK - 1]);
                tr.copy_from_slice(&whole[0x230..]);
                if corrupt == Some(OutputCorruption::Signature) {
                    tr[15] ^= 0x3c;
                }
            }
            let _ = self.iommu.write(addr + 0x230, &tr, &|| String::new());
        }

        // Inline output, then the status word last.
        let mut inline = [0u8; 16];
        let n = out.len().min(16);
        inline[..n].copy_from_slice(&out[..n]);
        let mut e2 = *e;
        e2[0x20..0x30].copy_from_slice(&inline);
        if let Some(OutputCorruption::EntryOutputLength(v)) = corrupt {
            e2[0x38..0x3c].copy_from_slice(&v.to_be_bytes());
        }
        if let Some(OutputCorruption::EntryToken(tk)) = corrupt {
            e2[0x3c] = tk;
        }
        e2[0x3f] = 0;
        if checksum {
            e2[0x3d] = 0;
            e2[0x3d] = !xor8(&e2);
        }
        if corrupt == Some(OutputCorruption::EntrySignature) {
            e2[0x3d] ^= 0x5a;
        }
        if self
            .iommu
            .write(base + 0x20, &e2[0x20..0x3c], &|| {
                format!("command entry slot {slot} output")
            })
            .is_err()
        {
            return Err(Delivery::Abandon);
        }
        fence(Ordering::SeqCst);
        if self
            .iommu
            .write(base + 0x3c, &e2[0x3c..0x40], &|| {
                format!("command entry slot {slot} status")
            })
            .is_err()
        {
            return Err(Delivery::Abandon);
        }
        Ok((status, syndrome))
    }

    /// Executes one command message; returns the output message of
    /// `out_len` bytes (status and syndrome in its first 8 bytes).
    pub(crate) fn execute(&mut self, input: Vec<u8>, out_len: usize) -> Vec<u8> {
        let opcode = u16::from_be_bytes([input[0], input[1]]);
        let op_mod = u16::from_be_bytes([input[6], input[7]]);
        let r = if let Some((_, status, syndrome)) = {
            let mut rules = std::mem::take(&mut self.faults.fail);
            let hit = fire(&mut rules, &mut self.faults.hits, opcode).map(|(s, y)| ((), s, y));
            self.faults.fail = rules;
            hit
        } {
            Err(Fail {
                status,
                syndrome: if syndrome == 0 {
                    syn::INJECTED
                } else {
                    syndrome
                },
            })
        } else {
            self.dispatch(opcode, op_mod, input, out_len)
        };
        let mut out = match r {
            Ok(o) => o,
            Err(f) => {
                let mut o = vec![0u8; 16];
                o[0] = f.status;
                o[4..8].copy_from_slice(&f.syndrome.to_be_bytes());
                o
            }
        };
        out.resize(out_len, 0);
        out
    }

    fn dispatch(&mut self, opcode: u16, op_mod: u16, input: Vec<u8>, out_len: usize) -> R {
        let Some(spec) = cmds::spec(opcode) else {
            return fail(st::BAD_OP, syn::BAD_OPCODE);
        };
        // A command of a capability the device lacks is unknown to it.
        if spec.needs.is_some_and(|has| !has(self)) {
            return fail(st::BAD_OP, syn::BAD_OPCODE);
        }
        // Firmware state.
        use cmds::Gate;
        let s = self.fw.state;
        let ok = match spec.gate {
            Gate::Disabled => s == HcaState::Disabled,
            Gate::Enabled => s != HcaState::Disabled,
            Gate::PreInit => s == HcaState::Enabled,
            Gate::Initialized => s == HcaState::Initialized,
            Gate::NotInitialized => s == HcaState::Enabled || s == HcaState::TornDown,
            Gate::AccessReg => s == HcaState::Enabled || s == HcaState::Initialized,
        };
        if !ok {
            let y = match (spec.gate, s) {
                (Gate::Disabled, _) => syn::ALREADY_ENABLED,
                (_, HcaState::Disabled) => syn::NOT_ENABLED,
                (Gate::PreInit, HcaState::Initialized) => syn::ONLY_BEFORE_INIT,
                (Gate::NotInitialized, HcaState::Initialized) => syn::DISABLE_WHILE_INIT,
                (_, HcaState::TornDown) => syn::TORN_DOWN,
                (Gate::Initialized, HcaState::Enabled) => syn::NOT_INITIALIZED,
                _ => syn::ONLY_BEFORE_INIT,
            };
            return fail(st::BAD_SYS_STATE, y);
        }
        let t = ifc();
        let min_in = spec.min_in.unwrap_or_else(|| t.size(spec.lin));
        if input.len() < min_in {
            return fail(st::BAD_INP_LEN, syn::INPUT_TOO_SHORT);
        }
        let min_out = spec
            .min_out
            .unwrap_or_else(|| t.size(spec.lout).max(MIN_OUT));
        if out_len < min_out {
            return fail(st::BAD_OUTP_LEN, syn::OUTPUT_TOO_SHORT);
        }
        // `create_flow_group_in`'s layout facts end at `table_id` (one
        // "reserved" field over the index range and match criteria): its
        // handler checks the truly reserved bytes itself.
        let partial = spec.lin == "create_flow_group_in";
        // `attach_to_mcg_in`'s facts name its header (opcode, op_mod)
        // `reserved_at_0`: the header is not a reserved field there.
        let header_named_reserved = spec.lin == "attach_to_mcg_in";
        for f in t.reserved_fields(spec.lin) {
            if header_named_reserved && f.offset < 64 {
                continue;
            }
            if !partial && f.offset / 8 < min_in && any_bits(&input, f) {
                return fail(st::BAD_PARAM, syn::RESERVED_NOT_ZERO);
            }
        }
        if t.try_field(spec.lin, "uid").is_ok() && t.get(&input, spec.lin, "uid") != 0 {
            return fail(st::BAD_PARAM, syn::BAD_UID);
        }
        let c = Cmd {
            opcode,
            op_mod,
            input,
            out_len,
            lin: spec.lin,
            lout: spec.lout,
        };
        (spec.handler)(self, &c)
    }
}
