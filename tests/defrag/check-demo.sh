#!/bin/sh
# tests/defrag/check-demo.sh - run a demo and check what it reports.
#
#   check-demo.sh [--expect-shrink] [--preload LIB] DEMO ARGS...
#
# Passes when DEMO exits 0 and prints verify=ok; with --expect-shrink, also
# when rss_kb_after_shrink < rss_kb_before_shrink.  --preload runs DEMO
# with LD_PRELOAD=LIB (the -malloc variants under another allocator).
expect_shrink=0
preload=
while [ $# -gt 0 ]; do
  case $1 in
    --expect-shrink) expect_shrink=1; shift ;;
    --preload) preload=$2; shift 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "usage: $0 [--expect-shrink] [--preload LIB] DEMO ARGS..." >&2; exit 2; }

out=$(mktemp) || exit 2
trap 'rm -f "$out"' EXIT
if [ -n "$preload" ]; then
  LD_PRELOAD=$preload "$@" >"$out"
else
  "$@" >"$out"
fi
rc=$?
cat "$out"
if [ "$rc" -ne 0 ]; then
  echo "check-demo: $1 exited with status $rc" >&2
  exit 1
fi
grep -qx 'verify=ok' "$out" || { echo "check-demo: no verify=ok line" >&2; exit 1; }
if [ "$expect_shrink" = 1 ]; then
  before=$(sed -n 's/^rss_kb_before_shrink=//p' "$out")
  after=$(sed -n 's/^rss_kb_after_shrink=//p' "$out")
  if [ -z "$before" ] || [ -z "$after" ]; then
    echo "check-demo: rss_kb_before_shrink/rss_kb_after_shrink missing" >&2
    exit 1
  fi
  if [ "$after" -ge "$before" ]; then
    echo "check-demo: RSS did not fall in the shrink: before ${before} kB, after ${after} kB" >&2
    exit 1
  fi
  echo "check-demo: RSS ${before} kB -> ${after} kB"
fi
exit 0
