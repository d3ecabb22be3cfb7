//! A registry of every layout of the crate and of every command's input
//! and output layout, so that a tool (or a test, or the emulator's trace
//! replay) can decode any command message field by field.
//!
//! ```
//! use firmware_cmds::registry;
//!
//! // QUERY_HCA_CAP, op_mod 0x9: the current RoCE capabilities.
//! let input = [0x01, 0x00, 0, 0, 0, 0, 0, 0x09, 0, 0, 0, 0, 0, 0, 0, 0];
//! let d = registry::lookup(&input)?;
//! assert_eq!(d.input.ifc, "query_hca_cap_in");
//! assert_eq!(d.output.ifc, "query_hca_cap_out");
//! let cap = d.output_payload.unwrap();
//! assert_eq!((cap.offset, cap.layout.ifc), (0x10, "roce_cap"));
//! # Ok::<(), firmware_cmds::Error>(())
//! ```

use crate::Error;
use crate::command::{Command, input_header};
use crate::layout::{Layout, LayoutInfo, read_bits};
use crate::opcode::Opcode;
use crate::{
    caps, cmdq, cq, eq, eth, flow, hca, init_seg, mad, mailbox, mcg, mkey, pd, pp, q_counter, qp,
    reg, rmp, roce, srq, uar, vport,
};

/// The input and output layouts of one command.
#[derive(Debug)]
pub struct CommandLayouts {
    /// The opcode.
    pub opcode: Opcode,
    /// The `*_in` layout.
    pub input: &'static LayoutInfo,
    /// The `*_out` layout.
    pub output: &'static LayoutInfo,
}

/// A layout carried inside a message at a byte offset, chosen by the op_mod
/// or by a field of the input: the capability block of QUERY_HCA_CAP and
/// SET_HCA_CAP, the register of ACCESS_REG.
#[derive(Clone, Copy, Debug)]
pub struct Payload {
    /// Byte offset in the message.
    pub offset: usize,
    /// Its layout.
    pub layout: &'static LayoutInfo,
}

/// How to decode one command: its layouts and the payloads its op_mod or
/// input select.
#[derive(Clone, Copy, Debug)]
pub struct CommandDecode {
    /// The opcode.
    pub opcode: Opcode,
    /// The op_mod.
    pub op_mod: u16,
    /// The input layout.
    pub input: &'static LayoutInfo,
    /// The output layout.
    pub output: &'static LayoutInfo,
    /// A layout embedded in the input (SET_HCA_CAP's capability block,
    /// ACCESS_REG's register), when this crate declares it.
    pub input_payload: Option<Payload>,
    /// A layout embedded in the output (QUERY_HCA_CAP's capability block,
    /// ACCESS_REG's register), when this crate declares it.
    pub output_payload: Option<Payload>,
}

macro_rules! infos {
    ($($t:ty),* $(,)?) => {
        &[$(&<$t as Layout>::INFO),*]
    };
}

macro_rules! commands {
    ($($t:ty),* $(,)?) => {
        &[$(CommandLayouts {
            opcode: <$t as Command>::OPCODE,
            input: &<$t as Layout>::INFO,
            output: &<<$t as Command>::Output as Layout>::INFO,
        }),*]
    };
}

static LAYOUTS: &[&LayoutInfo] = infos![
    // Command interface.
    cmdq::CmdQueueEntry,
    mailbox::CmdIfBox,
    init_seg::HealthBuffer,
    // hca
    hca::EnableHcaIn,
    hca::EnableHcaOut,
    hca::DisableHcaIn,
    hca::DisableHcaOut,
    hca::QueryIssiIn,
    hca::QueryIssiOut,
    hca::SetIssiIn,
    hca::SetIssiOut,
    hca::QueryPagesIn,
    hca::QueryPagesOut,
    hca::ManagePagesIn,
    hca::ManagePagesOut,
    hca::InitHcaIn,
    hca::InitHcaOut,
    hca::TeardownHcaIn,
    hca::TeardownHcaOut,
    hca::SetDriverVersionIn,
    hca::SetDriverVersionOut,
    hca::QueryAdapterIn,
    hca::QueryAdapterOut,
    hca::QueryAdapterParamBlock,
    hca::NopIn,
    hca::NopOut,
    // caps
    caps::CmdHcaCap,
    caps::PerProtocolNetworkingOffloadCaps,
    caps::AtomicCaps,
    caps::RoceCap,
    caps::RoceCaps,
    caps::FlowTablePropLayout,
    caps::FlowTableNicCap,
    caps::QosCap,
    caps::HcaCapUnion,
    caps::QueryHcaCapIn,
    caps::QueryHcaCapOut,
    caps::SetHcaCapIn,
    caps::SetHcaCapOut,
    // uar
    uar::AllocUarIn,
    uar::AllocUarOut,
    uar::DeallocUarIn,
    uar::DeallocUarOut,
    // eq
    eq::Eqc,
    eq::CreateEqIn,
    eq::CreateEqOut,
    eq::DestroyEqIn,
    eq::DestroyEqOut,
    eq::QueryEqIn,
    eq::QueryEqOut,
    eq::CmdInterCompEvent,
    eq::PagesReqEvent,
    eq::PortStateChangeEvent,
    eq::CompEvent,
    eq::CqError,
    eq::QpEvents,
    eq::DctEvents,
    eq::EventAuto,
    eq::Eqe,
    // cq
    cq::Cqc,
    cq::CreateCqIn,
    cq::CreateCqOut,
    cq::DestroyCqIn,
    cq::DestroyCqOut,
    cq::QueryCqIn,
    cq::QueryCqOut,
    cq::ModifyCqIn,
    cq::ModifyCqOut,
    // mcg
    mcg::AttachToMcgIn,
    mcg::AttachToMcgOut,
    mcg::DetachFromMcgIn,
    mcg::DetachFromMcgOut,
    // pd
    pd::AllocPdIn,
    pd::AllocPdOut,
    pd::DeallocPdIn,
    pd::DeallocPdOut,
    pd::AllocTransportDomainIn,
    pd::AllocTransportDomainOut,
    pd::DeallocTransportDomainIn,
    pd::DeallocTransportDomainOut,
    // pp
    pp::SetPpRateLimitIn,
    pp::SetPpRateLimitOut,
    // q_counter
    q_counter::AllocQCounterIn,
    q_counter::AllocQCounterOut,
    q_counter::DeallocQCounterIn,
    q_counter::DeallocQCounterOut,
    q_counter::QueryQCounterIn,
    q_counter::QueryQCounterOut,
    // mkey
    mkey::Mkc,
    mkey::CreateMkeyIn,
    mkey::CreateMkeyOut,
    mkey::DestroyMkeyIn,
    mkey::DestroyMkeyOut,
    mkey::QueryMkeyIn,
    mkey::QueryMkeyOut,
    mkey::QuerySpecialContextsIn,
    mkey::QuerySpecialContextsOut,
    // qp
    qp::Ads,
    qp::Qpc,
    qp::CreateQpIn,
    qp::CreateQpOut,
    qp::DestroyQpIn,
    qp::DestroyQpOut,
    qp::QueryQpIn,
    qp::QueryQpOut,
    qp::Rst2initQpIn,
    qp::Rst2initQpOut,
    qp::Init2initQpIn,
    qp::Init2initQpOut,
    qp::Init2rtrQpIn,
    qp::Init2rtrQpOut,
    qp::Rtr2rtsQpIn,
    qp::Rtr2rtsQpOut,
    qp::Rts2rtsQpIn,
    qp::Rts2rtsQpOut,
    qp::Sqerr2rtsQpIn,
    qp::Sqerr2rtsQpOut,
    qp::Sqd2rtsQpIn,
    qp::Sqd2rtsQpOut,
    qp::Qp2errIn,
    qp::Qp2errOut,
    qp::Qp2rstIn,
    qp::Qp2rstOut,
    // srq
    srq::Srqc,
    srq::CreateSrqIn,
    srq::CreateSrqOut,
    srq::DestroySrqIn,
    srq::DestroySrqOut,
    srq::QuerySrqIn,
    srq::QuerySrqOut,
    srq::ArmRqIn,
    srq::ArmRqOut,
    // eth
    eth::Wq,
    eth::Sqc,
    eth::Rqc,
    eth::CreateSqIn,
    eth::CreateSqOut,
    eth::ModifySqIn,
    eth::ModifySqOut,
    eth::DestroySqIn,
    eth::DestroySqOut,
    eth::CreateRqIn,
    eth::CreateRqOut,
    eth::ModifyRqIn,
    eth::ModifyRqOut,
    eth::DestroyRqIn,
    eth::DestroyRqOut,
    eth::Tisc,
    eth::RxHashFieldSelect,
    eth::Tirc,
    eth::RqNum,
    eth::Rqtc,
    eth::CreateTisIn,
    eth::CreateTisOut,
    eth::DestroyTisIn,
    eth::DestroyTisOut,
    eth::CreateTirIn,
    eth::CreateTirOut,
    eth::DestroyTirIn,
    eth::DestroyTirOut,
    eth::CreateRqtIn,
    eth::CreateRqtOut,
    eth::DestroyRqtIn,
    eth::DestroyRqtOut,
    // rmp
    rmp::Rmpc,
    rmp::RmpBitmask,
    rmp::CreateRmpIn,
    rmp::CreateRmpOut,
    rmp::ModifyRmpIn,
    rmp::ModifyRmpOut,
    rmp::DestroyRmpIn,
    rmp::DestroyRmpOut,
    rmp::QueryRmpIn,
    rmp::QueryRmpOut,
    // flow
    flow::FlowTableContext,
    flow::CreateFlowTableIn,
    flow::CreateFlowTableOut,
    flow::DestroyFlowTableIn,
    flow::DestroyFlowTableOut,
    flow::FteMatchSetLyr24,
    flow::FteMatchSetMisc,
    flow::FteMatchParam,
    flow::CreateFlowGroupIn,
    flow::CreateFlowGroupOut,
    flow::DestroyFlowGroupIn,
    flow::DestroyFlowGroupOut,
    flow::DestFormatStruct,
    flow::FlowCounterList,
    flow::FlowContext,
    flow::SetFteIn,
    flow::SetFteOut,
    flow::DeleteFteIn,
    flow::DeleteFteOut,
    flow::SetFlowTableRootIn,
    flow::SetFlowTableRootOut,
    // reg
    reg::AccessRegisterIn,
    reg::AccessRegisterOut,
    reg::PaosReg,
    reg::PtysReg,
    reg::PmtuReg,
    reg::RegisterHostEndianness,
    // vport
    vport::QueryVportStateIn,
    vport::QueryVportStateOut,
    vport::MacAddressLayout,
    vport::NicVportContext,
    vport::QueryNicVportContextIn,
    vport::QueryNicVportContextOut,
    vport::ModifyNicVportFieldSelect,
    vport::ModifyNicVportContextIn,
    vport::ModifyNicVportContextOut,
    vport::HcaVportContext,
    vport::QueryHcaVportContextIn,
    vport::QueryHcaVportContextOut,
    vport::QueryHcaVportGidIn,
    vport::QueryHcaVportGidOut,
    vport::Pkey,
    vport::QueryHcaVportPkeyIn,
    vport::QueryHcaVportPkeyOut,
    // roce
    roce::RoceAddrLayout,
    roce::SetRoceAddressIn,
    roce::SetRoceAddressOut,
    roce::QueryRoceAddressIn,
    roce::QueryRoceAddressOut,
    // mad
    mad::MadIfcIn,
    mad::MadIfcOut,
];

static COMMANDS: &[CommandLayouts] = commands![
    hca::EnableHcaIn,
    hca::DisableHcaIn,
    hca::QueryIssiIn,
    hca::SetIssiIn,
    hca::QueryPagesIn,
    hca::ManagePagesIn,
    hca::InitHcaIn,
    hca::TeardownHcaIn,
    hca::SetDriverVersionIn,
    hca::QueryAdapterIn,
    hca::NopIn,
    caps::QueryHcaCapIn,
    caps::SetHcaCapIn,
    uar::AllocUarIn,
    uar::DeallocUarIn,
    eq::CreateEqIn,
    eq::DestroyEqIn,
    eq::QueryEqIn,
    cq::CreateCqIn,
    cq::DestroyCqIn,
    cq::QueryCqIn,
    cq::ModifyCqIn,
    pd::AllocPdIn,
    pd::DeallocPdIn,
    mcg::AttachToMcgIn,
    mcg::DetachFromMcgIn,
    pd::AllocTransportDomainIn,
    pd::DeallocTransportDomainIn,
    q_counter::AllocQCounterIn,
    q_counter::DeallocQCounterIn,
    q_counter::QueryQCounterIn,
    pp::SetPpRateLimitIn,
    mkey::CreateMkeyIn,
    mkey::DestroyMkeyIn,
    mkey::QueryMkeyIn,
    mkey::QuerySpecialContextsIn,
    qp::CreateQpIn,
    qp::DestroyQpIn,
    qp::QueryQpIn,
    qp::Rst2initQpIn,
    qp::Init2initQpIn,
    qp::Init2rtrQpIn,
    qp::Rtr2rtsQpIn,
    qp::Rts2rtsQpIn,
    qp::Sqerr2rtsQpIn,
    qp::Sqd2rtsQpIn,
    qp::Qp2errIn,
    qp::Qp2rstIn,
    srq::CreateSrqIn,
    srq::DestroySrqIn,
    srq::QuerySrqIn,
    srq::ArmRqIn,
    eth::CreateSqIn,
    eth::ModifySqIn,
    eth::DestroySqIn,
    eth::CreateRqIn,
    eth::ModifyRqIn,
    eth::DestroyRqIn,
    eth::CreateTisIn,
    eth::DestroyTisIn,
    eth::CreateTirIn,
    eth::DestroyTirIn,
    eth::CreateRqtIn,
    eth::DestroyRqtIn,
    rmp::CreateRmpIn,
    rmp::ModifyRmpIn,
    rmp::DestroyRmpIn,
    rmp::QueryRmpIn,
    flow::CreateFlowTableIn,
    flow::DestroyFlowTableIn,
    flow::CreateFlowGroupIn,
    flow::DestroyFlowGroupIn,
    flow::SetFteIn,
    flow::DeleteFteIn,
    flow::SetFlowTableRootIn,
    reg::AccessRegisterIn,
    vport::QueryVportStateIn,
    vport::QueryNicVportContextIn,
    vport::ModifyNicVportContextIn,
    vport::QueryHcaVportContextIn,
    vport::QueryHcaVportGidIn,
    vport::QueryHcaVportPkeyIn,
    roce::SetRoceAddressIn,
    roce::QueryRoceAddressIn,
    mad::MadIfcIn,
];

/// Every layout this crate declares (commands, contexts, capability
/// blocks, registers, events, the queue entry and the mailbox block).
pub fn all_layouts() -> &'static [&'static LayoutInfo] {
    LAYOUTS
}

/// The layout whose `mlx5_ifc` name is `ifc`.
pub fn layout_by_ifc(ifc: &str) -> Option<&'static LayoutInfo> {
    LAYOUTS.iter().copied().find(|l| l.ifc == ifc)
}

/// Every command this crate declares, with its layouts.
pub fn all_commands() -> &'static [CommandLayouts] {
    COMMANDS
}

/// The layouts of `opcode`, if this crate declares the command.
pub fn command(opcode: Opcode) -> Option<&'static CommandLayouts> {
    COMMANDS.iter().find(|c| c.opcode == opcode)
}

/// How to decode the command whose input message starts with `input` (at
/// least its 8-byte header; 12 bytes for ACCESS_REG, whose register id is
/// at 0x08).
///
/// [`Error::UnknownOpcode`] for an opcode the crate does not declare
/// (whether or not the PRM knows it), [`Error::Truncated`] for a short
/// input.
pub fn lookup(input: &[u8]) -> Result<CommandDecode, Error> {
    let (opcode, op_mod) = input_header(input)?;
    let c = command(opcode).ok_or(Error::UnknownOpcode(opcode.0))?;
    let mut d = CommandDecode {
        opcode,
        op_mod,
        input: c.input,
        output: c.output,
        input_payload: None,
        output_payload: None,
    };
    match opcode {
        Opcode::QUERY_HCA_CAP => {
            d.output_payload = caps::cap_layout(op_mod >> 1).map(|layout| Payload {
                offset: caps::CAPABILITY_OFFSET,
                layout,
            });
        }
        Opcode::SET_HCA_CAP => {
            d.input_payload = caps::cap_layout(op_mod >> 1).map(|layout| Payload {
                offset: caps::CAPABILITY_OFFSET,
                layout,
            });
        }
        Opcode::ACCESS_REG => {
            if input.len() < 12 {
                return Err(Error::Truncated {
                    what: "access_register_in.register_id",
                    need: 12,
                    got: input.len(),
                });
            }
            let id = read_bits(input, 80, 16) as u16;
            let p = reg::register_layout(id).map(|layout| Payload {
                offset: reg::REGISTER_DATA_OFFSET,
                layout,
            });
            d.input_payload = p;
            d.output_payload = p;
        }
        _ => {}
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::FieldKind;

    #[test]
    fn commands_are_unique_and_known() {
        for (i, c) in COMMANDS.iter().enumerate() {
            assert!(c.opcode.is_known(), "{}", c.input.ifc);
            assert!(
                COMMANDS[..i].iter().all(|o| o.opcode != c.opcode),
                "{} twice",
                c.opcode
            );
            assert!(layout_by_ifc(c.input.ifc).is_some(), "{}", c.input.ifc);
            assert!(layout_by_ifc(c.output.ifc).is_some(), "{}", c.output.ifc);
        }
    }

    #[test]
    fn every_nested_layout_is_registered_and_names_are_unique() {
        for (i, l) in LAYOUTS.iter().enumerate() {
            assert!(
                LAYOUTS[..i].iter().all(|o| o.ifc != l.ifc),
                "{} twice",
                l.ifc
            );
            for f in l.fields {
                if let FieldKind::Struct(n) = f.kind {
                    assert!(layout_by_ifc(n.ifc).is_some(), "{}.{}", l.ifc, f.name);
                }
            }
        }
    }

    #[test]
    fn lookup_selects_payloads() {
        let mut q = [0u8; 16];
        q[..2].copy_from_slice(&[0x01, 0x00]);
        q[7] = 0x07; // atomic, current
        let d = lookup(&q).unwrap();
        assert_eq!(d.output_payload.unwrap().layout.ifc, "atomic_caps");
        q[7] = 0x3e; // type 0x1f: not declared here
        assert!(lookup(&q).unwrap().output_payload.is_none());

        let mut a = [0u8; 16];
        a[..2].copy_from_slice(&[0x08, 0x05]);
        a[10..12].copy_from_slice(&[0x50, 0x06]);
        let d = lookup(&a).unwrap();
        assert_eq!(d.input_payload.unwrap().layout.ifc, "paos_reg");
        assert!(matches!(lookup(&a[..10]), Err(Error::Truncated { .. })));

        let u = [0x12, 0x34, 0, 0, 0, 0, 0, 0];
        assert_eq!(lookup(&u).unwrap_err(), Error::UnknownOpcode(0x1234));
        assert!(lookup(&u[..7]).is_err());
    }
}
