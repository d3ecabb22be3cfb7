//! P_Key queries (QUERY_HCA_VPORT_PKEY) and InfiniBand ports: what the
//! verbs layer reports for a port (width and speed from PTYS as `mlx5_ib`
//! translates them, LID, GID 0, the P_Key table) on an emulated ConnectX-4
//! with Ethernet and with InfiniBand ports.

use hca_driver::verbs::Context;
use hca_driver::verbs::{DEFAULT_PKEY, PortAttr, speed, width};
use hca_driver::{Config, Error, LinkLayer, PortState};
use hca_emu::{EmuConfig, EmuPlatform, connect};
use hca_tests::Bench;
use std::sync::Arc;

#[test]
fn ethernet_p_keys() {
    Bench::<EmuPlatform>::emulated(EmuConfig::default(), Config::default()).with_open(|hca, _| {
        let ctx = Arc::new(Context::open(hca).unwrap());
        // ibv_query_pkey on a RoCE port: one P_Key, as mlx5_ib reports.
        assert_eq!(ctx.query_pkey(1, 0).unwrap(), DEFAULT_PKEY);
        assert!(matches!(
            ctx.query_pkey(1, 1),
            Err(Error::InvalidAttribute {
                attr: "pkey_index",
                value: 1,
                ..
            })
        ));
        // The firmware's table (QUERY_HCA_VPORT_PKEY) has the default P_Key
        // in entry 0 and 128 entries (pkey_table_size 0).
        assert_eq!(hca.pkey_table_len().unwrap(), 128);
        assert_eq!(hca.query_pkey(1, 0).unwrap(), DEFAULT_PKEY);
        assert_eq!(hca.query_pkey(1, 127).unwrap(), 0);
        let mut table = [0x5a5au16; 130];
        assert_eq!(hca.query_pkey_table(1, &mut table).unwrap(), 128);
        assert_eq!(table[0], DEFAULT_PKEY);
        assert!(table[1..128].iter().all(|&k| k == 0));
        assert_eq!(table[128..], [0x5a5a; 2], "untouched");
        assert!(matches!(
            hca.query_pkey(1, 128),
            Err(Error::InvalidArgument { arg: "index", .. })
        ));
        assert!(matches!(
            hca.query_pkey_table(1, &mut table[..127]),
            Err(Error::InvalidArgument { arg: "out", .. })
        ));
        // A port the device does not have: the firmware refuses it.
        assert!(matches!(hca.query_pkey(2, 0), Err(Error::Command(_))));
        assert!(matches!(
            ctx.query_pkey(2, 0),
            Err(Error::InvalidAttribute {
                attr: "port_num",
                ..
            })
        ));
    });
}

#[test]
fn ethernet_port_width_and_speed_follow_ptys() {
    let mut a = Bench::<EmuPlatform>::emulated(EmuConfig::default(), Config::default());
    let mut b = Bench::<EmuPlatform>::emulated(
        EmuConfig {
            seed: 9,
            ..EmuConfig::default()
        },
        Config::default(),
    );
    connect(a.emu().unwrap(), 1, b.emu().unwrap(), 1).unwrap();
    let (ha, hb) = (a.open(), b.open());
    {
        let ctx = Arc::new(Context::open(&ha).unwrap());
        let p = ctx.query_port(1).unwrap();
        // The emulated port runs 100GBASE-CR4 (PTYS bit 20): 4X EDR, as
        // mlx5_ib translates it, and 100 Gb/s.
        assert_eq!(
            (p.state, p.link_layer),
            (PortState::Active, LinkLayer::Ethernet)
        );
        assert_eq!((p.active_width, p.active_speed), (width::X4, speed::EDR));
        assert_eq!(p.speed_mbps, Some(100_000));
        assert_eq!(p.pkey_tbl_len, 1);
    }
    b.close(hb);
    a.close(ha);
    a.assert_clean();
    b.assert_clean();
}

fn ib_port(attr: &PortAttr) -> (PortState, LinkLayer, u8, u8, u16) {
    (
        attr.state,
        attr.link_layer,
        attr.active_width,
        attr.active_speed,
        attr.lid,
    )
}

#[test]
fn infiniband_ports_p_keys_width_and_lid() {
    let emu = EmuConfig::default().infiniband();
    let mut a = Bench::<EmuPlatform>::emulated(emu.clone(), Config::default());
    let mut b = Bench::<EmuPlatform>::emulated(EmuConfig { seed: 3, ..emu }, Config::default());
    let ha = a.open();
    assert_eq!(ha.caps().link_layer(), LinkLayer::InfiniBand);
    {
        let ctx = Arc::new(Context::open(&ha).unwrap());
        // No cable: down, no LID; PTYS width 0 reads as Linux's default 4X.
        let p = ctx.query_port(1).unwrap();
        assert_eq!(
            ib_port(&p),
            (PortState::Down, LinkLayer::InfiniBand, width::X4, 0, 0)
        );
        assert_eq!(p.pkey_tbl_len, 128);
        // ibv_query_pkey goes to the firmware's table on an IB port.
        let before = a.emu().unwrap().command_log().len();
        assert_eq!(ctx.query_pkey(1, 0).unwrap(), DEFAULT_PKEY);
        assert_eq!(ctx.query_pkey(1, 5).unwrap(), 0);
        let log = a.emu().unwrap().command_log();
        assert_eq!(
            log[before..]
                .iter()
                .filter(|c| c.opcode == 0x765 && c.status == 0)
                .count(),
            2
        );
        assert!(matches!(
            ctx.query_pkey(1, 128),
            Err(Error::InvalidAttribute {
                attr: "pkey_index",
                value: 128,
                ..
            })
        ));
        // GID 0: the default subnet prefix and the port GUID.
        let g = ctx.query_gid(1, 0).unwrap();
        assert_eq!(g.0[..8], [0xfe, 0x80, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            u64::from_be_bytes(g.0[8..].try_into().unwrap()),
            ha.info().ports[0].port_guid
        );
    }
    // Cabled to another IB HCA: active, 4X EDR (PTYS width bit 2 -> the
    // ibv_width code of 4X, 2), a LID.
    connect(a.emu().unwrap(), 1, b.emu().unwrap(), 1).unwrap();
    let hb = b.open();
    {
        let ctx = Arc::new(Context::open(&ha).unwrap());
        let p = ctx.query_port(1).unwrap();
        assert_eq!(
            ib_port(&p),
            (
                PortState::Active,
                LinkLayer::InfiniBand,
                width::X4,
                speed::EDR,
                1
            )
        );
        assert_eq!(width::X4, 2);
    }
    b.close(hb);
    a.close(ha);
    a.assert_clean();
    b.assert_clean();
}
