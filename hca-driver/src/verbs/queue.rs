//! What CQs, QPs and SRQs share: creating the firmware object over the
//! queue's DMA region, giving the region back after a failure or a
//! destroy, and the service call their waits make.

use firmware_cmds::layout::Layout;
use platform::{DmaRegion, Platform};

use crate::error::{Error, Result};
use crate::hca::{DmaUse, Hca};
use crate::pas::{PAS_PAGE_SIZE, PageList};

/// Runs the command that creates a queue over `region`, whose first
/// `ring_bytes` are the ring, given as 4 KiB pages. An `input` that could
/// not be built frees the region; a failed `create` releases it as
/// [`release_after_failure`] says. On success the region comes back with
/// the object.
pub(crate) fn create_on_region<P: Platform, I: Layout, O>(
    hca: &Hca<P>,
    region: DmaRegion,
    ring_bytes: usize,
    input: Result<I>,
    create: impl FnOnce(&PageList<'_, I>) -> Result<O>,
) -> Result<(O, DmaRegion)> {
    let input = match input {
        Ok(i) => i,
        Err(e) => {
            hca.dma_free(region, DmaUse::Queues);
            return Err(e);
        }
    };
    match create_at(region.iova(), ring_bytes, &input, create) {
        Ok(o) => Ok((o, region)),
        Err(e) => {
            release_after_failure(hca, region, &e);
            Err(e)
        }
    }
}

/// Runs the command that creates a queue whose ring is the `ring_bytes`
/// at bus address `iova`, given as contiguous 4 KiB pages.
pub(crate) fn create_at<I: Layout, O>(
    iova: u64,
    ring_bytes: usize,
    input: &I,
    create: impl FnOnce(&PageList<'_, I>) -> Result<O>,
) -> Result<O> {
    let pages = ring_bytes.div_ceil(PAS_PAGE_SIZE);
    create(&PageList::contiguous(input, iova, PAS_PAGE_SIZE, pages))
}

/// Frees a queue's region after a failed creation: at once if the device
/// never took it, else kept until the device is quiesced.
pub(crate) fn release_after_failure<P: Platform>(hca: &Hca<P>, r: DmaRegion, e: &Error) {
    match e {
        Error::Command(_) | Error::Delivery { .. } | Error::InvalidArgument { .. } => {
            hca.dma_free(r, DmaUse::Queues)
        }
        _ => hca.retire(r, DmaUse::Queues),
    }
}

/// Gives a queue's region back once its firmware object is gone: freed
/// when the destroy command succeeded, else kept until the device is
/// quiesced (it may still write the region).
pub(crate) fn release_after_destroy<P: Platform>(hca: &Hca<P>, r: DmaRegion, destroyed: bool) {
    if destroyed {
        hca.dma_free(r, DmaUse::Queues)
    } else {
        hca.retire(r, DmaUse::Queues)
    }
}

/// Destroys a firmware object whose memory is `region` after a failed
/// setup and releases the region ([`release_after_destroy`]); returns `e`.
pub(crate) fn destroy_and_free<P: Platform, H: crate::fw::HcaRef, K: crate::fw::FwObject>(
    hca: &Hca<P>,
    obj: crate::fw::Object<H, K>,
    region: DmaRegion,
    e: Error,
) -> Error {
    let destroyed = obj.destroy();
    if let Err(d) = &destroyed {
        log::error!("destroying after a failed setup: {d}");
    }
    release_after_destroy(hca, region, destroyed.is_ok());
    e
}

/// [`Hca::service`], tolerating invalid event queue entries (they are
/// queued as [`AsyncEvent::InvalidEqe`](crate::AsyncEvent) and logged): an
/// event for a queue destroyed meanwhile must not fail a wait.
pub(crate) fn service<P: Platform>(hca: &Hca<P>) -> Result<()> {
    match hca.service() {
        Ok(_) | Err(Error::InvalidEqe { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}
