//! Memory regions over the program's own memory (`ibv_reg_mr` on user
//! memory, issue 14): a `Vec` registered in place, written by a peer's
//! RDMA WRITE, read by its RDMA READ, received into and sent from,
//! zero-copy (the bytes are seen in the `Vec` itself); a start and a
//! length that are not page aligned; an IOVA other than the address;
//! access violations and deregistered keys refused by the device; pages
//! not mapped in the process refused when mapped; the
//! emulated IOMMU's view; a platform that cannot map user memory.

use std::ptr::NonNull;
use std::sync::Arc;

use hca_driver::verbs::{
    AccessFlags, Context, DmaBuf, Mr, Pd, Qp, SendFlags, SendOp, SendWr, WcOpcode, WcStatus,
};
use hca_driver::{Config, Error, Hca};
use hca_emu::{EmuConfig, EmuHca};
use hca_tests::verbs::{RcParams, poll_n, poll_ok, post_recv_sge, qp_cap};
use hca_tests::{Link, Minimal, TestPlatform};
use platform::{Platform, UserMemory};

/// `n` bytes at `p + off`, read as a device would see them (volatile
/// loads through the raw pointer: no reference into registered memory).
fn peek(p: *const u8, off: usize, n: usize) -> Vec<u8> {
    (0..n)
        // SAFETY: every caller passes a pointer into a live `Vec` with
        // `off + n` inside it.
        .map(|i| unsafe { p.add(off + i).read_volatile() })
        .collect()
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

/// `len` bytes at `p` as user memory.
fn user(p: *mut u8, len: usize) -> UserMemory {
    // SAFETY: every caller keeps the `Vec` behind `p` alive, and reaches
    // it only through raw pointers, until the regions over it are
    // deregistered.
    unsafe { UserMemory::new(NonNull::new(p).unwrap(), len) }.unwrap()
}

fn rc_params() -> RcParams {
    RcParams {
        access: AccessFlags::ALL,
        ..RcParams::default()
    }
}

fn vec_written_read_and_messaged_in_place<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    // Side B's memory: a Vec; the region starts 123 bytes in (not page
    // aligned) and is 2 pages + 517 bytes long.
    let mut v = vec![0u8; 3 * 4096 + 1000];
    let base = v.as_mut_ptr();
    let start = base.wrapping_add(123);
    let len = 2 * 4096 + 517;
    let written = pattern(3000, 0x5a);
    {
        let s = h.sides(32);
        let ba = Arc::new(DmaBuf::alloc(&h.a, 8192).unwrap());
        let ma = Mr::register(&s.pda, &ba, AccessFlags::ALL).unwrap();
        let mb =
            Mr::register_user(&s.pdb, user(start, len), start as u64, AccessFlags::ALL).unwrap();
        assert_eq!((mb.addr(), mb.len()), (start as u64, len));
        assert!(mb.buf().is_none());
        let m = mb.user_mapping().expect("a user region has its mapping");
        assert!(m.covers(start as usize, len));
        assert_eq!(s.pdb.mr_count(), 1);
        let (mut qa, mut qb, _, eb) = s.rc_pair(
            (pa, pb),
            (qp_cap(16, 16, 1, 0), qp_cap(16, 16, 1, 0)),
            (mb.addr(), mb.rkey()),
            &rc_params(),
        );

        // RDMA WRITE of 3000 bytes across a page boundary of the Vec.
        ba.write(0, &written).unwrap();
        let sgl = [ma.sge(0, 3000).unwrap()];
        let wr = SendWr::new(
            1,
            SendOp::RdmaWrite {
                remote_addr: eb.addr + 4000,
                rkey: eb.rkey.0,
            },
        )
        .sgl(&sgl)
        .flags(SendFlags::SIGNALED);
        qa.post_send(&wr).unwrap();
        assert_eq!(poll_ok(&s.cqa).opcode, WcOpcode::RdmaWrite);
        assert_eq!(
            peek(start, 4000, 3000),
            written,
            "the write lands in the Vec"
        );
        assert_eq!(peek(start, 3999, 1), [0], "nothing before it");
        assert_eq!(peek(start, 7000, 1), [0], "nothing after it");

        // A SEND received into the Vec.
        post_recv_sge(&mut qb, 7, mb.sge(100, 200).unwrap());
        ba.write(4096, b"through user memory").unwrap();
        qa.post_send(
            &SendWr::new(2, SendOp::Send)
                .sgl(&[ma.sge(4096, 19).unwrap()])
                .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        let wc = poll_ok(&s.cqb);
        assert_eq!((wc.wr_id, wc.opcode, wc.byte_len), (7, WcOpcode::Recv, 19));
        assert_eq!(peek(start, 100, 19), b"through user memory");
        poll_ok(&s.cqa);

        // A SEND gathered from the Vec (the bytes the write put there).
        post_recv_sge(&mut qa, 8, ma.sge(4096, 512).unwrap());
        qb.post_send(
            &SendWr::new(3, SendOp::Send)
                .sgl(&[mb.sge(4000, 300).unwrap()])
                .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        assert_eq!(poll_ok(&s.cqb).wr_id, 3);
        assert_eq!(poll_ok(&s.cqa).byte_len, 300);
        let mut got = vec![0u8; 300];
        ba.read(4096, &mut got).unwrap();
        assert_eq!(got, written[..300]);

        // An RDMA READ of the Vec's last bytes (the region's end).
        qa.post_send(
            &SendWr::new(
                4,
                SendOp::RdmaRead {
                    remote_addr: eb.addr + len as u64 - 64,
                    rkey: eb.rkey.0,
                },
            )
            .sgl(&[ma.sge(0, 64).unwrap()])
            .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        assert_eq!(poll_ok(&s.cqa).opcode, WcOpcode::RdmaRead);
        let mut got = [0u8; 64];
        ba.read(0, &mut got).unwrap();
        assert_eq!(got.to_vec(), peek(start, len - 64, 64));

        // A second region over the same bytes known by another IOVA
        // (ibv_reg_mr_iova2): same offset inside a page as the address.
        let iova = 0x5a00_0000_0000u64 | (start as u64 & 0xfff);
        let m2 = Mr::register_user(
            &s.pdb,
            user(start, 1000),
            iova,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
        assert_eq!(m2.addr(), iova);
        ba.write(0, b"by another name").unwrap();
        qa.post_send(
            &SendWr::new(
                5,
                SendOp::RdmaWrite {
                    remote_addr: iova + 10,
                    rkey: m2.rkey().0,
                },
            )
            .sgl(&[ma.sge(0, 15).unwrap()])
            .flags(SendFlags::SIGNALED),
        )
        .unwrap();
        poll_ok(&s.cqa);
        assert_eq!(peek(start, 10, 15), b"by another name");

        // An IOVA whose offset inside a page differs: refused (EINVAL).
        let e = Mr::register_user(&s.pdb, user(start, 100), iova + 1, AccessFlags::LOCAL_WRITE)
            .unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { arg: "iova", .. }),
            "{e}"
        );
        // Remote write without local write: refused like libibverbs.
        let e = Mr::register_user(
            &s.pdb,
            user(start, 100),
            start as u64,
            AccessFlags::REMOTE_WRITE,
        )
        .unwrap_err();
        assert!(
            matches!(e, Error::InvalidAttribute { attr: "access", .. }),
            "{e}"
        );
        assert_eq!(s.pdb.mr_count(), 2);

        // A PD with live regions cannot go.
        let e = Pd::try_destroy(s.pdb.clone()).unwrap_err();
        assert!(matches!(e, Error::InUse { .. }), "{e}");
        drop((qa, qb));
        m2.destroy().unwrap();
        mb.destroy().unwrap();
        assert_eq!(s.pdb.mr_count(), 0);
        drop(ma);
    }
    l.close(h);
    // The memory is the caller's again: the Vec holds what the device put
    // there.
    assert_eq!(&v[123 + 4000..123 + 7000], &written[..]);
    assert_eq!(&v[123 + 100..123 + 119], b"through user memory");
    assert_eq!(&v[123 + 10..123 + 25], b"by another name");
}

fn violations_and_deregistered_keys_are_refused<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    let mut v = vec![0u8; 2 * 4096];
    let start = v.as_mut_ptr().wrapping_add(64);
    {
        let s = h.sides(32);
        let ba = Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap());
        let ma = Mr::register(&s.pda, &ba, AccessFlags::ALL).unwrap();
        ba.write(0, &[0xee; 64]).unwrap();
        let write = |qa: &mut Qp<P>, addr: u64, rkey: u32| {
            qa.post_send(
                &SendWr::new(
                    9,
                    SendOp::RdmaWrite {
                        remote_addr: addr,
                        rkey,
                    },
                )
                .sgl(&[ma.sge(0, 64).unwrap()])
                .flags(SendFlags::SIGNALED),
            )
            .unwrap();
            poll_n(&s.cqa, 1)[0]
        };

        // Local write only: a peer's RDMA WRITE is a remote access error.
        let ro = Mr::register_user(
            &s.pdb,
            user(start, 4096),
            start as u64,
            AccessFlags::LOCAL_WRITE,
        )
        .unwrap();
        let (mut qa, qb, ..) = s.rc_pair(
            (pa, pb),
            (qp_cap(4, 4, 1, 0), qp_cap(4, 4, 1, 0)),
            (0, hca_driver::Rkey(0)),
            &rc_params(),
        );
        let wc = write(&mut qa, ro.addr(), ro.rkey().0);
        assert_eq!(wc.status, WcStatus::RemAccessErr, "{wc:?}");
        assert_eq!(peek(start, 0, 64), [0u8; 64]);
        drop((qa, qb));
        ro.destroy().unwrap();

        // A deregistered key: the same error, and the memory untouched
        // (the key is gone from the device and the pages from the IOMMU).
        let rw =
            Mr::register_user(&s.pdb, user(start, 4096), start as u64, AccessFlags::ALL).unwrap();
        let (addr, rkey) = (rw.addr(), rw.rkey().0);
        rw.destroy().unwrap();
        let (mut qa, qb, ..) = s.rc_pair(
            (pa, pb),
            (qp_cap(4, 4, 1, 0), qp_cap(4, 4, 1, 0)),
            (0, hca_driver::Rkey(0)),
            &rc_params(),
        );
        let wc = write(&mut qa, addr, rkey);
        assert_eq!(wc.status, WcStatus::RemAccessErr, "{wc:?}");
        assert_eq!(peek(start, 0, 64), [0u8; 64]);
        drop((qa, qb, ma));
    }
    l.close(h);
    assert!(v.iter().all(|&b| b == 0));
}

/// `ibv_rereg_mr`: access flags, translation (other user memory) and PD
/// changed; new keys each time, the data where the latest translation
/// says.
fn rereg_changes_access_memory_and_pd<P: TestPlatform>(l: &mut Link<P>) {
    let (pa, pb) = (l.port_a, l.port_b);
    let h = l.open();
    let mut v1 = vec![0u8; 4096];
    let mut v2 = vec![0u8; 4096];
    let (p1, p2) = (v1.as_mut_ptr(), v2.as_mut_ptr());
    {
        let s = h.sides(32);
        let ba = Arc::new(DmaBuf::alloc(&h.a, 4096).unwrap());
        let ma = Mr::register(&s.pda, &ba, AccessFlags::ALL).unwrap();
        let mut mb =
            Mr::register_user(&s.pdb, user(p1, 4096), p1 as u64, AccessFlags::LOCAL_WRITE).unwrap();
        let (mut qa, qb, ..) = s.rc_pair(
            (pa, pb),
            (qp_cap(8, 8, 1, 0), qp_cap(8, 8, 1, 0)),
            (0, hca_driver::Rkey(0)),
            &rc_params(),
        );
        let write = |qa: &mut Qp<P>, addr: u64, rkey: u32, what: &[u8]| {
            ba.write(0, what).unwrap();
            qa.post_send(
                &SendWr::new(
                    1,
                    SendOp::RdmaWrite {
                        remote_addr: addr,
                        rkey,
                    },
                )
                .sgl(&[ma.sge(0, what.len() as u32).unwrap()])
                .flags(SendFlags::SIGNALED),
            )
            .unwrap();
            poll_n(&s.cqa, 1)[0]
        };

        // A PD of another context: refused, nothing changes.
        let k0 = mb.rkey();
        let e = mb.rereg(Some(s.pda.clone()), None).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { arg: "pd", .. }), "{e}");
        assert_eq!(mb.rkey(), k0);

        // Access: remote write added; a new key.
        mb.rereg(None, Some(AccessFlags::ALL)).unwrap();
        assert_ne!(mb.rkey(), k0);
        assert_eq!(mb.access(), AccessFlags::ALL);
        assert_eq!(s.pdb.mr_count(), 1);
        let wc = write(&mut qa, p1 as u64 + 8, mb.rkey().0, b"first");
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        assert_eq!(peek(p1, 8, 5), b"first");

        // Translation: the second Vec, known by its address.
        let k1 = mb.rkey();
        mb.rereg_user(user(p2, 4096), p2 as u64).unwrap();
        assert_ne!(mb.rkey(), k1);
        assert_eq!(mb.addr(), p2 as u64);
        let wc = write(&mut qa, p2 as u64 + 8, mb.rkey().0, b"second");
        assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
        assert_eq!(peek(p2, 8, 6), b"second");
        assert_eq!(peek(p1, 8, 6), b"first\0", "the first Vec is left alone");

        // PD: another PD of side B's context; the key leaves the first
        // PD's table, and B's QP (in the first PD) cannot use it: the
        // peer's write is a remote access error.
        let pdb2 = Arc::new(Pd::alloc(&s.cb).unwrap());
        mb.rereg(Some(pdb2.clone()), None).unwrap();
        assert_eq!((s.pdb.mr_count(), pdb2.mr_count()), (0, 1));
        let wc = write(&mut qa, p2 as u64 + 8, mb.rkey().0, b"third!");
        assert_eq!(wc.status, WcStatus::RemAccessErr, "{wc:?}");
        assert_eq!(peek(p2, 8, 6), b"second");
        drop((qa, qb));
        mb.destroy().unwrap();
        assert_eq!(pdb2.mr_count(), 0);
        drop(ma);
    }
    l.close(h);
    assert_eq!(&v1[8..13], b"first");
    assert_eq!(&v2[8..14], b"second");
}

/// Pages not mapped in the process: refused when mapped for DMA, by
/// `VFIO_IOMMU_MAP_DMA` (`EFAULT`) through `platform::vfio`, and by the
/// emulated platform's check of the page tables, as `UserMemoryFault`.
fn unmapped_pages_are_a_typed_error<P: TestPlatform>(l: &mut Link<P>) {
    let h = l.open();
    {
        let ctx = Arc::new(Context::open(&h.a).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        // Below `vm.mmap_min_addr` (64 KiB by default): never mapped.
        let nowhere = NonNull::new(std::ptr::without_provenance_mut::<u8>(0x1000)).unwrap();
        // SAFETY: the range is not mapped, which is what the test is
        // about: the platform refuses to map it, so nothing ever accesses
        // it.
        let mem = unsafe { UserMemory::new(nowhere, 8192) }.unwrap();
        let e = Mr::register_user(&pd, mem, 0x1000, AccessFlags::LOCAL_WRITE).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Platform {
                    source: platform::Error::UserMemoryFault {
                        host: 0x1000,
                        len: 8192,
                        ..
                    },
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(pd.mr_count(), 0);
    }
    l.close(h);
}

hca_tests::link_scenarios!(
    vec_written_read_and_messaged_in_place,
    unmapped_pages_are_a_typed_error,
    violations_and_deregistered_keys_are_refused,
    rereg_changes_access_memory_and_pd,
);

/// The emulated IOMMU's view: the pages are mapped (the device reads the
/// very bytes of the Vec) until the unmap, after which the IOVA is not
/// mapped (a device access faults) and the mapping cannot be unmapped
/// twice.
#[test]
fn emulated_iommu_maps_and_unmaps_the_pages() {
    let emu = EmuHca::new(EmuConfig::default());
    let p = emu.platform();
    let mut v = vec![0u8; 8192];
    let start = v.as_mut_ptr().wrapping_add(100);
    let m = p.map_user(user(start, 5000)).unwrap();
    assert_eq!(m.len() % 4096, 0);
    assert!(m.covers(start as usize, 5000));
    let iova = m.iova_of(start as usize).unwrap();
    assert_eq!(iova % 4096, start as u64 % 4096);
    // SAFETY: inside the Vec.
    unsafe { start.write_volatile(0x42) };
    let mut b = [0u8; 1];
    assert!(emu.peek_dma(iova, &mut b));
    assert_eq!(b, [0x42]);
    assert!(emu.dma_windows().iter().any(|w| w.0 == m.iova()));
    let (host, len, miova) = (m.host_addr(), m.len(), m.iova());
    p.unmap_user(m).unwrap();
    assert!(
        !emu.peek_dma(iova, &mut b),
        "unmapped: the device cannot reach it"
    );
    assert!(emu.dma_windows().is_empty());
    let again = platform::UserMapping::new(host, len, miova, 0).unwrap();
    let e = p.unmap_user(again).unwrap_err();
    assert!(
        matches!(e, platform::Error::ForeignUserMapping { .. }),
        "{e}"
    );
    emu.assert_clean();
    drop(v);
}

#[test]
fn a_platform_without_user_mappings_refuses_with_a_typed_error() {
    hca_tests::init_logging();
    let emu = EmuHca::new(EmuConfig::default());
    let hca = Arc::new(
        Hca::open(
            // What a platform that cannot map user memory looks like.
            Minimal(emu.platform(), "emulated ConnectX-4 without user memory"),
            Config::default(),
        )
        .map_err(|f| f.error)
        .unwrap(),
    );
    {
        let ctx = Arc::new(Context::open(&hca).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let mut v = vec![0u8; 4096];
        let e = Mr::register_user(
            &pd,
            user(v.as_mut_ptr(), 4096),
            v.as_ptr() as u64,
            AccessFlags::LOCAL_WRITE,
        )
        .unwrap_err();
        assert!(
            matches!(
                e,
                Error::Platform {
                    source: platform::Error::NotSupported(_),
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(pd.mr_count(), 0);
        drop(v);
    }
    Arc::try_unwrap(hca)
        .unwrap()
        .close()
        .map_err(|f| f.error)
        .unwrap();
    emu.assert_clean();
}
