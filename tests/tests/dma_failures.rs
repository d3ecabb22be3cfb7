//! DMA allocations failing (`Platform::alloc_dma` out of memory) at every
//! point of bring-up and of resource creation: a typed error naming what
//! the driver was allocating, a clean unwind, nothing leaked (no DMA
//! region, no firmware page, no firmware object), and the device usable
//! afterwards.

use hca_driver::verbs::{AccessFlags, QpInitAttr, QpType, SrqInitAttr};
use hca_driver::verbs::{Context, Cq, DmaBuf, Mr, Pd, Qp, Srq};
use hca_driver::{Config, Error, Hca};
use hca_emu::{DmaFailure, EmuConfig, EmuHca, EmuPlatform, ObjKind};
use hca_tests::{Bench, page_request};
use std::sync::Arc;

fn bench() -> Bench<EmuPlatform> {
    Bench::emulated(EmuConfig::default(), Config::default())
}

fn allocs(emu: &EmuHca) -> u64 {
    emu.dma_allocations().0
}

/// The error of a failed allocation: the platform's out-of-memory error,
/// with what the driver was doing.
#[track_caller]
fn assert_out_of_memory(e: &Error) {
    match e {
        Error::Platform {
            what,
            source: platform::Error::OutOfDmaMemory { .. },
        } => assert!(!what.is_empty()),
        other => panic!("not an allocation failure: {other}"),
    }
    assert!(e.to_string().contains("out of DMA memory"), "{e}");
}

/// Live objects of the kinds resources create.
fn objects(emu: &EmuHca) -> Vec<(ObjKind, usize)> {
    [
        ObjKind::Uar,
        ObjKind::Pd,
        ObjKind::Mkey,
        ObjKind::Eq,
        ObjKind::Cq,
        ObjKind::Qp,
        ObjKind::Srq,
    ]
    .into_iter()
    .map(|k| (k, emu.objects(k).len()))
    .collect()
}

#[test]
fn every_bring_up_allocation_failing_is_named_and_unwound() {
    let clean = {
        let mut b = bench();
        let hca = b.open();
        let n = allocs(b.emu().unwrap());
        b.close(hca);
        b.assert_clean();
        n
    };
    assert!(
        clean >= 5,
        "bring-up allocates the queue, mailboxes, pages, EQs"
    );
    for k in 0..clean {
        for rule in [DmaFailure::Nth(k as u32), DmaFailure::After(k as u32)] {
            let mut b = bench();
            b.emu().unwrap().faults().fail_dma(rule);
            let e = match b.try_open() {
                Ok(_) => panic!("bring-up succeeded with {rule:?}"),
                Err(e) => e,
            };
            let emu = b.emu().unwrap();
            assert_out_of_memory(&e);
            assert!(emu.dma_allocations().1 >= 1, "{rule:?}");
            assert!(
                emu.iommu_faults().is_empty(),
                "{rule:?}: {:?}",
                emu.iommu_faults()
            );
            assert!(
                emu.leak_report().is_clean(),
                "{rule:?} ({e}): {:?}",
                emu.leak_report()
            );
            // The device comes up once memory is there again.
            emu.faults().fail_dma(DmaFailure::None);
            let hca = b.open();
            b.close(hca);
            b.assert_clean();
        }
    }
}

/// Runs `create` with the `k`-th allocation it makes failing, for every
/// `k`, on one open HCA: each failure is a typed allocation error, the
/// driver's DMA accounting and the firmware's objects are back where they
/// were, and creating it without the fault still works.
fn each_allocation_of<F>(hca: &Arc<Hca<EmuPlatform>>, emu: &EmuHca, what: &str, create: F)
where
    F: Fn(&Arc<Hca<EmuPlatform>>) -> Result<(), Error>,
{
    let before = allocs(emu);
    create(hca).unwrap_or_else(|e| panic!("{what}: {e}"));
    let n = allocs(emu) - before;
    assert!(n >= 1, "{what} allocates DMA memory");
    for k in 0..n {
        let (usage, objs) = (hca.dma_usage().total(), objects(emu));
        emu.faults().fail_dma(DmaFailure::Nth(k as u32));
        let e = create(hca).expect_err(what);
        assert_out_of_memory(&e);
        emu.faults().fail_dma(DmaFailure::None);
        assert_eq!(
            hca.dma_usage().total(),
            usage,
            "{what}, allocation {k}: {e}"
        );
        assert_eq!(objects(emu), objs, "{what}, allocation {k}: {e}");
        assert!(emu.iommu_faults().is_empty());
    }
    create(hca).unwrap();
}

#[test]
fn resource_creation_with_failing_allocations_unwinds() {
    bench().with_open(|hca, emu| {
        let ctx = Arc::new(Context::open(hca).unwrap());
        let pd = Arc::new(Pd::alloc(&ctx).unwrap());
        let cq = Arc::new(Cq::create(&ctx, 64).unwrap());
        let srq = Arc::new(Srq::create(&pd, &SrqInitAttr::new(64, 1)).unwrap());
        each_allocation_of(hca, emu, "alloc_buf", |h| {
            DmaBuf::alloc(h, 3 * 4096).map(drop)
        });
        each_allocation_of(hca, emu, "create_cq", |_| Cq::create(&ctx, 256).map(drop));
        each_allocation_of(hca, emu, "create_srq", |_| {
            Srq::create(&pd, &SrqInitAttr::new(256, 2)).map(drop)
        });
        each_allocation_of(hca, emu, "create_qp", |_| {
            Qp::create(&pd, &QpInitAttr::new(QpType::Rc, &cq, &cq)).map(drop)
        });
        each_allocation_of(hca, emu, "create_qp on an SRQ", |_| {
            Qp::create(&pd, &QpInitAttr::new(QpType::Ud, &cq, &cq).srq(&srq)).map(drop)
        });
        // A memory region needs no DMA memory of its own: registering one
        // while every allocation fails works.
        let buf = Arc::new(DmaBuf::alloc(hca, 4096).unwrap());
        emu.faults().fail_dma(DmaFailure::After(0));
        Mr::register(&pd, &buf, AccessFlags::LOCAL_WRITE).unwrap();
        emu.faults().fail_dma(DmaFailure::None);
    });
}

#[test]
fn a_page_request_that_cannot_be_allocated_is_refused_cleanly() {
    // A runtime page request of 1024 pages: the pages, and mailboxes for
    // the 8 KiB of page addresses of MANAGE_PAGES (the pool grows). Each
    // allocation failing: the driver answers MANAGE_PAGES op_mod 0
    // (allocation failed, as Linux does), reports the error, frees what it
    // had allocated, and serves the next request.
    bench().with_open(|hca, emu| {
        let pages = |emu: &EmuHca| emu.firmware_pages();
        let give = |emu: &EmuHca| page_request(emu, hca, 1024);
        let before = allocs(emu);
        let held = pages(emu);
        give(emu).unwrap();
        assert_eq!(pages(emu), held + 1024);
        let n = allocs(emu) - before;
        // Take them back so that the next request allocates again.
        page_request(emu, hca, -1024).unwrap();
        assert_eq!(pages(emu), held);
        for k in 0..n {
            let usage = hca.dma_usage();
            let refused = |emu: &EmuHca| {
                emu.command_log()
                    .iter()
                    .filter(|c| c.opcode == 0x108 && c.op_mod == 0)
                    .count()
            };
            let r0 = refused(emu);
            emu.faults().fail_dma(DmaFailure::Nth(k as u32));
            let e = give(emu).unwrap_err();
            emu.faults().fail_dma(DmaFailure::None);
            assert_out_of_memory(&e);
            assert_eq!(
                refused(emu),
                r0 + 1,
                "allocation {k}: MANAGE_PAGES op_mod 0"
            );
            assert_eq!(pages(emu), held, "allocation {k}");
            assert_eq!(
                hca.dma_usage().firmware_pages,
                usage.firmware_pages,
                "allocation {k}"
            );
            assert!(emu.iommu_faults().is_empty());
        }
        give(emu).unwrap();
        assert_eq!(pages(emu), held + 1024);
    });
}
