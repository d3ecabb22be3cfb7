//! The C structs of `hca_ibverbs::ffi` against Debian's
//! `<infiniband/verbs.h>` (libibverbs-dev, which CI installs): a C file
//! printing every size and offset is compiled against the header and run,
//! and each number is compared with Rust's.

use std::mem::{offset_of, size_of};
use std::process::Command;

use hca_ibverbs::{ffi, kabi as compat};

/// One fact: the C expression, and Rust's value.
struct Fact {
    c: String,
    rust: usize,
}

macro_rules! layout {
    ($facts:ident; $( $s:ident { $( $f:ident $(= $cf:literal)? ),* $(,)? } )*) => {
        $(
            $facts.push(Fact {
                c: format!("sizeof(struct {})", stringify!($s)),
                rust: size_of::<ffi::$s>(),
            });
            $(
                #[allow(unused_variables)]
                let cname = stringify!($f);
                $( let cname = $cf; )?
                $facts.push(Fact {
                    c: format!("offsetof(struct {}, {})", stringify!($s), cname),
                    rust: offset_of!(ffi::$s, $f),
                });
            )*
        )*
    };
}

/// A fact of a C expression `c` and its Rust value.
fn fact(c: &str, rust: usize) -> Fact {
    Fact { c: c.into(), rust }
}

fn facts() -> Vec<Fact> {
    let mut v = Vec::new();
    layout! { v;
        ibv_gid_entry { gid, gid_index, port_num, gid_type, ndev_ifindex }
        ibv_device { _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path }
        ibv_context_ops {
            _compat_query_device, _compat_query_port, alloc_mw, bind_mw, dealloc_mw,
            poll_cq, req_notify_cq, post_srq_recv, post_send, post_recv, _compat_async_event
        }
        ibv_context { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }
        verbs_context {
            query_port, advise_mr, create_cq_ex, priv_ = "priv", query_device_ex,
            ibv_destroy_flow, abi_placeholder2 = "ABI_placeholder2", ibv_create_flow,
            abi_placeholder1 = "ABI_placeholder1", open_qp, create_qp_ex, get_srq_num,
            create_srq_ex, open_xrcd, close_xrcd, _abi_placeholder3 = "_ABI_placeholder3",
            sz, context
        }
        ibv_device_attr {
            fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
            vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
            max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
            max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
            max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
            max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
            max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt
        }
        ibv_query_device_ex_input { comp_mask }
        ibv_odp_caps {
            general_caps, rc_odp_caps = "per_transport_caps.rc_odp_caps",
            uc_odp_caps = "per_transport_caps.uc_odp_caps",
            ud_odp_caps = "per_transport_caps.ud_odp_caps"
        }
        ibv_tso_caps { max_tso, supported_qpts }
        ibv_rss_caps {
            supported_qpts, max_rwq_indirection_tables, max_rwq_indirection_table_size,
            rx_hash_fields_mask, rx_hash_function
        }
        ibv_packet_pacing_caps { qp_rate_limit_min, qp_rate_limit_max, supported_qpts }
        ibv_qp_rate_limit_attr { rate_limit, max_burst_sz, typical_pkt_sz, comp_mask }
        ibv_tm_caps { max_rndv_hdr_size, max_num_tags, flags, max_ops, max_sge }
        ibv_cq_moderation_caps { max_cq_count, max_cq_period }
        ibv_pci_atomic_caps { fetch_add, swap, compare_swap }
        ibv_device_attr_ex {
            orig_attr, comp_mask, odp_caps, completion_timestamp_mask, hca_core_clock,
            device_cap_flags_ex, tso_caps, rss_caps, max_wq_type_rq, packet_pacing_caps,
            raw_packet_caps, tm_caps, cq_mod_caps, max_dm_size, pci_atomic_caps, xrc_odp_caps,
            phys_port_cnt_ex
        }
        ibv_port_attr {
            state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
            qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
            init_type_reply, active_width, active_speed, phys_state, link_layer, flags,
            port_cap_flags2
        }
        ibv_async_event { element, event_type }
        ibv_wc {
            wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags,
            pkey_index, slid, sl, dlid_path_bits
        }
        ibv_pd { context, handle }
        ibv_mr { context, pd, addr, length, handle, lkey, rkey }
        ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
        ibv_grh { version_tclass_flow, paylen, next_hdr, hop_limit, sgid, dgid }
        ibv_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num }
        ibv_srq_attr { max_wr, max_sge, srq_limit }
        ibv_srq_init_attr { srq_context, attr }
        ibv_qp_cap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data }
        ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
        ibv_qp_attr {
            qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn,
            dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index,
            alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic,
            max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry,
            alt_port_num, alt_timeout, rate_limit
        }
        ibv_sge { addr, length, lkey }
        ibv_send_wr {
            wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data, wr,
            xrc_remote_srqn = "qp_type.xrc.remote_srqn", ext = "bind_mw"
        }
        ibv_mw_bind_info { mr, addr, length, mw_access_flags }
        ibv_recv_wr { wr_id, next, sg_list, num_sge }
        ibv_srq { context, srq_context, pd, handle, mutex, cond, events_completed }
        ibv_qp {
            context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type,
            mutex, cond, events_completed
        }
        ibv_comp_channel { context, fd, refcnt }
        ibv_data_buf { addr, length }
        ibv_qp_ex {
            qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add,
            wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm, wr_send,
            wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr, wr_set_xrc_srqn,
            wr_set_inline_data, wr_set_inline_data_list, wr_set_sge, wr_set_sge_list, wr_start,
            wr_complete, wr_abort, wr_atomic_write
        }
        ibv_rx_hash_conf { rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask }
        ibv_qp_init_attr_ex {
            qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd,
            create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn, send_ops_flags
        }
        ibv_cq {
            context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
            async_events_completed
        }
        ibv_ah { context, pd, handle }
        ibv_poll_cq_attr { comp_mask }
        ibv_cq_ex {
            context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
            async_events_completed, comp_mask, status, wr_id, start_poll, next_poll, end_poll,
            read_opcode, read_vendor_err, read_byte_len, read_imm_data, read_qp_num, read_src_qp,
            read_wc_flags, read_slid, read_sl, read_dlid_path_bits, read_completion_ts,
            read_cvlan, read_flow_tag, read_tm_info, read_completion_wallclock_ns
        }
        ibv_cq_init_attr_ex {
            cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain
        }
        ibv_flow_attr { comp_mask, type_ = "type", size, priority, num_of_specs, port, flags }
        ibv_flow { comp_mask, context, handle }
        ibv_flow_eth_filter { dst_mac, src_mac, ether_type, vlan_tag }
        ibv_flow_spec_eth { type_ = "type", size, val, mask }
        ibv_flow_ipv4_filter { src_ip, dst_ip }
        ibv_flow_spec_ipv4 { type_ = "type", size, val, mask }
        ibv_flow_ipv4_ext_filter { src_ip, dst_ip, proto, tos, ttl, flags }
        ibv_flow_spec_ipv4_ext { type_ = "type", size, val, mask }
        ibv_flow_ipv6_filter { src_ip, dst_ip, flow_label, next_hdr, traffic_class, hop_limit }
        ibv_flow_spec_ipv6 { type_ = "type", size, val, mask }
        ibv_flow_tcp_udp_filter { dst_port, src_port }
        ibv_flow_spec_tcp_udp { type_ = "type", size, val, mask }
        ibv_flow_spec_action_drop { type_ = "type", size }
        ibv_flow_spec_action_tag { type_ = "type", size, tag_id }
    }
    // The kernel-ABI structs of the historical copies (librdmacm's).
    macro_rules! kern {
        ($s:ident { $($f:ident),* }) => {
            v.push(Fact {
                c: format!("sizeof(struct {})", stringify!($s)),
                rust: size_of::<compat::$s>(),
            });
            $(v.push(Fact {
                c: format!("offsetof(struct {}, {})", stringify!($s), stringify!($f)),
                rust: offset_of!(compat::$s, $f),
            });)*
        };
    }
    kern!(ib_uverbs_global_route {
        dgid,
        flow_label,
        sgid_index,
        hop_limit,
        traffic_class
    });
    kern!(ib_uverbs_ah_attr {
        grh,
        dlid,
        sl,
        src_path_bits,
        static_rate,
        is_global,
        port_num
    });
    kern!(ib_uverbs_qp_attr {
        qp_attr_mask,
        qp_state,
        cur_qp_state,
        path_mtu,
        path_mig_state,
        qkey,
        rq_psn,
        sq_psn,
        dest_qp_num,
        qp_access_flags,
        ah_attr,
        alt_ah_attr,
        max_send_wr,
        max_recv_wr,
        max_send_sge,
        max_recv_sge,
        max_inline_data,
        pkey_index,
        alt_pkey_index,
        en_sqd_async_notify,
        sq_draining,
        max_rd_atomic,
        max_dest_rd_atomic,
        min_rnr_timer,
        port_num,
        timeout,
        retry_cnt,
        rnr_retry,
        alt_port_num,
        alt_timeout,
        reserved
    });
    kern!(ib_user_path_rec {
        dgid,
        sgid,
        dlid,
        slid,
        raw_traffic,
        flow_label,
        reversible,
        mtu,
        pkey,
        hop_limit,
        traffic_class,
        numb_path,
        sl,
        mtu_selector,
        rate_selector,
        rate,
        packet_life_time_selector,
        packet_life_time,
        preference
    });
    kern!(ibv_sa_path_rec {
        dgid,
        sgid,
        dlid,
        slid,
        raw_traffic,
        flow_label,
        hop_limit,
        traffic_class,
        reversible,
        numb_path,
        pkey,
        sl,
        mtu_selector,
        mtu,
        rate_selector,
        rate,
        packet_life_time_selector,
        packet_life_time,
        preference
    });
    // The members of the send work request's unions.
    v.extend([
        fact(
            "offsetof(struct ibv_send_wr, wr.rdma.rkey)",
            offset_of!(ffi::ibv_send_wr, wr) + offset_of!(ffi::ibv_send_wr_rdma, rkey),
        ),
        fact(
            "offsetof(struct ibv_send_wr, wr.atomic.rkey)",
            offset_of!(ffi::ibv_send_wr, wr) + offset_of!(ffi::ibv_send_wr_atomic, rkey),
        ),
        fact(
            "offsetof(struct ibv_send_wr, wr.ud.remote_qkey)",
            offset_of!(ffi::ibv_send_wr, wr) + offset_of!(ffi::ibv_send_wr_ud, remote_qkey),
        ),
        fact(
            "offsetof(struct ibv_send_wr, tso.mss)",
            offset_of!(ffi::ibv_send_wr, ext) + offset_of!(ffi::ibv_send_wr_tso, mss),
        ),
        fact("sizeof(union ibv_gid)", size_of::<ffi::ibv_gid>()),
        // The compat port attributes the IBVERBS_1.1 ibv_query_port writes end
        // where port_cap_flags2 begins.
        fact(
            "offsetof(struct ibv_port_attr, port_cap_flags2)",
            ffi::COMPAT_PORT_ATTR_LEN,
        ),
    ]);
    v
}

const HEADER: &str = "/usr/include/infiniband/verbs.h";

#[test]
fn structs_match_debians_verbs_h() {
    assert!(
        std::path::Path::new(HEADER).exists(),
        "{HEADER} is missing: install libibverbs-dev (apt-get install libibverbs-dev; .ci/run does)"
    );
    let facts = facts();
    let dir = std::env::temp_dir().join(format!("hca-ibverbs-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut src = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\n#include <infiniband/sa.h>\n#include <rdma/ib_user_verbs.h>\n#include <rdma/ib_user_sa.h>\nint main(void) {\n",
    );
    for f in &facts {
        src.push_str(&format!("    printf(\"%zu\\n\", (size_t)({}));\n", f.c));
    }
    src.push_str("    return 0;\n}\n");
    let c = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&c, src).unwrap();
    let out = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the layout program");
    assert!(run.status.success());
    let text = String::from_utf8(run.stdout).unwrap();
    let values: Vec<usize> = text.lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(values.len(), facts.len());
    let mut wrong = Vec::new();
    for (f, c) in facts.iter().zip(&values) {
        if f.rust != *c {
            wrong.push(format!("{}: C {} Rust {}", f.c, c, f.rust));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        wrong.is_empty(),
        "{} of {} facts differ:\n{}",
        wrong.len(),
        facts.len(),
        wrong.join("\n")
    );
    eprintln!("{} sizes and offsets agree with {HEADER}", facts.len());
}
