# The shmring command, its C library and GStreamer plugin, in a Debian 12 image:
#
#   docker build -t shmring .
#   docker run --rm shmring shmring --version
#
# Nothing here is built by hand. The build stage runs `make dist-deb`: it installs
# what the build needs (scripts/deps.sh deb) and builds the Debian package
# (scripts/dist.sh deb). CI runs this stage's RUN commands, as written here, in a
# fresh Debian 12 root that has only a Rust toolchain (.ci/run). The image installs
# that package with apt, which brings what it depends on (and, recommended, the
# GStreamer plugins `record --encode` uses); `make test-dist` runs the image's RUN
# commands, as written here, in a clean Debian 12 root and uses what they installed.
# See docs/DEPLOY.md for running it in Compose and Kubernetes.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN make dist-deb

FROM debian:bookworm-slim
COPY --from=build /src/dist/shmring_*.deb /tmp/
RUN apt-get update && apt-get install -y /tmp/shmring_*.deb \
    && rm -rf /var/lib/apt/lists/* /tmp/shmring_*.deb
# The socket directory and the recordings of docs/DEPLOY.md's samples, owned by the
# recorder's user (a new volume mounted there takes this ownership).
RUN install -d -o 1000 -g 1000 -m 0755 /run/shmring /rec
CMD ["shmring", "--help"]
