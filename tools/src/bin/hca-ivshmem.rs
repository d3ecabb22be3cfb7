//! `hca-ivshmem`: an emulated ConnectX served to a QEMU guest through
//! `ivshmem-plain`, and a peer that checks what the guest sent it.
//!
//! QEMU 7.2 cannot load a user-defined PCI device model, so the guest's
//! ConnectX is put together from parts QEMU has:
//!
//! - **BAR0.** The guest sees BAR2 of an `ivshmem-plain` device, backed by a
//!   shared memory file (`-object memory-backend-file,id=bar,share=on,
//!   mem-path=BAR,size=32M -device ivshmem-plain,memdev=bar`), as the
//!   ConnectX BAR0: the init segment, then the UAR pages. `device` maps that
//!   file and watches it with the same bridge the VFIO preload library uses
//!   (`hca_shm_bridge::bridge`: doorbells, command doorbell, register
//!   publishing).
//! - **DMA.** The guest's RAM is a shared memory file too
//!   (`-object memory-backend-file,id=ram,share=on,mem-path=RAM
//!   -machine memory-backend=ram`); `device` maps it into the emulator's
//!   IOMMU at the guest-physical base of RAM (`--ram-base`: 0x4000_0000 on
//!   aarch64 `virt`, 0 on x86_64 `q35`), so the device reaches guest memory by guest-physical address,
//!   and anything else is an IOMMU fault.
//! - **Interrupts.** None: the guest polls (ivshmem-plain has no MSI-X
//!   the emulator could raise).
//! - **Wire.** Port 1 is cabled to a Unix datagram socket pair
//!   (`--sock`, `--peer`), the wire of `HCA_EMU_VFIO=...,sock=,peer=`.
//!
//! `device` runs until the guest has brought the HCA up and closed it again
//! (DISABLE_HCA), then prints the emulator's report (commands, firmware
//! pages still held, leaked objects, IOMMU faults) and exits 0 only when
//! nothing leaked and no fault was recorded.
//!
//! `peer` is the far end of the wire: a second emulated ConnectX-4 in its
//! own process, driven by hca-driver. It exchanges QP numbers, GIDs and an
//! rkey with the guest through one page of the guest's RAM (`--xchg`, the
//! out-of-band channel a TCP connection is for `hca pingpong`; layout in
//! `hca_bare_metal::xchg`), connects an RC QP, and checks the RDMA WRITE and the SEND the
//! guest makes, byte for byte; the verdict goes back to the guest through
//! the same page, and the exit status says it too.
//!
//! The guest side is the bare-metal image of `bare-metal/`; see
//! `tests/peers/run.sh bare_metal` for the whole command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use hca_bare_metal::{rc, xchg};
use hca_driver::verbs::{
    Context, Cq, DEFAULT_GID_INDEX, DmaBuf, Gid, Mr, Pd, Qp, QpInitAttr, QpType, RecvWr, WcOpcode,
    WcStatus, WorkCompletion,
};
use hca_driver::{Config, Hca};
use hca_emu::{EmuConfig, EmuHca, HcaState, WireSpec};
use hca_shm_bridge::bridge::Bridge;
use hca_shm_bridge::shm::SharedBar;
use platform::Platform;

/// Size of the peer's buffer; the SEND lands at `RECV_OFF` of it.
const PEER_BUF: usize = 64 << 10;
/// Where the peer's receive lands in its buffer.
const RECV_OFF: usize = 32 << 10;

#[derive(Parser)]
#[command(
    about = "An emulated ConnectX served to a QEMU guest through ivshmem-plain, and its peer"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve the guest's ConnectX: BAR0 in the ivshmem file, DMA into the guest RAM file.
    Device {
        /// The ivshmem-plain backing file (32 MiB): the ConnectX BAR0.
        #[arg(long)]
        bar: PathBuf,
        /// The guest RAM backing file.
        #[arg(long)]
        ram: PathBuf,
        /// Guest-physical address of the first byte of RAM.
        #[arg(long, default_value = "0x40000000", value_parser = parse_u64)]
        ram_base: u64,
        /// Port 1's Unix datagram socket (bound here).
        #[arg(long)]
        sock: PathBuf,
        /// Where port 1's frames go.
        #[arg(long)]
        peer: PathBuf,
        /// Give up (exit 1) after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// The far end of the wire: connect to the guest and check its RDMA WRITE and SEND.
    Peer {
        /// The guest RAM backing file.
        #[arg(long)]
        ram: PathBuf,
        /// Guest-physical address of the first byte of RAM.
        #[arg(long, default_value = "0x40000000", value_parser = parse_u64)]
        ram_base: u64,
        /// Guest-physical address of the exchange page.
        #[arg(long, value_parser = parse_u64)]
        xchg: u64,
        /// Port 1's Unix datagram socket (bound here).
        #[arg(long)]
        sock: PathBuf,
        /// Where port 1's frames go.
        #[arg(long)]
        peer: PathBuf,
        /// Give up (exit 1) after this many seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Expect byte N of the WRITE to differ from the pattern (all bits
        /// flipped): a check that must fail, to show the checks can.
        #[arg(long, value_name = "N")]
        expect_wrong_byte: Option<usize>,
    },
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(&h.replace('_', ""), 16),
        None => s.replace('_', "").parse(),
    };
    r.map_err(|e| format!("{s:?}: {e}"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Device {
            bar,
            ram,
            ram_base,
            sock,
            peer,
            timeout,
        } => device(
            &bar,
            &ram,
            ram_base,
            sock,
            peer,
            Duration::from_secs(timeout),
        ),
        Cmd::Peer {
            ram,
            ram_base,
            xchg,
            sock,
            peer,
            timeout,
            expect_wrong_byte,
        } => run_peer(
            &ram,
            ram_base,
            xchg,
            (sock, peer),
            Duration::from_secs(timeout),
            expect_wrong_byte,
        ),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hca-ivshmem: {e}");
            ExitCode::FAILURE
        }
    }
}

fn file_len(p: &std::path::Path) -> Result<usize, String> {
    std::fs::metadata(p)
        .map(|m| m.len() as usize)
        .map_err(|e| format!("{}: {e}", p.display()))
}

/// The `device` subcommand.
fn device(
    bar: &std::path::Path,
    ram: &std::path::Path,
    ram_base: u64,
    sock: PathBuf,
    peer: PathBuf,
    timeout: Duration,
) -> Result<(), String> {
    let emu = Arc::new(EmuHca::new(hca_shm_bridge::bridged_config(EmuConfig {
        seed: EmuConfig::default().seed ^ 0x1b5_e3e3,
        ..EmuConfig::default()
    })));
    // The guest reaches ivshmem's configuration space, not the emulated
    // function's: its command register stands for the guest's, with memory
    // space and bus master on (docs/fidelity.md).
    emu.platform()
        .config_write(4, &0x0006u16.to_le_bytes())
        .map_err(|e| format!("PCI command register: {e}"))?;
    let shm = Arc::new(
        SharedBar::open(bar, emu.bar_size()).map_err(|e| format!("{}: {e}", bar.display()))?,
    );
    let ram_len = file_len(ram)?;
    let window = SharedBar::open(ram, ram_len)
        .map_err(|e| format!("{}: {e}", ram.display()))?
        .into_window()
        .map_err(|e| format!("guest RAM window: {e}"))?;
    emu.map_dma(ram_base, window)
        .map_err(|e| format!("guest RAM at {ram_base:#x} into the IOMMU: {e}"))?;
    emu.cable_to(1, &WireSpec::Unix { local: sock, peer })
        .map_err(|e| format!("port 1: {e}"))?;
    let _bridge = Bridge::start(emu.clone(), shm, "ivshmem")
        .map_err(|e| format!("BAR bridge thread: {e}"))?;
    println!(
        "hca-ivshmem device: ready (BAR0 {}, guest RAM {} bytes at {ram_base:#x})",
        bar.display(),
        ram_len
    );
    let start = Instant::now();
    let mut initialized = false;
    loop {
        std::thread::sleep(Duration::from_millis(20));
        match emu.hca_state() {
            HcaState::Initialized => initialized = true,
            HcaState::Disabled if initialized => break,
            _ => {}
        }
        if start.elapsed() > timeout {
            // The timeout is the error; the report says what was left.
            let _ = report(&emu);
            return Err(format!(
                "the guest did not bring the HCA up and close it within {timeout:?} (state {:?})",
                emu.hca_state()
            ));
        }
    }
    report(&emu)
}

/// Prints what the emulated device saw; an error if anything leaked or
/// faulted.
fn report(emu: &EmuHca) -> Result<(), String> {
    let leaks = emu.leak_report();
    let faults = emu.iommu_faults();
    let errors = emu.internal_errors();
    println!(
        "hca-ivshmem device: {} commands, firmware pages held {}, objects alive {}, IOMMU faults {}, internal errors {}",
        emu.command_log().len(),
        emu.firmware_pages(),
        leaks.objects.len(),
        faults.len(),
        errors.len()
    );
    for f in &faults {
        println!("  IOMMU fault: {f:?}");
    }
    for e in &errors {
        println!("  internal error: {e}");
    }
    if !leaks.is_clean() {
        println!("  leaks: {leaks:?}");
    }
    if leaks.is_clean() && faults.is_empty() && errors.is_empty() {
        println!("hca-ivshmem device: clean");
        Ok(())
    } else {
        Err("the device was left unclean".into())
    }
}

/// The exchange page in the guest RAM file.
struct Xchg {
    ram: SharedBar,
    base: usize,
}

impl Xchg {
    fn get(&self, o: usize) -> u32 {
        self.ram.load32(self.base + o)
    }
    fn set(&self, o: usize, v: u32) {
        self.ram.store32(self.base + o, v);
    }
    fn gid(&self, o: usize) -> Gid {
        let mut g = [0u8; 16];
        for (i, c) in g.chunks_mut(4).enumerate() {
            c.copy_from_slice(&self.get(o + 4 * i).to_be_bytes());
        }
        Gid(g)
    }
    fn set_gid(&self, o: usize, g: Gid) {
        for (i, c) in g.0.chunks(4).enumerate() {
            self.set(o + 4 * i, u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
        }
    }
    fn wait(&self, o: usize, v: u32, what: &str, deadline: Instant) -> Result<(), String> {
        while self.get(o) != v {
            if Instant::now() > deadline {
                return Err(format!("timed out waiting for {what}"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
    fn verdict(&self, pass: bool, msg: &str) {
        let b = &msg.as_bytes()[..msg.len().min(256)];
        for (i, c) in b.chunks(4).enumerate() {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            self.set(xchg::MESSAGE + 4 * i, u32::from_be_bytes(w));
        }
        self.set(xchg::MESSAGE_LEN, b.len() as u32);
        self.set(xchg::VERDICT, if pass { xchg::PASS } else { xchg::FAIL });
    }
}

type P = hca_emu::EmuPlatform;

/// The `peer` subcommand.
fn run_peer(
    ram: &std::path::Path,
    ram_base: u64,
    at: u64,
    (sock, peer): (PathBuf, PathBuf),
    timeout: Duration,
    wrong: Option<usize>,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let ram_len = file_len(ram)?;
    let base = at
        .checked_sub(ram_base)
        .filter(|o| o % 4096 == 0 && o + 4096 <= ram_len as u64)
        .ok_or_else(|| format!("--xchg {at:#x} is not a page inside the guest RAM"))?
        as usize;
    let x = Xchg {
        ram: SharedBar::open(ram, ram_len).map_err(|e| format!("{}: {e}", ram.display()))?,
        base,
    };
    let wire = WireSpec::Unix { local: sock, peer };
    let emu = EmuHca::new(EmuConfig {
        clock: hca_emu::Clock::Real,
        seed: EmuConfig::default().seed ^ 0x9ee7,
        ..EmuConfig::default()
    });
    emu.cable_to(1, &wire).map_err(|e| format!("port 1: {e}"))?;
    let e = |what: &str| {
        let what = what.to_string();
        move |err: hca_driver::Error| format!("{what}: {err}")
    };
    let hca = Arc::new(
        Hca::open(emu.platform(), Config::default())
            .map_err(|f| format!("bring-up: {}", f.error))?,
    );
    let verdict = {
        let ctx = Arc::new(Context::open(&hca).map_err(e("context"))?);
        let pd = Arc::new(Pd::alloc(&ctx).map_err(e("PD"))?);
        let cq = Arc::new(Cq::create(&ctx, 16).map_err(e("CQ"))?);
        let buf = Arc::new(DmaBuf::alloc(&hca, PEER_BUF).map_err(e("buffer"))?);
        let mr: Mr<P> = Mr::register(&pd, &buf, rc::ACCESS).map_err(e("MR"))?;
        let mut qp: Qp<P> =
            Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq)).map_err(e("QP"))?;
        let gid = ctx
            .query_gid(rc::PORT, u16::from(DEFAULT_GID_INDEX))
            .map_err(e("GID"))?;
        x.set(xchg::PEER_QPN, qp.number().0);
        x.set_gid(xchg::PEER_GID, gid);
        x.set(xchg::PEER_ADDR, (mr.addr() >> 32) as u32);
        x.set(xchg::PEER_ADDR + 4, mr.addr() as u32);
        x.set(xchg::PEER_RKEY, mr.rkey().0);
        x.set(xchg::PEER_MAGIC, xchg::PEER);
        println!(
            "hca-ivshmem peer: QP {:#x}, GID {gid:?}, buffer {:#x} rkey {:#x}; waiting for the guest",
            qp.number().0,
            mr.addr(),
            mr.rkey().0
        );
        x.wait(xchg::GUEST_MAGIC, xchg::GUEST, "the guest's QP", deadline)?;
        let (gqpn, ggid) = (x.get(xchg::GUEST_QPN), x.gid(xchg::GUEST_GID));
        let (woff, wlen) = (
            x.get(xchg::WRITE_OFF) as usize,
            x.get(xchg::WRITE_LEN) as usize,
        );
        let (slen, seed) = (x.get(xchg::SEND_LEN) as usize, x.get(xchg::SEED));
        println!(
            "hca-ivshmem peer: guest QP {gqpn:#x}, GID {ggid:?}; expecting a WRITE of {wlen} bytes at {woff:#x} and a SEND of {slen} bytes"
        );
        if woff.checked_add(wlen).is_none_or(|end| end > RECV_OFF) || slen > PEER_BUF - RECV_OFF {
            let m = format!(
                "the guest asked for a WRITE at {woff:#x}+{wlen} and a SEND of {slen}: outside the buffer"
            );
            x.verdict(false, &m);
            return Err(m);
        }
        qp.modify(&rc::init()).map_err(e("QP to INIT"))?;
        qp.post_recv(&RecvWr {
            wr_id: 7,
            sgl: &[mr
                .sge(RECV_OFF, (PEER_BUF - RECV_OFF) as u32)
                .map_err(e("SGE"))?],
        })
        .map_err(e("post receive"))?;
        qp.modify(&rc::rtr(gqpn, ggid)).map_err(e("QP to RTR"))?;
        qp.modify(&rc::rts()).map_err(e("QP to RTS"))?;
        x.set(xchg::PEER_READY, xchg::READY);
        // The SEND comes after the WRITE on the same RC QP: when its
        // completion is here, the WRITE has landed.
        let mut wc = [WorkCompletion::default(); 1];
        let mut got = 0;
        while got == 0 {
            if Instant::now() > deadline {
                return Err("timed out waiting for the guest's SEND".into());
            }
            got = cq
                .poll_wait(&mut wc, Duration::from_millis(100))
                .or_else(|err| match err {
                    hca_driver::Error::Timeout { .. } => Ok(0),
                    other => Err(other),
                })
                .map_err(e("poll"))?;
            hca.service().map_err(e("service"))?;
        }
        let w = wc[0];
        let mut problems = Vec::new();
        if (w.wr_id, w.status, w.opcode) != (7, WcStatus::Success, WcOpcode::Recv) {
            problems.push(format!(
                "receive completion wr_id {} status {:?} opcode {:?}",
                w.wr_id, w.status, w.opcode
            ));
        }
        if w.byte_len as usize != slen {
            problems.push(format!("SEND of {} bytes, expected {slen}", w.byte_len));
        }
        let mut wbytes = vec![0u8; wlen];
        buf.read(woff, &mut wbytes).map_err(e("read"))?;
        let mut sbytes = vec![0u8; slen];
        buf.read(RECV_OFF, &mut sbytes).map_err(e("read"))?;
        // With --expect-wrong-byte, one byte of the WRITE is expected to
        // differ from the pattern: the check must then fail.
        let want_w = |i: usize| xchg::pattern(seed, i) ^ if wrong == Some(i) { 0xff } else { 0 };
        if let Some(i) = (0..wlen).find(|&i| wbytes[i] != want_w(i)) {
            problems.push(format!(
                "WRITE byte {i} is {:#04x}, expected {:#04x}",
                wbytes[i],
                want_w(i)
            ));
        }
        let bad = |b: &[u8], seed: u32| {
            b.iter()
                .enumerate()
                .position(|(i, &v)| v != xchg::pattern(seed, i))
        };
        if let Some(i) = bad(&sbytes, seed.wrapping_add(1)) {
            problems.push(format!(
                "SEND byte {i} is {:#04x}, expected {:#04x}",
                sbytes[i],
                xchg::pattern(seed.wrapping_add(1), i)
            ));
        }
        let mut before = vec![0u8; woff];
        buf.read(0, &mut before).map_err(e("read"))?;
        if before.iter().any(|&b| b != 0) {
            problems.push("bytes before the WRITE's offset changed".into());
        }
        let verdict = if problems.is_empty() {
            format!("RDMA WRITE of {wlen} bytes and SEND of {slen} bytes received intact")
        } else {
            problems.join("; ")
        };
        x.verdict(problems.is_empty(), &verdict);
        println!(
            "hca-ivshmem peer: {}: {verdict}",
            if problems.is_empty() { "PASS" } else { "FAIL" }
        );
        qp.destroy().map_err(e("destroy QP"))?;
        mr.destroy().map_err(e("destroy MR"))?;
        problems.is_empty().then_some(()).ok_or(verdict)
    };
    let hca = Arc::into_inner(hca).ok_or("the HCA still has users")?;
    hca.close().map_err(|f| format!("close: {}", f.error))?;
    let leaks = emu.leak_report();
    if !leaks.is_clean() || !emu.iommu_faults().is_empty() {
        return Err(format!("the peer's own device was left unclean: {leaks:?}"));
    }
    verdict
}
