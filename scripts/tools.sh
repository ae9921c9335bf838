# The packaging tools of `make dist` that come from the language registries, kept
# in a cache outside the clone, so a new clone (or `make clean`) neither fetches
# nor builds them again:
#
#   $SHMRING_TOOLS (default ${XDG_CACHE_HOME:-~/.cache}/shmring-tools)/
#     venv-pyXY-HASH/                 maturin, auditwheel, zig (the ziglang package),
#                                     PyYAML and wheel, for the CPython X.Y at HASH
#     cargo-zigbuild-VERSION/bin/     cargo-zigbuild (cargo install --locked)
#
# Sourced by scripts/deps.sh (which installs what is missing: tools_install) and by
# scripts/dist.sh and scripts/test-dist.sh (which use them). Remove the directory
# to start afresh.

TOOLS_DIR=${SHMRING_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/shmring-tools}
# The oldest glibc the wheel and the npm add-on are linked for.
GLIBC_FLOOR=2.17
ZIGBUILD_VERSION=0.24.1
# One venv per Python installation (its version, and where it lives: a venv runs
# the interpreter it was made with).
TOOLS_VENV=$TOOLS_DIR/venv-$(python3 -c 'import hashlib, sys; print("py%d%d-%s" % (*sys.version_info[:2], hashlib.sha1(sys.base_prefix.encode()).hexdigest()[:8]))' 2>/dev/null || echo none)
TOOLS_ZIGBUILD=$TOOLS_DIR/cargo-zigbuild-$ZIGBUILD_VERSION/bin/cargo-zigbuild

tools_venv_ok() {
  "$TOOLS_VENV/bin/python" -c 'import ziglang, yaml, wheel' 2>/dev/null \
    && [ -x "$TOOLS_VENV/bin/maturin" ] && [ -x "$TOOLS_VENV/bin/auditwheel" ]
}

tools_venv() {
  tools_venv_ok || { echo "maturin, auditwheel and zig are missing from $TOOLS_VENV: run scripts/deps.sh dist" >&2; exit 1; }
}

tools_zigbuild() {
  [ -x "$TOOLS_ZIGBUILD" ] || { echo "cargo-zigbuild is missing ($TOOLS_ZIGBUILD): run scripts/deps.sh dist" >&2; exit 1; }
}

# DIR: built in DIR.tmp.PID and renamed into place, so a build that stops half-way,
# or two at once, never leave a broken tool behind.
tools_publish() {
  if ! mv -T "$1.tmp.$$" "$1" 2>/dev/null; then
    rm -rf "$1.tmp.$$"
  fi
}

# What `make dist` lacks of the above, installed (the commands it runs are said).
tools_install() {
  mkdir -p "$TOOLS_DIR"
  if ! tools_venv_ok; then
    echo "deps: maturin, auditwheel, zig and PyYAML in $TOOLS_VENV" >&2
    # Made in place (a venv's scripts name its directory); one left half-made
    # fails tools_venv_ok and is made again.
    rm -rf "$TOOLS_VENV"
    python3 -m venv "$TOOLS_VENV"
    "$TOOLS_VENV/bin/pip" install -q "maturin>=1.5,<2" auditwheel ziglang pyyaml wheel
  fi
  if [ ! -x "$TOOLS_ZIGBUILD" ]; then
    echo "deps: cargo install cargo-zigbuild --version $ZIGBUILD_VERSION --locked (into $TOOLS_DIR)" >&2
    cargo install -q --locked cargo-zigbuild --version "$ZIGBUILD_VERSION" \
      --root "$TOOLS_DIR/cargo-zigbuild-$ZIGBUILD_VERSION.tmp.$$"
    tools_publish "$TOOLS_DIR/cargo-zigbuild-$ZIGBUILD_VERSION"
  fi
}
