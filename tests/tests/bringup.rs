//! Bring-up and teardown, on the emulator and on hardware.

use hca_tests::{Bench, TestPlatform};

fn open_close_repeatedly<P: TestPlatform>(b: &mut Bench<P>) {
    for _ in 0..3 {
        let hca = b.open();
        assert!(hca.dead_reason().is_none());
        b.close(hca);
        assert_eq!(b.dma_allocated(), 0);
    }
}

hca_tests::scenarios!(open_close_repeatedly);
