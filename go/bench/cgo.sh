#!/usr/bin/env bash
# The cost of the Go binding on the frame path: `go test -bench` (a bare cgo call;
# the 4 KiB and 1080p frame paths, zero allocations) and the same C calls made from
# C (framepath.c), alternately, ROUNDS times.
#
#   go/bench/cgo.sh [ROUNDS]          (from anywhere; needs the staged libshmring:
#                                      make -C crates/shmring-ffi stage)
set -euo pipefail
rounds=${1:-3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
stage=${CARGO_TARGET_DIR:-$root/target}/shmring-ffi-c/stage
export PKG_CONFIG_PATH=$stage/lib/pkgconfig
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
${CC:-cc} -O2 -std=c11 -D_GNU_SOURCE $(pkg-config --cflags shmring) "$here/framepath.c" -o "$work/framepath" \
    -Wl,-Bstatic -lshmring -Wl,-Bdynamic $(pkg-config --static --libs-only-l shmring | sed 's/-lshmring//') \
    -L"$stage/lib"
(cd "$here/.." && go test -c -o "$work/shmring.test" .)
for _ in $(seq "$rounds"); do
    (cd "$here/.." && "$work/shmring.test" -test.run '^$' -test.bench . -test.benchmem -test.benchtime 1000000x) \
        | grep '^Benchmark'
    "$work/framepath" 1000000
done
