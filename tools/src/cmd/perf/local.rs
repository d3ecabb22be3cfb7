//! Both sides in this process, stepped in turn on one thread: two
//! emulated HCAs cabled together, or both sides on one real function.

use std::time::{Duration, Instant};

use hca_driver::{Hca, IbMtu};
use platform::Platform;

use super::arguments::Local;
use super::engine::Peer;
use super::report::{PerfReport, Printer, Row};
use super::side::{Engine, connect_all, inline_for, local_endpoints, probe_port, progress_text};
use super::spec::Spec;
use crate::device::DevicePair;
use crate::error::Result;
use crate::progress::{self, Progress};
use crate::rdma::{Pacer, Side, with_side};

/// Runs the test with both sides in this process: side A (the client) on
/// `pair.a()`, side B (the server) on `pair.b()`.
pub(super) fn run(
    spec: &Spec,
    l: &Local,
    printer: &mut Printer<'_>,
    pair: &DevicePair,
) -> Result<()> {
    let (a, b, dev) = (pair.a(), pair.b(), pair.desc());
    let pa = probe_port(a, "client", l.ib_port, l.gid_index, "")?;
    let port_b = if dev.two_hcas || a.caps().num_ports() < 2 {
        l.ib_port
    } else if l.ib_port == 1 {
        2
    } else {
        1
    };
    let pb = probe_port(b, "server", port_b, l.gid_index, "")?;
    let mut spec = spec.clone();
    let mtu = spec.fit(&pa)?;
    if pb.active_mtu.bytes() < mtu.bytes() {
        spec.mtu = pb.active_mtu.bytes();
    }
    let mtu = IbMtu::fitting(spec.mtu).unwrap_or(mtu);
    let out_reads = spec.out_reads(&[a, b])?;
    let conn = spec.conn_params(mtu, out_reads);
    let lay = spec.layout();
    let sspec = spec.side_spec();
    with_side(a, "client", &sspec, |sa| {
        with_side(b, "server", &sspec, |sb| {
            let ea = local_endpoints(sa, &pa, &spec, lay)?;
            let eb = local_endpoints(sb, &pb, &spec, lay)?;
            let aha = connect_all(sa, &pa, &ea, &eb, &conn)?;
            let ahb = connect_all(sb, &pb, &eb, &ea, &conn)?;
            let inline = sa.qps[0].cap().max_inline_data.min(spec.inline);
            let mut rep = PerfReport::new(
                &spec,
                "loopback",
                dev.a.selection.hca_id(),
                format!("loopback in one process ({})", dev.link),
                &pa,
                out_reads,
                inline,
            );
            rep.local = ea.clone();
            rep.remote = eb.clone();
            rep.atomics(&spec, a);
            printer.head(&rep)?;
            let peer_a = Peer {
                remote: &eb,
                ahs: &aha,
                layout: lay,
            };
            let peer_b = Peer {
                remote: &ea,
                ahs: &ahb,
                layout: lay,
            };
            for &size in &spec.sizes {
                let row = loopback_size(&spec, size, sa, sb, &peer_a, &peer_b, &[a, b])?;
                printer.row(&mut rep, row)?;
            }
            printer.tail(&rep)
        })
    })
}

#[allow(clippy::too_many_arguments)]
fn loopback_size<P: Platform + 'static>(
    spec: &Spec,
    size: u64,
    sa: &mut Side<P>,
    sb: &mut Side<P>,
    peer_a: &Peer<'_, P>,
    peer_b: &Peer<'_, P>,
    hcas: &[&Hca<P>],
) -> Result<Row> {
    let inline = inline_for(sa, spec, size);
    let now = Instant::now();
    let mut server = Engine::new(spec, false, size, sb, peer_b.layout, inline, now)?;
    let mut client = Engine::new(spec, true, size, sa, peer_a.layout, inline, now)?;
    let progress = Progress::start(&spec.test);
    let status = progress.status();
    let mut last = Instant::now();
    let mut pacer = Pacer::new(hcas);
    let mut told = false;
    while !(client.done() && server.done()) {
        // SEND bandwidth: never more in flight than the server has
        // receives for (UC and UD would drop the rest).
        if let (Engine::BwSend(c), Engine::BwRecv(r)) = (&mut client, &server) {
            c.set_credit(r.posted());
        }
        let gb = server.step(sb, peer_b)?;
        let ga = client.step(sa, peer_a)?;
        if client.done() && !told {
            told = true;
            let sent = client.sent(spec.qps as usize);
            server.peer_sent(&sent);
        }
        if ga || gb {
            pacer.progress()?;
            if last.elapsed() >= Duration::from_millis(100) {
                last = Instant::now();
                progress::set(&status, progress_text(spec, size, &client));
            }
        } else {
            pacer.idle(|| {
                format!(
                    "{} {size} B: client at {}, server at {}",
                    spec.test,
                    client.progress().0,
                    server.progress().0
                )
            })?;
        }
    }
    drop(progress);
    Ok(client.row(spec, size))
}
