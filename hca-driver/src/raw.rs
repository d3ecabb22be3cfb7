//! Raw access to the device ([`RawHca`]): any firmware command, the BAR
//! registers, firmware objects from caller-supplied contexts and page
//! lists.

use firmware_cmds::command::{ArrayItem, Command, Encode};
use firmware_cmds::cq::CreateCqIn;
use firmware_cmds::eth::{CreateRqIn, CreateSqIn};
use firmware_cmds::layout::Layout;
use firmware_cmds::mkey::CreateMkeyIn;
use firmware_cmds::qp::CreateQpIn;
use firmware_cmds::rmp::CreateRmpIn;
use firmware_cmds::srq::CreateSrqIn;
use platform::Platform;

use crate::cmd::Output;
use crate::error::Result;
use crate::fw::{Cq, Mkey, Qp, Rq, Sq, Srq};
use crate::hca::Hca;
use crate::pas::PageList;

/// Raw access to the device: any firmware command, the BAR registers, and
/// firmware objects built from caller-supplied contexts and page lists.
///
/// Each of these can make the device read or write memory at an address the
/// caller chose: a command's page list or context (`dbr_addr`, MTT
/// entries), a doorbell or command-queue register write.
/// Under VFIO the IOMMU confines the device to what was mapped for it, but
/// on bare metal (`platform::bare_metal`) nothing does: the device would
/// write over whatever memory the address names, which safe Rust must not
/// be able to cause. So the way in is one `unsafe` call,
/// [`Hca::raw`], whose obligations cover everything done through the
/// [`RawHca`] it returns; the verbs API and the rest of [`Hca`] only ever
/// hand the device memory the driver allocated itself.
///
/// ```
/// use firmware_cmds::pd::{AllocPdIn, AllocPdOut, DeallocPdIn};
/// # let emu = hca_emu::EmuHca::new(hca_emu::EmuConfig::default());
/// # let hca = hca_driver::Hca::open(emu.platform(), Default::default())?;
/// // SAFETY: ALLOC_PD and DEALLOC_PD name no memory; nothing else is done
/// // through `raw`.
/// let raw = unsafe { hca.raw() };
/// let out = raw.exec(&AllocPdIn::new())?;
/// let pd = out.get(AllocPdOut::pd);
/// raw.exec(&DeallocPdIn::new().with(DeallocPdIn::pd, pd)?)?;
/// # hca.close()?;
/// # Ok::<(), hca_driver::Error>(())
/// ```
///
/// Without `unsafe` there is no way in:
///
/// ```compile_fail,E0133
/// use firmware_cmds::pd::AllocPdIn;
/// # let emu = hca_emu::EmuHca::new(hca_emu::EmuConfig::default());
/// # let hca = hca_driver::Hca::open(emu.platform(), Default::default()).unwrap();
/// hca.raw().exec(&AllocPdIn::new()).unwrap();
/// ```
///
/// ```compile_fail,E0624
/// use firmware_cmds::pd::AllocPdIn;
/// # let emu = hca_emu::EmuHca::new(hca_emu::EmuConfig::default());
/// # let hca = hca_driver::Hca::open(emu.platform(), Default::default()).unwrap();
/// hca.exec(&AllocPdIn::new()).unwrap(); // private: crate-internal
/// ```
pub struct RawHca<'a, P: Platform> {
    hca: &'a Hca<P>,
}

impl<P: Platform> Hca<P> {
    /// Raw access: any firmware command ([`RawHca::exec`] and friends), the
    /// BAR ([`RawHca::bar`]), firmware objects from caller-supplied
    /// contexts and page lists ([`RawHca::create_cq`], [`RawHca::create_qp`],
    /// [`RawHca::create_srq`], [`RawHca::create_rmp`],
    /// [`RawHca::create_mkey`]).
    ///
    /// # Safety
    ///
    /// For as long as the returned handle (or anything created through it)
    /// is used, the caller guarantees that:
    ///
    /// - every address the device is given through it (page lists, MTT
    ///   entries, `dbr_addr` and other addresses in contexts) is the bus
    ///   address of memory allocated for this device
    ///   ([`Platform::alloc_dma`], which the host only reaches through
    ///   [`DmaRegion`](platform::DmaRegion)'s volatile copies) and stays
    ///   allocated until the device has stopped accessing it (the object is
    ///   destroyed, or the function is disabled or reset);
    /// - no BAR write makes the device access other memory: the command
    ///   queue address registers are left alone, and a doorbell is rung
    ///   only for a queue whose descriptors follow the first rule.
    ///
    /// Under VFIO the IOMMU contains a violation (the device faults instead
    /// of writing host memory); on bare metal nothing does, and a violation
    /// is undefined behaviour.
    ///
    /// Not a safety matter, but worth knowing: a raw command that destroys
    /// or changes an object the driver created (its EQs, UAR, firmware
    /// pages, the objects of the verbs API) leaves the driver's bookkeeping
    /// wrong, which shows as errors later (at teardown at the latest).
    #[allow(unsafe_code)]
    pub unsafe fn raw(&self) -> RawHca<'_, P> {
        RawHca { hca: self }
    }
}

impl<'a, P: Platform> RawHca<'a, P> {
    /// The HCA.
    pub fn hca(&self) -> &'a Hca<P> {
        self.hca
    }

    /// BAR0 (initialization segment, UAR pages).
    pub fn bar(&self) -> &'a P::Mmio {
        &self.hca.bar
    }

    /// Runs a command whose output is the fixed layout `C::Output`.
    pub fn exec<C: Command>(&self, input: &C) -> Result<C::Output> {
        self.hca.exec(input)
    }

    /// Runs a command whose input ends in a flexible array (`pas`, MTT
    /// entries...): `head` followed by `items`.
    pub fn exec_with_items<C: Command, T: ArrayItem>(
        &self,
        head: &C,
        items: &[T],
    ) -> Result<C::Output> {
        self.hca.exec_with_items(head, items)
    }

    /// Runs a command with any encoded input (see
    /// [`firmware_cmds::command::Encode`], e.g. [`PageList`]) and a fixed
    /// output layout.
    pub fn exec_encoded<O: Layout, E: Encode + ?Sized>(&self, input: &E) -> Result<O> {
        self.hca.exec_encoded(input)
    }

    /// Runs a command with any input and an output of `out_len` bytes, and
    /// hands the validated answer to `read` (for outputs with a flexible
    /// array: MANAGE_PAGES take, QUERY_HCA_VPORT_GID...).
    ///
    /// Errors: [`Error::DeviceDead`](crate::Error::DeviceDead) at once once
    /// the device is known dead; [`Error::Timeout`](crate::Error::Timeout)
    /// naming the command; [`Error::Delivery`](crate::Error::Delivery),
    /// [`Error::MalformedAnswer`](crate::Error::MalformedAnswer),
    /// [`Error::InvalidAnswer`](crate::Error::InvalidAnswer) for answers
    /// the device got wrong; [`Error::Command`](crate::Error::Command) when
    /// the command failed.
    pub fn exec_read<E: Encode + ?Sized, R>(
        &self,
        input: &E,
        out_len: usize,
        read: impl FnOnce(&Output<'_>) -> Result<R>,
    ) -> Result<R> {
        self.hca.exec_read(input, out_len, read)
    }

    /// CREATE_CQ with the caller's context and buffer pages; the CQ is
    /// registered for completion and error events.
    pub fn create_cq(&self, pages: &PageList<'_, CreateCqIn>) -> Result<Cq<'a, P>> {
        self.hca.create_cq(pages)
    }

    /// CREATE_QP with the caller's context and buffer pages; the QP is
    /// registered for events.
    pub fn create_qp(&self, pages: &PageList<'_, CreateQpIn>) -> Result<Qp<'a, P>> {
        self.hca.create_qp(pages)
    }

    /// CREATE_SRQ (ISSI 0) with the caller's context and buffer pages; the
    /// SRQ is registered for events.
    pub fn create_srq(&self, pages: &PageList<'_, CreateSrqIn>) -> Result<Srq<'a, P>> {
        self.hca.create_srq(pages)
    }

    /// CREATE_RMP (ISSI 1) with the caller's context and buffer pages; the
    /// RMP is registered for events under its number.
    pub fn create_rmp(&self, pages: &PageList<'_, CreateRmpIn>) -> Result<Srq<'a, P>> {
        self.hca.create_rmp(pages)
    }

    /// CREATE_SQ with the caller's context and buffer pages; the SQ is
    /// registered for events.
    pub fn create_sq(&self, pages: &PageList<'_, CreateSqIn>) -> Result<Sq<'a, P>> {
        self.hca.create_sq(pages)
    }

    /// CREATE_RQ with the caller's context and buffer pages; the RQ is
    /// registered for events.
    pub fn create_rq(&self, pages: &PageList<'_, CreateRqIn>) -> Result<Rq<'a, P>> {
        self.hca.create_rq(pages)
    }

    /// CREATE_MKEY with the caller's memory key context and MTT (page
    /// addresses with the access bits, as 64-bit entries).
    pub fn create_mkey(&self, mtt: &PageList<'_, CreateMkeyIn>) -> Result<Mkey<'a, P>> {
        self.hca.create_mkey(mtt)
    }
}
