//! Protection domains and transport domains: ALLOC_PD, DEALLOC_PD,
//! ALLOC_TRANSPORT_DOMAIN, DEALLOC_TRANSPORT_DOMAIN.

use crate::prm_struct;

prm_struct! {
    /// ALLOC_PD input (`alloc_pd_in`).
    pub struct AllocPdIn("alloc_pd_in", 0x10): command ALLOC_PD -> AllocPdOut {
        /// Opcode (ALLOC_PD).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
    }
}

prm_struct! {
    /// ALLOC_PD output (`alloc_pd_out`).
    pub struct AllocPdOut("alloc_pd_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The protection domain number.
        pd: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DEALLOC_PD input (`dealloc_pd_in`).
    pub struct DeallocPdIn("dealloc_pd_in", 0x10): command DEALLOC_PD -> DeallocPdOut {
        /// Opcode (DEALLOC_PD).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Protection domain to free.
        pd: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DEALLOC_PD output (`dealloc_pd_out`).
    pub struct DeallocPdOut("dealloc_pd_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// ALLOC_TRANSPORT_DOMAIN input (`alloc_transport_domain_in`).
    pub struct AllocTransportDomainIn("alloc_transport_domain_in", 0x10): command ALLOC_TRANSPORT_DOMAIN -> AllocTransportDomainOut {
        /// Opcode (ALLOC_TRANSPORT_DOMAIN).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
    }
}

prm_struct! {
    /// ALLOC_TRANSPORT_DOMAIN output (`alloc_transport_domain_out`).
    pub struct AllocTransportDomainOut("alloc_transport_domain_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The transport domain number (used by TIRs and TISes).
        transport_domain: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DEALLOC_TRANSPORT_DOMAIN input (`dealloc_transport_domain_in`).
    pub struct DeallocTransportDomainIn("dealloc_transport_domain_in", 0x10): command DEALLOC_TRANSPORT_DOMAIN -> DeallocTransportDomainOut {
        /// Opcode (DEALLOC_TRANSPORT_DOMAIN).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Transport domain to free.
        transport_domain: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DEALLOC_TRANSPORT_DOMAIN output (`dealloc_transport_domain_out`).
    pub struct DeallocTransportDomainOut("dealloc_transport_domain_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}
