#!/usr/bin/env bash
# Side-by-side data-path benchmark: verbs-core and hca_driver::verbs against
# rdma-core's libmlx5.
#
#   bash bench/incumbent/run.sh            # build everything, print the table
#   bash bench/incumbent/run.sh --check    # the same, then fail if either of our
#                                          # layers costs more instructions than
#                                          # libmlx5 in any row
#
# It builds libibverbs and the mlx5 provider statically from rdma-core's
# source (v55.0, as vendored by the crates.io crate ibverbs-sys
# 0.3.2+55.0, checked against its SHA-256; the .crate records the commit
# of ibverbs-sys's own repository, 5e66bf7b5ebca6a9fc0dfa3ad38a3f5a6860cdad,
# but not rdma-core's, so the version is checked in its CMakeLists.txt),
# the C harness
# bench/incumbent/libmlx5_bench.c against them, and the Rust twins
# verbs-core/examples/vs_libmlx5.rs (verbs-core) and
# tests/examples/vs_libmlx5_driver (hca_driver::verbs on an emulated HCA
# whose UAR pages are memory); then counts instructions per operation
# of every scenario on both sides with callgrind and times both in the same
# run (compare.py). Everything built lives in target/incumbent/.
#
# Environment: DOORBELL_MODEL (nt | spin:N | none, default nt), CG_N
# (operations per callgrind run, default 10000), TIME_N (per timing run,
# default 200000), ROUNDS (timing rounds, median taken, default 5),
# BENCH_INSTALL=1 to apt-get install missing tools (CI does).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=$ROOT/target/incumbent

CRATE=ibverbs-sys
CRATE_VERSION=0.3.2+55.0
CRATE_SHA256=8149ab8d940ea7e7073a24ba6e3ec6b0cc8ceab6ea3d562d60a21ca5cc23413a
RDMA_CORE_VERSION=55.0

log() { printf '[incumbent] %s\n' "$*" >&2; }

need_tools() {
    local missing=()
    command -v cmake >/dev/null || missing+=(cmake)
    command -v ninja >/dev/null || missing+=(ninja-build)
    command -v pkg-config >/dev/null || missing+=(pkg-config)
    command -v cc >/dev/null || missing+=(gcc)
    command -v valgrind >/dev/null || missing+=(valgrind)
    command -v python3 >/dev/null || missing+=(python3)
    command -v curl >/dev/null || missing+=(curl)
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "${BENCH_INSTALL:-0}" = 1 ]; then
            local sudo=""
            [ "$(id -u)" = 0 ] || sudo=sudo
            log "installing ${missing[*]}"
            $sudo apt-get update -qq
            $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                --no-install-recommends "${missing[@]}" >/dev/null
        else
            log "missing tools: ${missing[*]} (apt-get install them, or BENCH_INSTALL=1)"
            exit 1
        fi
    fi
}

fetch_source() {
    local crate=$OUT/$CRATE-$CRATE_VERSION.crate
    mkdir -p "$OUT"
    if [ ! -f "$crate" ] || ! echo "$CRATE_SHA256  $crate" | sha256sum -c --quiet - 2>/dev/null; then
        log "downloading $CRATE $CRATE_VERSION from crates.io"
        if ! curl -sSfL -o "$crate.part" \
            "https://static.crates.io/crates/$CRATE/$CRATE-${CRATE_VERSION/+/%2B}.crate"; then
            # Through cargo, the registry's ordinary client.
            log "direct download failed; trying cargo fetch"
            local m=$OUT/fetch
            mkdir -p "$m"
            printf '[package]\nname = "fetch-rdma-core"\nversion = "0.0.0"\nedition = "2021"\n[lib]\npath = "lib.rs"\n[dependencies]\n%s = "=%s"\n' \
                "$CRATE" "$CRATE_VERSION" >"$m/Cargo.toml"
            : >"$m/lib.rs"
            CARGO_HOME=$m/home cargo fetch --manifest-path "$m/Cargo.toml" >&2
            cp "$(ls "$m"/home/registry/cache/*/"$CRATE-$CRATE_VERSION.crate" | head -1)" "$crate.part"
        fi
        mv "$crate.part" "$crate"
        echo "$CRATE_SHA256  $crate" | sha256sum -c --quiet - || {
            log "checksum mismatch for $crate"
            exit 1
        }
    fi
    SRC=$OUT/src/$CRATE-$CRATE_VERSION/vendor/rdma-core
    if [ ! -f "$SRC/CMakeLists.txt" ]; then
        rm -rf "$OUT/src"
        mkdir -p "$OUT/src"
        tar xzf "$crate" -C "$OUT/src"
    fi
    grep -q "set(PACKAGE_VERSION \"$RDMA_CORE_VERSION\")" "$SRC/CMakeLists.txt" || {
        log "the crate does not hold rdma-core $RDMA_CORE_VERSION"
        exit 1
    }
}

build_libmlx5() {
    local b=$OUT/rdma-core-build
    if [ ! -f "$b/build.ninja" ]; then
        log "configuring rdma-core $RDMA_CORE_VERSION (RelWithDebInfo, static)"
        mkdir -p "$b"
        (cd "$b" && cmake -G Ninja "$SRC" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
            -DENABLE_STATIC=1 -DENABLE_RESOLVE_NEIGH=0 -DNO_PYVERBS=1 -DNO_MAN_PAGES=1 \
            -DCMAKE_C_COMPILER=cc >/dev/null)
    fi
    log "building libibverbs and the mlx5 provider"
    ninja -C "$b" lib/statics/libibverbs.a lib/statics/libmlx5.a \
        util/librdma_util.a ccan/libccan.a >/dev/null
    log "building the C harness"
    cc -O2 -g -std=gnu11 -Wall -Wno-unused-function \
        -I "$b/include" -I "$SRC/providers/mlx5" -I "$SRC" -I "$ROOT/bench/incumbent" \
        -o "$OUT/libmlx5_bench" "$ROOT/bench/incumbent/libmlx5_bench.c" \
        -Wl,--start-group "$b/lib/statics/libmlx5.a" "$b/lib/statics/libibverbs.a" \
        "$b/util/librdma_util.a" "$b/ccan/libccan.a" -Wl,--end-group -lpthread -ldl
}

build_ours() {
    log "building verbs-core's and hca_driver::verbs's twins (release)"
    cargo build --release -q -p verbs-core --example vs_libmlx5
    cargo build --release -q -p hca-tests --example vs_libmlx5_driver
    local target
    target=$(cargo metadata --format-version 1 --no-deps |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
    OURS=$target/release/examples/vs_libmlx5
    DRIVER=$target/release/examples/vs_libmlx5_driver
}

need_tools
fetch_source
build_libmlx5
build_ours
python3 "$ROOT/bench/incumbent/compare.py" \
    --lib "$OUT/libmlx5_bench" --ours "$OURS" --driver "$DRIVER" --vectors "$ROOT/data/prm/libmlx5-vectors.json" \
    --rdma-core "rdma-core v$RDMA_CORE_VERSION (crates.io $CRATE $CRATE_VERSION, sha256 ${CRATE_SHA256:0:12}…)" \
    --out "$OUT/table.md" "$@"
