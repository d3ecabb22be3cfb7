//! `ibv_create_flow` / `ibv_destroy_flow` on raw packet QPs (and RSS
//! QPs), over the driver's NIC RX flow tables ([`hca_driver::flow`]).
//!
//! The flows of a device are kept here, and the flow tables are built
//! from them:
//! - table 0 (level 0, the NIC RX root, 4096 entries) holds the
//!   `IBV_FLOW_ATTR_NORMAL` flows, one flow group per flow (its match
//!   criteria are the flow's own), in the order of their `priority`
//!   (lower first, as libibverbs orders them; equal priorities in the
//!   order they were made), since the entry with the lowest index that
//!   matches wins;
//! - its misses go to table 1 (level 1), whose one catch-all entry
//!   delivers to the QPs of the `IBV_FLOW_ATTR_ALL_DEFAULT` flows and the
//!   `IBV_FLOW_ATTR_SNIFFER` flows; a frame nothing takes is dropped
//!   (the default miss action);
//! - a sniffer QP is also a destination of every normal rule (up to
//!   eight destinations a rule), so it sees every frame the port
//!   receives.
//!
//! A change (a flow made or destroyed) rebuilds the device's tables from
//! the list. Flows of a context that closes without destroying them are
//! destroyed with it, as the kernel cleans up a closed uverbs file.
//!
//! Errors are the kernel path's (`ib_uverbs` with mlx5_ib): a malformed
//! attribute or spec, an unknown spec type, a port other than 1 or a QP
//! that is not a raw packet QP `EINVAL`; a spec kind or field this
//! implementation does not match on (tunnels, inner headers, MPLS, ESP,
//! IPv6 flow label, traffic class and hop limit, IPv4 TOS, TTL and
//! flags, counters, `IBV_FLOW_ATTR_MC_DEFAULT`, flow attribute
//! flags) `EOPNOTSUPP`; the IPv4 `proto` and IPv6 `next_hdr` match the
//! `ip_protocol`; more normal flows than table 0 has
//! entries `ENOMEM`.
//!
//! `IBV_FLOW_SPEC_ACTION_TAG` sets the rule's `flow_context.flow_tag`: its
//! frames' receive completions report the tag (`ibv_wc_read_flow_tag`).
//! As mlx5_ib: a `tag_id` of 24 bits or more is `EINVAL`, and so is a tag
//! on a default or sniffer flow; a device without flow tags on NIC RX
//! tables `EOPNOTSUPP`; a second tag spec in one flow `EINVAL`.

use core::ffi::c_int;
use core::ptr;
use std::sync::{Arc, Mutex};

use hca_driver::Hca;
use hca_driver::Tirn;
use hca_driver::flow::{FlowDest, FlowGroup, FlowRule, FlowTable, MAX_FLOW_DESTS, TirDest};
use hca_driver::steering::{FlowMatch, FlowSpec, Masked};

use crate::ffi::*;
use crate::registry::{self, Kind};
use crate::verbs::{QpObj, fail, live};
use crate::{P, errno_of, guard};

// `enum ibv_flow_attr_type`.
const IBV_FLOW_ATTR_NORMAL: u32 = 0;
const IBV_FLOW_ATTR_ALL_DEFAULT: u32 = 1;
const IBV_FLOW_ATTR_MC_DEFAULT: u32 = 2;
const IBV_FLOW_ATTR_SNIFFER: u32 = 3;

// `enum ibv_flow_spec_type`.
const IBV_FLOW_SPEC_ETH: u32 = 0x20;
const IBV_FLOW_SPEC_IPV4: u32 = 0x30;
const IBV_FLOW_SPEC_IPV6: u32 = 0x31;
const IBV_FLOW_SPEC_IPV4_EXT: u32 = 0x32;
const IBV_FLOW_SPEC_MPLS: u32 = 0x60;
const IBV_FLOW_SPEC_TCP: u32 = 0x40;
const IBV_FLOW_SPEC_UDP: u32 = 0x41;
const IBV_FLOW_SPEC_VXLAN_TUNNEL: u32 = 0x50;
const IBV_FLOW_SPEC_GRE: u32 = 0x51;
const IBV_FLOW_SPEC_ESP: u32 = 0x34;
const IBV_FLOW_SPEC_INNER: u32 = 0x100;
const IBV_FLOW_SPEC_ACTION_TAG: u32 = 0x1000;
const IBV_FLOW_SPEC_ACTION_DROP: u32 = 0x1001;
const IBV_FLOW_SPEC_ACTION_HANDLE: u32 = 0x1002;
const IBV_FLOW_SPEC_ACTION_COUNT: u32 = 0x1003;

/// What a flow does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FlowKind {
    Normal,
    AllDefault,
    Sniffer,
}

/// One flow of a device.
struct Flow {
    id: u64,
    /// The context that made it (its flows go when it closes).
    ctx: usize,
    kind: FlowKind,
    priority: u16,
    m: FlowMatch,
    drop: bool,
    /// `IBV_FLOW_SPEC_ACTION_TAG`'s `tag_id` (0: none).
    tag: u32,
    tirn: Tirn,
}

/// A TIR named by number, as a flow destination.
struct TirNum(Tirn);

impl TirDest for TirNum {
    fn tir_number(&self) -> Option<Tirn> {
        Some(self.0)
    }
}

/// The built tables of a device. The objects borrow the HCA (and each
/// other) for `'static`: [`Steering`] keeps the HCA alive behind them and
/// drops them first, rules before groups before tables (field order).
struct Built {
    rules: Vec<FlowRule<'static, P>>,
    /// Boxed: the rules borrow them, so they must not move when the
    /// vector grows.
    #[allow(clippy::vec_box)]
    groups: Vec<Box<FlowGroup<'static, P>>>,
    _t0: Box<FlowTable<'static, P>>,
    _t1: Box<FlowTable<'static, P>>,
}

/// The flows of one device and the tables built from them.
struct Steering {
    /// Dropped first (declared first): its objects borrow `hca`.
    built: Option<Built>,
    flows: Vec<Flow>,
    hca: Arc<Hca<P>>,
}

/// The most normal flows of a device (table 0's entries).
const LOG_TABLE0: u8 = 12;

impl Steering {
    fn key(&self) -> usize {
        Arc::as_ptr(&self.hca) as usize
    }

    /// Rebuilds the tables from `flows` (none when there is no flow).
    fn rebuild(&mut self) -> hca_driver::Result<()> {
        self.built = None;
        if self.flows.is_empty() {
            return Ok(());
        }
        // SAFETY: `self.hca` keeps the HCA alive for as long as `built`
        // exists (`built` is dropped before `hca`, and replaced only
        // here); no object outlives `self`.
        let hca: &'static Hca<P> = unsafe { &*Arc::as_ptr(&self.hca) };
        let t1 = Box::new(hca.create_flow_table(1, 0, None)?);
        // SAFETY: the box's contents do not move and are dropped after
        // everything that borrows them (field order of `Built`).
        let t1r: &'static FlowTable<'static, P> = unsafe { &*ptr::addr_of!(*t1) };
        let t0 = Box::new(hca.create_flow_table(0, LOG_TABLE0, Some(t1r))?);
        // SAFETY: as for `t1r`.
        let t0r: &'static FlowTable<'static, P> = unsafe { &*ptr::addr_of!(*t0) };
        let mut b = Built {
            rules: Vec::new(),
            groups: Vec::new(),
            _t0: t0,
            _t1: t1,
        };
        let sniffers: Vec<Tirn> = self
            .flows
            .iter()
            .filter(|f| f.kind == FlowKind::Sniffer)
            .map(|f| f.tirn)
            .collect();
        let mut normal: Vec<&Flow> = self
            .flows
            .iter()
            .filter(|f| f.kind == FlowKind::Normal)
            .collect();
        normal.sort_by_key(|f| (f.priority, f.id));
        for (i, f) in normal.iter().enumerate() {
            // At most 2^LOG_TABLE0 normal flows (create_flow checks).
            let i = u32::try_from(i).unwrap_or(u32::MAX);
            let g = Box::new(t0r.create_group(i, i, &f.m)?);
            // SAFETY: as for `t1r`: the group box is dropped after the
            // rules (field order of `Built`).
            let gr: &'static FlowGroup<'static, P> = unsafe { &*ptr::addr_of!(*g) };
            b.groups.push(g);
            let rule = if f.drop {
                gr.add_rule(i, &f.m, FlowDest::Drop)?
            } else {
                let mut dests = vec![TirNum(f.tirn)];
                for s in &sniffers {
                    if dests.len() < MAX_FLOW_DESTS && !dests.iter().any(|d| d.0 == *s) {
                        dests.push(TirNum(*s));
                    }
                }
                let list: Vec<&dyn TirDest> = dests.iter().map(|d| d as &dyn TirDest).collect();
                if f.tag != 0 {
                    gr.add_tagged_rule(i, &f.m, FlowDest::Receivers(&list), f.tag)?
                } else {
                    gr.add_rule(i, &f.m, FlowDest::Receivers(&list))?
                }
            };
            b.rules.push(rule);
        }
        let mut catch: Vec<TirNum> = Vec::new();
        for f in &self.flows {
            if matches!(f.kind, FlowKind::AllDefault | FlowKind::Sniffer)
                && catch.len() < MAX_FLOW_DESTS
                && !catch.iter().any(|d| d.0 == f.tirn)
            {
                catch.push(TirNum(f.tirn));
            }
        }
        if !catch.is_empty() {
            let all = FlowMatch::default();
            let g = Box::new(t1r.create_group(0, 0, &all)?);
            // SAFETY: as for `gr` above.
            let gr: &'static FlowGroup<'static, P> = unsafe { &*ptr::addr_of!(*g) };
            b.groups.push(g);
            let list: Vec<&dyn TirDest> = catch.iter().map(|d| d as &dyn TirDest).collect();
            b.rules
                .push(gr.add_rule(0, &all, FlowDest::Receivers(&list))?);
        }
        t0r.set_root()?;
        self.built = Some(b);
        Ok(())
    }
}

/// Every device's steering.
static STEERING: Mutex<Vec<Steering>> = Mutex::new(Vec::new());
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The C object of a flow.
#[repr(C)]
struct FlowObj {
    c: ibv_flow,
    id: u64,
    hca: usize,
}

/// Reads a `T` at `p` (unaligned: specs are packed one after another).
///
/// # Safety
/// `p` points to at least `size_of::<T>()` readable bytes.
unsafe fn rd<T: Copy>(p: *const u8) -> T {
    // SAFETY: the caller's promise.
    unsafe { p.cast::<T>().read_unaligned() }
}

fn m6(v: [u8; 6], m: [u8; 6]) -> Masked<[u8; 6]> {
    Masked { value: v, mask: m }
}

/// The selectors and the drop action of the specs following `attr`.
///
/// # Safety
/// `attr` points to an `ibv_flow_attr` followed by `num_of_specs` specs,
/// each at least as long as its `size` says.
unsafe fn parse(attr: *const ibv_flow_attr) -> Result<Parsed, c_int> {
    // SAFETY: the caller's attribute.
    let a: ibv_flow_attr = unsafe { rd(attr.cast()) };
    let mut p = attr.cast::<u8>().wrapping_add(size_of::<ibv_flow_attr>());
    let mut specs = Vec::new();
    let mut drop = false;
    let mut tag = None;
    let mut protos = Vec::new();
    for _ in 0..a.num_of_specs {
        // SAFETY: every spec begins with its type and size.
        let (ty, size): (u32, u16) = unsafe { (rd(p), rd(p.wrapping_add(4))) };
        let size = usize::from(size);
        let want = |n: usize| if size == n { Ok(()) } else { Err(libc::EINVAL) };
        if ty & IBV_FLOW_SPEC_INNER != 0 && ty < IBV_FLOW_SPEC_ACTION_TAG {
            return Err(libc::EOPNOTSUPP);
        }
        match ty {
            IBV_FLOW_SPEC_ETH => {
                want(size_of::<ibv_flow_spec_eth>())?;
                // SAFETY: the spec is `size` bytes, checked above.
                let s: ibv_flow_spec_eth = unsafe { rd(p) };
                let (v, m) = (s.val, s.mask);
                specs.push(FlowSpec::Eth {
                    dst_mac: m6(v.dst_mac, m.dst_mac),
                    src_mac: m6(v.src_mac, m.src_mac),
                    ether_type: Masked {
                        value: u16::from_be(v.ether_type),
                        mask: u16::from_be(m.ether_type),
                    },
                    vlan_tag: Masked {
                        value: u16::from_be(v.vlan_tag),
                        mask: u16::from_be(m.vlan_tag),
                    },
                });
            }
            IBV_FLOW_SPEC_IPV4 => {
                want(size_of::<ibv_flow_spec_ipv4>())?;
                // SAFETY: as above.
                let s: ibv_flow_spec_ipv4 = unsafe { rd(p) };
                specs.push(FlowSpec::Ipv4 {
                    src_ip: Masked {
                        value: s.val.src_ip.to_ne_bytes(),
                        mask: s.mask.src_ip.to_ne_bytes(),
                    },
                    dst_ip: Masked {
                        value: s.val.dst_ip.to_ne_bytes(),
                        mask: s.mask.dst_ip.to_ne_bytes(),
                    },
                });
            }
            IBV_FLOW_SPEC_IPV4_EXT => {
                want(size_of::<ibv_flow_spec_ipv4_ext>())?;
                // SAFETY: as above.
                let s: ibv_flow_spec_ipv4_ext = unsafe { rd(p) };
                let m = s.mask;
                if m.tos | m.ttl | m.flags != 0 {
                    return Err(libc::EOPNOTSUPP);
                }
                protos.push((s.val.proto, m.proto));
                specs.push(FlowSpec::Ipv4 {
                    src_ip: Masked {
                        value: s.val.src_ip.to_ne_bytes(),
                        mask: m.src_ip.to_ne_bytes(),
                    },
                    dst_ip: Masked {
                        value: s.val.dst_ip.to_ne_bytes(),
                        mask: m.dst_ip.to_ne_bytes(),
                    },
                });
            }
            IBV_FLOW_SPEC_IPV6 => {
                want(size_of::<ibv_flow_spec_ipv6>())?;
                // SAFETY: as above.
                let s: ibv_flow_spec_ipv6 = unsafe { rd(p) };
                let m = s.mask;
                if m.flow_label != 0 || m.traffic_class | m.hop_limit != 0 {
                    return Err(libc::EOPNOTSUPP);
                }
                protos.push((s.val.next_hdr, m.next_hdr));
                specs.push(FlowSpec::Ipv6 {
                    src_ip: Masked {
                        value: s.val.src_ip,
                        mask: m.src_ip,
                    },
                    dst_ip: Masked {
                        value: s.val.dst_ip,
                        mask: m.dst_ip,
                    },
                });
            }
            IBV_FLOW_SPEC_TCP | IBV_FLOW_SPEC_UDP => {
                want(size_of::<ibv_flow_spec_tcp_udp>())?;
                // SAFETY: as above.
                let s: ibv_flow_spec_tcp_udp = unsafe { rd(p) };
                let sp = Masked {
                    value: u16::from_be(s.val.src_port),
                    mask: u16::from_be(s.mask.src_port),
                };
                let dp = Masked {
                    value: u16::from_be(s.val.dst_port),
                    mask: u16::from_be(s.mask.dst_port),
                };
                specs.push(if ty == IBV_FLOW_SPEC_TCP {
                    FlowSpec::Tcp {
                        src_port: sp,
                        dst_port: dp,
                    }
                } else {
                    FlowSpec::Udp {
                        src_port: sp,
                        dst_port: dp,
                    }
                });
            }
            IBV_FLOW_SPEC_ACTION_DROP => {
                want(size_of::<ibv_flow_spec_action_drop>())?;
                drop = true;
            }
            IBV_FLOW_SPEC_ACTION_TAG => {
                want(size_of::<ibv_flow_spec_action_tag>())?;
                // SAFETY: as above.
                let s: ibv_flow_spec_action_tag = unsafe { rd(p) };
                if s.tag_id > hca_driver::flow::MAX_FLOW_TAG || tag.is_some() {
                    return Err(libc::EINVAL);
                }
                tag = Some(s.tag_id);
            }
            IBV_FLOW_SPEC_MPLS
            | IBV_FLOW_SPEC_VXLAN_TUNNEL
            | IBV_FLOW_SPEC_GRE
            | IBV_FLOW_SPEC_ESP
            | IBV_FLOW_SPEC_ACTION_HANDLE
            | IBV_FLOW_SPEC_ACTION_COUNT => return Err(libc::EOPNOTSUPP),
            _ => return Err(libc::EINVAL),
        }
        if size == 0 {
            return Err(libc::EINVAL);
        }
        p = p.wrapping_add(size);
    }
    Ok(Parsed {
        specs,
        drop,
        tag,
        protos,
    })
}

/// The specs of a flow attribute.
struct Parsed {
    specs: Vec<FlowSpec>,
    /// An `IBV_FLOW_SPEC_ACTION_DROP`.
    drop: bool,
    /// An `IBV_FLOW_SPEC_ACTION_TAG`'s `tag_id`.
    tag: Option<u32>,
    /// IPv4 `proto` / IPv6 `next_hdr` values and masks (`ip_protocol`).
    protos: Vec<(u8, u8)>,
}

/// Adds an `ip_protocol` match (IPv4's `proto`, IPv6's `next_hdr`) to
/// `m`; one that contradicts the TCP/UDP spec's is `EINVAL`.
fn add_proto(m: &mut FlowMatch, value: u8, mask: u8) -> Result<(), c_int> {
    use firmware_cmds::flow::FteMatchSetLyr24 as L24;
    if mask == 0 {
        return Ok(());
    }
    let (cm, cv) = (
        m.criteria.get(L24::ip_protocol),
        m.value.get(L24::ip_protocol),
    );
    if (cv ^ value) & cm & mask != 0 {
        return Err(libc::EINVAL);
    }
    m.criteria
        .set(L24::ip_protocol, cm | mask)
        .map_err(|_| libc::EINVAL)?;
    m.value
        .set(L24::ip_protocol, cv | (value & mask))
        .map_err(|_| libc::EINVAL)?;
    Ok(())
}

/// The verbs context's `ibv_create_flow`.
pub(crate) unsafe extern "C" fn op_create_flow(
    qp: *mut ibv_qp,
    attr: *mut ibv_flow_attr,
) -> *mut ibv_flow {
    guard(ptr::null_mut(), || create_flow(qp, attr))
}

fn create_flow(qp: *mut ibv_qp, attr: *mut ibv_flow_attr) -> *mut ibv_flow {
    // A raw packet QP (its direct TIR) or an RSS QP (its indirect TIR).
    let (tirn, hca, context) = if let Some(q) = live(qp.cast::<QpObj>(), Kind::Qp) {
        let g = q.qp.lock().unwrap_or_else(|p| p.into_inner());
        (g.tir(), g.pd().context().hca().clone(), q.c.qp_base.context)
    } else if let Some((t, h)) = crate::wq::rss_tir(qp) {
        // SAFETY: a live RSS QP of this library.
        (Some(t), h, unsafe { (*qp).context })
    } else {
        return fail(libc::EINVAL);
    };
    if attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: non-null, the caller's attribute.
    let a: ibv_flow_attr = unsafe { rd(attr.cast()) };
    if a.comp_mask != 0 || a.port != 1 {
        return fail(libc::EINVAL);
    }
    if a.flags != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    let kind = match a.type_ {
        IBV_FLOW_ATTR_NORMAL => FlowKind::Normal,
        IBV_FLOW_ATTR_ALL_DEFAULT => FlowKind::AllDefault,
        IBV_FLOW_ATTR_SNIFFER => FlowKind::Sniffer,
        IBV_FLOW_ATTR_MC_DEFAULT => return fail(libc::EOPNOTSUPP),
        _ => return fail(libc::EINVAL),
    };
    // SAFETY: the caller's attribute is followed by its specs.
    let Parsed {
        specs,
        drop,
        tag,
        protos,
    } = match unsafe { parse(attr) } {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    if kind != FlowKind::Normal && (!specs.is_empty() || drop || tag.is_some()) {
        // The default and sniffer rules take every frame.
        return fail(libc::EINVAL);
    }
    let mut m = match FlowMatch::from_specs(&specs) {
        Ok(m) => m,
        Err(e) => return fail(errno_of(&e)),
    };
    for (v, mask) in protos {
        if let Err(e) = add_proto(&mut m, v, mask) {
            return fail(e);
        }
    }
    let Some(tirn) = tirn else {
        return fail(libc::EINVAL);
    };
    let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let ctx = context as usize;
    let key = Arc::as_ptr(&hca) as usize;
    let mut all = STEERING.lock().unwrap_or_else(|p| p.into_inner());
    let at = match all.iter().position(|s| s.key() == key) {
        Some(i) => i,
        None => {
            all.push(Steering {
                built: None,
                flows: Vec::new(),
                hca,
            });
            all.len() - 1
        }
    };
    let st = &mut all[at];
    let normals = st
        .flows
        .iter()
        .filter(|f| f.kind == FlowKind::Normal)
        .count();
    if kind == FlowKind::Normal && normals >= 1 << LOG_TABLE0 {
        return fail(libc::ENOMEM);
    }
    st.flows.push(Flow {
        id,
        ctx,
        kind,
        priority: a.priority,
        m,
        drop,
        tag: tag.unwrap_or(0),
        tirn,
    });
    if let Err(e) = st.rebuild() {
        log::info!("ibv_create_flow: {e}");
        st.flows.retain(|f| f.id != id);
        let _ = st.rebuild();
        if st.flows.is_empty() {
            all.remove(at);
        }
        return fail(errno_of(&e));
    }
    registry::publish(
        FlowObj {
            c: ibv_flow {
                comp_mask: 0,
                context,
                handle: u32::try_from(id).unwrap_or(u32::MAX),
            },
            id,
            hca: key,
        },
        Kind::Flow,
    )
    .cast()
}

/// The verbs context's `ibv_destroy_flow`.
pub(crate) unsafe extern "C" fn op_destroy_flow(flow: *mut ibv_flow) -> c_int {
    guard(libc::EIO, || {
        let Some(b) = registry::take(flow.cast::<FlowObj>(), Kind::Flow) else {
            return libc::EINVAL;
        };
        remove(b.hca, |f| f.id == b.id)
    })
}

/// Removes the flows of device `key` that `which` picks, rebuilding its
/// tables; 0 or the errno of the rebuild.
fn remove(key: usize, which: impl Fn(&Flow) -> bool) -> c_int {
    let mut all = STEERING.lock().unwrap_or_else(|p| p.into_inner());
    let Some(at) = all.iter().position(|s| s.key() == key) else {
        return libc::EINVAL;
    };
    let st = &mut all[at];
    st.flows.retain(|f| !which(f));
    let r = st.rebuild();
    if st.flows.is_empty() {
        all.remove(at);
    }
    match r {
        Ok(()) => 0,
        Err(e) => {
            log::warn!("ibv_destroy_flow: {e}");
            errno_of(&e)
        }
    }
}

/// Destroys the flows context `ctx` left (at its close).
pub(crate) fn close_context(ctx: *mut ibv_context) {
    let ctx = ctx as usize;
    let keys: Vec<usize> = STEERING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|s| s.flows.iter().any(|f| f.ctx == ctx))
        .map(Steering::key)
        .collect();
    for k in keys {
        remove(k, |f| f.ctx == ctx);
    }
    for o in registry::live_of(Kind::Flow) {
        let p = o as *mut FlowObj;
        // SAFETY: the registry says `p` is a live flow object.
        if unsafe { (*p).c.context } as usize == ctx {
            drop(registry::take(p, Kind::Flow));
        }
    }
}

/// Whether `tirn` of device `hca` is a destination of a flow (a QP with
/// flows is not destroyed: `EBUSY`, as the kernel answers).
pub(crate) fn in_use(hca: usize, tirn: Tirn) -> bool {
    STEERING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|s| s.key() == hca && s.flows.iter().any(|f| f.tirn == tirn))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr_with(specs: &[&[u8]]) -> Vec<u64> {
        let a = ibv_flow_attr {
            num_of_specs: specs.len() as u8,
            port: 1,
            ..Default::default()
        };
        let mut b = Vec::new();
        // SAFETY: a plain C struct read as bytes.
        b.extend_from_slice(unsafe {
            core::slice::from_raw_parts(ptr::addr_of!(a).cast::<u8>(), size_of::<ibv_flow_attr>())
        });
        for s in specs {
            b.extend_from_slice(s);
        }
        let mut v = vec![0u64; b.len().div_ceil(8)];
        // SAFETY: `v` has room for the bytes.
        unsafe { ptr::copy_nonoverlapping(b.as_ptr(), v.as_mut_ptr().cast::<u8>(), b.len()) };
        v
    }

    fn bytes<T>(t: &T) -> &[u8] {
        // SAFETY: a plain C struct read as bytes.
        unsafe { core::slice::from_raw_parts(ptr::from_ref(t).cast::<u8>(), size_of::<T>()) }
    }

    #[test]
    fn specs_parse_into_selectors_in_host_order() {
        let ip = ibv_flow_spec_ipv4_ext {
            type_: IBV_FLOW_SPEC_IPV4_EXT,
            size: size_of::<ibv_flow_spec_ipv4_ext>() as u16,
            val: ibv_flow_ipv4_ext_filter {
                dst_ip: u32::from_ne_bytes([10, 0, 0, 2]),
                proto: 17,
                ..Default::default()
            },
            mask: ibv_flow_ipv4_ext_filter {
                dst_ip: u32::MAX,
                proto: 0xff,
                ..Default::default()
            },
        };
        let udp = ibv_flow_spec_tcp_udp {
            type_: IBV_FLOW_SPEC_UDP,
            size: size_of::<ibv_flow_spec_tcp_udp>() as u16,
            val: ibv_flow_tcp_udp_filter {
                dst_port: 5000u16.to_be(),
                src_port: 0,
            },
            mask: ibv_flow_tcp_udp_filter {
                dst_port: 0xffff,
                src_port: 0,
            },
        };
        let v = attr_with(&[bytes(&ip), bytes(&udp)]);
        // SAFETY: an attribute followed by its specs.
        let p = unsafe { parse(v.as_ptr().cast()) }.unwrap();
        assert!(!p.drop);
        assert_eq!(p.protos, [(17, 0xff)]);
        assert_eq!(
            p.specs[0],
            FlowSpec::Ipv4 {
                src_ip: Masked::default(),
                dst_ip: Masked {
                    value: [10, 0, 0, 2],
                    mask: [0xff; 4]
                },
            }
        );
        assert_eq!(
            p.specs[1],
            FlowSpec::Udp {
                src_port: Masked::default(),
                dst_port: Masked {
                    value: 5000,
                    mask: 0xffff
                },
            }
        );
        let mut m = FlowMatch::from_specs(&p.specs).unwrap();
        // UDP's own ip_protocol agrees with 17, not with TCP's 6.
        assert_eq!(add_proto(&mut m, 17, 0xff), Ok(()));
        assert_eq!(add_proto(&mut m, 6, 0xff), Err(libc::EINVAL));
    }
}
