#!/usr/bin/env bash
# `make demo` end to end: deploy/demo with DEMO_SECONDS=20 against the built
# programs shows wake-ups, handler runs and audit lines, then removes its
# processes and cluster by itself.
set -u
: "${A2_BIN:?run with tests/run (A2_BIN unset)}"
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp /tmp/a2-demo-test.XXXXXX)
trap 'rm -f "$out"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

if [ ! -x "$A2_BIN/a2-consumer" ]; then
    echo "test_demo.sh: SKIP: $A2_BIN/a2-consumer is not built"
    exit 0
fi

start=$SECONDS
A2_DEMO_SKIP_DEPS=1 DEMO_SECONDS=${DEMO_TEST_SECONDS:-20} NO_COLOR=1 \
    timeout -k 10 120 "$top/deploy/demo" >"$out" 2>&1
rc=$?
took=$((SECONDS - start))
[ "$rc" = 0 ] || fail "demo exited $rc"
[ "$took" -ge 15 ] || fail "demo stopped after $took s, before DEMO_SECONDS"
grep -q '^\[worker lane\] wake ' "$out" || fail "no wake-up of the lane worker"
grep -q '^\[worker log\] \(wake\|log\) ' "$out" || fail "no wake-up of the log worker"
grep -q '^\[worker lane\] \[shop-[0-9] #[0-9]*\] charged order' "$out" || fail "no billing handler run"
grep -q '^\[worker log\] \[shop-[0-9] #[0-9]*\] noted invoice.sent' "$out" || fail "the auditor never saw a returned invoice.sent"
grep -q '^\[worker log\] \[shop-1 #1\] noted order.placed' "$out" || fail "the auditor missed shop-1's first order"
grep -q '^\[audit\] .* claimed ' "$out" || fail "no audit line of a claim"
grep -q '^\[audit\] .* completed \|^\[audit\] .* went_idle ' "$out" || fail "no audit line of a completion"
grep -q '^\[worker lane\] failed shop-.* card declined' "$out" || fail "no failed attempt (every fifth order fails once)"
grep -q '^\[producer\] shop-1 order.placed #1 ' "$out" || fail "no producer line"
grep -q '^\[demo\] done' "$out" || fail "the demo did not finish its cleanup"
if grep -q 'Sanitizer\|runtime error:' "$out"; then
    fail "a sanitizer reported: $(grep -m3 'Sanitizer\|runtime error:' "$out")"
fi
dir=$(sed -n 's/^\[demo\] starting PostgreSQL on loopback in \(.*\)\/pg$/\1/p' "$out")
[ -n "$dir" ] || fail "no cluster folder in the output"
if [ -n "$dir" ]; then
    [ ! -e "$dir" ] || fail "the demo left $dir behind"
    if ps -eo args | grep -v grep | grep -q "$dir"; then
        fail "processes of the demo are still running: $(ps -eo pid,args | grep -v grep | grep "$dir")"
    fi
fi
summary="demo ran ${took}s: $(grep -c '^\[audit\]' "$out") audit lines, $(grep -c ' wake ' "$out") wake-ups, $(grep -c '^\[producer\]' "$out") appends"

# Ctrl-C: SIGINT to the demo's process group, as a terminal sends it, stops
# everything and removes the cluster. (A background job ignores SIGINT, so
# the demo starts in its own session with SIGINT at its default.)
out2=$(mktemp /tmp/a2-demo-test.XXXXXX)
trap 'rm -f "$out" "$out2"' EXIT
A2_DEMO_SKIP_DEPS=1 NO_COLOR=1 python3 -c '
import os, signal, sys
os.setsid()
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' "$top/deploy/demo" >"$out2" 2>&1 &
dpid=$!
deadline=$((SECONDS + 60))
until grep -q '^\[audit\] .* claimed ' "$out2" || [ $SECONDS -gt $deadline ]; do sleep 0.2; done
grep -q '^\[audit\] .* claimed ' "$out2" || fail "the Ctrl-C run showed no claim in 60 s"
kill -INT -- "-$dpid" 2>/dev/null
deadline=$((SECONDS + 40))
while kill -0 "$dpid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
if kill -0 "$dpid" 2>/dev/null; then
    fail "the demo did not stop within 40 s of Ctrl-C"
    kill -KILL -- "-$dpid" 2>/dev/null
fi
grep -q '^\[demo\] done' "$out2" || fail "Ctrl-C: the demo did not finish its cleanup"
if grep -q 'Sanitizer\|runtime error:' "$out2"; then
    fail "Ctrl-C: a sanitizer reported: $(grep -m3 'Sanitizer\|runtime error:' "$out2")"
fi
dir2=$(sed -n 's/^\[demo\] starting PostgreSQL on loopback in \(.*\)\/pg$/\1/p' "$out2")
if [ -n "$dir2" ]; then
    [ ! -e "$dir2" ] || fail "Ctrl-C: the demo left $dir2 behind"
    if ps -eo args | grep -v grep | grep -q "$dir2"; then
        fail "Ctrl-C: processes are still running: $(ps -eo pid,args | grep -v grep | grep "$dir2")"
    fi
else
    fail "Ctrl-C: no cluster folder in the output"
fi
# A reader that goes away (demo | head): the demo still stops everything
# and removes the cluster, though it can no longer say so.
first=$(A2_DEMO_SKIP_DEPS=1 DEMO_SECONDS=10 NO_COLOR=1 timeout -k 10 90 "$top/deploy/demo" 2>/dev/null | head -n 1)
dir3=$(printf '%s\n' "$first" | sed -n 's/^\[demo\] starting PostgreSQL on loopback in \(.*\)\/pg$/\1/p')
if [ -n "$dir3" ]; then
    deadline=$((SECONDS + 40))
    while { [ -e "$dir3" ] || ps -eo args | grep -v grep | grep -q "$dir3"; } && [ $SECONDS -lt $deadline ]; do
        sleep 0.5
    done
    [ ! -e "$dir3" ] || fail "closed output: the demo left $dir3 behind"
    if ps -eo args | grep -v grep | grep -q "$dir3"; then
        fail "closed output: processes are still running: $(ps -eo pid,args | grep -v grep | grep "$dir3")"
        pkill -f "$dir3"
    fi
else
    fail "closed output: no cluster folder in the first line ($first)"
fi

if [ "$failures" -gt 0 ]; then
    echo "--- demo output (last 60 lines) ---" >&2
    tail -n 60 "$out" >&2
    echo "--- Ctrl-C run (last 20 lines) ---" >&2
    tail -n 20 "$out2" >&2
    exit 1
fi
echo "test_demo.sh: $summary; Ctrl-C and a closed output cleaned up"
