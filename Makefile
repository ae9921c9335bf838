# shmring — two commands matter: `make demo` and `make test`.

CARGO  ?= cargo
GO     ?= go
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python

.PHONY: demo deps-demo deps-test deps-deb deps-dist dist dist-deb man test-dist build test lint test-rust test-loom test-hostile test-c test-python test-gst test-node test-go gst-plugin install-gst venv bench bench-node fuzz clean

## Where `make demo` writes its recording (about 0.93 GB): `make demo DEMO_OUT=/tmp/demo`.
DEMO_OUT ?=

## Build the `shmring` command and run the main job: a producer and a recorder process on a
## fresh ring. Installs what the build needs first (scripts/deps.sh demo).
demo: deps-demo
	$(CARGO) build --release -p shmring-cli
	./target/release/shmring demo $(if $(DEMO_OUT),--out $(DEMO_OUT))

## What the machine lacks for `make demo` / `make test` (apt-get on Debian 12 and Ubuntu
## 22.04/24.04; elsewhere it says what to install). SKIP_DEPS=1 skips the check.
deps-demo:
	@$(if $(SKIP_DEPS),true,scripts/deps.sh demo)
deps-test:
	@$(if $(SKIP_DEPS),true,scripts/deps.sh test)
deps-deb:
	@$(if $(SKIP_DEPS),true,scripts/deps.sh deb)
deps-dist:
	@$(if $(SKIP_DEPS),true,scripts/deps.sh dist)

## Release packages into dist/ (scripts/dist.sh): the Debian packages (shmring,
## libshmring0, libshmring-dev, gstreamer1.0-shmring and their -dbgsym packages, from
## debian/), the Python wheel (abi3, manylinux), the npm package with the prebuilt
## add-on.
dist: deps-dist
	scripts/dist.sh

## The man pages, generated from the command's options, into target/man
## (`man -l target/man/shmring-record.1`).
man:
	$(CARGO) build --release -p shmring-cli
	./target/release/shmring manpages target/man

## The Debian packages alone (what the container recipe, Dockerfile, builds).
dist-deb: deps-deb
	scripts/dist.sh deb

## Each package of `make dist` installed into a clean place and used
## (scripts/test-dist.sh; the Debian package's clean place is a debootstrap root, so
## it runs as root). CI runs it (.ci/run).
test-dist: dist
	scripts/test-dist.sh

## Everything in the workspace (the Python module and Node add-on are built by their tests),
## and the GStreamer plugin alone in target/gst-plugin/.
build: deps-demo
	$(CARGO) build --release
	$(MAKE) --no-print-directory gst-plugin

## Every test: lints, Rust (unit, integration, property, process, crash, hostile; async with
## the tokio feature), loom model, C ABI (plain and sanitized, seccomp), Python, GStreamer
## elements, Node.js, Go.
test: deps-test
	$(MAKE) --no-print-directory lint test-rust test-loom test-c test-python test-gst test-node test-go

lint:
	$(CARGO) fmt --all -- --check
	@unformatted=$$(gofmt -l go); if [ -n "$$unformatted" ]; then echo "gofmt: $$unformatted"; exit 1; fi
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p shmring --features tokio --all-targets -- -D warnings

## The bot workload's Python rows are tested here too: the venv first.
test-rust: venv
	SHMRING_PYTHON=$(abspath $(PY)) $(CARGO) test --release
	$(CARGO) test --release -p shmring --features tokio --test tokio_stream
	$(CARGO) test --release -p shmring --features tokio --doc tokio
	# The command built without GStreamer: --encode through an ffmpeg child.
	$(CARGO) test --release -p shmring-cli --no-default-features --test cli

test-loom:
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test --release -p shmring --test loom

## The whole one-write liveness matrix (every control block, slot and claim log word x
## every boundary value x every ring state, crates/shmring/tests/matrix.rs); `make test`
## runs its representative part. Then the chaos run for 10 minutes (`make test` runs it
## for 60 s): honest producers killed, stopped and stalled, a /dev/shm of its own filled
## to the last byte now and then (needs `unshare --mount`: root, or user namespaces), a
## checker over every reader's log. Then held and re-taken claims against a meeting's
## traffic. Then the loom model of two producers and two consumers at preemption bound 2
## (`make test` runs it at 1). CI runs all of it.
CHAOS_SECONDS ?= 600
test-hostile:
	SHMRING_MATRIX=full $(CARGO) test --release -p shmring --test matrix
	LOOM_MAX_PREEMPTIONS=2 RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test --release -p shmring --test loom two_producers_two_consumers
	$(CARGO) build --release -p shmring-verify
	./target/release/shmring-verify chaos --seconds $(CHAOS_SECONDS) --full-shm
	./target/release/shmring-verify hold --held 32 --retake --seconds 10
	./target/release/shmring-verify hold --held 32 --retake --strict --seconds 10

## The checkers over the ring itself (a nightly toolchain with Miri and the standard
## library's source: scripts/deps.sh checkers). CI runs all three (.ci/run).
.PHONY: deps-checkers test-checkers test-miri test-tsan test-asan
test-checkers: test-miri test-tsan test-asan
deps-checkers:
	@$(if $(SKIP_DEPS),true,scripts/deps.sh checkers)
HOST := $(shell rustc -vV 2>/dev/null | sed -n 's/^host: //p')

## Miri: the suites below on an in-process ring (Miri has no memfd: creating a memfd
## ring, `Address::memfd`, makes one there), with small counts under cfg(miri), under Miri's data-race detector
## and Tree Borrows. Any undefined behaviour fails it.
MIRI_TESTS ?= smoke threads shared bounds overtake readers placement in_process integrity races
MIRIFLAGS ?= -Zmiri-tree-borrows -Zmiri-permissive-provenance
test-miri: deps-checkers
	MIRIFLAGS="$(MIRIFLAGS)" $(CARGO) +nightly miri test -p shmring $(addprefix --test ,$(MIRI_TESTS))

## ThreadSanitizer (the standard library rebuilt instrumented) over the threaded suites,
## TSAN_RUNS times. First a canary, a race on purpose (tests/races.rs): if TSan does not
## report it, it sees nothing and the target fails. `races` holds the write after a claim
## was taken back, which must not race with the record given that space.
TSAN_TESTS ?= smoke threads shared readers overtake bounds placement in_process wakeups full_policy races integrity
TSAN_RUNS ?= 3
TSAN_CARGO = RUSTFLAGS="-Zsanitizer=thread" CARGO_TARGET_DIR=$(abspath target/tsan) \
	$(CARGO) +nightly test -Zbuild-std --target $(HOST) --release -p shmring
test-tsan: deps-checkers
	@out=$$($(TSAN_CARGO) --test races -- --ignored canary 2>&1); st=$$?; \
	if [ $$st -eq 0 ] || ! printf '%s' "$$out" | grep -q 'ThreadSanitizer: data race'; then \
	  printf '%s\n' "$$out" | tail -30; echo "test-tsan: the canary's race was not reported"; exit 1; \
	else echo "test-tsan: the canary's race was reported"; fi
	for i in $$(seq $(TSAN_RUNS)); do echo "== ThreadSanitizer run $$i of $(TSAN_RUNS)"; \
	  $(TSAN_CARGO) $(addprefix --test ,$(TSAN_TESTS)) || exit 1; done

## AddressSanitizer over the Rust library: the C ABI tests linked against libshmring
## built with -Zsanitizer=address (crates/shmring-ffi: make asan).
test-asan: deps-checkers
	$(MAKE) --no-print-directory -C crates/shmring-ffi asan HOST=$(HOST)

## Both fuzz targets for FUZZ_SECONDS each, with the matrix's boundary values as a
## dictionary (needs cargo-fuzz and a nightly toolchain). Crashes land in fuzz/artifacts.
FUZZ_SECONDS ?= 300
fuzz:
	cd fuzz && for t in consumer_vs_segment producers_and_scribbles; do mkdir -p corpus/$$t && \
	  cargo +nightly fuzz run -O $$t corpus/$$t seeds/$$t -- -dict=boundary.dict \
	    -max_total_time=$(FUZZ_SECONDS) -timeout=10 || exit 1; done

test-c:
	@if [ -x crates/shmring-ffi/run-tests.sh ]; then crates/shmring-ffi/run-tests.sh; else echo "C tests: none yet"; fi

## The GStreamer elements (needs the GStreamer development packages; see docs/GUIDE.md).
## The elements (the CLI's in-process encoder, a default feature, is tested by test-rust).
test-gst: gst-plugin
	$(CARGO) test --release -p gst-shmring

## The plugin alone in a directory of its own, for GST_PLUGIN_PATH (target/release also
## holds the Python and Node libraries, which GStreamer would try to load as plugins).
GST_PLUGIN_OUT ?= target/gst-plugin
gst-plugin:
	$(CARGO) build --release -p gst-shmring --lib
	install -d $(GST_PLUGIN_OUT)
	install -m 0644 target/release/libgstshmring.so $(GST_PLUGIN_OUT)/

GST_PLUGIN_DIR ?= $(HOME)/.local/share/gstreamer-1.0/plugins
install-gst: gst-plugin
	install -d $(GST_PLUGIN_DIR)
	install -m 0644 $(GST_PLUGIN_OUT)/libgstshmring.so $(GST_PLUGIN_DIR)/

venv: $(VENV)/.ok
# The package is rebuilt when the core it wraps changes too.
$(VENV)/.ok: python/pyproject.toml python/Cargo.toml python/src/*.rs $(shell find crates/shmring/src -name '*.rs') crates/shmring/Cargo.toml
	@test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q maturin ruff
	$(PY) -m pip install -q "./python[test]"
	touch $@

test-python:
	@if [ -f python/pyproject.toml ]; then $(MAKE) venv && $(VENV)/bin/ruff check python && $(PY) -m pytest -q python/tests; else echo "Python tests: none yet"; fi

## The Node.js package (node/): builds the add-on with cargo, runs `npm test` (Node's test
## runner, zero-copy and forced-copy paths; the Node -> Python test uses the venv).
test-node: venv
	$(VENV)/bin/ruff check node/test
	cd node && SHMRING_PYTHON=$(abspath $(PY)) npm test

## The Go package (go/, cgo over the C ABI): stages libshmring for pkg-config, builds the
## peers of its cross-language tests (the `shmring` command, the Rust ring-peer, the Python
## package in .venv), then go vet, go test with the race detector, the allocation counts
## (without it) and a build linked against libshmring.so.
FFI_STAGE = $(abspath $(or $(CARGO_TARGET_DIR),target))/shmring-ffi-c/stage
GO_ENV = PKG_CONFIG_PATH=$(FFI_STAGE)/lib/pkgconfig
test-go: venv
	$(MAKE) --no-print-directory -C crates/shmring-ffi stage
	$(CARGO) build --release -p shmring-cli
	$(CARGO) build --release -p shmring-testkit --bin ring-peer
	cd go && $(GO_ENV) $(GO) vet ./...
	cd go && $(GO_ENV) SHMRING_GO_REQUIRE_PEERS=1 SHMRING_PYTHON=$(abspath $(PY)) $(GO) test -race -count=1 ./...
	cd go && $(GO_ENV) $(GO) test -count=1 -run 'NoAllocation' .
	cd go && $(GO_ENV) LD_LIBRARY_PATH=$(FFI_STAGE)/lib $(GO) test -tags shmring_shared -count=1 -run 'RoundTrip|Errors' .

## The transport comparison (see docs/RESULTS.md).
bench: build
	./target/release/shmring bench --quick

## Node receiving video over a WebSocket (`ws`) vs shmring (node/bench/transport.js).
bench-node:
	cd node && npm install --no-audit --no-fund && node scripts/build.js && node bench/transport.js --seconds 8

clean:
	$(CARGO) clean
	rm -rf $(VENV) node/shmring.node node/LICENSE-MIT node/LICENSE-APACHE dist
