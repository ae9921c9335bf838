#!/usr/bin/env bash
# Builds the release packages into dist/ (`make dist`):
#
#   shmring_VERSION-1_ARCH.deb                the command, its man pages and completions
#   libshmring0_VERSION-1_ARCH.deb            the shared C library (shlibs, symbols,
#                                             ldconfig trigger)
#   libshmring-dev_VERSION-1_ARCH.deb         header, C++ wrapper, pkg-config file,
#                                             static library
#   gstreamer1.0-shmring_VERSION-1_ARCH.deb   the GStreamer plugin
#   NAME-dbgsym_VERSION-1_ARCH.deb            each one's debug information, split off
#                                             (found by build id under /usr/lib/debug)
#       the Debian packages, built by debhelper from debian/ (`debian/rules build
#       binary`), checked by lintian (no error or warning but the overrides each
#       package documents in debian/NAME.lintian-overrides)
#   shmring-VERSION-cp311-abi3-manylinux_2_17_ARCH.whl   the Python wheel (maturin,
#       linked by zig against glibc 2.17, so one wheel installs on every Linux with
#       glibc 2.17 or newer and CPython 3.11 or newer; stripped; `auditwheel show`
#       checks the tag)
#   shmring-VERSION.tgz                       the npm package with the prebuilt add-on,
#       linked by zig against glibc 2.17 too (cargo-zigbuild), for this machine's
#       CPU (`cpu` in its package.json) and Linux with glibc (`os`, `libc`)
#   debug/NAME.debug                          the debug information (line tables) of
#       the wheel's module and the add-on, split off with objcopy; each stripped
#       file names its own (gnu-debuglink): gdb finds it beside the file or under
#       /usr/lib/debug
#
#   scripts/dist.sh [deb] [wheel] [npm]   (default: all three)
#
# The tools come from `scripts/deps.sh deb` / `scripts/deps.sh dist`: debhelper and
# lintian from apt; maturin, auditwheel and zig (PyPI) and cargo-zigbuild (crates.io)
# in the tool cache outside the clone (scripts/tools.sh). The version is the
# workspace's.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
cargo=${CARGO:-cargo}
dist=${DIST:-$repo/dist}
target=${CARGO_TARGET_DIR:-$repo/target}
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
# shellcheck source=scripts/tools.sh
. "$repo/scripts/tools.sh"
say() { echo "dist: $*" >&2; }
# SRC DEST NAME: DEST is SRC without its debug information and symbol table, which
# go to dist/debug/NAME.debug (named in DEST, with its checksum, by a
# gnu-debuglink).
strip_split() {
  mkdir -p "$dist/debug"
  objcopy --only-keep-debug "$1" "$dist/debug/$3.debug"
  objcopy --strip-unneeded --add-gnu-debuglink="$dist/debug/$3.debug" "$1" "$2"
}
need() { command -v "$1" >/dev/null || { say "$1 is missing: run scripts/deps.sh $2"; exit 1; }; }
mkdir -p "$dist"

deb() {
  need dh deb
  need lintian deb
  rm -f "$dist"/*.deb
  # debhelper's own files (debian/tmp, debian/PACKAGE/, debian/files) start afresh.
  DEB_RULES_REQUIRES_ROOT=no debian/rules clean >&2
  # Rules-Requires-Root: no: files in the packages are owned by root whoever builds.
  DEB_RULES_REQUIRES_ROOT=no DEB_DESTDIR="$dist" CARGO="$cargo" debian/rules build binary >&2
  DEB_RULES_REQUIRES_ROOT=no debian/rules clean >&2
  lint
}

# lintian over the Debian packages: no error, no warning (what it tolerates is
# each package's debian/NAME.lintian-overrides, with the reason).
lint() {
  local out
  out=$(lintian --fail-on error,warning --display-level ">=warning" --info "$dist"/*.deb 2>&1) || {
    echo "$out" >&2
    say "lintian found errors or warnings in the Debian packages"
    exit 1
  }
  [ -z "$out" ] || echo "$out" >&2
  say "lintian: no error, no warning in $(cd "$dist" && echo *.deb)"
}

wheel() {
  tools_venv
  rm -f "$dist"/shmring-*.whl
  # --zig: linked against glibc 2.17's symbols (zig, from the ziglang package),
  # whatever this machine's glibc; maturin checks the module against the tag.
  # --strip: no debug information in the wheel.
  PATH=$TOOLS_VENV/bin:$PATH "$TOOLS_VENV/bin/maturin" build --release --strip --zig \
    --compatibility manylinux_2_17 -m python/Cargo.toml --out "$dist" >&2
  local whl
  whl=$(ls "$dist"/shmring-"$version"-*.whl)
  # Its metadata says the Pythons its tag does: the abi3 module needs CPython 3.11
  # (pyproject.toml's floor, 3.9, is a source build's, without the abi3 feature).
  retag_python "$whl"
  "$TOOLS_VENV/bin/auditwheel" show "$whl" >&2
}

# WHEEL: its Requires-Python made the floor of its cpXY-abi3 tag (the wheel's
# RECORD rewritten by `wheel pack`).
retag_python() {
  local tag floor tmp
  tag=$(basename "$1" | sed -n 's/.*-cp\([0-9]\)\([0-9]*\)-abi3-.*/\1.\2/p')
  [ -n "$tag" ] || { say "$1: not an abi3 wheel"; exit 1; }
  floor=">=$tag"
  tmp=$(mktemp -d)
  "$TOOLS_VENV/bin/python" -m wheel unpack -d "$tmp" "$1" >/dev/null
  sed -i "s/^Requires-Python: .*/Requires-Python: $floor/" "$tmp"/*/*.dist-info/METADATA
  rm -f "$1"
  "$TOOLS_VENV/bin/python" -m wheel pack -d "$(dirname "$1")" "$tmp"/* >/dev/null
  rm -rf "$tmp"
  say "$(basename "$1"): Requires-Python: $floor"
}

npm_package() {
  need npm dist
  tools_venv
  tools_zigbuild
  # The add-on linked by zig against glibc 2.17's symbols, as the wheel is.
  local arch lib stage
  arch=$(uname -m)
  PATH=$TOOLS_VENV/bin:$PATH "$TOOLS_ZIGBUILD" zigbuild --release --locked -p shmring-node --lib \
    --target "$arch-unknown-linux-gnu.$GLIBC_FLOOR" >&2
  lib=$target/$arch-unknown-linux-gnu/release/libshmring_node.so
  # Packed from a copy of node/, whose package.json says which CPU and C library
  # the add-on is for (node/ itself builds for whatever machine it is on).
  stage=$target/npm-stage
  rm -rf "$stage"
  mkdir -p "$stage/node/scripts"
  cp LICENSE-MIT LICENSE-APACHE "$stage/"
  cp node/index.js node/index.d.ts node/README.md node/package.json "$stage/node/"
  cp node/scripts/prepack.js "$stage/node/scripts/"
  # The add-on without its debug information (in dist/debug).
  strip_split "$lib" "$stage/node/shmring.node" shmring.node
  (cd "$stage/node" && node -e '
    const fs = require("node:fs");
    const p = JSON.parse(fs.readFileSync("package.json", "utf8"));
    p.cpu = [process.arch];
    p.libc = ["glibc"];
    fs.writeFileSync("package.json", JSON.stringify(p, null, 2) + "\n");')
  rm -f "$dist"/shmring-*.tgz
  (cd "$stage/node" && npm pack --silent --pack-destination "$dist" >&2)
}

[ $# -eq 0 ] && set -- deb wheel npm
for what in "$@"; do
  case "$what" in
    deb) deb ;;
    wheel) wheel ;;
    npm) npm_package ;;
    *) say "unknown package $what (deb, wheel, npm)"; exit 2 ;;
  esac
done
say "version $version:"
ls -l "$dist" | sed 's/^/  /' >&2
