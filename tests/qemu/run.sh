#!/usr/bin/env bash
# The platform crate's vfio backend against a real Linux kernel: boots a
# Debian kernel under QEMU (TCG) with an emulated Intel IOMMU and three QEMU
# `edu` devices, and runs platform/examples/vfio_edu.rs inside it.
# Exits 0 only if the guest prints `VFIO-EDU: PASS`. See tests/qemu/README.md.
#
# Environment: QEMU_TIMEOUT (seconds for the guest, default 300),
# QEMU_KERNEL_PKG (a linux-image package name, default: what linux-image-amd64
# depends on), CARGO_TARGET_DIR (as for cargo).
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD=tests/qemu/build
CACHE=$BUILD/cache
TIMEOUT=${QEMU_TIMEOUT:-300}
TARGET=x86_64-unknown-linux-gnu
TARGET_DIR=${CARGO_TARGET_DIR:-target}
MODULES="virt/lib/irqbypass.ko drivers/vfio/vfio.ko drivers/vfio/vfio_iommu_type1.ko
drivers/vfio/vfio_virqfd.ko drivers/vfio/pci/vfio-pci-core.ko drivers/vfio/pci/vfio-pci.ko
drivers/uio/uio.ko drivers/uio/uio_pci_generic.ko"

say() { printf '[qemu-vfio] %s\n' "$*"; }
fail() { say "FAIL: $*"; exit 1; }
start=$(date +%s)
mkdir -p "$CACHE"

# shellcheck source=tests/qemu/common.sh
. tests/qemu/common.sh
die() { fail "$@"; }

# 1. Host packages.
need_host_packages qemu-system-x86 cpio busybox-static
BUSYBOX=$(command -v busybox)

# 2. A Debian kernel with its vfio modules (cached).
fetch_kernel
deb=$DEB

# 3. The test program, static.
say "building platform example vfio_edu (static, $TARGET)"
rustup target add "$TARGET" >/dev/null 2>&1 || true
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    cargo build -q -p platform --features vfio --example vfio_edu --target "$TARGET"
BIN=$TARGET_DIR/$TARGET/debug/examples/vfio_edu
[ -x "$BIN" ] || fail "no binary at $BIN"

# 4. The initramfs: busybox, the modules, init and the program.
ROOTFS=$BUILD/initramfs
rm -rf "$ROOTFS"
mkdir -p "$ROOTFS"/{bin,dev,proc,sys,tmp,modules}
cp "$BUSYBOX" "$ROOTFS/bin/busybox"
cp tests/qemu/init "$ROOTFS/init"
chmod +x "$ROOTFS/init"
cp "$BIN" "$ROOTFS/vfio_edu"
: > "$ROOTFS/modules.list"
for m in $MODULES; do
    [ -f "$MODDIR/$m" ] || fail "module $m missing from $(basename "$deb")"
    cp "$MODDIR/$m" "$ROOTFS/modules/"
    basename "$m" >> "$ROOTFS/modules.list"
done
(cd "$ROOTFS" && find . | cpio -o -H newc --quiet) | gzip -1 > "$BUILD/initrd.gz"

# 5. Boot. edu #1 sits alone in its IOMMU group (the device under test);
# edu #2 and #3 sit behind a conventional PCI bridge and share a group with
# it (for the non-viable-group check).
say "booting $KVER under QEMU (TCG, intel-iommu), timeout ${TIMEOUT}s"
LOG=$BUILD/console.log
set +e
timeout --kill-after=10 "$TIMEOUT" qemu-system-x86_64 \
    -accel tcg -cpu max -machine q35,kernel-irqchip=split -m 512 -smp 1 \
    -device intel-iommu,intremap=on \
    -device edu \
    -device pci-bridge,id=br1,chassis_nr=1,shpc=off \
    -device edu,bus=br1,addr=1 -device edu,bus=br1,addr=2 \
    -vga none -net none -display none -monitor none -serial stdio -no-reboot \
    -kernel "$VMLINUZ" -initrd "$BUILD/initrd.gz" \
    -append "console=ttyS0 intel_iommu=on quiet panic=-1" \
    </dev/null 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
set -e
elapsed=$(( $(date +%s) - start ))
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    fail "guest timed out after ${TIMEOUT}s (whole run ${elapsed}s); console in $LOG"
fi
if grep -q '^VFIO-EDU: PASS' "$LOG"; then
    say "PASS in ${elapsed}s"
    exit 0
fi
grep '^VFIO-EDU:' "$LOG" || true
fail "the guest did not report VFIO-EDU: PASS (qemu exit $rc, ${elapsed}s); console in $LOG"
