//! A schema check over every `--json` output of `hca`: each command's
//! fields and their types, one GID format everywhere (the colon form of
//! `inet_ntop`, never 32 hex digits), and units that match the results
//! (bandwidth units with bandwidth rows, `usec` with latency rows).

mod common;

use std::net::Ipv6Addr;

use common::{hca, json};
use serde_json::Value;

/// Runs `hca args` (which must succeed) and parses stdout: one JSON value,
/// or one per line with `lines`.
fn run(args: &[&str], lines: bool) -> Vec<Value> {
    let o = hca(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "hca {args:?}: {err}");
    let out = String::from_utf8(o.stdout).unwrap();
    if lines {
        out.lines().map(json).collect()
    } else {
        vec![json(&out)]
    }
}

/// The kinds of value a schema names.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Str,
    Uint,
    Num,
    Bool,
    Obj,
    Arr,
    /// A GID in colon form.
    Gid,
    /// A string or null.
    OptStr,
    /// An unsigned integer or null.
    OptUint,
}

fn is_gid(v: &Value) -> bool {
    v.as_str()
        .and_then(|s| s.parse::<Ipv6Addr>().ok().map(|a| a.to_string() == s))
        .unwrap_or(false)
}

fn kind_ok(v: &Value, k: Kind) -> bool {
    match k {
        Kind::Str => v.is_string(),
        Kind::Uint => v.is_u64(),
        Kind::Num => v.is_number(),
        Kind::Bool => v.is_boolean(),
        Kind::Obj => v.is_object(),
        Kind::Arr => v.is_array(),
        Kind::Gid => is_gid(v),
        Kind::OptStr => v.is_string() || v.is_null(),
        Kind::OptUint => v.is_u64() || v.is_null(),
    }
}

/// `v` has every field of `schema` (JSON pointers) with its kind.
fn fields(what: &str, v: &Value, schema: &[(&str, Kind)]) {
    for &(ptr, k) in schema {
        let f = v
            .pointer(ptr)
            .unwrap_or_else(|| panic!("{what}: no {ptr} in {v}"));
        assert!(kind_ok(f, k), "{what}: {ptr} is not {k:?}: {f}");
    }
}

/// Rules for every output: a key naming a GID holds one in colon form; a
/// `units` is one of the units the tool uses.
fn everywhere(what: &str, v: &Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k == "gid" {
                    assert!(is_gid(x), "{what}: gid {x} is not in colon form");
                }
                if k == "units" {
                    let u = x.as_str().unwrap_or_default();
                    assert!(
                        ["MiB/sec", "Gb/sec", "usec"].contains(&u),
                        "{what}: units {x}"
                    );
                }
                everywhere(what, x);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| everywhere(what, x)),
        _ => {}
    }
}

const ENDPOINT: &[(&str, Kind)] = &[
    ("/lid", Kind::Uint),
    ("/qpn", Kind::Uint),
    ("/psn", Kind::Uint),
    ("/gid", Kind::Gid),
];

fn perf_report(what: &str, v: &Value) {
    fields(
        what,
        v,
        &[
            ("/test", Kind::Str),
            ("/title", Kind::Str),
            ("/role", Kind::Str),
            ("/device", Kind::Str),
            ("/link", Kind::Str),
            ("/connection", Kind::Str),
            ("/qps", Kind::Uint),
            ("/tx_depth", Kind::Uint),
            ("/rx_depth", Kind::OptUint),
            ("/mtu", Kind::Uint),
            ("/link_type", Kind::Str),
            ("/atomic_byte_order", Kind::OptStr),
            ("/local", Kind::Arr),
            ("/remote", Kind::Arr),
            ("/units", Kind::Str),
            ("/results", Kind::Arr),
        ],
    );
    for e in v["local"]
        .as_array()
        .unwrap()
        .iter()
        .chain(v["remote"].as_array().unwrap())
    {
        fields(what, e, ENDPOINT);
        fields(what, e, &[("/rkey", Kind::Uint), ("/addr", Kind::Uint)]);
    }
    let test = v["test"].as_str().unwrap();
    let units = v["units"].as_str().unwrap();
    let rows = v["results"].as_array().unwrap();
    assert!(!rows.is_empty(), "{what}: no results");
    if test.ends_with("-lat") {
        assert_eq!(units, "usec", "{what}");
        for r in rows {
            fields(
                what,
                r,
                &[("/bytes", Kind::Uint), ("/t_avg_usec", Kind::Num)],
            );
            assert!(r.get("bw_average").is_none(), "{what}: {r}");
        }
    } else {
        assert!(units == "MiB/sec" || units == "Gb/sec", "{what}: {units}");
        for r in rows {
            fields(
                what,
                r,
                &[
                    ("/bytes", Kind::Uint),
                    ("/iterations", Kind::Uint),
                    ("/bw_peak", Kind::Num),
                    ("/bw_average", Kind::Num),
                    ("/msg_rate_mpps", Kind::Num),
                ],
            );
            assert!(r.get("t_avg_usec").is_none(), "{what}: {r}");
        }
    }
    assert_eq!(
        v["atomic_byte_order"].is_string(),
        test.starts_with("atomic"),
        "{what}"
    );
}

fn pingpong_report(what: &str, v: &Value) {
    fields(
        what,
        v,
        &[
            ("/transport", Kind::Str),
            ("/role", Kind::Str),
            ("/size", Kind::Uint),
            ("/iters", Kind::Uint),
            ("/bytes", Kind::Uint),
            ("/seconds", Kind::Num),
            ("/mbit_per_sec", Kind::Num),
            ("/usec_per_iter", Kind::Num),
            ("/cq_events", Kind::Uint),
            ("/checked", Kind::Uint),
        ],
    );
    fields(what, &v["local"], ENDPOINT);
    fields(what, &v["remote"], ENDPOINT);
}

#[test]
fn perf_json() {
    for test in [
        "write-bw",
        "write-lat",
        "read-bw",
        "read-lat",
        "send-bw",
        "send-lat",
        "atomic-bw",
        "atomic-lat",
    ] {
        for extra in [&[][..], &["--report_gbits"][..]] {
            let mut args = vec!["perf", test, "-n", "20", "--json"];
            args.extend_from_slice(extra);
            let v = &run(&args, false)[0];
            let what = format!("{args:?}");
            everywhere(&what, v);
            perf_report(&what, v);
            if test.ends_with("-bw") && !extra.is_empty() {
                assert_eq!(v["units"], "Gb/sec", "{what}");
            }
        }
    }
    // A run of a duration, UD, and a server and a client over TCP.
    for args in [
        &["perf", "send-lat", "-D", "1", "--json"][..],
        &["perf", "send-bw", "-c", "UD", "-n", "20", "--json"][..],
        &["perf", "write-bw", "-n", "20", "--tcp-loopback", "--json"][..],
    ] {
        let v = &run(args, false)[0];
        let what = format!("{args:?}");
        everywhere(&what, v);
        perf_report(&what, v);
    }
}

#[test]
fn pingpong_json() {
    for args in [
        &["pingpong", "rc", "-n", "10", "--json"][..],
        &["pingpong", "uc", "-n", "10", "--json"][..],
        &["pingpong", "ud", "-n", "10", "--json"][..],
        &["pingpong", "rc", "-n", "10", "--tcp-loopback", "--json"][..],
    ] {
        let v = &run(args, false)[0];
        let what = format!("{args:?}");
        everywhere(&what, v);
        pingpong_report(&what, v);
    }
}

#[test]
fn info_caps_health_list_trace_json() {
    for args in [&["info", "--json"][..], &["info", "-v", "--json"][..]] {
        let v = &run(args, false)[0];
        let what = format!("{args:?}");
        everywhere(&what, v);
        fields(
            &what,
            v,
            &[
                ("/hca_id", Kind::Str),
                ("/device", Kind::Str),
                ("/fw_ver", Kind::Str),
                ("/node_guid", Kind::Str),
                ("/vendor_id", Kind::Uint),
                ("/phys_port_cnt", Kind::Uint),
                ("/atomic_cap", Kind::Str),
                ("/atomic_byte_order", Kind::OptStr),
                ("/ports", Kind::Arr),
                ("/ports/0/state", Kind::Str),
                ("/ports/0/state_num", Kind::Uint),
                ("/ports/0/down_reason", Kind::OptStr),
                ("/ports/0/link_layer", Kind::Str),
            ],
        );
        if args.contains(&"-v") {
            fields(
                &what,
                v,
                &[
                    ("/attributes", Kind::Obj),
                    ("/ports/0/gids", Kind::Arr),
                    ("/ports/0/gids/0/index", Kind::Uint),
                    ("/ports/0/gids/0/gid", Kind::Gid),
                ],
            );
        }
    }
    let v = &run(&["caps", "--json"], false)[0];
    everywhere("caps", v);
    fields(
        "caps",
        v,
        &[
            ("/mode", Kind::Str),
            ("/general", Kind::Obj),
            ("/atomic", Kind::Obj),
        ],
    );
    let v = &run(&["health", "--json"], false)[0];
    everywhere("health", v);
    fields(
        "health",
        v,
        &[
            ("/device", Kind::Str),
            ("/fw_ver", Kind::Str),
            ("/healthy", Kind::Bool),
            ("/interval_ms", Kind::Uint),
            ("/clock", Kind::Str),
            ("/health_counter", Kind::Arr),
            ("/verdict", Kind::Str),
        ],
    );
    assert_eq!(v["clock"], "virtual");
    let v = &run(&["list", "--json"], false)[0];
    everywhere("list", v);
    assert!(v.is_array(), "{v}");
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/prm/trace-mlx5_core-cx4.txt"
    );
    let cmds = run(&["trace", trace, "--json"], true);
    assert_eq!(cmds.len(), 42);
    for c in &cmds {
        everywhere("trace", c);
        fields(
            "trace",
            c,
            &[
                ("/index", Kind::Uint),
                ("/line", Kind::Uint),
                ("/opcode", Kind::Uint),
                ("/opcode_name", Kind::OptStr),
                ("/op_mod", Kind::Uint),
                ("/input", Kind::Obj),
            ],
        );
    }
}

#[test]
fn the_gid_rule_is_not_vacuous() {
    // What perf wrote before: 32 hex digits; and a non-canonical colon
    // form. Neither passes.
    assert!(!is_gid(&Value::from("fe800000000000007efe90fffe587d01")));
    assert!(!is_gid(&Value::from(
        "fe80:0000:0000:0000:7efe:90ff:fe58:7d01"
    )));
    assert!(is_gid(&Value::from("fe80::7efe:90ff:fe58:7d01")));
    assert!(is_gid(&Value::from("::")));
}
