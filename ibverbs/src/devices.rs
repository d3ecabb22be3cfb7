//! The devices of the library: named by `HCA_IBV_DEVICES`, brought up on
//! first use.
//!
//! `HCA_IBV_DEVICES` is a `;`-separated list of entries:
//!
//! - `[NAME=]BDF`: a PCI function bound to vfio-pci (`0000:02:00.0` or
//!   `02:00.0`), driven through `platform::vfio`; its name defaults to
//!   `mlx5_<i>` (`i` its position in the list);
//! - `emu:NAME[=OPTIONS]`: an emulated HCA of `hca-emu` in this process.
//!   OPTIONS, separated by `,`: the personality (`cx4`, the default,
//!   `cx5`, `cx6dx`); `sock=PATH,peer=PATH` cables port 1 to a Unix
//!   datagram socket wire (bound at `sock`, frames go to `peer`: the other
//!   process names the two swapped), `udp=HOST:PORT,udppeer=HOST:PORT` to
//!   a UDP one; `wire=NAME` cables port 1 to port 1 of another emulated
//!   device of the list (in this process); `loopback` (or `loop`) plugs
//!   port 1 back into itself; `ib` makes the ports InfiniBand (`eth`, the
//!   default, Ethernet/RoCE); `seed=N` sets the emulator's seed (MAC
//!   address and GIDs; by default derived from the wire's local end or the
//!   name, so two devices differ).
//!
//! Example: `HCA_IBV_DEVICES="emu:emu0=cx4,sock=/tmp/a,peer=/tmp/b"` in
//! one process and `"emu:emu0=cx4,sock=/tmp/b,peer=/tmp/a"` in the other.
//! Unset or empty, there is no device (as on a machine without RDMA
//! devices).

use std::ffi::c_char;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use hca_driver::{Config, Hca};
use hca_emu::{Clock, EmuConfig, EmuHca, Personality, PortType, WireSpec};
use platform::Either;
use platform::vfio::{VfioOptions, VfioPlatform, normalize_bdf};

use crate::async_ev::Subscribers;
use crate::ffi::{self, ibv_device};
use crate::{Dev, P};

/// The environment variable naming the devices.
pub const DEVICES_ENV: &str = "HCA_IBV_DEVICES";

/// What an entry of `HCA_IBV_DEVICES` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DevSpec {
    /// A PCI function under VFIO (normalised address).
    Vfio(String),
    /// An emulated HCA.
    Emu {
        /// Which device it pretends to be.
        personality: Personality,
        /// The socket wire on port 1.
        wire: Option<WireSpec>,
        /// Port 1 looped back.
        loopback: bool,
        /// Port 1 cabled to port 1 of this device of the list.
        cable: Option<String>,
        /// Ethernet or InfiniBand ports.
        port_type: PortType,
        /// The emulator's seed.
        seed: Option<u64>,
    },
}

/// A parsed entry: name and what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The device name (`ibv_get_device_name`).
    pub name: String,
    /// The device.
    pub spec: DevSpec,
}

/// Parses `HCA_IBV_DEVICES`. Errors name the bad entry and why.
pub fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let mut out: Vec<Entry> = Vec::new();
    for (i, raw) in text.split(';').enumerate() {
        let e = raw.trim();
        if e.is_empty() {
            continue;
        }
        let entry = if let Some(rest) = e.strip_prefix("emu:") {
            let (name, opts) = rest.split_once('=').unwrap_or((rest, ""));
            let name = check_name(name, e)?;
            let mut personality = Personality::ConnectX4;
            let (mut sock, mut peer, mut udp, mut udppeer) = (None, None, None, None);
            let mut loopback = false;
            let mut cable = None;
            let mut port_type = PortType::Ethernet;
            let mut seed = None;
            for o in opts.split(',').map(str::trim).filter(|o| !o.is_empty()) {
                let (k, v) = o.split_once('=').unwrap_or((o, ""));
                match (k, v) {
                    ("cx4", "") => personality = Personality::ConnectX4,
                    ("cx5", "") => personality = Personality::ConnectX5,
                    ("cx6dx", "") => personality = Personality::ConnectX6Dx,
                    ("loopback" | "loop", "") => loopback = true,
                    ("ib", "") => port_type = PortType::InfiniBand,
                    ("eth", "") => port_type = PortType::Ethernet,
                    ("wire", n) if !n.is_empty() => cable = Some(n.to_string()),
                    ("sock", p) if !p.is_empty() => sock = Some(p.to_string()),
                    ("peer", p) if !p.is_empty() => peer = Some(p.to_string()),
                    ("udp", a) if !a.is_empty() => udp = Some(a.to_string()),
                    ("udppeer", a) if !a.is_empty() => udppeer = Some(a.to_string()),
                    ("seed", n) => {
                        seed = Some(n.parse::<u64>().map_err(|_| {
                            format!("{DEVICES_ENV}: entry `{e}`: seed `{n}` is not a number")
                        })?)
                    }
                    _ => {
                        return Err(format!(
                            "{DEVICES_ENV}: entry `{e}`: unknown option `{o}` (cx4, cx5, cx6dx, eth, ib, loopback, wire=NAME, sock=PATH, peer=PATH, udp=HOST:PORT, udppeer=HOST:PORT, seed=N)"
                        ));
                    }
                }
            }
            let wire = match (sock, peer, udp, udppeer) {
                (None, None, None, None) => None,
                (Some(s), Some(p), None, None) => Some(format!("unix:{s},{p}")),
                (None, None, Some(s), Some(p)) => Some(format!("udp:{s},{p}")),
                _ => {
                    return Err(format!(
                        "{DEVICES_ENV}: entry `{e}`: a wire is sock=PATH and peer=PATH, or udp=HOST:PORT and udppeer=HOST:PORT"
                    ));
                }
            };
            let wire = wire
                .map(|w| {
                    w.parse::<WireSpec>()
                        .map_err(|err| format!("{DEVICES_ENV}: entry `{e}`: {err}"))
                })
                .transpose()?;
            if usize::from(wire.is_some()) + usize::from(loopback) + usize::from(cable.is_some())
                > 1
            {
                return Err(format!(
                    "{DEVICES_ENV}: entry `{e}`: port 1 is on one of a socket wire, a wire to another device, or a loopback plug"
                ));
            }
            Entry {
                name,
                spec: DevSpec::Emu {
                    personality,
                    wire,
                    loopback,
                    cable,
                    port_type,
                    seed,
                },
            }
        } else {
            let (name, bdf) = match e.split_once('=') {
                Some((n, b)) => (check_name(n, e)?, b),
                None => (format!("mlx5_{i}"), e),
            };
            let bdf =
                normalize_bdf(bdf).map_err(|err| format!("{DEVICES_ENV}: entry `{e}`: {err}"))?;
            Entry {
                name,
                spec: DevSpec::Vfio(bdf),
            }
        };
        if out.iter().any(|o| o.name == entry.name) {
            return Err(format!(
                "{DEVICES_ENV}: two devices are named `{}`",
                entry.name
            ));
        }
        out.push(entry);
    }
    // A device-to-device wire names another emulated device, which does not
    // name one itself (the cable is made by the side that names it).
    for e in &out {
        if let DevSpec::Emu {
            cable: Some(peer), ..
        } = &e.spec
        {
            let target = out.iter().find(|o| &o.name == peer);
            match target.map(|t| &t.spec) {
                Some(DevSpec::Emu {
                    cable: None,
                    wire: None,
                    loopback: false,
                    ..
                }) if peer != &e.name => {}
                _ => {
                    return Err(format!(
                        "{DEVICES_ENV}: `{}`: wire={peer} must name another emulated device of the list whose port 1 is free",
                        e.name
                    ));
                }
            }
        }
    }
    Ok(out)
}

fn check_name(name: &str, entry: &str) -> Result<String, String> {
    let ok = !name.is_empty()
        && name.len() < ffi::IBV_SYSFS_NAME_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(name.to_string())
    } else {
        Err(format!(
            "{DEVICES_ENV}: entry `{entry}`: the name `{name}` must be 1 to 63 characters of letters, digits, `_`, `-`, `.`"
        ))
    }
}

/// How often the service thread runs `Hca::service` (health poll, events,
/// firmware page requests), as a polling driver must.
const SERVICE_PERIOD: Duration = Duration::from_millis(20);

/// A device of the list: the `struct ibv_device` programs see (first, so
/// that its address is the entry's), what it is, and its state.
#[repr(C)]
pub struct DevEntry {
    /// The C view.
    pub c: ibv_device,
    /// What the device is.
    pub entry: Entry,
    state: Mutex<DevState>,
}

// SAFETY: the raw pointers in `c` are null (the obsolete ops); the rest is
// plain data and a mutex.
unsafe impl Sync for DevEntry {}
// SAFETY: as above.
unsafe impl Send for DevEntry {}

#[derive(Default)]
struct DevState {
    /// The emulated HCA, built at first use and kept for the process (its
    /// wire socket stays bound).
    emu: Option<EmuHca>,
    /// The brought-up HCA while a context uses it.
    hca: Option<Arc<Dev>>,
    /// Open contexts.
    users: usize,
    /// Node GUID, once known.
    guid: Option<u64>,
}

/// An HCA brought up, with the thread that services it.
pub struct Running {
    /// The HCA.
    pub hca: Arc<Hca<P>>,
    /// The contexts that get its asynchronous events.
    pub subscribers: Arc<Subscribers>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Running {
    fn start(hca: Hca<P>) -> Self {
        let hca = Arc::new(hca);
        let stop = Arc::new(AtomicBool::new(false));
        let subscribers = Arc::new(Subscribers::default());
        let (h, s, subs) = (hca.clone(), stop.clone(), subscribers.clone());
        // It never sleeps on an interrupt: a completion channel's
        // descriptor watches the MSI-X eventfd, which such a sleep would
        // empty (see hca_driver::verbs::CompChannel).
        let thread = std::thread::Builder::new()
            .name("hca-ibverbs service".into())
            .spawn(move || {
                while !s.load(Ordering::Acquire) {
                    if let Err(e) = h.service() {
                        log::warn!("service: {e}");
                    }
                    subs.dispatch(&h);
                    std::thread::sleep(SERVICE_PERIOD);
                }
            })
            .ok();
        Running {
            hca,
            subscribers,
            stop,
            thread,
        }
    }

    /// Stops the service thread and returns the HCA.
    fn stop(mut self) -> Arc<Hca<P>> {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.hca.clone()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn fill(dst: &mut [c_char], s: &str) {
    let max = dst.len() - 1;
    for (d, b) in dst.iter_mut().zip(s.bytes().take(max)) {
        *d = b as c_char;
    }
}

impl DevEntry {
    fn new(entry: Entry) -> Self {
        // SAFETY: ibv_device is plain data and null pointers; all zero is a
        // valid value.
        let mut c: ibv_device = unsafe { core::mem::zeroed() };
        c.node_type = ffi::IBV_NODE_CA;
        c.transport_type = ffi::IBV_TRANSPORT_IB;
        fill(&mut c.name, &entry.name);
        fill(&mut c.dev_name, &format!("uverbs-{}", entry.name));
        let path = match &entry.spec {
            DevSpec::Vfio(bdf) => format!("/sys/bus/pci/devices/{bdf}"),
            DevSpec::Emu { .. } => format!("/hca-emu/{}", entry.name),
        };
        fill(&mut c.dev_path, &path);
        fill(&mut c.ibdev_path, &path);
        DevEntry {
            c,
            entry,
            state: Mutex::new(DevState::default()),
        }
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.entry.name
    }

    fn state(&self) -> std::sync::MutexGuard<'_, DevState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Builds the emulated HCA of an `emu:` device (once; kept for the
    /// process, so that its wire stays bound).
    fn emulator(&self, st: &mut DevState) -> Result<(), String> {
        let DevSpec::Emu {
            personality,
            wire,
            loopback,
            cable,
            port_type,
            seed,
        } = &self.entry.spec
        else {
            return Err(format!("{}: not an emulated device", self.entry.name));
        };
        if st.emu.is_some() {
            return Ok(());
        }
        let default_seed = EmuConfig::default().seed;
        let seed = seed.unwrap_or_else(|| {
            let key = wire
                .as_ref()
                .map_or_else(|| self.entry.name.clone(), |w| w.local_name());
            key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            }) ^ default_seed
        });
        let emu = EmuHca::new(EmuConfig {
            personality: *personality,
            port_type: *port_type,
            clock: Clock::Real,
            seed,
            ..EmuConfig::default()
        });
        let name = &self.entry.name;
        if let Some(peer) = cable {
            let other = devices()
                .ok()
                .and_then(|l| l.iter().find(|d| d.name() == peer))
                .ok_or_else(|| format!("{name}: wire={peer}: no such device"))?;
            // The peer names no wire itself (checked when parsing), so it
            // never takes this device's lock: no lock-order inversion.
            let mut ost = other.state();
            other.emulator(&mut ost)?;
            let oemu = ost.emu.as_ref().ok_or("no emulator")?;
            hca_emu::connect(&emu, 1, oemu, 1).map_err(|e| format!("{name}: wire={peer}: {e}"))?;
        } else if let Some(w) = wire {
            emu.cable_to(1, w)
                .map_err(|e| format!("{name}: wire {w}: {e}"))?;
        } else if *loopback {
            emu.plug_loopback(1)
                .map_err(|e| format!("{name}: loopback: {e}"))?;
        }
        st.emu = Some(emu);
        Ok(())
    }

    fn platform(&self, st: &mut DevState) -> Result<P, String> {
        match &self.entry.spec {
            DevSpec::Vfio(bdf) => VfioPlatform::open(bdf, VfioOptions::default())
                .map(Either::Right)
                .map_err(|e| format!("{}: {bdf}: {e}", self.entry.name)),
            DevSpec::Emu { .. } => {
                self.emulator(st)?;
                Ok(Either::Left(
                    st.emu.as_ref().map(EmuHca::platform).ok_or("no emulator")?,
                ))
            }
        }
    }

    fn bring_up(&self, st: &mut DevState) -> Result<Arc<Dev>, String> {
        if let Some(h) = &st.hca {
            return Ok(h.clone());
        }
        let p = self.platform(st)?;
        let hca = Hca::open(p, Config::default())
            .map_err(|f| format!("{}: bring-up: {}", self.entry.name, f.error))?;
        st.guid = Some(hca.info().node_guid);
        let dev = Arc::new(Dev {
            running: Running::start(hca),
        });
        st.hca = Some(dev.clone());
        Ok(dev)
    }

    /// Takes a user of the device (a context), bringing it up first if
    /// nobody uses it.
    pub fn acquire(&self) -> Result<Arc<Dev>, String> {
        let mut st = self.state();
        let d = self.bring_up(&mut st)?;
        st.users += 1;
        Ok(d)
    }

    /// Gives back a user; the last one tears the device down. `dev` is the
    /// user's handle (dropped here).
    pub fn release(&self, dev: Arc<Dev>) -> Result<(), String> {
        let mut st = self.state();
        drop(dev);
        st.users = st.users.saturating_sub(1);
        if st.users > 0 {
            return Ok(());
        }
        let Some(d) = st.hca.take() else {
            return Ok(());
        };
        close_dev(d, self.name())
    }

    /// The node GUID (bringing the device up and down again if nobody
    /// uses it).
    pub fn guid(&self) -> Result<u64, String> {
        let mut st = self.state();
        if let Some(g) = st.guid {
            return Ok(g);
        }
        let d = self.bring_up(&mut st)?;
        let g = d.running.hca.info().node_guid;
        if st.users == 0 {
            st.hca = None;
            close_dev(d, self.name())?;
        }
        Ok(g)
    }
}

fn close_dev(d: Arc<Dev>, name: &str) -> Result<(), String> {
    let Some(dev) = Arc::into_inner(d) else {
        return Err(format!("{name}: still in use at teardown"));
    };
    let hca = dev.running.stop();
    match Arc::into_inner(hca) {
        Some(h) => h
            .close()
            .map(drop)
            .map_err(|f| format!("{name}: teardown: {}", f.error)),
        None => Err(format!("{name}: objects still hold the HCA at teardown")),
    }
}

/// The devices of the unit tests: two emulated ConnectX-4s cabled port to
/// port, one with a loopback plug, and a ConnectX-5 (packet pacing).
#[cfg(test)]
pub const TEST_DEVICES: &str = "emu:ta=wire=tb;emu:tb;emu:tl=loop;emu:t5=cx5";

static DEVICES: OnceLock<Result<Vec<&'static DevEntry>, String>> = OnceLock::new();

/// The devices (parsed once; a bad variable is reported once on stderr).
pub fn devices() -> Result<&'static [&'static DevEntry], &'static str> {
    let r = DEVICES.get_or_init(|| {
        #[cfg(not(test))]
        let text = std::env::var(DEVICES_ENV).unwrap_or_default();
        // The unit tests of the C API run in one process on these devices,
        // whatever the environment.
        #[cfg(test)]
        let text = TEST_DEVICES.to_string();
        let r = parse(&text).map(|es| {
            es.into_iter()
                .map(|e| &*Box::leak(Box::new(DevEntry::new(e))))
                .collect()
        });
        if let Err(e) = &r {
            eprintln!("libibverbs (hca-ibverbs): {e}");
        }
        r
    });
    match r {
        Ok(v) => Ok(v),
        Err(e) => Err(e),
    }
}

/// The entry a `struct ibv_device *` points to, if it is one of ours.
pub fn find(dev: *const ibv_device) -> Option<&'static DevEntry> {
    let list = devices().ok()?;
    list.iter()
        .copied()
        .find(|e| core::ptr::eq(&e.c as *const ibv_device, dev))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pci_and_emulated_entries() {
        let es =
            parse("0000:02:00.0; nic=03:00.1;emu:e0=cx5,sock=/tmp/a,peer=/tmp/b;emu:e1=loopback")
                .unwrap();
        assert_eq!(es.len(), 4);
        assert_eq!(es[0].name, "mlx5_0");
        assert_eq!(es[0].spec, DevSpec::Vfio("0000:02:00.0".into()));
        assert_eq!(es[1].name, "nic");
        assert_eq!(es[1].spec, DevSpec::Vfio("0000:03:00.1".into()));
        match &es[2].spec {
            DevSpec::Emu {
                personality, wire, ..
            } => {
                assert_eq!(*personality, Personality::ConnectX5);
                assert_eq!(wire.as_ref().unwrap().to_string(), "unix:/tmp/a,/tmp/b");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(es[3].spec, DevSpec::Emu { loopback: true, .. }));
        let es = parse("emu:a=ib,wire=b;emu:b=loop,cx6dx").unwrap_err();
        assert!(es.contains("port 1 is free"), "{es}");
        let es = parse("emu:a=ib,wire=b;emu:b=ib").unwrap();
        assert!(matches!(
            &es[0].spec,
            DevSpec::Emu { cable: Some(b), port_type: PortType::InfiniBand, .. } if b == "b"
        ));
        assert!(parse("").unwrap().is_empty());
    }

    #[test]
    fn refuses_bad_entries_naming_them() {
        for (bad, why) in [
            ("emu:x=cx9", "unknown option `cx9`"),
            ("emu:x=sock=/a", "a wire is"),
            ("emu:=cx4", "the name"),
            ("zz:zz", "zz:zz"),
            ("emu:a;emu:a", "two devices are named `a`"),
            ("emu:a=seed=x", "seed `x`"),
            ("emu:a=loopback,sock=/a,peer=/b", "port 1 is on one of"),
            ("emu:a=wire=b", "wire=b must name another"),
            ("emu:a=wire=a", "wire=a must name another"),
            ("emu:a=wire=b;emu:b=wire=a", "must name another"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
