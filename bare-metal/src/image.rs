//! Everything of the image that is specific to aarch64 and QEMU `virt`:
//! boot code, MMU, console, clock, exit, and the test itself ([`run`]).
//!
//! No heap: the verbs objects live in static [`Slot`]s (`SlotShare`
//! handles), the DMA memory is a static array handed to
//! [`DmaMemory::identity`] (the MMU maps RAM one to one, and the device
//! reaches it by guest-physical address).

use core::fmt::Write;
use core::ptr::NonNull;
use core::time::Duration;

use hca_bare_metal::{virt, xchg};
use hca_driver::verbs::{
    AccessFlags, AhAttr, Context, Cq, DEFAULT_GID_INDEX, DmaBuf, Gid, Mr, Pd, Qp, QpAttr,
    QpInitAttr, QpState, QpType, SendFlags, SendOp, SendWr, SlotShare, WcOpcode, WcStatus,
    WorkCompletion,
};
use hca_driver::{Config, Hca, IbMtu, Rkey, WaitMode};
use platform::bare_metal::pci::{BarWindow, COMMAND_MEMORY, Ecam, PciFunction};
use platform::bare_metal::{BareMetal, DmaMemory};
use platform::slot::{Slot, SlotRef};

// Boot: park every core but 0, stack, FP/SIMD on (the compiler uses the
// NEON registers), bss zeroed, exception vectors, MMU on with an identity
// map (0-1 GiB device memory: UART, PCI windows, ECAM; 1-2 GiB normal
// write-back memory: RAM), then `kmain`.
core::arch::global_asm!(
    r#"
.section .text.boot, "ax"
.global _start
_start:
    mrs     x0, mpidr_el1
    and     x0, x0, #0xff
    cbnz    x0, 9f
    ldr     x0, =__stack_top
    mov     sp, x0
    mov     x0, #(3 << 20)
    msr     cpacr_el1, x0
    isb
    ldr     x0, =__bss_start
    ldr     x1, =__bss_end
1:  cmp     x0, x1
    b.hs    2f
    str     xzr, [x0], #8
    b       1b
2:  ldr     x0, =vectors
    msr     vbar_el1, x0
    ldr     x0, =0xff00
    msr     mair_el1, x0
    ldr     x0, =(25 | (1 << 8) | (1 << 10) | (3 << 12) | (1 << 23) | (2 << 32))
    msr     tcr_el1, x0
    ldr     x0, =translation_table
    msr     ttbr0_el1, x0
    tlbi    vmalle1
    dsb     ish
    isb
    mrs     x0, sctlr_el1
    orr     x0, x0, #1
    orr     x0, x0, #(1 << 2)
    orr     x0, x0, #(1 << 12)
    msr     sctlr_el1, x0
    isb
    bl      kmain
9:  wfe
    b       9b

.macro vector kind
    .balign 0x80
    mov     x0, #\kind
    mrs     x1, esr_el1
    mrs     x2, elr_el1
    mrs     x3, far_el1
    b       exception
.endm

.balign 0x800
vectors:
    vector 0
    vector 1
    vector 2
    vector 3
    vector 4
    vector 5
    vector 6
    vector 7
    vector 8
    vector 9
    vector 10
    vector 11
    vector 12
    vector 13
    vector 14
    vector 15

.section .rodata.translation_table, "a"
.balign 4096
translation_table:
    .quad 0x0000000000000401
    .quad 0x0000000040000705
    .fill 510, 8, 0
"#
);

/// PL011 data register and flag register (TX FIFO full: bit 5).
const UART_DR: usize = virt::UART;
const UART_FR: usize = virt::UART + 0x18;

/// The console: PL011 on `virt`.
struct Uart;

impl Write for Uart {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                put(b'\r');
            }
            put(b);
        }
        Ok(())
    }
}

fn put(b: u8) {
    // SAFETY: the PL011's registers, mapped as device memory by the
    // identity map; 32-bit volatile accesses as the PL011 wants.
    unsafe {
        while core::ptr::read_volatile(UART_FR as *const u32) & (1 << 5) != 0 {}
        core::ptr::write_volatile(UART_DR as *mut u32, u32::from(b));
    }
}

macro_rules! say {
    ($($t:tt)*) => {{
        let _ = writeln!(Uart, $($t)*);
    }};
}

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

/// Ends the program through semihosting (SYS_EXIT with
/// ADP_Stopped_ApplicationExit and `status`: QEMU exits with it).
fn exit(status: u32) -> ! {
    let block: [u64; 2] = [0x20026, u64::from(status)];
    // SAFETY: the semihosting call reads the two-word block and does not
    // return (QEMU exits); with semihosting off it is an undefined
    // instruction, reported by the exception handler.
    unsafe {
        core::arch::asm!(
            "hlt #0xf000",
            in("x0") 0x18u64,
            in("x1") block.as_ptr(),
            options(nostack)
        );
    }
    loop {
        core::hint::spin_loop();
    }
}

/// The generic timer's virtual count, as time.
fn now() -> Duration {
    let (count, freq): (u64, u64);
    // SAFETY: reads of the EL0-accessible counter registers.
    unsafe {
        core::arch::asm!("isb; mrs {}, cntvct_el0", out(reg) count, options(nostack));
        core::arch::asm!("mrs {}, cntfrq_el0", out(reg) freq, options(nostack));
    }
    let freq = freq.max(1);
    let secs = count / freq;
    let nanos = (count % freq) * 1_000_000_000 / freq;
    Duration::new(secs, nanos as u32)
}

#[unsafe(no_mangle)]
extern "C" fn exception(kind: u64, esr: u64, elr: u64, far: u64) -> ! {
    say!("FAIL: exception {kind} (ESR {esr:#x}, ELR {elr:#x}, FAR {far:#x})");
    exit(3)
}

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
        (virt::XCHG as usize + o) as *mut u32
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
            // SAFETY: a barrier instruction.
            unsafe { core::arch::asm!("dmb sy", options(nostack)) };
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
    say!("hca-bare-metal: aarch64 QEMU virt, hca-driver on platform::bare_metal");
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
    let ecam_base = NonNull::new(virt::ECAM as *mut u8).ok_or(Failed)?;
    // SAFETY: the ECAM window of `virt` (highmem=off), device memory in
    // the identity map, used by nothing else.
    let ecam = unsafe { Ecam::new(ecam_base, virt::ECAM_LEN) }.map_err(fail("ECAM"))?;
    let f = ecam
        .find(0x1af4, 0x1110)
        .map_err(fail("looking for ivshmem-plain"))?;
    say!(
        "pci: {} {:04x}:{:04x} (ivshmem-plain) on {} buses of ECAM at {:#x}",
        f.bdf(),
        f.vendor_id(),
        f.device_id(),
        ecam.buses(),
        virt::ECAM
    );
    let mut window =
        BarWindow::new(virt::PCI_MMIO, virt::PCI_MMIO_LEN).map_err(fail("MMIO window"))?;
    // The largest first: each BAR is aligned to its size.
    let bar2 = f.assign_bar(2, &mut window).map_err(fail("BAR2"))?;
    let bar0 = f.assign_bar(0, &mut window).map_err(fail("BAR0"))?;
    f.enable(COMMAND_MEMORY);
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
    .with_name("qemu-virt ivshmem");

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

const ACCESS: AccessFlags = AccessFlags(AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0);

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
    let mr = Mr::register(&pd, &buf, ACCESS).map_err(fail("MR"))?;
    let mut qp = Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq)).map_err(fail("QP"))?;
    let gid = ctx
        .query_gid(1, u16::from(DEFAULT_GID_INDEX))
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
        virt::XCHG
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

    qp.modify(
        &QpAttr::new()
            .state(QpState::Init)
            .port(1)
            .pkey_index(0)
            .access(ACCESS),
    )
    .map_err(fail("QP to INIT"))?;
    qp.modify(
        &QpAttr::new()
            .state(QpState::Rtr)
            .path_mtu(IbMtu::Mtu1024)
            .dest_qp_num(pqpn)
            .rq_psn(0)
            .max_dest_rd_atomic(1)
            .min_rnr_timer(12)
            .ah(AhAttr::roce(1, pgid, DEFAULT_GID_INDEX)),
    )
    .map_err(fail("QP to RTR"))?;
    qp.modify(
        &QpAttr::new()
            .state(QpState::Rts)
            .sq_psn(0)
            .timeout(14)
            .retry_cnt(7)
            .rnr_retry(7)
            .max_rd_atomic(1),
    )
    .map_err(fail("QP to RTS"))?;

    Xchg::set(xchg::GUEST_QPN, qp.number().0);
    Xchg::set_gid(xchg::GUEST_GID, gid);
    Xchg::set(xchg::WRITE_OFF, WRITE_OFF as u32);
    Xchg::set(xchg::WRITE_LEN, WRITE_LEN as u32);
    Xchg::set(xchg::SEND_LEN, SEND_LEN as u32);
    Xchg::set(xchg::SEED, SEED);
    // SAFETY: a barrier instruction: the fields before the flag.
    unsafe { core::arch::asm!("dmb sy", options(nostack)) };
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
