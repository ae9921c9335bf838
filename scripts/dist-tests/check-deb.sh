#!/bin/sh
# Runs inside a clean root of scripts/test-dist.sh (Debian 12, Debian 13 or Ubuntu
# 24.04), after the image's RUN commands of the Dockerfile installed the packages of
# dist/ (shmring, libshmring0, libshmring-dev, gstreamer1.0-shmring), and uses what
# they installed as a user would. Arguments: the version and layout version expected.
# Input files in /tmp: ring.c (a C program), deploy.sh (the Compose sample's two
# services, from docs/DEPLOY.md).
set -eu
version=$1 layout=$2
export DEBIAN_FRONTEND=noninteractive
ok() { echo "test-dist deb: ok: $*"; }
fail() { echo "test-dist deb: FAILED: $*" >&2; exit 1; }

# Four packages, each with its own files, and the library known to the dynamic
# linker (its ldconfig trigger ran).
for p in shmring libshmring0 libshmring-dev gstreamer1.0-shmring; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || fail "$p is not installed"
  [ -s "/usr/share/doc/$p/copyright" ] || fail "no /usr/share/doc/$p/copyright"
  [ -s "/usr/share/doc/$p/changelog.Debian.gz" ] || fail "no /usr/share/doc/$p/changelog.Debian.gz"
done
[ "$(dpkg -S /usr/bin/shmring | cut -d: -f1)" = shmring ] || fail "/usr/bin/shmring: $(dpkg -S /usr/bin/shmring)"
dpkg -S libshmring.so.0 | grep -q '^libshmring0:' || fail "libshmring.so.0: $(dpkg -S libshmring.so.0)"
dpkg -S /usr/include/shmring.h | grep -q '^libshmring-dev:' || fail "shmring.h: $(dpkg -S /usr/include/shmring.h)"
dpkg -S /usr/include/shmring/media.h | grep -q '^libshmring-dev:' || fail "shmring/media.h: $(dpkg -S /usr/include/shmring/media.h)"
dpkg -S libgstshmring.so | grep -q '^gstreamer1.0-shmring:' || fail "libgstshmring.so: $(dpkg -S libgstshmring.so)"
ldconfig -p | grep -q 'libshmring.so.0 ' || fail "ldconfig does not know libshmring.so.0"
ok "shmring, libshmring0, libshmring-dev, gstreamer1.0-shmring installed; ldconfig knows libshmring.so.0"

out=$(shmring --version)
[ "$out" = "shmring $version (layout version $layout)" ] || fail "shmring --version said: $out"
ok "$out"

# What a user adds to use the rest: GStreamer's tools, a C compiler and pkg-config,
# man, bash's completion; and ffprobe, to check the recording.
{ apt-get update -qq && apt-get install -y -qq --no-install-recommends gstreamer1.0-tools \
  ffmpeg gcc libc6-dev pkg-config man-db bash-completion; } \
  > /tmp/apt.log 2>&1 || { cat /tmp/apt.log; fail "apt-get install of the tools"; }

[ -z "${GST_PLUGIN_PATH:-}" ] || fail "GST_PLUGIN_PATH is set"
gst-inspect-1.0 shmringsrc > /tmp/inspect.txt 2>&1 || { cat /tmp/inspect.txt; fail "gst-inspect-1.0 shmringsrc"; }
grep -q "Filename.*/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)/gstreamer-1.0/libgstshmring.so" /tmp/inspect.txt || fail "plugin file: $(grep Filename /tmp/inspect.txt)"
grep -q "Version *$version" /tmp/inspect.txt || fail "plugin version: $(grep 'Version' /tmp/inspect.txt)"
gst-inspect-1.0 shmringsink > /dev/null || fail "gst-inspect-1.0 shmringsink"
ok "gst-inspect-1.0 finds shmringsrc and shmringsink in $(sed -n 's/^ *Filename *//p' /tmp/inspect.txt)"

[ -z "${LD_LIBRARY_PATH:-}" ] || fail "LD_LIBRARY_PATH is set"
cc -Wall -Werror /tmp/ring.c $(pkg-config --cflags --libs shmring) -o /tmp/ring-shared
ldd /tmp/ring-shared | grep -q "libshmring.so.0 => /.*lib/" || fail "ring-shared is not linked with libshmring.so.0: $(ldd /tmp/ring-shared)"
/tmp/ring-shared | grep -q "^libshmring $version layout version $layout:" || fail "ring-shared"
ok "cc \$(pkg-config --cflags --libs shmring): $(/tmp/ring-shared)"
cc -Wall -Werror /tmp/ring.c $(pkg-config --cflags --static --libs shmring) -o /tmp/ring-static
if ldd /tmp/ring-static | grep -q libshmring; then fail "ring-static needs libshmring.so: $(ldd /tmp/ring-static)"; fi
/tmp/ring-static | grep -q "^libshmring $version layout version $layout:" || fail "ring-static"
ok "cc \$(pkg-config --static ...): linked with libshmring.a, $(wc -c < /tmp/ring-static) bytes"

page=$(man -w shmring) || fail "man -w shmring"
MANPAGER=cat MANWIDTH=100 man shmring-record 2>/dev/null | grep -q -- "--listen" || fail "man shmring-record"
MANPAGER=cat MANWIDTH=100 man shmring-top 2>/dev/null | grep -q "EXAMPLES" || fail "man shmring-top has no examples"
# Every subcommand `shmring --help` lists (but `help`) has its page.
subs=$(shmring --help | sed -n '/^Commands:/,/^$/p' | awk 'NR > 1 && NF && $1 != "help" {print $1}')
[ "$(echo "$subs" | wc -w)" -ge 8 ] || fail "subcommands in shmring --help: $subs"
for sub in $subs; do
  man -w "shmring-$sub" > /dev/null || fail "no man page shmring-$sub"
done
ok "man shmring: $page, and one page per subcommand"

# bash-completion loads a command's completion when it is first completed, as here.
bash -c '. /usr/share/bash-completion/bash_completion; _completion_loader shmring; complete -p shmring' \
  | grep -q _shmring || fail "bash completion"
ok "bash-completion loads shmring's completion from /usr/share/bash-completion/completions/shmring"
c=/usr/share/doc/shmring/copyright
head -1 "$c" | grep -q '^Format: .*copyright-format/1.0' || fail "$c is not in DEP-5 format"
grep -q '^License: MIT$' "$c" && grep -q '^License: Apache-2.0$' "$c" && grep -q '^Upstream-Name: shmring$' "$c" \
  || fail "$c does not name shmring and carry both licences"
ok "copyright files (DEP-5, MIT and Apache-2.0) and changelog.Debian.gz in /usr/share/doc of each package"

# The Compose sample: the recorder and the camera under their own uids, sharing only
# the socket directory, the recording on its volume; stopped as `docker compose
# down` stops it (SIGTERM).
. /tmp/deploy.sh
setpriv --reuid="$recorder_uid" --regid="$recorder_gid" --clear-groups env HOME=/ $recorder_cmd \
  > /tmp/recorder.log 2>&1 &
rec=$!
i=0
while [ ! -S "$socket" ]; do
  i=$((i + 1)); [ $i -lt 300 ] || { cat /tmp/recorder.log; fail "no socket $socket"; }
  sleep 0.1
done
setpriv --reuid="$camera_uid" --regid="$camera_gid" --clear-groups env HOME=/ $camera_cmd \
  > /tmp/camera.log 2>&1 || { cat /tmp/camera.log; fail "the camera failed"; }
kill -TERM $rec
wait $rec || { cat /tmp/recorder.log; fail "the recorder failed"; }
mp4=$(ls "$rec_dir"/stream-*.mp4 2>/dev/null | head -1)
[ -n "$mp4" ] || { ls -la "$rec_dir"; cat /tmp/recorder.log; fail "no MP4 in $rec_dir"; }
probe=$(ffprobe -v error -count_frames -select_streams v:0 \
  -show_entries stream=codec_name,width,height,nb_read_frames -of csv=p=0 "$mp4") \
  || fail "ffprobe $mp4"
case "$probe" in
  h264,1920,1080,[1-9]*) ;;
  *) cat /tmp/recorder.log; fail "$mp4: ffprobe says $probe, not 1080p H.264 frames" ;;
esac
audio=$(ffprobe -v error -select_streams a:0 -show_entries stream=codec_name -of csv=p=0 "$mp4") \
  || fail "ffprobe $mp4 (audio)"
case "$audio" in
  aac|opus) ;;
  *) cat /tmp/recorder.log; fail "$mp4: no AAC or Opus audio beside the video (ffprobe says '$audio')" ;;
esac
ok "the Compose sample recorded $mp4: $(wc -c < "$mp4") bytes, ffprobe: $probe (codec, size, frames), audio $audio"
