#!/usr/bin/env bash
# a2 console in a real browser: headless Chromium driven by playwright-core
# (console_browser.mjs) against a real console, store, a2-consumer and
# a2-worker. deploy/install-browser installs Debian's chromium and
# playwright-core when they are missing; when it cannot, this test fails.
# Screenshots go to $A2_TEST_OUTPUT/console_browser (default
# build/test-output); with A2_CONSOLE_DOCS_SHOT=1 the confirmation of a bulk
# retry is also copied to docs/console.png.
# The page is the same whatever the build: the browser runs it once, against
# the release build; under ASan/UBSan test_console.sh drives every endpoint.
case "${A2_BIN:-}" in
*/build/asan/*)
    echo "test_console_browser.sh: the browser test runs with the release build; test_console.sh covers this one"
    exit 0
    ;;
esac
. "$(dirname "$0")/test_cli.lib"
slot=conb_$$
. "$(dirname "$0")/test_consumer.lib"
. "$(dirname "$0")/test_console.lib"
top=${A2_TOP:-$(cd "$(dirname "$0")/../.." && pwd)}

checks=$((checks + 1))
if ! tools=$("$top/deploy/install-browser"); then
    fail "the browser test's tools could not be installed (deploy/install-browser, above)"
    finish
fi
eval "$tools"
shots=${A2_TEST_OUTPUT:-$top/build/test-output}/console_browser
rm -rf "$shots"
mkdir -p "$shots"

mport=$(free_port)
start_consumer --metrics "tcp:127.0.0.1:$mport" || finish
start_jobs_worker || finish
evil=$'<script>alert("x")</script>\'"\\ <img src=x onerror=alert(1)>'
evil_err='<b onmouseover="alert(1)">boom</b> "quoted" \ back'
for s in dl-a dl-b; do "$A2" append "$s" job.run '{"fail":"upstream timeout after 30 s","order":7}' --target jobs >/dev/null; done
"$A2" append dl-c job.mail '{"fail":"connection refused"}' --target jobs >/dev/null
"$A2" append "$evil" job.run "$(python3 -c 'import json,sys; print(json.dumps({"fail": sys.argv[1], "html": "</script><script>alert(2)</script>"}))' "$evil_err")" --target jobs >/dev/null
for i in 1 2 3 4 5 6; do "$A2" append "ok-$i" job.run '{"n":'$i'}' --target jobs >/dev/null; done
"$A2" append pend-1 job.wait '{}' --target idle >/dev/null
"$A2" append pend-2 report.build '{}' --target reports:nightly --in 1h >/dev/null
"$A2" append run-1 job.long '{}' --target busy >/dev/null
sql "select a2_claim(session => 'run-1', holder => 'busy-1/1', ttl_ms => 600000)" >/dev/null
wait_for 60 "select count(*) from a2_cursors where failed_at is not null" 4
wait_for 30 "select count(*) from a2_cursors where session_id like 'ok-%' and head is not null" 0
wait_log 20 "$audit" '"transition":"went_idle","session":"ok-6"'

start_console main --audit "$audit" --consumer-metrics "http://127.0.0.1:$mport" || finish
main_url=$C_URL
main_pid=$cons_pid
start_console ro --read-only --audit "$audit" || finish
ro_url=$C_URL
ro_pid=$cons_pid
# The retried events complete this time.
touch "$TMP/fixed"

checks=$((checks + 1))
if ! A2_CONSOLE_URL=$main_url A2_CONSOLE_RO_URL=$ro_url A2_CHROMIUM=$A2_CHROMIUM \
    A2_NODE_MODULES=$A2_NODE_MODULES A2_SHOTS=$shots A2_EVIL=$evil A2_EVIL_ERROR=$evil_err \
    timeout 300 node "$(dirname "$0")/console_browser.mjs"; then
    fail "the browser test failed (screenshots in $shots)"
fi
for f in overview dead-letters confirm tail event hostile read-only; do
    checks=$((checks + 1))
    [ -s "$shots/$f.png" ] || fail "no screenshot $shots/$f.png"
done
if [ "${A2_CONSOLE_DOCS_SHOT:-0}" = 1 ] && [ -s "$shots/confirm.png" ]; then
    cp "$shots/confirm.png" "$top/docs/console.png"
fi
checks=$((checks + 1))
size=$(stat -c %s "$top/docs/console.png" 2>/dev/null || echo 0)
[ "$size" -gt 0 ] && [ "$size" -lt 307200 ] || fail "docs/console.png is missing or not under 300 KB ($size bytes)"

cons_pid=$ro_pid
stop_console ro
cons_pid=$main_pid
stop_console main
finish
