#!/usr/bin/env python3
"""Runs both sides of bench/incumbent and prints one table (run.sh calls it).

Three programs: libmlx5 (the C harness), verbs-core (vs_libmlx5) and
hca_driver::verbs (hca-tests' vs_libmlx5_driver), with the same command
line and output. Instructions per operation: one callgrind run per measured function
(`--toggle-collect=<fn>`, the program running only that scenario), the
total Ir divided by the operations the program reports. Nanoseconds: both
programs run every scenario ROUNDS times, alternately, and the best (lowest)
of the rounds is taken: on a shared machine other load only ever adds
time. Ratios are libmlx5 / ours, for each of our layers: above 1.0 ours is
cheaper; --check fails when either layer's instruction ratio is below 1.0
in any row.
"""
import argparse
import os
import subprocess
import sys
import tempfile

# (scenario, what, libmlx5 API, libmlx5 function, verbs-core function,
#  verbs-core API, hca_driver::verbs function, hca_driver::verbs API)
POST1 = ("op_api_post1", "Qp::post_rdma_write")
POST32 = ("op_api_post32", "Qp::batch, SendBatch::post_rdma_write")
POST1_DB = ("drv_post1_db", "Qp::post_rdma_write")
POST32_DB = ("drv_post32_db", "Qp::batch, SendBatch::post_rdma_write")
ROWS = [
    ("post1", "post one RDMA write (1 SGE) + doorbell", "ibv_post_send", "lib_post1", "ours_post1", "SendQueue::post_send_sge", *POST1),
    ("post1", "post one RDMA write (1 SGE) + doorbell", "ibv_wr_*", "lib_post1_wr", "ours_post1", "SendQueue::post_send_sge", *POST1),
    ("post32", "post 32, one doorbell, per WQE", "ibv_post_send (list)", "lib_post32", "ours_post32", "SendBatch::post_send_sge", *POST32),
    ("post32", "post 32, one doorbell, per WQE", "ibv_wr_*", "lib_post32_wr", "ours_post32", "SendBatch::post_send_sge", *POST32),
    ("post1_db", "post one + doorbell, doorbell model", "ibv_post_send", "lib_post1_db", "ours_post1_db", "SendQueue::post_send_sge", *POST1_DB),
    ("post1_db", "post one + doorbell, doorbell model", "ibv_wr_*", "lib_post1_wr_db", "ours_post1_db", "SendQueue::post_send_sge", *POST1_DB),
    ("post32_db", "post 32, one doorbell, doorbell model, per WQE", "ibv_post_send (list)", "lib_post32_db", "ours_post32_db", "SendBatch::post_send_sge", *POST32_DB),
    ("post32_db", "post 32, one doorbell, doorbell model, per WQE", "ibv_wr_*", "lib_post32_wr_db", "ours_post32_db", "SendBatch::post_send_sge", *POST32_DB),
    ("poll1", "poll one CQE", "ibv_poll_cq(1)", "lib_poll1", "ours_poll1", "Cq::poll_one", "op_api_poll1", "Cq::poll_one"),
    ("poll32", "poll 32, per CQE", "ibv_poll_cq(32)", "lib_poll32", "ours_poll32", "Cq::poll", "op_api_poll32", "Cq::poll"),
    ("inline64", "SEND with 64 B inline (BlueFlame)", "ibv_post_send", "lib_inline64", "ours_inline64", "SendQueue::post_send", "drv_inline64", "Qp::post_send"),
    ("inline64", "SEND with 64 B inline (BlueFlame)", "ibv_wr_*", "lib_inline64_wr", "ours_inline64", "SendQueue::post_send", "drv_inline64", "Qp::post_send"),
    ("ud", "UD SEND with an address vector", "ibv_post_send", "lib_ud", "ours_ud", "SendQueue::post_send", "drv_ud", "Qp::post_send"),
    ("ud", "UD SEND with an address vector", "ibv_wr_*", "lib_ud_wr", "ours_ud", "SendQueue::post_send", "drv_ud", "Qp::post_send"),
    ("recv", "post one receive (1 SGE)", "ibv_post_recv", "lib_recv", "ours_recv", "RecvQueue::post_recv", "drv_recv", "Qp::post_recv"),
]


def parse(out):
    ops, ns = {}, {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3 and f[0] == "ops":
            ops[f[1]] = int(f[2])
        elif len(f) == 3 and f[0] == "ns":
            ns[f[1]] = float(f[2])
    return ops, ns


def run(cmd, env):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"failed: {' '.join(cmd)}")
    return r.stdout


# `libmlx5_bench --dump NAME` against the golden vector of the same work
# request: the hand-filled provider objects must make the library write
# exactly what the vector generator's did.
DUMPS = [
    ("post1", "send", "rc_rdma_write_1sge_signaled"),
    ("post1_wr", "send", "rc_wr_api_rdma_write"),
    ("inline60", "send", "rc_send_inline_60"),
    ("inline16_wr", "send", "rc_wr_api_send_inline_16"),
    ("ud", "send", "ud_send_ib"),
    ("ud_wr", "send", "ud_wr_api_send_ib"),
    ("recv", "recv", "rc_recv_1sge"),
]


def verify_incumbent(binary, vectors_path, env):
    import json
    with open(vectors_path) as f:
        vectors = json.load(f)
    for dump, kind, name in DUMPS:
        v = next(x for x in vectors[kind] if x["name"] == name)
        r = v["result"]
        got = dict(line.split(" ", 1) for line in run([binary, "--dump", dump], env).splitlines())
        want = {"return": str(r["return"]), "wqe": r["wqes"][0]["bytes"]}
        if kind == "send":
            want["dbrec"] = r["doorbell_record"]["sq_dbrec_bytes"]
            reg = r["doorbell_register"]
            assert reg["uar_page_offset"] == "0x800", name
            want["uar"] = reg["bytes"]
            got["uar"] = got["uar"][: 2 * reg["length"]]
        else:
            want["dbrec"] = r["doorbell_record"]["rq_dbrec_bytes"]
        for k, w in want.items():
            if got.get(k) != w:
                raise SystemExit(f"libmlx5 harness: {dump} differs from golden vector {name} in {k}:\n"
                                 f"  got  {got.get(k)}\n  want {w}")
    print(f"  libmlx5 harness reproduces {len(DUMPS)} golden vectors", file=sys.stderr)


def instructions(binary, fn, scenario, n, env):
    with tempfile.TemporaryDirectory() as d:
        cg = os.path.join(d, "cg.out")
        out = run(["valgrind", "--tool=callgrind", f"--toggle-collect={fn}",
                   f"--callgrind-out-file={cg}", binary, str(n), scenario], env)
        ops, _ = parse(out)
        total = None
        with open(cg) as f:
            for line in f:
                if line.startswith("summary:") or line.startswith("totals:"):
                    total = int(line.split()[1])
        if total is None or fn not in ops:
            raise SystemExit(f"no count for {fn}")
        return total / ops[fn]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--ours", required=True, help="verbs-core's program (vs_libmlx5)")
    ap.add_argument("--driver", required=True,
                    help="hca_driver::verbs's program (hca-tests' vs_libmlx5_driver)")
    ap.add_argument("--rdma-core", default="rdma-core")
    ap.add_argument("--vectors", help="golden vectors to check the libmlx5 harness against")
    ap.add_argument("--out")
    ap.add_argument("--update-readme", metavar="README",
                    help="replace the table between the incumbent-table markers of README")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if any instruction ratio libmlx5/ours (either of our layers) is below 1.0")
    a = ap.parse_args()
    env = dict(os.environ)
    env.setdefault("DOORBELL_MODEL", "nt")
    cg_n = int(env.get("CG_N", "10000"))
    time_n = int(env.get("TIME_N", "200000"))
    rounds = int(env.get("ROUNDS", "5"))

    if a.vectors:
        verify_incumbent(a.lib, a.vectors, env)

    ir = {}
    for scen, _, _, lib_fn, our_fn, _, drv_fn, _ in ROWS:
        for binary, fn in ((a.lib, lib_fn), (a.ours, our_fn), (a.driver, drv_fn)):
            if fn not in ir:
                ir[fn] = instructions(binary, fn, scen, cg_n, env)
                print(f"  callgrind {fn}: {ir[fn]:.2f} instructions/op", file=sys.stderr)

    samples = {}
    programs = (a.lib, a.ours, a.driver)
    for r in range(rounds):
        # Alternating order: each program first, middle and last in turn.
        k = r % len(programs)
        for binary in programs[k:] + programs[:k]:
            _, ns = parse(run([binary, str(time_n)], env))
            for fn, v in ns.items():
                samples.setdefault(fn, []).append(v)
    ns = {fn: min(v) for fn, v in samples.items()}

    model = env["DOORBELL_MODEL"]
    lines = [
        "| operation | libmlx5 API | verbs-core API | `hca_driver::verbs` API "
        "| libmlx5 instr/op | verbs-core instr/op | ratio | driver instr/op | ratio "
        "| libmlx5 ns/op | verbs-core ns/op | ratio | driver ns/op | ratio |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    worst = None
    bad = []
    for scen, what, lib_api, lib_fn, our_fn, our_api, drv_fn, drv_api in ROWS:
        ri = ir[lib_fn] / ir[our_fn]
        rd = ir[lib_fn] / ir[drv_fn]
        rn = ns[lib_fn] / ns[our_fn]
        rnd = ns[lib_fn] / ns[drv_fn]
        for r, layer in ((ri, "verbs-core"), (rd, "hca_driver::verbs")):
            if worst is None or r < worst[0]:
                worst = (r, what, lib_api, layer)
            if r < 1.0:
                bad.append((r, what, lib_api, layer))
        lines.append(
            f"| {what} | `{lib_api}` | `{our_api}` | `{drv_api}` | {ir[lib_fn]:.1f} | "
            f"{ir[our_fn]:.1f} | **{ri:.2f}** | {ir[drv_fn]:.1f} | **{rd:.2f}** | "
            f"{ns[lib_fn]:.1f} | {ns[our_fn]:.1f} | {rn:.2f} | {ns[drv_fn]:.1f} | {rnd:.2f} |")
    foot = (f"{a.rdma_core}; doorbell model `{model}`; callgrind N = {cg_n}; "
            f"ns/op: best of {rounds} alternating runs of N = {time_n}. "
            f"Ratios = libmlx5 / ours (above 1: ours cheaper); verbs-core on "
            f"memory standing in for the device, `hca_driver::verbs` on an emulated "
            f"ConnectX-4 whose UAR pages are memory.")
    text = "\n".join(lines) + "\n\n" + foot + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    if a.update_readme:
        start, end = "<!-- incumbent-table:start -->", "<!-- incumbent-table:end -->"
        with open(a.update_readme) as f:
            readme = f.read()
        if start not in readme or end not in readme:
            raise SystemExit(f"{a.update_readme} has no {start} ... {end} markers")
        head, rest = readme.split(start, 1)
        _, tail = rest.split(end, 1)
        with open(a.update_readme, "w") as f:
            f.write(head + start + "\n" + text + end + tail)
        print(f"updated {a.update_readme}", file=sys.stderr)
    if a.check:
        if bad:
            for r, w, api, layer in bad:
                print(f"CHECK FAILED: {w} ({api}) against {layer}: libmlx5/ours = {r:.2f} < 1.0",
                      file=sys.stderr)
            return 1
        print(f"check passed: every instruction ratio libmlx5/ours >= 1.0, both layers "
              f"(lowest {worst[0]:.2f}: {worst[1]}, {worst[2]}, against {worst[3]})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
