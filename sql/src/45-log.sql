-- a2_wake_log: a log consumer's cursor brought up to date.

-- The state a2_wake_log decides on, read in one statement: the session's
-- head and clear marker, the cursor's latest run (its columns null when it
-- has none), where a new run would start, whether the run's types differ
-- from types, and the next head of a new run (null while the run is busy).
-- A cursor's first run starts at the beginning of the log with backfill,
-- else before log_from (the event a log wake-up named; null: the head).
drop function if exists a2__log_state(text, text, text, jsonb, boolean);
create or replace function a2__log_state(session text, consumer text, cursor_key text,
                                         types jsonb, backfill boolean, log_from bigint,
                                         out session_head bigint, out clear_index bigint,
                                         out run a2_cursors, out start bigint,
                                         out retyped boolean, out next_head bigint)
language plpgsql
stable
as $fn$
#variable_conflict use_column
declare
    v_session text := a2__log_state.session;
begin
    select coalesce(max(e.idx), 0),
           coalesce((select c.clear_index from a2_clears c where c.session_id = v_session), 0)
      into session_head, clear_index
      from a2_events e where e.session_id = v_session;
    select cur.* into run from a2_cursors cur
     where cur.session_id = v_session and cur.cursor_key = a2__log_state.cursor_key
       and cur.consumer = a2__log_state.consumer
     order by cur.epoch desc limit 1;
    start := case when run.epoch is not null then greatest(run.position, clear_index)
                  when a2__log_state.backfill then clear_index
                  when a2__log_state.log_from > 0
                      then greatest(least(session_head, a2__log_state.log_from - 1), clear_index)
                  else session_head end;
    retyped := run.types is distinct from a2__log_state.types;
    next_head := case when run.head > clear_index then null
                      else a2__next_log_head(v_session, a2__log_state.types, start) end;
end
$fn$;

-- a2_wake_log(session, consumer, lane, types, backfill, after_xid, wait_ms,
--             log_from)
--
-- Brings log consumer `consumer`'s cursor ("lane:<lane>") up to date:
-- starts a run at the next event of its types (a JSON array; null: every
-- type) when it has none running, or retypes a kept run. A new cursor
-- starts at the beginning of the log with backfill, else at log_from (the
-- index a `log` wake-up named: the event that woke its consumer is its
-- first; the earliest of several), else after the session's head. Result:
--   {"cursor": <cursor, as a2_cursors reports it>, "head": the session's
--    head index}
-- A consumer with no cursor and nothing after the latest clear stays
-- without one: the cursor reported is idle at the head (epoch null).
--
-- after_xid, wait_ms: as for a2_claim, the transaction a log message came
-- from, waited for (at most wait_ms) before the state is read; when it is
-- still not visible the call goes on, and the claim after it says so.
--
-- Locks: the session's advisory lock, when the run must change (the state
-- is read once before it, so an unchanged cursor costs no lock); a kept
-- run is retyped with skip locked (the cursor reported is the run as read),
-- and an idle run retired with skip locked, never waited for.
drop function if exists a2_wake_log(text, text, text, jsonb, boolean);
drop function if exists a2_wake_log(text, text, text, jsonb, boolean, bigint, bigint);
create or replace function a2_wake_log(session text, consumer text, lane text,
                                       types jsonb default null, backfill boolean default false,
                                       after_xid bigint default null,
                                       wait_ms bigint default 1000,
                                       log_from bigint default null)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_session text := a2_wake_log.session;
    v_consumer text := a2_wake_log.consumer;
    v_lane text := a2_wake_log.lane;
    v_types jsonb := nullif(a2_wake_log.types, 'null');
    v_backfill boolean := coalesce(a2_wake_log.backfill, false);
begin
    perform a2__writable('a2_wake_log');
    perform a2__name('session', v_session);
    perform a2__name('consumer', v_consumer);
    perform a2__name('lane', v_lane);
    perform a2__served(jsonb_build_array(jsonb_build_object(
        'name', v_consumer, 'log', jsonb_build_object('lane', v_lane, 'types', v_types))));
    if a2_wake_log.log_from < 0 then
        perform a2__fail('INVALID_ARGUMENT', 'log_from must not be negative');
    end if;
    perform a2__await_xid(v_session, a2_wake_log.after_xid, a2_wake_log.wait_ms);
    return a2__wake_log(v_session, v_consumer, v_lane, v_types, v_backfill,
                        a2_wake_log.log_from);
end
$fn$;

-- a2_wake_log's work once its arguments are checked and its commit waited
-- for (a2_claim calls it for wake_logs). Locks: a2_wake_log's, above.
-- Earlier schemas' version (five parameters, without log_from, some of
-- them named otherwise) is dropped first.
do $$
declare
    f regprocedure := to_regprocedure('a2__wake_log(text, text, text, jsonb, boolean)');
begin
    if f is not null then
        execute format('drop function %s', f);
    end if;
end
$$;
create or replace function a2__wake_log(session text, consumer text, lane text, types jsonb,
                                        backfill boolean, log_from bigint)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_session text := a2__wake_log.session;
    v_consumer text := a2__wake_log.consumer;
    v_lane text := a2__wake_log.lane;
    v_key text;
    v_types jsonb := a2__wake_log.types;
    v_backfill boolean := a2__wake_log.backfill;
    st record;
    v_started a2_cursors;
    v_hold bigint;
begin
    v_key := 'lane:' || v_lane;

    for pass in 1..2 loop
        select * into st from a2__log_state(v_session, v_consumer, v_key, v_types, v_backfill,
                                            a2__wake_log.log_from);
        if (st.run).epoch is null and st.session_head = st.clear_index then
            return jsonb_build_object(
                'cursor', jsonb_build_object(
                    'consumer', v_consumer, 'lane', v_lane, 'cursor_key', v_key, 'kind', 'log',
                    'epoch', null, 'position', st.session_head, 'head', null, 'types', v_types,
                    'attempt', 0, 'failure_count', 0),
                'head', st.session_head);
        end if;
        if (st.run).epoch is not null and st.next_head is null and not st.retyped then
            return jsonb_build_object('cursor', a2__cursor_json(st.run, st.clear_index),
                                      'head', st.session_head);
        end if;
        exit when pass = 2;
        -- The run changes: again under the session lock.
        perform pg_advisory_xact_lock(hashtext(v_session));
    end loop;

    if (st.run).epoch is not null and st.next_head is null then
        update a2_cursors cur set types = v_types
         where cur.ctid = (select held.ctid from a2_cursors held
                            where held.session_id = v_session and held.cursor_key = v_key
                              and held.consumer = v_consumer and held.epoch = (st.run).epoch
                              and held.types is distinct from v_types
                              for update skip locked);
        return jsonb_build_object('cursor', a2__cursor_json(st.run, st.clear_index),
                                  'head', st.session_head);
    end if;
    if st.clear_index > 0 then
        perform a2__announce_clear(v_session);
    end if;
    -- a delayed first head is held until its time
    select a2__hold(ev.not_before, a2__now_ms()) into v_hold from a2_events ev
     where ev.session_id = v_session and ev.idx = st.next_head;
    with idle as materialized (
        select cur.ctid from a2_cursors cur
         where cur.session_id = v_session and cur.cursor_key = v_key
           and cur.consumer = v_consumer
           and (cur.head is null or cur.head <= st.clear_index)
           for update of cur skip locked),
    retired as (delete from a2_cursors old using idle where old.ctid = idle.ctid)
    insert into a2_cursors (session_id, consumer, cursor_key, epoch, lane, kind, position,
                            head, types, claim_expires_at)
    values (v_session, v_consumer, v_key, coalesce(st.next_head, st.start), v_lane, 'log',
            st.start, st.next_head, v_types, v_hold)
    returning * into v_started;
    return jsonb_build_object('cursor', a2__cursor_json(v_started, st.clear_index),
                              'head', st.session_head);
end
$fn$;
