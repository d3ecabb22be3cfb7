//! One side per process: the server and the client of a test, over the
//! wire, synchronised by this tool's exchange ([`super::protocol`]) or
//! perftest's ([`super::perftest`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use hca_driver::Hca;
use platform::Platform;

use super::arguments::Local;
use super::engine::Peer;
use super::perftest;
use super::protocol::{ClientMsg, PROTOCOL, ServerMsg, min_mtu};
use super::report::{PerfReport, Printer};
use super::side::{Engine, connect_all, inline_for, local_endpoints, probe_port, progress_text};
use super::spec::{Conn, Spec};
use crate::device::{Device, DeviceDesc, Selection};
use crate::error::{Result, ToolError};
use crate::peer::{self, Control, EXCHANGE_TIMEOUT, Mode};
use crate::progress::{self, Progress};
use crate::rdma::{Pacer, PortView, Side, with_side};

/// One side of a test over the wire: what it runs, and where.
pub(super) struct Split<'o> {
    /// This process's spec (the server runs the client's).
    pub(super) spec: Spec,
    pub(super) local: Local,
    pub(super) mode: Mode,
    pub(super) listener: Option<std::net::TcpListener>,
    pub(super) printer: Printer<'o>,
}

/// Runs this process's side of the test on `device`: the client, or the
/// server on its listener.
pub(super) fn run(side: Split<'_>, device: &Device) -> Result<()> {
    let (hca, dev) = (device.hca(), device.desc());
    let Split {
        spec,
        local,
        mode,
        listener,
        mut printer,
    } = side;
    let hint = if dev.selection == Selection::Emulator {
        peer::emulator_down_hint(&mode)
    } else {
        ""
    };
    match &mode {
        Mode::Client { host, port } => {
            // An unreachable server is the first thing to know.
            let stream = peer::connect(host, *port)?;
            if local.perftest {
                let port = probe_port(hca, "client", local.ib_port, local.gid_index, hint)?;
                return perftest::run_side(&spec, true, stream, hca, dev, &port, &mut printer);
            }
            let mut ctl = Control::new(stream, "server")?;
            let r = run_client(spec, &local, hca, dev, hint, &mut ctl, &mut printer);
            if let Err(e) = &r {
                ctl.send_error(e);
            }
            r
        }
        _ => {
            let port = probe_port(hca, "server", local.ib_port, local.gid_index, hint)?;
            let listener = listener
                .ok_or_else(|| ToolError::Usage("the server has no TCP listener".into()))?;
            let stream = peer::accept(&listener)?;
            drop(listener);
            if local.perftest {
                return perftest::run_side(&spec, false, stream, hca, dev, &port, &mut printer);
            }
            let mut ctl = Control::new(stream, "client")?;
            let r = run_server(&spec, hca, dev, &port, &mut ctl, &mut printer);
            if let Err(e) = &r {
                ctl.send_error(e);
            }
            r
        }
    }
}

fn run_client<P: Platform + 'static>(
    mut spec: Spec,
    l: &Local,
    hca: &Arc<Hca<P>>,
    dev: &DeviceDesc,
    hint: &str,
    ctl: &mut Control,
    printer: &mut Printer<'_>,
) -> Result<()> {
    let port = probe_port(hca, "client", l.ib_port, l.gid_index, hint)?;
    let mtu = spec.fit(&port)?;
    let my_reads = spec.out_reads(&[hca])?;
    let lay = spec.layout();
    let sspec = spec.side_spec();
    with_side(hca, "client", &sspec, |s| {
        let me = local_endpoints(s, &port, &spec, lay)?;
        ctl.send(&ClientMsg::Hello {
            version: PROTOCOL,
            spec: Box::new(spec.clone()),
            endpoints: me.clone(),
        })?;
        let (remote, agreed, server_reads) = match ctl.recv::<ServerMsg>(Some(EXCHANGE_TIMEOUT))? {
            ServerMsg::Accept {
                endpoints,
                mtu,
                out_reads,
            } => (endpoints, mtu, out_reads),
            other => {
                return Err(ToolError::Usage(format!(
                    "the server answered {other:?} instead of accepting the test"
                )));
            }
        };
        let mtu = min_mtu(mtu, agreed);
        spec.mtu = mtu.bytes();
        let out_reads = my_reads.min(server_reads.max(1));
        let conn = spec.conn_params(mtu, out_reads);
        let ahs = connect_all(s, &port, &me, &remote, &conn)?;
        let inline = s.qps[0].cap().max_inline_data.min(spec.inline);
        let mut rep = PerfReport::new(
            &spec,
            "client",
            dev.selection.hca_id(),
            "Ethernet".to_string(),
            &port,
            out_reads,
            inline,
        );
        rep.local = me.clone();
        rep.remote = remote.clone();
        rep.atomics(&spec, hca);
        printer.head(&rep)?;
        let peer = Peer {
            remote: &remote,
            ahs: &ahs,
            layout: lay,
        };
        for &size in &spec.sizes {
            let inline = inline_for(s, &spec, size);
            // Receives and cleared buffers before the server may send.
            let mut e = Engine::new(&spec, true, size, s, lay, inline, Instant::now())?;
            ctl.send(&ClientMsg::Start { size })?;
            match ctl.recv::<ServerMsg>(Some(EXCHANGE_TIMEOUT))? {
                ServerMsg::Ready { size: z } if z == size => {}
                other => {
                    return Err(ToolError::Usage(format!(
                        "the server answered {other:?} instead of being ready for {size} bytes"
                    )));
                }
            }
            if let Some(d) = spec.duration {
                // The clock starts now.
                e.restart_deadline(Instant::now() + Duration::from_secs(d));
            }
            drive(&spec, size, s, &peer, &mut e, hca, ctl, true)?;
            ctl.send(&ClientMsg::Done {
                size,
                sent: e.sent(spec.qps as usize),
            })?;
            match ctl.recv::<ServerMsg>(None)? {
                ServerMsg::Finished { size: z, .. } if z == size => {}
                other => {
                    return Err(ToolError::Usage(format!(
                        "the server answered {other:?} instead of finishing {size} bytes"
                    )));
                }
            }
            let row = e.row(&spec, size);
            ctl.send(&ClientMsg::Result { row: row.clone() })?;
            printer.row(&mut rep, row)?;
        }
        ctl.send(&ClientMsg::Bye)?;
        printer.tail(&rep)
    })
}

fn run_server<P: Platform + 'static>(
    own: &Spec,
    hca: &Arc<Hca<P>>,
    dev: &DeviceDesc,
    port: &PortView,
    ctl: &mut Control,
    printer: &mut Printer<'_>,
) -> Result<()> {
    let (mut spec, remote) = match ctl.recv::<ClientMsg>(Some(EXCHANGE_TIMEOUT))? {
        ClientMsg::Hello {
            version,
            spec,
            endpoints,
        } => {
            if version != PROTOCOL {
                return Err(ToolError::Usage(format!(
                    "the client speaks version {version} of the control protocol, this server {PROTOCOL}"
                )));
            }
            (*spec, endpoints)
        }
        other => {
            return Err(ToolError::Usage(format!(
                "the client sent {other:?} instead of its test"
            )));
        }
    };
    if spec.test != own.test || spec.conn != own.conn {
        return Err(ToolError::Usage(format!(
            "the client runs {} ({}), this server {} ({})",
            spec.test,
            spec.conn.name(),
            own.test,
            own.conn.name()
        )));
    }
    // The path MTU: the smaller of the client's and this port's.
    let client_mtu = spec.mtu;
    spec.mtu = 0;
    let mtu = spec.fit(port)?;
    let mtu = min_mtu(mtu, client_mtu);
    spec.mtu = mtu.bytes();
    let out_reads = spec.out_reads(&[hca])?;
    let conn = spec.conn_params(mtu, out_reads);
    let lay = spec.layout();
    let sspec = spec.side_spec();
    with_side(hca, "server", &sspec, |s| {
        let me = local_endpoints(s, port, &spec, lay)?;
        let ahs = connect_all(s, port, &me, &remote, &conn)?;
        ctl.send(&ServerMsg::Accept {
            endpoints: me.clone(),
            mtu: mtu.bytes(),
            out_reads,
        })?;
        let inline = s.qps[0].cap().max_inline_data.min(spec.inline);
        let mut rep = PerfReport::new(
            &spec,
            "server",
            dev.selection.hca_id(),
            "Ethernet".to_string(),
            port,
            out_reads,
            inline,
        );
        rep.local = me.clone();
        rep.remote = remote.clone();
        rep.atomics(&spec, hca);
        printer.head(&rep)?;
        let peer = Peer {
            remote: &remote,
            ahs: &ahs,
            layout: lay,
        };
        loop {
            let size = match ctl.recv::<ClientMsg>(None)? {
                ClientMsg::Start { size } if spec.sizes.contains(&size) => size,
                ClientMsg::Bye => break,
                other => {
                    return Err(ToolError::Usage(format!(
                        "the client sent {other:?} instead of the next size"
                    )));
                }
            };
            let inline = inline_for(s, &spec, size);
            let mut e = Engine::new(&spec, false, size, s, lay, inline, Instant::now())?;
            ctl.send(&ServerMsg::Ready { size })?;
            if !drive(&spec, size, s, &peer, &mut e, hca, ctl, false)? {
                // Done before the client said so: take its word now.
                match ctl.recv::<ClientMsg>(Some(EXCHANGE_TIMEOUT))? {
                    ClientMsg::Done { size: z, .. } if z == size => {}
                    other => {
                        return Err(ToolError::Usage(format!(
                            "the client sent {other:?} instead of finishing {size} bytes"
                        )));
                    }
                }
            }
            ctl.send(&ServerMsg::Finished {
                size,
                received: e.received(),
            })?;
            let row = match ctl.recv::<ClientMsg>(Some(EXCHANGE_TIMEOUT))? {
                ClientMsg::Result { row } => row,
                other => {
                    return Err(ToolError::Usage(format!(
                        "the client sent {other:?} instead of its result"
                    )));
                }
            };
            // SEND bandwidth: what this side received; otherwise the
            // client's figures.
            let row = match &e {
                Engine::BwRecv(_) => e.row(&spec, size),
                _ => row,
            };
            printer.row(&mut rep, row)?;
        }
        printer.tail(&rep)
    })
}

/// How long a SEND bandwidth server of UC or UD waits for messages that
/// may have been dropped once the client is done.
const DROP_GRACE: Duration = Duration::from_millis(500);

/// Steps one side's engine until it is done. The client watches the
/// control channel for a failure of the server; the server for the
/// client's `done` (what it sent), which ends a passive side's part.
/// Returns whether the peer's `done` was taken.
#[allow(clippy::too_many_arguments)]
fn drive<P: Platform + 'static>(
    spec: &Spec,
    size: u64,
    s: &mut Side<P>,
    peer: &Peer<'_, P>,
    e: &mut Engine,
    hca: &Hca<P>,
    ctl: &mut Control,
    client: bool,
) -> Result<bool> {
    let progress = client.then(|| Progress::start(&spec.test));
    let mut last = Instant::now();
    let mut pacer = Pacer::new(&[hca]);
    let mut idle_steps = 0u32;
    let mut peer_done: Option<Instant> = None;
    while !e.done() {
        if matches!(e, Engine::Idle { .. }) {
            // Nothing to poll: wait for the client, servicing the HCA.
            match ctl.poll_recv::<ClientMsg>(Some(Duration::from_millis(50)))? {
                Some(ClientMsg::Done { size: z, sent }) if z == size => {
                    e.peer_sent(&sent);
                    peer_done = Some(Instant::now());
                }
                Some(other) => {
                    return Err(ToolError::Usage(format!(
                        "the client sent {other:?} during the test"
                    )));
                }
                None => {
                    hca.service()
                        .map_err(|e| ToolError::driver("servicing the HCA", e))?;
                }
            }
            continue;
        }
        if e.step(s, peer)? {
            idle_steps = 0;
            pacer.progress()?;
            if let Some(p) = &progress {
                if last.elapsed() >= Duration::from_millis(100) {
                    last = Instant::now();
                    progress::set(&p.status(), progress_text(spec, size, e));
                }
            }
            continue;
        }
        idle_steps += 1;
        if idle_steps % 256 == 1 {
            if client {
                // Only a failure report can come now.
                let _ = ctl.try_recv::<ServerMsg>()?;
            } else if peer_done.is_none() {
                match ctl.try_recv::<ClientMsg>()? {
                    Some(ClientMsg::Done { size: z, sent }) if z == size => {
                        e.peer_sent(&sent);
                        peer_done = Some(Instant::now());
                    }
                    Some(other) => {
                        return Err(ToolError::Usage(format!(
                            "the client sent {other:?} during the test"
                        )));
                    }
                    None => {}
                }
            }
        }
        if let (Some(t), Engine::BwRecv(_)) = (peer_done, &*e) {
            // UC and UD drop what finds no receive: take what came.
            if spec.conn != Conn::Rc && t.elapsed() > DROP_GRACE {
                break;
            }
        }
        pacer.idle(|| {
            format!(
                "{} {size} B: {} at {} (is the {} still running?)",
                spec.test,
                s.name,
                e.progress().0,
                if client { "server" } else { "client" }
            )
        })?;
    }
    Ok(peer_done.is_some())
}
