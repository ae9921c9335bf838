#!/usr/bin/env bash
# Builds the release packages into dist/ (`make dist`):
#
#   shmring_VERSION-1_ARCH.deb           the Debian package: the command (and the bench's
#                                        worker program), the C library
#                                        (shared, static, header, pkg-config file), the
#                                        GStreamer plugin, man pages, completions,
#                                        licence files (cargo-deb, from the metadata in
#                                        crates/shmring-cli/Cargo.toml)
#   shmring-VERSION-cp311-abi3-manylinux_2_17_ARCH.whl   the Python wheel (maturin,
#                                        linked by zig against glibc 2.17, so one wheel
#                                        installs on every Linux with glibc 2.17 or
#                                        newer and CPython 3.11 or newer; stripped;
#                                        `auditwheel show` checks the tag)
#   shmring-VERSION.tgz                  the npm package with the prebuilt add-on
#   debug/NAME.debug                     the debug information (line tables) of each
#                                        shipped program and library, split off with
#                                        objcopy; each stripped file names its own
#                                        (gnu-debuglink): gdb finds it beside the file
#                                        or under /usr/lib/debug
#
#   scripts/dist.sh [deb] [wheel] [npm]   (default: all three)
#
# The tools come from `scripts/deps.sh dist` (cargo-deb in target/tools/bin, maturin
# and auditwheel in target/tools/venv). The version is the workspace's.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
cargo=${CARGO:-cargo}
dist=${DIST:-$repo/dist}
tools=$repo/target/tools
target=${CARGO_TARGET_DIR:-$repo/target}
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
say() { echo "dist: $*" >&2; }
# SRC DEST NAME: DEST is SRC without its debug information, which goes to
# dist/debug/NAME.debug (named in DEST, with its checksum, by a gnu-debuglink).
strip_split() {
  mkdir -p "$dist/debug"
  objcopy --only-keep-debug "$1" "$dist/debug/$3.debug"
  objcopy --strip-debug --add-gnu-debuglink="$dist/debug/$3.debug" "$1" "$2"
}
need() { [ -x "$1" ] || { say "$1 is missing: run scripts/deps.sh dist"; exit 1; }; }
mkdir -p "$dist"

deb() {
  need "$tools/bin/cargo-deb"
  command -v dpkg-shlibdeps >/dev/null || { say "dpkg-shlibdeps is missing: run scripts/deps.sh dist"; exit 1; }
  "$cargo" build --release -p shmring-cli -p shmring-ffi -p gst-shmring
  # What the package holds besides the build products, generated from this build.
  local assets=$target/release/dist-assets
  rm -rf "$assets"
  mkdir -p "$assets/completions" "$assets/bin" "$assets/lib"
  strip_split "$target/release/shmring" "$assets/bin/shmring" shmring
  strip_split "$target/release/shmring-bench-worker" "$assets/bin/shmring-bench-worker" shmring-bench-worker
  strip_split "$target/release/libshmring_ffi.so" "$assets/lib/libshmring.so.0" libshmring.so.0
  strip_split "$target/release/libgstshmring.so" "$assets/lib/libgstshmring.so" libgstshmring.so
  # The archive: its objects without debug information (no separate file: a
  # program linked with it carries its own).
  objcopy --strip-debug "$target/release/libshmring_ffi.a" "$assets/lib/libshmring.a"
  "$target/release/shmring" manpages "$assets/man"
  "$target/release/shmring" completions bash > "$assets/completions/shmring.bash"
  "$target/release/shmring" completions zsh > "$assets/completions/_shmring"
  "$target/release/shmring" completions fish > "$assets/completions/shmring.fish"
  make -s -C crates/shmring-ffi pc PC="$assets/shmring.pc" PREFIX=/usr \
    LIBDIR="/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)"
  rm -f "$dist"/shmring_*.deb
  # --multiarch=foreign: usr/lib becomes usr/lib/TUPLE (GStreamer's plugin directory, the
  # library directory); the command serves every architecture.
  "$tools/bin/cargo-deb" -p shmring-cli --no-build --multiarch=foreign --output "$dist" >&2
}

wheel() {
  need "$tools/venv/bin/maturin"
  rm -f "$dist"/shmring-*.whl
  # --zig: linked against glibc 2.17's symbols (zig, from the ziglang package),
  # whatever this machine's glibc; maturin checks the module against the tag.
  # --strip: no debug information in the wheel.
  PATH=$tools/venv/bin:$PATH "$tools/venv/bin/maturin" build --release --strip --zig \
    --compatibility manylinux_2_17 -m python/Cargo.toml --out "$dist" >&2
  "$tools/venv/bin/auditwheel" show "$dist"/shmring-"$version"-*.whl >&2
}

npm_package() {
  command -v npm >/dev/null || { say "npm is missing: run scripts/deps.sh dist"; exit 1; }
  (cd node && node scripts/build.js >&2)
  # The add-on without its debug information (in dist/debug).
  strip_split node/shmring.node node/shmring.node shmring.node
  rm -f "$dist"/shmring-*.tgz
  (cd node && npm pack --silent --pack-destination "$dist" >&2)
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
