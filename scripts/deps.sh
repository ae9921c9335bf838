#!/usr/bin/env bash
# Installs what a shmring build needs and the machine lacks. Idempotent: it only
# installs what is missing, and never replaces a Node.js, Python or Go that is
# already there (whatever installed it).
#
#   scripts/deps.sh demo     what `make demo` needs: a C compiler, pkg-config and the
#                            GStreamer development packages (the `shmring` command
#                            encodes `record --encode` in process)
#   scripts/deps.sh test     what `make test` needs besides: cmake, libseccomp, ffmpeg, man,
#                            GStreamer's tools and plugins, Python 3.9+ with venv,
#                            Node.js 18+ with npm, Go, promtool, rustfmt and clippy
#                            (promtool alone, unpacked from Debian's prometheus
#                            package into target/tools/bin: no Prometheus server is
#                            installed or started)
#   scripts/deps.sh deb      what `make dist-deb` needs besides `demo`'s: debhelper
#                            (which brings dpkg-dev) and lintian
#   scripts/deps.sh dist     what `make dist` and `make test-dist` need: `deb`'s, plus
#                            Python 3.9+ with venv, Node.js 18+ with npm, debootstrap
#                            (the clean roots of the Debian packages' test), and in
#                            the tool cache outside the clone (scripts/tools.sh):
#                            maturin, auditwheel, zig (the ziglang package) and PyYAML
#                            in a venv, and cargo-zigbuild (cargo install --locked)
#   scripts/deps.sh checkers what `make test-miri`, `test-tsan` and `test-asan` need
#                            besides `demo`'s: a nightly Rust toolchain with Miri and
#                            the standard library's source (rustup)
#   scripts/deps.sh --print test   only say what is missing and how to install it
#
# On Debian 12 and Ubuntu 22.04/24.04 it runs apt-get (as root, or through sudo).
# Elsewhere, or without root or sudo, it prints exactly what to install and exits 1.
# A Rust toolchain (cargo 1.85+, from rustup) must be there already.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

print_only=0
if [ "${1:-}" = "--print" ]; then print_only=1; shift; fi
profile=${1:-test}
case "$profile" in demo|test|deb|dist|checkers) ;; *) echo "usage: $0 [--print] demo|test|deb|dist|checkers" >&2; exit 2 ;; esac

say() { echo "deps: $*" >&2; }

# --- what is needed, as Debian package names -------------------------------------
pkgs=(gcc libc6-dev make pkg-config libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev)
if [ "$profile" = test ]; then
  pkgs+=(g++ cmake libseccomp-dev ffmpeg gstreamer1.0-tools gstreamer1.0-plugins-base
         gstreamer1.0-plugins-good gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly
         gstreamer1.0-libav iproute2 procps man-db)
fi
case "$profile" in deb|dist) pkgs+=(dpkg-dev binutils debhelper lintian) ;; esac
[ "$profile" = dist ] && pkgs+=(debootstrap)

# A tool that may come from elsewhere: installed from Debian only when the command
# is missing (or too old), so an existing installation is never fought.
version_at_least() { # have want (dotted)
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" = "$2" ]
}
extra=()
notes=()
if [ "$profile" = test ] || [ "$profile" = dist ]; then
  # Python 3.9+ that can make a virtual environment.
  if command -v python3 >/dev/null && python3 -c 'import sys; assert sys.version_info >= (3, 9)' 2>/dev/null; then
    python3 -c 'import venv, ensurepip' 2>/dev/null || extra+=(python3-venv)
  else
    extra+=(python3 python3-venv)
  fi
  # Node.js 18+ with npm.
  node_v=$(node --version 2>/dev/null | tr -d v || true)
  if [ -n "$node_v" ] && version_at_least "$node_v" 18; then
    command -v npm >/dev/null || notes+=("Node.js $node_v is installed without npm: install npm from the same source as Node.js")
  elif [ -n "$node_v" ]; then
    notes+=("Node.js $node_v is older than 18: upgrade it from the source it came from")
  else
    extra+=(nodejs npm)
  fi
fi
if [ "$profile" = test ]; then
  # Go 1.19+ (the Go package's tests).
  go_v=$(go env GOVERSION 2>/dev/null | sed 's/^go//' || true)
  if [ -z "$go_v" ]; then
    extra+=(golang-go)
  elif ! version_at_least "$go_v" 1.19; then
    notes+=("Go $go_v is older than 1.19: upgrade it from the source it came from")
  fi
fi

# --- what is missing ---------------------------------------------------------------
missing=()
for p in "${pkgs[@]}" "${extra[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

cargo_ok=1
if ! command -v cargo >/dev/null; then
  cargo_ok=0
  notes+=("no Rust toolchain: install Rust 1.85 or newer with rustup")
fi
if [ "$profile" = test ] && [ $cargo_ok = 1 ]; then
  for c in rustfmt clippy; do
    sub=$c; [ "$c" = rustfmt ] && sub=fmt
    if ! cargo "$sub" --version >/dev/null 2>&1; then
      if command -v rustup >/dev/null && [ $print_only = 0 ]; then
        say "rustup component add $c"
        rustup component add "$c" >/dev/null
      else
        notes+=("the Rust component $c: rustup component add $c")
      fi
    fi
  done
fi

if [ "$profile" = checkers ] && [ $cargo_ok = 1 ]; then
  src="$(rustc +nightly --print sysroot 2>/dev/null)/lib/rustlib/src/rust/library"
  if ! cargo +nightly miri --version >/dev/null 2>&1 || [ ! -d "$src" ]; then
    if command -v rustup >/dev/null && [ $print_only = 0 ]; then
      say "rustup +nightly component add miri rust-src"
      rustc +nightly --version >/dev/null 2>&1 || rustup toolchain install nightly --profile minimal >/dev/null
      rustup +nightly component add miri rust-src >/dev/null
    else
      notes+=("a nightly toolchain with Miri: rustup +nightly component add miri rust-src")
    fi
  fi
fi

distro=unknown
if [ -r /etc/os-release ]; then
  # shellcheck disable=SC1091
  distro=$(. /etc/os-release; echo "${ID:-unknown}-${VERSION_ID:-}")
fi
case "$distro" in debian-12|ubuntu-22.04|ubuntu-24.04) supported=1 ;; *) supported=0 ;; esac
sudo=()
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo=(sudo)
# apt-get, one at a time: two make targets run side by side (make -j2) may both
# install what they need, and apt refuses a second apt-get while one holds its locks.
apt_get() {
  flock "${TMPDIR:-/tmp}/shmring-deps.apt.lock" "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=300 "$@"
}

# promtool (`promtool check metrics`, Prometheus' own linter), unless one is on PATH:
# only the tool, taken out of Debian's prometheus package with dpkg-deb; installing
# the package would start a Prometheus server as a service.
tools=$repo/target/tools/bin
want_promtool=0
if [ "$profile" = test ] && ! command -v promtool >/dev/null && [ ! -x "$tools/promtool" ]; then
  if [ $supported = 1 ] && [ $print_only = 0 ] && command -v apt-get >/dev/null; then
    want_promtool=1
  else
    notes+=("promtool: put Prometheus' promtool on PATH or in $tools (Debian: apt-get download prometheus; dpkg-deb -x prometheus_*.deb DIR; cp DIR/usr/bin/promtool $tools/)")
  fi
fi
# Tools of `make dist` that come from the language registries (maturin, auditwheel
# and zig from PyPI, cargo-zigbuild from crates.io), kept in the tool cache outside
# the clone (scripts/tools.sh).
# shellcheck source=scripts/tools.sh
. "$repo/scripts/tools.sh"
want_tools=0
if [ "$profile" = dist ] && { ! tools_venv_ok || [ ! -x "$TOOLS_ZIGBUILD" ]; }; then want_tools=1; fi
if [ $print_only = 1 ] && [ $want_tools = 1 ]; then
  notes+=("maturin, auditwheel, zig and cargo-zigbuild in $TOOLS_DIR: scripts/deps.sh dist")
fi
fetch_tools() {
  if [ $want_tools = 1 ]; then tools_install; fi
  if [ $want_promtool = 1 ]; then fetch_promtool; fi
}
fetch_promtool() {
  local tmp
  tmp=$(mktemp -d)
  # apt-get download needs the package lists; a fresh image has none.
  (cd "$tmp" && apt-get download prometheus >/dev/null 2>&1) || {
    apt_get update -qq
    (cd "$tmp" && apt-get download prometheus >/dev/null)
  }
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/root"
  mkdir -p "$tools"
  install -m 0755 "$tmp/root/usr/bin/promtool" "$tools/promtool"
  rm -rf "$tmp"
  say "promtool: $tools/promtool"
}

fail=0
for n in "${notes[@]+"${notes[@]}"}"; do say "$n"; fail=1; done
if [ ${#missing[@]} -eq 0 ]; then
  [ $print_only = 1 ] || fetch_tools
  exit $fail
fi

if [ $supported = 0 ] || [ $print_only = 1 ] || ! command -v apt-get >/dev/null; then
  if [ $supported = 0 ]; then
    say "this is $distro; shmring's install script knows Debian 12 and Ubuntu 22.04/24.04."
    say "Install the equivalents of these Debian packages, then run make again:"
  else
    say "missing: run"
  fi
  echo "  sudo apt-get install ${missing[*]}" >&2
  exit 1
fi

if [ "$(id -u)" -ne 0 ] && [ ${#sudo[@]} -eq 0 ]; then
  say "not root and no sudo; as root, run: apt-get install ${missing[*]}"
  exit 1
fi

say "installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Package lists may be absent on a fresh image, or too old to name current versions.
apt_get update -qq
apt_get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fetch_tools
exit $fail
