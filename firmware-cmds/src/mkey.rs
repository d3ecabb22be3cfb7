//! Memory keys: the memory key context (`mkc`), CREATE_MKEY, DESTROY_MKEY,
//! QUERY_MKEY and QUERY_SPECIAL_CONTEXTS.
//!
//! A memory key (lkey/rkey) is `mkey_index << 8 | mkey_7_0`: the index the
//! firmware returns and the 8-bit key the driver chose in the context.

use crate::Error;
use crate::prm_struct;

/// Access mode `MLX5_MKC_ACCESS_MODE_PA`: physical addresses, no translation.
pub const MKC_ACCESS_MODE_PA: u8 = 0x0;
/// Access mode `MLX5_MKC_ACCESS_MODE_MTT`: a memory translation table of
/// pages (8-byte entries).
pub const MKC_ACCESS_MODE_MTT: u8 = 0x1;
/// Access mode `MLX5_MKC_ACCESS_MODE_KLMS`: a list of (key, length, address)
/// entries.
pub const MKC_ACCESS_MODE_KLMS: u8 = 0x2;
/// Access mode `MLX5_MKC_ACCESS_MODE_KSM`: fixed-size key/address entries.
pub const MKC_ACCESS_MODE_KSM: u8 = 0x3;
/// Access mode `MLX5_MKC_ACCESS_MODE_SW_ICM`: software-owned ICM.
pub const MKC_ACCESS_MODE_SW_ICM: u8 = 0x4;
/// Access mode `MLX5_MKC_ACCESS_MODE_MEMIC`: device memory.
pub const MKC_ACCESS_MODE_MEMIC: u8 = 0x5;

/// The key of memory key index `index` with variant byte `key` (`mkey_7_0`).
pub const fn mkey_from_index(index: u32, key: u8) -> u32 {
    (index << 8) | key as u32
}

/// The index part of a memory key (what DESTROY_MKEY takes).
pub const fn mkey_to_index(mkey: u32) -> u32 {
    mkey >> 8
}

prm_struct! {
    /// Memory key context (`mkc`), 64 bytes.
    pub struct Mkc("mkc", 0x40) {
        /// The key is free (not valid).
        free: bool = 0x00[30:30],
        /// Bits 4:2 of the access mode (`MKC_ACCESS_MODE_*`).
        access_mode_4_2: u8 = 0x00[28:26],
        /// Relaxed-ordering writes.
        relaxed_ordering_write: bool = 0x00[18:18],
        /// Small fence on RDMA read responses.
        small_fence_on_rdma_read_response: bool = 0x00[16:16],
        /// The key can be modified with UMR.
        umr_en: bool = 0x00[15:15],
        /// Remote atomic access.
        a: bool = 0x00[14:14],
        /// Remote write access.
        rw: bool = 0x00[13:13],
        /// Remote read access.
        rr: bool = 0x00[12:12],
        /// Local write access.
        lw: bool = 0x00[11:11],
        /// Local read access.
        lr: bool = 0x00[10:10],
        /// Bits 1:0 of the access mode (`MKC_ACCESS_MODE_*`).
        access_mode_1_0: u8 = 0x00[9:8],
        /// QP the key is bound to (0xffffff: any).
        qpn: u32 = 0x04[31:8],
        /// The variable 8 bits of the key.
        mkey_7_0: u8 = 0x04[7:0],
        /// The region covers the whole 64-bit address space (`len` ignored).
        length64: bool = 0x0c[31:31],
        /// A BSF (signature) is attached.
        bsf_en: bool = 0x0c[30:30],
        /// Synchronous UMR.
        sync_umr: bool = 0x0c[29:29],
        /// Expected signature error count.
        expected_sigerr_count: bool = 0x0c[26:26],
        /// Remote invalidation allowed.
        en_rinval: bool = 0x0c[24:24],
        /// Protection domain.
        pd: u32 = 0x0c[23:0],
        /// Start (virtual) address of the region.
        start_addr: u64 = 0x10[63:0],
        /// Length of the region in bytes.
        len: u64 = 0x18[63:0],
        /// Size of the BSF in octwords.
        bsf_octword_size: u32 = 0x20[31:0],
        /// Size of the translation table in octwords (16 bytes; two MTT
        /// entries each).
        translations_octword_size: u32 = 0x34[31:0],
        /// Read-after-write ordering.
        order_read_after_write: u8 = 0x38[9:8],
        /// Relaxed-ordering reads.
        relaxed_ordering_read: bool = 0x38[6:6],
        /// log2 of the translation page size in bytes (12 = 4 KiB).
        log_page_size: u8 = 0x38[4:0],
        /// Crypto enable.
        crypto_en: u8 = 0x3c[28:27],
    }
}

impl Mkc {
    /// Sets both parts of the access mode (`MKC_ACCESS_MODE_*`, 5 bits).
    pub fn set_access_mode(&mut self, mode: u8) -> Result<&mut Self, Error> {
        if mode > 0x1f {
            return Err(Error::FieldOverflow {
                layout: "mkc",
                field: "access_mode",
                value: u64::from(mode),
                width: 5,
            });
        }
        self.set(Self::access_mode_1_0, mode & 0x3)?
            .set(Self::access_mode_4_2, mode >> 2)
    }

    /// The access mode assembled from its two parts.
    pub fn access_mode(&self) -> u8 {
        (self.get(Self::access_mode_4_2) << 2) | self.get(Self::access_mode_1_0)
    }
}

prm_struct! {
    /// CREATE_MKEY input (`create_mkey_in`), followed by the translation
    /// entries (`klm_pas_mtt`).
    pub struct CreateMkeyIn("create_mkey_in", 0x110): command CREATE_MKEY -> CreateMkeyOut {
        /// Opcode (CREATE_MKEY).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Page-fault (ODP) access.
        pg_access: bool = 0x0c[31:31],
        /// The memory key context.
        memory_key_mkey_entry: Mkc = 0x10,
        /// Number of octwords of translation entries actually given.
        translations_octword_actual_size: u32 = 0x60[31:0],
        /// User memory object holding the translation.
        mkey_umem_id: u32 = 0x64[31:0],
        /// Offset in the user memory object.
        mkey_umem_offset: u64 = 0x68[63:0],
        /// Translation entries: big-endian 32-bit words (an MTT entry is two
        /// words: the 64-bit page address with the access bits in bits 1:0).
        klm_pas_mtt: [u32] = 0x110,
    }
}

prm_struct! {
    /// CREATE_MKEY output (`create_mkey_out`).
    pub struct CreateMkeyOut("create_mkey_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The memory key index (the key is `mkey_index << 8 | mkey_7_0`).
        mkey_index: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_MKEY input (`destroy_mkey_in`).
    pub struct DestroyMkeyIn("destroy_mkey_in", 0x10): command DESTROY_MKEY -> DestroyMkeyOut {
        /// Opcode (DESTROY_MKEY).
        opcode: u16 = 0x00[31:16],
        /// User context id.
        uid: u16 = 0x00[15:0],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Index of the key to destroy.
        mkey_index: u32 = 0x08[23:0],
    }
}

prm_struct! {
    /// DESTROY_MKEY output (`destroy_mkey_out`).
    pub struct DestroyMkeyOut("destroy_mkey_out", 0x10) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
    }
}

prm_struct! {
    /// QUERY_MKEY input (`query_mkey_in`).
    pub struct QueryMkeyIn("query_mkey_in", 0x10): command QUERY_MKEY -> QueryMkeyOut {
        /// Opcode (QUERY_MKEY).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
        /// Index of the key to query.
        mkey_index: u32 = 0x08[23:0],
        /// Page-fault (ODP) access.
        pg_access: bool = 0x0c[31:31],
    }
}

prm_struct! {
    /// QUERY_MKEY output (`query_mkey_out`).
    pub struct QueryMkeyOut("query_mkey_out", 0x130) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The memory key context.
        memory_key_mkey_entry: Mkc = 0x10,
        /// BSF 0, KLM 0 or MTT entries 0 and 1.
        bsf0_klm0_pas_mtt0_1: [u8; 16] = 0x110,
        /// BSF 1, KLM 1 or MTT entries 2 and 3.
        bsf1_klm1_pas_mtt2_3: [u8; 16] = 0x120,
    }
}

prm_struct! {
    /// QUERY_SPECIAL_CONTEXTS input (`query_special_contexts_in`).
    pub struct QuerySpecialContextsIn("query_special_contexts_in", 0x10): command QUERY_SPECIAL_CONTEXTS -> QuerySpecialContextsOut {
        /// Opcode (QUERY_SPECIAL_CONTEXTS).
        opcode: u16 = 0x00[31:16],
        /// Op mod.
        op_mod: u16 = 0x04[15:0],
    }
}

prm_struct! {
    /// QUERY_SPECIAL_CONTEXTS output (`query_special_contexts_out`).
    pub struct QuerySpecialContextsOut("query_special_contexts_out", 0x20) {
        /// Return status.
        status: u8 = 0x00[31:24],
        /// Syndrome.
        syndrome: u32 = 0x04[31:0],
        /// The dump-fill key (reads return the fill pattern).
        dump_fill_mkey: u32 = 0x08[31:0],
        /// The reserved lkey: physical addresses, no translation.
        resd_lkey: u32 = 0x0c[31:0],
        /// The null key (`null_mkey` capability): scatter entries with it
        /// are skipped.
        null_mkey: u32 = 0x10[31:0],
    }
}
