# Shared by tests/qemu/run.sh and tests/qemu/rxe.sh (sourced, not run):
# Debian packages on the host, and a Debian kernel unpacked from its .deb
# (cached in $CACHE, unpacked into $BUILD/kernel).
#
# The sourcing script sets BUILD and CACHE and defines `say` and `die`.

SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
apt_updated=""

apt_update() {
    if [ -z "$apt_updated" ]; then
        say "apt-get update"
        $SUDO apt-get update -qq
        apt_updated=1
    fi
}

# Installs the Debian packages named that are not installed yet.
need_host_packages() {
    local missing=() p
    for p in "$@"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        apt_update
        say "installing ${missing[*]}"
        $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    fi
}

# A Debian kernel with its modules: QEMU_KERNEL_PKG (a linux-image package
# name) or what linux-image-amd64 depends on, downloaded once. Sets
# VMLINUZ, KVER and MODDIR (lib/modules/<version>/kernel).
fetch_kernel() {
    mkdir -p "$CACHE"
    local deb pkg
    deb=$(ls "$CACHE"/linux-image-*.deb 2>/dev/null | head -n1 || true)
    if [ -n "${QEMU_KERNEL_PKG:-}" ] && [[ "$deb" != *"/${QEMU_KERNEL_PKG}_"* ]]; then
        deb=""
    fi
    if [ -z "$deb" ]; then
        apt_update
        pkg=${QEMU_KERNEL_PKG:-$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')}
        [ -n "$pkg" ] || die "no linux-image package found (apt-cache depends linux-image-amd64)"
        say "downloading $pkg"
        rm -f "$CACHE"/linux-image-*.deb
        (cd "$CACHE" && apt-get download -qq "$pkg" 2>&1 | grep -v "couldn't be accessed by user '_apt'" || true)
        deb=$(ls "$CACHE"/linux-image-*.deb 2>/dev/null | head -n1 || true)
        [ -n "$deb" ] || die "apt-get download $pkg produced no package"
    fi
    local kdir=$BUILD/kernel
    if [ "$(cat "$kdir/.from" 2>/dev/null || true)" != "$deb" ]; then
        say "unpacking $(basename "$deb")"
        rm -rf "$kdir"
        mkdir -p "$kdir"
        dpkg -x "$deb" "$kdir"
        echo "$deb" > "$kdir/.from"
    fi
    VMLINUZ=$(ls "$kdir"/boot/vmlinuz-* | head -n1)
    KVER=$(ls "$kdir/lib/modules" | head -n1)
    MODDIR=$kdir/lib/modules/$KVER/kernel
    DEB=$deb
}
