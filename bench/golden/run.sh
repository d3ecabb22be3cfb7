#!/usr/bin/env bash
# Regenerates data/prm/libmlx5-raw-vectors.json from rdma-core's own mlx5
# provider, built from source at a fixed commit. Run by hand (CI only runs
# verbs-core's test over the committed JSON); see bench/golden/README.md.
#
#   RDMA_CORE_GIT=/path/to/rdma-core bash bench/golden/run.sh
#
# RDMA_CORE_GIT: a git repository of linux-rdma/rdma-core (a clone or a bare
#   mirror) that holds RDMA_CORE_COMMIT.
# RDMA_BUILD: where the source is unpacked and built, outside the repository
#   (default /work/rdma-build, or $TMPDIR/rdma-build when /work is absent).
# INSTALL=1: apt-get install what the build needs first.
#
# The build: the commit's tree unpacked with git archive, configured with
# cmake -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DENABLE_STATIC=1
# -DENABLE_RESOLVE_NEIGH=0 -DNO_PYVERBS=1 -DNO_MAN_PAGES=1, and only the
# static libraries the generator links (libmlx5.a, libibverbs.a, the util
# and ccan helpers) built. bench/golden/raw_vectors.c is compiled against
# rdma-core's headers and those libraries and prints the JSON.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

RDMA_CORE_COMMIT=691953d8d502f54088f776c5ba2aeed0a5ac945d
RDMA_CORE_COMMIT_DATE=2026-08-20
CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DENABLE_STATIC=1 -DENABLE_RESOLVE_NEIGH=0 -DNO_PYVERBS=1 -DNO_MAN_PAGES=1"
OUT=$ROOT/data/prm/libmlx5-raw-vectors.json

if [ -d /work ]; then
    RDMA_BUILD=${RDMA_BUILD:-/work/rdma-build}
else
    RDMA_BUILD=${RDMA_BUILD:-${TMPDIR:-/tmp}/rdma-build}
fi

log() { printf '[golden] %s\n' "$*" >&2; }

# The Debian packages the build needs (libnl is optional for these static
# libraries but keeps cmake's configuration the usual one).
PKGS=(cmake ninja-build pkg-config gcc libnl-3-dev libnl-route-3-dev git python3)
if [ "${INSTALL:-0}" = 1 ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PKGS[@]}" >/dev/null
fi
for t in cmake ninja pkg-config cc git python3; do
    command -v "$t" >/dev/null || { log "missing $t (INSTALL=1 installs: ${PKGS[*]})"; exit 1; }
done

: "${RDMA_CORE_GIT:?set RDMA_CORE_GIT to a git repository of rdma-core holding $RDMA_CORE_COMMIT}"
git -C "$RDMA_CORE_GIT" cat-file -e "$RDMA_CORE_COMMIT^{commit}" 2>/dev/null || {
    log "$RDMA_CORE_GIT does not hold commit $RDMA_CORE_COMMIT"
    exit 1
}

SRC=$RDMA_BUILD/src
BUILD=$RDMA_BUILD/build
if [ "$(cat "$RDMA_BUILD/COMMIT" 2>/dev/null)" != "$RDMA_CORE_COMMIT" ]; then
    log "unpacking rdma-core $RDMA_CORE_COMMIT into $SRC"
    rm -rf "$SRC" "$BUILD"
    mkdir -p "$SRC"
    git -C "$RDMA_CORE_GIT" archive "$RDMA_CORE_COMMIT" | tar -x -C "$SRC"
    echo "$RDMA_CORE_COMMIT" >"$RDMA_BUILD/COMMIT"
fi
if [ ! -f "$BUILD/build.ninja" ]; then
    log "configuring ($CMAKE_FLAGS)"
    mkdir -p "$BUILD"
    # shellcheck disable=SC2086
    (cd "$BUILD" && cmake -G Ninja "$SRC" $CMAKE_FLAGS >"$RDMA_BUILD/cmake.log")
fi
log "building libmlx5.a and libibverbs.a"
ninja -C "$BUILD" lib/statics/libibverbs.a lib/statics/libmlx5.a \
    util/librdma_util.a ccan/libccan.a >"$RDMA_BUILD/ninja.log"

log "building the generator"
cc -O2 -g -std=gnu11 -Wall -Wno-unused-function \
    -I "$BUILD/include" -I "$SRC/providers/mlx5" -I "$SRC" \
    -o "$RDMA_BUILD/raw_vectors" "$ROOT/bench/golden/raw_vectors.c" \
    -Wl,--start-group "$BUILD/lib/statics/libmlx5.a" "$BUILD/lib/statics/libibverbs.a" \
    "$BUILD/util/librdma_util.a" "$BUILD/ccan/libccan.a" -Wl,--end-group -lpthread -ldl

log "writing $OUT"
"$RDMA_BUILD/raw_vectors" "$RDMA_CORE_COMMIT" "$RDMA_CORE_COMMIT_DATE" \
    "cmake -G Ninja $CMAKE_FLAGS (-O2 -g); generator: cc -O2 -g -std=gnu11, statically linked" >"$OUT.tmp"
# Pretty-print (and check that it is JSON).
python3 -c 'import json,sys; json.dump(json.load(open(sys.argv[1])), open(sys.argv[2], "w"), indent=1); open(sys.argv[2], "a").write("\n")' \
    "$OUT.tmp" "$OUT"
rm -f "$OUT.tmp"
python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["counts"]; print("send %d, recv %d, cqe %d" % (c["send"], c["recv"], c["cqe"]))' "$OUT"
