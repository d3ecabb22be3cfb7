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
//!
//! `hca capture --pcapng` writes pcapng instead ([`PcapWriter::new_ng`],
//! the format of the IETF draft "PCAP Next Generation (pcapng) Capture
//! File Format", as Wireshark's dumpcap writes it): a section header
//! block whose comment says where the timestamps come from (classic pcap
//! has no field for that), one interface description block (Ethernet,
//! nanosecond `if_tsresol`, a description), and an enhanced packet block
//! per frame, in this machine's byte order.

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
    /// pcapng (enhanced packet blocks) rather than classic records.
    ng: bool,
}

/// pcapng section header block type.
const PCAPNG_SHB: u32 = 0x0a0d_0d0a;
/// pcapng interface description block type.
const PCAPNG_IDB: u32 = 1;
/// pcapng enhanced packet block type.
const PCAPNG_EPB: u32 = 6;
/// pcapng byte-order magic.
const PCAPNG_BYTE_ORDER: u32 = 0x1a2b_3c4d;
/// pcapng option codes: `opt_comment`, `if_description`, `if_tsresol`.
const OPT_COMMENT: u16 = 1;
const IF_DESCRIPTION: u16 = 3;
const IF_TSRESOL: u16 = 9;

/// Appends a pcapng option (code, length, value padded to 4 bytes); a
/// value longer than an option can hold is cut.
fn pcapng_option(out: &mut Vec<u8>, code: u16, value: &[u8]) {
    let v = &value[..value.len().min(usize::from(u16::MAX) & !3)];
    out.extend_from_slice(&code.to_ne_bytes());
    out.extend_from_slice(&(v.len() as u16).to_ne_bytes());
    out.extend_from_slice(v);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// A pcapng block: type, total length, `body` (padded to 4 bytes), total
/// length again.
fn pcapng_block(kind: u32, body: &[u8]) -> Vec<u8> {
    let len = 12 + body.len().next_multiple_of(4);
    let mut b = Vec::with_capacity(len);
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(&(len as u32).to_ne_bytes());
    b.extend_from_slice(body);
    b.resize(len - 4, 0);
    b.extend_from_slice(&(len as u32).to_ne_bytes());
    b
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
            ng: false,
        })
    }

    /// Writes a pcapng section header block (with `comment`, e.g. where
    /// the timestamps come from) and one interface description block
    /// (LINKTYPE_ETHERNET, nanosecond timestamps, `description`) into
    /// `w`; frames follow as enhanced packet blocks of that interface.
    pub fn new_ng(mut w: W, comment: &str, description: &str) -> std::io::Result<Self> {
        let mut shb = Vec::new();
        shb.extend_from_slice(&PCAPNG_BYTE_ORDER.to_ne_bytes());
        shb.extend_from_slice(&1u16.to_ne_bytes());
        shb.extend_from_slice(&0u16.to_ne_bytes());
        // Section length: not given.
        shb.extend_from_slice(&(-1i64).to_ne_bytes());
        pcapng_option(&mut shb, OPT_COMMENT, comment.as_bytes());
        pcapng_option(&mut shb, 0, &[]);
        let mut idb = Vec::new();
        idb.extend_from_slice(&(LINKTYPE_ETHERNET as u16).to_ne_bytes());
        idb.extend_from_slice(&0u16.to_ne_bytes());
        idb.extend_from_slice(&SNAPLEN.to_ne_bytes());
        pcapng_option(&mut idb, IF_DESCRIPTION, description.as_bytes());
        pcapng_option(&mut idb, IF_TSRESOL, &[9]);
        pcapng_option(&mut idb, 0, &[]);
        w.write_all(&pcapng_block(PCAPNG_SHB, &shb))?;
        w.write_all(&pcapng_block(PCAPNG_IDB, &idb))?;
        Ok(Self {
            w,
            frames: 0,
            error: None,
            ng: true,
        })
    }

    /// One frame, received at `t` (since the Unix epoch).
    pub fn frame_at(&mut self, t: Duration, bytes: &[u8]) {
        if self.error.is_some() {
            return;
        }
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
        let caplen = len.min(SNAPLEN);
        if self.ng {
            // Nanoseconds since the epoch, high word first.
            let ns = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
            let mut body = Vec::with_capacity(20 + bytes.len() + 3);
            for v in [0, (ns >> 32) as u32, ns as u32, caplen, len] {
                body.extend_from_slice(&v.to_ne_bytes());
            }
            body.extend_from_slice(&bytes[..caplen as usize]);
            match self.w.write_all(&pcapng_block(PCAPNG_EPB, &body)) {
                Ok(()) => self.frames += 1,
                Err(e) => self.error = Some(e),
            }
            return;
        }
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
    fn pcapng_has_the_comment_a_nanosecond_interface_and_packet_blocks() {
        let mut out = Vec::new();
        let mut w = PcapWriter::new_ng(&mut out, "timestamps: x", "port 1").unwrap();
        w.frame_at(Duration::new(5, 7), &[0xab; 61]);
        w.flush().unwrap();
        assert_eq!(w.frames(), 1);
        drop(w);
        let word = |o: usize| u32::from_ne_bytes(out[o..o + 4].try_into().unwrap());
        let half = |o: usize| u16::from_ne_bytes(out[o..o + 2].try_into().unwrap());
        // SHB: type, length, magic, 1.0, section length -1, the comment
        // (13 bytes padded to 16), end of options, length.
        assert_eq!((word(0), word(8)), (0x0a0d_0d0a, 0x1a2b_3c4d));
        assert_eq!((half(12), half(14)), (1, 0));
        let shb = word(4) as usize;
        assert_eq!(shb, 12 + 16 + 4 + 16 + 4);
        assert_eq!((half(24), half(26)), (1, 13));
        assert_eq!(&out[28..41], b"timestamps: x");
        assert_eq!(word(shb - 4), shb as u32);
        // IDB: Ethernet, snaplen, if_description, if_tsresol 9.
        let i = shb;
        assert_eq!((word(i), half(i + 8), word(i + 12)), (1, 1, SNAPLEN));
        assert_eq!((half(i + 16), half(i + 18)), (3, 6));
        assert_eq!(&out[i + 20..i + 26], b"port 1");
        assert_eq!((half(i + 28), half(i + 30), out[i + 32]), (9, 1, 9));
        let idb = word(i + 4) as usize;
        // EPB: interface 0, the time in nanoseconds, lengths, the frame
        // padded to 64.
        let e = i + idb;
        let ns = 5_000_000_007u64;
        assert_eq!(word(e), 6);
        assert_eq!(word(e + 4) as usize, 12 + 20 + 64);
        assert_eq!(
            (word(e + 8), word(e + 12), word(e + 16)),
            (0, (ns >> 32) as u32, ns as u32)
        );
        assert_eq!((word(e + 20), word(e + 24)), (61, 61));
        assert_eq!(&out[e + 28..e + 89], &[0xab; 61]);
        assert_eq!(out.len(), e + 12 + 20 + 64);
    }

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
