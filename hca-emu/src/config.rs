//! How an emulated HCA is built.

use std::time::Duration;

/// Which clock the emulated device and its platform run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// Virtual time (the default): `Platform::now` is virtual, and
    /// `Platform::delay(d)` first lets the device finish everything pending
    /// (waiting in real time as long as that takes), then advances virtual
    /// time by `d`. Timeouts of seconds take no real time, and a slow device
    /// thread never causes a spurious timeout.
    Virtual,
    /// Real (monotonic) time: `delay` sleeps.
    Real,
}

/// Who executes the device's events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Execution {
    /// A device thread executes events on its own schedule (the default),
    /// like hardware.
    DeviceThread,
    /// Deterministic stepping: events queue until [`EmuHca::step`] or
    /// [`EmuHca::run_until_idle`] runs them, or until the driver calls
    /// `Platform::delay` (runs everything pending) or `Platform::relax` (runs
    /// one event).
    ///
    /// [`EmuHca::step`]: crate::EmuHca::step
    /// [`EmuHca::run_until_idle`]: crate::EmuHca::run_until_idle
    Stepping,
}

/// How many pages the firmware asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageCounts {
    /// Answer of QUERY_PAGES op_mod 1 (boot pages).
    pub boot: u32,
    /// Answer of QUERY_PAGES op_mod 2 (init pages).
    pub init: u32,
}

impl PageCounts {
    /// What the real ConnectX-4 of the trace asked for: 6 boot pages and
    /// 12,868 init pages (about 50 MiB).
    pub const REAL: PageCounts = PageCounts {
        boot: 6,
        init: 12_868,
    };
    /// The default: scaled down so that tests stay small (2 boot, 16 init).
    pub const SCALED: PageCounts = PageCounts { boot: 2, init: 16 };
}

/// The device the emulator pretends to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Personality {
    /// ConnectX-4 (PCI 15b3:1013), firmware 14.12.1220, with the capabilities
    /// recorded from a real card (`hca-emu/data/cx4-fw14.12.1220.txt`).
    ConnectX4,
    /// ConnectX-5 (PCI 15b3:1017): the recorded ConnectX-4 capabilities
    /// with the bits of later firmware that Linux and rdma-core test for
    /// (`umem_uid_0`: UMEMs and DevX objects with uid 0, which rdma-core's
    /// mlx5_vfio requires), and a firmware that knows the `ts_format`
    /// field (free-running clock only). See [`crate::personality`] for what
    /// is assumed.
    ConnectX5,
    /// ConnectX-6 Dx (PCI 15b3:101d) with its clock in real-time mode: the
    /// ConnectX-5 capabilities, with `qp_ts_format`, `sq_ts_format` and
    /// `rq_ts_format` 1 (real time only, [`TsFormatCaps::RealTime`]), so
    /// free-running timestamps are refused.
    ConnectX6Dx,
}

impl Personality {
    /// PCI vendor and device id.
    pub fn pci_id(self) -> (u16, u16) {
        match self {
            Personality::ConnectX4 => (0x15b3, 0x1013),
            Personality::ConnectX5 => (0x15b3, 0x1017),
            Personality::ConnectX6Dx => (0x15b3, 0x101d),
        }
    }

    /// Firmware version (major, minor, subminor) in the init segment.
    pub fn fw_version(self) -> (u16, u16, u16) {
        match self {
            Personality::ConnectX4 => crate::personality::FW_VERSION,
            // Public release numbers of those generations' firmware
            // (16.x ConnectX-5, 22.x ConnectX-6 Dx); the capabilities are
            // not read from them (assumed).
            Personality::ConnectX5 => (16, 35, 2000),
            Personality::ConnectX6Dx => (22, 35, 2000),
        }
    }

    /// Whether the firmware knows the `ts_format` field of QP, SQ and RQ
    /// contexts (ConnectX-4 firmware 14.12 predates it).
    pub fn knows_ts_format(self) -> bool {
        self != Personality::ConnectX4
    }
}

/// The link layer of the ports (`cmd_hca_cap.port_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortType {
    /// Ethernet (RoCE), `port_type` 1: the recorded card.
    Ethernet,
    /// InfiniBand, `port_type` 0 (a VPI card in IB mode). The command
    /// interface answers as an IB port does (PTYS with the IB protocol mask,
    /// the HCA vport context with a LID once the subnet manager has
    /// configured the port ([`EmuConfig::sm_delay`], [`EmuConfig::lid_base`]),
    /// GID 0 from the port GUID, the P_Key table, MAD_IFC PortInfo and
    /// NodeInfo); RC and UC traffic is routed by LID (see
    /// [`datapath`](crate::datapath)).
    InfiniBand,
}

/// What QUERY_ISSI answers (`supported_issi_dw0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IssiSupport {
    /// The recorded card's answer: ISSI 1 only (`supported_issi_dw0` 0x2).
    Recorded,
    /// Only ISSI 0 (`supported_issi_dw0` 0x1).
    Only0,
    /// A zero mask, which Linux's `mlx5_core_set_issi` reads as ISSI 0.
    ZeroMask,
    /// Firmware from before ISSI: QUERY_ISSI fails with bad operation (0x2),
    /// which Linux also reads as ISSI 0.
    NoQueryIssi,
}

/// The timestamp formats the device offers (`roce_cap.qp_ts_format`,
/// `cmd_hca_cap.sq_ts_format` and `rq_ts_format`), and so which `ts_format`
/// CREATE_QP, CREATE_SQ and CREATE_RQ accept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TsFormatCaps {
    /// Free-running only (capability 0): the recorded ConnectX-4, whose
    /// firmware predates the field. `ts_format` must be 0 (free-running).
    #[default]
    FreeRunning,
    /// Real time only (capability 1): a later ConnectX whose clock is set
    /// to real-time mode. `ts_format` 1 (default) or 2 (real time);
    /// free-running is refused.
    RealTime,
    /// Both (capability 2): any of the three formats.
    FreeRunningAndRealTime,
}

impl TsFormatCaps {
    /// The capability value.
    pub fn cap(self) -> u8 {
        match self {
            TsFormatCaps::FreeRunning => 0,
            TsFormatCaps::RealTime => 1,
            TsFormatCaps::FreeRunningAndRealTime => 2,
        }
    }
}

/// Everything that shapes one emulated PCI function.
#[derive(Clone, Debug)]
pub struct EmuConfig {
    /// The device personality.
    pub personality: Personality,
    /// Firmware page demand.
    pub pages: PageCounts,
    /// Number of physical ports (1 like the recorded card; 2 rewrites
    /// `num_ports` in the capabilities).
    pub ports: u8,
    /// Clock.
    pub clock: Clock,
    /// Execution model.
    pub execution: Execution,
    /// How long `initializing` stays set after power-on / reset.
    pub boot_delay: Duration,
    /// How long after power-on and after every function reset the function
    /// answers every BAR read with all ones (writes are lost) before its
    /// init segment comes back, with `initializing` set for
    /// [`boot_delay`](Self::boot_delay) more. Zero (the default): the
    /// init segment answers at once. Linux tolerates such reads after a
    /// reset (`mlx5_health_wait_pci_up`, health.c) and polls only
    /// `initializing` at boot (`wait_fw_init`, main.c).
    pub boot_all_ones: Duration,
    /// How long `initializing` stays set after the command queue address is
    /// written.
    pub initializing_delay: Duration,
    /// Time between a command doorbell and the execution of the command.
    pub command_latency: Duration,
    /// Period of the health counter.
    pub health_period: Duration,
    /// Seed of the object-number generator and IOVA offset.
    pub seed: u64,
    /// Whether command execution needs the PCI command register's memory
    /// space and bus master bits (as on real hardware; the driver sets them).
    pub require_bus_master: bool,
    /// MSI-X vectors the function offers (EQ `intr` must be below).
    pub msix_vectors: u8,
    /// Boot with command interface signatures on: `cmdif_checksum` is 3
    /// in the current general capabilities (the recorded card booted with
    /// 0), so the firmware checks the signature of every queue entry and
    /// input mailbox block (delivery status 0x1 when wrong) and signs its
    /// answers, until a driver switches it off with SET_HCA_CAP (or on
    /// again: 3 is within the maximum).
    pub cmdif_checksum: bool,
    /// The link layer of the ports.
    pub port_type: PortType,
    /// The ISSI support QUERY_ISSI reports (and SET_ISSI accepts).
    pub issi: IssiSupport,
    /// The current `cqe_version` the function boots with: 1 as the
    /// recorded card (CQEs carry the QP's user index), or 0 (CQEs carry
    /// the SRQ number; `qpc.user_index` must stay 0).
    pub cqe_version: u8,
    /// The timestamp formats the device offers (in both the current and
    /// the maximum capabilities). The default is the recorded card's
    /// (free-running only).
    pub ts_format_caps: TsFormatCaps,
    /// Whether the emulated platform maps BAR0 write-combining
    /// ([`Platform::bar_write_combining`](platform::Platform::bar_write_combining)).
    /// `true` (the default) stands for a bare-metal platform that mapped
    /// the UAR pages write-combining, so BlueFlame copies are allowed;
    /// `false` stands for an uncached mapping (vfio-pci's), where every
    /// store into a BlueFlame register beyond its first 8 bytes (the
    /// doorbell) is counted as a BlueFlame copy through an uncached mapping
    /// and fails [`EmuHca::assert_clean`](crate::EmuHca::assert_clean).
    pub uar_write_combining: bool,
    /// InfiniBand ports: how long after the physical link comes up (link
    /// up with the HCA initialized) the subnet manager takes to configure
    /// the port (LID, logical state Active), at which point the port state
    /// change event (Active) is posted. Zero (the default): at once. A
    /// fabric with OpenSM takes from a fraction of a second to seconds;
    /// programs that create their event queue after opening the device and
    /// then wait for the Active event (rdma-core's `test_mlx5_vfio`) need
    /// a delay longer than that.
    pub sm_delay: Duration,
    /// InfiniBand ports: the LID the subnet manager gives port 1 (port
    /// `p` gets `lid_base + p - 1`). Default 1. HCAs cabled together
    /// need distinct LIDs, as a subnet manager would assign them.
    pub lid_base: u16,
    /// The Ethernet offload capabilities offer checksum offload
    /// (`csum_cap`, current and maximum). Default true, as the recorded
    /// ConnectX-4; false models a device without it (raw sends asking
    /// for checksums are then refused by the driver, receives report no
    /// checksum verdict).
    pub eth_csum_cap: bool,
    /// NIC receive flow tables offer flow tags
    /// (`flow_table_nic_cap.flow_table_properties_nic_receive.flow_tag`,
    /// current and maximum). Default true, as the recorded ConnectX-4;
    /// false models a device without them (SET_FLOW_TABLE_ENTRY with a
    /// `flow_tag` is then refused).
    pub nic_rx_flow_tag_cap: bool,
    /// The QoS capabilities of a ConnectX-5 or ConnectX-6 Dx offer packet
    /// pacing (`qos_cap.packet_pacing`, with its rate-limit table and
    /// SET_PP_RATE_LIMIT). Default true; false models such a device
    /// without it (`qos` stays 1, the QoS block says no pacing: SET_PP_RATE_LIMIT
    /// is refused as an unknown command and a paced SQ is refused). The
    /// recorded ConnectX-4 has no QoS capabilities whatever this says.
    pub packet_pacing_cap: bool,
}

impl Default for EmuConfig {
    fn default() -> Self {
        Self {
            personality: Personality::ConnectX4,
            pages: PageCounts::SCALED,
            ports: 1,
            clock: Clock::Virtual,
            execution: Execution::DeviceThread,
            boot_delay: Duration::from_millis(5),
            boot_all_ones: Duration::ZERO,
            initializing_delay: Duration::from_millis(5),
            command_latency: Duration::ZERO,
            health_period: Duration::from_millis(50),
            seed: 0x5eed_c0de,
            require_bus_master: true,
            msix_vectors: 64,
            cmdif_checksum: false,
            port_type: PortType::Ethernet,
            issi: IssiSupport::Recorded,
            cqe_version: 1,
            uar_write_combining: true,
            ts_format_caps: TsFormatCaps::FreeRunning,
            sm_delay: Duration::ZERO,
            lid_base: 1,
            eth_csum_cap: true,
            nic_rx_flow_tag_cap: true,
            packet_pacing_cap: true,
        }
    }
}

impl EmuConfig {
    /// The default configuration in deterministic stepping mode.
    pub fn stepping() -> Self {
        Self {
            execution: Execution::Stepping,
            ..Self::default()
        }
    }

    /// With command interface signatures on at boot
    /// ([`cmdif_checksum`](Self::cmdif_checksum)).
    pub fn with_checksum(mut self) -> Self {
        self.cmdif_checksum = true;
        self
    }

    /// With InfiniBand ports ([`PortType::InfiniBand`]).
    pub fn infiniband(mut self) -> Self {
        self.port_type = PortType::InfiniBand;
        self
    }

    /// With a firmware that answers QUERY_ISSI as `issi` says.
    pub fn with_issi(mut self, issi: IssiSupport) -> Self {
        self.issi = issi;
        self
    }

    /// Booting with current `cqe_version` `v` ([`cqe_version`](Self::cqe_version)).
    pub fn with_cqe_version(mut self, v: u8) -> Self {
        self.cqe_version = v;
        self
    }

    /// With the timestamp capabilities of a later ConnectX whose clock is
    /// in real-time mode ([`TsFormatCaps::RealTime`]): free-running
    /// timestamps are refused.
    pub fn real_time_clock(mut self) -> Self {
        self.ts_format_caps = TsFormatCaps::RealTime;
        self
    }

    /// With another personality ([`Personality`]).
    pub fn with_personality(mut self, p: Personality) -> Self {
        self.personality = p;
        self
    }

    /// With a subnet manager that configures InfiniBand ports `d` after
    /// their link comes up ([`sm_delay`](Self::sm_delay)).
    pub fn with_sm_delay(mut self, d: Duration) -> Self {
        self.sm_delay = d;
        self
    }

    /// The timestamp formats offered: a ConnectX-6 Dx in real-time mode
    /// offers real time only, whatever [`ts_format_caps`](Self::ts_format_caps) says.
    pub fn effective_ts_format_caps(&self) -> TsFormatCaps {
        match self.personality {
            Personality::ConnectX6Dx => TsFormatCaps::RealTime,
            _ => self.ts_format_caps,
        }
    }

    /// With the real page counts of the recorded card.
    pub fn with_real_pages(mut self) -> Self {
        self.pages = PageCounts::REAL;
        self
    }
}
