#!/usr/bin/env bash
# Makes a minimal root of a Debian or Ubuntu release with debootstrap (variant
# minbase, plus the given packages), from a mirror this machine's apt sources name:
# the address is read from them, never written down. A root made before (same
# release and packages) is kept.
#
#   scripts/debian-root.sh ROOT [PACKAGE,PACKAGE...] [SUITE]
#
# SUITE is a release's code name (bookworm, the default; trixie; noble). Its mirror
# is the source that names SUITE; for a Debian release no source names, the source
# of this machine's own Debian release (a Debian mirror serves every release).
# Exit status 3: no apt source of this machine serves SUITE (nothing was made).
#
# The machine's apt settings that reach the mirror (its Acquire:: options: proxy,
# validity checks) are copied into the root, so apt-get there works as it does
# here. Needs root and debootstrap (scripts/deps.sh dist installs it). The log of a
# debootstrap run is ROOT.log.
set -euo pipefail
root=${1:?usage: $0 ROOT [PACKAGE,...] [SUITE]}
include=${2:-}
suite=${3:-bookworm}

[ "$(id -u)" -eq 0 ] || { echo "debian-root: needs root (debootstrap, chroot)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "debian-root: no debootstrap: run scripts/deps.sh dist" >&2; exit 1; }

# The URIs of this machine's deb sources for the suite $1's main component
# (deb822 files first, then one-line lists), enabled or not.
sources_for() {
  local f want=$1
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk -v suite="$want" '
      function flush() { if (t ~ /(^| )deb( |$)/ && (" " s " ") ~ (" " suite " ") && c ~ /main/ && u != "") { print u } t = s = c = u = "" }
      /^[ \t]*$/ { flush(); next }
      /^Types:/ { t = $0; sub(/^Types:[ \t]*/, "", t) }
      /^URIs:/ { u = $2 }
      /^Suites:/ { s = $0; sub(/^Suites:[ \t]*/, "", s) }
      /^Components:/ { c = $0 }
      END { flush() }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    awk -v suite="$want" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i + 1) == suite) print $i }' "$f"
  done
}

# Which family a suite belongs to, by the debootstrap script that knows it.
family() {
  case "$(readlink -f "/usr/share/debootstrap/scripts/$1" 2>/dev/null)" in
    */sid|*/debian-common) echo debian ;;
    */gutsy) echo ubuntu ;;
    *) case "$1" in noble|jammy|focal) echo ubuntu ;; *) echo debian ;; esac ;;
  esac
}

stamp="$root/.debian-root"
if [ -r "$stamp" ] && [ "$(cat "$stamp")" = "$suite minbase $include" ]; then
  exit 0
fi
url=$(sources_for "$suite" | head -1)
if [ -z "$url" ] && [ "$(family "$suite")" = debian ]; then
  # shellcheck disable=SC1091
  own=$(. /etc/os-release; [ "${ID:-}" = debian ] && echo "${VERSION_CODENAME:-}")
  [ -n "$own" ] && url=$(sources_for "$own" | head -1)
fi
[ -n "$url" ] || { echo "debian-root: no apt source of this machine serves $suite" >&2; exit 3; }
# debootstrap knows a release by a script of its name; a newer Ubuntu release
# than this debootstrap knows is made as the others (gutsy's script).
script=
if [ ! -e "/usr/share/debootstrap/scripts/$suite" ]; then
  case "$(family "$suite")" in
    ubuntu) script=/usr/share/debootstrap/scripts/gutsy ;;
    *) script=/usr/share/debootstrap/scripts/sid ;;
  esac
fi
rm -rf "$root"
mkdir -p "$(dirname "$root")"
echo "debian-root: debootstrap $suite (minbase${include:+ + $include}) into $root" >&2
debootstrap --variant=minbase ${include:+--include=$include} "$suite" "$root" "$url" $script \
  > "$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
# This machine's settings for reaching the mirror.
for f in /etc/apt/apt.conf /etc/apt/apt.conf.d/*; do
  [ -f "$f" ] && grep -q '^[[:space:]]*Acquire' "$f" && cp "$f" "$root$f"
done
echo "$suite minbase $include" > "$stamp"
