# shmring — two commands matter: `make demo` and `make test`.

CARGO  ?= cargo
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python

.PHONY: demo deps-demo deps-test build test lint test-rust test-loom test-c test-python test-gst test-node gst-plugin install-gst venv bench bench-node clean

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

## Everything in the workspace (the Python module and Node add-on are built by their tests),
## and the GStreamer plugin alone in target/gst-plugin/.
build: deps-demo
	$(CARGO) build --release
	$(MAKE) --no-print-directory gst-plugin

## Every test: lints, Rust (unit, integration, property, process, crash, hostile; async with
## the tokio feature), loom model, C ABI (plain and sanitized, seccomp), Python, GStreamer
## elements, Node.js.
test: deps-test
	$(MAKE) --no-print-directory lint test-rust test-loom test-c test-python test-gst test-node

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy -p shmring --features tokio --all-targets -- -D warnings

test-rust:
	$(CARGO) test --release
	$(CARGO) test --release -p shmring --features tokio --test tokio_stream
	$(CARGO) test --release -p shmring --features tokio --doc tokio
	# The command built without GStreamer: --encode through an ffmpeg child.
	$(CARGO) test --release -p shmring-cli --no-default-features --test cli

test-loom:
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test --release -p shmring --test loom

test-c:
	@if [ -x crates/shmring-ffi/run-tests.sh ]; then crates/shmring-ffi/run-tests.sh; else echo "C tests: none yet"; fi

## The GStreamer elements (needs the GStreamer development packages; see README).
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
$(VENV)/.ok: python/pyproject.toml python/Cargo.toml python/src/*.rs
	@test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q maturin pytest numpy websockets ruff prometheus_client
	$(PY) -m pip install -q ./python
	touch $@

test-python:
	@if [ -f python/pyproject.toml ]; then $(MAKE) venv && $(VENV)/bin/ruff check python && $(PY) -m pytest -q python/tests; else echo "Python tests: none yet"; fi

## The Node.js package (node/): builds the add-on with cargo, runs `npm test` (Node's test
## runner, zero-copy and forced-copy paths; the Node -> Python test uses the venv).
test-node: venv
	$(VENV)/bin/ruff check node/test
	cd node && SHMRING_PYTHON=$(abspath $(PY)) npm test

## The transport comparison (see README).
bench: build
	./target/release/shmring bench --quick

## Node receiving video over a WebSocket (`ws`) vs shmring (node/bench/transport.js).
bench-node:
	cd node && npm install --no-audit --no-fund && node scripts/build.js && node bench/transport.js --seconds 8

clean:
	$(CARGO) clean
	rm -rf $(VENV) node/shmring.node
