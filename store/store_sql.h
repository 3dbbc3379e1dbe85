/*
 * The statements liba2store sends through a2_batch(statements, params).
 *
 * Every statement is a select of jsonb rows reading its values from $1, the
 * call's JSON parameters: no value a caller passes is ever part of a
 * statement's text. Statements hold no comments (they are sent with their
 * whitespace collapsed) and no string literals with runs of spaces.
 *
 * Lock discipline (the contract of the operations): cursor rows first, then
 * the session's advisory lock. A completion locks its cursor row and only
 * then the session lock (when it appends or its cursor goes idle); an append
 * or clear fenced on an attempt, and a skipped dead letter, lock that row
 * before the session lock and check it again under the lock, where the row
 * is already theirs. Every other append, clear or start of cursor work takes
 * the session lock first. A cursor row is only locked in the exact state the
 * operation acts on (a head, an attempt). Under the session lock an
 * operation never waits on a cursor row it did not lock before: starting an
 * idle lane or log cursor inserts a new run (keyed by its first head, the
 * epoch) and retires the idle one with skip locked. Statements that lock
 * several cursor rows lock them in primary-key order (cursor_key, consumer,
 * epoch), which no update changes, so two of them never wait on each other
 * in a cycle.
 */
#ifndef A2_STORE_SQL_H
#define A2_STORE_SQL_H

/* Statement texts are laid out by hand. */
/* clang-format off */

/* ── parameter accessors ─────────────────────────────────────────────── */

#define P_TEXT(k) "($1->>'" k "')"
#define P_BIGINT(k) "($1->>'" k "')::bigint"
#define P_INT(k) "($1->>'" k "')::int"
#define P_BOOL(k) "($1->>'" k "')::boolean"
#define P_JSONB(k) "nullif($1->'" k "', 'null'::jsonb)"
/* A JSON array of strings as text[], or null when it is not an array. The
 * array's subquery is guarded on its own too: a generic plan may evaluate it
 * before the case decides. */
#define P_TEXTS(k)                                                          \
    "(case when jsonb_typeof($1->'" k "') = 'array' then array(select "     \
    "jsonb_array_elements_text(case when jsonb_typeof($1->'" k "') = "      \
    "'array' then $1->'" k "' end)) end)"

#define SESSION P_TEXT("session")
#define INDEX P_BIGINT("index")
#define CONSUMER P_TEXT("consumer")

/* The session's latest clear marker, or 0. */
#define CLEAR_OF(sess)                                                      \
    "coalesce((select clr.clear_index from a2_clears clr where "            \
    "clr.session_id = " sess "), 0)"
#define CLEAR_INDEX CLEAR_OF(SESSION)

/* Whether a served consumer (served: a text[] expression, null: every
 * consumer) has a head in the session. */
#define PENDING_IN(served)                                                  \
    "exists(select 1 from a2_cursors pending where pending.session_id = "   \
    SESSION " and pending.head > " CLEAR_INDEX                              \
    " and pending.failed_at is null and (" served " is null or "            \
    "pending.consumer = any(" served ")))"

/* A fresh head's dispatch columns. */
#define FRESH_DISPATCH                                                      \
    " attempt_count = 0, first_claimed_at = null, last_claimed_at = null,"  \
    " claim_holder = null, claim_expires_at = null, failure_count = 0,"     \
    " last_failed_at = null, last_failed_attempt = null, last_error = null," \
    " failed_at = null "

/* The head event's columns, prefixed e_. */
#define HEAD_COLUMNS                                                        \
    " event.idx as e_idx, event.event_type as e_event_type,"                \
    " event.payload::text as e_payload, event.event_id as e_event_id,"      \
    " event.created_at as e_created_at, event.cause as e_cause "

/*
 * The next event after `after` a log cursor takes: `types` a jsonb array of
 * its types, or null for every type but the clear marker. One probe of
 * a2_events_types per type.
 */
#define NEXT_LOG_HEAD(types, after)                                         \
    " case when " types " is null then (select event.idx from a2_events "   \
    "event where event.session_id = " SESSION " and event.idx > " after     \
    " and event.event_type <> " P_TEXT("clearType")                         \
    " order by event.idx limit 1) else (select min(nx.idx) from "           \
    "jsonb_array_elements_text(" types ") as wanted(event_type) cross join " \
    "lateral (select event.idx from a2_events event where "                 \
    "event.session_id = " SESSION " and event.event_type = "                \
    "wanted.event_type and event.idx > " after " order by event.idx limit " \
    "1) nx where wanted.event_type <> " P_TEXT("clearType") ") end "

/* The latest run of target's cursor. */
#define LATEST_RUN(t)                                                       \
    " select cur.epoch, cur.position, cur.head from a2_cursors cur where "  \
    "cur.session_id = " SESSION " and cur.cursor_key = " t ".cursor_key "   \
    "and cur.consumer = " t ".consumer order by cur.epoch desc limit 1 "

/* Retires the runs t replaces (idle, or at or below the marker clr),
 * skipping rows another operation holds. CTEs. */
#define RETIRE_RUNS(t, clr)                                                 \
    " idle as materialized (select cur.ctid from a2_cursors cur join " t    \
    " on cur.cursor_key = " t ".cursor_key and cur.consumer = " t           \
    ".consumer where cur.session_id = " SESSION " and (cur.head is null "   \
    "or cur.head <= " clr ") for update of cur skip locked), retired as "   \
    "(delete from a2_cursors old using idle where old.ctid = idle.ctid) "

/* ── append ──────────────────────────────────────────────────────────── */

#define SQL_LOCK_SESSION                                                    \
    "select jsonb_build_object('locked', true) from "                       \
    "pg_advisory_xact_lock(hashtext(" SESSION "))"

/* The index before this call's inserted events (read after the insert):
 * INSERTED_AFTER as a scalar, INSERTED_BASE as a FROM item `head(base)`. */
#define INSERTED_AFTER_SELECT                                               \
    "select coalesce(max(idx), 0) - " P_BIGINT("count")                     \
    " from a2_events where session_id = " SESSION
#define INSERTED_AFTER "(" INSERTED_AFTER_SELECT ")"
#define INSERTED_BASE  "(" INSERTED_AFTER_SELECT ") head(base)"

/* The session's last index, clear marker and `pending` (whether a served
 * consumer has a head), read under the session lock. A CTE. */
#define APPEND_BOUNDARY_WITH(pending)                                       \
    " boundary as materialized (select coalesce(max(idx), 0) as base, "     \
    CLEAR_INDEX " as clear_index, " pending " as has_pending from "         \
    "a2_events where session_id = " SESSION ") "
#define APPEND_BOUNDARY APPEND_BOUNDARY_WITH(PENDING_IN(P_TEXTS("served")))

/* Inserts the batch's events after `base`, an expression over `from`, when
 * `cond` holds. The body of a CTE. Payloads travel as JSON text and are cast
 * here, so their numbers keep the caller's precision. */
#define INSERT_EVENTS_AFTER(base, from, cond)                               \
    "insert into a2_events (session_id, idx, event_type, payload, "         \
    "event_id, created_at, cause) select " SESSION ", " base " + event.ord"  \
    ", event.type, coalesce(event.payload::jsonb, 'null'::jsonb), "         \
    "event.id, " P_BIGINT("now") ", event.cause from " from ", "            \
    "jsonb_to_recordset($1->'events') as event(ord bigint, type text, "     \
    "payload text, id text, cause jsonb) where " cond " order by "          \
    "event.ord returning 1"

/* An event cursor for each single target, its event at `base` + ord
 * (`base` an expression over `from`), when `cond` holds. A CTE body. */
#define START_SINGLES_AFTER(base, from, cond)                               \
    "insert into a2_cursors (session_id, consumer, cursor_key, epoch, "     \
    "lane, kind, position, head) select " SESSION ", single.consumer, "     \
    "'#' || (" base " + single.ord), " base " + single.ord, null, 'event'," \
    " " base " + single.ord - 1, " base " + single.ord from " from ", "     \
    "jsonb_to_recordset($1->'singles') as single(consumer text, ord "       \
    "bigint) where " cond " on conflict do nothing returning 1"

/* An append's checks under the session lock: replay, mixed, cleared. */
#define SQL_APPEND_CHECKS                                                   \
    "with" APPEND_BOUNDARY ", owned as materialized (select event.session_id, event.idx, "        \
    "event.event_type, event.payload::text as payload, event.event_id, "    \
    "event.created_at, event.cause from a2_events event, boundary where "   \
    "event.session_id = " SESSION " and event.event_id = any("              \
    P_TEXTS("ids") ") and event.idx >= boundary.clear_index) "              \
    "select case when (select count(*) from owned) = " P_BIGINT("count")    \
    " then jsonb_build_object('stop', 'replay', 'has_pending', "            \
    "boundary.has_pending, 'events', (select jsonb_agg(to_jsonb(owned) "    \
    "order by owned.idx) from owned)) when exists (select 1 from owned) "   \
    "then jsonb_build_object('abort', 'mixed', 'owned', (select count(*) "  \
    "from owned)) when " P_BIGINT("origin") " <= boundary.clear_index "     \
    "then jsonb_build_object('abort', 'cleared') else "                     \
    "jsonb_build_object('base', boundary.base, 'has_pending', "             \
    "boundary.has_pending) end from boundary"

/* The append of a batch that names no ids and no causes, in one statement:
 * no replay or mix is possible, so the checks reduce to the cleared origin;
 * the events and their single targets' cursors are inserted in the same
 * statement (writable CTEs), skipped when the origin is cleared (the row
 * then aborts the call). Returns the row SQL_APPEND_CHECKS would have, with
 * the boundary CTE `boundary`. */
#define APPEND_FRESH_WITH(boundary)                                         \
    "with" boundary ", verdict as materialized (select "                    \
    "boundary.base, boundary.has_pending, " P_BIGINT("origin")              \
    " <= boundary.clear_index as cleared from boundary), inserted as ("     \
    INSERT_EVENTS_AFTER("verdict.base", "verdict",                          \
                        "verdict.cleared is not true")                      \
    "), started as ("                                                       \
    START_SINGLES_AFTER("verdict.base", "verdict",                          \
                        "verdict.cleared is not true")                      \
    ") select case when verdict.cleared then jsonb_build_object('abort', "  \
    "'cleared') else jsonb_build_object('base', verdict.base, "             \
    "'has_pending', verdict.has_pending, 'inserted', (select count(*) "     \
    "from inserted), 'started', (select count(*) from started)) end from "  \
    "verdict"
#define SQL_APPEND_FRESH APPEND_FRESH_WITH(APPEND_BOUNDARY)

/* SQL_APPEND_FRESH for a batch that starts work for a served consumer: a
 * consumer it serves has a head once it succeeds, so the probe for other
 * heads is left out. */
#define SQL_APPEND_FRESH_STARTING APPEND_FRESH_WITH(APPEND_BOUNDARY_WITH("true"))

/* The attempt-currency fence: each cause's cursor, read for share while its
 * head and attempt still match; the first that fails aborts. */
#define SQL_FENCE                                                           \
    "with cause as (select * from jsonb_to_recordset($1->'causes') as "     \
    "cause(ord int, consumer text, cursor_key text, idx bigint, attempt "   \
    "int)), held as materialized (select cause.ord from cause join "        \
    "a2_cursors cur on cur.session_id = " SESSION " and cur.cursor_key = "  \
    "cause.cursor_key and cur.consumer = cause.consumer and cur.head = "    \
    "cause.idx and cur.attempt_count = cause.attempt and cur.failed_at is " \
    "null where cause.idx > " CLEAR_INDEX " order by cur.cursor_key, "      \
    "cur.consumer, cur.epoch for share of cur) select jsonb_build_object('abort', "    \
    "'superseded', 'ord', cause.ord) from cause where cause.ord not in "    \
    "(select ord from held) order by cause.ord limit 1"

/* Frees the ids rows below the clear marker hold; never waits on a row. */
#define SQL_REUSE_IDS                                                       \
    "with stale as materialized (select event.idx from a2_events event "    \
    "where event.session_id = " SESSION " and event.event_id = any("        \
    P_TEXTS("ids") ") and event.idx < " CLEAR_INDEX " order by event.idx "  \
    "for update skip locked), deleted as (delete from a2_events event "     \
    "using stale where event.session_id = " SESSION " and event.idx = "     \
    "stale.idx returning event.idx) select jsonb_build_object('abort', "    \
    "'held') where (select count(*) from deleted) < (select count(*) from " \
    "a2_events event where event.session_id = " SESSION " and "             \
    "event.event_id = any(" P_TEXTS("ids") ") and event.idx < "             \
    CLEAR_INDEX ")"

/* Inserts the events after the session's head. */
#define SQL_INSERT_EVENTS                                                   \
    "with inserted as ("                                                    \
    INSERT_EVENTS_AFTER("head.base", "(select coalesce(max(idx), 0) as "    \
                        "base from a2_events where session_id = " SESSION   \
                        ") head", "true")                                   \
    ") select jsonb_build_object('inserted', count(*)) from inserted"

/* A concurrent cursor for each single target. The base is an aggregate in
 * FROM, read once: a scalar subquery there is pulled up into each of its
 * uses and read again for each. */
#define SQL_START_EVENTS                                                    \
    "with started as ("                                                     \
    START_SINGLES_AFTER("head.base", INSERTED_BASE, "true")                 \
    ") select jsonb_build_object('started', count(*)) from started"

/* Queues each lane target's event in its lane. */
#define SQL_QUEUE_LANES                                                     \
    "with queued as (insert into a2_lane_events (session_id, consumer, "    \
    "lane, idx) select " SESSION ", queued.consumer, queued.lane, "         \
    INSERTED_AFTER " + queued.ord from jsonb_to_recordset($1->'queued') "   \
    "as queued(consumer text, lane text, ord bigint) on conflict do "       \
    "nothing returning 1) select jsonb_build_object('queued', count(*)) "   \
    "from queued"

/* Starts a run for each lane the batch queues work for that has none
 * running (idle, superseded by the marker, or new). */
#define SQL_START_LANES                                                     \
    "with boundary as materialized (select " INSERTED_AFTER " as base, "    \
    CLEAR_INDEX " as clear_index), target as (select first.consumer, "      \
    "first.cursor_key, first.lane, boundary.base + first.ord as idx from "  \
    "boundary, jsonb_to_recordset($1->'lanes') as first(consumer text, "    \
    "cursor_key text, lane text, ord bigint)), started as materialized "    \
    "(select target.*, latest.position from target left join lateral ("     \
    LATEST_RUN("target") ") latest on true where latest.head is null or "   \
    "latest.head <= (select clear_index from boundary)), "                  \
    RETIRE_RUNS("started", "(select clear_index from boundary)")            \
    ", inserted as (insert into a2_cursors (session_id, consumer, "         \
    "cursor_key, epoch, lane, kind, position, head) select " SESSION ", "   \
    "started.consumer, started.cursor_key, started.idx, started.lane, "     \
    "'lane', greatest(coalesce(started.position, 0), (select clear_index "  \
    "from boundary)), started.idx from started on conflict do nothing "     \
    "returning 1) select jsonb_build_object('lanes', count(*)) from "       \
    "inserted"

/* Starts a run for each served log cursor the batch carries types for that
 * has none running. */
#define SQL_WAKE_LOGS                                                       \
    "with boundary as materialized (select " INSERTED_AFTER " as base, "    \
    CLEAR_INDEX " as clear_index), target as (select log.consumer, "        \
    "log.cursor_key, log.lane, boundary.base + log.ord as first, "          \
    "log.types, log.backfill from boundary, jsonb_to_recordset($1->'logs')" \
    " as log(consumer text, cursor_key text, lane text, ord bigint, types " \
    "jsonb, backfill boolean)), woken as materialized (select target.*, "   \
    "case when latest.epoch is not null then greatest(latest.position, "    \
    "(select clear_index from boundary)) when target.backfill then "        \
    "(select clear_index from boundary) else (select base from boundary) "  \
    "end as position, latest.epoch is not null or target.backfill as "      \
    "resumes from target left join lateral (" LATEST_RUN("target")          \
    ") latest on true where latest.head is null or latest.head <= "         \
    "(select clear_index from boundary)), "                                 \
    RETIRE_RUNS("woken", "(select clear_index from boundary)")              \
    ", run as (select woken.*, case when woken.resumes then coalesce("      \
    NEXT_LOG_HEAD("woken.types", "woken.position")                          \
    ", woken.first) else woken.first end as head from woken), inserted as " \
    "(insert into a2_cursors (session_id, consumer, cursor_key, epoch, "    \
    "lane, kind, position, head, types) select " SESSION ", run.consumer, " \
    "run.cursor_key, run.head, run.lane, 'log', run.position, run.head, "   \
    "run.types from run on conflict do nothing returning 1) select "        \
    "jsonb_build_object('logs', count(*)) from inserted"

#define SQL_PENDING                                                         \
    "select jsonb_build_object('has_pending', " PENDING_IN(P_TEXTS("served")) ")"

/* ── read, cursors, dead letters ─────────────────────────────────────── */

#define EVENT_FIELDS                                                        \
    " event.session_id, event.idx, event.event_type, event.payload::text "  \
    "as payload, event.event_id, event.created_at, event.cause "

#define SQL_READ                                                            \
    "select to_jsonb(e) from (select " EVENT_FIELDS " from a2_events event" \
    " where event.session_id = " SESSION " and event.idx >= " CLEAR_INDEX   \
    " and event.idx > " P_BIGINT("after") " and (" P_TEXTS("types")         \
    " is null or event.event_type = any(" P_TEXTS("types") ")) order by "   \
    "event.idx limit " P_BIGINT("limit") ") e"

#define SQL_CURSORS                                                         \
    "with boundary as materialized (select " CLEAR_INDEX " as clear_index)" \
    " select to_jsonb(c) from (select cur.*, boundary.clear_index from "    \
    "a2_cursors cur, boundary where cur.session_id = " SESSION " and "      \
    "(cur.head > boundary.clear_index or (cur.kind <> 'event' and not "     \
    "exists (select 1 from a2_cursors later where later.session_id = "      \
    "cur.session_id and later.cursor_key = cur.cursor_key and "             \
    "later.consumer = cur.consumer and later.epoch > cur.epoch) and "       \
    "(cur.kind = 'log' or (cur.head is null and cur.position > "            \
    "boundary.clear_index)))) order by cur.consumer collate \"C\", "        \
    "cur.lane is null, cur.lane collate \"C\", cur.head) c"

#define SQL_DEAD_LETTERS                                                    \
    "select to_jsonb(d) from (select cur.*, " HEAD_COLUMNS " from "         \
    "a2_cursors cur join a2_events event on event.session_id = "            \
    "cur.session_id and event.idx = cur.head where cur.session_id = "       \
    SESSION " and cur.failed_at is not null and cur.head > " CLEAR_INDEX    \
    " order by cur.head, cur.consumer collate \"C\") d"

/* ── claim ───────────────────────────────────────────────────────────── */

/* The heads a claim may take, as from ... where for cur. */
#define ELIGIBLE                                                            \
    " from a2_cursors cur where cur.session_id = " SESSION " and cur.head " \
    "> " CLEAR_INDEX " and (" P_BIGINT("through") " is null or cur.head "   \
    "<= " P_BIGINT("through") ") and cur.failed_at is null and ("          \
    P_TEXTS("served") " is null or cur.consumer = any(" P_TEXTS("served")   \
    ")) and not exists (select 1 from jsonb_to_recordset($1->'excluded') "  \
    "as skip(consumer text, cursor_key text) where skip.consumer = "        \
    "cur.consumer and skip.cursor_key = cur.cursor_key) "

/* A takeover of a lapsed claim that spends the last failure. */
#define EXHAUSTED                                                           \
    "(cur.claim_holder is not null and cur.failure_count + 1 >= "           \
    P_INT("maxFailures") ")"

/* Claims every eligible head in head order; stops when it claimed some and
 * dead-lettered none. When its snapshot held no eligible head it waited on
 * no row, and it stops with RETRY_AT's answer from the same snapshot; when
 * it lost every head to a race it goes on, and RETRY_AT reads afresh. */
#define SQL_CLAIM                                                           \
    "with eligible as materialized (select cur.consumer, cur.cursor_key, "  \
    "cur.epoch " ELIGIBLE " and (cur.claim_expires_at is null or "          \
    "cur.claim_expires_at <= " P_BIGINT("now") ") order by "               \
    "cur.cursor_key, cur.consumer, cur.epoch for update of cur), claimed "  \
    "as (update a2_cursors cur "                                            \
    "set attempt_count = cur.attempt_count + 1, failure_count = "           \
    "cur.failure_count + case when cur.claim_holder is null then 0 else 1 " \
    "end, failed_at = case when " EXHAUSTED " then " P_BIGINT("now")        \
    " else cur.failed_at end, first_claimed_at = case when " EXHAUSTED      \
    " then cur.first_claimed_at else coalesce(cur.first_claimed_at, "       \
    P_BIGINT("now") ") end, last_claimed_at = case when " EXHAUSTED         \
    " then cur.last_claimed_at else " P_BIGINT("now") " end, claim_holder " \
    "= case when " EXHAUSTED " then null else " P_TEXT("holder") " end, "   \
    "claim_expires_at = case when " EXHAUSTED " then null else "            \
    P_BIGINT("expiresAt") " end from eligible where cur.session_id = "      \
    SESSION " and cur.cursor_key = eligible.cursor_key and cur.consumer = " \
    "eligible.consumer and cur.epoch = eligible.epoch returning cur.*), "   \
    "heads as (select claimed.*, " HEAD_COLUMNS ", " CLEAR_INDEX " as "     \
    "clear_index, (select coalesce(max(idx), 0) from a2_events where "      \
    "session_id = " SESSION ") as session_head from claimed left join "     \
    "a2_events event on event.session_id = " SESSION " and event.idx = "    \
    "claimed.head) select r from (select 0 as ord, heads.head as h, "      \
    "heads.consumer as c, to_jsonb(heads) as r from heads union all select" \
    " 1, null, null, jsonb_build_object('stop', 'claimed') where exists "   \
    "(select 1 from heads) and not exists (select 1 from heads where "      \
    "failed_at is not null) union all select 1, null, null, "               \
    "jsonb_build_object('stop', 'settled', 'retry_at', (select "            \
    "min(cur.claim_expires_at) " ELIGIBLE " and cur.claim_expires_at > "    \
    P_BIGINT("now") ")) where not exists (select 1 from heads) and not "    \
    "exists (select 1 " ELIGIBLE " and (cur.claim_expires_at is null or "   \
    "cur.claim_expires_at <= " P_BIGINT("now") "))) claim order by ord, h," \
    " c collate \"C\""

/* Releases the snapshot pins of heads dead-lettered at now. */
#define SQL_RELEASE_DEAD                                                    \
    "with dead as materialized (select cur.consumer, cur.cursor_key, "      \
    "cur.head from a2_cursors cur where cur.session_id = " SESSION " and "  \
    "cur.head is not null and cur.failed_at = " P_BIGINT("now") " and "     \
    "cur.claim_holder is null), unpinned as (delete from a2_snapshot_pins " \
    "pin using dead where pin.session_id = " SESSION " and "                \
    "pin.event_index = dead.head and pin.consumer = dead.consumer and "     \
    "pin.cursor_key = dead.cursor_key returning 1), unkept as (delete "     \
    "from a2_snapshot_history history where history.session_id = "         \
    SESSION " and exists (select 1 from dead) and not exists (select 1 "    \
    "from a2_snapshot_pins pin where pin.session_id = history.session_id "  \
    "and pin.reducer_name = history.reducer_name and pin.up_to_index = "    \
    "history.up_to_index and not exists (select 1 from dead where "         \
    "pin.event_index = dead.head and pin.consumer = dead.consumer and "     \
    "pin.cursor_key = dead.cursor_key)) returning 1) select "               \
    "jsonb_build_object('released', (select count(*) from unpinned))"

#define SQL_RETRY_AT                                                        \
    "select jsonb_build_object('retry_at', min(cur.claim_expires_at)) "     \
    ELIGIBLE " and cur.claim_expires_at > " P_BIGINT("now")

/* The heads a claim waited on that moved to events committed after its
 * snapshot (a second round trip, rare). */
#define SQL_HEAD_EVENTS                                                     \
    "select to_jsonb(h) from (select " HEAD_COLUMNS " from a2_events "      \
    "event where event.session_id = " SESSION " and event.idx in (select "  \
    "jsonb_array_elements_text($1->'heads')::bigint)) h"

/* ── renew ───────────────────────────────────────────────────────────── */

#define SQL_RENEW                                                           \
    "with listed as (select * from jsonb_to_recordset($1->'claims') as "    \
    "listed(ord int, consumer text, cursor_key text, idx bigint, attempt "  \
    "int)), target as materialized (select cur.cursor_key, cur.consumer, "  \
    "cur.epoch from a2_cursors cur join listed on cur.cursor_key = "        \
    "listed.cursor_key and cur.consumer = listed.consumer and cur.head = "  \
    "listed.idx and cur.attempt_count = listed.attempt where "              \
    "cur.session_id = " SESSION " and listed.idx > " CLEAR_INDEX " and "    \
    "cur.failed_at is null and cur.claim_holder = " P_TEXT("holder")        \
    " and cur.claim_expires_at > " P_BIGINT("now") " order by "            \
    "cur.cursor_key, cur.consumer, cur.epoch for update of cur), renewed as (update a2_cursors cur "   \
    "set claim_expires_at = " P_BIGINT("expiresAt") " from target, listed " \
    "where cur.session_id = " SESSION " and cur.cursor_key = "              \
    "target.cursor_key and cur.consumer = target.consumer and cur.epoch = " \
    "target.epoch and listed.cursor_key = cur.cursor_key and "              \
    "listed.consumer = cur.consumer and cur.head = listed.idx and "         \
    "cur.attempt_count = listed.attempt and cur.failed_at is null and "     \
    "cur.claim_holder = " P_TEXT("holder") " returning cur.cursor_key, "    \
    "cur.consumer, cur.head) select jsonb_build_object('ord', listed.ord, " \
    "'head', latest.head, 'position', latest.position, 'attempt_count', "   \
    "latest.attempt_count, 'found', latest.epoch is not null, 'renewed', "  \
    "exists(select 1 from renewed where renewed.cursor_key = "              \
    "listed.cursor_key and renewed.consumer = listed.consumer and "         \
    "renewed.head = listed.idx), 'cleared', listed.idx <= " CLEAR_INDEX     \
    ") from listed left join lateral (select cur.epoch, cur.head, "         \
    "cur.position, cur.attempt_count from a2_cursors cur where "            \
    "cur.session_id = " SESSION " and cur.cursor_key = listed.cursor_key "  \
    "and cur.consumer = listed.consumer order by cur.epoch desc limit 1) "  \
    "latest on true order by listed.ord"

/* ── complete ────────────────────────────────────────────────────────── */

/* The cursor row alias whose head this attempt holds. */
#define HELD_BY(a)                                                          \
    " " a ".session_id = " SESSION " and " a ".cursor_key = "               \
    P_TEXT("cursorKey") " and " a ".consumer = " CONSUMER " and " a         \
    ".head = " INDEX " and " a ".attempt_count = " P_INT("attempt")         \
    " and " a ".failed_at is null and " a ".claim_holder is not null "

/* Locks the cursor while this attempt holds its head, else stops. */
#define SQL_HOLD                                                            \
    "with boundary as materialized (select " CLEAR_INDEX " as clear_index)" \
    ", held as materialized (select cur.kind from a2_cursors cur, boundary" \
    " where " HELD_BY("cur") " and " INDEX " > boundary.clear_index for "   \
    "update of cur) select case when " INDEX " <= boundary.clear_index "    \
    "then jsonb_build_object('stop', 'superseded') when not exists "        \
    "(select 1 from held) then jsonb_build_object('stop', 'unheld') else "  \
    "jsonb_build_object('held', (select kind from held limit 1)) end from " \
    "boundary"

/* A log cursor's types once it moves. */
#define LOG_TYPES_OF(c)                                                     \
    "(case when " P_BOOL("retype") " then " P_JSONB("types") " else " c     \
    ".types end)"

/* The head cursor c moves to from its head. */
#define NEXT_HEAD_OF(c)                                                     \
    " case " c ".kind when 'lane' then (select lane.idx from "              \
    "a2_lane_events lane where lane.session_id = " SESSION " and "          \
    "lane.consumer = " c ".consumer and lane.lane = " c ".lane and not "    \
    "lane.done and lane.idx > " c ".head order by lane.consumer, "          \
    "lane.lane, lane.idx limit 1) when 'log' then ("                        \
    NEXT_LOG_HEAD(LOG_TYPES_OF(c), c ".head") ") end "

/* Takes the session lock when the held cursor would go idle. */
#define SQL_LOCK_IF_IDLE                                                    \
    "select jsonb_build_object('locked', "                                  \
    "pg_advisory_xact_lock(hashtext(" SESSION "))::text is not null) from " \
    "a2_cursors cur where " HELD_BY("cur") " and cur.kind <> 'event' and (" \
    NEXT_HEAD_OF("cur") ") is null"

/*
 * Moves the cursor cond selects past its head (above the clear marker):
 * runs `lane_done` (a CTE ending in a comma, or nothing), releases the
 * head's pins and unkept history, and gives the cursor its next head.
 */
#define ADVANCE_AS(cond, lane_done, run_receipt, missing, next_head, types) \
    "with target as materialized (select cur.* from a2_cursors cur where "  \
    cond " and " INDEX " > " CLEAR_INDEX " order by cur.cursor_key limit 1" \
    " for update of cur), " lane_done                                       \
    "unpinned as (delete from a2_snapshot_pins pin using target where "     \
    "pin.session_id = " SESSION " and pin.event_index = target.head and "   \
    "pin.consumer = target.consumer and pin.cursor_key = "                  \
    "target.cursor_key returning 1), unkept as (delete from "               \
    "a2_snapshot_history history using target where history.session_id = " \
    SESSION " and not exists (select 1 from a2_snapshot_pins pin where "    \
    "pin.session_id = history.session_id and pin.reducer_name = "           \
    "history.reducer_name and pin.up_to_index = history.up_to_index and "   \
    "not (pin.event_index = target.head and pin.consumer = "                \
    "target.consumer and pin.cursor_key = target.cursor_key)) returning "   \
    "1), moved as (update a2_cursors cur set position = target.head, head " \
    "= " next_head ", " FRESH_DISPATCH ", types = " types run_receipt       \
    " from target where cur.session_id = " SESSION " and"                   \
    " cur.cursor_key = target.cursor_key and cur.consumer = "               \
    "target.consumer and cur.epoch = target.epoch returning cur.head) "     \
    "select case when exists (select 1 from moved) then "                   \
    "jsonb_build_object('advanced', true) else jsonb_build_object("         \
    missing ") end"

/* Marks a lane cursor's head done in its lane, with lane_receipt. A CTE
 * for ADVANCE_AS. */
#define LANE_DONE(lane_receipt)                                             \
    "done as (update a2_lane_events lane set done = true" lane_receipt      \
    " from target where target.kind = 'lane' and lane.session_id = "        \
    SESSION " and lane.consumer = target.consumer and lane.lane = "         \
    "target.lane and lane.idx = target.head returning 1), "

#define ADVANCE(cond, lane_receipt, run_receipt, missing)                   \
    ADVANCE_AS(cond, LANE_DONE(lane_receipt), run_receipt, missing,         \
               NEXT_HEAD_OF("target"),                                      \
               "case when target.kind = 'log' then " LOG_TYPES_OF("target") \
               " else cur.types end")

/* A concurrent cursor (key "#<index>") has no lane, no next head and no
 * types: the same statement without the lane update and the lane and log
 * lookups, cheaper to plan and to start. */
#define ADVANCE_EVENT(cond, run_receipt, missing)                           \
    ADVANCE_AS(cond " and cur.kind = 'event'", "", run_receipt, missing,    \
               "null", "cur.types")

#define LANE_RECEIPT                                                        \
    ", completed_attempt = " P_INT("attempt") ", returned_event_ids = "     \
    P_JSONB("ids")
#define RUN_RECEIPT                                                         \
    ", completed_idx = case when target.kind = 'lane' then "                \
    "cur.completed_idx else target.head end, completed_attempt = case "     \
    "when target.kind = 'lane' then cur.completed_attempt else "            \
    P_INT("attempt") " end, returned_event_ids = case when target.kind = "  \
    "'lane' then cur.returned_event_ids else " P_JSONB("ids") " end"

#define SQL_COMPLETE                                                        \
    ADVANCE(HELD_BY("cur"), LANE_RECEIPT, RUN_RECEIPT,                      \
            "'stop', 'superseded'")
#define SQL_COMPLETE_EVENT                                                  \
    ADVANCE_EVENT(HELD_BY("cur"), RUN_RECEIPT, "'stop', 'superseded'")
#define SQL_COMPLETE_APPENDED_EVENT                                         \
    ADVANCE_EVENT(HELD_BY("cur"), RUN_RECEIPT, "'abort', 'superseded'")
#define SQL_COMPLETE_APPENDED                                               \
    ADVANCE(HELD_BY("cur"), LANE_RECEIPT, RUN_RECEIPT,                      \
            "'abort', 'superseded'")

/* A completion's checks before it appends, under the session lock. */
#define SQL_RETURN_CHECKS                                                   \
    "select case when " INDEX " <= " CLEAR_INDEX " then "                   \
    "jsonb_build_object('stop', 'superseded') when exists (select 1 from "  \
    "a2_events event where event.session_id = " SESSION " and "             \
    "event.event_id = any(" P_TEXTS("ids") ") and event.idx >= "            \
    CLEAR_INDEX ") then jsonb_build_object('abort', 'owned') else "         \
    "jsonb_build_object('base', (select coalesce(max(idx), 0) from "        \
    "a2_events where session_id = " SESSION ")) end"

/* A completion that does not hold its head: what was committed. */
#define SQL_SETTLE                                                          \
    "select jsonb_build_object('found', latest.kind is not null, 'kind', "  \
    "latest.kind, 'head', latest.head, 'completed_idx', "                   \
    "covering.completed_idx, 'completed_attempt', "                         \
    "covering.completed_attempt, 'returned_event_ids', "                    \
    "covering.returned_event_ids, 'lane_found', lane.idx is not null, "     \
    "'lane_attempt', lane.completed_attempt, 'lane_ids', "                  \
    "lane.returned_event_ids, 'has_event', exists(select 1 from a2_events " \
    "where session_id = " SESSION " and idx = " INDEX "), 'cleared', "      \
    INDEX " <= " CLEAR_INDEX ", 'events', (select jsonb_agg(to_jsonb(e)) "  \
    "from (select " EVENT_FIELDS " from a2_events event where "             \
    "event.session_id = " SESSION " and event.event_id = any("              \
    P_TEXTS("ids") ")) e)) from (select 1) one left join lateral (select "  \
    "kind, head from a2_cursors where session_id = " SESSION " and "        \
    "cursor_key = " P_TEXT("cursorKey") " and consumer = " CONSUMER         \
    " order by epoch desc limit 1) latest on true left join lateral "       \
    "(select completed_idx, completed_attempt, returned_event_ids from "    \
    "a2_cursors where session_id = " SESSION " and cursor_key = "           \
    P_TEXT("cursorKey") " and consumer = " CONSUMER " and epoch <= " INDEX  \
    " order by epoch desc limit 1) covering on true left join lateral "     \
    "(select idx, completed_attempt, returned_event_ids from "              \
    "a2_lane_events where session_id = " SESSION " and consumer = "         \
    CONSUMER " and lane = " P_TEXT("lane") " and idx = " INDEX ") lane on " \
    "true"

/* ── fail ────────────────────────────────────────────────────────────── */

#define SQL_FAIL                                                            \
    "with current as materialized (select cur.* from a2_cursors cur where " \
    "cur.session_id = " SESSION " and cur.cursor_key = "                    \
    P_TEXT("cursorKey") " and cur.consumer = " CONSUMER " and cur.head = "  \
    INDEX " and cur.head > " CLEAR_INDEX " for update of cur), updated as " \
    "(update a2_cursors cur set failure_count = cur.failure_count + 1, "    \
    "last_error = " P_TEXT("error") ", last_failed_at = " P_BIGINT("now")   \
    ", last_failed_attempt = " P_INT("attempt") ", failed_at = case when "  \
    "cur.failure_count + 1 >= " P_INT("maxFailures") " then "               \
    P_BIGINT("now") " else cur.failed_at end, claim_holder = null, "        \
    "claim_expires_at = case when cur.failure_count + 1 >= "                \
    P_INT("maxFailures") " then null else " P_BIGINT("retryAt") " end "     \
    "from current where cur.session_id = " SESSION " and cur.cursor_key = " \
    P_TEXT("cursorKey") " and cur.consumer = " CONSUMER " and cur.epoch = " \
    "current.epoch and current.attempt_count = " P_INT("attempt") " and "   \
    "current.failed_at is null and current.claim_holder is not null "       \
    "returning cur.failure_count, cur.failed_at), outcome as (select case " \
    "when " INDEX " <= " CLEAR_INDEX " then 'cleared' when not exists "     \
    "(select 1 from current) then 'missing' when exists (select 1 from "    \
    "updated where failed_at is not null) then 'dead_lettered' when "       \
    "exists (select 1 from updated) then 'failed' when exists (select 1 "   \
    "from current where attempt_count <> " P_INT("attempt") ") then "       \
    "'superseded' when exists (select 1 from current where claim_holder "   \
    "is null and last_failed_attempt = " P_INT("attempt") " and failed_at " \
    "is null) then 'failed' when exists (select 1 from current where "      \
    "failed_at is not null) then 'dead_lettered' else 'superseded' end as " \
    "outcome) select jsonb_build_object('outcome', outcome.outcome, "       \
    "'failure_count', coalesce((select failure_count from updated), "       \
    "(select failure_count from current), 0)) || case when "                \
    "outcome.outcome in ('dead_lettered', 'missing') then '{}'::jsonb "     \
    "else jsonb_build_object('stop', true) end from outcome"

/* A dead letter's snapshot pins, and the history no pin keeps. */
#define SQL_FAIL_RELEASE                                                    \
    "with dead as materialized (select cur.head from a2_cursors cur where " \
    "cur.session_id = " SESSION " and cur.cursor_key = "                    \
    P_TEXT("cursorKey") " and cur.consumer = " CONSUMER " and cur.head = "  \
    INDEX " and cur.failed_at is not null), unpinned as (delete from "      \
    "a2_snapshot_pins pin using dead where pin.session_id = " SESSION       \
    " and pin.event_index = dead.head and pin.consumer = " CONSUMER " and " \
    "pin.cursor_key = " P_TEXT("cursorKey") " returning 1), unkept as "     \
    "(delete from a2_snapshot_history history where history.session_id = " \
    SESSION " and exists (select 1 from dead) and not exists (select 1 "    \
    "from a2_snapshot_pins pin where pin.session_id = history.session_id "  \
    "and pin.reducer_name = history.reducer_name and pin.up_to_index = "    \
    "history.up_to_index and not (pin.event_index = " INDEX " and "         \
    "pin.consumer = " CONSUMER " and pin.cursor_key = "                     \
    P_TEXT("cursorKey") ")) returning 1) select "                           \
    "jsonb_build_object('released', (select count(*) from unpinned))"

/* Whether a missing head ever existed, in a fresh snapshot. */
#define SQL_FAIL_MISSING                                                    \
    "select jsonb_build_object('cursor_found', exists(select 1 from "       \
    "a2_cursors where session_id = " SESSION " and cursor_key = "           \
    P_TEXT("cursorKey") " and consumer = " CONSUMER "), 'has_event', "      \
    "exists(select 1 from a2_events where session_id = " SESSION " and "    \
    "idx = " INDEX "), 'cleared', " INDEX " <= " CLEAR_INDEX ")"

/* ── redrive ─────────────────────────────────────────────────────────── */

#define DEAD_AT(a)                                                          \
    " " a ".session_id = " SESSION " and " a ".consumer = " CONSUMER        \
    " and " a ".head = " INDEX " and " a ".failed_at is not null "

#define SQL_LOCK_DEAD                                                       \
    "with dead as materialized (select cur.cursor_key from a2_cursors cur " \
    "where " DEAD_AT("cur") " and " INDEX " > " CLEAR_INDEX " order by "    \
    "cur.cursor_key limit 1 for update) select case when exists (select 1 " \
    "from dead) then jsonb_build_object('redriven', true) else "            \
    "jsonb_build_object('stop', 'alive', 'redriven', false, "               \
    "'has_pending', " PENDING_IN(P_TEXTS("served")) ") end"

#define SQL_RETRY_DEAD                                                      \
    "with target as materialized (select cur.cursor_key, cur.epoch from "   \
    "a2_cursors cur where " DEAD_AT("cur") " and " INDEX " > " CLEAR_INDEX  \
    " order by cur.cursor_key limit 1 for update of cur), retried as "      \
    "(update a2_cursors cur set failed_at = null, failure_count = 0 from "  \
    "target where cur.session_id = " SESSION " and cur.cursor_key = "       \
    "target.cursor_key and cur.consumer = " CONSUMER " and cur.epoch = "    \
    "target.epoch returning 1) select jsonb_build_object('retried', "       \
    "count(*)) from retried"

#define SQL_SKIP_DEAD ADVANCE(DEAD_AT("cur"), "", "", "'advanced', false")

/* ── wake_log ────────────────────────────────────────────────────────── */

#define LOG_CURSOR                                                          \
    " boundary as materialized (select coalesce(max(idx), 0) as "           \
    "session_head, " CLEAR_INDEX " as clear_index from a2_events where "    \
    "session_id = " SESSION "), latest as materialized (select "            \
    "boundary.*, cur.*, case when cur.epoch is not null then "              \
    "greatest(cur.position, boundary.clear_index) when "                    \
    P_BOOL("backfill") " then boundary.clear_index else "                   \
    "boundary.session_head end as start from boundary left join lateral "   \
    "(select * from a2_cursors cur where cur.session_id = " SESSION " and " \
    "cur.cursor_key = " P_TEXT("cursorKey") " and cur.consumer = "          \
    CONSUMER " order by cur.epoch desc limit 1) cur on true), found as "    \
    "materialized (select latest.*, latest.types is distinct from "         \
    P_JSONB("types") " as retyped, case when latest.head > "                \
    "latest.clear_index then null else "                                    \
    NEXT_LOG_HEAD(P_JSONB("types"), "latest.start")                         \
    " end as next_head from latest) "

#define KEEPS_RUN "(found.epoch is not null and found.next_head is null)"
#define NO_RUN_NEEDED                                                       \
    "(found.epoch is null and found.session_head = found.clear_index)"

#define SQL_READ_LOG                                                        \
    "with " LOG_CURSOR " select case when " KEEPS_RUN " and not "           \
    "found.retyped then jsonb_build_object('stop', 'unchanged', 'cursor', " \
    "to_jsonb(found)) when " NO_RUN_NEEDED " then jsonb_build_object("      \
    "'stop', 'empty', 'empty', true, 'head', found.session_head) else "     \
    "jsonb_build_object('stale', true) end from found"

#define SQL_WAKE_LOG                                                        \
    "with " LOG_CURSOR ", held as materialized (select cur.ctid from "      \
    "a2_cursors cur, found where " KEEPS_RUN " and found.retyped and "      \
    "cur.session_id = " SESSION " and cur.cursor_key = "                    \
    P_TEXT("cursorKey") " and cur.consumer = " CONSUMER " and cur.epoch = " \
    "found.epoch and cur.types is distinct from " P_JSONB("types")          \
    " for update of cur skip locked), retype as (update a2_cursors cur "    \
    "set types = " P_JSONB("types") " from held where cur.ctid = "          \
    "held.ctid), target as (select " P_TEXT("cursorKey") " as cursor_key, " \
    CONSUMER " as consumer from found where not " KEEPS_RUN " and not "     \
    NO_RUN_NEEDED "), "                                                     \
    RETIRE_RUNS("target", "(select clear_index from found)")                \
    ", started as (insert into a2_cursors (session_id, consumer, "          \
    "cursor_key, epoch, lane, kind, position, head, types) select "         \
    SESSION ", target.consumer, target.cursor_key, "                        \
    "coalesce(found.next_head, found.start), " P_TEXT("lane") ", 'log', "   \
    "found.start, found.next_head, " P_JSONB("types") " from found, target" \
    " returning *) select jsonb_build_object('cursor', coalesce((select "   \
    "to_jsonb(started) from started), to_jsonb(found)), 'head', "           \
    "found.session_head, 'clear_index', found.clear_index, 'empty', "       \
    NO_RUN_NEEDED ") from found"

/* ── clear ───────────────────────────────────────────────────────────── */

/* A clearing consumer's fence: its cursor, locked for update while the
 * cause's head and attempt still match. */
#define SQL_CLEAR_FENCE                                                     \
    "with fenced as materialized (select 1 from a2_cursors cur where "      \
    "cur.session_id = " SESSION " and cur.cursor_key = "                    \
    P_TEXT("causeKey") " and cur.consumer = " P_TEXT("causeConsumer")       \
    " and cur.head = " P_BIGINT("causeIndex") " and cur.attempt_count = "   \
    P_INT("causeAttempt") " and cur.failed_at is null and "                 \
    P_BIGINT("causeIndex") " > " CLEAR_INDEX " for update of cur) select "  \
    "jsonb_build_object('abort', 'superseded') where not exists (select 1 " \
    "from fenced)"

#define SQL_CLEAR_CHECK                                                     \
    "with b as materialized (select coalesce(max(idx), 0) as head, "        \
    CLEAR_INDEX " as clear_index from a2_events where session_id = "        \
    SESSION ") select case when " P_BIGINT("ifLast") " is not null and "    \
    "b.clear_index = " P_BIGINT("ifLast") " + 1 then jsonb_build_object("   \
    "'stop', 'done', 'cleared', true, 'index', b.head, 'clear_index', "     \
    "b.clear_index) when " P_BIGINT("ifLast") " is not null and b.head <> " \
    P_BIGINT("ifLast") " then jsonb_build_object('stop', 'moved', "         \
    "'cleared', false, 'index', b.head, 'clear_index', b.clear_index) "     \
    "when b.head = b.clear_index then jsonb_build_object('stop', 'done', "  \
    "'cleared', true, 'index', b.head, 'clear_index', b.clear_index) else " \
    "jsonb_build_object('marker', b.head + 1) end from b"

#define SQL_CLEAR_WRITE                                                     \
    "with marker as materialized (select coalesce(max(idx), 0) + 1 as idx " \
    "from a2_events where session_id = " SESSION "), inserted as (insert "  \
    "into a2_events (session_id, idx, event_type, payload, event_id, "      \
    "created_at, cause) select " SESSION ", marker.idx, "                   \
    P_TEXT("clearType") ", 'null'::jsonb, " P_TEXT("markerId") ", "         \
    P_BIGINT("now") ", null from marker returning idx), released as "       \
    "(update a2_cursors set head = null, " FRESH_DISPATCH " where "         \
    "session_id = " SESSION " and cursor_key = " P_TEXT("causeKey")         \
    " and consumer = " P_TEXT("causeConsumer") " and head = "               \
    P_BIGINT("causeIndex") " returning 1), marked as (insert into "         \
    "a2_clears (session_id, clear_index) select " SESSION ", idx from "     \
    "inserted on conflict (session_id) do update set clear_index = "        \
    "excluded.clear_index returning clear_index) select "                   \
    "jsonb_build_object('cleared', true, 'index', (select idx from "        \
    "inserted), 'clear_index', (select clear_index from marked), "          \
    "'released', (select count(*) from released))"

/* ── reclaim ─────────────────────────────────────────────────────────── */

/* A cursor run reclaim deletes once the session is cleared through clr. */
#define SUPERSEDED_CURSOR(clr)                                              \
    " cur.session_id = " SESSION " and ((cur.epoch < " clr " and cur.kind " \
    "<> 'log') or ((cur.head is null or cur.head <= " clr ") and exists "   \
    "(select 1 from a2_cursors later where later.session_id = "             \
    "cur.session_id and later.cursor_key = cur.cursor_key and "             \
    "later.consumer = cur.consumer and later.epoch > cur.epoch))) "

#define SQL_RECLAIM_BATCH                                                   \
    "with boundary as materialized (select " CLEAR_INDEX " as "             \
    "clear_index), batch as materialized (select event.idx from a2_events " \
    "event, boundary where event.session_id = " SESSION " and event.idx < " \
    "boundary.clear_index order by event.idx limit 256 for update of "      \
    "event skip locked), deleted as (delete from a2_events event using "    \
    "batch where event.session_id = " SESSION " and event.idx = batch.idx " \
    "returning event.idx), pins as (delete from a2_snapshot_pins pin using" \
    " deleted where pin.session_id = " SESSION " and pin.event_index = "    \
    "deleted.idx), lanes as materialized (select lane.ctid from a2_cursors" \
    " cur join a2_lane_events lane on lane.session_id = cur.session_id and" \
    " lane.consumer = cur.consumer and lane.lane = cur.lane where "         \
    "cur.session_id = " SESSION " and cur.kind = 'lane' and lane.idx <= "   \
    "(select max(idx) from batch) for update of lane skip locked), "        \
    "gone_lanes as (delete from a2_lane_events target using lanes where "   \
    "target.ctid = lanes.ctid), singles as materialized (select cur.ctid "  \
    "from a2_cursors cur join batch on cur.cursor_key = '#' || batch.idx "  \
    "where cur.session_id = " SESSION " and cur.kind = 'event' for update " \
    "of cur skip locked), gone_singles as (delete from a2_cursors target "  \
    "using singles where target.ctid = singles.ctid) select "               \
    "jsonb_build_object('deleted', (select count(*) from deleted), "        \
    "'clear_index', (select clear_index from boundary))"

#define SQL_RECLAIM_REMAINING                                               \
    "with boundary as materialized (select " CLEAR_INDEX " as "             \
    "clear_index) select jsonb_build_object('stop', case when "             \
    "boundary.clear_index = 0 then 'none' else 'more' end) from boundary "  \
    "where boundary.clear_index = 0 or exists (select 1 from a2_events "    \
    "where session_id = " SESSION " and idx < boundary.clear_index)"

#define SQL_RECLAIM_SWEEP                                                   \
    "with boundary as materialized (select " CLEAR_INDEX " as "             \
    "clear_index), lanes as materialized (select lane.ctid from "           \
    "a2_lane_events lane, boundary where lane.session_id = " SESSION        \
    " and lane.idx < boundary.clear_index for update of lane skip "         \
    "locked), cursors as materialized (select cur.ctid from a2_cursors "    \
    "cur where " SUPERSEDED_CURSOR("(select clear_index from boundary)")    \
    " for update of cur skip locked), pins as materialized (select "        \
    "pin.ctid from a2_snapshot_pins pin, boundary where pin.session_id = "  \
    SESSION " and pin.up_to_index < boundary.clear_index for update of "    \
    "pin skip locked), history as materialized (select h.ctid from "        \
    "a2_snapshot_history h, boundary where h.session_id = " SESSION " and " \
    "h.up_to_index < boundary.clear_index for update of h skip locked), "   \
    "heads as materialized (select s.ctid from a2_snapshots s, boundary "   \
    "where s.session_id = " SESSION " and s.up_to_index < "                 \
    "boundary.clear_index for update of s skip locked), gone_lanes as "     \
    "(delete from a2_lane_events target using lanes where target.ctid = "   \
    "lanes.ctid), gone_cursors as (delete from a2_cursors target using "    \
    "cursors where target.ctid = cursors.ctid), gone_pins as (delete from " \
    "a2_snapshot_pins target using pins where target.ctid = pins.ctid), "   \
    "gone_history as (delete from a2_snapshot_history target using "        \
    "history where target.ctid = history.ctid), gone_heads as (delete "     \
    "from a2_snapshots target using heads where target.ctid = heads.ctid) " \
    "select jsonb_build_object('skipped', (select count(*) from "           \
    "a2_lane_events lane, boundary where lane.session_id = " SESSION        \
    " and lane.idx < boundary.clear_index) + (select count(*) from "        \
    "a2_cursors cur where " SUPERSEDED_CURSOR("(select clear_index from "   \
    "boundary)") ") + (select count(*) from a2_snapshot_pins pin, "         \
    "boundary where pin.session_id = " SESSION " and pin.up_to_index < "    \
    "boundary.clear_index) + (select count(*) from a2_snapshot_history h, " \
    "boundary where h.session_id = " SESSION " and h.up_to_index < "        \
    "boundary.clear_index) + (select count(*) from a2_snapshots s, "        \
    "boundary where s.session_id = " SESSION " and s.up_to_index < "        \
    "boundary.clear_index) - (select count(*) from lanes) - (select "       \
    "count(*) from cursors) - (select count(*) from pins) - (select "       \
    "count(*) from history) - (select count(*) from heads))"

/* ── pending sessions ────────────────────────────────────────────────── */

/*
 * Sessions where a listed consumer has a head claimable now or held by a
 * claim (live or lapsed), paged by session id: for each consumer, an ordered
 * walk of its a2_cursors_pending range from `after` that stops after `limit`
 * sessions; no a2_events scan.
 */
#define SQL_PENDING_SESSIONS                                                \
    "with wanted as (select distinct w.consumer from "                      \
    "jsonb_array_elements_text($1->'consumers') as w(consumer)) select "    \
    "jsonb_build_object('session', s.session_id) from (select distinct "    \
    "per.session_id from wanted cross join lateral (select distinct "       \
    "cur.session_id from a2_cursors cur where cur.consumer = "              \
    "wanted.consumer and cur.head is not null and cur.failed_at is null "   \
    "and (" P_TEXT("after") " is null or cur.session_id > " P_TEXT("after") \
    ") and cur.head > " CLEAR_OF("cur.session_id") " and "                  \
    "(cur.claim_holder is not null or cur.claim_expires_at is null or "     \
    "cur.claim_expires_at <= " P_BIGINT("now") ") order by cur.session_id " \
    "limit " P_BIGINT("limit") ") per) s order by s.session_id limit "      \
    P_BIGINT("limit")

/* clang-format on */

#endif
