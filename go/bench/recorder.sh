#!/usr/bin/env bash
# The Go recorder example at 1080p30 + 48 kHz stereo from `shmring produce`, over a
# consumer's socket: the recorder's peak RssAnon (sampled every 100 ms from
# /proc/PID/status), its CPU time, and what it wrote.
#
#   go/bench/recorder.sh [SECONDS] [OUT-DIR]      (from the repository's root)
#   RECORDER=rust go/bench/recorder.sh ...        the same with `shmring record --listen`
#
# Needs target/release/shmring (cargo build --release -p shmring-cli) and the staged
# libshmring (make -C crates/shmring-ffi stage). OUT-DIR (default: a temporary
# directory, removed at the end) receives about 93 MB a second.
set -euo pipefail
seconds=${1:-30}
root=$(cd "$(dirname "$0")/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
export PKG_CONFIG_PATH=$target/shmring-ffi-c/stage/lib/pkgconfig
work=$(mktemp -d)
out=${2:-$work/out}
trap 'kill $rec 2>/dev/null || true; rm -rf "$work"' EXIT
sock=$work/cam.sock
if [ "${RECORDER:-go}" = rust ]; then
    "$target/release/shmring" record --listen "$sock" --out "$out" > "$work/rec.txt" 2> "$work/rec.err" &
else
    (cd "$root/go" && go build -o "$work/recorder" ./examples/recorder)
    "$work/recorder" -listen "$sock" -out "$out" > "$work/rec.txt" &
fi
rec=$!
for _ in $(seq 200); do grep -q ready "$work/rec.txt" 2>/dev/null && break; sleep 0.05; done
( while kill -0 $rec 2>/dev/null; do
    v=$(awk '/^RssAnon:/ {print $2}' /proc/$rec/status 2>/dev/null || true)
    [ -n "$v" ] && echo "$v"
    sleep 0.1
  done ) > "$work/rss.txt" &
sampler=$!
"$target/release/shmring" produce --connect "$sock" --video 1920x1080@30 --audio 48000x2 \
    --seconds "$seconds" > "$work/prod.json" 2> /dev/null
kill -INT $rec
wait $rec
wait $sampler || true
peak=$(sort -n "$work/rss.txt" | tail -1)
echo "producer: $(cat "$work/prod.json")"
echo "recorder: $(tail -1 "$work/rec.txt")"
[ -s "$work/rec.err" ] && grep -E "CPU|write calls" "$work/rec.err"
echo "recorder peak RssAnon (sampled every 100 ms): ${peak} KiB over $(wc -l < "$work/rss.txt") samples"
