-- Seeds dead letters straight into the a2 tables, for the plan test and
-- bench/ops: :sessions sessions ('dl-00001' ...) of :per events each, every
-- event a dead letter of one consumer's concurrent cursor ("billing" for
-- odd indexes, "mail" for even ones), failed one attempt with an error that
-- names its kind ("timeout" for every third, else "refused"), failed_at
-- spread over the hour after :t0 (epoch ms). Run with
--   psql -v sessions=10000 -v per=10 -v t0=1800000000000 -f dead_letters_seed.sql
-- in a database with the schema and no other a2 rows.
\set ON_ERROR_STOP 1
begin;
insert into a2_events (session_id, idx, event_type, payload, event_id, created_at)
select format('dl-%s', lpad(s::text, 5, '0')), i,
       case when i % 2 = 1 then 'invoice.send' else 'mail.send' end,
       jsonb_build_object('n', i), format('e-%s', i), :t0 - 60000
  from generate_series(1, :sessions) s, generate_series(1, :per) i;
insert into a2_cursors (session_id, consumer, cursor_key, epoch, kind, position, head,
                        attempt_count, first_claimed_at, last_claimed_at, failure_count,
                        last_failed_at, last_failed_attempt, last_error, failed_at)
select format('dl-%s', lpad(s::text, 5, '0')),
       case when i % 2 = 1 then 'billing' else 'mail' end,
       '#' || i, i, 'event', 0, i, 1, :t0, :t0, 1,
       :t0 + ((s * :per + i) * 7919) % 3600000, 1,
       case when (s + i) % 3 = 0 then 'upstream timeout after 30 s' else 'connection refused' end,
       :t0 + ((s * :per + i) * 7919) % 3600000
  from generate_series(1, :sessions) s, generate_series(1, :per) i;
commit;
analyze a2_events;
analyze a2_cursors;
