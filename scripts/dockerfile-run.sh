#!/usr/bin/env bash
# Prints the RUN commands of one stage of the Dockerfile, joined with &&, so that
# CI and the tests run exactly what the container build runs:
#
#   scripts/dockerfile-run.sh build     the stage named `build`
#   scripts/dockerfile-run.sh image     the last stage (the image)
#
# Continuation lines are joined; comments are skipped. Fails if the stage has none.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
stage=${1:?usage: $0 build|image}
awk -v want="$stage" '
  function flush() { if (cmd != "") { cmds[n++] = cmd; cmd = "" } }
  /^[ \t]*#/ { next }
  toupper($1) == "FROM" {
    flush(); stages++; name = ""
    for (i = 2; i <= NF; i++) if (toupper($i) == "AS") name = $(i + 1)
    # The image is the last stage: start afresh at every stage when asked for it.
    if (want == "image") { n = 0 }
    take = (want == "image") || (name == want)
    inrun = 0; next
  }
  {
    line = $0
    if (inrun || toupper($1) == "RUN") {
      if (!inrun) sub(/^[ \t]*[Rr][Uu][Nn][ \t]+/, "", line)
      cont = sub(/[ \t]*\\$/, "", line)
      sub(/^[ \t]+/, "", line)
      if (take) cmd = (cmd == "" ? line : cmd " " line)
      inrun = cont
      if (!cont) flush()
    }
  }
  END {
    flush()
    if (n == 0) { print "dockerfile-run: no RUN command in stage " want > "/dev/stderr"; exit 1 }
    out = cmds[0]; for (i = 1; i < n; i++) out = out " && " cmds[i]; print out
  }' "$repo/Dockerfile"
