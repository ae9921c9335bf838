#!/usr/bin/env bash
# Installs each package of dist/ (`make dist`) into a clean place and uses it, as a
# user would (`make test-dist`; CI runs it):
#
#   deb    in a minimal root of each of Debian 12, Debian 13 and Ubuntu 24.04
#          (DEB_SUITES; scripts/debian-root.sh, from this machine's apt sources: a
#          release no source serves is skipped, saying so), the Dockerfile's image
#          commands as written there install the packages (apt-get brings what they
#          depend on), then scripts/dist-tests/check-deb.sh uses them: the four
#          packages and their split, the ldconfig trigger, shmring --version,
#          gst-inspect-1.0 with no GST_PLUGIN_PATH, a C program built with
#          pkg-config (shared, with no LD_LIBRARY_PATH, and --static), man, bash
#          completion, the copyright file, and the Compose sample of docs/DEPLOY.md
#          recording H.264.
#   wheel  a new virtual environment and no Rust toolchain on PATH: pip installs the
#          wheel (numpy from the index), a frame goes through a ring.
#   npm    an empty project and no Rust toolchain on PATH: npm installs the package,
#          a record goes through a ring; the add-on needs no glibc newer than the
#          wheel's floor, and package.json names its cpu, os and libc.
#
#   scripts/test-dist.sh [deb] [wheel] [npm]    (default: all three)
#
# deb needs root (debootstrap, chroot, mounts); every mount is in a private mount
# namespace, so nothing stays mounted however the script ends. Downloaded Debian
# packages are kept in target/dist-apt-cache/SUITE for the next run.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
dist=${DIST:-$repo/dist}
here=$repo/scripts/dist-tests
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
# shellcheck source=scripts/tools.sh
. "$repo/scripts/tools.sh"
# The releases the Debian packages are installed in: Debian 12, Debian 13, Ubuntu 24.04.
DEB_SUITES=${DEB_SUITES:-bookworm trixie noble}
layout=$(sed -n 's/^pub const LAYOUT_VERSION: u32 = \([0-9]*\);/\1/p' crates/shmring/src/layout.rs)
work=$(mktemp -d "${TMPDIR:-/tmp}/shmring-test-dist.XXXXXX")
trap 'rm -rf "$work"' EXIT
say() { echo "test-dist: $*" >&2; }
one() { # the one file of dist/ matching a pattern
  local f
  f=$(compgen -G "$dist/$1" | head -1 || true)
  [ -n "$f" ] || { say "no $1 in $dist: run make dist"; exit 1; }
  echo "$f"
}

# A PATH with the system's directories and Node.js, and no Rust toolchain.
clean_path() {
  local p=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin node_dir
  node_dir=$(dirname "$(command -v node 2>/dev/null || echo /usr/bin/node)")
  case ":$p:" in *":$node_dir:"*) ;; *) p=$p:$node_dir ;; esac
  if env -i PATH="$p" sh -c 'command -v cargo || command -v rustc' >/dev/null; then
    say "a Rust toolchain is on the system PATH ($p): the packages must install without one"
    exit 1
  fi
  echo "$p"
}

test_deb() {
  local suite status=0 ran=()
  [ "$(id -u)" -eq 0 ] || { say "deb: needs root (debootstrap roots)"; exit 1; }
  one 'shmring_*.deb' > /dev/null
  tools_venv
  "$TOOLS_VENV/bin/python" "$here/deploy_samples.py" docs/DEPLOY.md "$work/deploy.sh"
  for suite in $DEB_SUITES; do
    deb_in "$suite" || status=$?
    case $status in
      0) ran+=("$suite") ;;
      3) say "deb: SKIPPED $suite: no apt source of this machine serves it (add one, e.g. a deb822 file with Enabled: no, to test there)"; status=0 ;;
      *) exit "$status" ;;
    esac
  done
  say "deb: installed and used in ${ran[*]}"
}

# SUITE: a clean root of that release (scripts/debian-root.sh; kept in
# target/dist-root/SUITE and used through an overlay, so every run starts from the
# same clean root) runs the Dockerfile's image commands as written there (apt-get
# installs the packages and what they depend on), then check-deb.sh uses them.
# Status 3: no apt source for SUITE.
deb_in() {
  local suite=$1 base run t0 image_cmd rc=0
  t0=$(date +%s)
  base=$repo/target/dist-root/$suite
  "$repo/scripts/debian-root.sh" "$base" "" "$suite" || rc=$?
  [ $rc -eq 0 ] || return $rc
  run=$repo/target/dist-root-run
  rm -rf "$run"
  mkdir -p "$run/upper" "$run/work" "$run/root" "$run/debs" "$repo/target/dist-apt-cache/$suite/partial"
  # As COPY --from=build puts them: the packages, not their debug symbols.
  find "$dist" -maxdepth 1 -name '*.deb' ! -name '*-dbgsym_*' -exec cp -t "$run/debs" {} +
  image_cmd=$("$repo/scripts/dockerfile-run.sh" image)
  say "deb: $suite: the image's commands, in a clean root: $image_cmd"
  # Its mounts are made private first; in a chroot whose / is not a mount point that
  # cannot be done here, and the mounts keep the propagation the chroot's maker gave
  # them (.ci/fresh-machine.sh: private).
  unshare --mount --propagation unchanged bash -euo pipefail -c '
    mount --make-rprivate / 2>/dev/null || true
    base=$1 run=$2 cache=$3 work=$4 here=$5 image_cmd=$6 version=$7 layout=$8
    root=$run/root
    mount -t overlay overlay -o "lowerdir=$base,upperdir=$run/upper,workdir=$run/work" "$root"
    mount -t proc proc "$root/proc"
    mount --bind /dev "$root/dev"
    mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
    mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts" 2>/dev/null || true
    mount --bind "$cache" "$root/var/cache/apt/archives"
    # This machine'"'"'s resolver.
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    cp "$run"/debs/*.deb "$root/tmp/"
    cp "$here/ring.c" "$here/check-deb.sh" "$work/deploy.sh" "$root/tmp/"
    in_root() {
      chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
    }
    in_root sh -c "export DEBIAN_FRONTEND=noninteractive; $image_cmd" > "$run/image.log" 2>&1 \
      || { tail -30 "$run/image.log"; echo "test-dist: the image commands failed" >&2; exit 1; }
    in_root sh /tmp/check-deb.sh "$version" "$layout"
  ' test-dist "$base" "$run" "$repo/target/dist-apt-cache/$suite" "$work" "$here" "$image_cmd" \
    "$version" "$layout"
  rm -rf "$run"
  say "deb: $suite: $(cd "$dist" && ls ./*.deb | grep -vc dbgsym) packages installed and used in $(( $(date +%s) - t0 )) s"
}

test_wheel() {
  local whl path
  whl=$(one 'shmring-*.whl')
  path=$(clean_path)
  tools_venv
  "$TOOLS_VENV/bin/auditwheel" show "$whl" | tr '\n' ' ' | grep -q 'consistent with the following platform tag: *"manylinux_' \
    || { "$TOOLS_VENV/bin/auditwheel" show "$whl"; say "wheel: auditwheel does not accept its tag"; exit 1; }
  # The metadata says the Pythons the tag does (cp311-abi3: 3.11 and newer).
  local tag meta
  tag=$(basename "$whl" | sed -n 's/.*-cp\([0-9]\)\([0-9]*\)-abi3-.*/\1.\2/p')
  meta=$(unzip -p "$whl" '*.dist-info/METADATA' | sed -n 's/^Requires-Python: //p')
  [ "$meta" = ">=$tag" ] || { say "wheel: Requires-Python $meta, but its tag is cp${tag/./}-abi3"; exit 1; }
  env -i HOME="$work" PATH="$path" python3 -m venv "$work/venv"
  env -i HOME="$work" PATH="$work/venv/bin:$path" "$work/venv/bin/pip" install -q \
    --disable-pip-version-check --only-binary :all: "$whl"
  (cd "$work" && env -i HOME="$work" PATH="$work/venv/bin:$path" \
    "$work/venv/bin/python" "$here/wheel_check.py" "$version" "$layout")
  say "wheel: $(basename "$whl") ($(stat -c %s "$whl") bytes) installed without Rust and used"
}

test_npm() {
  local tgz path
  tgz=$(one 'shmring-*.tgz')
  path=$(clean_path)
  mkdir -p "$work/app"
  cp "$here/npm_check.js" "$work/app/check.js"
  (cd "$work/app" \
    && env -i HOME="$work" PATH="$path" npm init -y > /dev/null \
    && env -i HOME="$work" PATH="$path" npm install --no-audit --no-fund --no-update-notifier \
      --loglevel=error "$tgz" > /dev/null \
    && env -i HOME="$work" PATH="$path" node check.js "$version" "$layout")
  # Built for the wheel's glibc floor, and saying what it runs on.
  local addon newest fields
  addon=$work/app/node_modules/shmring/shmring.node
  newest=$(objdump -T "$addon" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
  [ "$(printf '%s\n%s\n' "$newest" "$GLIBC_FLOOR" | sort -V | tail -1)" = "$GLIBC_FLOOR" ] \
    || { say "npm: the add-on needs glibc $newest, newer than $GLIBC_FLOOR"; exit 1; }
  fields=$(node -p 'const p = require(process.argv[1]); JSON.stringify([p.os, p.cpu, p.libc])' \
    "$work/app/node_modules/shmring/package.json")
  [ "$fields" = "[[\"linux\"],[\"$(node -p process.arch)\"],[\"glibc\"]]" ] \
    || { say "npm: package.json says os, cpu, libc = $fields"; exit 1; }
  say "npm: $(basename "$tgz") ($(stat -c %s "$tgz") bytes) installed without Rust and used; the add-on needs glibc $newest at most, package.json says $fields"
}

[ $# -eq 0 ] && set -- deb wheel npm
for what in "$@"; do
  case "$what" in
    deb) test_deb ;;
    wheel) test_wheel ;;
    npm) test_npm ;;
    *) say "unknown package $what (deb, wheel, npm)"; exit 2 ;;
  esac
done
