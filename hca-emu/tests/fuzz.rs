//! Nothing a driver can write into BAR0 or DMA memory makes the emulator
//! panic or its device thread die: random command entries, mailbox chains,
//! command inputs and register writes.

mod common;

use common::{Raw, inp};
use hca_emu::EmuConfig;
use platform::{Be32, Be64, Mmio};
use proptest::prelude::*;

const OPCODES: &[u16] = &[
    0x100, 0x101, 0x102, 0x103, 0x104, 0x105, 0x107, 0x108, 0x109, 0x10a, 0x10b, 0x10d, 0x200,
    0x201, 0x202, 0x203, 0x301, 0x302, 0x303, 0x400, 0x401, 0x402, 0x403, 0x500, 0x501, 0x502,
    0x503, 0x504, 0x505, 0x506, 0x507, 0x50a, 0x50b, 0x50c, 0x50e, 0x700, 0x701, 0x702, 0x703,
    0x750, 0x754, 0x755, 0x760, 0x761, 0x762, 0x764, 0x800, 0x801, 0x802, 0x803, 0x805, 0x80d,
    0x816, 0x817, 0x900, 0x902, 0x904, 0x905, 0x906, 0x907, 0x908, 0x909, 0x90a, 0x90b, 0x912,
    0x914, 0x916, 0x918, 0x92f, 0x930, 0x931, 0x933, 0x934, 0x936, 0x938, 0x1234,
];

#[derive(Debug, Clone)]
enum Op {
    /// A well-framed command with a random body.
    Cmd {
        opcode: u16,
        op_mod: u16,
        body: Vec<u8>,
        out_len: usize,
    },
    /// A raw entry in a slot, with random mailbox blocks behind it.
    Entry {
        slot: usize,
        entry: Vec<u8>,
        blocks: Vec<u8>,
        link: bool,
    },
    /// A register write.
    Bar { off: usize, value: u64, wide: bool },
    /// Let time pass.
    Delay(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let lens = prop_oneof![
        Just(16usize),
        Just(0x20),
        Just(0x40),
        Just(0x110),
        Just(0x118),
        Just(0x1010),
        16usize..1200
    ];
    prop_oneof![
        4 => (prop::sample::select(OPCODES), 0u16..16, lens.clone(), prop::collection::vec(any::<u8>(), 0..300), prop_oneof![Just(16usize), Just(0x70), Just(0x110), Just(0x1010), 16usize..700])
            .prop_map(|(opcode, op_mod, len, seed, out_len)| {
                let mut body = vec![0u8; len];
                for (i, b) in seed.iter().enumerate() {
                    let n = body.len();
                    body[(i * 37) % n] = *b;
                }
                Op::Cmd { opcode, op_mod, body, out_len }
            }),
        2 => (1usize..32, prop::collection::vec(any::<u8>(), 64), prop::collection::vec(any::<u8>(), 0..2048), any::<bool>())
            .prop_map(|(slot, entry, blocks, link)| Op::Entry { slot, entry, blocks, link }),
        2 => (prop_oneof![
                Just(0x10usize), Just(0x14), Just(0x18), Just(0x1fc), Just(0x1010),
                (8usize..64, prop::sample::select(vec![0x20usize, 0x24, 0x40, 0x48, 0x800, 0x900, 0x808])).prop_map(|(p, o)| p * 4096 + o),
                (0usize..(32 << 20) / 8).prop_map(|x| x * 8)
            ], any::<u64>(), any::<bool>())
            .prop_map(|(off, value, wide)| Op::Bar { off, value, wide }),
        1 => (0u64..5000).prop_map(Op::Delay),
    ]
}

fn run(r: &mut Raw, ops: Vec<Op>) {
    let q = r.cmdq().iova();
    for op in ops {
        match op {
            Op::Cmd {
                opcode,
                op_mod,
                body,
                out_len,
            } => {
                let mut m = body;
                m[..8].copy_from_slice(&inp(opcode, op_mod, 16)[..8]);
                // Keep the queue where it is for framed commands.
                r.bar.write32(0x10, Be32::new((q >> 32) as u32));
                r.bar.write32(0x14, Be32::new(q as u32));
                r.p_delay_ms(10);
                let t = r.token.wrapping_add(1).max(1);
                r.token = t;
                let _ = r.cmd_with(&m, out_len, t, |_, _, _| {});
            }
            Op::Entry {
                slot,
                mut entry,
                blocks,
                link,
            } => {
                entry[0x3f] |= 1;
                let area = r.dma(4096);
                let reg = r.region(area);
                reg.write_bytes(0, &blocks);
                if link {
                    entry[0x08..0x10].copy_from_slice(&area.to_be_bytes());
                    entry[0x30..0x38].copy_from_slice(&(area + 2048).to_be_bytes());
                }
                r.cmdq().write_bytes(slot * 64, &entry);
                r.bar.write32(0x18, Be32::new(1 << slot));
            }
            Op::Bar { off, value, wide } => {
                // A 64-bit access must be 8-byte aligned (the Mmio contract).
                if wide && off % 8 == 0 {
                    r.bar.write64(off, Be64::new(value));
                } else {
                    r.bar.write32(off, Be32::new(value as u32));
                }
            }
            Op::Delay(ms) => r.p_delay_ms(ms),
        }
    }
    r.emu.run_until_idle();
}

trait DelayMs {
    fn p_delay_ms(&self, ms: u64);
}

impl DelayMs for Raw {
    fn p_delay_ms(&self, ms: u64) {
        use platform::Platform;
        self.p.delay(std::time::Duration::from_millis(ms));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_traffic_never_breaks_the_device(init in any::<bool>(), ops in prop::collection::vec(op(), 1..24)) {
        let mut r = Raw::new(EmuConfig::default());
        if init {
            r.init();
        }
        run(&mut r, ops);
        prop_assert!(r.emu.internal_errors().is_empty(), "{:?}", r.emu.internal_errors());
        // The device still answers: the queue address back, a command.
        let q = r.cmdq().iova();
        r.bar.write32(0x10, Be32::new((q >> 32) as u32));
        r.bar.write32(0x14, Be32::new(q as u32));
        r.p_delay_ms(100);
        let t = r.token.wrapping_add(1).max(1);
        let a = r.cmd_with(&inp(0x10a, 0, 16), 0x70, t, |_, _, _| {});
        prop_assert!(a.is_some(), "the device no longer answers");
        prop_assert!(r.emu.internal_errors().is_empty());
    }
}
