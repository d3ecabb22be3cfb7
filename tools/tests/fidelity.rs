//! The driver's firmware traffic where it must match what Linux sends to a
//! real ConnectX (issue: "match real firmware"), checked on a recording of
//! `hca --dump-commands FILE pingpong rc` decoded by `hca trace --json`.

mod common;

use common::{hca, json};
use serde_json::Value;

fn recorded_pingpong() -> Vec<Value> {
    let dir = std::env::temp_dir().join(format!("hca-fidelity-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dump = dir.join("pingpong.trace");
    let dump = dump.display().to_string();
    let o = hca(&["--dump-commands", &dump, "pingpong", "rc", "-n", "10"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = hca(&["trace", &dump, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cmds: Vec<Value> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(json)
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    cmds
}

fn named<'a>(cmds: &'a [Value], name: &str) -> Vec<&'a Value> {
    cmds.iter().filter(|c| c["opcode_name"] == name).collect()
}

#[test]
fn pingpong_sends_what_linux_sends() {
    let cmds = recorded_pingpong();
    assert!(cmds.iter().all(|c| c["status"] == 0));

    // CREATE_MKEY: the MTT in whole octowords (Linux reg_create, rdma-core
    // mlx5_vfio_reg_mr), as many as translations_octword_actual_size says.
    let mkeys = named(&cmds, "CREATE_MKEY");
    assert!(!mkeys.is_empty());
    for m in mkeys {
        let len = m["input_length"].as_u64().unwrap();
        let octowords = m["input"]["translations_octword_actual_size"]
            .as_u64()
            .unwrap();
        assert!(octowords > 0, "{m}");
        assert_eq!(len, 0x110 + 16 * octowords, "{m}");
    }

    // RoCE: roce_en before any RoCE address command; vhca_port_num left 0
    // on a card with num_vhca_ports 0 (Linux lib/gid.c).
    let index = |c: &Value| c["index"].as_u64().unwrap();
    let first = |name: &str| named(&cmds, name).first().map(|c| index(c));
    let roce_en = first("MODIFY_NIC_VPORT_CONTEXT").expect("RoCE enabled");
    for name in ["SET_ROCE_ADDRESS", "QUERY_ROCE_ADDRESS"] {
        if let Some(i) = first(name) {
            assert!(i > roce_en, "{name} at {i} before roce_en at {roce_en}");
        }
    }
    let sets = named(&cmds, "SET_ROCE_ADDRESS");
    assert!(!sets.is_empty() && sets.len() % 2 == 0, "{}", sets.len());
    for s in &sets {
        assert_eq!(s["input"]["vhca_port_num"], 0, "{s}");
    }
    // RoCE v1 at GID index 0, v2 at 1, as Linux lays out a port's GIDs.
    let versions: Vec<(u64, u64)> = sets
        .iter()
        .map(|s| {
            (
                s["input"]["roce_address_index"].as_u64().unwrap(),
                s["input"]["roce_address"]["roce_version"].as_u64().unwrap(),
            )
        })
        .collect();
    for pair in versions.chunks(2) {
        assert_eq!(pair, [(0, 0), (1, 2)]);
    }

    // Every transition asks for ACKs as Linux does (MLX5_IB_ACK_REQ_FREQ).
    for name in ["RST2INIT_QP", "INIT2RTR_QP", "RTR2RTS_QP"] {
        let t = named(&cmds, name);
        assert!(!t.is_empty(), "{name}");
        for c in t {
            assert_eq!(c["input"]["qpc"]["log_ack_req_freq"], 8, "{name}");
        }
    }

    // INIT2RTR over RoCE: no grh bit (mlx5_set_path), the GRH fields set.
    let rtr = named(&cmds, "INIT2RTR_QP");
    assert!(!rtr.is_empty());
    for r in rtr {
        let path = &r["input"]["qpc"]["primary_address_path"];
        assert_eq!(path["grh"], 0, "{path}");
        assert_eq!(path["src_addr_index"], 1, "{path}");
        assert_ne!(path["rgid_rip"], "00000000000000000000000000000000");
    }
}

/// `hca info -v` shows each GID with its RoCE version, as ibv_devinfo does,
/// laid out as Linux lays out a port's default GIDs (v1 at 0, v2 at 1).
#[test]
fn info_shows_each_gid_with_its_roce_version() {
    let o = hca(&["info", "-v"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    let gids: Vec<&str> = text.lines().filter(|l| l.contains("GID[")).collect();
    assert_eq!(gids.len(), 2, "{text}");
    assert!(gids[0].trim_start().starts_with("GID[  0]:"), "{}", gids[0]);
    assert!(gids[0].ends_with(", RoCE v1"), "{}", gids[0]);
    assert!(gids[1].trim_start().starts_with("GID[  1]:"), "{}", gids[1]);
    assert!(gids[1].ends_with(", RoCE v2"), "{}", gids[1]);
    let o = hca(&["info", "-v", "--json"]);
    assert!(o.status.success());
    let v = json(&String::from_utf8(o.stdout).unwrap());
    let g = &v["ports"][0]["gids"];
    assert_eq!(g[0]["index"], 0);
    assert_eq!(g[0]["type"], "RoCE v1");
    assert_eq!(g[1]["index"], 1);
    assert_eq!(g[1]["type"], "RoCE v2");
}
