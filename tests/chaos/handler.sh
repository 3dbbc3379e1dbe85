#!/bin/sh
# The chaos run's handler: records each invocation as one line (a single
# O_APPEND write) in $CHAOS_INV, then fails or completes as the event's
# payload says: "lf" (lane consumer) and "cf" (concurrent consumer) are the
# number of first attempts that fail (99: always). The log consumer never
# fails. A completion returns one "done" event.
#   line: consumer session index attempt outcome pid epoch-ms
ev=$(cat)
case "$A2_CONSUMER" in
chaos_lane) key=lf ;;
chaos_conc) key=cf ;;
*) key= ;;
esac
f=0
if [ -n "$key" ]; then
    f=$(printf '%s' "$ev" | sed -n "s/.*\"$key\": *\([0-9]*\).*/\1/p")
    f=${f:-0}
fi
out=ok
[ "$A2_ATTEMPT" -le "$f" ] && out=fail
printf '%s %s %s %s %s %s %s\n' "$A2_CONSUMER" "$A2_SESSION" "$A2_INDEX" \
    "$A2_ATTEMPT" "$out" "$$" "$(date +%s%3N)" >>"$CHAOS_INV"
# A short run time widens the window in which a fault hits a running handler.
case $(($$ % 4)) in 0) sleep 0.2 ;; 1) sleep 0.05 ;; esac
if [ "$out" = fail ]; then
    echo "chaos: planned failure of attempt $A2_ATTEMPT" >&2
    exit 1
fi
echo '{"type":"done","payload":null}'
