#!/usr/bin/env bash
# tests/peers/run.sh SUITE: other people's software (and our own tools
# through the real VFIO API) against hca-emu.
#
# Installs what SUITE needs, runs it, and ends with one line
# `N passed, N failed, N skipped`. Exits non-zero if anything failed, or
# if anything was skipped (no suite here but pyverbs has a test that may
# skip), or if nothing ran at all.
#
# Suites:
#   mlx5_vfio  rdma-core's tests/test_mlx5_vfio.py (Debian's python3-pyverbs,
#              unmodified, system python3) against an emulated function
#              presented through the VFIO preload library.
#   vfio_hca   the `hca` tool and the hardware variants of hca-tests,
#              built with platform::vfio, against emulated functions
#              presented the same way.
#   pcap       `hca --pcap` captures of pingpong rc/uc/ud and perf
#              write/read/send/atomic, below and above the MTU, judged by
#              tshark (Debian's tshark): every frame RoCE, no malformed
#              packet, no expert info of severity warning or error; and
#              the ICRC of every frame checked by tests/peers/roce_icrc.py
#              (tshark's InfiniBand dissector does not check it).
#   rxe        Linux Soft-RoCE (rdma_rxe) in a QEMU guest (tests/qemu/rxe.sh)
#              on a -netdev dgram wire cabled to `hca --wire`: hca
#              pingpong rc/uc/ud against Debian's ibv_rc/uc/ud_pingpong -c
#              and hca perf --perftest write-bw/read-lat/send-bw/atomic-bw
#              against perftest's ib_write_bw/ib_read_lat/ib_send_bw/
#              ib_atomic_bw, each side as server and as client, below and
#              several MTUs above the path MTU; each side checks what it
#              received (perftest and hca perf: exit 0 and a result row).
#   bare_metal the bare-metal image (bare-metal/, aarch64-unknown-none and
#              x86_64-unknown-none) booted under QEMU TCG (Debian's
#              qemu-system-arm, virt machine; qemu-system-x86, q35
#              machine through the PVH entry): it enumerates PCI
#              through ECAM, finds the ivshmem-plain device whose BAR2
#              is an emulated ConnectX's BAR0 (`hca-ivshmem device`), runs hca-driver on
#              platform::bare_metal and makes an RDMA WRITE and a SEND to
#              a second emulated ConnectX on the socket wire
#              (`hca-ivshmem peer`), which checks the bytes; the guest's
#              console and exit status, the peer's verdict and the
#              device's leak report are judged; a second boot against a
#              peer expecting a wrong byte must fail.
#   ibverbs    Debian's ibverbs-utils, unmodified, over this project's
#              libibverbs.so.1 (ibverbs/, LD_LIBRARY_PATH): ibv_devices,
#              ibv_devinfo -v, and ibv_rc/uc/ud/srq_pingpong with server
#              and client as two processes, each on an emulated HCA,
#              cabled by a UDP (and once a Unix) socket wire; polling and -e (events),
#              -c (received data checked), -N (ibv_qp_to_qp_ex and the
#              ibv_wr_* builder), below and above the MTU; and
#              Debian's perftest (ib_write/read/send_bw/lat below and
#              above the MTU, ib_atomic_bw/lat, -e for send/read bw
#              and lat);
#              rc/uc/ud pingpong and ibv_devinfo again on the library's
#              VFIO backend, through vfio-emu's emulated functions; and
#              tests/peers/ibverbs/rc_example.c (the RDMA_RC_example flow
#              of the RDMA Aware Networks Programming User Manual, written
#              anew) compiled against Debian's headers, linked against ours.
#   pyverbs    rdma-core's own tests (Debian's python3-pyverbs, system
#              python3), the provider-independent modules, over this
#              project's libibverbs.so.1 on an emulated ConnectX-4 with a
#              loopback plug (test_atomic on the ConnectX-5 personality,
#              which has host-endian atomics); counts tests, prints a table of each
#              module's counts and the reasons of the skips. The only
#              suite whose skips do not fail it: rdma-core's tests skip
#              themselves for features a device does not offer.
#   raw        Debian's perftest raw_ethernet_bw and raw_ethernet_lat over
#              this project's libibverbs.so.1 (IBV_QPT_RAW_PACKET,
#              ibv_create_flow): server and client as two processes,
#              each on an emulated HCA, cabled by a Unix socket wire;
#              frames of 64, 512 and 1518 bytes, either side sending
#              (--reversed) or both at once (-b), with IPv4 and UDP or
#              TCP headers the receiver's flow matches on.
#   all        every suite above.
#
# Environment: PEERS_OUT (default target/peers) keeps logs and the
# emulator's reports (HCA_EMU_VFIO_REPORT); PEERS_NO_INSTALL=1 skips
# apt-get (for machines that have the packages).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${PEERS_OUT:-$ROOT/target/peers}
mkdir -p "$OUT"
# Unix sockets (the socket wires, ivshmem's channels) live apart from the
# logs: a socket's path must fit sun_path (108 bytes with its NUL), which
# a checkout deep in the file system and a case named after its arguments
# overrun. One short directory per run, removed at exit.
SOCKS=$(mktemp -d "${TMPDIR:-/tmp}/hca-peers.XXXXXX") || exit 1
trap 'rm -rf "$SOCKS"' EXIT

# sock_dir: a new, empty directory for one case's sockets, its path short
# whatever the checkout's or the case's name.
sock_dir() { mktemp -d "$SOCKS/XXXXXX"; }
PRELOAD=$ROOT/target/debug/libhca_vfio_emu.so
HCA=$ROOT/target/debug/hca

PASSED=0 FAILED=0 SKIPPED=0
FAILURES=()

say() { printf '%s\n' "$*" >&2; }
pass() { PASSED=$((PASSED + 1)); say "  pass  $1"; }
fail() { FAILED=$((FAILED + 1)); FAILURES+=("$1: $2"); say "  FAIL  $1: $2"; }
skip() { SKIPPED=$((SKIPPED + 1)); FAILURES+=("$1: skipped: $2"); say "  SKIP  $1: $2"; }

# apt packages, installed only when missing.
need_packages() {
    local missing=()
    for p in "$@"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "${PEERS_NO_INSTALL:-0}" = 1 ]; then
        say "missing packages: ${missing[*]} (PEERS_NO_INSTALL=1)"
        return 1
    fi
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    say "installing ${missing[*]}"
    $sudo apt-get update -qq >/dev/null &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

build_preload() {
    cargo build -q -p hca-vfio-emu || { fail build "cargo build -p hca-vfio-emu"; return 1; }
    [ -f "$PRELOAD" ] || { fail build "$PRELOAD was not built"; return 1; }
}

# Runs a command with the preload library and the given HCA_EMU_VFIO.
emu() {
    local spec=$1
    shift
    LD_PRELOAD=$PRELOAD HCA_EMU_VFIO=$spec "$@"
}

# --- mlx5_vfio -----------------------------------------------------------

suite_mlx5_vfio() {
    say "== mlx5_vfio: rdma-core's test_mlx5_vfio against hca-emu"
    need_packages python3-pyverbs python3-scapy ibverbs-providers ||
        { fail mlx5_vfio "cannot install python3-pyverbs python3-scapy ibverbs-providers"; return; }
    build_preload || return
    local src=/usr/share/doc/rdma-core/tests
    [ -d "$src" ] || { fail mlx5_vfio "$src is missing (python3-pyverbs installs it)"; return; }
    # The Debian package gzips some of the tests: work on a decompressed
    # copy, unmodified otherwise.
    local dir=$OUT/rdma-core
    rm -rf "$dir" && mkdir -p "$dir" && cp -r "$src" "$dir/tests" && gunzip -f "$dir"/tests/*.gz
    local bdf=0000:00:10.0
    # test_mlx5vfio_async_event creates its EQ after opening the device and
    # then waits for the port's Active event: it sees the event only if the
    # subnet manager's sweep comes after that. A real IB link trains and is
    # swept seconds after INIT_HCA; the emulator's default is 1 s, which a
    # loaded machine (Python start, bring-up) can overrun. 5 s here.
    local spec="$bdf=cx5,ib,loop,sm=5000"
    local log=$OUT/mlx5_vfio.log report=$OUT/mlx5_vfio.report
    rm -f "$report"
    say "   HCA_EMU_VFIO='$spec' /usr/bin/python3 tests/run_tests.py --pci-dev $bdf -v test_mlx5_vfio"
    (cd "$dir" && HCA_EMU_VFIO_REPORT=$report emu "$spec" \
        timeout 600 /usr/bin/python3 tests/run_tests.py --pci-dev "$bdf" -v test_mlx5_vfio) >"$log" 2>&1
    local rc=$?
    local results
    results=$(/usr/bin/python3 - "$log" <<'EOF'
# unittest -v: a header line `name (module.Class.name)` per test, the
# docstring's first line, then ` ... ok|FAIL|ERROR|skipped 'why'`; the
# library's own messages on stderr may land in between. Failures and
# errors are also listed by name at the end (`FAIL: name (...)`), which
# is what counts for them.
import re, sys
text = open(sys.argv[1], errors="replace").read()
head = re.compile(r"^(test_\w+) \([\w.]+\)$", re.M)
heads = list(head.finditer(text))
bad = {m.group(2): m.group(1) for m in re.finditer(r"^(FAIL|ERROR): (test_\w+) \(", text, re.M)}
for i, m in enumerate(heads):
    name = m.group(1)
    end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
    block = text[m.end():end].split("\n" + "=" * 70)[0]
    if name in bad:
        print(name, bad[name], bad[name])
    elif (s := re.search(r"skipped '([^']*)'", block)):
        print(name, "skipped", s.group(1))
    elif re.search(r"(\.\.\. |^)ok$", block, re.M):
        print(name, "ok", "ok")
    else:
        print(name, "UNKNOWN", "no result line")
EOF
)
    if [ -z "$results" ]; then
        fail mlx5_vfio "no test ran (exit $rc); see $log"
        tail -30 "$log" >&2
        return
    fi
    while read -r name status detail; do
        case $status in
            ok) pass "mlx5_vfio $name" ;;
            skipped) skip "mlx5_vfio $name" "$detail" ;;
            *) fail "mlx5_vfio $name" "$status (see $log)" ;;
        esac
    done <<<"$results"
    if [ $FAILED -gt 0 ]; then tail -40 "$log" >&2; fi
    if [ -f "$report" ]; then
        # What the emulator saw besides the commands: IOMMU faults, pages
        # and objects left behind (findings about the peer, not failures of
        # its tests).
        say "   emulator report: $report ($(grep -c ' command ' "$report") commands); besides the commands:"
        grep -v ' command ' "$report" | sort | uniq -c | sed 's/^/     /' >&2
    fi
}

# --- vfio_hca ------------------------------------------------------------

# Runs one check: a name, then the command; its output goes to a log.
check() {
    local name=$1
    shift
    local log="$OUT/vfio_hca.$(tr -c 'a-zA-Z0-9_.-' '_' <<<"$name").log"
    if "$@" >"$log" 2>&1; then
        pass "vfio_hca $name"
    else
        fail "vfio_hca $name" "exit $? (see $log)"
        tail -20 "$log" >&2
    fi
}

suite_vfio_hca() {
    say "== vfio_hca: hca and hca-tests through platform::vfio against hca-emu"
    build_preload || return
    cargo build -q -p hca-tools || { fail build "cargo build -p hca-tools"; return; }
    local a=0000:00:11.0 b=0000:00:12.0
    local one="$a=cx4" pair="$a=cx4,wire=$b;$b=cx4"
    check "hca info -d $a" emu "$one" "$HCA" info -d "$a" -v
    check "hca caps -d $a" emu "$one" "$HCA" caps -d "$a"
    check "hca health -d $a" emu "$one" "$HCA" health -d "$a"
    interrupts_reach_eventfds "$a" "$one"
    check "hca-tools cli vfio_preload_interrupts_reach_the_eventfds" \
        cargo test -q -p hca-tools --test cli -- --ignored --exact vfio_preload_interrupts_reach_the_eventfds
    check "hca perf write-bw -d $a,$b" emu "$pair" "$HCA" perf write-bw -d "$a,$b" -n 200 -s 4096
    pingpong_two_processes
    hardware_tests "$a,$b" "$pair"
}

# EQ interrupts reach platform::vfio through the MSI-X eventfds: the
# armed command EQ raises interrupts that the platform counts on the
# vector's eventfd (the driver's statistics, logged at info level when the
# device closes). Whether a wait sleeps for one depends on timing, so the
# check is on the interrupts, not on the wakeups.
interrupts_reach_eventfds() {
    local bdf=$1 spec=$2
    local name="EQ interrupts reach platform::vfio through eventfds"
    local log=$OUT/vfio_hca.interrupts.log
    if ! RUST_LOG=hca=info emu "$spec" "$HCA" info -d "$bdf" >"$log" 2>&1; then
        fail "vfio_hca $name" "hca info failed (see $log)"
        return
    fi
    local line raised
    line=$(grep -o 'waits: interrupts.*' "$log" | head -1)
    raised=$(sed -n 's/.*: \([0-9]*\) interrupts raised,.*/\1/p' <<<"$line")
    if [ -n "$raised" ] && [ "$raised" -gt 0 ]; then
        pass "vfio_hca $name ($line)"
    else
        fail "vfio_hca $name" "no interrupt on the eventfds: '${line:-no waits line}' (see $log)"
    fi
}

# `hca pingpong rc -e` between two processes, each with its own emulated
# function, the two cabled by a socket wire; both sides sleep on their
# completion interrupts (-e), delivered through the MSI-X eventfds.
pingpong_two_processes() {
    local name="hca pingpong rc, two processes on one wire"
    local dir
    dir=$(sock_dir)
    local sa=0000:00:13.0 sb=0000:00:14.0
    local port=$((20000 + RANDOM % 20000))
    local slog=$OUT/vfio_hca.pingpong-server.log clog=$OUT/vfio_hca.pingpong-client.log
    emu "$sa=cx4,sock=$dir/a,peer=$dir/b" timeout 120 "$HCA" pingpong rc -d "$sa" --server -p "$port" -n 200 -c -e >"$slog" 2>&1 &
    local server=$!
    # The client retries its TCP connection while the server comes up.
    local crc=1
    for _ in $(seq 1 50); do
        if grep -q "local address" "$slog" 2>/dev/null; then break; fi
        sleep 0.2
    done
    emu "$sb=cx4,sock=$dir/b,peer=$dir/a" timeout 120 "$HCA" pingpong rc -d "$sb" -p "$port" -n 200 -c -e 127.0.0.1 >"$clog" 2>&1
    crc=$?
    wait "$server"
    local src=$?
    rm -rf "$dir"
    if [ $crc -eq 0 ] && [ $src -eq 0 ]; then
        pass "vfio_hca $name"
    else
        fail "vfio_hca $name" "server exit $src, client exit $crc (see $slog, $clog)"
        tail -10 "$slog" "$clog" >&2
    fi
}

# The hardware variants of hca-tests (HCA_PCI=...) through real VFIO ioctls
# against emulated functions. Each test binary runs under the preload
# library; an ignored hardware test is a skip.
hardware_tests() {
    local pci=$1 spec=$2
    local list=$OUT/vfio_hca.test-binaries
    HCA_PCI=$pci cargo test -q -p hca-tests --no-run --message-format=json 2>/dev/null |
        /usr/bin/python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] != ["custom-build"]:
        print(m["executable"])
' >"$list"
    if [ ! -s "$list" ]; then
        fail "vfio_hca hardware tests" "HCA_PCI=$pci cargo test -p hca-tests --no-run built nothing"
        return
    fi
    local bin out
    while read -r bin; do
        out=$OUT/vfio_hca.$(basename "$bin").log
        HCA_PCI=$pci emu "$spec" timeout 900 "$bin" hardware:: --test-threads 1 >"$out" 2>&1
        local rc=$?
        local found
        found=$(grep -cE '^test hardware::.* \.\.\. ' "$out")
        [ "$found" -eq 0 ] && continue
        while read -r line; do
            local t=${line#test }
            t=${t%% ...*}
            case $line in
                *"... ok") pass "hca-tests $(basename "$bin" | sed 's/-[0-9a-f]*$//') $t" ;;
                *"... ignored"*) skip "hca-tests $t" "ignored (HCA_PCI not seen at build time?)" ;;
                *) fail "hca-tests $t" "FAILED (see $out)" ;;
            esac
        done < <(grep -E '^test hardware::.* \.\.\. ' "$out")
        if [ $rc -ne 0 ] && ! grep -qE '^test hardware::.* \.\.\. FAILED' "$out"; then
            fail "hca-tests $(basename "$bin")" "exit $rc without a failed test (crash?), see $out"
            tail -20 "$out" >&2
        fi
    done <"$list"
}

# --- pcap ----------------------------------------------------------------

# tshark, installed without the wireshark-common question (whether
# non-root users may capture: no).
need_tshark() {
    command -v tshark >/dev/null 2>&1 && return 0
    if [ "${PEERS_NO_INSTALL:-0}" != 1 ]; then
        local sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        echo "wireshark-common wireshark-common/install-setuid boolean false" |
            $sudo debconf-set-selections 2>/dev/null
    fi
    need_packages tshark && command -v tshark >/dev/null 2>&1
}

# RoCE v2 senders put UDP checksum 0 on the wire for IPv6 as for IPv4 (the
# ICRC covers the packet): Linux Soft-RoCE does (rxe_net.c
# prepare_udp_hdr), and so does hca-emu (docs/fidelity.md). Wireshark flags
# a zero IPv6 UDP checksum as an error unless told that the protocol
# allows it, which is what this preference is for; pcap_case checks
# separately that the checksum is indeed 0 rather than wrong.
TSHARK_OPTS=(-o udp.ignore_ipv6_zero_checksum:TRUE)

# Frames of a capture matching a display filter.
tshark_count() {
    tshark "${TSHARK_OPTS[@]}" -r "$1" -Y "$2" -T fields -e frame.number 2>/dev/null | grep -c .
}

# Captures `hca ARGS --pcap` into $OUT/pcap/NAME.pcap and judges it.
pcap_case() {
    local name=$1
    shift
    local f=$OUT/pcap/$name.pcap log=$OUT/pcap/$name.log
    if ! timeout 300 "$HCA" "$@" --pcap "$f" >"$log" 2>&1; then
        fail "pcap $name" "hca $* failed (see $log)"
        tail -5 "$log" >&2
        return
    fi
    local total notroce malformed expert long why=()
    total=$(tshark_count "$f" "frame")
    notroce=$(tshark_count "$f" '!(infiniband && (udp.port == 4791 || eth.type == 0x8915))')
    malformed=$(tshark_count "$f" "_ws.malformed")
    # Severity warning is 0x00600000, error 0x00800000.
    expert=$(tshark_count "$f" "_ws.expert.severity >= 0x00600000")
    # Path MTU 1024: a packet carries at most 1024 payload bytes behind at
    # most 106 bytes of headers (Ethernet 14, IPv6 40, UDP 8, BTH 12,
    # AtomicETH 28, ICRC 4); a longer frame is a message not segmented.
    long=$(tshark_count "$f" "frame.len > 1130")
    local csum6
    csum6=$(tshark_count "$f" "ipv6 && udp.port == 4791 && udp.checksum != 0")
    tshark "${TSHARK_OPTS[@]}" -r "$f" -q -z expert,warn >"$OUT/pcap/$name.expert" 2>/dev/null
    [ "$total" -gt 0 ] || why+=("no frame captured")
    [ "$notroce" -eq 0 ] || why+=("$notroce of $total frames not RoCE")
    [ "$malformed" -eq 0 ] || why+=("$malformed malformed")
    [ "$long" -eq 0 ] || why+=("$long frames longer than a 1024-byte MTU packet (not segmented)")
    [ "$csum6" -eq 0 ] || why+=("$csum6 RoCE v2 IPv6 frames with a UDP checksum other than 0")
    if [ "$expert" -ne 0 ] || grep -qE '^(Errors|Warns) \(' "$OUT/pcap/$name.expert"; then
        why+=("expert info: $(grep -E '^ +[0-9]+ ' "$OUT/pcap/$name.expert" | sed 's/  */ /g' | sort -u | head -3 | paste -sd';' -)")
    fi
    if ! /usr/bin/env python3 "$ROOT/tests/peers/roce_icrc.py" "$f" >"$OUT/pcap/$name.icrc" 2>&1; then
        why+=("ICRC: $(tail -1 "$OUT/pcap/$name.icrc")")
    fi
    if [ ${#why[@]} -eq 0 ]; then
        pass "pcap $name ($total frames)"
    else
        fail "pcap $name" "$(printf '%s; ' "${why[@]}")(see $OUT/pcap/$name.*)"
    fi
}

suite_pcap() {
    say "== pcap: hca captures judged by tshark, ICRC checked independently"
    need_tshark || { fail pcap "cannot install tshark"; return; }
    command -v python3 >/dev/null 2>&1 || { fail pcap "python3 is missing"; return; }
    cargo build -q -p hca-tools || { fail build "cargo build -p hca-tools"; return; }
    mkdir -p "$OUT/pcap"
    # The emulated port's MTU is 1024 (perf's default path MTU; pingpong
    # is given -m 1024): sizes below it and several MTUs long.
    local t
    for t in rc uc; do
        pcap_case "pingpong-$t-small" pingpong "$t" -m 1024 -s 512 -n 20 -c
        pcap_case "pingpong-$t-large" pingpong "$t" -m 1024 -s 8192 -n 20 -c
    done
    # A UD message fits in one packet: below and at the MTU.
    pcap_case pingpong-ud-small pingpong ud -s 64 -n 20 -c
    pcap_case pingpong-ud-mtu pingpong ud -s 1024 -n 20 -c
    # RoCE v1 (GID index 0: EtherType 0x8915).
    pcap_case pingpong-rc-roce-v1 pingpong rc -g 0 -m 1024 -s 512 -n 20 -c
    # Through TCP, as two processes exchange.
    pcap_case pingpong-rc-tcp-loopback pingpong rc -s 4096 -n 20 --tcp-loopback
    for t in write-bw read-bw send-bw; do
        pcap_case "perf-$t-small" perf "$t" -s 512 -n 20
        pcap_case "perf-$t-large" perf "$t" -s 8192 -n 20
    done
    pcap_case perf-read-lat-large perf read-lat -s 4096 -n 20
    pcap_case perf-send-bw-ud perf send-bw -c UD -s 1024 -n 20
    pcap_case perf-atomic-bw-faa perf atomic-bw -n 20
    pcap_case perf-atomic-bw-cas perf atomic-bw -A CMP_AND_SWAP -n 20
    # The ICRC check can fail: one payload byte of the last frame of a
    # capture flipped must be caught.
    local src=$OUT/pcap/pingpong-rc-small.pcap bad=$OUT/pcap/corrupted.pcap
    if [ -s "$src" ]; then
        python3 -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[-8] ^= 0x55; open(sys.argv[2], "wb").write(b)' "$src" "$bad"
        if python3 "$ROOT/tests/peers/roce_icrc.py" "$bad" >"$OUT/pcap/corrupted.icrc" 2>&1; then
            fail "pcap icrc-check-catches-corruption" "a flipped byte passed (see $OUT/pcap/corrupted.icrc)"
        else
            pass "pcap icrc-check-catches-corruption"
        fi
    else
        fail "pcap icrc-check-catches-corruption" "no capture to corrupt"
    fi
}

# --- rxe -----------------------------------------------------------------

suite_rxe() {
    say "== rxe: Linux Soft-RoCE in a QEMU guest against hca on the dgram wire"
    need_packages qemu-system-x86 cpio busybox-static ibverbs-utils ibverbs-providers perftest iproute2 ||
        { fail rxe "cannot install the packages of tests/qemu/rxe.sh"; return; }
    local log=$OUT/rxe.log
    timeout 900 "$ROOT/tests/qemu/rxe.sh" >"$log" 2>&1
    local rc=$?
    local n=0 name verdict rest
    while read -r _ name verdict rest; do
        n=$((n + 1))
        if [ "$verdict" = PASS ]; then
            pass "rxe $name"
        else
            fail "rxe $name" "$rest (see $log)"
        fi
    done < <(grep '^RXE: ' "$log")
    if [ $n -eq 0 ]; then
        fail rxe "no case ran (exit $rc); see $log"
        tail -20 "$log" >&2
    elif [ $rc -ne 0 ] && [ $FAILED -eq 0 ]; then
        fail rxe "tests/qemu/rxe.sh exited $rc (see $log)"
    fi
}

# --- bare_metal ----------------------------------------------------------

# One boot of the bare-metal image (bare-metal/) under QEMU TCG: the
# emulated ConnectX (`hca-ivshmem device`: BAR0 in the ivshmem-plain file,
# DMA into the guest RAM file) and the peer (`hca-ivshmem peer`, a second
# emulated ConnectX on the socket wire) on the host. $1 is the machine
# (aarch64: virt, RAM at 0x4000_0000, exchange page at its last page, exit
# through semihosting; x86_64: q35, RAM at 0, exchange page at 64 MiB,
# exit through isa-debug-exit), $2 the directory for the three logs.
# Echoes "status device peer" exit statuses, where status is the guest's
# own (0 passed, 1 failed, 3 exception, 4 panic) or "none" when it gave
# none (x86_64: isa-debug-exit reports (s + 1) << 1 | 1; anything else,
# such as QEMU's 0 after a triple fault with -no-reboot, is no status).
bare_metal_boot() {
    local arch=$1 dir=$2
    shift 2
    rm -rf "$dir" && mkdir -p "$dir"
    local base xchg image=$ROOT/target/$arch-unknown-none/release/hca-bare-metal
    case $arch in
        aarch64) base=0x40000000 xchg=0x47fff000 ;;
        x86_64) base=0 xchg=0x4000000 ;;
    esac
    # The guest RAM (128 MiB, the image is linked for it) and the
    # ConnectX BAR0 (32 MiB).
    truncate -s 128M "$dir/ram" && truncate -s 32M "$dir/bar"
    local socks
    socks=$(sock_dir)
    "$IVSHMEM" device --bar "$dir/bar" --ram "$dir/ram" --ram-base "$base" --sock "$socks/dev" \
        --peer "$socks/peer" --timeout 300 >"$dir/device.log" 2>&1 &
    local dev=$!
    "$IVSHMEM" peer --ram "$dir/ram" --ram-base "$base" --xchg "$xchg" --sock "$socks/peer" \
        --peer "$socks/dev" --timeout 300 "$@" >"$dir/peer.log" 2>&1 &
    local peer=$!
    # The device is ready (BAR0 initialised) before the guest starts.
    local i
    for i in $(seq 100); do
        grep -q ready "$dir/device.log" 2>/dev/null && break
        sleep 0.1
    done
    local ram=(-object "memory-backend-file,id=ram,share=on,mem-path=$dir/ram,size=128M"
        -object "memory-backend-file,id=bar,share=on,mem-path=$dir/bar,size=32M"
        -device ivshmem-plain,memdev=bar -accel tcg -cpu max -smp 1 -m 128M
        -kernel "$image" -display none -serial stdio -monitor none -net none -no-reboot)
    local q s
    case $arch in
        aarch64)
            timeout 300 qemu-system-aarch64 -machine virt,highmem=off,memory-backend=ram "${ram[@]}" \
                -semihosting-config enable=on,target=native >"$dir/console.log" 2>&1
            q=$?
            case $q in 0 | 1 | 3 | 4) s=$q ;; *) s=none ;; esac
            ;;
        x86_64)
            timeout 300 qemu-system-x86_64 -machine q35,memory-backend=ram "${ram[@]}" \
                -device isa-debug-exit,iobase=0xf4,iosize=4 >"$dir/console.log" 2>&1
            q=$?
            if [ $q -ge 3 ] && [ $((q % 2)) = 1 ] && [ $q -lt 124 ]; then
                s=$(((q - 3) / 2))
            else
                s=none
            fi
            ;;
    esac
    echo "qemu exit $q, guest status $s" >>"$dir/console.log"
    # A guest that failed early never closes the HCA nor talks to the
    # peer: do not wait for their timeouts.
    if [ "$s" != 0 ]; then
        sleep 2
        kill "$dev" "$peer" 2>/dev/null
    fi
    wait "$dev"
    local d=$?
    wait "$peer"
    local p=$?
    echo "$s $d $p"
}

# The bare_metal checks for one machine ($1: aarch64 or x86_64).
bare_metal_arch() {
    local arch=$1 what
    case $arch in
        aarch64) what="aarch64 virt, exit status 0 through semihosting" ;;
        x86_64) what="x86_64 q35 (PVH entry), status 0 through isa-debug-exit" ;;
    esac
    cargo build -q -p hca-bare-metal --release --target "$arch-unknown-none" ||
        { fail "bare_metal $arch build" "cargo build -p hca-bare-metal --target $arch-unknown-none"; return; }
    pass "bare_metal $arch build ($arch-unknown-none image)"

    local dir=$OUT/bare_metal_$arch st s d p
    st=$(bare_metal_boot "$arch" "$dir")
    read -r s d p <<<"$st"
    say "  (console: $dir/console.log; device: $dir/device.log; peer: $dir/peer.log)"
    sed 's/^/    | /' "$dir/console.log" >&2
    if [ "$s" = 0 ] && grep -q '^PASS' "$dir/console.log"; then
        pass "bare_metal $arch guest: bring-up, PD, MR, CQ, RC QP, RDMA WRITE and SEND, teardown; $what"
    else
        fail "bare_metal $arch guest" "guest status $s (see $dir/console.log)"
    fi
    if grep -q '^pci: .* 1af4:1110 (ivshmem-plain)' "$dir/console.log" &&
        grep -q '^pci: BAR0 .*BAR2 0x[0-9a-f]* (32 MiB, Memory64' "$dir/console.log"; then
        pass "bare_metal $arch guest found ivshmem-plain through ECAM and its BARs"
    else
        fail "bare_metal $arch PCI" "no ivshmem-plain or no BARs in $dir/console.log"
    fi
    if [ "$p" = 0 ] && grep -q 'PASS: RDMA WRITE of [0-9]* bytes and SEND of [0-9]* bytes received intact' "$dir/peer.log"; then
        pass "bare_metal $arch peer checked the guest's RDMA WRITE and SEND byte for byte"
    else
        fail "bare_metal $arch peer" "exit $p (see $dir/peer.log)"
        tail -5 "$dir/peer.log" >&2
    fi
    if grep -q 'DMA memory in use after close: 0 bytes' "$dir/console.log"; then
        pass "bare_metal $arch guest got every DMA page back at teardown"
    else
        fail "bare_metal $arch teardown" "DMA memory left in use (see $dir/console.log)"
    fi
    if [ "$d" = 0 ] && grep -q 'firmware pages held 0, objects alive 0, IOMMU faults 0' "$dir/device.log" &&
        grep -q 'device: clean' "$dir/device.log"; then
        pass "bare_metal $arch device: every firmware page and object returned, no IOMMU fault ($(grep -o '[0-9]* commands' "$dir/device.log"))"
    else
        fail "bare_metal $arch device" "exit $d (see $dir/device.log)"
        tail -5 "$dir/device.log" >&2
    fi

    # The checks can fail: a peer that expects other bytes says FAIL, and
    # the guest reports it in its exit status.
    dir=$OUT/bare_metal_${arch}_wrong
    st=$(bare_metal_boot "$arch" "$dir" --expect-wrong-byte 1234)
    read -r s d p <<<"$st"
    if [ "$s" = 1 ] && [ "$p" != 0 ] && grep -q 'FAIL: peer: WRITE byte 1234 is' "$dir/console.log"; then
        pass "bare_metal $arch a wrong byte is caught: the peer says FAIL and the guest's status is 1"
    else
        fail "bare_metal $arch wrong byte" "guest status $s, peer exit $p (see $dir/console.log, $dir/peer.log)"
    fi
}

# ---- ibverbs: unmodified libibverbs programs over our libibverbs.so.1 ----

IBV_LIB=$ROOT/target/ibverbs

# Runs a program with our library and the given HCA_IBV_DEVICES.
ibv() {
    local devices=$1
    shift
    LD_LIBRARY_PATH=$IBV_LIB HCA_IBV_DEVICES=$devices "$@"
}

# wait_listening PORT: until a TCP socket listens on PORT (a peer
# program's server), for at most 5 s.
wait_listening() {
    local i
    for i in $(seq 50); do
        ss -ltn 2>/dev/null | grep -q ":$1 " && break
        sleep 0.1
    done
}

# ibv_pingpong_case WIRE NAME PROGRAM [ARGS...]: server and client as two
# processes, each on an emulated ConnectX-4 of its own, cabled by a socket
# wire (WIRE udp or unix); both must exit 0 and report their iterations.
# The UDP wire is the default: a Unix datagram socket queues only
# net.unix.max_dgram_qlen (10) frames, so bursts of many QPs (srq_pingpong's
# 16) are dropped there and RC spends its time in retransmission timeouts.
ibv_pingpong_case() {
    local wire=$1 name=$2 prog=$3
    shift 3
    local dir="$OUT/ibverbs/$name"
    rm -rf "$dir" && mkdir -p "$dir"
    local port=$((20000 + RANDOM % 20000))
    local sa sb dev=emu0 pre=() vs=() vc=() w
    w=$(sock_dir)
    case "$wire" in
        unix)
            sa="emu:emu0=sock=$w/a,peer=$w/b"
            sb="emu:emu0=sock=$w/b,peer=$w/a"
            ;;
        udp)
            sa="emu:emu0=udp=127.0.0.1:$((port + 1)),udppeer=127.0.0.1:$((port + 2))"
            sb="emu:emu0=udp=127.0.0.1:$((port + 2)),udppeer=127.0.0.1:$((port + 1))"
            ;;
        vfio)
            # Each side a PCI function under VFIO: the library's VFIO
            # backend (user memory through VFIO_IOMMU_MAP_DMA, completion
            # channels on MSI-X eventfds) on vfio-emu's emulated functions.
            sa=0000:00:13.0 sb=0000:00:14.0 dev=mlx5_0 pre=(env LD_PRELOAD="$PRELOAD")
            vs=(env "HCA_EMU_VFIO=0000:00:13.0=cx4,sock=$w/a,peer=$w/b")
            vc=(env "HCA_EMU_VFIO=0000:00:14.0=cx4,sock=$w/b,peer=$w/a")
            ;;
    esac
    ibv "$sa" "${pre[@]}" "${vs[@]}" timeout 120 "$prog" -d "$dev" -g 1 -p "$port" "$@" \
        >"$dir/server.log" 2>&1 &
    local spid=$!
    wait_listening "$port"
    ibv "$sb" "${pre[@]}" "${vc[@]}" timeout 120 "$prog" -d "$dev" -g 1 -p "$port" "$@" 127.0.0.1 \
        >"$dir/client.log" 2>&1
    local crc=$?
    wait "$spid"
    local src=$?
    if [ $src -eq 0 ] && [ $crc -eq 0 ] &&
        grep -q 'iters in' "$dir/server.log" && grep -q 'iters in' "$dir/client.log"; then
        pass "ibverbs $name ($(grep 'iters in' "$dir/client.log"))"
    else
        fail "ibverbs $name" "server exit $src, client exit $crc (see $dir)"
        grep -v 'address:' "$dir/server.log" "$dir/client.log" | tail -n 6 >&2
    fi
}

suite_ibverbs() {
    need_packages ibverbs-utils libibverbs-dev || { fail ibverbs "packages missing"; return; }
    bash ibverbs/build-so.sh >"$OUT/ibverbs-build.log" 2>&1 ||
        { fail ibverbs "bash ibverbs/build-so.sh (see $OUT/ibverbs-build.log)"; return; }
    mkdir -p "$OUT/ibverbs"
    local log

    # The library is the one loaded: its soname and the symbol versions the
    # programs import resolve against it (ldd names our file).
    local deps
    deps=$(ibv "emu:emu0" ldd /usr/bin/ibv_devinfo 2>&1)
    if grep -q "=> $IBV_LIB/libibverbs.so.1 " <<<"$deps"; then
        pass "ibverbs ldd ibv_devinfo resolves libibverbs.so.1 to ours"
    else
        fail "ibverbs ldd" "ibv_devinfo does not load $IBV_LIB/libibverbs.so.1"
    fi

    log="$OUT/ibverbs/ibv_devices.log"
    if ibv "emu:emu0=loopback;emu:emu1=cx5" timeout 60 ibv_devices >"$log" 2>&1 &&
        grep -Eq '^\s+emu0\s+[0-9a-f]{16}$' "$log" && grep -Eq '^\s+emu1\s+[0-9a-f]{16}$' "$log"; then
        pass "ibverbs ibv_devices"
    else
        fail "ibverbs ibv_devices" "see $log"
    fi

    log="$OUT/ibverbs/ibv_devinfo.log"
    if ibv "emu:emu0=loopback" timeout 60 ibv_devinfo -v >"$log" 2>&1 &&
        grep -q $'hca_id:\temu0' "$log" &&
        grep -Eq 'fw_ver:\s+14\.12\.1220' "$log" &&
        grep -Eq 'vendor_part_id:\s+4115' "$log" &&
        grep -Eq 'state:\s+PORT_ACTIVE' "$log" &&
        grep -Eq 'link_layer:\s+Ethernet' "$log" &&
        grep -Eq 'GID\[  1\]:\s+fe80::.*RoCE v2' "$log"; then
        pass "ibverbs ibv_devinfo -v"
    else
        fail "ibverbs ibv_devinfo -v" "see $log"
    fi

    # A device that cannot be opened is an error the program reports, not a
    # crash.
    log="$OUT/ibverbs/bad-env.log"
    ibv "emu:x=bogus" timeout 60 ibv_devinfo >"$log" 2>&1
    local rc=$?
    # (-1 from main is 255; a signal would be 129..192.)
    if [ $rc -ne 0 ] && { [ $rc -le 128 ] || [ $rc -eq 255 ]; } && grep -q 'unknown option `bogus`' "$log"; then
        pass "ibverbs a bad HCA_IBV_DEVICES is reported"
    else
        fail "ibverbs bad HCA_IBV_DEVICES" "exit $rc (see $log)"
    fi

    ibv_pingpong_case udp rc ibv_rc_pingpong -c
    ibv_pingpong_case unix rc-unix-wire ibv_rc_pingpong -c
    ibv_pingpong_case udp rc-events ibv_rc_pingpong -e -c
    ibv_pingpong_case udp rc-8k ibv_rc_pingpong -s 8192 -c
    ibv_pingpong_case udp rc-small ibv_rc_pingpong -s 64 -n 2000
    ibv_pingpong_case udp rc-new-send ibv_rc_pingpong -N -c
    ibv_pingpong_case udp rc-new-send-events ibv_rc_pingpong -N -e -c
    ibv_pingpong_case udp uc ibv_uc_pingpong -c
    ibv_pingpong_case udp uc-events ibv_uc_pingpong -e -c
    ibv_pingpong_case udp ud ibv_ud_pingpong -s 1024 -c
    ibv_pingpong_case udp ud-events ibv_ud_pingpong -s 1024 -e -c
    ibv_pingpong_case udp srq ibv_srq_pingpong -c
    ibv_pingpong_case udp srq-events ibv_srq_pingpong -e -c

    # The same library on its VFIO backend, through the real VFIO API of
    # vfio-emu's emulated functions (LD_PRELOAD).
    if build_preload; then
        log="$OUT/ibverbs/ibv_devinfo-vfio.log"
        if ibv 0000:00:10.0 env LD_PRELOAD="$PRELOAD" HCA_EMU_VFIO=0000:00:10.0=cx4,loop \
            timeout 60 ibv_devinfo -v >"$log" 2>&1 &&
            grep -q $'hca_id:\tmlx5_0' "$log" && grep -Eq 'state:\s+PORT_ACTIVE' "$log"; then
            pass "ibverbs ibv_devinfo -v over VFIO (vfio-emu)"
        else
            fail "ibverbs ibv_devinfo -v over VFIO" "see $log"
        fi
        ibv_pingpong_case vfio rc-vfio ibv_rc_pingpong -c
        ibv_pingpong_case vfio rc-vfio-events ibv_rc_pingpong -e -c
        ibv_pingpong_case vfio ud-vfio-events ibv_ud_pingpong -s 1024 -e -c
        ibv_pingpong_case vfio uc-vfio ibv_uc_pingpong -c
    fi

    # Debian's perftest, both sides as two processes on a UDP wire; sizes
    # below and above the path MTU (1024), and -e where perftest offers it
    # (send and read; not for RDMA WRITE). The latency tests' -e loop
    # re-arms a CQ before polling the completion that raised its event
    # (the emulator's CQ arm rule, docs/fidelity.md).
    if need_packages perftest; then
        local p sz
        for p in ib_write_bw ib_write_lat ib_read_bw ib_read_lat ib_send_bw ib_send_lat; do
            for sz in 512 4096; do
                ibv_perftest_case "$p" -s "$sz" -n 200
            done
        done
        ibv_perftest_case ib_atomic_bw -n 200
        ibv_perftest_case ib_atomic_lat -n 200
        ibv_perftest_case ib_send_bw -s 2048 -n 200 -e
        ibv_perftest_case ib_read_bw -s 2048 -n 200 -e
        for p in ib_send_lat ib_read_lat; do
            for sz in 512 4096; do
                ibv_perftest_case "$p" -s "$sz" -n 200 -e
            done
        done
    else
        fail "ibverbs perftest" "package perftest missing"
    fi

    # A C program of the project (the RDMA_RC_example flow: TCP exchange,
    # SEND, RDMA READ, RDMA WRITE, each checked), compiled against Debian's
    # headers and linked against our library.
    local exe="$OUT/ibverbs/rc_example"
    if cc -Wall -Wextra -Werror -O2 -o "$exe" tests/peers/ibverbs/rc_example.c \
        -L"$IBV_LIB" -libverbs -Wl,-rpath,"$IBV_LIB" 2>"$OUT/ibverbs/rc_example-cc.log"; then
        pass "ibverbs rc_example.c compiles against <infiniband/verbs.h>, links against ours"
        ibv_example_case
    else
        fail "ibverbs rc_example.c" "cc failed (see $OUT/ibverbs/rc_example-cc.log)"
    fi
}

# ibv_perftest_case PROGRAM [ARGS...]: a perftest program as server and
# client; both must exit 0 and the client print its result row.
ibv_perftest_case() {
    local prog=$1
    shift
    local name="$prog$(printf '%s' "$*" | tr -d ' ')"
    local dir="$OUT/ibverbs/$name"
    rm -rf "$dir" && mkdir -p "$dir"
    local port=$((20000 + RANDOM % 20000))
    local sa="emu:emu0=udp=127.0.0.1:$((port + 1)),udppeer=127.0.0.1:$((port + 2))"
    local sb="emu:emu0=udp=127.0.0.1:$((port + 2)),udppeer=127.0.0.1:$((port + 1))"
    ibv "$sa" timeout 120 "$prog" -d emu0 -x 1 -p "$port" "$@" >"$dir/server.log" 2>&1 &
    local spid=$!
    wait_listening "$port"
    ibv "$sb" timeout 120 "$prog" -d emu0 -x 1 -p "$port" "$@" 127.0.0.1 >"$dir/client.log" 2>&1
    local crc=$?
    wait "$spid"
    local src=$?
    local row
    row=$(grep -A1 '#bytes' "$dir/client.log" | tail -n 1 | tr -s ' \t' ' ')
    if [ $src -eq 0 ] && [ $crc -eq 0 ] && [[ "$row" =~ ^\ ?[0-9]+\ [0-9]+\  ]]; then
        pass "ibverbs $prog $* ($row)"
    else
        fail "ibverbs $prog $*" "server exit $src, client exit $crc (see $dir)"
        tail -n 4 "$dir/server.log" "$dir/client.log" >&2
    fi
}

ibv_example_case() {
    local dir="$OUT/ibverbs/rc_example.run"
    rm -rf "$dir" && mkdir -p "$dir"
    local port=$((20000 + RANDOM % 20000))
    local sa="udp=127.0.0.1:$((port + 1)),udppeer=127.0.0.1:$((port + 2))"
    local sb="udp=127.0.0.1:$((port + 2)),udppeer=127.0.0.1:$((port + 1))"
    HCA_IBV_DEVICES="emu:emu0=$sa" timeout 60 "$OUT/ibverbs/rc_example" -d emu0 -g 1 -p "$port" \
        >"$dir/server.log" 2>&1 &
    local spid=$!
    HCA_IBV_DEVICES="emu:emu0=$sb" timeout 60 "$OUT/ibverbs/rc_example" -d emu0 -g 1 -p "$port" 127.0.0.1 \
        >"$dir/client.log" 2>&1
    local crc=$?
    wait "$spid"
    local src=$?
    if [ $src -eq 0 ] && [ $crc -eq 0 ] &&
        grep -q 'server: all checks passed' "$dir/server.log" &&
        grep -q 'client: all checks passed' "$dir/client.log"; then
        pass "ibverbs rc_example SEND, RDMA READ, RDMA WRITE between two processes"
    else
        fail "ibverbs rc_example" "server exit $src, client exit $crc (see $dir)"
        cat "$dir/server.log" "$dir/client.log" >&2
    fi
}

# ---- raw: perftest's raw Ethernet tests over our libibverbs.so.1 ----

# raw_perftest_case FIRST PROGRAM [ARGS...]: a perftest raw_ethernet_*
# program as server (--server) and client (--client), two processes each
# with its own emulated HCA on a Unix datagram socket wire; each names its
# own MAC (-B) and the other's (-E); a receiver steers the frames to its
# raw packet QP with ibv_create_flow on its MAC (and the IP and port
# selectors given). perftest's raw tests meet on the wire only (no TCP
# exchange), so the receiving side (FIRST: server or client) starts
# first, and the sender once its flow is in place (it prints its MAC
# then): a frame sent before that matches no rule and is dropped, as on
# a real port. The Unix wire, not UDP: its sender waits for room at the
# far end, as a link's flow control does, while a burst of thousands of
# frames overflows a UDP socket's buffer and the frames lost leave
# perftest's bandwidth receiver waiting for them. Both must exit 0 and
# print a result row.
#
# Environment: RAW_PERSONALITY (default cx4) is both devices' personality;
# RAW_MAX_BW, when set, is the most MB/s (perftest's, 2^20 bytes) the
# sender's average may report (a paced sender's bound); RAW_SERVER_ARGS
# are more arguments for the server only (after the common ones: perftest
# takes the last of a repeated option); RAW_ROWS=client asks a result row
# of the client only (raw_ethernet_burst_lat's server prints none).
raw_perftest_case() {
    local first=$1 prog=$2
    shift 2
    local name="$prog$(printf '%s' "$*" | tr -d ' ')"
    local dir="$OUT/raw/$name"
    rm -rf "$dir" && mkdir -p "$dir"
    local ma=02:00:00:00:00:0a mb=02:00:00:00:00:0b w
    w=$(sock_dir)
    local pers=${RAW_PERSONALITY:-cx4}
    local sa="emu:emu0=$pers,sock=$w/a,peer=$w/b"
    local sb="emu:emu0=$pers,sock=$w/b,peer=$w/a"
    # (stdbuf: the first side's "MAC attached" line is waited for.)
    local s_extra
    read -r -a s_extra <<<"${RAW_SERVER_ARGS:-}"
    local s_cmd=(ibv "$sa" timeout 120 stdbuf -oL "$prog" -d emu0 --server -B "$ma" -E "$mb" "$@" "${s_extra[@]}")
    local c_cmd=(ibv "$sb" timeout 120 stdbuf -oL "$prog" -d emu0 --client -B "$mb" -E "$ma" "$@")
    local one two one_log two_log
    if [ "$first" = server ]; then
        one=("${s_cmd[@]}") two=("${c_cmd[@]}") one_log=server two_log=client
    else
        one=("${c_cmd[@]}") two=("${s_cmd[@]}") one_log=client two_log=server
    fi
    "${one[@]}" >"$dir/$one_log.log" 2>&1 &
    local pid1=$!
    local i
    for i in $(seq 100); do
        grep -q 'MAC attached' "$dir/$one_log.log" 2>/dev/null && break
        sleep 0.1
    done
    "${two[@]}" >"$dir/$two_log.log" 2>&1
    local rc2=$?
    wait "$pid1"
    local rc1=$?
    local srow crow
    srow=$(grep -A1 '#bytes' "$dir/server.log" | tail -n 1 | tr -s ' \t' ' ')
    crow=$(grep -A1 '#bytes' "$dir/client.log" | tail -n 1 | tr -s ' \t' ' ')
    # The sender's row: the client's, the server's with --reversed.
    local sender=$crow bound_ok=1
    [[ " $* " == *" --reversed "* ]] && sender=$srow
    if [ -n "${RAW_MAX_BW:-}" ]; then
        # #bytes #packets BW-peak BW-average MsgRate: the average.
        local avg
        avg=$(awk '{print $4}' <<<"$sender")
        awk -v a="$avg" -v m="$RAW_MAX_BW" 'BEGIN { exit !(a != "" && a + 0 > 0 && a + 0 <= m + 0) }' ||
            bound_ok=0
    fi
    local srow_ok=0
    [[ "$srow" =~ ^\ ?[0-9]+\ [0-9]+\  ]] && srow_ok=1
    if [ "${RAW_ROWS:-both}" = client ]; then
        srow_ok=1 srow=" (none)"
    fi
    if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ $srow_ok -eq 1 ] &&
        [[ "$crow" =~ ^\ ?[0-9]+\ [0-9]+\  ]] && [ $bound_ok -eq 1 ]; then
        pass "raw $prog $* (server:$srow| client:$crow)"
    elif [ $bound_ok -eq 0 ]; then
        fail "raw $prog $*" "the sender's average BW is not within ${RAW_MAX_BW} MB/s: $sender (see $dir)"
    else
        fail "raw $prog $*" "$one_log exit $rc1, $two_log exit $rc2 (see $dir)"
        tail -n 4 "$dir/server.log" "$dir/client.log" >&2
    fi
}

suite_raw() {
    need_packages perftest libibverbs-dev || { fail raw "packages missing"; return; }
    bash ibverbs/build-so.sh >"$OUT/raw-build.log" 2>&1 ||
        { fail raw "bash ibverbs/build-so.sh (see $OUT/raw-build.log)"; return; }
    mkdir -p "$OUT/raw"
    local sz
    # Frames from the smallest to the MTU's (1518, perftest's default and
    # largest); the client sends (the server receives), or with
    # --reversed the server sends.
    for sz in 64 512 1518; do
        raw_perftest_case server raw_ethernet_bw -s "$sz" -n 1000
        raw_perftest_case client raw_ethernet_bw -s "$sz" -n 1000 --reversed
        # Both ways at once: each side has its own flow before it sends,
        # and the server sends once the client's first frame arrived
        # (perftest's run_iter_bi). Every receive is posted before the
        # test (-r as large as -n): perftest reposts a receive only
        # between its own sends, and a frame that finds the RQ empty is
        # dropped, by a ConnectX as by the emulator, leaving the receiver
        # waiting for it.
        raw_perftest_case server raw_ethernet_bw -s "$sz" -n 1000 -r 1000 -b
        raw_perftest_case server raw_ethernet_lat -s "$sz" -n 300
    done
    # IPv4 and UDP or TCP headers: the flow matches on them too.
    raw_perftest_case server raw_ethernet_bw -s 256 -n 1000 -j 10.0.0.11 -J 10.0.0.10 -k 4000 -K 5000
    raw_perftest_case server raw_ethernet_bw -s 256 -n 1000 -j 10.0.0.11 -J 10.0.0.10 -k 4000 -K 5000 --tcp
    raw_perftest_case server raw_ethernet_bw -s 256 -n 1000 -r 1000 -b -j 10.0.0.11 -J 10.0.0.10 -k 4000 -K 5000
    raw_perftest_case server raw_ethernet_lat -s 256 -n 300 -j 10.0.0.11 -J 10.0.0.10 -k 4000 -K 5000
    # Packet pacing (ConnectX-5: the recorded ConnectX-4 has none):
    # perftest sets IBV_QP_RATE_LIMIT at RTR -> RTS (PP: MB/s, sent as
    # kbit/s); the device paces the sender, whose average must stay within
    # the rate (an unpaced emulated sender runs several times faster here).
    RAW_PERSONALITY=cx5 RAW_MAX_BW=2 raw_perftest_case server raw_ethernet_bw -s 1518 -n 1000 \
        --rate_limit_type=PP --rate_limit=2 --rate_units=M
    # raw_ethernet_burst_lat (latency under load) runs only with a
    # hardware rate limiter: the client sends bursts of 16 at 5 MB/s, the
    # server answers each frame. Every send signaled (-Q 1): the client
    # counts its send completions, and perftest's default moderation
    # leaves its one repeated work request unsignaled. The server paces
    # its answers faster than the client's requests, so that none is
    # still waiting for its turn when the server tears its QP down after
    # the last request (perftest does not wait for its answers to leave).
    RAW_PERSONALITY=cx5 RAW_ROWS=client RAW_SERVER_ARGS="--rate_limit=50" \
        raw_perftest_case server raw_ethernet_burst_lat -s 512 -n 500 --burst_size=16 -Q 1 \
        --rate_limit_type=PP --rate_limit=5 --rate_units=M
}

# ---- pyverbs: rdma-core's own tests over our libibverbs.so.1 ----

# The generic (provider-independent) modules of rdma-core's tests; the
# mlx5 and EFA modules test those providers' own libraries (libmlx5's
# direct verbs, its environment knobs), which this library is not.
PYVERBS_MODULES="test_addr test_atomic test_cq test_cq_events test_cqex test_cuda_dmabuf
    test_device test_flow test_fork test_mr test_odp test_parent_domain test_pd test_qp
    test_qpex test_rdmacm test_relaxed_ordering test_rss_traffic test_shared_pd
    test_tag_matching"

suite_pyverbs() {
    need_packages python3-pyverbs ibverbs-utils || { fail pyverbs "packages missing"; return; }
    bash ibverbs/build-so.sh >"$OUT/pyverbs-build.log" 2>&1 ||
        { fail pyverbs "bash ibverbs/build-so.sh (see $OUT/pyverbs-build.log)"; return; }
    # rdma-core's tests as Debian installs them (some files compressed).
    local docs=/usr/share/doc/rdma-core/tests dir="$OUT/pyverbs"
    [ -d "$docs" ] || { fail pyverbs "$docs missing"; return; }
    rm -rf "$dir" && mkdir -p "$dir" && cp -r "$docs" "$dir/" && gunzip -f "$dir"/tests/*.gz
    local table="$OUT/pyverbs/table.md"
    printf '| module | passed | failed | skipped |\n|---|---|---|---|\n' >"$table"
    local m log ran failed errors skipped passed
    for m in $PYVERBS_MODULES; do
        log="$dir/$m.log"
        # test_atomic on the ConnectX-5 personality: host-endian atomics
        # (IBV_ATOMIC_HCA); the recorded ConnectX-4 has big-endian ones only.
        local devs="emu:emu0=loop"
        [ "$m" = test_atomic ] && devs="emu:emu0=cx5,loop"
        (cd "$dir" && LD_LIBRARY_PATH=$IBV_LIB HCA_IBV_DEVICES="$devs" \
            timeout 600 /usr/bin/python3 tests/run_tests.py --dev emu0 -v "$m") >"$log" 2>&1
        ran=$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in .*/\1/p' "$log")
        failed=$(grep -Eo 'failures=[0-9]+' "$log" | tail -n 1 | cut -d= -f2)
        errors=$(grep -Eo 'errors=[0-9]+' "$log" | tail -n 1 | cut -d= -f2)
        skipped=$(grep -Eo 'skipped=[0-9]+' "$log" | tail -n 1 | cut -d= -f2)
        ran=${ran:-0} failed=$(( ${failed:-0} + ${errors:-0} )) skipped=${skipped:-0}
        passed=$((ran - failed - skipped))
        printf '| %s | %d | %d | %d |\n' "$m" "$passed" "$failed" "$skipped" >>"$table"
        # Counted per test: rdma-core's tests skip themselves where the
        # device lacks a feature (the reasons are in the log and the
        # table); a failure or error is a failure.
        if [ "$ran" -eq 0 ]; then
            fail "pyverbs $m" "no test ran (see $log)"
            continue
        fi
        PASSED=$((PASSED + passed)) SKIPPED=$((SKIPPED + skipped))
        if [ "$failed" -gt 0 ]; then
            FAILED=$((FAILED + failed))
            FAILURES+=("pyverbs $m: $failed failed (see $log)")
            say "  FAIL  pyverbs $m: $passed passed, $failed failed, $skipped skipped"
            grep -E '^(ERROR|FAIL):' "$log" >&2
        else
            say "  ok    pyverbs $m: $passed passed, $skipped skipped"
        fi
        grep -oE "skipped ['\"].*['\"]" "$log" | sort | uniq -c | sed 's/^/          /' >&2
    done
    # Skips are rdma-core's own, for features the library does not offer.
    SKIPS_ALLOWED=1
    say ""
    cat "$table" >&2
}

suite_bare_metal() {
    say "== bare_metal: the bare-metal image under QEMU TCG (aarch64 virt, x86_64 q35) against hca-emu through ivshmem"
    need_packages qemu-system-arm qemu-system-x86 ||
        { fail bare_metal "cannot install qemu-system-arm qemu-system-x86"; return; }
    IVSHMEM=$ROOT/target/debug/hca-ivshmem
    cargo build -q -p hca-tools --bin hca-ivshmem ||
        { fail "bare_metal build" "cargo build -p hca-tools --bin hca-ivshmem"; return; }
    pass "bare_metal build (hca-ivshmem)"
    bare_metal_arch aarch64
    bare_metal_arch x86_64
}

case "${1:-}" in
    mlx5_vfio) suite_mlx5_vfio ;;
    rxe) suite_rxe ;;
    vfio_hca) suite_vfio_hca ;;
    pcap) suite_pcap ;;
    bare_metal) suite_bare_metal ;;
    ibverbs) suite_ibverbs ;;
    pyverbs) suite_pyverbs ;;
    raw) suite_raw ;;
    all)
        suite_vfio_hca
        suite_mlx5_vfio
        suite_pcap
        suite_rxe
        suite_bare_metal
        suite_ibverbs
        suite_pyverbs
        suite_raw
        ;;
    *)
        say "usage: tests/peers/run.sh mlx5_vfio|vfio_hca|pcap|rxe|bare_metal|ibverbs|pyverbs|raw|all"
        exit 2
        ;;
esac

if [ ${#FAILURES[@]} -gt 0 ]; then
    say ""
    say "not passed:"
    for f in "${FAILURES[@]}"; do say "  $f"; done
fi
echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
if [ $FAILED -gt 0 ] || { [ $SKIPPED -gt 0 ] && [ "${SKIPS_ALLOWED:-0}" != 1 ]; } || [ $PASSED -eq 0 ]; then
    exit 1
fi
