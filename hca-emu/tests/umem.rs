//! User memory (CREATE_UMEM / DESTROY_UMEM) and CQs and QPs whose buffers
//! and doorbell records live in one, as rdma-core's mlx5_vfio DevX path
//! builds them (`cq_umem_valid`, `wq_umem_valid`, `dbr_umem_valid`).

mod common;

use common::dp::{Attrs, Cq, LW, Node, Qp, QpSpec, RR, RW, Wr, op};
use common::{inp, put64, setf};
use hca_emu::{EmuConfig, Personality, syndrome as syn};

const BAD_OP: u8 = 0x2;
const BAD_PARAM: u8 = 0x3;
const BAD_RES: u8 = 0x5;
const BAD_RES_STATE: u8 = 0x9;
const BAD_INP_LEN: u8 = 0x50;

fn cx5(seed: u64) -> EmuConfig {
    EmuConfig {
        seed,
        ..EmuConfig::default().with_personality(Personality::ConnectX5)
    }
}

/// CREATE_UMEM input: `n` MTT entries of pages of 4 KiB << `lps` from
/// `addr`, `page_offset`, `flags` in each entry's low bits (rd_en 1,
/// wr_en 2).
fn umem_input(addr: u64, n: usize, lps: u64, page_offset: u64, flags: u64) -> Vec<u8> {
    let mut m = inp(0xa08, 0, 0x30 + 8 * n);
    setf(&mut m, 0x20, 4, 0, lps);
    setf(&mut m, 0x24, 31, 0, page_offset);
    put64(&mut m, 0x28, n as u64);
    for i in 0..n {
        put64(
            &mut m,
            0x30 + 8 * i,
            (addr + ((i as u64) << (12 + lps))) | flags,
        );
    }
    m
}

/// A UMEM of `len` bytes (4 KiB pages: the test's DMA memory is only
/// 4 KiB aligned) kept for `finish`.
fn umem(n: &mut Node, len: usize) -> (u32, u64) {
    let addr = n.mem(len, 0);
    let id = n.r.create(&umem_input(addr, len.div_ceil(4096), 0, 0, 3));
    n.keep(0xa0a, id);
    (id, addr)
}

/// A CQ of 2^`log` CQEs whose buffer and doorbell record are on UMEMs.
fn umem_cq(n: &mut Node, log: u32) -> Cq {
    let size = (64usize << log).max(4096);
    let (buf_id, buf) = umem(n, size.next_power_of_two());
    for i in 0..(1usize << log) {
        n.write(buf + (i * 64 + 63) as u64, &[0xf0]);
    }
    let (dbr_id, dbr) = umem(n, 4096);
    let mut m = inp(0x400, 0, 0x110);
    setf(&mut m, 0x10, 25, 25, 1); // cqc.dbr_umem_valid
    setf(&mut m, 0x14, 31, 0, u64::from(dbr_id)); // cqc.dbr_umem_id
    setf(&mut m, 0x1c, 28, 24, u64::from(log));
    setf(&mut m, 0x1c, 23, 0, u64::from(n.uar));
    setf(&mut m, 0x24, 7, 0, u64::from(n.eqn));
    put64(&mut m, 0x48, 0); // dbr_addr: offset 0 of the dbr UMEM
    setf(&mut m, 0x58, 31, 0, u64::from(buf_id)); // cq_umem_id
    setf(&mut m, 0x5c, 31, 31, 1); // cq_umem_valid
    let cqn = n.r.create(&m);
    n.keep(0x401, cqn);
    Cq {
        cqn,
        buf,
        dbr,
        log,
        ci: 0,
    }
}

/// An RC QP (16 receive WQEs of 64 bytes, 64 send WQEBBs) on UMEMs.
fn umem_qp(n: &mut Node, cq: &Cq) -> Qp {
    let s = QpSpec::new(0, cq);
    let stride = 16usize << s.log_rq_stride;
    let total = ((stride << s.log_rq) + (64usize << s.log_sq)).next_power_of_two();
    let (buf_id, buf) = umem(n, total.max(4096));
    let (dbr_id, dbr) = umem(n, 4096);
    let mut m = inp(0x500, 0, 0x110);
    setf(&mut m, 0x18, 23, 16, 0);
    setf(&mut m, 0x1c, 23, 0, u64::from(n.pd));
    setf(&mut m, 0x20, 22, 19, u64::from(s.log_rq));
    setf(&mut m, 0x20, 18, 16, u64::from(s.log_rq_stride));
    setf(&mut m, 0x20, 14, 11, u64::from(s.log_sq));
    setf(&mut m, 0x24, 23, 0, u64::from(n.uar));
    setf(&mut m, 0x94, 23, 0, u64::from(cq.cqn));
    setf(&mut m, 0xb4, 23, 0, u64::from(cq.cqn));
    put64(&mut m, 0xb8, 0); // dbr_addr: offset 0 of the dbr UMEM
    setf(&mut m, 0xe8, 28, 28, 1); // qpc.dbr_umem_valid
    setf(&mut m, 0xfc, 31, 0, u64::from(dbr_id)); // qpc.dbr_umem_id
    setf(&mut m, 0x108, 31, 0, u64::from(buf_id)); // wq_umem_id
    setf(&mut m, 0x10c, 31, 31, 1); // wq_umem_valid
    let qpn = n.r.create(&m);
    n.keep(0x501, qpn);
    Qp {
        qpn,
        st: 0,
        buf,
        dbr,
        log_rq: s.log_rq,
        rq_stride: stride,
        log_sq: s.log_sq,
        srq: false,
        sq_pc: 0,
        rq_pc: 0,
        port: 1,
        bf: false,
        bf_toggle: false,
    }
}

#[test]
fn send_imm_between_qps_on_umem() {
    let mut a = Node::new(1, cx5(1));
    let mut b = Node::new(2, cx5(2));
    hca_emu::connect(&a.r.emu, 1, &b.r.emu, 1).unwrap();
    let ca = umem_cq(&mut a, 8);
    let cb = umem_cq(&mut b, 8);
    let mut qa = umem_qp(&mut a, &ca);
    let mut qb = umem_qp(&mut b, &cb);
    let (mut ca, mut cb) = (ca, cb);
    common::dp::connect_pair(&mut a, &mut qa, &mut b, &mut qb, &Attrs::default());
    let src = a.mr(1024, b'c', LW | RR | RW);
    let dst = b.mr(1024, 0, LW | RR | RW);
    for i in 0..20u32 {
        b.post_recv(&mut qb, &[(dst.addr, 1024, dst.key)]);
        a.post_send(
            &mut qa,
            &[Wr::new(op::SEND_IMM)
                .sge(src.addr, 1024, src.key)
                .imm(0x0302_0100 + i)],
        );
        let s = a.wait(&mut ca, 1);
        assert_eq!(s[0].opcode, 0x0, "requester CQE: {s:?}");
        let r = b.wait(&mut cb, 1);
        assert_eq!(r[0].opcode, 0x3, "responder SEND_IMM CQE: {r:?}");
        assert_eq!(r[0].imm, 0x0302_0100 + i);
        assert_eq!(r[0].byte_cnt, 1024);
        assert_eq!(b.read(dst.addr, 1024), vec![b'c'; 1024]);
        b.write(dst.addr, &[0; 1024]);
    }
    a.finish();
    b.finish();
}

#[test]
fn umem_rules() {
    let mut n = Node::new(1, cx5(3));
    let addr = n.mem(8192, 0);
    // num_of_mtt 0; input shorter than num_of_mtt entries.
    let mut m = umem_input(addr, 1, 0, 0, 3);
    put64(&mut m, 0x28, 0);
    assert_eq!(n.r.fails(&m, 16, BAD_PARAM), syn::UMEM_NUM_MTT);
    put64(&mut m, 0x28, 2);
    assert_eq!(n.r.fails(&m, 16, BAD_INP_LEN), syn::UMEM_MTT_SHORT);
    // page_offset beyond the page; an entry not page aligned; no rd_en.
    let mut m = umem_input(addr, 1, 0, 0, 3);
    setf(&mut m, 0x24, 31, 0, 4096);
    assert_eq!(n.r.fails(&m, 16, BAD_PARAM), syn::UMEM_PAGE_OFFSET);
    let m = umem_input(addr, 1, 1, 0, 3); // 8 KiB pages: addr is 4 KiB aligned only if ...
    if addr % 8192 != 0 {
        assert_eq!(n.r.fails(&m, 16, BAD_PARAM), syn::UMEM_MTT_MISALIGNED);
    }
    let m = umem_input(addr + 0x100, 1, 0, 0, 3);
    assert_eq!(n.r.fails(&m, 16, BAD_PARAM), syn::UMEM_MTT_MISALIGNED);
    let m = umem_input(addr, 1, 0, 0, 2);
    assert_eq!(n.r.fails(&m, 16, BAD_PARAM), syn::UMEM_MTT_NOT_READABLE);

    // A CQ naming a UMEM that does not exist, one too small, one at an
    // offset that is not 4 KiB aligned; a doorbell record beyond its UMEM.
    let id = n.r.create(&umem_input(addr, 1, 0, 0, 3));
    let cq = |umem: u32, off: u64, log: u64, dbr_off: u64| {
        let mut m = inp(0x400, 0, 0x110);
        setf(&mut m, 0x10, 25, 25, 1);
        setf(&mut m, 0x14, 31, 0, u64::from(id));
        setf(&mut m, 0x1c, 28, 24, log);
        setf(&mut m, 0x1c, 23, 0, u64::from(n.uar));
        setf(&mut m, 0x24, 7, 0, u64::from(n.eqn));
        put64(&mut m, 0x48, dbr_off);
        put64(&mut m, 0x50, off);
        setf(&mut m, 0x58, 31, 0, u64::from(umem));
        setf(&mut m, 0x5c, 31, 31, 1);
        m
    };
    assert_eq!(
        n.r.fails(&cq(id + 1, 0, 6, 0), 16, BAD_RES),
        syn::UMEM_BAD_ID
    );
    assert_eq!(n.r.fails(&cq(id, 0, 7, 0), 16, BAD_PARAM), syn::UMEM_RANGE);
    assert_eq!(
        n.r.fails(&cq(id, 64, 5, 0), 16, BAD_PARAM),
        syn::UMEM_OFFSET_MISALIGNED
    );
    assert_eq!(
        n.r.fails(&cq(id, 0, 6, 4096), 16, BAD_PARAM),
        syn::UMEM_RANGE
    );
    assert_eq!(
        n.r.fails(&cq(id, 0, 6, 4), 16, BAD_PARAM),
        syn::DBR_MISALIGNED
    );
    // A CQ buffer the device could not write: a UMEM without wr_en.
    let ro = n.r.create(&umem_input(addr + 4096, 1, 0, 0, 1));
    assert_eq!(
        n.r.fails(&cq(ro, 0, 5, 0), 16, BAD_PARAM),
        syn::UMEM_NOT_WRITABLE
    );
    let mut d = inp(0xa0a, 0, 16);
    setf(&mut d, 8, 23, 0, u64::from(ro));
    n.r.ok(&d, 16);
    // Buffer and doorbell record in one UMEM: the UMEM is in use until the
    // CQ is gone.
    let cqn = n.r.create(&cq(id, 0, 5, 4088));
    let mut d = inp(0xa0a, 0, 16);
    setf(&mut d, 8, 23, 0, u64::from(id));
    assert_eq!(n.r.fails(&d, 16, BAD_RES_STATE), syn::IN_USE);
    let mut dc = inp(0x401, 0, 16);
    setf(&mut dc, 8, 23, 0, u64::from(cqn));
    n.r.ok(&dc, 16);
    n.r.ok(&d, 16);
    assert_eq!(n.r.fails(&d, 16, BAD_RES), syn::NO_SUCH_OBJECT);
    n.finish();
}

#[test]
fn connectx4_firmware_has_no_umem() {
    let mut n = Node::new(1, EmuConfig::default());
    let addr = n.mem(4096, 0);
    assert_eq!(
        n.r.fails(&umem_input(addr, 1, 0, 0, 3), 16, BAD_OP),
        syn::BAD_OPCODE
    );
    n.finish();
}
