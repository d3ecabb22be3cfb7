//! Packet capture with the raw context (`hca_driver::capture`), on two
//! emulated ConnectX-4s cabled port to port: side B opens a
//! `RawContext` with `RawSlots` for buffers, steers UDP frames to port
//! 4660 into its QP with a flow rule (`steered`) and runs the repost
//! loop; side A's `RawContext` sends the frames.
//!
//! ```sh
//! cargo run -p hca-tests --example raw_capture -- [frames]
//! ```

use std::sync::Arc;
use std::time::Duration;

use hca_driver::Config;
use hca_driver::capture::{Flow, LoopStats, RawContextBuilder, RawSlots};
use hca_driver::steering::{FlowMatch, FlowSpec, Masked};
use hca_driver::verbs::{AccessFlags, DmaBuf, Mr, QpState, SendFlags, SendOp, SendWr, WcStatus};
use hca_emu::EmuConfig;
use hca_emu::frame::{Frame, L3, L4};
use hca_tests::Link;

/// The UDP destination port captured.
pub const PORT: u16 = 4660;
/// Bytes of each receive buffer.
const SLOT: usize = 2048;
/// Receive work requests kept posted.
const RING: usize = 32;

/// An Ethernet + IPv4 + UDP frame to `PORT` carrying `seq`, checksums
/// left to the device.
pub fn udp_frame(dst: [u8; 6], src: [u8; 6], seq: u32) -> Vec<u8> {
    let payload = format!("capture frame {seq:08}");
    Frame::new(dst, src)
        .l3(L3::V4([192, 168, 0, 1], [192, 168, 0, 2]))
        .l4(L4::Udp(10000 + (seq % 7) as u16, PORT))
        .payload(payload.as_bytes())
        .build()
}

/// Sends `frames` frames from side A and captures them on side B; returns
/// the loop's figures and the sequence numbers seen, in order.
pub fn run(frames: u32) -> Result<(LoopStats, Vec<u32>), hca_driver::Error> {
    let mut l = Link::emulated(EmuConfig::default(), Config::default());
    let h = l.open();
    let result = (|| {
        let (ha, hb) = (&h.a, h.b());
        let mac = |hca: &Arc<hca_driver::Hca<_>>| hca.info().ports[0].mac.expect("an Ethernet MAC");
        let (mac_a, mac_b) = (mac(ha), mac(hb));

        // Side B: the capture context, its buffers, the flow rule's match.
        let mut rx = RawContextBuilder::new(1)
            .send_wr(0)
            .recv_wr(RING as u32)
            .build(hb)?;
        let slots = RawSlots::new(&rx, RING as u32, SLOT)?;
        let wrs = slots.recv_wrs();
        let m = FlowMatch::from_specs(&[FlowSpec::Udp {
            src_port: Masked::default(),
            dst_port: Masked::exact(PORT, 0xffff),
        }])?;

        // Side A: the sending context; its frames go out as the receive
        // loop runs (the emulated wire delivers at once).
        let mut tx = RawContextBuilder::new(1)
            .send_wr(64)
            .recv_wr(0)
            .inline_data(64)
            .build(ha)?;
        tx.bring_up(QpState::Rts)?;
        let sbuf = Arc::new(DmaBuf::alloc(ha, 4096)?);
        let smr = Mr::register(&tx.pd, &sbuf, AccessFlags::LOCAL_WRITE)?;
        let hdr = usize::from(tx.qp.eth_min_inline()).max(14);
        let mut sent = 0u32;
        let mut send_one = |tx: &mut hca_driver::capture::RawContext<_>| {
            let f = udp_frame(mac_b, mac_a, sent);
            sbuf.write(0, &f[hdr..])?;
            let sge = smr.sge(0, (f.len() - hdr) as u32)?;
            tx.post_send_wrs(&[SendWr::new(u64::from(sent), SendOp::Send)
                .eth_headers(&f[..hdr])
                .sgl(&[sge])
                .flags(SendFlags::SIGNALED | SendFlags::IP_CSUM)])?;
            let wc = tx
                .wait_send(Duration::from_secs(5))?
                .expect("a send completion");
            assert_eq!(wc.status, WcStatus::Success);
            sent += 1;
            Ok::<(), hca_driver::Error>(())
        };
        // While the rule steers the frames into side B's QP: the ring
        // posted (the QP moved to RTR for it), the first frame sent; each
        // frame received sends the next, until `frames`.
        let mut seen = Vec::new();
        let mut failed = None;
        let stats = rx.steered(&m, |rx| {
            rx.post_recv_wrs(&wrs)?;
            if frames > 0 {
                send_one(&mut tx)?;
            }
            rx.repost_loop_posted(&wrs, Duration::from_millis(500), |wc, cqe| {
                let mut b = Vec::new();
                slots.read_frame(wc, &mut b).expect("a frame the slots hold");
                let text = String::from_utf8_lossy(&b[42..]);
                let seq: u32 = text
                    .trim_start_matches("capture frame ")
                    .trim_end_matches('\0')
                    .parse()
                    .expect("a sequence number");
                println!(
                    "frame {seq:>4}: {} bytes, slot {:>2}, IPv4/UDP checksums {}, RSS hash {:#010x}, device clock {}",
                    wc.byte_len,
                    wc.wr_id,
                    if cqe.ip_csum_ok() { "ok" } else { "BAD" },
                    cqe.rss_hash(),
                    cqe.timestamp()
                );
                seen.push(seq);
                if seen.len() as u32 >= frames {
                    return Flow::Stop;
                }
                if let Err(e) = send_one(&mut tx) {
                    failed = Some(e);
                    return Flow::Stop;
                }
                Flow::Continue
            })
        })?;
        if let Some(e) = failed {
            return Err(e);
        }
        drop(slots);
        drop(rx);
        drop(tx);
        Ok((stats, seen))
    })();
    l.close(h);
    l.assert_clean();
    result
}

#[allow(dead_code)]
fn main() {
    let frames = std::env::args()
        .nth(1)
        .map_or(16, |a| a.parse().expect("a number of frames"));
    match run(frames) {
        Ok((s, _)) => println!(
            "{} frames, {} bytes captured; {} errors; {}",
            s.frames,
            s.bytes,
            s.errors,
            if s.timed_out { "timed out" } else { "done" }
        ),
        Err(e) => {
            eprintln!("raw_capture: {e}");
            std::process::exit(1);
        }
    }
}
