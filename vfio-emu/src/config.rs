//! `HCA_EMU_VFIO`: which emulated functions exist, at which PCI addresses,
//! and how their ports are wired.
//!
//! ```text
//! HCA_EMU_VFIO="<bdf>=<model>[,<opt>...][;<bdf>=<model>...]"
//! ```
//!
//! `bdf` in full form (`0000:01:00.0`); `model` one of `cx4`, `cx5`,
//! `cx6dx`; options `ib` | `eth` (port type, default Ethernet), `loop`
//! (port 1 has a loopback plug), `wire=<bdf>` (port 1 cabled to port 1 of
//! another listed function), `sock=<path>,peer=<path>` (port 1 on a Unix
//! datagram socket), `group=<n>` (IOMMU group, default 100 + index).

use hca_emu::{Personality, PortType};

/// The name of the variable.
pub const VAR: &str = "HCA_EMU_VFIO";
/// The variable naming the report file.
pub const REPORT_VAR: &str = "HCA_EMU_VFIO_REPORT";

/// A ConnectX model that can be presented.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Model {
    /// ConnectX-4, PCI 15b3:1013.
    Cx4,
    /// ConnectX-5, PCI 15b3:1017.
    Cx5,
    /// ConnectX-6 Dx, PCI 15b3:101d.
    Cx6Dx,
}

impl Model {
    /// The PCI device ID.
    pub fn device_id(self) -> u16 {
        match self {
            Model::Cx4 => 0x1013,
            Model::Cx5 => 0x1017,
            Model::Cx6Dx => 0x101d,
        }
    }

    /// The name used in the variable.
    pub fn name(self) -> &'static str {
        match self {
            Model::Cx4 => "cx4",
            Model::Cx5 => "cx5",
            Model::Cx6Dx => "cx6dx",
        }
    }
}

/// The hca-emu personality of a model: the one place that maps models to
/// personalities, so that new personalities slot in here.
///
/// # Errors
///
/// [`ConfigError::UnsupportedModel`] for a model hca-emu has no
/// personality for yet.
pub fn personality(model: Model) -> Result<Personality, ConfigError> {
    match model {
        Model::Cx4 => Ok(Personality::ConnectX4),
        Model::Cx5 | Model::Cx6Dx => Err(ConfigError::UnsupportedModel(model.name())),
    }
}

/// How port 1 of a function is wired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wire {
    /// Unplugged.
    None,
    /// A loopback plug: the port's frames come back in on itself.
    Loopback,
    /// Cabled to port 1 of another listed function.
    To(String),
    /// A Unix datagram socket bound at `local`, sending to `peer`.
    Socket {
        /// Path the socket is bound at.
        local: String,
        /// Path frames are sent to.
        peer: String,
    },
}

/// One emulated function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionSpec {
    /// PCI address, `dddd:bb:dd.f`.
    pub bdf: String,
    /// The model.
    pub model: Model,
    /// Port type.
    pub port_type: PortType,
    /// Port 1 wiring.
    pub wire: Wire,
    /// IOMMU group number.
    pub group: u32,
}

/// What is wrong with `HCA_EMU_VFIO`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// An entry without `=<model>`.
    #[error("entry {0:?} is not <bdf>=<model>[,<opt>...]")]
    NoModel(String),
    /// A PCI address not in full form.
    #[error("{0:?} is not a PCI address in full form (dddd:bb:dd.f, such as 0000:01:00.0)")]
    BadBdf(String),
    /// The same address twice.
    #[error("PCI address {0} is listed twice")]
    Duplicate(String),
    /// An unknown model.
    #[error("unknown model {0:?} (known: cx4, cx5, cx6dx)")]
    UnknownModel(String),
    /// A model without a personality in this hca-emu.
    #[error("model {0} has no personality in this build of hca-emu yet (only cx4)")]
    UnsupportedModel(&'static str),
    /// An unknown option.
    #[error(
        "{bdf}: unknown option {opt:?} (known: ib, eth, loop, wire=<bdf>, sock=<path>, peer=<path>, group=<n>)"
    )]
    UnknownOption {
        /// The function.
        bdf: String,
        /// The option.
        opt: String,
    },
    /// A bad option value.
    #[error("{bdf}: {what}")]
    BadOption {
        /// The function.
        bdf: String,
        /// What is wrong.
        what: String,
    },
}

fn check_bdf(s: &str) -> Result<String, ConfigError> {
    let bad = || ConfigError::BadBdf(s.to_string());
    let b = s.as_bytes();
    if b.len() != 12 || b[4] != b':' || b[7] != b':' || b[10] != b'.' {
        return Err(bad());
    }
    let hex = |r: core::ops::Range<usize>| b[r].iter().all(u8::is_ascii_hexdigit);
    if !(hex(0..4) && hex(5..7) && hex(8..10) && (b'0'..=b'7').contains(&b[11])) {
        return Err(bad());
    }
    let dev = u8::from_str_radix(&s[8..10], 16).map_err(|_| bad())?;
    if dev > 0x1f {
        return Err(bad());
    }
    Ok(s.to_ascii_lowercase())
}

/// Parses the variable's value.
///
/// # Errors
///
/// A [`ConfigError`] naming the first thing that is wrong.
pub fn parse(value: &str) -> Result<Vec<FunctionSpec>, ConfigError> {
    let mut out: Vec<FunctionSpec> = Vec::new();
    for (i, entry) in value.split(';').map(str::trim).enumerate() {
        if entry.is_empty() {
            continue;
        }
        let (bdf, rest) = entry
            .split_once('=')
            .ok_or_else(|| ConfigError::NoModel(entry.to_string()))?;
        let bdf = check_bdf(bdf.trim())?;
        if out.iter().any(|f| f.bdf == bdf) {
            return Err(ConfigError::Duplicate(bdf));
        }
        let mut parts = rest.split(',').map(str::trim);
        let model = match parts.next().unwrap_or("") {
            "cx4" => Model::Cx4,
            "cx5" => Model::Cx5,
            "cx6dx" => Model::Cx6Dx,
            m => return Err(ConfigError::UnknownModel(m.to_string())),
        };
        personality(model)?;
        let mut spec = FunctionSpec {
            bdf: bdf.clone(),
            model,
            port_type: PortType::Ethernet,
            wire: Wire::None,
            group: 100 + i as u32,
        };
        let (mut sock, mut peer) = (None, None);
        let bad = |what: String| ConfigError::BadOption {
            bdf: bdf.clone(),
            what,
        };
        let set_wire = |spec: &mut FunctionSpec, w: Wire| {
            if spec.wire != Wire::None {
                return Err(bad(
                    "port 1 is wired twice (loop, wire= and sock= exclude each other)".into(),
                ));
            }
            spec.wire = w;
            Ok(())
        };
        for opt in parts {
            match opt.split_once('=') {
                None if opt == "ib" => spec.port_type = PortType::InfiniBand,
                None if opt == "eth" => spec.port_type = PortType::Ethernet,
                None if opt == "loop" => set_wire(&mut spec, Wire::Loopback)?,
                Some(("wire", to)) => set_wire(&mut spec, Wire::To(check_bdf(to.trim())?))?,
                Some(("sock", p)) if !p.is_empty() => sock = Some(p.to_string()),
                Some(("peer", p)) if !p.is_empty() => peer = Some(p.to_string()),
                Some(("group", n)) => {
                    spec.group = n
                        .parse()
                        .map_err(|_| bad(format!("group={n:?} is not a number")))?;
                }
                _ => {
                    return Err(ConfigError::UnknownOption {
                        bdf: bdf.clone(),
                        opt: opt.to_string(),
                    });
                }
            }
        }
        match (sock, peer) {
            (Some(local), Some(peer)) => set_wire(&mut spec, Wire::Socket { local, peer })?,
            (None, None) => {}
            _ => return Err(bad("sock=<path> and peer=<path> go together".into())),
        }
        out.push(spec);
    }
    if out.is_empty() {
        return Err(ConfigError::NoModel(value.to_string()));
    }
    // Cables: to a listed function, not to itself, and consistent.
    for f in &out {
        if let Wire::To(to) = &f.wire {
            let bad = |what: String| ConfigError::BadOption {
                bdf: f.bdf.clone(),
                what,
            };
            if *to == f.bdf {
                return Err(bad("wire= names the function itself (use loop)".into()));
            }
            let Some(other) = out.iter().find(|o| o.bdf == *to) else {
                return Err(bad(format!("wire={to}: no such function in {VAR}")));
            };
            match &other.wire {
                Wire::None => {}
                Wire::To(back) if *back == f.bdf => {}
                _ => return Err(bad(format!("wire={to}: port 1 of {to} is wired elsewhere"))),
            }
            if out
                .iter()
                .any(|o| o.bdf != f.bdf && o.wire == Wire::To(to.clone()))
            {
                return Err(bad(format!(
                    "wire={to}: another function is cabled to {to} too"
                )));
            }
        }
    }
    Ok(out)
}

/// The cables between listed functions, each once, as index pairs.
pub fn cables(specs: &[FunctionSpec]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (i, f) in specs.iter().enumerate() {
        if let Wire::To(to) = &f.wire {
            if let Some(j) = specs.iter().position(|o| o.bdf == *to) {
                let pair = (i.min(j), i.max(j));
                if !out.contains(&pair) {
                    out.push(pair);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_option() {
        let f = parse("0000:00:10.0=cx4,ib,loop;0000:00:11.0=cx4,wire=0000:00:12.0,group=7; 0000:00:12.0=cx4,eth").unwrap();
        assert_eq!(f.len(), 3);
        assert_eq!(f[0].port_type, PortType::InfiniBand);
        assert_eq!(f[0].wire, Wire::Loopback);
        assert_eq!(f[0].group, 100);
        assert_eq!(f[1].group, 7);
        assert_eq!(f[1].wire, Wire::To("0000:00:12.0".into()));
        assert_eq!(f[2].group, 102);
        assert_eq!(cables(&f), vec![(1, 2)]);
        let s = parse("0000:00:10.0=cx4,sock=/tmp/a,peer=/tmp/b").unwrap();
        assert_eq!(
            s[0].wire,
            Wire::Socket {
                local: "/tmp/a".into(),
                peer: "/tmp/b".into()
            }
        );
    }

    #[test]
    fn names_what_is_wrong() {
        let e = |s: &str| parse(s).unwrap_err().to_string();
        assert!(e("").contains("not <bdf>=<model>"));
        assert!(e("00:10.0=cx4").contains("full form"));
        assert!(e("0000:00:20.0=cx4").contains("full form"));
        assert!(e("0000:00:10.0").contains("not <bdf>=<model>"));
        assert!(e("0000:00:10.0=cx9").contains("unknown model \"cx9\""));
        assert!(e("0000:00:10.0=cx4,fast").contains("unknown option \"fast\""));
        assert!(e("0000:00:10.0=cx4;0000:00:10.0=cx4").contains("listed twice"));
        assert!(e("0000:00:10.0=cx4,group=x").contains("group=\"x\""));
        assert!(e("0000:00:10.0=cx4,wire=0000:00:11.0").contains("no such function"));
        assert!(e("0000:00:10.0=cx4,wire=0000:00:10.0").contains("itself"));
        assert!(e("0000:00:10.0=cx4,loop,wire=0000:00:11.0;0000:00:11.0=cx4").contains("twice"));
        assert!(e("0000:00:10.0=cx4,sock=/a").contains("go together"));
        assert!(
            e("0000:00:10.0=cx4,wire=0000:00:11.0;0000:00:11.0=cx4,loop")
                .contains("wired elsewhere")
        );
    }
}
