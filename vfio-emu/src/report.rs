//! The report file (`HCA_EMU_VFIO_REPORT`): what the program sent to each
//! emulated function, appended when its device fd is closed and at exit.

use std::io::Write;

use firmware_cmds::opcode::Opcode;
use firmware_cmds::status::CmdStatus;

use crate::vfio::{Func, State};

fn append(state: &State, text: &str) {
    let Some(path) = &state.report else { return };
    let r = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = r {
        eprintln!(
            "hca-vfio-emu: cannot write the report {}: {e}",
            path.display()
        );
    }
}

/// Appends one line about `f`.
pub fn note(state: &State, f: &Func, what: &str) {
    append(
        state,
        &format!("{} {}: {what}\n", f.spec.bdf, f.spec.model.name()),
    );
}

/// Appends the commands not reported yet, the IOMMU faults, internal
/// errors, ignored doorbells and the leak report of `f`.
pub fn write(state: &State, f: &Func, why: &str) {
    if state.report.is_none() {
        return;
    }
    let bdf = &f.spec.bdf;
    let mut s = format!("== {bdf} ({}): {why}\n", f.spec.model.name());
    let log = f.emu.command_log();
    let mut seen = f
        .reported
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for c in log.iter().skip(seen[0]) {
        let op = Opcode(c.opcode);
        let name = op.name().unwrap_or("unknown opcode");
        if c.delivery_status != 0 {
            s += &format!(
                "{bdf} command {name}({:#x}) op_mod({:#x}): delivery status {:#x}\n",
                c.opcode, c.op_mod, c.delivery_status
            );
        } else if c.status != 0 {
            let st = CmdStatus(c.status).name().unwrap_or("unknown status");
            s += &format!(
                "{bdf} command {name}({:#x}) op_mod({:#x}): status {st}({:#x}), syndrome ({:#x})\n",
                c.opcode, c.op_mod, c.status, c.syndrome
            );
        } else {
            s += &format!(
                "{bdf} command {name}({:#x}) op_mod({:#x}): ok\n",
                c.opcode, c.op_mod
            );
        }
    }
    seen[0] = log.len();
    let faults = f.emu.iommu_faults();
    for e in faults.iter().skip(seen[1]) {
        s += &format!("{bdf} {e}\n");
    }
    seen[1] = faults.len();
    let errors = f.emu.internal_errors();
    for e in errors.iter().skip(seen[2]) {
        s += &format!("{bdf} firmware internal error: {e}\n");
    }
    seen[2] = errors.len();
    let ignored = f.emu.ignored_doorbells();
    for d in ignored.iter().skip(seen[3]) {
        s += &format!("{bdf} ignored doorbell: {d}\n");
    }
    seen[3] = ignored.len();
    drop(seen);
    let leaks = f.emu.leak_report();
    if !leaks.firmware_pages.is_empty() {
        s += &format!(
            "{bdf} leak: {} firmware pages not returned\n",
            leaks.firmware_pages.len()
        );
    }
    for o in leaks.objects.iter().chain(&leaks.objects_at_teardown) {
        s += &format!(
            "{bdf} leak: object never destroyed by the program: {:?} {:#x}\n",
            o.0, o.1
        );
    }
    append(state, &s);
}
