//! `platform::bare_metal` driving a ConnectX: hca-emu behind a BAR0 in
//! shared memory (the bridge of `hca-shm-bridge`, as under
//! `hca-ivshmem`), DMA memory handed to `BareMetal` as a caller's region
//! and mapped into the emulator's IOMMU at its bus address. With
//! recording cache operations (`CacheOps`), the test checks that the
//! driver calls them where a system without coherent DMA needs them.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use hca_bare_metal::rc;
use hca_driver::verbs::{
    Context, Cq, DEFAULT_GID_INDEX, DmaBuf, Mr, Pd, Qp, QpInitAttr, QpType, RecvWr, SendFlags,
    SendOp, SendWr, Srq, SrqInitAttr, WcOpcode, WcStatus, WorkCompletion,
};
use hca_driver::{Config, Hca, WaitMode};
use hca_emu::{EmuConfig, EmuHca};
use hca_shm_bridge::bridge::Bridge;
use hca_shm_bridge::shm::SharedBar;
use platform::bare_metal::{AddressMap, BareMetal, CacheOps, DmaMemory};
use platform::host::HostWindow;
use platform::{Mmio, MmioWindow, Platform};

/// Bus address of the DMA memory (below the emulator's own IOVAs).
const BUS: u64 = 0x4000_0000;
/// 8 MiB of DMA memory.
const LEN: usize = 8 << 20;

fn now() -> Duration {
    static T0: OnceLock<Instant> = OnceLock::new();
    T0.get_or_init(Instant::now).elapsed()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Clean,
    Invalidate,
}

/// Cache operations that record what they were asked.
#[derive(Debug, Clone, Default)]
struct Recorder(Arc<Mutex<Vec<(Op, usize, usize)>>>);

impl Recorder {
    fn take(&self) -> Vec<(Op, usize, usize)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl CacheOps for Recorder {
    fn clean(&self, addr: usize, len: usize) {
        self.0.lock().unwrap().push((Op::Clean, addr, len));
    }
    fn invalidate(&self, addr: usize, len: usize) {
        self.0.lock().unwrap().push((Op::Invalidate, addr, len));
    }
}

type Plat<K> = BareMetal<fn() -> Duration, platform::bare_metal::NoPciHooks, 64, K>;

/// The emulated function behind a shared BAR, and the DMA memory (page
/// aligned, mapped at `BUS`).
struct Rig {
    emu: Arc<EmuHca>,
    shm: Arc<SharedBar>,
    _bridge: Bridge,
    mem: Vec<u64>,
    base: usize,
}

impl Rig {
    fn new() -> Rig {
        let emu = Arc::new(EmuHca::new(hca_shm_bridge::bridged_config(
            EmuConfig::default(),
        )));
        // The bare-metal program has no configuration space hooks here:
        // the function's command register is set for it.
        emu.platform().config_write(4, &6u16.to_le_bytes()).unwrap();
        emu.plug_loopback(1).unwrap();
        let shm = Arc::new(SharedBar::create(emu.bar_size(), "bare-metal test BAR0").unwrap());
        let bridge = Bridge::start(emu.clone(), shm.clone(), "bare-metal test").unwrap();
        let mut mem = vec![0u64; (LEN + 4096) / 8];
        let p = mem.as_mut_ptr().cast::<u8>();
        let base = p as usize + p.align_offset(4096);
        // SAFETY: `mem` lives as long as the rig (the window is unmapped
        // when the emulator goes, before `mem`: fields drop in order) and
        // is reached only through the platform's volatile copies.
        let window =
            unsafe { HostWindow::new(std::ptr::NonNull::new(base as *mut u8).unwrap(), LEN) }
                .unwrap();
        emu.map_dma(BUS, window).unwrap();
        Rig {
            emu,
            shm,
            _bridge: bridge,
            mem,
            base,
        }
    }

    fn platform(&self) -> Plat<platform::bare_metal::Coherent> {
        let _ = &self.mem;
        // SAFETY: the memory and the shared BAR outlive the platform (the
        // rig is dropped after it in every test); nothing else uses them.
        unsafe {
            let mem = DmaMemory::new(
                std::ptr::NonNull::new(self.base as *mut u8).unwrap(),
                LEN,
                AddressMap::Offset { phys_base: BUS },
            )
            .unwrap();
            BareMetal::new(mem, now as fn() -> Duration)
                .unwrap()
                .with_bar(0, self.shm.host_ptr(), self.shm.len())
                .unwrap()
        }
    }

    fn inside(&self, addr: usize, len: usize) -> bool {
        addr >= self.base && addr + len <= self.base + LEN
    }
}

fn config() -> Config {
    Config {
        wait_mode: WaitMode::Polling,
        ..Config::default()
    }
}

#[test]
fn coherent_bare_metal_maps_plain_windows_and_runs_the_driver() {
    // Without cache operations the BAR window is the plain MmioWindow and
    // the data path's hooks are compiled out.
    const { assert!(!<MmioWindow as Mmio>::DMA_CACHE_MAINTENANCE) };
    const { assert!(<platform::bare_metal::CachedWindow<Recorder> as Mmio>::DMA_CACHE_MAINTENANCE) };
    let rig = Rig::new();
    let p = rig.platform();
    let _: MmioWindow = p.map_bar(0).unwrap();
    let hca = Hca::open(p, config()).map_err(|f| f.error).unwrap();
    assert!(hca.page_stats().held > 0);
    let p = hca.close().map_err(|f| f.error).unwrap();
    assert_eq!(p.dma_stats().allocated_bytes, 0);
    assert_eq!(rig.emu.firmware_pages(), 0);
    assert!(rig.emu.iommu_faults().is_empty());
}

#[test]
fn cache_operations_are_called_where_non_coherent_dma_needs_them() {
    let rig = Rig::new();
    let rec = Recorder::default();
    let p = rig.platform().with_cache(rec.clone());
    let hca = Arc::new(Hca::open(p, config()).map_err(|f| f.error).unwrap());

    // Commands: every entry and mailbox block cleaned before its doorbell,
    // the status word invalidated while waiting, the entry and the output
    // mailboxes invalidated before they are read.
    let ops = rec.take();
    let commands = hca.commands_executed() as usize;
    let count = |op: Op, len: usize| {
        ops.iter()
            .filter(|&&(o, a, l)| o == op && l == len && rig.inside(a, l))
            .count()
    };
    assert!(
        count(Op::Clean, 64) >= commands,
        "{} entry cleans for {commands} commands",
        count(Op::Clean, 64)
    );
    assert!(count(Op::Invalidate, 64) >= commands);
    assert!(count(Op::Invalidate, 4) >= commands);
    // Mailbox blocks (576 bytes) both ways (QUERY_HCA_CAP has output
    // mailboxes, MANAGE_PAGES input ones).
    assert!(count(Op::Clean, 576) > 0 && count(Op::Invalidate, 576) > 0);
    // EQEs consumed during bring-up (the port's state change on the
    // loopback plug): each invalidated twice in a row at its address,
    // before and after its ownership check (no command does that).
    assert!(
        ops.windows(2)
            .any(|w| w[0] == w[1] && w[0].0 == Op::Invalidate && w[0].2 == 64),
        "no EQE invalidated around its ownership check"
    );
    assert!(ops.iter().all(|&(_, a, l)| rig.inside(a, l)));
    // The EQ rings' initial owner bits (the default configuration's
    // command, async and completion EQs: 2^5, 2^7 and 2^8 EQEs of 64
    // bytes) cleaned before their CREATE_EQ (a command entry after them).
    let last_entry = ops
        .iter()
        .rposition(|o| o.0 == Op::Clean && o.2 == 64)
        .unwrap();
    for len in [64 << 5, 64 << 7, 64 << 8] {
        let at = ops.iter().position(|o| o.0 == Op::Clean && o.2 == len);
        assert!(
            at.is_some_and(|i| i < last_entry),
            "EQ ring of {len} bytes: {at:?}"
        );
    }

    let ctx = Arc::new(Context::open(&hca).unwrap());
    let pd = Arc::new(Pd::alloc(&ctx).unwrap());
    rec.take();
    let cq = Arc::new(Cq::create(&ctx, 16).unwrap());
    // The CQ's ring of invalid CQEs cleaned (once, whole) before the
    // device can write it; its doorbell record too.
    let ops = rec.take();
    let cq_log = rig.emu.cq(cq.number().0).unwrap().log_size;
    let ring_len = 64usize << cq_log;
    let rings: Vec<_> = ops
        .iter()
        .filter(|o| o.0 == Op::Clean && o.2 == ring_len)
        .collect();
    assert_eq!(rings.len(), 1, "{ops:?}");
    // Before CREATE_CQ (the last command entry cleaned).
    let ring_at = ops.iter().position(|o| o == rings[0]).unwrap();
    assert!(ops[ring_at..].iter().any(|o| o.0 == Op::Clean && o.2 == 64));
    let cq_ring = rings[0].1..rings[0].1 + ring_len;
    assert!(rig.inside(cq_ring.start, ring_len));
    assert!(ops.iter().any(|o| o.0 == Op::Clean && o.2 == 8));
    let buf = Arc::new(DmaBuf::alloc(&hca, 8192).unwrap());
    let mr = Mr::register(&pd, &buf, rc::ACCESS).unwrap();
    rec.take();
    let mut a = Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq)).unwrap();
    // The doorbell record the QP starts with.
    let ops = rec.take();
    assert!(ops.iter().any(|o| o.0 == Op::Clean && o.2 == 8), "{ops:?}");
    let mut b = Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq)).unwrap();
    let gid = ctx.query_gid(1, u16::from(DEFAULT_GID_INDEX)).unwrap();
    let (qa, qb) = (a.number().0, b.number().0);
    for (q, to) in [(&mut a, qb), (&mut b, qa)] {
        q.modify(&rc::init()).unwrap();
        q.modify(&rc::rtr(to, gid)).unwrap();
        q.modify(&rc::rts()).unwrap();
    }
    rec.take();
    b.post_recv(&RecvWr {
        wr_id: 9,
        sgl: &[mr.sge(4096, 64).unwrap()],
    })
    .unwrap();
    // A receive: the WQE (one stride) cleaned, then the doorbell record
    // (the RQ's doorbell), nothing else.
    let ops = rec.take();
    assert_eq!(ops.len(), 2, "{ops:?}");
    let stride = ops[0].2;
    assert_eq!(ops[0].0, Op::Clean, "the WQE: {ops:?}");
    assert!(stride >= 16 && stride.is_power_of_two(), "{ops:?}");
    assert_eq!((ops[1].0, ops[1].2), (Op::Clean, 8), "the record: {ops:?}");
    assert!(rig.inside(ops[0].1, stride) && rig.inside(ops[1].1, 8));
    assert_ne!(ops[0].1, ops[1].1);
    let rq_record = ops[1].1;
    // Two in one list: both WQEs in one clean (they follow the first),
    // then the record.
    let sge = [mr.sge(4096, 64).unwrap()];
    b.post_recv_list(&[
        RecvWr {
            wr_id: 7,
            sgl: &sge,
        },
        RecvWr {
            wr_id: 8,
            sgl: &sge,
        },
    ])
    .unwrap();
    let list = rec.take();
    assert_eq!(
        list,
        [
            (Op::Clean, ops[0].1 + stride, 2 * stride),
            (Op::Clean, rq_record, 8)
        ]
    );
    buf.write(0, b"non-coherent hello").unwrap();
    rec.take();

    // A SEND: its WQE (one 64-byte WQEBB) cleaned, then the doorbell
    // record (8 bytes), nothing else before the doorbell.
    a.post_send(
        &SendWr::new(1, SendOp::Send)
            .sgl(&[mr.sge(0, 18).unwrap()])
            .flags(SendFlags::SIGNALED),
    )
    .unwrap();
    let ops = rec.take();
    assert_eq!(ops.len(), 2, "{ops:?}");
    assert_eq!((ops[0].0, ops[0].2), (Op::Clean, 64), "the WQE: {ops:?}");
    assert_eq!((ops[1].0, ops[1].2), (Op::Clean, 8), "the record: {ops:?}");
    assert!(rig.inside(ops[0].1, 64) && rig.inside(ops[1].1, 8));
    assert_ne!(ops[0].1, ops[1].1);

    // Two more SENDs in one list: both WQEBBs in one clean.
    let sge = [mr.sge(0, 18).unwrap()];
    let wrs = [
        SendWr::new(2, SendOp::Send).sgl(&sge),
        SendWr::new(3, SendOp::Send)
            .sgl(&sge)
            .flags(SendFlags::SIGNALED),
    ];
    b.post_recv(&RecvWr {
        wr_id: 10,
        sgl: &[mr.sge(4096, 64).unwrap()],
    })
    .unwrap();
    b.post_recv(&RecvWr {
        wr_id: 11,
        sgl: &[mr.sge(4096, 64).unwrap()],
    })
    .unwrap();
    rec.take();
    a.post_send_list(&wrs).unwrap();
    let ops = rec.take();
    assert_eq!(ops.len(), 2, "{ops:?}");
    assert_eq!(
        (ops[0].0, ops[0].2),
        (Op::Clean, 128),
        "two WQEBBs: {ops:?}"
    );
    assert_eq!((ops[1].0, ops[1].2), (Op::Clean, 8));

    // The completions: each CQE invalidated before and after its
    // ownership check, the consumer index record cleaned.
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < 5 && Instant::now() < deadline {
        let mut wc = [WorkCompletion::default(); 8];
        let n = cq.poll(&mut wc).unwrap();
        got.extend_from_slice(&wc[..n]);
    }
    let ops = rec.take();
    assert_eq!(got.len(), 5, "{got:?}");
    assert!(got.iter().all(|w| w.status == WcStatus::Success));
    let recv = got.iter().filter(|w| w.opcode == WcOpcode::Recv).count();
    assert_eq!(recv, 3);
    let mut text = [0u8; 18];
    buf.read(4096, &mut text).unwrap();
    assert_eq!(&text, b"non-coherent hello");
    // Every consumed CQE: an invalidate of 64 bytes at the same address
    // twice in a row; every empty look: one.
    let inv: Vec<usize> = ops
        .iter()
        .filter(|o| o.0 == Op::Invalidate)
        .map(|o| {
            assert_eq!(o.2, 64);
            o.1
        })
        .collect();
    let pairs = inv.windows(2).filter(|w| w[0] == w[1]).count();
    assert!(pairs >= 5, "{inv:x?}");
    let distinct: std::collections::BTreeSet<usize> = inv.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        6,
        "five CQEs and the empty slot after them: {inv:x?}"
    );
    assert!(ops.iter().any(|o| o.0 == Op::Clean && o.2 == 8));

    // A resize: the new ring's invalid CQEs cleaned before MODIFY_CQ
    // (a command entry after them).
    rec.take();
    cq.resize(64).unwrap();
    let ops = rec.take();
    let new_len = 64usize << rig.emu.cq(cq.number().0).unwrap().log_size;
    assert!(new_len > ring_len);
    let at = ops
        .iter()
        .position(|o| o.0 == Op::Clean && o.2 == new_len)
        .unwrap_or_else(|| panic!("{ops:?}"));
    assert!(ops[at..].iter().any(|o| o.0 == Op::Clean && o.2 == 64));
    let cq_ring = ops[at].1..ops[at].1 + new_len;

    // CQ compaction: a CQE of `a` (older) and one of `b` (newer) wait in
    // the CQ; destroying `b` drops its CQE and moves `a`'s up over it,
    // then cleans the rewritten slot (inside the ring) so no dirty line
    // overwrites what the device writes there later.
    let cqn = cq.number().0;
    let produced = |n: u32| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while rig.emu.cq(cqn).unwrap().pc < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(rig.emu.cq(cqn).unwrap().pc, n);
    };
    let pc = rig.emu.cq(cqn).unwrap().pc;
    a.post_recv(&RecvWr {
        wr_id: 20,
        sgl: &[mr.sge(4096, 64).unwrap()],
    })
    .unwrap();
    b.post_send(&SendWr::new(21, SendOp::Send).sgl(&[mr.sge(0, 18).unwrap()]))
        .unwrap();
    produced(pc + 1);
    a.post_send(&SendWr::new(22, SendOp::Send).sgl(&[mr.sge(0, 18).unwrap()]))
        .unwrap();
    produced(pc + 2);
    rec.take();
    b.destroy().unwrap();
    let ops = rec.take();
    let rewritten: Vec<_> = ops
        .iter()
        .filter(|o| o.0 == Op::Clean && cq_ring.contains(&o.1))
        .collect();
    assert_eq!(rewritten.len(), 1, "{ops:?}");
    assert_eq!(rewritten[0].2, 64, "{ops:?}");
    assert!(rewritten[0].1 + 64 <= cq_ring.end);
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut wc).unwrap(), 1);
    assert_eq!((wc[0].wr_id, wc[0].opcode), (20, WcOpcode::Recv));

    // An SRQ: its linked ring and record cleaned when it is made (last
    // thing, before any post), a post cleans the WQE then the record.
    rec.take();
    let srq = Srq::create(&pd, &SrqInitAttr::new(4, 1)).unwrap();
    let ops = rec.take();
    let n = ops.len();
    assert!(n >= 2, "{ops:?}");
    let (ring, record) = (ops[n - 2], ops[n - 1]);
    assert_eq!((ring.0, record.0, record.2), (Op::Clean, Op::Clean, 8));
    assert!(rig.inside(ring.1, ring.2) && rig.inside(record.1, 8));
    srq.post_recv(&RecvWr {
        wr_id: 30,
        sgl: &[mr.sge(4096, 64).unwrap()],
    })
    .unwrap();
    let ops = rec.take();
    assert_eq!(ops.len(), 2, "{ops:?}");
    assert_eq!(ops[0].0, Op::Clean);
    assert!(ops[0].2 < ring.2 && ring.2 % ops[0].2 == 0, "{ops:?}");
    assert!(ops[0].1 >= ring.1 && ops[0].1 + ops[0].2 <= ring.1 + ring.2);
    assert_eq!(ops[1], (Op::Clean, record.1, 8));
    srq.destroy().unwrap();

    a.destroy().unwrap();
    mr.destroy().unwrap();
    drop((cq, buf, pd, ctx));
    let p = Arc::into_inner(hca)
        .unwrap()
        .close()
        .map_err(|f| f.error)
        .unwrap();
    assert_eq!(p.dma_stats().allocated_bytes, 0);
    assert_eq!(rig.emu.firmware_pages(), 0);
    assert!(
        rig.emu.iommu_faults().is_empty(),
        "{:?}",
        rig.emu.iommu_faults()
    );
}
