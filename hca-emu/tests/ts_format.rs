//! `ts_format` of CREATE_QP, CREATE_SQ and CREATE_RQ against the timestamp
//! capabilities (issue 10, item 6): the recorded ConnectX-4 reads 0
//! (free-running only) in `roce_cap.qp_ts_format`, `sq_ts_format` and
//! `rq_ts_format` and takes only 0; a device in real-time clock mode
//! (`EmuConfig::real_time_clock`) reports 1 and refuses free-running.

mod common;

use common::{Raw, inp, put64, setf};
use hca_emu::syndrome as syn;
use hca_emu::{EmuConfig, TsFormatCaps};

/// `qpc.ts_format`: qpc at 0x18 of CREATE_QP, the field at dword 2 bits
/// 7:6.
fn set_qp_ts(m: &mut [u8], v: u64) {
    setf(m, 0x18 + 0x08, 7, 6, v);
}

/// Reads a capability field (bit offset/width from the layout) of
/// QUERY_HCA_CAP `op_mod`.
fn cap(r: &mut Raw, op_mod: u16, byte: usize, hi: u32, lo: u32) -> u64 {
    let o = r.ok(&inp(0x100, op_mod, 16), 0x1010);
    let w = u32::from_be_bytes(o[0x10 + byte..0x14 + byte].try_into().unwrap());
    u64::from((w >> lo) & ((1u32 << (hi - lo + 1)) - 1))
}

fn up(cfg: EmuConfig) -> Raw {
    let mut r = Raw::new(cfg);
    r.init();
    r
}

#[test]
fn the_recorded_card_offers_free_running_only() {
    let mut r = up(EmuConfig::default());
    // sq_ts_format / rq_ts_format: cmd_hca_cap dword 0x88 bits 31:30, 29:28.
    assert_eq!(cap(&mut r, 1, 0x88, 31, 30), 0);
    assert_eq!(cap(&mut r, 1, 0x88, 29, 28), 0);
    // roce_cap.qp_ts_format: dword 0 bits 1:0 (RoCE caps, type 4, current).
    assert_eq!(cap(&mut r, (4 << 1) | 1, 0, 1, 0), 0);
    let uar = r.alloc_uar();
    let pd = r.alloc_pd();
    let (eqn, _) = r.create_eq(4, uar, 1);
    let (cqn, _, _) = r.create_cq(6, uar, eqn);
    let mut m = r.qp_input(0, pd, uar, cqn);
    for bad in [1, 2, 3] {
        set_qp_ts(&mut m, bad);
        assert_eq!(r.fails(&m, 16, 0x3), syn::QP_TS_FORMAT, "ts_format {bad}");
    }
    set_qp_ts(&mut m, 0);
    r.create(&m);
}

#[test]
fn a_real_time_clock_device_refuses_free_running() {
    let cfg = EmuConfig::default().real_time_clock();
    assert_eq!(cfg.ts_format_caps, TsFormatCaps::RealTime);
    let mut r = up(cfg);
    for op_mod in [0, 1] {
        assert_eq!(cap(&mut r, op_mod, 0x88, 31, 30), 1);
        assert_eq!(cap(&mut r, op_mod, 0x88, 29, 28), 1);
        assert_eq!(cap(&mut r, (4 << 1) | op_mod, 0, 1, 0), 1);
    }
    let uar = r.alloc_uar();
    let pd = r.alloc_pd();
    let (eqn, _) = r.create_eq(4, uar, 1);
    let (cqn, _, _) = r.create_cq(6, uar, eqn);
    // QP: 0 (what the old driver sent) and 3 refused; 1 and 2 taken.
    let mut m = r.qp_input(0, pd, uar, cqn);
    for bad in [0, 3] {
        set_qp_ts(&mut m, bad);
        assert_eq!(r.fails(&m, 16, 0x3), syn::QP_TS_FORMAT, "ts_format {bad}");
    }
    for good in [1, 2] {
        let mut m = r.qp_input(0, pd, uar, cqn);
        set_qp_ts(&mut m, good);
        r.create(&m);
    }
    // SQ and RQ: sqc/rqc at 0x20, ts_format at dword 0 bits 5:4.
    let td = r.create(&inp(0x816, 0, 16));
    let mut tis = inp(0x912, 0, 0xc0);
    setf(&mut tis, 0x20 + 0x24, 23, 0, u64::from(td));
    let tisn = r.create(&tis);
    for opcode in [0x904u16, 0x908] {
        let buf = r.dma(4096);
        let dbr = r.dma(64);
        let mut m = inp(opcode, 0, 0x118);
        setf(&mut m, 0x20 + 0x08, 23, 0, u64::from(cqn));
        setf(&mut m, 0x20 + 0x2c, 23, 0, u64::from(tisn));
        setf(&mut m, 0x50, 31, 28, 1);
        setf(&mut m, 0x50 + 0x08, 23, 0, u64::from(pd));
        setf(&mut m, 0x50 + 0x0c, 23, 0, u64::from(uar));
        put64(&mut m, 0x50 + 0x10, dbr);
        setf(&mut m, 0x50 + 0x20, 19, 16, 6);
        setf(&mut m, 0x50 + 0x20, 4, 0, 6);
        put64(&mut m, 0x110, buf);
        if opcode == 0x908 {
            // An RQ has no TIS.
            setf(&mut m, 0x20 + 0x2c, 23, 0, 0);
        }
        assert_eq!(r.fails(&m, 16, 0x3), syn::WQ_TS_FORMAT, "{opcode:#x}");
        setf(&mut m, 0x20, 5, 4, 1);
        r.create(&m);
    }
}

#[test]
fn a_device_with_both_formats_takes_all_three() {
    let mut r = up(EmuConfig {
        ts_format_caps: TsFormatCaps::FreeRunningAndRealTime,
        ..EmuConfig::default()
    });
    let uar = r.alloc_uar();
    let pd = r.alloc_pd();
    let (eqn, _) = r.create_eq(4, uar, 1);
    let (cqn, _, _) = r.create_cq(6, uar, eqn);
    for good in [0, 1, 2] {
        let mut m = r.qp_input(0, pd, uar, cqn);
        set_qp_ts(&mut m, good);
        r.create(&m);
    }
    let mut m = r.qp_input(0, pd, uar, cqn);
    set_qp_ts(&mut m, 3);
    assert_eq!(r.fails(&m, 16, 0x3), syn::QP_TS_FORMAT);
}
