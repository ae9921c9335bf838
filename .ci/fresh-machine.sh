#!/usr/bin/env bash
# The fresh-machine check: builds a minimal Debian 12 root with debootstrap (git, make,
# gcc and CA certificates; nothing else), mounts only this machine's Rust toolchain
# into it (read-only), clones the repository there and runs the README's commands as
# a new user would. They must install whatever else they need by themselves
# (scripts/deps.sh: apt-get inside the root; pip, npm, cargo and Go fetch from their
# registries as they do on this machine, with its settings for reaching them copied
# in: apt's Acquire options, pip's and npm's configuration files, Go's environment
# file, cargo's configuration, the proxy and registry variables of the environment,
# and the certificate authorities added locally).
#
#   .ci/fresh-machine.sh [COMMAND]     COMMAND defaults to "make demo"
#
# What the tests need of a machine is mounted: /proc, /sys, /dev with its own /dev/pts,
# and a tmpfs /dev/shm (network namespaces, seccomp and tmpfs mounts of their own
# work as root inside). The packaging tools' cache (scripts/tools.sh) is this
# machine's, mounted in, as a developer's clones share it.
#
# Needs root (debootstrap, chroot, mounts). The Debian mirror is the one this
# machine's apt sources name. Everything is mounted in a private mount namespace, so
# nothing stays mounted when the script ends, however it ends. The root is kept in
# target/fresh-root (make clean removes it); FRESH_KEEP=0 removes it at the end.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cmd=${1:-make demo}
root=${FRESH_ROOT:-$repo/target/fresh-root}

[ "$(id -u)" -eq 0 ] || { echo "fresh-machine: needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}

rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
cargo_bin=${CARGO_HOME:-$HOME/.cargo}/bin
[ -x "$cargo_bin/cargo" ] && [ -d "$rustup_home/toolchains" ] || {
  echo "fresh-machine: no rustup toolchain at $rustup_home (cargo in $cargo_bin)" >&2; exit 1; }

start=$(date +%s)
# A minimal Debian 12 root (git, make, gcc and CA certificates; nothing else), from
# the mirror this machine's apt sources name.
"$repo/scripts/debian-root.sh" "$root" git,make,gcc,libc6-dev,ca-certificates
echo "fresh-machine: root ready after $(( $(date +%s) - start )) s"
# This machine's network configuration: its resolver and the certificate authorities
# it added locally (a network that inspects TLS needs them, as every host on it does).
cp /etc/resolv.conf "$root/etc/resolv.conf"
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null 2>&1
fi
# apt's settings for reaching the mirror (debian-root.sh copied them); pip's, npm's,
# Go's and cargo's, each where the root's user (root, HOME=/root) reads them.
copy_in() { # FILE DEST
  if [ -f "$1" ]; then mkdir -p "$(dirname "$2")" && cp "$1" "$2"; fi
}
copy_in /etc/pip.conf "$root/etc/pip.conf"
copy_in "${PIP_CONFIG_FILE:-$HOME/.config/pip/pip.conf}" "$root/root/.config/pip/pip.conf"
copy_in "$HOME/.npmrc" "$root/root/.npmrc"
copy_in /etc/npmrc "$root/etc/npmrc"
if command -v go >/dev/null; then copy_in "$(go env GOENV)" "$root/root/.config/go/env"; fi
for f in config.toml config; do copy_in "${CARGO_HOME:-$HOME/.cargo}/$f" "$root/root/.cargo/$f"; done
# The environment's settings for the registries and proxies (names, not values,
# are listed here).
passed=()
while IFS= read -r name; do
  passed+=("$name=${!name}")
done < <(compgen -e | grep -E '^(PIP_[A-Z_]+|npm_config_[a-z_]+|NPM_CONFIG_[A-Z_]+|GOPROXY|GOSUMDB|GONOSUMDB|GOPRIVATE|GONOPROXY|GOFLAGS|CARGO_REGISTRIES_[A-Z_]+|CARGO_REGISTRY_[A-Z_]+|CARGO_HTTP_[A-Z_]+|CARGO_NET_[A-Z_]+|(HTTP|HTTPS|NO|ALL)_PROXY|(http|https|no|all)_proxy|CI)$' || true)
rm -rf "$root/work"
tools_cache=${SHMRING_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/shmring-tools}
mkdir -p "$root/work" "$root/opt/rustup" "$root/opt/cargo-bin" "$tools_cache" \
  "$root/root/.cache/shmring-tools"
# The committed tree, plus uncommitted changes when run from a working copy.
git clone -q "$repo" "$root/work/shmring"
git -C "$repo" diff HEAD --binary | git -C "$root/work/shmring" apply --allow-empty
git -C "$repo" ls-files -z --others --exclude-standard | (cd "$repo" && xargs -0r cp --parents -t "$root/work/shmring")

# Inside a private mount namespace: /proc, a tmpfs /dev/shm, /dev, and the toolchain.
status=0
unshare --mount --propagation private bash -euo pipefail -c '
  root=$1 rustup_home=$2 cargo_bin=$3 cmd=$4 tools=$5; shift 5
  mount -t proc proc "$root/proc"
  mount -t sysfs sysfs "$root/sys"
  mount --bind /dev "$root/dev"
  mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
  mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts" 2>/dev/null || true
  mount --bind "$rustup_home" "$root/opt/rustup"
  mount -o remount,bind,ro "$root/opt/rustup"
  mount --bind "$cargo_bin" "$root/opt/cargo-bin"
  mount -o remount,bind,ro "$root/opt/cargo-bin"
  mount --bind "$tools" "$root/root/.cache/shmring-tools"
  exec chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/opt/cargo-bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    RUSTUP_HOME=/opt/rustup CARGO_HOME=/root/.cargo "$@" \
    bash -c "cd /work/shmring && $cmd"
' fresh "$root" "$rustup_home" "$cargo_bin" "$cmd" "$tools_cache" "${passed[@]}" || status=$?
echo "fresh-machine: '$cmd' exited $status after $(( $(date +%s) - start )) s in all"
if [ "${FRESH_KEEP:-1}" = 0 ]; then rm -rf "$root"; fi
exit $status
