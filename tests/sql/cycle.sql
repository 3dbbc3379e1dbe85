-- A whole cycle through the a2 functions, from psql alone: each step's
-- result is checked (psql -v ON_ERROR_STOP=1 stops at the first that is not
-- what the step expects). Run by tests/integration/test_sql_cycle.sh on a
-- database with sql/schema.sql applied. Every call is its own transaction;
-- the clock is the caller's (now_ms).

-- expect(got, want, step): got must contain want (jsonb @>).
\ir expect.sql

-- 1. An order placed, targeted at billing: event 1 and its event cursor.
select pg_temp.expect(
    a2_append(session => 'shop-1',
              events => '[{"type": "order.placed", "id": "order-1", "payload": {"n": 1},
                           "targets": [{"consumer": "billing"}]}]',
              now_ms => 1000),
    '{"outcome": "appended", "events": [{"index": 1, "id": "order-1"}], "has_pending": true}',
    'append');
-- The same append again is a replay: the committed row, nothing written.
select pg_temp.expect(
    a2_append(session => 'shop-1',
              events => '[{"type": "order.placed", "id": "order-1", "payload": {"n": 1},
                           "targets": [{"consumer": "billing"}]}]',
              now_ms => 2000),
    '{"outcome": "replayed", "events": [{"index": 1, "created_at": 1000, "payload": {"n": 1}}]}',
    'append again');

-- 2. Billing claims it.
select pg_temp.expect(
    a2_claim(session => 'shop-1', holder => 'w1', ttl_ms => 30000,
             consumers => '["billing"]', now_ms => 3000),
    '{"outcome": "claimed", "heads": [{"consumer": "billing", "index": 1, "attempt": 1,
                                       "holder": "w1", "expires_at": 33000,
                                       "type": "order.placed"}]}',
    'claim');
-- Nothing more for billing: the head is held until 33000.
select pg_temp.expect(
    a2_claim(session => 'shop-1', holder => 'w2', ttl_ms => 30000,
             consumers => '["billing"]', now_ms => 4000),
    '{"outcome": "busy", "retry_at": 33000}', 'claim while held');

-- 3. It completes, returning an invoice queued on mail's lane "eu".
select pg_temp.expect(
    a2_complete(session => 'shop-1', consumer => 'billing', lane => null, index => 1,
                attempt => 1,
                events => '[{"type": "invoice.sent", "id": "invoice-1",
                             "targets": [{"consumer": "mail", "lane": "eu"}]}]',
                now_ms => 5000),
    '{"outcome": "completed", "events": [{"index": 2, "id": "invoice-1"}]}', 'complete');
-- A stale attempt is superseded.
select pg_temp.expect(
    a2_complete(session => 'shop-1', consumer => 'billing', lane => null, index => 1,
                attempt => 2, now_ms => 5100),
    '{"outcome": "superseded"}', 'complete a stale attempt');

-- 4. Mail fails the invoice until it is a dead letter (two failures).
select pg_temp.expect(
    a2_claim(session => 'shop-1', holder => 'm1', ttl_ms => 30000, now_ms => 6000),
    '{"outcome": "claimed", "heads": [{"consumer": "mail", "lane": "eu", "index": 2,
                                       "attempt": 1}]}',
    'claim the lane');
select pg_temp.expect(
    a2_fail(session => 'shop-1', consumer => 'mail', lane => 'eu', index => 2, attempt => 1,
            error => 'smtp down', max_failures => 2, retry_after_ms => 1000, now_ms => 7000),
    '{"outcome": "failed", "failure_count": 1}', 'fail');
select pg_temp.expect(
    a2_claim(session => 'shop-1', holder => 'm1', ttl_ms => 30000, now_ms => 7500),
    '{"outcome": "busy", "retry_at": 8000}', 'claim during the retry hold');
select pg_temp.expect(
    a2_claim(session => 'shop-1', holder => 'm1', ttl_ms => 30000, now_ms => 8000),
    '{"outcome": "claimed", "heads": [{"index": 2, "attempt": 2, "last_error": "smtp down"}]}',
    'claim after the hold');
select pg_temp.expect(
    a2_fail(session => 'shop-1', consumer => 'mail', lane => 'eu', index => 2, attempt => 2,
            error => 'smtp still down', max_failures => 2, now_ms => 9000),
    '{"outcome": "dead_lettered", "failure_count": 2}', 'fail to a dead letter');
select pg_temp.expect(
    (select jsonb_agg(to_jsonb(d)) from a2_dead_letters(session => 'shop-1') d),
    '[{"consumer": "mail", "lane": "eu", "index": 2, "failure_count": 2,
       "last_error": "smtp still down", "failed_at": 9000, "type": "invoice.sent"}]',
    'dead letters');
select pg_temp.expect(
    a2_claim(session => 'shop-1', holder => 'm1', ttl_ms => 30000, now_ms => 9500),
    '{"outcome": "settled"}', 'nothing to claim');

-- 5. Redrive: retry runs it again; the next dead letter is skipped.
select pg_temp.expect(
    a2_redrive(session => 'shop-1', consumer => 'mail', index => 2, action => 'retry'),
    '{"redriven": true, "has_pending": true}', 'redrive retry');
select pg_temp.expect(
    a2_claim(session => 'shop-1', holder => 'm2', ttl_ms => 30000, now_ms => 10000),
    '{"outcome": "claimed", "heads": [{"index": 2, "attempt": 3, "failure_count": 0}]}',
    'claim the retried head');
select pg_temp.expect(
    a2_fail(session => 'shop-1', consumer => 'mail', lane => 'eu', index => 2, attempt => 3,
            error => 'bounced', max_failures => 1, now_ms => 11000),
    '{"outcome": "dead_lettered"}', 'fail again');
select pg_temp.expect(
    a2_redrive(session => 'shop-1', consumer => 'mail', index => 2, action => 'skip'),
    '{"redriven": true, "has_pending": false}', 'redrive skip');
select pg_temp.expect(
    (select jsonb_agg(to_jsonb(c)) from a2_cursors(session => 'shop-1') c),
    '[{"consumer": "mail", "lane": "eu", "kind": "lane", "position": 2, "head": null}]',
    'the lane is idle past the skipped head');
select pg_temp.expect(
    (select jsonb_agg(to_jsonb(e) order by e.index) from a2_read(session => 'shop-1') e),
    '[{"index": 1, "type": "order.placed"},
      {"index": 2, "type": "invoice.sent",
       "cause": {"consumer": "billing", "lane": null, "index": 1, "attempt": 1}}]',
    'read');

-- 6. Clear, then reclaim what lies below the marker.
select pg_temp.expect(
    a2_clear(session => 'shop-1', now_ms => 12000),
    '{"cleared": true, "index": 3, "clear_index": 3}', 'clear');
select pg_temp.expect(
    a2_reclaim(session => 'shop-1'), '{"deleted": 2, "done": true}', 'reclaim');
select pg_temp.expect(
    (select jsonb_agg(to_jsonb(e)) from a2_read(session => 'shop-1') e),
    '[{"index": 3, "type": "a2.cleared"}]', 'read after the clear');
select pg_temp.expect(
    to_jsonb((select count(*) from a2_events where session_id = 'shop-1' and idx < 3)),
    '0', 'nothing below the marker');

-- 7. A log consumer: audit reads every "order.*" event of its session's
-- log. A claim with wake_logs starts its cursor at the first such event
-- and claims it in one call; an a2_batch claim does the same.
select pg_temp.expect(
    a2_append(session => 'feed-1',
              events => '[{"type": "order.placed"}, {"type": "note"}, {"type": "order.paid"}]',
              now_ms => 13000),
    '{"outcome": "appended"}', 'append to a log');
select pg_temp.expect(
    a2_claim(session => 'feed-1', holder => 'a1', ttl_ms => 30000,
             consumers => '[{"name": "audit", "log": {"lane": "main",
                              "types": ["order.placed", "order.paid"], "backfill": true}}]',
             now_ms => 14000),
    '{"outcome": "settled"}', 'a log claim without wake_logs starts no cursor');
select pg_temp.expect(
    a2_claim(session => 'feed-1', holder => 'a1', ttl_ms => 30000,
             consumers => '[{"name": "audit", "log": {"lane": "main",
                              "types": ["order.placed", "order.paid"], "backfill": true}}]',
             now_ms => 14000, wake_logs => true),
    '{"outcome": "claimed", "heads": [{"consumer": "audit", "lane": "main", "index": 1,
                                       "attempt": 1, "type": "order.placed"}]}',
    'a log claim with wake_logs');
select pg_temp.expect(
    a2_complete(session => 'feed-1', consumer => 'audit', lane => 'main', index => 1,
                attempt => 1,
                consumers => '[{"name": "audit", "log": {"lane": "main",
                                 "types": ["order.placed", "order.paid"]}}]',
                now_ms => 15000),
    '{"outcome": "completed"}', 'complete the log head');
select pg_temp.expect(
    a2_batch('[{"op": "claim", "session": "feed-1", "holder": "a1", "ttl_ms": 30000,
                "consumers": [{"name": "audit", "log": {"lane": "main",
                               "types": ["order.placed", "order.paid"]}}],
                "now_ms": 16000, "wake_logs": true}]'),
    '[{"outcome": "claimed", "heads": [{"consumer": "audit", "index": 3,
                                        "type": "order.paid"}]}]',
    'a batch claim with wake_logs skips the other type');

-- 7b. A log consumer without backfill that a log wake-up names (log_from:
-- the event the wake-up named) starts at that event; without log_from it
-- starts after the session's head. In a claim with wake_logs, and in a
-- batch's claim, the same.
select pg_temp.expect(
    a2_append(session => 'feed-2',
              events => '[{"type": "order.placed"}, {"type": "note"}, {"type": "order.placed"}]',
              now_ms => 16100),
    '{"outcome": "appended"}', 'append to a second log');
select pg_temp.expect(
    a2_wake_log(session => 'feed-2', consumer => 'live', lane => 'main',
                types => '["order.placed"]', log_from => 3),
    '{"head": 3, "cursor": {"consumer": "live", "position": 2, "head": 3}}',
    'wake_log from the event a wake-up named');
select pg_temp.expect(
    a2_wake_log(session => 'feed-2', consumer => 'late', lane => 'main',
                types => '["order.placed"]'),
    '{"head": 3, "cursor": {"consumer": "late", "position": 3, "head": null}}',
    'wake_log without log_from starts after the head');
select pg_temp.expect(
    a2_claim(session => 'feed-2', holder => 'a2', ttl_ms => 30000,
             consumers => '[{"name": "late2", "log": {"lane": "main", "types": ["order.placed"]}}]',
             now_ms => 16200, wake_logs => true, log_from => 1),
    '{"outcome": "claimed", "heads": [{"consumer": "late2", "index": 1, "type": "order.placed"}]}',
    'a claim with wake_logs from log_from');
select pg_temp.expect(
    a2_batch('[{"op": "claim", "session": "feed-2", "holder": "a3", "ttl_ms": 30000,
                "consumers": [{"name": "late3", "log": {"lane": "main", "types": ["note"]}}],
                "now_ms": 16300, "wake_logs": true, "log_from": 2}]'),
    '[{"outcome": "claimed", "heads": [{"consumer": "late3", "index": 2, "type": "note"}]}]',
    'a batch claim with wake_logs from log_from');

-- 8. A FIFO lane worked through with its completions: each completion and
-- the claim of its lane's next head (lanes) in one a2_batch, one commit a
-- head; a claim with lanes takes nothing of other cursors.
select pg_temp.expect(
    a2_append(session => 'fifo-1',
              events => '[{"type": "step", "targets": [{"consumer": "ship", "lane": "q"},
                                                      {"consumer": "bill"}]},
                          {"type": "step", "targets": [{"consumer": "ship", "lane": "q"}]}]',
              now_ms => 17000),
    '{"outcome": "appended"}', 'append to a lane');
select pg_temp.expect(
    a2_claim(session => 'fifo-1', holder => 'f1', ttl_ms => 30000,
             lanes => '[{"consumer": "ship", "lane": "q"}]', now_ms => 18000),
    '{"outcome": "claimed", "heads": [{"consumer": "ship", "lane": "q", "index": 1}]}',
    'a claim of one lane');
select pg_temp.expect(
    a2_claim(session => 'fifo-1', holder => 'f1', ttl_ms => 30000,
             lanes => '[{"consumer": "ship", "lane": "q"}]', now_ms => 18000),
    '{"outcome": "busy", "retry_at": 48000}',
    'the lane is held: nothing more of it, and not bill''s head');
select pg_temp.expect(
    a2_batch('[{"op": "complete", "session": "fifo-1", "consumer": "ship", "lane": "q",
                "index": 1, "attempt": 1, "now_ms": 19000},
               {"op": "claim", "session": "fifo-1", "holder": "f1", "ttl_ms": 30000,
                "lanes": [{"consumer": "ship", "lane": "q"}], "now_ms": 19000}]'),
    '[{"outcome": "completed"},
      {"outcome": "claimed", "heads": [{"consumer": "ship", "lane": "q", "index": 2,
                                        "attempt": 1, "holder": "f1"}]}]',
    'complete and claim the lane''s next head in one batch');
select pg_temp.expect(
    a2_batch('[{"op": "complete", "session": "fifo-1", "consumer": "ship", "lane": "q",
                "index": 2, "attempt": 1, "now_ms": 20000},
               {"op": "claim", "session": "fifo-1", "holder": "f1", "ttl_ms": 30000,
                "lanes": [{"consumer": "ship", "lane": "q"}], "now_ms": 20000}]'),
    '[{"outcome": "completed"}, {"outcome": "settled"}]',
    'the lane''s last head: the claim finds nothing');
select pg_temp.expect(
    a2_claim(session => 'fifo-1', holder => 'f1', ttl_ms => 30000, now_ms => 21000),
    '{"outcome": "claimed", "heads": [{"consumer": "bill", "index": 1}]}',
    'bill''s head was left for a claim without lanes');
