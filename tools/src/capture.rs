//! pcap files (LINKTYPE_ETHERNET, nanosecond timestamps), read by tshark,
//! Wireshark or tcpdump: [`PcapWriter`], which `hca capture -w` writes
//! its frames with, and `--pcap FILE`, every frame on the emulated HCA's
//! wire.
//!
//! The frames come from the emulator's tap on the port
//! ([`hca_emu::EmuHca::capture`]), both directions, as seen at the port.
//! The file format is written here: a 24-byte file header and a 16-byte
//! header in front of each frame (the pcap format of libpcap's
//! `pcap-savefile(5)`, "nanosecond" variant with magic 0xa1b23c4d), in
//! this machine's byte order, as libpcap writes it.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hca_emu::{Direction, EmuHca};

use crate::error::{Result, ToolError};

/// Magic of a pcap file with nanosecond timestamps.
const MAGIC_NSEC: u32 = 0xa1b2_3c4d;
/// LINKTYPE_ETHERNET.
const LINKTYPE_ETHERNET: u32 = 1;
/// The snapshot length written in the header: every frame is whole
/// (the emulator's largest frame is 64 KiB).
const SNAPLEN: u32 = 262_144;

/// A pcap file being written (`-w` of `hca capture`, `--pcap` of the
/// emulator's wire tap): the file header at creation, then one record per
/// frame; the first write error is kept and reported by
/// [`flush`](Self::flush), later frames are then dropped.
pub struct PcapWriter<W: Write> {
    w: W,
    frames: u64,
    error: Option<std::io::Error>,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the 24-byte file header into `w` (nanosecond timestamps,
    /// LINKTYPE_ETHERNET, this machine's byte order).
    pub fn new(mut w: W) -> std::io::Result<Self> {
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&MAGIC_NSEC.to_ne_bytes());
        h[4..6].copy_from_slice(&2u16.to_ne_bytes());
        h[6..8].copy_from_slice(&4u16.to_ne_bytes());
        // thiszone and sigfigs: 0.
        h[16..20].copy_from_slice(&SNAPLEN.to_ne_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_ne_bytes());
        w.write_all(&h)?;
        Ok(Self {
            w,
            frames: 0,
            error: None,
        })
    }

    /// One frame, received at `t` (since the Unix epoch).
    pub fn frame_at(&mut self, t: Duration, bytes: &[u8]) {
        if self.error.is_some() {
            return;
        }
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        let caplen = len.min(SNAPLEN);
        let mut h = [0u8; 16];
        // pcap's seconds are 32 bits (until 2106).
        h[0..4].copy_from_slice(&(t.as_secs() as u32).to_ne_bytes());
        h[4..8].copy_from_slice(&t.subsec_nanos().to_ne_bytes());
        h[8..12].copy_from_slice(&caplen.to_ne_bytes());
        h[12..16].copy_from_slice(&len.to_ne_bytes());
        let r = self
            .w
            .write_all(&h)
            .and_then(|()| self.w.write_all(&bytes[..caplen as usize]));
        match r {
            Ok(()) => self.frames += 1,
            Err(e) => self.error = Some(e),
        }
    }

    /// One frame, received now (the host's clock).
    pub fn frame(&mut self, bytes: &[u8]) {
        self.frame_at(host_time(), bytes);
    }

    /// Frames written so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Flushes what is buffered; the first write error, if any.
    pub fn flush(&mut self) -> std::io::Result<()> {
        match self.error.take() {
            Some(e) => Err(e),
            None => self.w.flush(),
        }
    }
}

/// The host's clock as a pcap timestamp (time since the Unix epoch).
pub fn host_time() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

type Writer = PcapWriter<BufWriter<File>>;

/// A running capture of one port of an emulated HCA into a pcap file.
pub struct Capture {
    path: PathBuf,
    writer: Arc<Mutex<Writer>>,
    port: u8,
}

impl Capture {
    /// Creates `path` (its pcap header written at once) and taps `port`
    /// of `emu`.
    pub fn start(emu: &EmuHca, port: u8, path: &Path) -> Result<Self> {
        let file_err = |source| ToolError::File {
            path: path.to_path_buf(),
            source,
        };
        let f = File::create(path).map_err(file_err)?;
        let writer = Arc::new(Mutex::new(
            PcapWriter::new(BufWriter::new(f)).map_err(file_err)?,
        ));
        let tap = writer.clone();
        emu.capture(
            port,
            Arc::new(move |_port: u8, _dir: Direction, bytes: &[u8]| {
                if let Ok(mut g) = tap.lock() {
                    g.frame(bytes);
                }
            }),
        )
        .map_err(|e| ToolError::Usage(format!("--pcap {}: {e}", path.display())))?;
        Ok(Self {
            path: path.to_path_buf(),
            writer,
            port,
        })
    }

    /// Stops the capture (`emu` is the HCA it taps), flushes the file and
    /// says on stderr how many frames it holds; the first write error, if
    /// any.
    pub fn finish(self, emu: &EmuHca) -> Result<u64> {
        emu.stop_capture(self.port);
        let mut g = self.writer.lock().map_err(|_| {
            ToolError::Usage(format!("--pcap {}: writer poisoned", self.path.display()))
        })?;
        g.flush().map_err(|source| ToolError::File {
            path: self.path.clone(),
            source,
        })?;
        eprintln!("hca: --pcap {}: {} frames", self.path.display(), g.frames());
        Ok(g.frames())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_a_pcap_of_ethernet_frames() {
        let dir = std::env::temp_dir().join(format!("hca-pcap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.pcap");
        let emu = EmuHca::new(hca_emu::EmuConfig::default());
        let c = Capture::start(&emu, 1, &path).unwrap();
        c.writer.lock().unwrap().frame(&[0xaa; 60]);
        assert_eq!(c.finish(&emu).unwrap(), 1);
        let b = std::fs::read(&path).unwrap();
        assert_eq!(b.len(), 24 + 16 + 60);
        assert_eq!(u32::from_ne_bytes(b[0..4].try_into().unwrap()), MAGIC_NSEC);
        assert_eq!(u32::from_ne_bytes(b[20..24].try_into().unwrap()), 1);
        assert_eq!(u32::from_ne_bytes(b[32..36].try_into().unwrap()), 60);
        assert_eq!(u32::from_ne_bytes(b[36..40].try_into().unwrap()), 60);
        assert_eq!(&b[40..], &[0xaa; 60][..]);
        let e = Capture::start(&emu, 9, &path).err().unwrap();
        assert!(e.to_string().contains("port 9"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
