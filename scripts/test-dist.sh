#!/usr/bin/env bash
# Installs each package of dist/ (`make dist`) into a clean place and uses it, as a
# user would (`make test-dist`; CI runs it):
#
#   deb    a minimal Debian 12 root (scripts/debian-root.sh; kept in target/dist-root
#          and used through an overlay, so every run starts from the same clean root)
#          runs the Dockerfile's image commands as written there (apt-get installs
#          the package and what it depends on), then scripts/dist-tests/check-deb.sh
#          uses it: shmring --version, gst-inspect-1.0 with no GST_PLUGIN_PATH, a C
#          program built with pkg-config (shared and --static), man, bash completion,
#          the licences, and the Compose sample of docs/DEPLOY.md recording H.264.
#   wheel  a new virtual environment and no Rust toolchain on PATH: pip installs the
#          wheel (numpy from the index), a frame goes through a ring.
#   npm    an empty project and no Rust toolchain on PATH: npm installs the package,
#          a record goes through a ring.
#
#   scripts/test-dist.sh [deb] [wheel] [npm]    (default: all three)
#
# deb needs root (debootstrap, chroot, mounts); every mount is in a private mount
# namespace, so nothing stays mounted however the script ends. Downloaded Debian
# packages are kept in target/dist-apt-cache for the next run.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
dist=${DIST:-$repo/dist}
tools=$repo/target/tools
here=$repo/scripts/dist-tests
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
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
  local deb base run t0
  deb=$(one 'shmring_*.deb')
  [ "$(id -u)" -eq 0 ] || { say "deb: needs root (a debootstrap root)"; exit 1; }
  python3=$tools/venv/bin/python
  [ -x "$python3" ] || { say "run scripts/deps.sh dist"; exit 1; }
  t0=$(date +%s)
  base=$repo/target/dist-root
  "$repo/scripts/debian-root.sh" "$base"
  run=$repo/target/dist-root-run
  rm -rf "$run"
  mkdir -p "$run/upper" "$run/work" "$run/root" "$repo/target/dist-apt-cache/partial"
  "$python3" "$here/deploy_samples.py" docs/DEPLOY.md "$work/deploy.sh"
  local image_cmd
  image_cmd=$("$repo/scripts/dockerfile-run.sh" image)
  say "deb: the image's commands, in a clean Debian 12 root: $image_cmd"
  unshare --mount --propagation private bash -euo pipefail -c '
    base=$1 run=$2 cache=$3 deb=$4 work=$5 here=$6 image_cmd=$7 version=$8 layout=$9
    root=$run/root
    mount -t overlay overlay -o "lowerdir=$base,upperdir=$run/upper,workdir=$run/work" "$root"
    mount -t proc proc "$root/proc"
    mount --bind /dev "$root/dev"
    mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
    mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts" 2>/dev/null || true
    mount --bind "$cache" "$root/var/cache/apt/archives"
    # This machine'"'"'s resolver and locally added certificate authorities.
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    # As COPY --from=build puts it; then the checks'"'"' inputs.
    cp "$deb" "$root/tmp/"
    cp "$here/ring.c" "$here/check-deb.sh" "$work/deploy.sh" "$root/tmp/"
    in_root() {
      chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
    }
    in_root sh -c "export DEBIAN_FRONTEND=noninteractive; $image_cmd" > "$run/image.log" 2>&1 \
      || { tail -30 "$run/image.log"; echo "test-dist: the image commands failed" >&2; exit 1; }
    in_root sh /tmp/check-deb.sh "$version" "$layout"
  ' test-dist "$base" "$run" "$repo/target/dist-apt-cache" "$deb" "$work" "$here" "$image_cmd" \
    "$version" "$layout"
  rm -rf "$run"
  say "deb: $(basename "$deb") ($(stat -c %s "$deb") bytes) installed and used in $(( $(date +%s) - t0 )) s"
}

test_wheel() {
  local whl path
  whl=$(one 'shmring-*.whl')
  path=$(clean_path)
  "$tools/venv/bin/auditwheel" show "$whl" | tr '\n' ' ' | grep -q 'consistent with the following platform tag: *"manylinux_' \
    || { "$tools/venv/bin/auditwheel" show "$whl"; say "wheel: auditwheel does not accept its tag"; exit 1; }
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
  say "npm: $(basename "$tgz") ($(stat -c %s "$tgz") bytes) installed without Rust and used"
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
