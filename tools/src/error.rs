//! The tool's error type: every failure is one line on stderr and a
//! non-zero exit code.

use std::path::PathBuf;

/// Everything a command of `hca` can fail at.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// The platform (sysfs, VFIO, DMA memory, BAR mapping) failed; its
    /// message says how to fix it.
    #[error("{0}")]
    Platform(#[from] platform::Error),

    /// Bringing the device up failed (the driver unwound what it did).
    #[error("bring-up of {device} failed: {source}")]
    BringUp {
        /// The device.
        device: String,
        /// What the driver reported.
        source: hca_driver::Error,
    },

    /// A driver operation on an open device failed.
    #[error("{what}: {source}")]
    Driver {
        /// What the tool was doing.
        what: String,
        /// What the driver reported.
        source: hca_driver::Error,
    },

    /// Tearing the device down failed after the command itself succeeded.
    #[error("teardown of {device} failed: {source}")]
    Teardown {
        /// The device.
        device: String,
        /// What the driver reported.
        source: hca_driver::Error,
    },

    /// A file that should be a Linux mlx5_core command trace is not one (or
    /// is cut short, or contradicts itself).
    #[error("{path}: not a valid mlx5 command trace: {source}")]
    Trace {
        /// The file.
        path: PathBuf,
        /// What the parser found.
        source: firmware_cmds::Error,
    },

    /// A signature in a trace is wrong (`hca trace --check-signatures`).
    #[error("{path}: command #{index} {opcode} (line {line}): {what}: {source}")]
    Signature {
        /// The file.
        path: PathBuf,
        /// The command's 1-based position.
        index: usize,
        /// Line of its INPUT dump.
        line: usize,
        /// Its opcode.
        opcode: firmware_cmds::Opcode,
        /// The entry or block.
        what: String,
        /// The bad signature.
        source: firmware_cmds::Error,
    },

    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },

    /// Writing the output failed (other than a closed pipe, which ends the
    /// program quietly).
    #[error("writing the output: {0}")]
    Output(std::io::Error),

    /// A capability type the device does not report.
    #[error("the device does not report {name} capabilities (cmd_hca_cap.{flag} = 0)")]
    CapsNotSupported {
        /// The type's name.
        name: &'static str,
        /// The general capability flag that announces it.
        flag: &'static str,
    },

    /// An argument the tool refuses.
    #[error("{0}")]
    Usage(String),
}

impl ToolError {
    /// A driver error while doing `what`.
    pub fn driver(what: impl Into<String>, source: hca_driver::Error) -> Self {
        ToolError::Driver {
            what: what.into(),
            source,
        }
    }

    /// Whether this is a write to a closed pipe (`hca trace ... | head`).
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, ToolError::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

impl From<std::io::Error> for ToolError {
    fn from(e: std::io::Error) -> Self {
        ToolError::Output(e)
    }
}

impl From<serde_json::Error> for ToolError {
    fn from(e: serde_json::Error) -> Self {
        match e.io_error_kind() {
            Some(kind) => ToolError::Output(std::io::Error::from(kind)),
            None => ToolError::Output(std::io::Error::other(e)),
        }
    }
}

/// The tool's result type.
pub type Result<T, E = ToolError> = std::result::Result<T, E>;
