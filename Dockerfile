# The shmring command, its C library and GStreamer plugin, in a Debian 12 image:
#
#   docker build -t shmring .
#   docker run --rm shmring shmring --version
#
# Nothing here is built by hand. The build stage runs `make dist-deb`: it installs
# what the build needs (scripts/deps.sh deb) and builds the Debian packages
# (scripts/dist.sh deb, from debian/). CI runs this stage's RUN commands, as written here, in a
# fresh Debian 12 root that has only a Rust toolchain (.ci/run). The image installs
# the packages (the command, the C library and its development files, the GStreamer
# plugin) with apt, which brings what they depend on (and, recommended, the
# GStreamer plugins `record --encode` uses); `make test-dist` runs the image's RUN
# commands, as written here, in clean Debian 12, Debian 13 and Ubuntu 24.04 roots
# and uses what they installed.
# See docs/DEPLOY.md for running it in Compose and Kubernetes.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN make dist-deb

FROM debian:bookworm-slim
COPY --from=build /src/dist/*.deb /tmp/
RUN apt-get update && apt-get install -y /tmp/shmring_*.deb /tmp/libshmring0_*.deb \
    /tmp/libshmring-dev_*.deb /tmp/gstreamer1.0-shmring_*.deb \
    && rm -rf /var/lib/apt/lists/* /tmp/*.deb
# The socket directory and the recordings of docs/DEPLOY.md's samples, owned by the
# recorder's user (a new volume mounted there takes this ownership).
RUN install -d -o 1000 -g 1000 -m 0755 /run/shmring /rec
CMD ["shmring", "--help"]
