//! How the driver brings a device up: timeouts, queue sizes, limits.

use core::time::Duration;

use crate::record::CommandRecorder;

/// Every timeout of the driver. The defaults are the PRM/Linux ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Firmware pre-init: `initializing` clearing after power-on or reset
    /// (120 s).
    pub fw_pre_init: Duration,
    /// Firmware init: `initializing` clearing after the command queue
    /// address is written (2 s).
    pub fw_init: Duration,
    /// One command (60 s).
    pub command: Duration,
    /// The TEARDOWN_HCA command (the command timeout, 60 s, as Linux waits
    /// for a graceful close).
    pub teardown: Duration,
    /// Reclaiming every firmware page at teardown (5 s).
    pub page_reclaim: Duration,
    /// Period of the health poll: the health counter must change between
    /// two polls at least this far apart (2 s).
    pub health_poll: Duration,
    /// While waiting for a command, how often the health buffer is read so
    /// that a dead device fails the wait at once (100 ms).
    pub health_check_in_wait: Duration,
    /// In event mode, how long a command whose entry is already back in
    /// driver ownership may go without its completion event before the
    /// driver accepts it anyway and reports the missing event (1 s).
    pub missing_completion_event: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            fw_pre_init: Duration::from_secs(120),
            fw_init: Duration::from_secs(2),
            command: Duration::from_secs(60),
            teardown: Duration::from_secs(60),
            page_reclaim: Duration::from_secs(5),
            health_poll: Duration::from_secs(2),
            health_check_in_wait: Duration::from_millis(100),
            missing_completion_event: Duration::from_secs(1),
        }
    }
}

/// How the driver waits for the device: command completions, completion
/// events, and the CQ waits of the verbs API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WaitMode {
    /// Sleep on MSI-X interrupts where the platform has them
    /// ([`Platform::msix_vectors`](platform::Platform::msix_vectors) > 0):
    /// the EQs get vectors, waits arm them and sleep in
    /// [`Platform::wait_interrupt`](platform::Platform::wait_interrupt).
    /// On a platform without interrupts (or if enabling them fails, with a
    /// warning) the driver polls.
    #[default]
    Interrupts,
    /// Poll: waits spin on the device's memory (with
    /// [`Platform::relax`](platform::Platform::relax) and growing sleeps),
    /// and no MSI-X vector is enabled.
    Polling,
}

/// How to bring a device up.
#[derive(Clone, Copy)]
pub struct Config {
    /// How waits wait: interrupts where the platform has them (the
    /// default), or polling.
    pub wait_mode: WaitMode,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// log2 of the entries of the command completion EQ.
    pub cmd_eq_log_size: u8,
    /// log2 of the entries of the asynchronous event EQ (page requests,
    /// port changes, CQ/QP errors).
    pub async_eq_log_size: u8,
    /// log2 of the entries of each completion EQ.
    pub comp_eq_log_size: u8,
    /// Number of completion EQs (1..=[`MAX_COMP_EQS`](crate::MAX_COMP_EQS)).
    pub comp_eqs: u8,
    /// `log_max_qp` asked for with SET_HCA_CAP (clamped to the maximum the
    /// device supports; Linux's default profile asks for 17). `None` keeps
    /// the firmware's current value.
    pub log_max_qp: Option<u8>,
    /// Ask for host-endian 8-byte atomics when the device supports them.
    pub host_endian_atomics: bool,
    /// Run the command interface with signatures (`cmdif_checksum` = 3):
    /// SET_HCA_CAP keeps or turns them on (when the maximum capabilities
    /// allow it; otherwise a warning is logged and they stay off), every
    /// queue entry and input mailbox block is signed and every answer's
    /// entry and output block signatures are checked
    /// ([`Error::MalformedAnswer`](crate::Error::MalformedAnswer) when
    /// wrong). `false` (the default, as Linux): SET_HCA_CAP switches them
    /// off. Either way, until SET_HCA_CAP the driver signs everything it
    /// posts and, once the current capabilities say the firmware signs,
    /// checks the answers.
    pub cmdif_checksum: bool,
    /// Send SET_DRIVER_VERSION (when the `driver_version` capability is set)
    /// with this string.
    pub driver_version: &'static str,
    /// Most firmware pages one MANAGE_PAGES command gives or takes.
    pub max_pages_per_command: u32,
    /// Most firmware pages the driver gives in total (its page budget): at
    /// bring-up a larger demand fails the bring-up, at runtime a page
    /// request beyond it is answered with MANAGE_PAGES op_mod 0 (allocation
    /// failed).
    pub max_firmware_pages: u32,
    /// Smallest DMA chunk (in 4 KiB pages) the page manager allocates.
    pub min_page_chunk: u16,
    /// Receives every command exchange (entry and mailboxes), e.g. a
    /// [`DumpRecorder`](crate::DumpRecorder).
    pub recorder: Option<&'static dyn CommandRecorder>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            wait_mode: WaitMode::default(),
            timeouts: Timeouts::default(),
            cmd_eq_log_size: 5,
            async_eq_log_size: 7,
            comp_eq_log_size: 8,
            comp_eqs: 1,
            log_max_qp: Some(17),
            host_endian_atomics: true,
            cmdif_checksum: false,
            driver_version: concat!("mlx5-rs,hca-driver,", env!("CARGO_PKG_VERSION")),
            max_pages_per_command: 16_384,
            max_firmware_pages: 1 << 20,
            min_page_chunk: 16,
            recorder: None,
        }
    }
}

impl core::fmt::Debug for Config {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Config")
            .field("wait_mode", &self.wait_mode)
            .field("timeouts", &self.timeouts)
            .field("cmd_eq_log_size", &self.cmd_eq_log_size)
            .field("async_eq_log_size", &self.async_eq_log_size)
            .field("comp_eq_log_size", &self.comp_eq_log_size)
            .field("comp_eqs", &self.comp_eqs)
            .field("log_max_qp", &self.log_max_qp)
            .field("host_endian_atomics", &self.host_endian_atomics)
            .field("cmdif_checksum", &self.cmdif_checksum)
            .field("driver_version", &self.driver_version)
            .field("max_pages_per_command", &self.max_pages_per_command)
            .field("max_firmware_pages", &self.max_firmware_pages)
            .field("min_page_chunk", &self.min_page_chunk)
            .field("recorder", &self.recorder.is_some())
            .finish()
    }
}
