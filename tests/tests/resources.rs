//! Device information, resources and events, on the emulator and on
//! hardware.

use firmware_cmds::caps::{CAP_GENERAL, CmdHcaCap};
use firmware_cmds::cq::{Cqc, CreateCqIn};
use firmware_cmds::mkey::{CreateMkeyIn, MKC_ACCESS_MODE_PA, Mkc};
use firmware_cmds::uar::UAR_CQ_DOORBELL_OFFSET;
use hca_driver::verbs::Context;
use hca_driver::{AsyncEvent, CapMode, Hca, LinkLayer, PageList, PortState};
use hca_emu::{EmuConfig, EmuHca};
use hca_tests::{Bench, TestPlatform};
use platform::{Be64, DmaRegion, Mmio, Platform};

fn device_info_is_complete<P: TestPlatform>(b: &mut Bench<P>) {
    let hca = b.open();
    let info = hca.info();
    assert!(info.fw_version.is_some());
    assert_eq!(info.cmdif_rev, 5);
    assert_eq!(info.pci.vendor_id, hca_driver::pci::MELLANOX_VENDOR_ID);
    assert!(info.pci.product().is_some(), "{:?}", info.pci);
    assert!(!info.board_id().is_empty());
    assert_ne!(info.node_guid, 0);
    assert!(!info.ports.is_empty());
    let caps = hca.caps();
    assert_eq!(
        caps.get(CAP_GENERAL, "log_max_qp", CapMode::Current),
        Some(u64::from(caps.general().get(CmdHcaCap::log_max_qp)))
    );
    // What bring-up set.
    assert_eq!(caps.general().get(CmdHcaCap::cmdif_checksum), 0);
    assert_eq!(caps.general().get(CmdHcaCap::log_uar_page_sz), 0);
    assert!(caps.general().get(CmdHcaCap::log_max_qp) <= 17);
    for p in &info.ports {
        assert_eq!(p.link_layer, caps.link_layer());
        assert!(p.max_mtu.is_some());
        assert_eq!(hca.events().port_state(p.port), Some(p.state));
    }
    println!("{info}");
    println!("bring-up: {}", hca.bring_up_report());
    hca.check_health().unwrap();
    b.close(hca);
}

/// A CQ of 64 entries with its doorbell record, in the caller's memory.
struct CqMem {
    buf: DmaRegion,
    dbr: DmaRegion,
}

impl CqMem {
    fn new<P: Platform>(p: &P) -> Self {
        let buf = p.alloc_dma(4096, 4096).unwrap();
        for i in 0..64 {
            buf.write_u8(i * 64 + 63, 0xf0);
        }
        Self {
            buf,
            dbr: p.alloc_dma(4096, 4096).unwrap(),
        }
    }

    fn input(&self, uar: u32, eqn: u8) -> CreateCqIn {
        let cqc = Cqc::new()
            .with(Cqc::log_cq_size, 6)
            .unwrap()
            .with(Cqc::uar_page, uar)
            .unwrap()
            .with(Cqc::c_eqn, eqn)
            .unwrap()
            .with(Cqc::dbr_addr, self.dbr.iova())
            .unwrap();
        CreateCqIn::new().with(CreateCqIn::cq_context, cqc).unwrap()
    }

    fn free<P: Platform>(self, p: &P) {
        p.free_dma(self.buf);
        p.free_dma(self.dbr);
    }
}

fn resources_come_and_go<P: TestPlatform>(b: &mut Bench<P>) {
    let hca = b.open();
    for _ in 0..2 {
        let uar = hca.alloc_uar().unwrap();
        // SAFETY: nothing is written through the raw handle here; the CQ
        // below lives in a DMA region of this platform, freed after the
        // CQ is destroyed, and the MKEY (PA mode, no translation) is never
        // used for a transfer.
        let raw = unsafe { hca.raw() };
        assert!(uar.offset() >= 0x4000 && uar.offset() < raw.bar().len());
        let pd = hca.alloc_pd().unwrap();
        let pd2 = hca.alloc_pd().unwrap();
        assert_ne!(pd.number(), pd2.number());
        let td = hca.alloc_transport_domain().unwrap();
        let mkc = Mkc::new()
            .with(Mkc::qpn, 0xff_ffff)
            .unwrap()
            .with(Mkc::lr, true)
            .unwrap()
            .with(Mkc::lw, true)
            .unwrap()
            .with(Mkc::pd, pd.number().0)
            .unwrap()
            .with(Mkc::length64, true)
            .unwrap();
        let mut mkc = mkc;
        mkc.set_access_mode(MKC_ACCESS_MODE_PA).unwrap();
        let mk_in = CreateMkeyIn::new()
            .with(CreateMkeyIn::memory_key_mkey_entry, mkc)
            .unwrap();
        let mkey = raw.create_mkey(&PageList::list(&mk_in, &[])).unwrap();
        let mem = CqMem::new(hca.platform());
        let eqn = hca.comp_eqns().next().unwrap();
        let input = mem.input(uar.number().0, eqn.0);
        let cq = raw
            .create_cq(&PageList::of_region(&input, &mem.buf))
            .unwrap();
        assert!(hca.events().cq_counts(cq.number()).is_some());
        let cqn = cq.number();
        cq.destroy().unwrap();
        assert!(hca.events().cq_counts(cqn).is_none());
        mem.free(hca.platform());
        mkey.destroy().unwrap();
        td.destroy().unwrap();
        // Dropping destroys too.
        drop(pd2);
        pd.destroy().unwrap();
        uar.destroy().unwrap();
    }
    b.close(hca);
}

fn commands_from_many_threads<P: TestPlatform + Sync>(b: &mut Bench<P>)
where
    P::Mmio: Sync,
{
    let shared = b.open();
    let hca: &Hca<P> = &shared;
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..20 {
                    let pd = hca.alloc_pd().unwrap();
                    let uar = hca.alloc_uar().unwrap();
                    uar.destroy().unwrap();
                    pd.destroy().unwrap();
                }
            });
        }
        s.spawn(|| {
            for _ in 0..50 {
                hca.poll_events().unwrap();
                std::thread::yield_now();
            }
        });
    });
    assert_eq!(hca.page_stats().uncertain, 0);
    b.close(shared);
}

hca_tests::scenarios!(
    device_info_is_complete,
    resources_come_and_go,
    commands_from_many_threads
);

#[test]
fn emulated_device_info_matches_the_recorded_card() {
    Bench::emulated(EmuConfig::default(), hca_driver::Config::default()).with_open(|hca, _| {
        let info = hca.info();
        assert_eq!(info.fw_version.unwrap().to_string(), "14.12.1220");
        assert_eq!(info.pci.device_id, 0x1013);
        assert_eq!(info.pci.product(), Some("ConnectX-4"));
        assert_eq!(info.board_id(), "MT_2430110027");
        assert_eq!(info.ieee_vendor_id, 0x02c9);
        assert_eq!(info.issi, 1);
        assert_eq!(hca.caps().link_layer(), LinkLayer::Ethernet);
        let p = &info.ports[0];
        // No cable: the link is down; PMTU says 9978 max, 1522 operational.
        assert_eq!(p.state, PortState::Down);
        assert_eq!((p.max_mtu_bytes, p.oper_mtu_bytes), (9978, 1522));
        assert_eq!(p.active_mtu, Some(hca_driver::IbMtu::Mtu1024));
        assert_eq!(p.mac.unwrap()[..3], [0x7c, 0xfe, 0x90]);
        assert_eq!(hca.caps().general().get(CmdHcaCap::log_max_qp), 17);
        assert!(hca.caps().roce.is_some() && hca.caps().atomic.is_some());
        let text = info.to_string();
        assert!(text.contains("fw_ver:\t\t\t\t14.12.1220"), "{text}");
        assert!(text.contains("vendor_part_id:\t\t\t4115"), "{text}");
    });
}

#[test]
fn old_firmware_without_issi_stays_at_issi_0() {
    let mut b = Bench::emulated(EmuConfig::default(), hca_driver::Config::default());
    // QUERY_ISSI unknown: "bad operation".
    b.emu()
        .unwrap()
        .faults()
        .fail_opcode(firmware_cmds::Opcode::QUERY_ISSI.0, 0x2, 0);
    let hca = b.open();
    assert_eq!(hca.info().issi, 0);
    let log = b.emu().unwrap().command_log();
    assert!(
        !log.iter()
            .any(|c| c.opcode == firmware_cmds::Opcode::SET_ISSI.0)
    );
    b.close(hca);
    b.assert_clean();
}

#[test]
fn port_changes_update_the_port_state() {
    Bench::emulated(EmuConfig::default(), hca_driver::Config::default()).with_open(|hca, emu| {
        let peer = EmuHca::new(EmuConfig::default());
        hca_emu::connect(emu, 1, &peer, 1).unwrap();
        emu.run_until_idle();
        hca.poll_events().unwrap();
        assert_eq!(hca.events().port_state(1), Some(PortState::Active));
        assert_eq!(
            hca.events().pop(),
            Some(AsyncEvent::PortChange {
                port: 1,
                sub_type: firmware_cmds::eq::PORT_CHANGE_SUBTYPE_ACTIVE,
                state: PortState::Active
            })
        );
        let p = hca.query_port(1).unwrap();
        assert_eq!(p.state, PortState::Active);
        assert_eq!(p.speed_mbps, Some(100_000));
        emu.disconnect(1);
        emu.run_until_idle();
        hca.poll_events().unwrap();
        assert_eq!(hca.events().port_state(1), Some(PortState::Down));
    });
}

/// Arms a CQ for the next completion (CQ doorbell at UAR + 0x20).
fn arm_cq<P: Platform>(hca: &Hca<P>, uar_offset: usize, cqn: u32) {
    let arm_word: u64 = 0; // sn 0, cmd 0 (next completion), ci 0
    // SAFETY: the CQ doorbell of a CQ whose ring and doorbell record are
    // DMA regions of this platform (the callers' CqMem), alive until after
    // the CQ is destroyed.
    let raw = unsafe { hca.raw() };
    raw.bar().write64(
        uar_offset + UAR_CQ_DOORBELL_OFFSET,
        Be64::new((arm_word << 32) | u64::from(cqn)),
    );
}

#[test]
fn completion_and_cq_error_events_reach_their_cq() {
    Bench::emulated(EmuConfig::default(), hca_driver::Config::default()).with_open(|hca, emu| {
        let uar = hca.alloc_uar().unwrap();
        let mem = CqMem::new(hca.platform());
        let eqn = hca.comp_eqns().next().unwrap();
        let input = mem.input(uar.number().0, eqn.0);
        // SAFETY: both CQs below live in `mem`, DMA regions of this
        // platform freed only after both CQs are destroyed.
        let raw = unsafe { hca.raw() };
        let cq = raw
            .create_cq(&PageList::of_region(&input, &mem.buf))
            .unwrap();
        let cqn = cq.number();
        // An armed CQ raises one completion event for its next CQE.
        arm_cq(hca, uar.offset(), cqn.0);
        emu.run_until_idle();
        let mut cqe = [0u8; 64];
        cqe[63] = 0x00; // requester completion
        emu.post_cqe(cqn.0, &cqe).unwrap();
        emu.run_until_idle();
        hca.poll_events().unwrap();
        assert_eq!(hca.events().take_completion_events(cqn), Some(1));
        // Not armed any more: the next CQE raises nothing.
        emu.post_cqe(cqn.0, &cqe).unwrap();
        hca.poll_events().unwrap();
        assert_eq!(hca.events().take_completion_events(cqn), Some(0));
        // An overrun puts the CQ in error and the owner hears of it.
        emu.faults().cq_overrun(cqn.0);
        assert!(emu.post_cqe(cqn.0, &cqe).is_err());
        emu.run_until_idle();
        hca.poll_events().unwrap();
        assert_eq!(
            hca.events().pop(),
            Some(AsyncEvent::CqError { cqn, syndrome: 1 })
        );
        assert_eq!(hca.events().cq_counts(cqn).unwrap().errors, 1);
        // A completion event for a CQ nobody registered is an invalid EQE.
        let other = raw
            .create_cq(&PageList::of_region(&input, &mem.buf))
            .unwrap();
        let other_n = other.number();
        assert!(hca.events().unregister_cq(other_n));
        arm_cq(hca, uar.offset(), other_n.0);
        emu.post_cqe(other_n.0, &cqe).unwrap();
        emu.run_until_idle();
        let e = hca.poll_events().unwrap_err();
        assert!(
            matches!(e, hca_driver::Error::InvalidEqe { error: hca_driver::EqeError::UnknownCq { cqn }, .. } if cqn == other_n.0),
            "{e}"
        );
        other.destroy().unwrap();
        cq.destroy().unwrap();
        mem.free(hca.platform());
        uar.destroy().unwrap();
    });
}

/// The recorded card has no host-endian atomics; an answer that claims
/// them makes the driver ask for them (which the firmware then refuses,
/// as it really does not have them).
#[test]
fn host_endian_atomics_are_asked_for_only_when_supported() {
    use firmware_cmds::Opcode;
    use hca_emu::OutputCorruption;
    // Supported (claimed): SET_HCA_CAP of the atomic caps follows.
    let mut b = Bench::emulated(EmuConfig::default(), hca_driver::Config::default());
    b.emu().unwrap().faults().corrupt_output(
        Some(Opcode::QUERY_HCA_CAP.0),
        3,
        // atomic_caps.supported_atomic_req_8B_endianness_mode_1: bit 25 of
        // dword 0x08 of the block at output byte 0x10.
        OutputCorruption::OutputByte {
            offset: 0x18,
            xor: 0x02,
        },
    );
    let e = b.try_open().unwrap_err();
    let c = e.command_error().unwrap_or_else(|| panic!("{e}"));
    assert_eq!((c.opcode, c.op_mod), (Opcode::SET_HCA_CAP, 0x6), "{e}");
    b.assert_clean();
    // Not supported: no SET_HCA_CAP of type 3.
    let before = b.emu().unwrap().command_log().len();
    let hca = b.open();
    let sets: Vec<u16> = b.emu().unwrap().command_log()[before..]
        .iter()
        .filter(|c| c.opcode == Opcode::SET_HCA_CAP.0)
        .map(|c| c.op_mod)
        .collect();
    assert_eq!(sets, [0x0]);
    b.close(hca);
    // Not wanted: not even queried before INIT_HCA.
    let cfg = hca_driver::Config {
        host_endian_atomics: false,
        ..hca_driver::Config::default()
    };
    let mut b = Bench::emulated(EmuConfig::default(), cfg);
    let hca = b.open();
    let log = b.emu().unwrap().command_log();
    let init = log
        .iter()
        .position(|c| c.opcode == Opcode::INIT_HCA.0)
        .unwrap();
    assert!(
        !log[..init]
            .iter()
            .any(|c| c.opcode == Opcode::QUERY_HCA_CAP.0 && c.op_mod >> 1 == 3)
    );
    b.close(hca);
    b.assert_clean();
}

#[test]
fn set_driver_version_is_sent_when_capable() {
    use firmware_cmds::Opcode;
    use hca_emu::OutputCorruption;
    let mut b = Bench::emulated(EmuConfig::default(), hca_driver::Config::default());
    // cmd_hca_cap.driver_version (bit 30 of dword 0x4c) in the current
    // general caps read before SET_HCA_CAP.
    b.emu().unwrap().faults().corrupt_output(
        Some(Opcode::QUERY_HCA_CAP.0),
        2,
        OutputCorruption::OutputByte {
            offset: 0x10 + 0x4c,
            xor: 0x40,
        },
    );
    let hca = b.open();
    let log = b.emu().unwrap().command_log();
    let pos = |op: Opcode| log.iter().position(|c| c.opcode == op.0).unwrap();
    assert_eq!(pos(Opcode::SET_DRIVER_VERSION), pos(Opcode::INIT_HCA) + 1);
    b.close(hca);
    b.assert_clean();
}

#[test]
fn gids_come_from_the_roce_address_table() {
    use firmware_cmds::roce::{RoceAddrLayout, SetRoceAddressIn};
    Bench::emulated(EmuConfig::default(), hca_driver::Config::default()).with_open(|hca, _| {
        // Bring-up does not read the RoCE address table (Linux never does).
        assert_eq!(hca.info().ports[0].gid0, None);
        Context::open(hca).unwrap().enable_roce().unwrap();
        let mut gid = [0u8; 16];
        gid[..2].copy_from_slice(&[0xfe, 0x80]);
        gid[8..].copy_from_slice(&[0x7e, 0xfe, 0x90, 0xff, 0xfe, 0x12, 0x34, 0x56]);
        let mut addr = RoceAddrLayout::new()
            .with(RoceAddrLayout::source_l3_address, gid)
            .unwrap();
        addr.set_source_mac([0x7c, 0xfe, 0x90, 0x12, 0x34, 0x56]);
        let set = SetRoceAddressIn::new()
            .with(SetRoceAddressIn::roce_address_index, 0)
            .unwrap()
            .with(SetRoceAddressIn::roce_address, addr)
            .unwrap();
        // SAFETY: SET_ROCE_ADDRESS names no memory.
        unsafe { hca.raw() }.exec(&set).unwrap();
        assert_eq!(hca.query_gid(1, 0).unwrap(), gid);
    });
}

/// The typed helpers of raw command execution: a command with a flexible
/// array in (`exec_with_items`), one with a flexible array out
/// (`exec_read` + `Output::read_array`), and plain `exec`.
#[test]
fn typed_command_helpers() {
    use firmware_cmds::cq::{CreateCqOut, DestroyCqIn};
    use firmware_cmds::hca::{ManagePagesIn, ManagePagesOut};
    let mut b = Bench::emulated(EmuConfig::default(), hca_driver::Config::default());
    let hca = b.open();
    let uar = hca.alloc_uar().unwrap();
    let mem = CqMem::new(hca.platform());
    let eqn = hca.comp_eqns().next().unwrap();
    let input = mem.input(uar.number().0, eqn.0);
    // SAFETY: the CQ lives in `mem`, DMA regions of this platform freed
    // after DESTROY_CQ; the MANAGE_PAGES below takes pages (none) back
    // and gives none.
    let raw = unsafe { hca.raw() };
    let out: CreateCqOut = raw.exec_with_items(&input, &[mem.buf.iova()]).unwrap();
    let cqn = out.get(CreateCqOut::cqn);
    assert!(b.emu().unwrap().cq(cqn).is_some());
    raw.exec(&DestroyCqIn::new().with(DestroyCqIn::cqn, cqn).unwrap())
        .unwrap();
    assert!(b.emu().unwrap().cq(cqn).is_none());
    // A take of zero pages answers an empty list; the reader sees it.
    let take = ManagePagesIn::new()
        .with(ManagePagesIn::op_mod, 2)
        .unwrap()
        .with(ManagePagesIn::input_num_entries, 4)
        .unwrap();
    let n = raw
        .exec_read(&take, ManagePagesOut::SIZE + 32, |o| {
            let h: ManagePagesOut = o.decode()?;
            let k = h.get(ManagePagesOut::output_num_entries) as usize;
            let mut addrs = Vec::new();
            o.read_array::<u64>("output_num_entries", 16, k, |a| {
                addrs.push(a);
                Ok(())
            })?;
            // More than the output holds is refused.
            assert!(o.read_array::<u64>("x", 16, 5, |_| Ok(())).is_err());
            Ok(addrs.len())
        })
        .unwrap();
    // Boot and init pages stay with an initialized HCA.
    assert_eq!(n, 0);
    mem.free(hca.platform());
    uar.destroy().unwrap();
    b.close(hca);
    b.assert_clean();
}
