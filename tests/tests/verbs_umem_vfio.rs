//! User memory through `platform::vfio` only: pages that are not mapped
//! in the process are refused by `VFIO_IOMMU_MAP_DMA` (`EFAULT`), which
//! the platform reports as `UserMemoryFault`. (The emulated platform
//! cannot tell mapped from unmapped host memory, so this has no emulated
//! variant; it runs with `HCA_PCI`, e.g. in the `vfio_hca` peer suite
//! against emulated functions behind the real VFIO API.)

use std::ptr::NonNull;
use std::sync::Arc;

use hca_driver::Error;
use hca_driver::verbs::{AccessFlags, Context, Mr, Pd};
use hca_tests::{Link, TestPlatform};
use platform::UserMemory;

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

mod hardware {
    #[test]
    #[cfg_attr(
        not(hca_hardware),
        ignore = "needs VFIO: HCA_PCI=<bdf> cargo test -p hca-tests (or tests/peers/run.sh vfio_hca)"
    )]
    fn unmapped_pages_are_a_typed_error() {
        hca_tests::run_hardware_link(
            "unmapped_pages_are_a_typed_error",
            super::unmapped_pages_are_a_typed_error::<platform::vfio::VfioPlatform>,
        );
    }
}
