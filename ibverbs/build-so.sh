#!/usr/bin/env bash
# Builds libibverbs.so.1 (soname libibverbs.so.1, rdma-core's symbol
# versions) from the hca-ibverbs staticlib:
#   bash ibverbs/build-so.sh [--release]   ->  target/ibverbs/libibverbs.so.1
#
# Why a script and not a cdylib: rustc passes a version script of its own
# when it links a cdylib, and GNU ld takes one anonymous or one versioned
# script, not both; so the staticlib is linked into a shared object here,
# whole (every exported function is kept), with ibverbs/libibverbs.map.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=debug
flags=()
if [ "${1:-}" = "--release" ]; then
    profile=release
    flags=(--release)
fi
cargo build -q -p hca-ibverbs "${flags[@]}"
target=${CARGO_TARGET_DIR:-target}
out=$target/ibverbs
mkdir -p "$out"
cc -shared -o "$out/libibverbs.so.1.tmp" \
    -Wl,-soname,libibverbs.so.1 \
    -Wl,--version-script=ibverbs/libibverbs.map \
    -Wl,--whole-archive "$target/$profile/libhca_ibverbs.a" -Wl,--no-whole-archive \
    -Wl,--gc-sections -lpthread -ldl -lm -lrt -lgcc_s -lc
mv "$out/libibverbs.so.1.tmp" "$out/libibverbs.so.1"
ln -sf libibverbs.so.1 "$out/libibverbs.so"
echo "$out/libibverbs.so.1"
