#!/usr/bin/env bash
# Makes a minimal Debian 12 root with debootstrap (variant minbase, plus the given
# packages), from the Debian mirror this machine's apt sources name: the address is
# read from them, never written down. A root made before (same packages) is kept.
#
#   scripts/debian-root.sh ROOT [PACKAGE,PACKAGE...]
#
# Needs root and debootstrap (scripts/deps.sh dist installs it). The log of a
# debootstrap run is ROOT.log.
set -euo pipefail
root=${1:?usage: $0 ROOT [PACKAGE,...]}
include=${2:-}
suite=bookworm

[ "$(id -u)" -eq 0 ] || { echo "debian-root: needs root (debootstrap, chroot)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "debian-root: no debootstrap: run scripts/deps.sh dist" >&2; exit 1; }

# The mirror for $suite's main component, from this machine's apt sources (deb822
# files first, then one-line lists).
mirror() {
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk -v suite="$suite" '
      function flush() { if (t ~ /(^| )deb( |$)/ && (" " s " ") ~ (" " suite " ") && c ~ /main/ && u != "") { print u; found = 1; exit } t = s = c = u = "" }
      /^[ \t]*$/ { flush(); next }
      /^Types:/ { t = $0; sub(/^Types:[ \t]*/, "", t) }
      /^URIs:/ { u = $2 }
      /^Suites:/ { s = $0; sub(/^Suites:[ \t]*/, "", s) }
      /^Components:/ { c = $0 }
      END { if (!found) flush() }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    awk -v suite="$suite" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i + 1) == suite) { print $i; exit } }' "$f"
  done
}

stamp="$root/.debian-root"
if [ -r "$stamp" ] && [ "$(cat "$stamp")" = "$suite minbase $include" ]; then
  exit 0
fi
url=$(mirror | head -1)
[ -n "$url" ] || { echo "debian-root: no apt source for $suite on this machine" >&2; exit 1; }
rm -rf "$root"
mkdir -p "$(dirname "$root")"
echo "debian-root: debootstrap $suite (minbase${include:+ + $include}) into $root" >&2
debootstrap --variant=minbase ${include:+--include=$include} "$suite" "$root" "$url" \
  > "$root.log" 2>&1 || { tail -20 "$root.log" >&2; exit 1; }
echo "$suite minbase $include" > "$stamp"
