#!/usr/bin/env bash
# a2 console against a real store, a real a2-consumer (audit trail and
# /metrics) and a real a2-worker: every page and API answer, every action
# (retry and skip of one, in bulk by filter, cancel and its refusal), the
# live tail (filters, resume, rotation, truncation, disconnects, shutdown),
# and the refusals: token, Host, read-only, CSRF, Origin, sizes; hostile
# session ids and payloads come back exactly, as data.
. "$(dirname "$0")/test_cli.lib"
slot=con_$$
. "$(dirname "$0")/test_consumer.lib"
. "$(dirname "$0")/test_console.lib"

# ── the command line ────────────────────────────────────────────────────
expect 0 "$A2" console --help; contains "usage: a2"; contains "--token-file"
expect 2 "$A2" console extra; contains "console takes no argument" err
expect 2 "$A2" console --listen bogus; contains "bad --listen 'bogus'" err
expect 2 "$A2" console --listen unix:/tmp/x; contains "expected tcp:HOST:PORT" err
expect 2 "$A2" console --listen tcp:127.0.0.1:99999; contains "PORT must be 0 to 65535" err
expect 2 "$A2" console --listen tcp:0.0.0.0:0; contains "is not a loopback address: it needs --token-file" err
expect 2 "$A2" console --consumer-metrics https://127.0.0.1:9/metrics; contains "only http:// is supported" err
expect 2 "$A2" console --consumer-metrics nocolon; contains "bad --consumer-metrics 'nocolon'" err
expect 2 "$A2" console --nope; contains "unknown option --nope" err
expect 1 "$A2" console --audit "$TMP/missing.jsonl"; contains "could not open audit file $TMP/missing.jsonl" err
expect 1 "$A2" console --token-file "$TMP/missing.token"; contains "could not open token file" err
expect 1 "$A2" --db "host=127.0.0.1 port=1 connect_timeout=2" console; contains "could not connect" err

# ── a store with real dead letters ──────────────────────────────────────
mport=$(free_port)
start_consumer --metrics "tcp:127.0.0.1:$mport" || finish
start_jobs_worker || finish
for s in dl-a dl-b; do "$A2" append "$s" job.run '{"fail":"upstream timeout after 30 s"}' --target jobs >/dev/null; done
"$A2" append dl-c job.mail '{"fail":"connection refused"}' --target jobs >/dev/null
"$A2" append ok-1 job.run '{"n":1}' --target jobs >/dev/null
"$A2" append pend-1 job.wait '{}' --target idle >/dev/null
# Hostile names and texts: markup, quotes, backslashes, a newline.
evil=$'<script>alert("x")</script>\'"\\ &amp; \n<img src=x onerror=alert(1)>'
evil_err='<b onmouseover="alert(1)">boom</b> "quoted" \ back'
"$A2" append "$evil" job.run "$(python3 -c 'import json,sys; print(json.dumps({"fail": sys.argv[1], "html": "</script><script>alert(2)</script>"}))' "$evil_err")" --target jobs >/dev/null
wait_for 60 "select count(*) from a2_cursors where failed_at is not null" 4
wait_for 30 "select count(*) from a2_cursors where session_id = 'ok-1' and head is not null" 0
wait_log 20 "$audit" '"transition":"dead_lettered","session":"dl-c"'
wait_log 20 "$audit" '"session":"ok-1"'

start_console main --audit "$audit" --consumer-metrics "http://127.0.0.1:$mport" || finish

expect 1 "$A2" console --listen "tcp:127.0.0.1:${C_URL##*:}"; contains "could not listen on tcp:127.0.0.1:${C_URL##*:}: Address already in use" err

# ── the page: static, with its headers ──────────────────────────────────
expect_http 200 GET /
has_header Content-Type "text/html; charset=utf-8"
has_header Content-Security-Policy "default-src 'none'; script-src 'self'"
has_header X-Content-Type-Options nosniff
has_header X-Frame-Options DENY
checks=$((checks + 1))
case "$body" in *'<script src="/console.js"'*) ;; *) fail "the page does not load console.js: $body" ;; esac
checks=$((checks + 1))
case "$body" in *dl-a* | *alert* | *timeout*) fail "the page holds data: it must be static" ;; esac
expect_http 200 GET /index.html
expect_http 200 GET /console.js; has_header Content-Type "text/javascript"; has_header X-Content-Type-Options nosniff
checks=$((checks + 1))
case "$body" in *innerHTML* | *outerHTML* | *insertAdjacentHTML* | *document.write*) fail "console.js writes HTML" ;; esac
expect_http 200 GET /console.css; has_header Content-Type "text/css"
expect_http 200 GET /favicon.svg; has_header Content-Type "image/svg+xml"
expect_http 404 GET /nope
expect_http 404 GET /../../etc/passwd --path-as-is
expect_http 404 GET /api/nope; is "unknown API" "$(jv 'd["error"]')" "no such API: /api/nope"
expect_http 405 PUT /; has_header Allow "GET, HEAD, POST"
expect_http 405 DELETE /api/session-info
expect_http 200 HEAD /console.css -I

expect_http 200 GET /api/session-info; has_header Cache-Control no-store
is "session info" "$(jv 'd["read_only"], d["token"], d["audit"] is not None, d["metrics"] is not None')" "False False True True"
CSRF=$(jv 'd["csrf"]')
is "CSRF token length" "${#CSRF}" 64

# ── the overview ────────────────────────────────────────────────────────
expect_http 200 GET /api/overview
is "jobs backlog" "$(jv '[(c["pending"], c["running"], c["dead_letters"]) for c in d["consumers"] if c["consumer"] == "jobs"]')" "[(0, 0, 4)]"
is "idle backlog" "$(jv '[(c["pending"], c["running"], c["dead_letters"], c["oldest_pending_age_ms"] >= 0, c["oldest_pending_at"] > 0) for c in d["consumers"] if c["consumer"] == "idle"]')" "[(1, 0, 0, True, True)]"
is "completions from the audit" "$(jv '[c["completions"] >= 1 and c["completions_per_minute"] > 0 for c in d["consumers"] if c["consumer"] == "jobs"]')" "[True]"
is "audit window" "$(jv 'd["audit"]["window_ms"], "error" in d["audit"]')" "300000 False"
is "consumer metrics" "$(jv 'd["metrics"]["up"], d["metrics"]["workers"], d["metrics"]["lag_bytes"] >= 0, "a2_consumer_audit_lines_total" in d["metrics"]["metrics"]')" "True 1 True True"

# ── dead letters across sessions ────────────────────────────────────────
expect_http 200 GET /api/dead-letters
is "all dead letters" "$(jv 'len(d["items"]), d["next"]')" "4 None"
is "newest first" "$(jv 'all(d["items"][i]["failed_at"] >= d["items"][i+1]["failed_at"] for i in range(3))')" True
is "dead letter fields" "$(jv '[(r["attempt"], r["failures"], r["consumer"], r["cursor"] == "#1", r["index"]) for r in d["items"] if r["session"] == "dl-c"]')" "[(2, 2, 'jobs', True, 1)]"
is "last error" "$(jv '[r["error"] for r in d["items"] if r["session"] == "dl-c"]')" "['connection refused (exit status 1)']"
expect_http 200 GET /api/dead-letters -G --data-urlencode error=TIMEOUT
is "error filter (any case)" "$(jv 'sorted(r["session"] for r in d["items"])')" "['dl-a', 'dl-b']"
expect_http 200 GET /api/dead-letters -G --data-urlencode type=job.mail
is "type filter" "$(jv '[r["session"] for r in d["items"]]')" "['dl-c']"
expect_http 200 GET /api/dead-letters -G --data-urlencode consumer=nobody
is "consumer filter" "$(jv 'len(d["items"])')" 0
now=$(date +%s%3N)
expect_http 200 GET "/api/dead-letters?failed_after=$((now + 60000))"
is "failed_after" "$(jv 'len(d["items"])')" 0
expect_http 200 GET "/api/dead-letters?failed_before=$((now + 60000))&failed_after=$((now - 600000))"
is "failed_before and after" "$(jv 'len(d["items"])')" 4
expect_http 200 GET "/api/dead-letters?failed_before=2000-01-01T00:00:00Z"
is "failed_before as a UTC time" "$(jv 'len(d["items"])')" 0
# Pages of one: each dead letter once, then no next.
seen=
page=
for i in 1 2 3 4 5; do
    if [ -n "$page" ]; then
        expect_http 200 GET /api/dead-letters -G --data-urlencode limit=1 --data-urlencode "page=$page"
    else
        expect_http 200 GET "/api/dead-letters?limit=1"
    fi
    seen="$seen$(jv '"".join(r["session"][:4] + "," for r in d["items"])')"
    page=$(jv 'json.dumps(d["next"]) if d["next"] else ""')
    [ -n "$page" ] || break
done
is "paging" "$(tr ',' '\n' <<<"$seen" | grep -c .)" 4
expect_http 200 GET /api/dead-letters/count -G --data-urlencode error=timeout
is "count" "$(jv 'd["count"]')" 2
expect_http 400 GET "/api/dead-letters?limit=0"
expect_http 400 GET "/api/dead-letters?limit=x"
expect_http 400 GET "/api/dead-letters?page=garbage"
expect_http 400 GET '/api/dead-letters?page=%5B1%2C2%5D'
expect_http 400 GET "/api/dead-letters?failed_after=soon"
expect_http 400 GET /api/dead-letters -G --data-urlencode "error=$(head -c 1025 /dev/zero | tr '\0' x)"
contains_body() { checks=$((checks + 1)); case "$body" in *"$1"*) ;; *) fail "expected '$1' in $body" ;; esac; }
contains_body "at most 1024 bytes"
expect_http 400 GET "/api/dead-letters?consumer=%FF%FE"

# ── a session and an event ──────────────────────────────────────────────
expect_http 200 GET "/api/session?id=dl-a"
is "session events" "$(jv 'len(d["events"]), d["events"][0]["type"], d["events"][0]["payload"]')" '1 job.run {"fail": "upstream timeout after 30 s"}'
is "session cursors" "$(jv '[(c["consumer"], c["kind"], c["head"], c["failed_at"] is not None) for c in d["cursors"]]')" "[('jobs', 'event', 1, True)]"
is "session dead letters" "$(jv 'len(d["dead_letters"])')" 1
expect_http 200 GET "/api/session?id=nosuch"
is "no such session" "$(jv 'd["events"], d["cursors"]')" "[] []"
expect_http 400 GET /api/session
expect_http 400 GET "/api/session?id=x&limit=5000"
expect_http 400 GET "/api/session?id=x&after=-1"
expect_http 200 GET "/api/event?session=dl-a&index=1"
is "event history" "$(jv '" ".join(l["transition"] for l in d["history"]["lines"])')" "started claimed failed claimed dead_lettered"
is "history details" "$(jv '[(l["after"]["attempt"], l["after"]["holder"] is not None) for l in d["history"]["lines"] if l["transition"] == "claimed"]')" "[(1, True), (2, True)]"
is "history errors" "$(jv '[l["after"]["error"] for l in d["history"]["lines"] if l["transition"] == "dead_lettered"]')" "['upstream timeout after 30 s (exit status 1)']"
is "event" "$(jv 'd["event"]["index"], d["event"]["type"], len(d["cursors"])')" "1 job.run 1"
expect_http 200 GET "/api/event?session=dl-a&index=99"
is "no such event" "$(jv 'd["event"], d["history"]["lines"]')" "None []"
expect_http 400 GET "/api/event?session=dl-a&index=-1"
expect_http 400 GET "/api/event?session=dl-a&index=99999999999999999999"
expect_http 400 GET "/api/event?index=1"

# Hostile values come back exactly, as JSON data.
expect_http 200 GET /api/session -G --data-urlencode "id=$evil"
is "hostile session id" "$(jv 'd["session"] == d["events"][0]["session"]')" True
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["session"] == sys.argv[2], d["session"]; p=json.loads(d["events"][0]["payload"]); assert p["html"] == "</script><script>alert(2)</script>"; assert d["dead_letters"][0]["error"] == sys.argv[3] + " (exit status 1)", d["dead_letters"][0]["error"]' "$body" "$evil" "$evil_err" ||
    fail "a hostile session, payload or error did not come back exactly: $body"
checks=$((checks + 1))
expect_http 200 GET /api/event -G --data-urlencode "session=$evil" --data-urlencode index=1
is "hostile history" "$(jv '" ".join(l["transition"] for l in d["history"]["lines"])')" "started claimed failed claimed dead_lettered"
has_header Content-Type "application/json"

# ── actions: refusals first ─────────────────────────────────────────────
one='{"session":"dl-c","consumer":"jobs","index":1,"action":"skip"}'
expect_http 403 POST /api/redrive -H 'Content-Type: application/json' --data-binary "$one"
contains_body "missing or wrong CSRF token"
# the token with its last character changed (to one it is not)
last=${CSRF: -1}
wrong=${CSRF%?}$([ "$last" = 0 ] && echo 1 || echo 0)
expect_http 403 POST /api/redrive -H 'Content-Type: application/json' -H "X-A2-CSRF: $wrong" --data-binary "$one"
expect_http 403 POST /api/redrive -H 'Content-Type: application/json' -H "X-A2-CSRF: " --data-binary "$one"
post /api/redrive "$one" -H 'Origin: http://evil.example'; is "foreign Origin" "$code" 403
contains_body "cross-origin request refused"
post /api/redrive "$one" -H 'Origin: null'; is "Origin null" "$code" 403
post /api/redrive "$one" -H 'Sec-Fetch-Site: cross-site'; is "cross-site fetch" "$code" 403
post /api/redrive "$one" -H 'Sec-Fetch-Site: same-site'; is "same-site fetch" "$code" 403
req POST /api/redrive -H 'Content-Type: text/plain' -H "X-A2-CSRF: $CSRF" --data-binary "$one"; is "text/plain body" "$code" 415
req POST /api/redrive -H 'Content-Type: application/x-www-form-urlencoded' -H "X-A2-CSRF: $CSRF" --data-binary "a=b"; is "form body" "$code" 415
post /api/redrive 'not json'; is "not JSON" "$code" 400
post /api/redrive '[1,2]'; is "not an object" "$code" 400
post /api/redrive '{"a":1,"a":2}'; is "duplicate keys" "$code" 400
head -c 70000 /dev/zero | tr '\0' ' ' >"$TMP/big.json"
req POST /api/redrive -H 'Content-Type: application/json' -H "X-A2-CSRF: $CSRF" --data-binary @"$TMP/big.json"; is "a body over 64 KiB" "$code" 413
req POST /api/redrive -H 'Content-Type: application/json' -H "X-A2-CSRF: $CSRF" -H 'Transfer-Encoding: chunked' --data-binary @"$TMP/big.json"; is "a chunked body over 64 KiB" "$code" 413
post /api/redrive '{"session":"dl-c","consumer":"jobs","index":1,"action":"explode"}'; is "bad action" "$code" 400
post /api/redrive '{"session":"dl-c","index":1,"action":"retry"}'; is "missing consumer" "$code" 400
post /api/redrive '{"session":"dl-c","consumer":"jobs","index":"x","action":"retry"}'; is "bad index" "$code" 400
post /api/redrive '{"session":"dl-c","consumer":"jobs","index":1,"action":"retry","x":"\u0000"}'; is "NUL in a body" "$code" 400
post /api/nope '{}'; is "no such action" "$code" 404
post / '{}'; is "POST to the page" "$code" 404
post /api/redrive-matching '{"action":"retry","filter":{"error":"timeout"}}'; is "bulk without expected" "$code" 400
post /api/redrive-matching '{"action":"retry","filter":"x","expected":1}'; is "bulk filter not an object" "$code" 400
is "nothing was redriven" "$(sql "select count(*) from a2_cursors where failed_at is not null")" 4

# ── bulk retry by error text ────────────────────────────────────────────
touch "$TMP/fixed"
post /api/redrive-matching '{"action":"retry","filter":{"error":"timeout"},"expected":2}'
is "bulk retry" "$code $(jv 'd["count"], d["more"], d["action"]')" "200 2 False retry"
wait_for 30 "select count(*) from a2_cursors where session_id in ('dl-a','dl-b') and head is not null" 0
wait_log 20 "$audit" '"transition":"went_idle","session":"dl-b"'
expect_http 200 GET /api/dead-letters
is "retried ones left the list" "$(jv 'sorted(r["session"][:4] for r in d["items"])')" "['<scr', 'dl-c']"
expect_http 200 GET "/api/event?session=dl-a&index=1"
is "history after the retry" "$(jv '" ".join(l["transition"] for l in d["history"]["lines"])')" \
    "started claimed failed claimed dead_lettered retried claimed went_idle"
# expected bounds what a bulk action does: one of two.
post /api/redrive-matching '{"action":"skip","filter":{},"expected":1}'
is "bulk skip bounded" "$(jv 'd["count"], d["more"]')" "1 True"
is "one left" "$(sql "select count(*) from a2_cursors where failed_at is not null")" 1

# ── one dead letter: retry or skip ──────────────────────────────────────
left=$(sql "select session_id from a2_cursors where failed_at is not null")
payload=$(python3 -c 'import json,sys; print(json.dumps({"session": sys.argv[1], "consumer": "jobs", "index": 1, "action": "skip"}))' "$left")
post /api/redrive "$payload"
is "skip one" "$code $(jv 'd["redriven"], d["action"]')" "200 True skip"
post /api/redrive "$payload"
is "no such dead letter" "$code $(jv 'd["redriven"]')" "409 False"
contains_body "no dead letter of jobs at index 1"
is "no dead letter left" "$(sql "select count(*) from a2_cursors where failed_at is not null")" 0

# ── cancel: pending, then refused when running ──────────────────────────
"$A2" append cx job.later '{}' --target nobody >/dev/null
post /api/cancel '{"session":"cx","consumer":"nobody","index":1,"reason":"not needed <any more>"}'
is "cancel" "$code $(jv 'd["outcome"]')" "200 cancelled"
wait_log 20 "$audit" '"transition":"skipped","session":"cx"'
expect_http 200 GET "/api/event?session=cx&index=1"
is "cancel in the history" "$(jv '" ".join(l["transition"] for l in d["history"]["lines"])')" "started cancelled skipped"
is "cancel reason" "$(jv '[l["after"]["error"] for l in d["history"]["lines"] if l["transition"] == "cancelled"]')" "['cancelled: not needed <any more>']"
post /api/cancel '{"session":"cx","consumer":"nobody","index":1}'
is "cancel twice" "$code $(jv 'd["outcome"]')" "409 not_pending"
"$A2" append cy job.long '{}' --target busy >/dev/null
sql "select a2_claim(session => 'cy', holder => 'busy-1/1', ttl_ms => 600000)" >/dev/null
post /api/cancel '{"session":"cy","consumer":"busy","index":1}'
is "cancel refused when running" "$code $(jv 'd["outcome"], d["holder"]')" "409 running busy-1/1"
contains_body "is running (held by busy-1/1"
expect_http 200 GET "/api/session?id=cy"
is "still running" "$(jv 'd["cursors"][0]["holder"], d["cursors"][0]["head"]')" "busy-1/1 1"

# ── the live tail ───────────────────────────────────────────────────────
expect_http 400 GET "/api/tail?last=5000"
curl -sN -m 3 "$C_URL/api/tail?transition=retried&last=10" >"$TMP/tail1.txt"
is "tail backlog filtered" "$(grep -c '^data: {"lsn"' "$TMP/tail1.txt")" 2
checks=$((checks + 1))
grep '^data: {"lsn"' "$TMP/tail1.txt" | grep -vq '"transition":"retried"' && fail "the tail filter let another transition through"
checks=$((checks + 1))
grep -q '^id: [0-9]*:[0-9]*$' "$TMP/tail1.txt" || fail "tail lines have no id: $(head -5 "$TMP/tail1.txt")"
grep -q '^retry: ' "$TMP/tail1.txt"; is "tail retry field" $? 0
grep -q '^event: notice' "$TMP/tail1.txt"; is "tail notice" $? 0
# Live: lines written after the start arrive; only the filter's session.
curl -sN -m 60 "$C_URL/api/tail?session=live-1&last=0" >"$TMP/tail2.txt" &
tail_pid=$!
wait_out "$TMP/tail2.txt" '"notice":"following"' 10
"$A2" append live-2 job.run '{}' --target jobs >/dev/null
"$A2" append live-1 job.run '{}' --target jobs >/dev/null
wait_out "$TMP/tail2.txt" '"transition":"went_idle","session":"live-1"' 20
checks=$((checks + 1))
grep -q '"session":"live-2"' "$TMP/tail2.txt" && fail "the session filter let live-2 through"
kill "$tail_pid" 2>/dev/null
wait "$tail_pid" 2>/dev/null
# A reconnecting client resumes after its last id: nothing twice, nothing lost.
last_id=$(grep '^id: ' "$TMP/tail1.txt" | tail -1 | cut -d' ' -f2)
curl -sN -m 3 -H "Last-Event-ID: $last_id" "$C_URL/api/tail?transition=retried" >"$TMP/tail3.txt"
is "resume after the last id" "$(grep -c '^data: {"lsn"' "$TMP/tail3.txt")" 0
curl -sN -m 3 -H "Last-Event-ID: 1:0" "$C_URL/api/tail?transition=retried&last=0" >"$TMP/tail3.txt"
is "an unknown id starts at the end" "$(grep -c '^data: {"lsn"' "$TMP/tail3.txt")" 0

# The tail of a file that is written by hand: partial lines, rotation,
# truncation, a file that disappears and comes back; the tail bound.
fake=$TMP/fake.jsonl
aline() { printf '{"at":"2026-01-01T00:00:00.000Z","transition":"%s","session":"%s","consumer":"c","cursor":"#1","before":null,"after":{"head":1}}\n' "$1" "$2"; }
aline started f0 >"$fake"
stop_console main
start_console fake --audit "$fake" || finish
curl -sN -m 60 "$C_URL/api/tail?last=5" >"$TMP/tail4.txt" &
tail_pid=$!
wait_out "$TMP/tail4.txt" '"session":"f0"' 10
wait_out "$TMP/tail4.txt" '"notice":"following"' 10
aline claimed f1 | head -c 40 >>"$fake"
sleep 0.8
checks=$((checks + 1))
grep -q '"session":"f1"' "$TMP/tail4.txt" && fail "a partial line was sent"
aline claimed f1 | tail -c +41 >>"$fake"
wait_out "$TMP/tail4.txt" '"session":"f1"' 10
mv "$fake" "$fake.1"
aline completed f2 >"$fake"
wait_out "$TMP/tail4.txt" '"notice":"rotated"' 10
wait_out "$TMP/tail4.txt" '"session":"f2"' 10
: >"$fake"
wait_out "$TMP/tail4.txt" '"notice":"truncated"' 10
aline failed f3 >>"$fake"
wait_out "$TMP/tail4.txt" '"session":"f3"' 10
printf 'not json at all\n' >>"$fake"
aline failed f4 >>"$fake"
wait_out "$TMP/tail4.txt" '"session":"f4"' 10
rm "$fake"
sleep 0.5
aline retried f5 >"$fake"
wait_out "$TMP/tail4.txt" '"session":"f5"' 10
is "each line once" "$(grep -c '^data: {"at"' "$TMP/tail4.txt")" 6
kill "$tail_pid" 2>/dev/null
wait "$tail_pid" 2>/dev/null
# At most 16 tails at once; a client that goes away frees its tail.
tails=()
for i in $(seq 1 16); do
    curl -sN -m 60 "$C_URL/api/tail?last=0" >"$TMP/t$i.txt" &
    tails+=($!)
done
for i in $(seq 1 16); do wait_out "$TMP/t$i.txt" 'notice' 20; done
expect_http 503 GET "/api/tail?last=0" -m 5
contains_body "too many live tails"
expect_http 200 GET /api/session-info
for p in "${tails[@]}"; do kill "$p" 2>/dev/null; done
for p in "${tails[@]}"; do wait "$p" 2>/dev/null; done
deadline=$((SECONDS + 10))
while :; do
    curl -sN -m 2 "$C_URL/api/tail?last=0" >"$TMP/t17.txt"
    grep -q 'notice' "$TMP/t17.txt" && break
    [ $SECONDS -gt $deadline ] && { fail "closed tails were not freed: $(cat "$TMP/t17.txt")"; break; }
    sleep 0.2
done
checks=$((checks + 1))
# Hostile bytes on the socket: the console stays up.
python3 - "${C_URL#http://}" <<'PY'
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
for junk in [b"\x00\xff\xfe garbage\r\n\r\n", b"GET /" + b"a" * 200000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
             b"GET / HTTP/1.1\r\nHost: localhost\r\n" + b"X-Long: " + b"b" * 300000 + b"\r\n\r\n",
             b"POST /api/redrive HTTP/1.1\r\nHost: localhost\r\nContent-Length: 99999999999999999999\r\n\r\n",
             b"GET /api/session?id=%zz%00%ff HTTP/1.1\r\nHost: localhost\r\n\r\n"]:
    s = socket.create_connection((host, int(port)), timeout=5)
    try:
        s.sendall(junk)
        s.recv(4096)
    except OSError:
        pass
    s.close()
PY
expect_http 200 GET /api/session-info
# SIGTERM with a tail open: a clean, prompt stop.
curl -sN -m 60 "$C_URL/api/tail?last=0" >"$TMP/t18.txt" &
tail_pid=$!
wait_out "$TMP/t18.txt" 'notice' 10
stop_console fake
wait "$tail_pid" 2>/dev/null

# ── Host: a loopback console without a token answers loopback names only
start_console hosts || finish
port=${C_URL##*:}
expect_http 403 GET / -H "Host: evil.example:$port"; contains_body "Host refused"
expect_http 403 GET /api/session-info -H "Host: 127.0.0.1.evil.example"
expect_http 200 GET / -H "Host: localhost:$port"
expect_http 200 GET / -H "Host: [::1]:$port"
expect_http 200 GET / -H "Host: 127.0.0.2"
# An unreachable metrics endpoint is shown, not fatal.
stop_console hosts
start_console badmetrics --consumer-metrics "http://127.0.0.1:$(free_port)/metrics" || finish
expect_http 200 GET /api/overview
is "metrics error" "$(jv '"could not connect" in d["metrics"]["error"], d["audit"]')" "True None"
expect_http 404 GET /api/tail; contains_body "--audit FILE"
expect_http 200 GET "/api/event?session=dl-a&index=1"
is "no audit: no history" "$(jv 'd["history"]')" None
stop_console badmetrics

# ── read-only: every POST refused, even with the CSRF token ─────────────
start_console ro --read-only || finish
expect_http 200 GET /api/session-info
is "read-only info" "$(jv 'd["read_only"]')" True
CSRF=$(jv 'd["csrf"]')
"$A2" append ro-1 job.run '{}' --target nobody >/dev/null
for p in /api/redrive /api/redrive-matching /api/cancel; do
    post "$p" '{"session":"ro-1","consumer":"nobody","index":1,"action":"retry","expected":1,"filter":{}}'
    is "read-only $p" "$code" 403
    contains_body "read-only"
done
is "read-only wrote nothing" "$(sql "select count(*) from a2_cursors where session_id = 'ro-1' and head = 1")" 1
stop_console ro

# ── a token: every request carries it ───────────────────────────────────
printf 'sëcret-tøken-%s\n' "$$" >"$TMP/token"
chmod 600 "$TMP/token"
tok="sëcret-tøken-$$"
chmod 644 "$TMP/token"
expect 1 "$A2" console --token-file "$TMP/token"; contains "group or world access" err
chmod 600 "$TMP/token"
start_console tok --listen tcp:0.0.0.0:0 --token-file "$TMP/token" --audit "$audit" || finish
checks=$((checks + 1))
grep -q "(token required)" "$TMP/tok.out" || fail "the start line does not say a token is required"
expect_http 401 GET /; contains_body "needs its token"
expect_http 401 GET /console.js
expect_http 401 GET /api/session-info; is "401 is JSON" "$(jv '"token" in d["error"]')" True
expect_http 401 GET /api/tail
expect_http 401 GET /api/session-info -H "Authorization: Bearer wrong"
expect_http 401 GET /api/session-info -H "Authorization: Bearer ${tok}x"
expect_http 401 GET /api/session-info -H "Cookie: a2_console=00"
expect_http 401 GET /?token=wrong
expect_http 200 GET /api/session-info -H "Authorization: Bearer $tok"
expect_http 200 GET /api/session-info -H "Authorization: bearer  $tok"
# A login with the token sets the cookie, and sends the browser to /.
expect_http 303 GET / -G --data-urlencode "token=$tok"
has_header Location /
has_header Set-Cookie "a2_console="
checks=$((checks + 1))
grep -qi '^Set-Cookie: .*HttpOnly; SameSite=Strict' "$TMP/headers" || fail "the login cookie is not HttpOnly and SameSite=Strict"
cookie=$(sed -n 's/^Set-Cookie: \(a2_console=[0-9a-f]*\).*/\1/Ip' "$TMP/headers" | tr -d '\r')
expect_http 200 GET / -H "Cookie: $cookie"
expect_http 200 GET /api/overview -H "Cookie: $cookie"
CSRF=$(csrf -H "Cookie: $cookie")
post /api/cancel '{"session":"cy","consumer":"busy","index":1}' -H "Cookie: $cookie"
is "POST with the cookie and the CSRF token" "$code $(jv 'd["outcome"]')" "409 running"
post /api/cancel '{"session":"cy","consumer":"busy","index":1}'
is "POST without the token" "$code" 401
curl -sN -m 2 -H "Cookie: $cookie" "$C_URL/api/tail?last=0" >"$TMP/t19.txt"
is "tail with the cookie" "$(grep -c '"notice":"following"' "$TMP/t19.txt")" 1
# Any Host is fine with a token (it is not loopback-only).
expect_http 200 GET /api/session-info -H "Authorization: Bearer $tok" -H "Host: console.example:1"
stop_console tok

finish
