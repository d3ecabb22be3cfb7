//! Event queue entries as the device writes them, through firmware-cmds'
//! EQE layouts and then hca-driver's EQ consumer and dispatch (owner bit,
//! event type against the EQ's kind, command completion vector, CQN,
//! QPN/SRQN and queue type, port number, page request).
//!
//! Input: eight configuration bytes, then EQEs of 64 bytes. Byte 0: the
//! EQ's kind (mod 3: command, asynchronous, completion); byte 1: log2 of
//! its size; byte 2: log2 of the command queue slots; byte 3: ports;
//! bytes 4..8: command slots in flight (big-endian).
#![no_main]

use firmware_cmds::eq::{
    self as feq, CmdInterCompEvent, CompEvent, CqError, Eqe, EventAuto, PagesReqEvent,
    PortStateChangeEvent, QpEvents, event_type_name, port_change_subtype_name,
};
use firmware_cmds::layout::Layout;
use libfuzzer_sys::fuzz_target;
use mlx5_fuzz::walk_layout;
use platform::host::HostBlock;

fuzz_target!(|data: &[u8]| {
    let [kind, log_size, log_slots, ports, f0, f1, f2, f3, eqes @ ..] = data else {
        return;
    };
    let queue = HostBlock::new(4096, 4096).expect("memory");
    let (n, region) = hca_driver::fuzzing::eqes(
        eqes,
        *kind,
        *log_size,
        *log_slots,
        u32::from_be_bytes([*f0, *f1, *f2, *f3]),
        *ports,
        queue.lend(0x1000_0000, 0).expect("lend"),
    );
    queue.reclaim(region).expect("the queue page comes back");
    std::hint::black_box(n);
    for (i, chunk) in eqes.chunks(feq::EQE_SIZE).enumerate() {
        let Ok(e) = Eqe::from_slice(chunk) else {
            continue;
        };
        let t = e.get(Eqe::event_type);
        let sub = e.get(Eqe::event_sub_type);
        let _ = (
            event_type_name(t),
            port_change_subtype_name(sub),
            e.to_string(),
        );
        let _ = (
            e.is_sw_owned(i as u32, (i % 40) as u8),
            e.get(Eqe::signature),
        );
        let d = e.data();
        let acc = match t {
            feq::EVENT_TYPE_CMD => u64::from(
                d.get(EventAuto::cmd_inter_comp_event)
                    .get(CmdInterCompEvent::command_completion_vector),
            ),
            feq::EVENT_TYPE_COMP => {
                u64::from(d.get(EventAuto::comp_event).get(CompEvent::cq_number))
            }
            feq::EVENT_TYPE_PAGE_REQUEST => {
                let p = d.get(EventAuto::pages_req_event);
                u64::from(p.get(PagesReqEvent::function_id)) ^ p.num_pages_signed() as u64
            }
            feq::EVENT_TYPE_PORT_CHANGE => u64::from(
                d.get(EventAuto::port_state_change_event)
                    .get(PortStateChangeEvent::port_num),
            ),
            feq::EVENT_TYPE_CQ_ERROR => {
                let c = d.get(EventAuto::cq_error);
                u64::from(c.get(CqError::cqn)) ^ u64::from(c.get(CqError::syndrome))
            }
            _ => {
                let q = d.get(EventAuto::qp_events);
                u64::from(q.get(QpEvents::r#type)) ^ u64::from(q.get(QpEvents::qpn_rqn_sqn))
            }
        };
        std::hint::black_box(acc ^ walk_layout(&Eqe::INFO, e.as_bytes(), None));
    }
});
