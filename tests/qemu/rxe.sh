#!/usr/bin/env bash
# Linux Soft-RoCE (rdma_rxe) as a peer of the emulated HCA: boots a Debian
# kernel under QEMU (TCG) whose first NIC sits on a `-netdev dgram` UDP wire
# on 127.0.0.1, cabled to the host's `hca --wire udp:...` (port 1 of an
# emulated ConnectX-4). The guest creates rxe0 on that NIC and runs
# ibv_rc/uc/ud_pingpong (Debian's ibverbs-utils, with -c) for every case of
# tests/qemu/rxe-cases, as server (the host's `hca pingpong` connects through
# a QEMU user-network forward on 127.0.0.1) or as client (to the host's
# `hca pingpong --server`, through the user network's gateway). Both sides
# check what they received. The capture case has the guest send UDP
# datagrams with netcat to the host's `hca capture`, whose pcap tshark reads. Prints one `RXE: NAME PASS|FAIL ...` line per
# case and exits 0 only if every case passed. See tests/qemu/README.md.
#
# Environment: RXE_TIMEOUT (seconds for the whole guest run, default 480),
# QEMU_KERNEL_PKG (as for run.sh), CARGO_TARGET_DIR (as for cargo).
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD=tests/qemu/build
CACHE=$BUILD/cache
TIMEOUT=${RXE_TIMEOUT:-480}
TARGET_DIR=${CARGO_TARGET_DIR:-target}
HCA=$TARGET_DIR/debug/hca
CASES=tests/qemu/rxe-cases
# Kernel modules (paths under lib/modules/<version>/kernel), in load order:
# the NIC (e1000, built as a module in Debian's kernel), crc32 for rxe's
# ICRC (rxe asks the crypto API for "crc32"), then rdma_rxe's dependencies
# as its modinfo `depends=` lists them.
MODULES="drivers/net/ethernet/intel/e1000/e1000.ko crypto/crc32_generic.ko
net/ipv4/udp_tunnel.ko net/ipv6/ip6_udp_tunnel.ko drivers/infiniband/core/ib_core.ko
drivers/infiniband/core/ib_uverbs.ko drivers/infiniband/sw/rxe/rdma_rxe.ko"
# Programs for the guest; their shared libraries are found with ldd.
PROGRAMS="ibv_rc_pingpong ibv_uc_pingpong ibv_ud_pingpong ibv_devinfo rdma ip
ib_write_bw ib_read_lat ib_send_bw ib_atomic_bw nc.openbsd"

say() { printf '[qemu-rxe] %s\n' "$*" >&2; }
die() { say "FAIL: $*"; exit 1; }
start=$(date +%s)
mkdir -p "$CACHE"

# shellcheck source=tests/qemu/common.sh
. tests/qemu/common.sh

# 1. Host packages (tshark: without the question whether non-root users
# may capture).
echo "wireshark-common wireshark-common/install-setuid boolean false" |
    $SUDO debconf-set-selections 2>/dev/null || true
need_host_packages qemu-system-x86 cpio busybox-static ibverbs-utils ibverbs-providers perftest iproute2 netcat-openbsd tshark
BUSYBOX=$(command -v busybox)

# 2. A Debian kernel (cached; the same cache as run.sh).
fetch_kernel
deb=$DEB

# 3. The host side.
say "building hca"
cargo build -q -p hca-tools
[ -x "$HCA" ] || die "no binary at $HCA"

# 4. The initramfs: busybox, the modules, the programs with their ELF
# interpreter and libraries, the rxe provider (dlopen'ed by libibverbs from
# its provider directory, named by /etc/libibverbs.d/rxe.driver).
ROOTFS=$BUILD/rxe-initramfs
rm -rf "$ROOTFS"
mkdir -p "$ROOTFS"/{bin,sbin,dev,proc,sys,tmp,modules,etc/libibverbs.d,usr/bin,usr/sbin,usr/lib/x86_64-linux-gnu/libibverbs,usr/lib64}
ln -s usr/lib "$ROOTFS/lib"
ln -s usr/lib64 "$ROOTFS/lib64"
cp "$BUSYBOX" "$ROOTFS/bin/busybox"
cp tests/qemu/rxe-init "$ROOTFS/init"
chmod +x "$ROOTFS/init"
cp "$CASES" "$ROOTFS/rxe-cases"
: > "$ROOTFS/modules.list"
for m in $MODULES; do
    [ -f "$MODDIR/$m" ] || die "module $m missing from $(basename "$deb")"
    cp "$MODDIR/$m" "$ROOTFS/modules/"
    basename "$m" >> "$ROOTFS/modules.list"
done
# Copies a file to the same path in the initramfs (through /lib -> usr/lib).
put() {
    local src=$1 real dst
    real=$(readlink -f "$src")
    dst=$ROOTFS/${src#/}
    case $src in /lib/*) dst=$ROOTFS/usr/${src#/} ;; /lib64/*) dst=$ROOTFS/usr/${src#/} ;; esac
    mkdir -p "$(dirname "$dst")"
    cp "$real" "$dst"
}
elfs=()
for p in $PROGRAMS; do
    path=$(command -v "$p") || die "$p is not installed"
    dir=usr/bin
    case $path in */sbin/*) dir=usr/sbin ;; esac
    cp "$(readlink -f "$path")" "$ROOTFS/$dir/$p"
    elfs+=("$path")
done
provider=/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
[ -f "$provider" ] || provider=$(ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-*.so | head -n1)
[ -f "$provider" ] || die "no rxe provider in /usr/lib/x86_64-linux-gnu/libibverbs (ibverbs-providers)"
put "$provider"
elfs+=("$provider")
cp /etc/libibverbs.d/rxe.driver "$ROOTFS/etc/libibverbs.d/"
for e in "${elfs[@]}"; do
    ldd "$e" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
done | sort -u | while read -r lib; do put "$lib"; done
(cd "$ROOTFS" && find . | cpio -o -H newc --quiet) | gzip -1 > "$BUILD/rxe-initrd.gz"

# 5. Ports: the wire (UDP, hca at W1, QEMU at W2), the forward to the
# guest's pingpong server, the host's pingpong server. Free ones, chosen by
# binding port 0.
read -r W1 W2 FWD HOSTPORT < <(python3 -c '
import socket
s = [socket.socket(socket.AF_INET, t) for t in (socket.SOCK_DGRAM, socket.SOCK_DGRAM, socket.SOCK_STREAM, socket.SOCK_STREAM)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
WIRE="udp:127.0.0.1:$W1,127.0.0.1:$W2"
say "wire: hca --wire $WIRE; guest eth0 on -netdev dgram 127.0.0.1:$W2 -> :$W1"

# The emulated HCA's MAC on this wire (its seed comes from the wire's local
# end) and its RoCE v2 link-local GID (EUI-64 from the MAC). Soft-RoCE
# resolves a RoCE v2 destination's MAC through the IP neighbour table
# (ND for IPv6), and nothing on the host side answers ND (a ConnectX does
# not either; the host's netdev does): the guest gets a permanent
# neighbour entry, as a static ARP entry would be.
PEER_MAC=$("$HCA" info --json --wire "$WIRE" 2>/dev/null | sed -n 's/.*"mac": *"\([0-9a-f:]*\)".*/\1/p' | head -n1)
[ -n "$PEER_MAC" ] || die "hca info --json --wire $WIRE reported no MAC"
PEER_IP=$(python3 -c '
import sys, ipaddress
m = bytes.fromhex(sys.argv[1].replace(":", ""))
e = bytes([m[0] ^ 2]) + m[1:3] + b"\xff\xfe" + m[3:]
print(ipaddress.IPv6Address(b"\xfe\x80" + bytes(6) + e))' "$PEER_MAC")
say "emulated HCA: MAC $PEER_MAC, GID $PEER_IP"

LOG=$BUILD/rxe-console.log
HLOG=$BUILD/rxe-host
rm -rf "$HLOG" && mkdir -p "$HLOG"
: > "$LOG"
say "booting $KVER under QEMU (TCG), timeout ${TIMEOUT}s"
timeout --kill-after=10 "$TIMEOUT" qemu-system-x86_64 \
    -accel tcg -cpu max -machine q35 -m 512 -smp 1 \
    -netdev "dgram,id=wire,local.type=inet,local.host=127.0.0.1,local.port=$W2,remote.type=inet,remote.host=127.0.0.1,remote.port=$W1" \
    -device e1000,netdev=wire,mac=52:54:00:00:00:02,addr=0x4 \
    -netdev "user,id=user,restrict=off,hostfwd=tcp:127.0.0.1:$FWD-:18515" \
    -device e1000,netdev=user,mac=52:54:00:00:01:02,addr=0x5 \
    -vga none -display none -monitor none -serial stdio -no-reboot \
    -kernel "$VMLINUZ" -initrd "$BUILD/rxe-initrd.gz" \
    -append "console=ttyS0 quiet panic=-1 rxe_hostport=$HOSTPORT rxe_peer=$PEER_IP,$PEER_MAC" \
    </dev/null >"$LOG" 2>&1 &
QEMU=$!
trap 'kill $QEMU 2>/dev/null || true' EXIT

# Waits for a line of the console starting with $1; fails when QEMU ends.
wait_line() {
    while ! grep -q "^$1" "$LOG"; do
        kill -0 $QEMU 2>/dev/null || { grep -q "^$1" "$LOG" && return 0; return 1; }
        sleep 0.5
    done
}

passed=0 failed=0
result() { # name verdict detail
    echo "RXE: $1 $2${3:+ $3}"
    if [ "$2" = PASS ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}
while read -r name server tr size iters; do
    case $name in ''|'#'*) continue ;; esac
    case $tr in
        capture)
            kind=capture peer="nc -u"
            args=(capture --wire "$WIRE" --proto udp --dst-port "$size" -c "$iters" --duration 60 -w "$HLOG/$name.pcap")
            ;;
        rc|uc|ud)
            kind=pingpong peer="ibv_${tr}_pingpong"
            args=(pingpong "$tr" --wire "$WIRE" -g 1 -s "$size" -n "$iters" -c)
            [ "$tr" = ud ] || args+=(-m 1024)
            ;;
        *)
            # hca perf with perftest's exchange (--perftest) against
            # perftest's ib_* program of the test.
            kind=perf peer="perftest $tr"
            args=(perf "$tr" --perftest --wire "$WIRE" -x 1 -s "$size" -n "$iters" -m 1024)
            ;;
    esac
    hlog=$HLOG/$name.log
    : > "$hlog"
    hrc=1
    if [ "$kind" = capture ]; then
        # The guest sends for 10 s from the start of its case; the
        # capture ends after $iters frames (or 60 s).
        timeout 90 "$HCA" "${args[@]}" >"$hlog" 2>&1 && hrc=0 || hrc=$?
        if [ "$hrc" = 0 ]; then
            n=$(tshark -r "$HLOG/$name.pcap" -Y "ip.src == 192.168.77.2 && udp.dstport == $size && data.text contains \"hca-capture-\" && !_ws.malformed && !_ws.expert" \
                -o data.show_as_text:TRUE -T fields -e frame.number 2>>"$hlog" | grep -c . || true)
            [ "$n" = "$iters" ] || hrc="0 but tshark found $n of $iters datagrams in $HLOG/$name.pcap"
        fi
    elif [ "$server" = guest ]; then
        if ! wait_line "RXE-READY $name"; then
            result "$name" FAIL "the guest ended before the case (console: $LOG)"
            continue
        fi
        # The guest's server may not listen yet: QEMU's forward then
        # accepts and closes. Retry until the guest has reported the case.
        # An attempt that got the server's address was the real one.
        for _ in $(seq 1 60); do
            timeout 120 "$HCA" "${args[@]}" -p "$FWD" 127.0.0.1 >"$hlog.try" 2>&1 && hrc=0 || hrc=$?
            cat "$hlog.try" >>"$hlog"
            [ "$hrc" = 0 ] && break
            grep -q "remote address:" "$hlog.try" && break
            grep -q "^RXE-GUEST $name " "$LOG" && break
            kill -0 $QEMU 2>/dev/null || break
            sleep 1
        done
    else
        # The guest's client retries until this server listens. A server
        # whose client gave up is not waited for beyond a grace period.
        timeout 180 "$HCA" "${args[@]}" --server -p "$HOSTPORT" >"$hlog" 2>&1 &
        hpid=$!
        grace=0
        while kill -0 $hpid 2>/dev/null; do
            if grep -q "^RXE-GUEST $name " "$LOG" || ! kill -0 $QEMU 2>/dev/null; then
                grace=$((grace + 1))
                [ $grace -gt 20 ] && { kill $hpid 2>/dev/null; echo "killed: the guest's side had ended 10 s before" >>"$hlog"; }
            fi
            sleep 0.5
        done
        wait $hpid && hrc=0 || hrc=$?
    fi
    rm -f "$hlog.try"
    wait_line "RXE-GUEST $name " || true
    guest=$(grep "^RXE-GUEST $name " "$LOG" | tail -n1 | tr -d '\r' | cut -d' ' -f3-)
    # hca perf: its result row for the size and all the iterations (the
    # passive side of a latency test prints none).
    if [ "$hrc" = 0 ] && [ "$kind" = perf ] && ! { [ "$server" = host ] && [ "$tr" = read-lat ]; } &&
       ! grep -qE "^ *$size +$iters +[0-9.]+ +[0-9.]+" "$hlog"; then
        hrc="0 but no result row"
    fi
    if [ "$hrc" = 0 ] && [ "${guest%% *}" = PASS ] && [ "$kind" = capture ]; then
        result "$name" PASS "(hca capture -c $iters of the guest's nc -u datagrams to UDP port $size, read by tshark)"
    elif [ "$hrc" = 0 ] && [ "${guest%% *}" = PASS ]; then
        result "$name" PASS "(hca $kind $tr, $peer server: $server; -s $size -n $iters)"
    else
        result "$name" FAIL "hca exit $hrc ($(tail -n1 "$hlog")); guest: ${guest:-no result} ($(grep "^RXE-OUT $name:" "$LOG" | tail -n2 | tr -d '\r' | cut -d: -f2- | paste -sd';' -))"
    fi
done < "$CASES"
wait_line RXE-DONE || true
kill $QEMU 2>/dev/null || true
wait $QEMU 2>/dev/null || true
elapsed=$(( $(date +%s) - start ))
say "$passed passed, $failed failed in ${elapsed}s; console $LOG, host logs $HLOG/"
grep '^RXE-INIT' "$LOG" >&2 || true
[ "$failed" = 0 ] && [ "$passed" -gt 0 ]
