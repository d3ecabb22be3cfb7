//! The test itself ([`run`]), the same on every machine: what differs
//! (boot, console, clock, exit, where ECAM and the exchange page are, who
//! assigns the BARs) is in `arch/`.
//!
//! No heap: the verbs objects live in static [`Slot`]s (`SlotShare`
//! handles), the DMA memory is a static array handed to
//! [`DmaMemory::identity`] (the MMU maps RAM one to one, and the device
//! reaches it by guest-physical address).

use core::ptr::NonNull;
use core::time::Duration;

use crate::arch::{self, exit, now};
use hca_bare_metal::{rc, xchg};
use hca_driver::verbs::{
    Context, Cq, DEFAULT_GID_INDEX, DmaBuf, Gid, Mr, Pd, Qp, QpInitAttr, QpType, SendFlags, SendOp,
    SendWr, SlotShare, WcOpcode, WcStatus, WorkCompletion,
};
use hca_driver::{Config, Hca, Rkey, WaitMode};
use platform::bare_metal::pci::{Ecam, PciFunction};
use platform::bare_metal::{BareMetal, DmaMemory};
use platform::slot::{Slot, SlotRef};

/// The driver's `log` records, on the console.
struct Logger;

impl log::Log for Logger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Info
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            say!("[{}] {}", r.level(), r.args());
        }
    }
    fn flush(&self) {}
}

static LOGGER: Logger = Logger;

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    say!("FAIL: panic: {info}");
    exit(4)
}

/// DMA memory for the driver: 16 MiB of RAM (firmware pages, command
/// queue, mailboxes, EQs, CQs, QPs, buffers).
#[repr(C, align(4096))]
struct Pool([u8; POOL_LEN]);
const POOL_LEN: usize = 16 << 20;
/// Bitmap words for the pool's 4096 pages.
const WORDS: usize = POOL_LEN / 4096 / 64;
static mut POOL: Pool = Pool([0; POOL_LEN]);

type Plat = BareMetal<fn() -> Duration, PciFunction<Ecam>, WORDS>;

static HCA: Slot<Hca<Plat>> = Slot::new();
static CTX: Slot<Context<Plat, SlotShare>> = Slot::new();
static PD: Slot<Pd<Plat, SlotShare>> = Slot::new();
static CQ: Slot<Cq<Plat, SlotShare>> = Slot::new();
static BUF: Slot<DmaBuf<Plat, SlotShare>> = Slot::new();

/// What the test needs to fail with.
type Res<T> = Result<T, Failed>;

/// A failure, said on the console where it happened.
struct Failed;

fn fail<E: core::fmt::Display>(what: &str) -> impl FnOnce(E) -> Failed + '_ {
    move |e| {
        say!("FAIL: {what}: {e}");
        Failed
    }
}

/// The exchange page in guest RAM (volatile big-endian words).
struct Xchg;

impl Xchg {
    fn ptr(o: usize) -> *mut u32 {
        (arch::XCHG as usize + o) as *mut u32
    }
    fn get(o: usize) -> u32 {
        // SAFETY: the exchange page is RAM (identity mapped) that no Rust
        // reference covers; the peer writes it from the host, so every
        // access is volatile.
        u32::from_be(unsafe { Self::ptr(o).read_volatile() })
    }
    fn set(o: usize, v: u32) {
        // SAFETY: as in `get`.
        unsafe { Self::ptr(o).write_volatile(v.to_be()) }
    }
    fn gid(o: usize) -> Gid {
        let mut g = [0u8; 16];
        for (i, c) in g.chunks_mut(4).enumerate() {
            c.copy_from_slice(&Self::get(o + 4 * i).to_be_bytes());
        }
        Gid(g)
    }
    fn set_gid(o: usize, g: Gid) {
        for (i, c) in g.0.chunks(4).enumerate() {
            Self::set(o + 4 * i, u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        }
    }
    /// Waits for word `o` to become `v`, keeping the HCA serviced.
    fn wait(o: usize, v: u32, what: &str, hca: &Hca<Plat>) -> Res<()> {
        let deadline = now() + Duration::from_secs(300);
        while Self::get(o) != v {
            if now() > deadline {
                say!("FAIL: timed out waiting for {what}");
                return Err(Failed);
            }
            hca.service().map_err(fail("service"))?;
            // Publish our stores and see the peer's.
            arch::fence();
        }
        Ok(())
    }
}

/// The WRITE: 3000 bytes (three 1024-byte packets) at 0x100 of the peer's
/// buffer; the SEND: 2000 bytes.
const WRITE_OFF: usize = 0x100;
const WRITE_LEN: usize = 3000;
const SEND_LEN: usize = 2000;
/// Where the SEND's bytes sit in our buffer.
const SEND_AT: usize = 4096;
const SEED: u32 = 0x5eed_0001;

#[unsafe(no_mangle)]
extern "C" fn kmain() -> ! {
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(log::LevelFilter::Info);
    say!(
        "hca-bare-metal: {}, hca-driver on platform::bare_metal",
        arch::NAME
    );
    match run() {
        Ok(()) => {
            say!("PASS");
            exit(0)
        }
        Err(Failed) => exit(1),
    }
}

/// Finds the device, brings it up, talks to the peer, tears down.
fn run() -> Res<()> {
    // PCI: ECAM, the ivshmem device, its BARs.
    let ecam_base = NonNull::new(arch::ECAM as *mut u8).ok_or(Failed)?;
    // SAFETY: the machine's ECAM window (`arch::ECAM`), mapped uncached by
    // the boot code's identity map, used by nothing else.
    let ecam = unsafe { Ecam::new(ecam_base, arch::ECAM_LEN) }.map_err(fail("ECAM"))?;
    let f = ecam
        .find(0x1af4, 0x1110)
        .map_err(fail("looking for ivshmem-plain"))?;
    say!(
        "pci: {} {:04x}:{:04x} (ivshmem-plain) on {} buses of ECAM at {:#x}",
        f.bdf(),
        f.vendor_id(),
        f.device_id(),
        ecam.buses(),
        arch::ECAM
    );
    let (bar0, bar2) = arch::bars(&f).map_err(|()| Failed)?;
    say!(
        "pci: BAR0 {:#x} ({} bytes, ivshmem registers), BAR2 {:#x} ({} MiB, {:?}{}: the ConnectX BAR0)",
        bar0.address,
        bar0.size,
        bar2.address,
        bar2.size >> 20,
        bar2.kind,
        if bar2.prefetchable {
            ", prefetchable"
        } else {
            ""
        }
    );
    let bar_base = NonNull::new(bar2.address as usize as *mut u8).ok_or(Failed)?;

    // The platform: DMA memory from the static pool, the ConnectX BAR0 at
    // BAR2's address, configuration space through ECAM.
    let pool = NonNull::new(core::ptr::addr_of_mut!(POOL).cast::<u8>()).ok_or(Failed)?;
    // SAFETY: the pool is ours alone (nothing else names POOL) for the
    // whole program, identity mapped, and the device reaches RAM by
    // physical address; BAR2 is mapped as device memory by the identity
    // map and decodes (memory space enabled above).
    let platform: Plat = unsafe {
        let mem = DmaMemory::identity(pool, POOL_LEN).map_err(fail("DMA memory"))?;
        BareMetal::new(mem, now as fn() -> Duration)
            .map_err(fail("platform"))?
            .with_bar(0, bar_base, bar2.size as usize)
            .map_err(fail("BAR"))?
    }
    .with_hooks(f)
    .with_name(arch::NAME);

    let cfg = Config {
        wait_mode: WaitMode::Polling,
        ..Config::default()
    };
    let t0 = now();
    let hca = Hca::open(platform, cfg).map_err(|f| {
        say!("FAIL: bring-up: {}", f.error);
        Failed
    })?;
    let hca = HCA.put(hca).map_err(|_| Failed)?;
    let pages = hca.page_stats();
    say!(
        "bring-up: {} ms, {} commands, {} firmware pages given",
        (now() - t0).as_millis(),
        hca.commands_executed(),
        pages.held
    );
    say!("{}", hca.info());

    let r = traffic(&hca);

    // Teardown, whatever happened: every object, then the HCA; every
    // firmware page and every DMA page must come back.
    let before = hca.page_stats();
    let hca = SlotRef::try_unwrap(hca).map_err(|_| {
        say!("FAIL: the HCA still has users at teardown");
        Failed
    })?;
    let platform = hca.close().map_err(|f| {
        say!("FAIL: close: {}", f.error);
        Failed
    })?;
    let dma = platform.dma_stats();
    say!(
        "teardown: firmware pages given {}, returned at runtime {}, held before close {} (reclaimed by close); DMA memory in use after close: {} bytes of {}",
        before.given,
        before.returned,
        before.held,
        dma.allocated_bytes,
        dma.total_bytes
    );
    if dma.allocated_bytes != 0 {
        say!("FAIL: DMA memory not returned at teardown");
        return Err(Failed);
    }
    r
}

/// PD, MR, CQ, QP; the exchange with the peer; RDMA WRITE and SEND; the
/// verdict; every object destroyed.
fn traffic(hca: &SlotRef<Hca<Plat>>) -> Res<()> {
    let ctx = CTX
        .put(Context::open(hca).map_err(fail("context"))?)
        .map_err(|_| Failed)?;
    let pd = PD
        .put(Pd::alloc(&ctx).map_err(fail("PD"))?)
        .map_err(|_| Failed)?;
    let cq = CQ
        .put(Cq::create(&ctx, 16).map_err(fail("CQ"))?)
        .map_err(|_| Failed)?;
    let buf = BUF
        .put(DmaBuf::alloc(hca, 16 << 10).map_err(fail("buffer"))?)
        .map_err(|_| Failed)?;
    let mr = Mr::register(&pd, &buf, rc::ACCESS).map_err(fail("MR"))?;
    let mut qp = Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq)).map_err(fail("QP"))?;
    let gid = ctx
        .query_gid(rc::PORT, u16::from(DEFAULT_GID_INDEX))
        .map_err(fail("GID"))?;
    say!(
        "verbs: {}, {}, {} lkey {:#x}, {}; GID {:?}",
        pd.number(),
        cq.number(),
        "MR",
        mr.lkey().0,
        qp.number(),
        gid
    );

    let r = exchange_and_send(hca, &cq, &buf, &mr, &mut qp, gid);

    qp.destroy().map_err(fail("destroy QP"))?;
    mr.destroy().map_err(fail("destroy MR"))?;
    Cq::try_destroy(cq).map_err(fail("destroy CQ"))?;
    drop(buf);
    Pd::try_destroy(pd).map_err(fail("dealloc PD"))?;
    Context::try_destroy(ctx).map_err(fail("close context"))?;
    say!("verbs: QP, MR, CQ, buffer, PD and context destroyed");
    r
}

fn exchange_and_send(
    hca: &Hca<Plat>,
    cq: &SlotRef<Cq<Plat, SlotShare>>,
    buf: &SlotRef<DmaBuf<Plat, SlotShare>>,
    mr: &Mr<Plat, SlotShare>,
    qp: &mut Qp<Plat, SlotShare>,
    gid: Gid,
) -> Res<()> {
    say!(
        "peer: waiting for its QP in the exchange page at {:#x}",
        arch::XCHG
    );
    Xchg::wait(xchg::PEER_MAGIC, xchg::PEER, "the peer's QP", hca)?;
    let pqpn = Xchg::get(xchg::PEER_QPN);
    let pgid = Xchg::gid(xchg::PEER_GID);
    let paddr =
        (u64::from(Xchg::get(xchg::PEER_ADDR)) << 32) | u64::from(Xchg::get(xchg::PEER_ADDR + 4));
    let prkey = Rkey(Xchg::get(xchg::PEER_RKEY));
    say!(
        "peer: QP {pqpn:#x}, GID {pgid:?}, buffer {paddr:#x} rkey {:#x}",
        prkey.0
    );

    qp.modify(&rc::init()).map_err(fail("QP to INIT"))?;
    qp.modify(&rc::rtr(pqpn, pgid)).map_err(fail("QP to RTR"))?;
    qp.modify(&rc::rts()).map_err(fail("QP to RTS"))?;

    Xchg::set(xchg::GUEST_QPN, qp.number().0);
    Xchg::set_gid(xchg::GUEST_GID, gid);
    Xchg::set(xchg::WRITE_OFF, WRITE_OFF as u32);
    Xchg::set(xchg::WRITE_LEN, WRITE_LEN as u32);
    Xchg::set(xchg::SEND_LEN, SEND_LEN as u32);
    Xchg::set(xchg::SEED, SEED);
    // The fields before the flag.
    arch::fence();
    Xchg::set(xchg::GUEST_MAGIC, xchg::GUEST);
    Xchg::wait(
        xchg::PEER_READY,
        xchg::READY,
        "the peer's QP to be connected",
        hca,
    )?;

    let mut chunk = [0u8; 256];
    for (at, len, seed) in [
        (0, WRITE_LEN, SEED),
        (SEND_AT, SEND_LEN, SEED.wrapping_add(1)),
    ] {
        let mut i = 0;
        while i < len {
            let n = (len - i).min(chunk.len());
            for (k, b) in chunk[..n].iter_mut().enumerate() {
                *b = xchg::pattern(seed, i + k);
            }
            buf.write(at + i, &chunk[..n])
                .map_err(fail("buffer write"))?;
            i += n;
        }
    }
    qp.post_rdma_write(
        1,
        SendFlags::SIGNALED,
        paddr + WRITE_OFF as u64,
        prkey,
        mr.sge(0, WRITE_LEN as u32).map_err(fail("SGE"))?,
    )
    .map_err(fail("post RDMA WRITE"))?;
    let sge = [mr.sge(SEND_AT, SEND_LEN as u32).map_err(fail("SGE"))?];
    qp.post_send(
        &SendWr::new(2, SendOp::Send)
            .sgl(&sge)
            .flags(SendFlags::SIGNALED),
    )
    .map_err(fail("post SEND"))?;
    let mut wc = [WorkCompletion::default(); 2];
    let mut done = 0;
    while done < 2 {
        done += cq
            .poll_wait(&mut wc[done..], Duration::from_secs(60))
            .map_err(fail("send completions"))?;
    }
    let want = [(1, WcOpcode::RdmaWrite), (2, WcOpcode::Send)];
    for (w, (id, op)) in wc.iter().zip(want) {
        if (w.wr_id, w.opcode, w.status) != (id, op, WcStatus::Success) {
            say!(
                "FAIL: completion wr_id {} opcode {:?} status {:?}, expected wr_id {id} {op:?} success",
                w.wr_id,
                w.opcode,
                w.status
            );
            return Err(Failed);
        }
    }
    say!("rdma: RDMA WRITE of {WRITE_LEN} bytes and SEND of {SEND_LEN} bytes completed");
    // The peer's verdict.
    let deadline = now() + Duration::from_secs(60);
    let v = loop {
        let v = Xchg::get(xchg::VERDICT);
        if v == xchg::PASS || v == xchg::FAIL {
            break v;
        }
        if now() > deadline {
            say!("FAIL: no verdict from the peer");
            return Err(Failed);
        }
        hca.service().map_err(fail("service"))?;
    };
    let len = (Xchg::get(xchg::MESSAGE_LEN) as usize).min(256);
    let mut msg = [0u8; 256];
    for (i, c) in msg[..len].chunks_mut(4).enumerate() {
        let w = Xchg::get(xchg::MESSAGE + 4 * i).to_be_bytes();
        c.copy_from_slice(&w[..c.len()]);
    }
    let text = core::str::from_utf8(&msg[..len]).unwrap_or("(not UTF-8)");
    if v == xchg::PASS {
        say!("peer: checked: {text}");
        Ok(())
    } else {
        say!("FAIL: peer: {text}");
        Err(Failed)
    }
}
