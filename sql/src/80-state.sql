-- Reducer snapshots: a2_write_state with pins on live heads, a2_read_state
-- of the latest or a pinned version.

-- a2_write_state(session, reducer, writes, now_ms)
--
-- Stores the versions of reducer's state in writes ([{"up_to_index",
-- "state" (or "state_text": its JSON text), "pins": [{"consumer", "lane",
-- "index"}]}], 1..1000 writes,
-- distinct indexes, at most 10000 pins): the newest becomes the latest
-- snapshot unless a newer one is stored; a version is kept in the history
-- when one of its pins is accepted. A pin names a head that read the
-- version, and is accepted only while that head is live (its cursor's head,
-- not dead-lettered, above the clear marker). Result:
--   {"up_to_index": the latest snapshot's after the call,
--    "replaced_latest", "pins_accepted", "pins_refused"}
-- Errors: SESSION_CLEARED (a write below the clear marker: nothing
-- written), INVALID_ARGUMENT.
--
-- Locks: the pinned heads' cursor rows for share, in primary-key order,
-- before the session's advisory lock (as append's fence: a completion holds
-- its row while it waits for the session lock), then the session lock.
create or replace function a2_write_state(session text, reducer text, writes jsonb,
                                          now_ms bigint default null)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_session text := a2_write_state.session;
    v_reducer text := a2_write_state.reducer;
    v_now bigint := coalesce(a2_write_state.now_ms, a2__now_ms());
    v_writes jsonb;
    v_pins jsonb;
    v_clear bigint;
    v_dup boolean;
    v_out jsonb;
begin
    perform a2__writable('a2_write_state');
    perform a2__name('session', v_session);
    perform a2__name('reducer', v_reducer);
    if a2_write_state.writes is null or jsonb_typeof(a2_write_state.writes) <> 'array'
       or jsonb_array_length(a2_write_state.writes) = 0 then
        perform a2__fail('INVALID_ARGUMENT', 'write_state needs at least one write');
    end if;
    if jsonb_array_length(a2_write_state.writes) > 1000 then
        perform a2__fail('INVALID_ARGUMENT', 'more than 1000 writes in one call');
    end if;
    select jsonb_agg(jsonb_build_object('i', w.i, 's', w.s)),
           count(distinct w.i) < count(*)
      into v_writes, v_dup
      from (select a2__json_int('a write''s up_to_index', x->'up_to_index') as i,
                   coalesce(x->'state', (x->>'state_text')::jsonb, 'null') as s,
                   case when jsonb_typeof(x) <> 'object' or not (x ? 'up_to_index')
                        then a2__fail('INVALID_ARGUMENT', 'a write needs an up_to_index') end
              from jsonb_array_elements(a2_write_state.writes) x) w;
    if v_dup then
        perform a2__fail('INVALID_ARGUMENT', 'two writes with the same up_to_index');
    end if;
    if exists (select 1 from jsonb_to_recordset(v_writes) as w(i bigint) where w.i < 0) then
        perform a2__fail('INVALID_ARGUMENT', 'a write''s up_to_index must not be negative');
    end if;
    select jsonb_agg(jsonb_build_object(
               'consumer', a2__name('a pin''s consumer', p->>'consumer'),
               'cursor_key', a2__cursor_key(a2__opt_name('a pin''s lane', p->>'lane'),
                                            a2__json_int('a pin''s index', p->'index')),
               'idx', case when a2__json_int('a pin''s index', p->'index') >= 1
                           then (p->>'index')::bigint
                           else a2__fail('INVALID_ARGUMENT', 'a pin''s index must be at least 1')::int
                      end,
               'up_to', (x->>'up_to_index')::bigint))
      into v_pins
      from jsonb_array_elements(a2_write_state.writes) x
     cross join lateral jsonb_array_elements(case when jsonb_typeof(x->'pins') = 'array'
                                                  then x->'pins' else '[]' end) p;
    if jsonb_array_length(coalesce(v_pins, '[]')) > 10000 then
        perform a2__fail('INVALID_ARGUMENT', 'more than 10000 pins in one call');
    end if;

    if v_pins is not null then
        perform 1
          from a2_cursors cur
         where cur.session_id = v_session and cur.failed_at is null
           and exists (select 1 from jsonb_to_recordset(v_pins)
                                     as req(consumer text, cursor_key text, idx bigint)
                        where req.consumer = cur.consumer and req.cursor_key = cur.cursor_key
                          and req.idx = cur.head)
         order by cur.cursor_key, cur.consumer, cur.epoch
           for share of cur;
    end if;

    perform pg_advisory_xact_lock(hashtext(v_session));

    v_clear := coalesce((select c.clear_index from a2_clears c where c.session_id = v_session), 0);
    if exists (select 1 from jsonb_to_recordset(v_writes) as w(i bigint) where w.i < v_clear) then
        perform a2__fail('SESSION_CLEARED',
                         format('a write lies below the session''s clear marker %s', v_clear));
    end if;
    with req as materialized (
        select distinct p.consumer, p.cursor_key, p.idx, p.up_to
          from jsonb_to_recordset(coalesce(v_pins, '[]'))
               as p(consumer text, cursor_key text, idx bigint, up_to bigint)),
    live as materialized (
        select cur.consumer, cur.cursor_key, cur.head
          from a2_cursors cur
         where cur.session_id = v_session and cur.head > v_clear and cur.failed_at is null
           and exists (select 1 from req where req.consumer = cur.consumer
                                           and req.cursor_key = cur.cursor_key
                                           and req.idx = cur.head)
         order by cur.cursor_key, cur.consumer, cur.epoch
           for share of cur),
    accepted as materialized (
        select req.* from req
         where exists (select 1 from live where live.consumer = req.consumer
                                            and live.cursor_key = req.cursor_key
                                            and live.head = req.idx)),
    w as materialized (
        select w.i, coalesce(w.s, 'null') as s
          from jsonb_to_recordset(v_writes) as w(i bigint, s jsonb)),
    pinned as (
        insert into a2_snapshot_pins (session_id, event_index, consumer, cursor_key,
                                      reducer_name, up_to_index)
        select v_session, accepted.idx, accepted.consumer, accepted.cursor_key, v_reducer,
               accepted.up_to
          from accepted
        on conflict do nothing
        returning 1),
    kept as (
        insert into a2_snapshot_history (session_id, reducer_name, up_to_index, state, written_at)
        select v_session, v_reducer, w.i, w.s, v_now
          from w where exists (select 1 from accepted where accepted.up_to = w.i)
        on conflict (session_id, reducer_name, up_to_index)
        do update set state = excluded.state, written_at = excluded.written_at
        returning 1),
    latest as (
        insert into a2_snapshots (session_id, reducer_name, up_to_index, state, written_at)
        select v_session, v_reducer, newest.i, newest.s, v_now
          from (select * from w order by w.i desc limit 1) newest
        on conflict (session_id, reducer_name)
        do update set up_to_index = excluded.up_to_index, state = excluded.state,
                      written_at = excluded.written_at
              where a2_snapshots.up_to_index <= excluded.up_to_index
        returning up_to_index)
    select jsonb_build_object(
               'up_to_index', coalesce((select latest.up_to_index from latest),
                                       (select s.up_to_index from a2_snapshots s
                                         where s.session_id = v_session
                                           and s.reducer_name = v_reducer)),
               'replaced_latest', exists (select 1 from latest),
               'pins_accepted', (select count(*) from accepted),
               'pins_refused', (select count(*) from req) - (select count(*) from accepted))
      into v_out;
    return v_out;
end
$fn$;

-- a2_read_state(session, reducer, at_index): reducer's state in session:
-- with at_index null, the latest snapshot; otherwise the newest version
-- (latest, or kept in the history) with up_to_index <= at_index. No row when
-- there is none, or when it lies below the session's clear marker.
create or replace function a2_read_state(session text, reducer text,
                                         at_index bigint default null)
returns table (up_to_index bigint, state jsonb, written_at bigint)
language plpgsql
stable
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_session text := a2__name('session', a2_read_state.session);
    v_reducer text := a2__name('reducer', a2_read_state.reducer);
    v_at bigint := a2_read_state.at_index;
begin
    if v_at < 0 then
        perform a2__fail('INVALID_ARGUMENT', 'at_index must not be negative');
    end if;
    return query
        select v.up_to_index, v.state, v.written_at
          from (select s.up_to_index, s.state, s.written_at from a2_snapshots s
                 where s.session_id = v_session and s.reducer_name = v_reducer
                   and (v_at is null or s.up_to_index <= v_at)
                union all
                select h.up_to_index, h.state, h.written_at from a2_snapshot_history h
                 where h.session_id = v_session and h.reducer_name = v_reducer
                   and v_at is not null and h.up_to_index <= v_at) v
         where v.up_to_index >= coalesce((select c.clear_index from a2_clears c
                                           where c.session_id = v_session), 0)
         order by v.up_to_index desc
         limit 1;
end
$fn$;
