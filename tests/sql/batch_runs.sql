-- a2_batch settles a run of concurrent-cursor completions together
-- (a2__complete_held); each result, and every row it leaves, must be what
-- the same operations give one at a time through a2_complete. Two sessions
-- are seeded alike ("one-<n>" and "run-<n>"): the first gets each operation
-- in a batch of its own, the second all of them in one batch; then the
-- results and the rows (cursors, lane events, snapshot pins and history)
-- are compared. Run by tests/integration/test_batch_runs.sh (psql -v
-- ON_ERROR_STOP=1); a step prints "<step>: ok".

\ir expect.sql

-- seed(s): events 1..6 for consumer c (concurrent cursors), 7 and 8 for
-- lane x of consumer l, 9 for c; every head claimed at 1000 by h; a
-- snapshot pinned on c's head 2 (and an unpinned older version kept in the
-- history by a pin on head 3); head 6 completed before the batch (its
-- retry is a replay); head 9 failed once and claimed again (attempt 2).
create function pg_temp.seed(s text) returns void language plpgsql as $$
begin
    perform a2_append(session => s, now_ms => 500, events => (
        select jsonb_agg(jsonb_build_object('type', 'job', 'id', 'e' || i, 'payload', i,
                                            'targets', case when i in (7, 8)
                                                            then '[{"consumer": "l", "lane": "x"}]'
                                                            else '[{"consumer": "c"}]' end::jsonb)
                         order by i)
          from generate_series(1, 9) i));
    perform a2_claim(session => s, holder => 'h', ttl_ms => 60000, now_ms => 1000);
    perform a2_write_state(session => s, reducer => 'r', now_ms => 1100, writes =>
        '[{"up_to_index": 1, "state": {"v": 1}, "pins": [{"consumer": "c", "index": 3}]},
          {"up_to_index": 2, "state": {"v": 2}, "pins": [{"consumer": "c", "index": 2}]}]');
    perform a2_complete(session => s, consumer => 'c', lane => null, index => 6, attempt => 1,
                        now_ms => 1200);
    perform a2_fail(session => s, consumer => 'c', lane => null, index => 9, attempt => 1,
                    error => 'boom', max_failures => 5, retry_after_ms => 0, now_ms => 1300);
    perform a2_claim(session => s, holder => 'h', ttl_ms => 60000, now_ms => 1400);
end $$;

-- ops(s): the operations, in order: held heads, a stale attempt (3), the
-- same head twice (4: completed, then a replay), a lane completion between
-- them (which ends the run), served consumers named, a replay of a head
-- completed before (6), a head at its second attempt (9) and its stale
-- first one.
create function pg_temp.ops(s text) returns jsonb language sql as $$
select jsonb_agg(o || jsonb_build_object('session', s) order by n)
  from (values
    (1, '{"op": "complete", "consumer": "c", "lane": null, "index": 1, "attempt": 1, "now_ms": 2000}'::jsonb),
    (2, '{"op": "complete", "consumer": "c", "index": 2, "attempt": 1, "events": []}'),
    (3, '{"op": "complete", "consumer": "c", "index": 3, "attempt": 2}'),
    (4, '{"op": "complete", "consumer": "c", "index": 4, "attempt": 1, "text_payloads": true}'),
    (5, '{"op": "complete", "consumer": "c", "index": 4, "attempt": 1}'),
    (6, '{"op": "complete", "consumer": "l", "lane": "x", "index": 7, "attempt": 1}'),
    (7, '{"op": "complete", "consumer": "c", "index": 5, "attempt": 1, "consumers": ["c", "l"]}'),
    (8, '{"op": "complete", "consumer": "c", "index": 6, "attempt": 1}'),
    (9, '{"op": "complete", "consumer": "c", "index": 9, "attempt": 1}'),
    (10, '{"op": "complete", "consumer": "c", "index": 9, "attempt": 2, "consumers": null}'),
    (11, '{"op": "complete", "consumer": "c", "index": 3, "attempt": 1}')) v(n, o)
$$;

-- rows(s): what the session's rows hold, the session's name left out.
create function pg_temp.rows(s text) returns jsonb language sql as $$
select jsonb_build_object(
    'cursors', (select jsonb_agg(to_jsonb(c) - 'session_id' order by c.cursor_key, c.consumer, c.epoch)
                  from a2_cursors c where c.session_id = s),
    'lanes', (select jsonb_agg(to_jsonb(l) - 'session_id' order by l.consumer, l.lane, l.idx)
                from a2_lane_events l where l.session_id = s),
    'pins', (select jsonb_agg(to_jsonb(p) - 'session_id' order by p.event_index, p.reducer_name, p.up_to_index)
               from a2_snapshot_pins p where p.session_id = s),
    'history', (select jsonb_agg(to_jsonb(h) - 'session_id' - 'written_at' order by h.reducer_name, h.up_to_index)
                  from a2_snapshot_history h where h.session_id = s))
$$;

-- same(a, b, step): a and b equal, or an error showing both.
create function pg_temp.same(a jsonb, b jsonb, step text) returns text language plpgsql as $$
begin
    if a is distinct from b then
        raise exception 'step "%": one at a time %, in one batch %', step, a, b;
    end if;
    return step || ': ok';
end $$;

select pg_temp.seed('one-1');
select pg_temp.seed('run-1');
select pg_temp.expect(pg_temp.rows('one-1'),
                      '{"pins": [{"event_index": 2}, {"event_index": 3}],
                        "history": [{"up_to_index": 1}, {"up_to_index": 2}]}',
                      'seeded with pins');

-- One operation a batch, then all of them in one.
create temp table one_results as
select n, a2_batch(jsonb_build_array(o)) -> 0 as result
  from jsonb_array_elements(pg_temp.ops('one-1')) with ordinality x(o, n);
create temp table run_results as
select n, r as result
  from jsonb_array_elements(a2_batch(pg_temp.ops('run-1'))) with ordinality x(r, n);

select pg_temp.same((select jsonb_agg(result order by n) from one_results),
                    (select jsonb_agg(result order by n) from run_results), 'results');
select pg_temp.same(pg_temp.rows('one-1'), pg_temp.rows('run-1'), 'rows');
-- The results are those a2_complete documents.
select pg_temp.expect((select jsonb_agg(result order by n) from run_results),
                      '[{"outcome": "completed", "events": []},
                        {"outcome": "completed", "events": []},
                        {"outcome": "superseded"},
                        {"outcome": "completed", "events": []},
                        {"outcome": "completed", "replayed": true, "events": []},
                        {"outcome": "completed", "events": []},
                        {"outcome": "completed", "events": []},
                        {"outcome": "completed", "replayed": true, "events": []},
                        {"outcome": "superseded"},
                        {"outcome": "completed", "events": []},
                        {"outcome": "superseded"}]', 'outcomes');
-- Every held head moved on (3 by its last operation); the pins of heads 2
-- and 3 are gone, and with them the history they kept.
select pg_temp.expect(pg_temp.rows('run-1'),
                      '{"cursors": [{"cursor_key": "#1", "head": null, "position": 1,
                                     "completed_attempt": 1, "returned_event_ids": []},
                                    {"cursor_key": "#2", "head": null},
                                    {"cursor_key": "#3", "head": null, "completed_attempt": 1},
                                    {"cursor_key": "#9", "head": null, "completed_attempt": 2},
                                    {"cursor_key": "lane:x", "head": 8}]}',
                      'heads moved on');
select pg_temp.expect(pg_temp.rows('run-1') - 'cursors' - 'lanes', '{"pins": null, "history": null}',
                      'pins released');
select pg_temp.expect(to_jsonb((select count(*) from a2_cursors
                                 where session_id = 'run-1' and head is not null)),
                      '1', 'only the lane has a head');

-- Below a clear marker every completion is superseded, one at a time or
-- together.
select pg_temp.seed('one-2');
select pg_temp.seed('run-2');
select a2_clear(session => 'one-2', now_ms => 3000) is not null;
select a2_clear(session => 'run-2', now_ms => 3000) is not null;
delete from one_results;
insert into one_results
select n, a2_batch(jsonb_build_array(o)) -> 0
  from jsonb_array_elements(pg_temp.ops('one-2')) with ordinality x(o, n)
 where (o->>'lane') is null;
select pg_temp.same((select jsonb_agg(result order by n) from one_results),
                    (select jsonb_agg(r) from jsonb_array_elements(a2_batch(
                        (select jsonb_agg(o) from jsonb_array_elements(pg_temp.ops('run-2')) o
                          where (o->>'lane') is null))) r),
                    'after a clear');
select pg_temp.expect((select jsonb_agg(result) from one_results), '[{"outcome": "superseded"}]',
                      'superseded after a clear');
select pg_temp.same(pg_temp.rows('one-2'), pg_temp.rows('run-2'), 'rows after a clear');

-- A refused operation anywhere in the batch refuses all of it, with the
-- error a2_complete gives, and leaves every row as it was.
select pg_temp.seed('run-3');
create temp table before as select pg_temp.rows('run-3') as r;
-- refused(ops): a2_batch of run-3's held head 1 completed, then ops (each
-- a completion of consumer c in run-3 but for the keys it gives); the error
-- it raised, or 'accepted'.
create function pg_temp.refused(ops jsonb) returns text language plpgsql as $$
begin
    perform a2_batch('[{"op": "complete", "session": "run-3", "consumer": "c", "index": 1,
                        "attempt": 1}]'::jsonb
                     || (select jsonb_agg('{"op": "complete", "session": "run-3",
                                            "consumer": "c"}'::jsonb || o order by n)
                           from jsonb_array_elements(ops) with ordinality x(o, n)));
    return 'accepted';
exception when others then
    return sqlstate || ' ' || sqlerrm;
end $$;
select pg_temp.expect(to_jsonb(pg_temp.refused('[{"index": 99, "attempt": 1},
                                                 {"index": 2, "attempt": 1}]')),
                      to_jsonb('A2007 NO_SUCH_EVENT: no event at index 99 in session "run-3"'::text),
                      'no such event');
select pg_temp.expect(to_jsonb(pg_temp.refused('[{"index": 2, "attempt": 1, "consumers": "c"}]')),
                      to_jsonb('A2001 INVALID_ARGUMENT: consumers must be a JSON array or null'::text),
                      'consumers not an array');
select pg_temp.expect(to_jsonb(pg_temp.refused('[{"index": 2.5, "attempt": 1},
                                                 {"index": 4, "attempt": 1}]')),
                      to_jsonb('A2001 INVALID_ARGUMENT: index must be a whole number'::text),
                      'index not whole');
select pg_temp.expect(to_jsonb(pg_temp.refused('[{"consumer": "", "index": 2, "attempt": 1}]')),
                      to_jsonb('A2001 INVALID_ARGUMENT: consumer must not be empty'::text),
                      'empty consumer');
select pg_temp.same((select r from before), pg_temp.rows('run-3'), 'rows after refusals');
