//! Firmware pages: QUERY_PAGES and MANAGE_PAGES at bring-up, on page
//! request events at runtime (positive: give, negative: take back), and the
//! full reclaim at teardown.
//!
//! The page manager's lock is held for the whole of a give or take,
//! MANAGE_PAGES included: page work is serialized, and a command wait that
//! services page requests (event mode) only tries the lock.

use core::sync::atomic::Ordering;
use core::time::Duration;

use firmware_cmds::hca::{
    FW_PAGE_SIZE, MANAGE_PAGES_OP_MOD_ALLOCATION_FAIL, MANAGE_PAGES_OP_MOD_ALLOCATION_SUCCESS,
    MANAGE_PAGES_OP_MOD_HCA_RETURN_PAGES, ManagePagesIn, ManagePagesOut, QueryPagesIn,
};
use platform::{DmaRegion, Platform};

use crate::Output;
use crate::deadline::Deadline;
use crate::error::{Error, Result, Wait};
use crate::hca::{DmaUse, Hca};
use crate::pages::{CHUNK_MAX_PAGES, GiveMessage, MAX_PAGE_CHUNKS, PageBook, run_pages};

/// Most pages one request (QUERY_PAGES answer or page request event) may
/// name before it is an invalid device answer (2^24 pages: 64 GiB).
pub const MAX_PAGE_REQUEST: u32 = 1 << 24;

/// Counters of the page manager.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageStats {
    /// Pages the firmware holds (or may hold, see `uncertain`).
    pub held: u64,
    /// Pages of gives whose outcome is unknown (timed out).
    pub uncertain: u64,
    /// Pages given since open.
    pub given: u64,
    /// Pages returned since open.
    pub returned: u64,
    /// Page requests refused for lack of memory (MANAGE_PAGES op_mod 0).
    pub refused_requests: u64,
}

/// The pages and their DMA chunks.
pub(crate) struct PageManager {
    pub(crate) book: PageBook,
    regions: [Option<DmaRegion>; MAX_PAGE_CHUNKS],
    given: u64,
    returned: u64,
    refused: u64,
}

impl PageManager {
    pub(crate) fn new() -> Self {
        Self {
            book: PageBook::new(),
            regions: [const { None }; MAX_PAGE_CHUNKS],
            given: 0,
            returned: 0,
            refused: 0,
        }
    }

    /// Whether the firmware holds (or may hold) any page.
    pub(crate) fn holds_pages(&self) -> bool {
        self.book.held() > 0
    }

    /// Hands every chunk to `free` (the device must be quiesced).
    pub(crate) fn drain(&mut self, free: &mut dyn FnMut(DmaRegion)) {
        for (i, r) in self.regions.iter_mut().enumerate() {
            if let Some(r) = r.take() {
                self.book.remove_chunk(i);
                free(r);
            }
        }
    }

    fn stats(&self) -> PageStats {
        PageStats {
            held: self.book.held(),
            uncertain: self.book.uncertain(),
            given: self.given,
            returned: self.returned,
            refused_requests: self.refused,
        }
    }
}

impl<P: Platform> Hca<P> {
    /// QUERY_PAGES: how many pages the firmware wants (op_mod boot, init
    /// or regular). A negative or excessive count is an invalid answer.
    pub(crate) fn query_pages(&self, op_mod: u16) -> Result<u32> {
        let q = QueryPagesIn::new().with(QueryPagesIn::op_mod, op_mod)?;
        let out = self.exec(&q)?;
        let n = out.num_pages_signed();
        if n < 0 || n as u32 > MAX_PAGE_REQUEST {
            return Err(Error::InvalidAnswer {
                opcode: firmware_cmds::Opcode::QUERY_PAGES,
                op_mod,
                field: "query_pages_out.num_pages",
                value: u64::from(n as u32),
                reason: "negative, or more than 64 GiB of pages",
            });
        }
        Ok(n as u32)
    }

    /// Gives `n` pages now (bring-up).
    pub(crate) fn give_pages_now(&self, n: u32) -> Result<()> {
        let mut pm = self.pages.lock();
        self.give_locked(&mut pm, n as usize)
    }

    /// Page counters.
    pub fn page_stats(&self) -> PageStats {
        self.pages.lock().stats()
    }

    fn grow_pages(&self, pm: &mut PageManager, need: usize) -> Result<()> {
        while pm.book.free_pages() < need {
            let slot = pm.book.free_slot().ok_or(Error::CapacityExceeded {
                what: "the firmware page chunk list",
                capacity: MAX_PAGE_CHUNKS,
            })?;
            let pages = (need - pm.book.free_pages())
                .clamp(usize::from(self.cfg.min_page_chunk), CHUNK_MAX_PAGES);
            let r = self.dma_alloc(
                pages * FW_PAGE_SIZE,
                FW_PAGE_SIZE,
                DmaUse::FirmwarePages,
                "allocating firmware pages",
            )?;
            let pages = (r.len() / FW_PAGE_SIZE).min(CHUNK_MAX_PAGES);
            pm.book.add_chunk(slot, r.iova(), pages);
            pm.regions[slot] = Some(r);
        }
        Ok(())
    }

    fn give_locked(&self, pm: &mut PageManager, n: usize) -> Result<()> {
        let budget = u64::from(self.cfg.max_firmware_pages);
        if pm.book.held() + n as u64 > budget {
            return Err(Error::CapacityExceeded {
                what: "the firmware page budget (Config::max_firmware_pages)",
                capacity: budget as usize,
            });
        }
        let mut remaining = n;
        while remaining > 0 {
            let batch = remaining.min(self.cfg.max_pages_per_command as usize);
            if let Err(e) = self.grow_pages(pm, batch) {
                // Chunks grown for this batch and never given go back.
                self.free_idle_page_chunks(pm);
                return Err(e);
            }
            let runs = pm.book.alloc(batch);
            let got = run_pages(&runs);
            let head = ManagePagesIn::new()
                .with(
                    ManagePagesIn::op_mod,
                    MANAGE_PAGES_OP_MOD_ALLOCATION_SUCCESS,
                )?
                .with(ManagePagesIn::input_num_entries, got as u32)?;
            let msg = GiveMessage {
                head,
                runs: &runs,
                book: &pm.book,
                count: got,
            };
            match self.exec_encoded::<ManagePagesOut, _>(&msg) {
                Ok(_) => {
                    pm.given += got as u64;
                    remaining -= got;
                }
                // Refused by the firmware (it did not take them), or not
                // posted at all (no mailboxes: the pool could not grow):
                // the pages are free again, and chunks with none given go
                // back to the platform.
                Err(
                    e @ (Error::Command(_)
                    | Error::Delivery { .. }
                    | Error::InvalidArgument { .. }
                    | Error::CapacityExceeded { .. }
                    | Error::Platform { .. }),
                ) => {
                    pm.book.release_runs(&runs);
                    self.free_idle_page_chunks(pm);
                    return Err(e);
                }
                // Timed out, or an answer that cannot be trusted: the
                // firmware may hold them.
                Err(e) => {
                    pm.book.mark_uncertain(got as u64);
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// MANAGE_PAGES take of up to `n` pages; returns how many came back.
    /// Every returned address is checked; chunks left without a page held
    /// go back to the platform.
    fn take_locked(&self, pm: &mut PageManager, n: usize) -> Result<u64> {
        let head = ManagePagesIn::new()
            .with(ManagePagesIn::op_mod, MANAGE_PAGES_OP_MOD_HCA_RETURN_PAGES)?
            .with(ManagePagesIn::input_num_entries, n as u32)?;
        let mut bad: Option<Error> = None;
        let mut count = 0u64;
        let book = &mut pm.book;
        let r = self.exec_read(&head, ManagePagesOut::SIZE + 8 * n, |o| {
            returned_pages(o, n, |addr| match book.take_back(addr) {
                Ok(()) => count += 1,
                Err(e) => {
                    log::error!("MANAGE_PAGES: returned page {addr:#x} {}", e.reason());
                    if bad.is_none() {
                        bad = Some(Error::BadReturnedPage {
                            addr,
                            reason: e.reason(),
                        });
                    }
                }
            })
        });
        pm.returned += count;
        self.free_idle_page_chunks(pm);
        r?;
        match bad {
            Some(e) => Err(e),
            None => Ok(count),
        }
    }

    fn free_idle_page_chunks(&self, pm: &mut PageManager) {
        let mut idle: heapless::Vec<usize, MAX_PAGE_CHUNKS> = heapless::Vec::new();
        for i in pm.book.idle_chunks() {
            let _ = idle.push(i);
        }
        for i in idle {
            pm.book.remove_chunk(i);
            if let Some(r) = pm.regions[i].take() {
                self.dma_free(r, DmaUse::FirmwarePages);
            }
        }
    }

    /// Takes every page back (teardown), until the firmware holds none.
    pub(crate) fn reclaim_all_pages(&self) -> Result<()> {
        let mut pm = self.pages.lock();
        let deadline = Deadline::start(self.p(), self.cfg.timeouts.page_reclaim);
        loop {
            let held = pm.book.held();
            if held == 0 {
                return Ok(());
            }
            let n = held.min(u64::from(self.cfg.max_pages_per_command)) as usize;
            let got = self.take_locked(&mut pm, n)?;
            if got > 0 {
                continue;
            }
            if held <= pm.book.uncertain() {
                log::warn!(
                    "{held} pages of timed-out gives were never taken by the firmware; freed once the device is quiesced"
                );
                return Ok(());
            }
            deadline.check(self.p(), Wait::PageReclaim { remaining: held })?;
            self.p().delay(Duration::from_millis(10));
        }
    }

    /// Answers the page requests received so far: gives pages for positive
    /// counts (MANAGE_PAGES op_mod 0 when memory runs out), takes them back
    /// for negative ones. Does nothing while another thread does page work.
    pub(crate) fn service_pages(&self) -> Result<()> {
        let Some(mut pm) = self.pages.try_lock() else {
            return Ok(());
        };
        loop {
            let n = self.pending_pages.swap(0, Ordering::AcqRel);
            if n == 0 {
                return Ok(());
            }
            if n > 0 {
                match self.give_locked(&mut pm, n as usize) {
                    Ok(()) => {}
                    Err(e @ (Error::Platform { .. } | Error::CapacityExceeded { .. })) => {
                        log::warn!("page request for {n} pages cannot be met: {e}");
                        pm.refused += 1;
                        let fail = ManagePagesIn::new()
                            .with(ManagePagesIn::op_mod, MANAGE_PAGES_OP_MOD_ALLOCATION_FAIL)?;
                        self.exec(&fail)?;
                        return Err(e);
                    }
                    Err(e) => return Err(e),
                }
            } else {
                let want = n.unsigned_abs() as usize;
                let mut left = want;
                while left > 0 {
                    let batch = left.min(self.cfg.max_pages_per_command as usize);
                    let got = self.take_locked(&mut pm, batch)? as usize;
                    if got < batch {
                        break;
                    }
                    left -= got;
                }
                if left > 0 {
                    log::debug!(
                        "the firmware asked to return {want} pages and returned {}",
                        want - left
                    );
                }
            }
        }
    }
}

/// Reads the answer of a MANAGE_PAGES take of at most `n` pages: the
/// device's `output_num_entries` is checked against `n` and the output
/// length, then `f` gets each returned page address.
pub(crate) fn returned_pages(o: &Output<'_>, n: usize, mut f: impl FnMut(u64)) -> Result<()> {
    let h: ManagePagesOut = o.decode()?;
    let k = h.get(ManagePagesOut::output_num_entries) as usize;
    if k > n {
        return Err(o.invalid(
            "manage_pages_out.output_num_entries",
            k as u64,
            "more pages than the driver asked for",
        ));
    }
    o.read_array::<u64>(
        "manage_pages_out.output_num_entries",
        ManagePagesOut::SIZE,
        k,
        |addr| {
            f(addr);
            Ok(())
        },
    )
}
