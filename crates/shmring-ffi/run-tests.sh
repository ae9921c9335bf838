#!/usr/bin/env bash
# Runs every test of the C ABI and prints "N passed, M failed" as its last line.
#
#   crates/shmring-ffi/run-tests.sh        (or: make -C crates/shmring-ffi test)
#
# Uses $CARGO_TARGET_DIR (default: target/ at the workspace root). Steps: cargo tests
# (header freshness, cross-language, allocation counts), then the C tests built
# against a staged install (shared, ASan/UBSan, static), the seccomp sandbox tests (our
# allow-list, and a filter written from Chromium's renderer policy),
# the C and C++ examples, and the CMake example built against an installed copy
# found through pkg-config.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${TARGET:-${CARGO_TARGET_DIR:-$root/target}}
export CARGO_TARGET_DIR=$target
build=$target/shmring-ffi-c
passed=0
failed=0
failures=()

count() { # name status
    if [ "$2" -eq 0 ]; then passed=$((passed + 1)); echo "ok   $1"
    else failed=$((failed + 1)); failures+=("$1"); echo "FAIL $1"; fi
}

# Adds the "N passed, M failed" of a test program's output.
add_counts() { # name output-file status
    local line p f
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$2" | tail -1)
    if [ -z "$line" ]; then count "$1 (no summary line)" 1; return; fi
    p=${line%% passed*}; f=${line#*, }; f=${f%% failed*}
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$f" -ne 0 ] || [ "$3" -ne 0 ]; then
        failures+=("$1"); [ "$f" -eq 0 ] && failed=$((failed + 1))
    fi
    echo "--- $1: $line (exit $3)"
}

log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

echo "== cargo test -p shmring-ffi"
(cd "$root" && cargo test -p shmring-ffi 2>&1) | tee "$log/cargo.txt" | grep -E '^test |test result|error' || true
cargo_status=${PIPESTATUS[0]}
while read -r p f; do passed=$((passed + p)); failed=$((failed + f)); done < <(
    grep -E '^test result:' "$log/cargo.txt" | sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/')
if ! grep -q '^test result:' "$log/cargo.txt" || { [ "$cargo_status" -ne 0 ] && ! grep -q 'failed; ' "$log/cargo.txt"; }; then
    count "cargo test (build)" 1
fi

echo "== build library, stage install, examples"
if make -s -C "$here" examples TARGET="$target" > "$log/build.txt" 2>&1; then
    count "build: library, install, C/C++ examples, C tests" 0
else
    cat "$log/build.txt"; count "build: library, install, C/C++ examples, C tests" 1
fi

for t in test_api test_api_asan test_static test_handoff test_readers test_readers_asan; do
    echo "== $t"
    if [ -x "$build/$t" ]; then
        ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 "$build/$t" > "$log/$t.txt" 2>&1
        st=$?; grep -v '^ok ' "$log/$t.txt" || true
        add_counts "$t" "$log/$t.txt" $st
    else count "$t (not built)" 1; fi
done

echo "== C programs of docs/C-API.md, docs/GUIDE.md and README.md: compiled and run as written"
# Each ```c block is a whole program: compiled with warnings as errors, run in a
# directory of its own (sockets go there) with its ring names made unique, and it
# must leave no ring behind.
stage=$build/stage
docs=$log/docs
mkdir -p "$docs"
n=0
for doc in "$root/docs/C-API.md" "$root/docs/GUIDE.md" "$root/README.md"; do
    while IFS= read -r -d '' prog; do
        n=$((n + 1))
        name="shmring-doc-$$-$n"
        dir=$docs/$n
        mkdir -p "$dir"
        printf '%s' "${prog#*$'\n'}" | sed "s/cam0/$name/g" > "$dir/prog.c"
        [ "$doc" = "$root/README.md" ] && app=$dir/prog.c
        label="${doc#"$root"/}, the program of \"${prog%%$'\n'*}\""
        if ${CC:-cc} -std=c11 -Wall -Wextra -Werror -I"$stage/include" "$dir/prog.c" -o "$dir/prog" \
                -L"$stage/lib" -lshmring -Wl,-rpath,"$stage/lib" > "$dir/out.txt" 2>&1 \
            && (cd "$dir" && ./prog) >> "$dir/out.txt" 2>&1 \
            && [ ! -e "/dev/shm/$name" ] && [ -z "$(find "$dir" -type s)" ]; then
            count "$label" 0
        else
            cat "$dir/out.txt"; rm -f "/dev/shm/$name"; count "$label" 1
        fi
    done < <(awk '/^##/ {h = $0; sub(/^#+ /, "", h)} /^```c$/ {c = 1; p = h "\n"; next}
                  c && /^```$/ {printf "%s%c", p, 0; c = 0; next} c {p = p $0 "\n"}' "$doc")
done
[ "$n" -ge 6 ] || count "C programs found in the docs ($n, want 6 or more)" 1

echo "== docs/C-API.md: finding libshmring.so when the program starts"
# The top-level README's program as app.c: linked with libshmring.so it does not
# start unless the loader is told where the library is (LD_LIBRARY_PATH, an rpath);
# linked with libshmring.a it needs nothing.
app=${app:-}
libdir=$stage/lib
pc="$stage/lib/pkgconfig"
cflags=$(PKG_CONFIG_PATH=$pc pkg-config --cflags shmring)
libs=$(PKG_CONFIG_PATH=$pc pkg-config --libs shmring)
static_l=$(PKG_CONFIG_PATH=$pc pkg-config --static --libs-only-l shmring | sed 's/-lshmring //')
# shellcheck disable=SC2086
if ${CC:-cc} $app $cflags $libs -o "$docs/app" > "$docs/ld.txt" 2>&1 \
    && ! "$docs/app" >> "$docs/ld.txt" 2>&1 \
    && grep -q 'libshmring.so.0: cannot open shared object file' "$docs/ld.txt" \
    && LD_LIBRARY_PATH=$libdir "$docs/app" >> "$docs/ld.txt" 2>&1 \
    && ${CC:-cc} $app $cflags $libs -Wl,-rpath,"$libdir" -o "$docs/app_rpath" >> "$docs/ld.txt" 2>&1 \
    && "$docs/app_rpath" >> "$docs/ld.txt" 2>&1 \
    && ${CC:-cc} $app $cflags "$libdir/libshmring.a" $static_l -o "$docs/app_static" >> "$docs/ld.txt" 2>&1 \
    && "$docs/app_static" >> "$docs/ld.txt" 2>&1 \
    && ! ldd "$docs/app_static" | grep -q libshmring; then
    count "libshmring.so found through LD_LIBRARY_PATH, an rpath; libshmring.a needs nothing" 0
else
    cat "$docs/ld.txt"; count "libshmring.so found through LD_LIBRARY_PATH, an rpath; libshmring.a needs nothing" 1
fi

echo "== test_sandbox (seccomp)"
if [ -x "$build/test_sandbox" ]; then
    "$build/test_sandbox" "$build/producer" > "$log/sandbox.txt" 2>&1
    st=$?; cat "$log/sandbox.txt"
    add_counts "test_sandbox" "$log/sandbox.txt" $st
else count "test_sandbox (not built)" 1; fi

echo "== test_renderer_policy (seccomp: Chromium's renderer policy)"
if [ -x "$build/test_renderer_policy" ]; then
    "$build/test_renderer_policy" > "$log/renderer.txt" 2>&1
    st=$?; cat "$log/renderer.txt"
    add_counts "test_renderer_policy" "$log/renderer.txt" $st
else count "test_renderer_policy (not built)" 1; fi

echo "== examples: C producer -> C consumer through a named ring"
name="shmring-ffi-example-$$"
if [ -x "$build/consumer" ]; then
    "$build/consumer" --name "$name" --create --frames 20 --quiet --capacity 33554432 > "$log/cons.txt" 2>&1 &
    cpid=$!
    for _ in $(seq 100); do grep -q ready "$log/cons.txt" 2>/dev/null && break; sleep 0.05; done
    "$build/producer" --name "$name" --frames 20 --width 1280 --height 720 --quiet
    pst=$?
    wait $cpid; cst=$?
    cat "$log/cons.txt"
    count "example producer --name -> consumer --create" $(( pst != 0 || cst != 0 ))
    [ -e "/dev/shm/$name" ] && { rm -f "/dev/shm/$name"; count "named ring removed on exit" 1; } || count "named ring removed on exit" 0
fi
"$build/cpp_example"; count "C++ RAII example" $?

echo "== CMake example against an installed copy (pkg-config)"
prefix=$log/prefix
if make -s -C "$here" install PREFIX="$prefix" TARGET="$target" > "$log/install.txt" 2>&1 \
    && PKG_CONFIG_PATH=$prefix/lib/pkgconfig cmake -S "$root/examples/cmake" -B "$log/cmake" > "$log/cmake.txt" 2>&1 \
    && cmake --build "$log/cmake" >> "$log/cmake.txt" 2>&1 \
    && "$log/cmake/shmring_cpp_example"; then
    count "cmake example (pkg-config, installed copy)" 0
else
    cat "$log/install.txt" "$log/cmake.txt"; count "cmake example (pkg-config, installed copy)" 1
fi

echo "== clippy and fmt"
(cd "$root" && cargo clippy -q -p shmring-ffi --no-deps --all-targets -- -D warnings > "$log/clippy.txt" 2>&1)
st=$?; [ $st -ne 0 ] && cat "$log/clippy.txt"; count "cargo clippy -p shmring-ffi -D warnings" $st
(cd "$root" && cargo fmt -p shmring-ffi -- --check > "$log/fmt.txt" 2>&1)
st=$?; [ $st -ne 0 ] && head -30 "$log/fmt.txt"; count "cargo fmt --check" $st

[ ${#failures[@]} -ne 0 ] && echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
