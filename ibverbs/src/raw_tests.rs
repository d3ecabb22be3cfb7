//! Raw Ethernet through the C API, as a C program drives it: raw packet
//! QPs on two emulated devices cabled together (`ta` sends, `tb`
//! receives), `ibv_create_flow` rules of each selector kind, the default
//! and sniffer rules, checksum offload and `IBV_WC_IP_CSUM_OK`, the
//! extended CQ's VLAN and flow-tag readers, the raw capability bits, and
//! the errors of bad flow specs.

use core::ffi::c_int;
use core::ptr;
use std::time::{Duration, Instant};

use crate::ffi::*;
use crate::flow::{op_create_flow, op_destroy_flow};
use crate::mr::*;
use crate::test_wr::*;
use crate::verbs::*;

const SLOT: usize = 2048;

/// The tests that cable `ta` to `tb` take turns: flows are per device,
/// and one test's sniffer and default rules would take the other's
/// frames.
static WIRE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn wire() -> std::sync::MutexGuard<'static, ()> {
    WIRE.lock().unwrap_or_else(|p| p.into_inner())
}

struct Dev {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    buf: Vec<u8>,
    mr: *mut ibv_mr,
}

fn open(name: &str, slots: usize) -> Dev {
    let (ctx, pd) = open_pd(name);
    let cq = ibv_create_cq(ctx, 256, ptr::null_mut(), ptr::null_mut(), 0);
    assert!(!pd.is_null() && !cq.is_null());
    let mut buf = vec![0u8; slots * SLOT];
    let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 1);
    assert!(!mr.is_null());
    Dev {
        ctx,
        pd,
        cq,
        buf,
        mr,
    }
}

fn close(d: Dev) {
    assert_eq!(ibv_dereg_mr(d.mr), 0);
    drop(d.buf);
    assert_eq!(ibv_destroy_cq(d.cq), 0);
    assert_eq!(ibv_dealloc_pd(d.pd), 0);
    assert_eq!(ibv_close_device(d.ctx), 0);
}

fn raw_qp(d: &Dev, cq: *mut ibv_cq, send: u32, recv: u32) -> *mut ibv_qp {
    let mut init = ibv_qp_init_attr {
        sq_sig_all: 1,
        ..qp_init(cq, IBV_QPT_RAW_PACKET, qp_cap(send, recv, 2, 1))
    };
    let qp = ibv_create_qp(d.pd, &mut init);
    assert!(!qp.is_null(), "raw QP: errno {}", errno());
    to_rts(qp);
    qp
}

fn to_rts(qp: *mut ibv_qp) {
    let mut a = ibv_qp_attr {
        qp_state: 1,
        port_num: 1,
        ..Default::default()
    };
    // STATE | PORT.
    assert_eq!(ibv_modify_qp(qp, &mut a, 1 | 32), 0);
    for st in [2, 3] {
        let mut a = ibv_qp_attr {
            qp_state: st,
            ..Default::default()
        };
        assert_eq!(ibv_modify_qp(qp, &mut a, 1), 0);
    }
}

/// Receive slot `slot` of `d`'s buffer, whole.
fn slot_sge(d: &Dev, slot: usize) -> ibv_sge {
    sge(
        d.mr,
        d.buf.as_ptr() as u64 + (slot * SLOT) as u64,
        SLOT as u32,
    )
}

fn post_recvs(d: &Dev, qp: *mut ibv_qp, first_slot: usize, n: usize, tag: u64) {
    for k in 0..n {
        let mut sg = [slot_sge(d, first_slot + k)];
        post_recv(
            qp,
            &mut recv_wr(tag * 1000 + (first_slot + k) as u64, &mut sg),
        )
        .unwrap();
    }
}

/// Sends `frame` from slot 0 of `d`'s buffer, in two SGEs (the split
/// falls inside the inline headers, as a program may give them).
fn send(d: &mut Dev, qp: *mut ibv_qp, frame: &[u8], flags: u32) {
    d.buf[..frame.len()].copy_from_slice(frame);
    let base = d.buf.as_ptr() as u64;
    let mut sges = [
        sge(d.mr, base, 10),
        sge(d.mr, base + 10, frame.len() as u32 - 10),
    ];
    let mut wr = send_wr(7, IBV_WR_SEND, &mut sges, IBV_SEND_SIGNALED | flags);
    post_send(qp, &mut wr).unwrap();
    let wc = poll(d.cq, 1).remove(0);
    assert_eq!((wc.status, wc.wr_id), (0, 7));
}

fn poll(cq: *mut ibv_cq, n: usize) -> Vec<ibv_wc> {
    // SAFETY: a live CQ.
    let p = unsafe { (*(*cq).context).ops.poll_cq.unwrap() };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    while out.len() < n {
        let mut wc = ibv_wc::default();
        // SAFETY: room for one.
        let got = unsafe { p(cq, 1, &mut wc) };
        assert!(got >= 0);
        if got == 1 {
            out.push(wc);
        } else {
            assert!(
                Instant::now() < deadline,
                "{} of {n} completions",
                out.len()
            );
            std::thread::yield_now();
        }
    }
    out
}

/// Nothing more arrives within a short while.
fn quiet(cq: *mut ibv_cq) {
    std::thread::sleep(Duration::from_millis(100));
    // SAFETY: a live CQ.
    let p = unsafe { (*(*cq).context).ops.poll_cq.unwrap() };
    let mut wc = ibv_wc::default();
    // SAFETY: room for one.
    assert_eq!(unsafe { p(cq, 1, &mut wc) }, 0, "unexpected {}", wc.wr_id);
}

const M1: [u8; 6] = [0x02, 0, 0, 0, 0x15, 0x01];
const M2: [u8; 6] = [0x02, 0, 0, 0, 0x15, 0x02];
const M3: [u8; 6] = [0x02, 0, 0, 0, 0x15, 0x03];
const SRC: [u8; 6] = [0x02, 0, 0, 0, 0x15, 0xaa];

/// An Ethernet frame to `dst` with an IPv4 header (checksum 0) and a UDP
/// (17) or TCP (6) header (checksum 0), or only an ethertype.
fn frame(dst: [u8; 6], l3: Option<([u8; 4], u8, u16)>, vlan: Option<u16>) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&SRC);
    if let Some(t) = vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&t.to_be_bytes());
    }
    match l3 {
        None => {
            f.extend_from_slice(&[0x88, 0xb5]);
            f.extend_from_slice(&[0x5a; 64]);
        }
        Some((dip, proto, dport)) => {
            let l4 = if proto == 17 { 8 } else { 20 };
            let total = (20 + l4 + 32) as u16;
            f.extend_from_slice(&[0x08, 0x00]);
            f.extend_from_slice(&[0x45, 0, 0, 0]);
            f[ETH_LEN(vlan) + 2..ETH_LEN(vlan) + 4].copy_from_slice(&total.to_be_bytes());
            f.extend_from_slice(&[0, 1, 0x40, 0, 64, proto, 0, 0]);
            f.extend_from_slice(&[10, 0, 0, 1]);
            f.extend_from_slice(&dip);
            f.extend_from_slice(&4000u16.to_be_bytes());
            f.extend_from_slice(&dport.to_be_bytes());
            if proto == 17 {
                f.extend_from_slice(&(8u16 + 32).to_be_bytes());
                f.extend_from_slice(&[0, 0]);
            } else {
                f.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
            }
            f.extend_from_slice(&[0x33; 32]);
        }
    }
    f
}

#[allow(non_snake_case)]
fn ETH_LEN(vlan: Option<u16>) -> usize {
    if vlan.is_some() { 18 } else { 14 }
}

/// A flow attribute followed by its specs, as one buffer.
struct Attr(Vec<u64>);

impl Attr {
    fn new(ty: u32, priority: u16, specs: &[&[u8]]) -> Self {
        let a = ibv_flow_attr {
            comp_mask: 0,
            type_: ty,
            size: 0,
            priority,
            num_of_specs: specs.len() as u8,
            port: 1,
            flags: 0,
        };
        let mut bytes = Vec::new();
        // SAFETY: a plain C struct, read as its bytes.
        bytes.extend_from_slice(unsafe {
            core::slice::from_raw_parts(ptr::addr_of!(a).cast::<u8>(), size_of::<ibv_flow_attr>())
        });
        for s in specs {
            bytes.extend_from_slice(s);
        }
        let total = bytes.len() as u16;
        bytes[8..10].copy_from_slice(&total.to_ne_bytes());
        let mut v = vec![0u64; bytes.len().div_ceil(8)];
        // SAFETY: `v` has room for the bytes.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), v.as_mut_ptr().cast(), bytes.len()) };
        Self(v)
    }

    fn ptr(&mut self) -> *mut ibv_flow_attr {
        self.0.as_mut_ptr().cast()
    }
}

fn bytes_of<T>(t: &T) -> &[u8] {
    // SAFETY: plain C structs, read as their bytes.
    unsafe { core::slice::from_raw_parts(ptr::from_ref(t).cast::<u8>(), size_of::<T>()) }
}

fn eth_spec(dst: [u8; 6]) -> ibv_flow_spec_eth {
    ibv_flow_spec_eth {
        type_: 0x20,
        size: size_of::<ibv_flow_spec_eth>() as u16,
        val: ibv_flow_eth_filter {
            dst_mac: dst,
            ..Default::default()
        },
        mask: ibv_flow_eth_filter {
            dst_mac: [0xff; 6],
            ..Default::default()
        },
    }
}

fn ipv4_spec(dst: [u8; 4]) -> ibv_flow_spec_ipv4 {
    ibv_flow_spec_ipv4 {
        type_: 0x30,
        size: size_of::<ibv_flow_spec_ipv4>() as u16,
        val: ibv_flow_ipv4_filter {
            src_ip: 0,
            dst_ip: u32::from_ne_bytes(dst),
        },
        mask: ibv_flow_ipv4_filter {
            src_ip: 0,
            dst_ip: u32::MAX,
        },
    }
}

fn l4_spec(ty: u32, dport: u16) -> ibv_flow_spec_tcp_udp {
    ibv_flow_spec_tcp_udp {
        type_: ty,
        size: size_of::<ibv_flow_spec_tcp_udp>() as u16,
        val: ibv_flow_tcp_udp_filter {
            dst_port: dport.to_be(),
            src_port: 0,
        },
        mask: ibv_flow_tcp_udp_filter {
            dst_port: 0xffff,
            src_port: 0,
        },
    }
}

/// The tag of the tagged flows.
const FLOW_TAG: u32 = 0x00c0_ffee;

fn tag_spec(tag_id: u32) -> ibv_flow_spec_action_tag {
    ibv_flow_spec_action_tag {
        type_: 0x1000,
        size: size_of::<ibv_flow_spec_action_tag>() as u16,
        tag_id,
    }
}

fn create_flow(qp: *mut ibv_qp, a: &mut Attr) -> *mut ibv_flow {
    // SAFETY: a QP and an attribute followed by its specs.
    unsafe { op_create_flow(qp, a.ptr()) }
}

#[test]
fn raw_frames_through_flows_of_each_kind_default_sniffer_and_csum() {
    let _w = wire();
    let mut a = open("ta", 1);
    let b = open("tb", 6 * 8);
    // The raw capability bits.
    // SAFETY: all-zero is a valid ibv_device_attr_ex.
    let mut ex: ibv_device_attr_ex = unsafe { core::mem::zeroed() };
    // SAFETY: a live context and a struct of the size given.
    let r = unsafe { op_query_device_ex_for_tests(b.ctx, &mut ex) };
    assert_eq!(r, 0);
    assert_ne!(
        ex.raw_packet_caps & (1 << 2),
        0,
        "IBV_RAW_PACKET_CAP_IP_CSUM"
    );
    assert_ne!(ex.orig_attr.device_cap_flags & IBV_DEVICE_RAW_IP_CSUM, 0);
    assert_ne!(
        ex.orig_attr.device_cap_flags & IBV_DEVICE_MANAGED_FLOW_STEERING,
        0
    );
    assert_ne!(
        ex.device_cap_flags_ex & u64::from(IBV_DEVICE_RAW_IP_CSUM),
        0
    );

    let tx = raw_qp(&a, a.cq, 16, 0);
    // Receivers on tb: 0 Ethernet dst, 1 IPv4 dst + UDP port, 2 TCP port,
    // 3 the default rule, 4 the sniffer.
    let qs: Vec<*mut ibv_qp> = (0..5).map(|_| raw_qp(&b, b.cq, 0, 8)).collect();
    for (i, &q) in qs.iter().enumerate() {
        post_recvs(&b, q, i * 8, 8, i as u64);
    }
    let e1 = eth_spec(M1);
    let e2 = eth_spec(M2);
    let v4 = ipv4_spec([10, 0, 0, 2]);
    let udp = l4_spec(0x41, 5000);
    let tcp = l4_spec(0x40, 80);
    let f0 = create_flow(qs[0], &mut Attr::new(0, 0, &[bytes_of(&e1)]));
    let f1 = create_flow(
        qs[1],
        &mut Attr::new(0, 0, &[bytes_of(&e2), bytes_of(&v4), bytes_of(&udp)]),
    );
    let f2 = create_flow(qs[2], &mut Attr::new(0, 1, &[bytes_of(&tcp)]));
    let f3 = create_flow(qs[3], &mut Attr::new(1, 0, &[]));
    let f4 = create_flow(qs[4], &mut Attr::new(3, 0, &[]));
    for f in [f0, f1, f2, f3, f4] {
        assert!(!f.is_null(), "flow: errno {}", errno());
    }
    let by_qp = |w: &[ibv_wc]| {
        let mut v: Vec<u64> = w.iter().map(|c| c.wr_id / 1000).collect();
        v.sort_unstable();
        v
    };

    // Ethernet selector (and the sniffer's copy).
    let fa = frame(M1, None, None);
    send(&mut a, tx, &fa, 0);
    let w = poll(b.cq, 2);
    assert_eq!(by_qp(&w), [0, 4]);
    for c in &w {
        assert_eq!((c.status, c.byte_len), (0, fa.len() as u32));
        let off = (c.wr_id % 1000) as usize * SLOT;
        assert_eq!(&b.buf[off..off + fa.len()], &fa[..], "frame bytes");
    }
    quiet(b.cq);

    // IPv4 + UDP, checksums filled in by the sender's device
    // (IBV_SEND_IP_CSUM), reported good (IBV_WC_IP_CSUM_OK).
    let fb = frame(M2, Some(([10, 0, 0, 2], 17, 5000)), None);
    send(&mut a, tx, &fb, IBV_SEND_IP_CSUM);
    let w = poll(b.cq, 2);
    assert_eq!(by_qp(&w), [1, 4]);
    for c in &w {
        assert_ne!(c.wc_flags & 4, 0, "IBV_WC_IP_CSUM_OK");
    }
    // The same frame with the wrong UDP port misses that rule: the
    // default rule takes it.
    let fb2 = frame(M2, Some(([10, 0, 0, 2], 17, 5001)), None);
    send(&mut a, tx, &fb2, 0);
    assert_eq!(by_qp(&poll(b.cq, 2)), [3, 4]);
    // TCP port 80 (priority 1, after the priority-0 rules).
    let fc = frame(M3, Some(([10, 0, 0, 9], 6, 80)), None);
    send(&mut a, tx, &fc, IBV_SEND_IP_CSUM);
    assert_eq!(by_qp(&poll(b.cq, 2)), [2, 4]);
    quiet(b.cq);

    // A QP that flows deliver to is not destroyed.
    assert_eq!(ibv_destroy_qp(qs[0]), libc::EBUSY);
    // Its rule destroyed, the frame goes to the default rule.
    // SAFETY: a live flow.
    assert_eq!(unsafe { op_destroy_flow(f0) }, 0);
    // SAFETY: destroyed already.
    assert_eq!(unsafe { op_destroy_flow(f0) }, libc::EINVAL);
    send(&mut a, tx, &fa, 0);
    assert_eq!(by_qp(&poll(b.cq, 2)), [3, 4]);
    // Without the default and sniffer rules nothing takes it.
    for f in [f3, f4] {
        // SAFETY: live flows.
        assert_eq!(unsafe { op_destroy_flow(f) }, 0);
    }
    send(&mut a, tx, &fa, 0);
    quiet(b.cq);

    // f1 and f2 stay: the context's close removes them.
    let _ = (f1, f2);
    assert_eq!(ibv_destroy_qp(tx), 0);
    assert_eq!(ibv_destroy_qp(qs[0]), 0);
    for &q in &qs[3..] {
        assert_eq!(ibv_destroy_qp(q), 0);
    }
    close(a);
    // qs[1], qs[2] still have flows: closing the context destroys those
    // flows, then the QPs go with the context as any object left.
    let (ctx, cq, pd, mr, buf) = (b.ctx, b.cq, b.pd, b.mr, b.buf);
    crate::flow::close_context(ctx);
    assert_eq!(ibv_destroy_qp(qs[1]), 0);
    assert_eq!(ibv_destroy_qp(qs[2]), 0);
    assert_eq!(ibv_dereg_mr(mr), 0);
    drop(buf);
    assert_eq!(ibv_destroy_cq(cq), 0);
    assert_eq!(ibv_dealloc_pd(pd), 0);
    assert_eq!(ibv_close_device(ctx), 0);
}

#[test]
fn bad_flow_specs_get_the_kernel_errnos() {
    let d = open("tl", 1);
    let raw = raw_qp(&d, d.cq, 0, 4);
    let e = eth_spec(M1);
    let mut cases: Vec<(Attr, c_int, &str)> = Vec::new();
    // Unknown spec type.
    let mut bad = e;
    bad.type_ = 0x77;
    cases.push((
        Attr::new(0, 0, &[bytes_of(&bad)]),
        libc::EINVAL,
        "unknown type",
    ));
    // A size that is not the spec's.
    let mut short = e;
    short.size -= 4;
    cases.push((Attr::new(0, 0, &[bytes_of(&short)]), libc::EINVAL, "size"));
    // A flow tag of 24 bits or more, two tags, a tag on a sniffer
    // (mlx5_ib: EINVAL).
    cases.push((
        Attr::new(0, 0, &[bytes_of(&e), bytes_of(&tag_spec(1 << 24))]),
        libc::EINVAL,
        "tag of 25 bits",
    ));
    cases.push((
        Attr::new(
            0,
            0,
            &[bytes_of(&e), bytes_of(&tag_spec(1)), bytes_of(&tag_spec(2))],
        ),
        libc::EINVAL,
        "two tags",
    ));
    cases.push((
        Attr::new(3, 0, &[bytes_of(&tag_spec(1))]),
        libc::EINVAL,
        "sniffer tag",
    ));
    let mut short_tag = tag_spec(1);
    short_tag.size = 8;
    cases.push((
        Attr::new(0, 0, &[bytes_of(&e), &bytes_of(&short_tag)[..8]]),
        libc::EINVAL,
        "tag spec size",
    ));
    // VXLAN tunnel, inner headers: not offered.
    let mut vx = e;
    vx.type_ = 0x50;
    cases.push((Attr::new(0, 0, &[bytes_of(&vx)]), libc::EOPNOTSUPP, "vxlan"));
    let mut inner = e;
    inner.type_ = 0x20 | 0x100;
    cases.push((
        Attr::new(0, 0, &[bytes_of(&inner)]),
        libc::EOPNOTSUPP,
        "inner",
    ));
    // IPv6 with a hop-limit mask.
    // SAFETY: all-zero is a valid spec.
    let mut v6: ibv_flow_spec_ipv6 = unsafe { core::mem::zeroed() };
    v6.type_ = 0x31;
    v6.size = size_of::<ibv_flow_spec_ipv6>() as u16;
    v6.mask.hop_limit = 0xff;
    cases.push((
        Attr::new(0, 0, &[bytes_of(&v6)]),
        libc::EOPNOTSUPP,
        "hop limit",
    ));
    // MC_DEFAULT rules; a sniffer with selectors.
    cases.push((Attr::new(2, 0, &[]), libc::EOPNOTSUPP, "mc default"));
    cases.push((
        Attr::new(3, 0, &[bytes_of(&e)]),
        libc::EINVAL,
        "sniffer spec",
    ));
    cases.push((Attr::new(9, 0, &[]), libc::EINVAL, "attr type"));
    for (mut a, want, what) in cases {
        assert!(create_flow(raw, &mut a).is_null(), "{what}");
        assert_eq!(errno(), want, "{what}");
    }
    // Port 2 (the device has one).
    let mut a = Attr::new(0, 0, &[bytes_of(&e)]);
    // SAFETY: the attribute at the start of the buffer.
    unsafe { (*a.ptr()).port = 2 };
    assert!(create_flow(raw, &mut a).is_null());
    assert_eq!(errno(), libc::EINVAL);
    // IPv6 addresses alone are fine; destroyed with the QP's context.
    v6.mask.hop_limit = 0;
    v6.val.dst_ip[15] = 1;
    v6.mask.dst_ip = [0xff; 16];
    let f = create_flow(raw, &mut Attr::new(0, 0, &[bytes_of(&v6)]));
    assert!(!f.is_null());
    // A flow on an RC QP.
    let mut init = qp_init(d.cq, IBV_QPT_RC, qp_cap(1, 1, 1, 1));
    let rc = ibv_create_qp(d.pd, &mut init);
    assert!(!rc.is_null());
    assert!(create_flow(rc, &mut Attr::new(0, 0, &[bytes_of(&e)])).is_null());
    assert_eq!(errno(), libc::EINVAL);
    // Create flags on an RC QP; a raw QP with an SRQ-less short send.
    // SAFETY: a live flow.
    assert_eq!(unsafe { op_destroy_flow(f) }, 0);
    assert_eq!(ibv_destroy_qp(rc), 0);
    // A send shorter than the inline headers is refused.
    let mut sg = [sge(d.mr, d.buf.as_ptr() as u64, 8)];
    let mut wr = send_wr(0, IBV_WR_SEND, &mut sg, 0);
    let tx = raw_qp(&d, d.cq, 4, 0);
    let r = post_send(tx, &mut wr);
    assert_eq!(r, Err((libc::EINVAL, ptr::addr_of!(wr) as usize)));
    assert_eq!(ibv_destroy_qp(tx), 0);
    assert_eq!(ibv_destroy_qp(raw), 0);
    close(d);
}

#[test]
fn extended_cq_reads_the_stripped_vlan_and_create_flags_reach_the_qp() {
    let _w = wire();
    let mut a = open("ta", 1);
    let mut b = open("tb", 4);
    let tx = raw_qp(&a, a.cq, 4, 0);
    // SAFETY: all-zero is a valid ibv_cq_init_attr_ex.
    let mut ca: ibv_cq_init_attr_ex = unsafe { core::mem::zeroed() };
    ca.cqe = 16;
    ca.wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_CVLAN | IBV_WC_EX_WITH_FLOW_TAG;
    // SAFETY: a live context, valid attributes.
    let cqx = unsafe { op_create_cq_ex(b.ctx, &mut ca) };
    assert!(!cqx.is_null());
    let cq = cqx.cast::<ibv_cq>();
    // SAFETY: all-zero is a valid ibv_qp_init_attr_ex.
    let mut ia: ibv_qp_init_attr_ex = unsafe { core::mem::zeroed() };
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RAW_PACKET;
    ia.cap.max_recv_wr = 4;
    ia.cap.max_recv_sge = 1;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    ia.pd = b.pd;
    // An unknown create flag; blocking multicast loopback (on a raw
    // packet QP as on a UD QP); then CVLAN stripping.
    ia.create_flags = 1 << 12;
    // SAFETY: as above.
    assert!(unsafe { op_create_qp_ex(b.ctx, &mut ia) }.is_null());
    assert_eq!(errno(), libc::EOPNOTSUPP);
    // A raw QP blocking its own multicast loopback, on a flow of a
    // multicast group: its own frame to the group does not come back to
    // it (the send completion is the only one), side A's does.
    ia.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
    ia.send_cq = b.cq;
    ia.recv_cq = b.cq;
    ia.cap.max_send_wr = 4;
    ia.cap.max_send_sge = 2;
    // SAFETY: as above.
    let blk = unsafe { op_create_qp_ex(b.ctx, &mut ia) };
    assert!(!blk.is_null(), "errno {}", errno());
    to_rts(blk);
    post_recvs(&b, blk, 1, 2, 0);
    let mc = [0x01, 0x00, 0x5e, 0, 0, 0x2a];
    let e = eth_spec(mc);
    let fm = create_flow(blk, &mut Attr::new(0, 0, &[bytes_of(&e)]));
    assert!(!fm.is_null());
    send(&mut b, blk, &frame(mc, None, None), 0);
    quiet(b.cq);
    send(&mut a, tx, &frame(mc, None, None), 0);
    let wc = poll(b.cq, 1).remove(0);
    assert_eq!((wc.status, wc.wr_id), (0, 1));
    // SAFETY: a live flow.
    assert_eq!(unsafe { op_destroy_flow(fm) }, 0);
    assert_eq!(ibv_destroy_qp(blk), 0);
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_UD;
    ia.cap.max_send_wr = 4;
    ia.cap.max_send_sge = 1;
    // SAFETY: as above.
    let ud = unsafe { op_create_qp_ex(b.ctx, &mut ia) };
    assert!(!ud.is_null(), "errno {}", errno());
    assert_eq!(ibv_destroy_qp(ud), 0);
    ia.qp_type = IBV_QPT_RAW_PACKET;
    ia.cap.max_send_wr = 0;
    ia.cap.max_send_sge = 0;
    ia.create_flags = IBV_QP_CREATE_CVLAN_STRIPPING;
    // SAFETY: as above.
    let rq = unsafe { op_create_qp_ex(b.ctx, &mut ia) };
    assert!(!rq.is_null(), "errno {}", errno());
    to_rts(rq);
    post_recvs(&b, rq, 0, 4, 0);
    // Frames to M1 through a flow with IBV_FLOW_SPEC_ACTION_TAG; to M2
    // through one without.
    let e = eth_spec(M1);
    let f = create_flow(
        rq,
        &mut Attr::new(0, 0, &[bytes_of(&e), bytes_of(&tag_spec(FLOW_TAG))]),
    );
    assert!(!f.is_null(), "tagged flow: errno {}", errno());
    let e2 = eth_spec(M2);
    let f2 = create_flow(rq, &mut Attr::new(0, 0, &[bytes_of(&e2)]));
    assert!(!f2.is_null());
    let fr = frame(M1, None, Some(0x2064));
    send(&mut a, tx, &fr, 0);
    // SAFETY: the extended CQ's own functions.
    let (start, read_cvlan, read_flow_tag, byte_len, end) = unsafe {
        (
            (*cqx).start_poll.unwrap(),
            (*cqx).read_cvlan.unwrap(),
            (*cqx).read_flow_tag.unwrap(),
            (*cqx).read_byte_len.unwrap(),
            (*cqx).end_poll.unwrap(),
        )
    };
    // Starts a poll of the extended CQ, waiting up to 10 s for a completion.
    let start_poll = || {
        let deadline = Instant::now() + Duration::from_secs(10);
        // SAFETY: a live extended CQ; NULL attributes are allowed.
        while unsafe { start(cqx, ptr::null_mut()) } == libc::ENOENT {
            assert!(Instant::now() < deadline);
            std::thread::yield_now();
        }
    };
    start_poll();
    // SAFETY: a completion was taken.
    unsafe {
        assert_eq!((*cqx).status, 0);
        assert_eq!(read_cvlan(cqx), 0x2064, "the stripped TCI");
        assert_eq!(byte_len(cqx) as usize, fr.len() - 4, "without the tag");
        assert_eq!(read_flow_tag(cqx), FLOW_TAG, "the flow's tag");
        end(cqx);
    }
    let fr2 = frame(M2, None, None);
    send(&mut a, tx, &fr2, 0);
    start_poll();
    // SAFETY: a completion was taken.
    unsafe {
        assert_eq!((*cqx).status, 0);
        assert_eq!(read_flow_tag(cqx), 0, "an untagged flow");
        end(cqx);
    }
    // SAFETY: live flows.
    assert_eq!(unsafe { op_destroy_flow(f2) }, 0);
    // SAFETY: a live flow.
    assert_eq!(unsafe { op_destroy_flow(f) }, 0);
    assert_eq!(ibv_destroy_qp(rq), 0);
    assert_eq!(ibv_destroy_qp(tx), 0);
    assert_eq!(ibv_destroy_cq(cq), 0);
    close(a);
    close(b);
}

/// `ibv_query_device_ex` through the context's operation.
///
/// # Safety
/// `ctx` is a context of this library (or not: it is checked).
unsafe fn op_query_device_ex_for_tests(
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr_ex,
) -> c_int {
    let v = ctx
        .cast::<u8>()
        .wrapping_sub(core::mem::offset_of!(verbs_context, context))
        .cast::<verbs_context>();
    // SAFETY: a context of this library is the last member of its
    // verbs_context.
    let f = unsafe { (*v).query_device_ex.unwrap() };
    // SAFETY: as the header's inline ibv_query_device_ex calls it.
    unsafe { f(ctx, ptr::null(), attr, size_of::<ibv_device_attr_ex>()) }
}

/// The context's `verbs_context`.
fn vctx(ctx: *mut ibv_context) -> &'static verbs_context {
    let v = ctx
        .cast::<u8>()
        .wrapping_sub(core::mem::offset_of!(verbs_context, context))
        .cast::<verbs_context>();
    // SAFETY: a context of this library is the last member of its
    // verbs_context, which lives as long as the test uses it.
    unsafe { &*v }
}

#[test]
fn wqs_an_indirection_table_and_an_rss_qp_spread_frames_by_hash() {
    let _w = wire();
    let mut a = open("ta", 1);
    let b = open("tb", 4 * 8);
    let tx = raw_qp(&a, a.cq, 16, 0);
    let v = vctx(b.ctx);
    let mut wqs = Vec::new();
    for i in 0..4usize {
        let mut wa = ibv_wq_init_attr {
            wq_context: ptr::null_mut(),
            wq_type: 0,
            max_wr: 8,
            max_sge: 1,
            pd: b.pd,
            cq: b.cq,
            comp_mask: 0,
            create_flags: 0,
        };
        // SAFETY: a live context, valid attributes.
        let wq = unsafe { v.create_wq.unwrap()(b.ctx, &mut wa) };
        assert!(!wq.is_null(), "errno {}", errno());
        let mut st = ibv_wq_attr {
            attr_mask: 1,
            wq_state: 7,
            curr_wq_state: 0,
            flags: 0,
            flags_mask: 0,
        };
        // SAFETY: a live WQ.
        assert_eq!(unsafe { v.modify_wq.unwrap()(wq, &mut st) }, libc::EINVAL);
        st.wq_state = 1; // IBV_WQS_RDY
        // SAFETY: a live WQ.
        assert_eq!(unsafe { v.modify_wq.unwrap()(wq, &mut st) }, 0);
        // SAFETY: a live WQ.
        assert_eq!(unsafe { (*wq).state }, 1);
        for k in 0..8 {
            let slot = i * 8 + k;
            let mut sg = [slot_sge(&b, slot)];
            post_wq_recv(wq, &mut recv_wr((i * 1000 + slot) as u64, &mut sg)).unwrap();
        }
        wqs.push(wq);
    }
    let mut ta = ibv_rwq_ind_table_init_attr {
        log_ind_tbl_size: 2,
        ind_tbl: wqs.as_mut_ptr(),
        comp_mask: 0,
    };
    // SAFETY: a live context, a table of four live WQs.
    let ind = unsafe { v.create_rwq_ind_table.unwrap()(b.ctx, &mut ta) };
    assert!(!ind.is_null(), "errno {}", errno());
    // SAFETY: a live WQ the table names.
    assert_eq!(unsafe { v.destroy_wq.unwrap()(wqs[0]) }, libc::EBUSY);
    let mut key = [0u8; 40];
    for (i, k) in key.iter_mut().enumerate() {
        *k = (i as u8).wrapping_mul(37).wrapping_add(11);
    }
    // SAFETY: all-zero is a valid ibv_qp_init_attr_ex.
    let mut ia: ibv_qp_init_attr_ex = unsafe { core::mem::zeroed() };
    ia.qp_type = IBV_QPT_RAW_PACKET;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
    ia.pd = b.pd;
    ia.rwq_ind_tbl = ind.cast();
    ia.rx_hash_conf = ibv_rx_hash_conf {
        rx_hash_function: 1,
        rx_hash_key_len: 20,
        rx_hash_key: key.as_mut_ptr(),
        rx_hash_fields_mask: 1 | 2, // IBV_RX_HASH_SRC_IPV4 | DST_IPV4
    };
    // A key of the wrong length.
    // SAFETY: a live context, valid attributes.
    assert!(unsafe { op_create_qp_ex(b.ctx, &mut ia) }.is_null());
    assert_eq!(errno(), libc::EINVAL);
    ia.rx_hash_conf.rx_hash_key_len = 40;
    // SAFETY: as above.
    let rss = unsafe { op_create_qp_ex(b.ctx, &mut ia) };
    assert!(!rss.is_null(), "errno {}", errno());
    // SAFETY: a live table an RSS QP uses.
    let r = unsafe { v.destroy_rwq_ind_table.unwrap()(ind) };
    assert_eq!(r, libc::EBUSY);
    let e = eth_spec(M1);
    let f = create_flow(rss, &mut Attr::new(0, 0, &[bytes_of(&e)]));
    assert!(!f.is_null(), "errno {}", errno());
    assert_eq!(ibv_destroy_qp(rss), libc::EBUSY, "a flow delivers to it");
    let mut qa = ibv_qp_attr {
        qp_state: 1,
        ..Default::default()
    };
    assert_eq!(ibv_modify_qp(rss, &mut qa, 1), libc::ENOSYS);

    // Sixteen destinations, each sent twice: the same addresses land in
    // the same WQ, and more than one WQ is used.
    let mut seen = std::collections::HashMap::new();
    for round in 0..2 {
        for d in 0..16u8 {
            let fr = frame(M1, Some(([10, 0, 1, d], 17, 7000)), None);
            send(&mut a, tx, &fr, 0);
            let w = poll(b.cq, 1).remove(0);
            assert_eq!((w.status, w.byte_len), (0, fr.len() as u32));
            let wq = w.wr_id / 1000;
            let slot = (w.wr_id % 1000) as usize;
            assert_eq!(&b.buf[slot * SLOT..slot * SLOT + fr.len()], &fr[..]);
            if round == 0 {
                seen.insert(d, wq);
            } else {
                assert_eq!(seen[&d], wq, "destination {d} moved");
            }
            // Repost where it came from.
            let mut sg = [slot_sge(&b, slot)];
            post_wq_recv(wqs[wq as usize], &mut recv_wr(w.wr_id, &mut sg)).unwrap();
        }
    }
    let used: std::collections::HashSet<u64> = seen.values().copied().collect();
    assert!(used.len() > 1, "the hash spreads: {used:?}");

    // SAFETY: live objects, destroyed in order.
    unsafe {
        assert_eq!(op_destroy_flow(f), 0);
        assert_eq!(ibv_destroy_qp(rss), 0);
        assert_eq!(v.destroy_rwq_ind_table.unwrap()(ind), 0);
        for &w in &wqs {
            assert_eq!(v.destroy_wq.unwrap()(w), 0);
        }
    }
    assert_eq!(ibv_destroy_qp(tx), 0);
    close(a);
    close(b);
}

/// `ibv_modify_qp_rate_limit` as the header's inline function calls it.
fn modify_qp_rate_limit(qp: *mut ibv_qp, a: ibv_qp_rate_limit_attr) -> c_int {
    let mut a = a;
    // SAFETY: a live QP of this library.
    let ctx = unsafe { (*qp).context };
    let f = vctx(ctx).modify_qp_rate_limit.unwrap();
    // SAFETY: as the header's inline function calls it.
    unsafe { f(qp, &mut a) }
}

/// The rate `ibv_query_qp` reports.
fn queried_rate(qp: *mut ibv_qp) -> u32 {
    let mut a = ibv_qp_attr::default();
    // SAFETY: all-zero is a valid ibv_qp_init_attr.
    let mut ia: ibv_qp_init_attr = unsafe { core::mem::zeroed() };
    assert_eq!(ibv_query_qp(qp, &mut a, 0, &mut ia), 0);
    a.rate_limit
}

#[test]
fn packet_pacing_caps_ibv_qp_rate_limit_and_modify_qp_rate_limit() {
    // The ConnectX-4s do not pace.
    let a = open("ta", 1);
    // SAFETY: all-zero is a valid ibv_device_attr_ex.
    let mut ex: ibv_device_attr_ex = unsafe { core::mem::zeroed() };
    // SAFETY: a live context and a struct of the size given.
    assert_eq!(unsafe { op_query_device_ex_for_tests(a.ctx, &mut ex) }, 0);
    assert_eq!(ex.packet_pacing_caps.qp_rate_limit_max, 0);
    let qa = raw_qp(&a, a.cq, 4, 0);
    let rl = ibv_qp_rate_limit_attr {
        rate_limit: 10_000,
        ..Default::default()
    };
    assert_eq!(modify_qp_rate_limit(qa, rl), libc::EOPNOTSUPP);
    assert_eq!(ibv_destroy_qp(qa), 0);
    close(a);

    // The ConnectX-5 does: perftest's check_packet_pacing_support.
    let d = open("t5", 1);
    // SAFETY: as above.
    let mut ex: ibv_device_attr_ex = unsafe { core::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { op_query_device_ex_for_tests(d.ctx, &mut ex) }, 0);
    let pp = ex.packet_pacing_caps;
    assert!(pp.qp_rate_limit_max > 0);
    assert_eq!(pp.supported_qpts, 1 << IBV_QPT_RAW_PACKET);

    // IBV_QP_RATE_LIMIT at RTR -> RTS, as perftest's ctx_modify_qp_to_rts.
    let mut init = ibv_qp_init_attr {
        sq_sig_all: 1,
        ..qp_init(d.cq, IBV_QPT_RAW_PACKET, qp_cap(4, 0, 1, 1))
    };
    let q = ibv_create_qp(d.pd, &mut init);
    assert!(!q.is_null(), "errno {}", errno());
    let mut m = ibv_qp_attr {
        qp_state: 1,
        port_num: 1,
        ..Default::default()
    };
    assert_eq!(ibv_modify_qp(q, &mut m, 1 | 32), 0);
    let mut m = ibv_qp_attr {
        qp_state: 2,
        rate_limit: 1000,
        ..Default::default()
    };
    // Not at INIT -> RTR.
    assert_eq!(
        ibv_modify_qp(q, &mut m, 1 | IBV_QP_RATE_LIMIT),
        libc::EINVAL
    );
    assert_eq!(ibv_modify_qp(q, &mut m, 1), 0);
    let mut m = ibv_qp_attr {
        qp_state: 3,
        rate_limit: 8_000,
        ..Default::default()
    };
    assert_eq!(ibv_modify_qp(q, &mut m, 1 | IBV_QP_RATE_LIMIT), 0);
    assert_eq!(queried_rate(q), 8_000);

    // ibv_modify_qp_rate_limit: a new rate with a burst bound, then the
    // errors rdma-core's mlx5 provider gives.
    let burst = ibv_qp_rate_limit_attr {
        rate_limit: 16_000,
        max_burst_sz: 4096,
        typical_pkt_sz: 1024,
        comp_mask: 0,
    };
    assert_eq!(modify_qp_rate_limit(q, burst), 0);
    assert_eq!(queried_rate(q), 16_000);
    let bad = [
        ibv_qp_rate_limit_attr {
            comp_mask: 1,
            ..burst
        },
        ibv_qp_rate_limit_attr {
            rate_limit: 0,
            ..burst
        },
        ibv_qp_rate_limit_attr {
            rate_limit: pp.qp_rate_limit_max + 1,
            ..Default::default()
        },
    ];
    for b in bad {
        assert_eq!(
            modify_qp_rate_limit(q, b),
            libc::EINVAL,
            "{:?}",
            b.rate_limit
        );
        assert_eq!(queried_rate(q), 16_000, "a refused rate keeps the old one");
    }
    // Rate 0: no pacing.
    assert_eq!(modify_qp_rate_limit(q, Default::default()), 0);
    assert_eq!(queried_rate(q), 0);
    assert_eq!(ibv_destroy_qp(q), 0);

    // A full rate table is ENOSPC, as mlx5_rl_add_rate answers.
    let qps: Vec<_> = (0..=hca_driver::MAX_RATE_ENTRIES)
        .map(|_| raw_qp(&d, d.cq, 1, 0))
        .collect();
    for (i, &q) in qps.iter().enumerate().take(hca_driver::MAX_RATE_ENTRIES) {
        let rl = ibv_qp_rate_limit_attr {
            rate_limit: 1000 + i as u32,
            ..Default::default()
        };
        assert_eq!(modify_qp_rate_limit(q, rl), 0, "entry {i}");
    }
    let last = qps[hca_driver::MAX_RATE_ENTRIES];
    let rl = ibv_qp_rate_limit_attr {
        rate_limit: 999,
        ..Default::default()
    };
    assert_eq!(modify_qp_rate_limit(last, rl), libc::ENOSPC);
    for q in qps {
        assert_eq!(ibv_destroy_qp(q), 0);
    }
    close(d);
}
