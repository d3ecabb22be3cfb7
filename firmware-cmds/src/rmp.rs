//! Receive memory pools: the RMP context (`rmpc`), CREATE_RMP, MODIFY_RMP,
//! DESTROY_RMP and QUERY_RMP.
//!
//! An RMP is the shared receive queue of the Ethernet transport objects: RQs
//! whose `rqc.mem_rq_type` is `RQC_MEM_RQ_TYPE_MEMORY_RQ_RMP` take their
//! buffers from the RMP `rqc.rmpn` (Linux also uses RMPs for SRQs on
//! functions that have no SRQ commands). Its buffer is a work queue (`wq`,
//! with `wq_type` linked list); the page list (`wq.pas`) is the flexible
//! array at the end of the context, so it follows the fixed part of
//! CREATE_RMP (`pas` of [`CreateRmpIn`]; send it with
//! [`WithArray`](crate::command::WithArray)).

use crate::eth::Wq;
use crate::prm_struct;

/// `rmpc.state` / `modify_rmp_in.rmp_state`: ready (`MLX5_RMPC_STATE_RDY`).
pub const RMPC_STATE_RDY: u8 = 0x1;
/// `rmpc.state` / `modify_rmp_in.rmp_state`: error (`MLX5_RMPC_STATE_ERR`).
pub const RMPC_STATE_ERR: u8 = 0x3;

prm_struct! {
    /// RMP context (`rmpc`), 0xf0 bytes.
    pub struct Rmpc("rmpc", 0xf0) {
        /// RMP state (`RMPC_STATE_*`).
        state: u8 = 0x00[23:20],
        /// Basic cyclic receive WQEs.
        basic_cyclic_rcv_wqe: bool = 0x04[31:31],
        /// The work queue (its `lwm` is the limit water mark).
        wq: Wq = 0x30,
    }
}

prm_struct! {
    /// Which fields of the context MODIFY_RMP changes (`rmp_bitmask`).
    pub struct RmpBitmask("rmp_bitmask", 0x8) {
        /// `ctx.wq.lwm`.
        lwm: bool = 0x04[0:0],
    }
}

prm_struct! {
    /// CREATE_RMP input (`create_rmp_in`), followed by the page list.
    pub struct CreateRmpIn("create_rmp_in", 0x110): command CREATE_RMP -> CreateRmpOut {
        /// Opcode (CREATE_RMP).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// The RMP context.
        ctx: Rmpc = 0x20,
        /// Physical address list of the RMP buffer (`ctx.wq.pas`).
        pas: [u64] = 0x110,
    }
}

prm_struct! {
    /// CREATE_RMP output (`create_rmp_out`).
    pub struct CreateRmpOut("create_rmp_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The RMP number.
        rmpn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// MODIFY_RMP input (`modify_rmp_in`): the state and the fields of
    /// `bitmask`.
    pub struct ModifyRmpIn("modify_rmp_in", 0x110): command MODIFY_RMP -> ModifyRmpOut {
        /// Opcode (MODIFY_RMP).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Current state (`RMPC_STATE_*`); the new one is `ctx.state`.
        rmp_state: u8 = 0x08[31:28],
        /// The RMP.
        rmpn: u32 = 0x08[23:0],
        /// Fields of `ctx` to modify besides the state.
        bitmask: RmpBitmask = 0x10,
        /// The new context values.
        ctx: Rmpc = 0x20,
    }
}

prm_struct! {
    /// MODIFY_RMP output (`modify_rmp_out`).
    pub struct ModifyRmpOut("modify_rmp_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// DESTROY_RMP input (`destroy_rmp_in`).
    pub struct DestroyRmpIn("destroy_rmp_in", 0x10): command DESTROY_RMP -> DestroyRmpOut {
        /// Opcode (DESTROY_RMP).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// RMP to destroy.
        rmpn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_RMP output (`destroy_rmp_out`).
    pub struct DestroyRmpOut("destroy_rmp_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// QUERY_RMP input (`query_rmp_in`).
    pub struct QueryRmpIn("query_rmp_in", 0x10): command QUERY_RMP -> QueryRmpOut {
        /// Opcode (QUERY_RMP).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// RMP to query.
        rmpn: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// QUERY_RMP output (`query_rmp_out`), followed by the page list.
    pub struct QueryRmpOut("query_rmp_out", 0x110) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The RMP context.
        rmp_context: Rmpc = 0x20,
        /// Physical address list (`rmp_context.wq.pas`).
        pas: [u64] = 0x110,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Command;
    use crate::eth::WQ_TYPE_LINKED_LIST;
    use crate::opcode::Opcode;

    #[test]
    fn rmp_commands_place_their_fields() {
        let wq = Wq::new()
            .with(Wq::wq_type, WQ_TYPE_LINKED_LIST)
            .unwrap()
            .with(Wq::lwm, 0x1234)
            .unwrap();
        let ctx = Rmpc::new()
            .with(Rmpc::state, RMPC_STATE_RDY)
            .unwrap()
            .with(Rmpc::wq, wq)
            .unwrap();
        let c = CreateRmpIn::new().with(CreateRmpIn::ctx, ctx).unwrap();
        let b = c.as_bytes();
        assert_eq!(&b[..2], &[0x09, 0x0c]);
        // rmpc.state: bits 23:20 of the context's first dword.
        assert_eq!(b[0x21], 0x10);
        // wq at 0x30 of the context: wq_type in the top nibble, lwm at 0x06.
        assert_eq!(b[0x20 + 0x30], WQ_TYPE_LINKED_LIST << 4);
        assert_eq!(&b[0x20 + 0x36..0x20 + 0x38], &[0x12, 0x34]);

        let m = ModifyRmpIn::new()
            .with(ModifyRmpIn::rmp_state, RMPC_STATE_RDY)
            .unwrap()
            .with(ModifyRmpIn::rmpn, 0xabcdef)
            .unwrap()
            .with(
                ModifyRmpIn::bitmask,
                RmpBitmask::new().with(RmpBitmask::lwm, true).unwrap(),
            )
            .unwrap();
        let b = m.as_bytes();
        assert_eq!(&b[0x08..0x0c], &[0x10, 0xab, 0xcd, 0xef]);
        assert_eq!(&b[0x10..0x18], &[0, 0, 0, 0, 0, 0, 0, 1]);

        for (op, want) in [
            (CreateRmpIn::OPCODE, "CREATE_RMP"),
            (ModifyRmpIn::OPCODE, "MODIFY_RMP"),
            (DestroyRmpIn::OPCODE, "DESTROY_RMP"),
            (QueryRmpIn::OPCODE, "QUERY_RMP"),
        ] {
            assert_eq!(op.name(), Some(want));
        }
        assert_eq!(QueryRmpIn::OPCODE, Opcode::QUERY_RMP);
    }
}
