-- a2_claim and a2_renew: leases on heads.

-- a2_claim(session, holder, ttl_ms, expires_at, consumers, exclude,
--          max_failures, through, now_ms, text_payloads, after_xid, wait_ms,
--          wake_logs, lanes, log_from)
--
-- Claims every eligible head of the session for holder, until now_ms +
-- ttl_ms (or expires_at): unclaimed heads, and lapsed claims (a takeover:
-- attempt + 1, failure + 1). A takeover that spends the last of
-- max_failures (null or 0: no limit) dead-letters the head instead.
-- consumers: the served consumers (null: every one); exclude: heads not to
-- take ([{"consumer", "lane", "index"}]); through: only heads at or below
-- that index; lanes: only the heads of these lanes ([{"consumer", "lane"}],
-- a lane consumer's or a log consumer's; null: every cursor), as a
-- completion claims its lane's next head in the same transaction. A lane
-- runs one head at a time, in index order. Results:
--   {"outcome": "claimed", "heads": [<head>], "session_head", "dead_lettered": [<head>]}
--   {"outcome": "busy", "retry_at", "dead_lettered"}: a live claim or a
--     retry hold blocks an eligible head until retry_at
--   {"outcome": "settled", "dead_lettered"}: nothing to run
-- Heads are ordered by index, then consumer; a head's "attempt" is the
-- attempt it now runs.
--
-- after_xid: the transaction a wake-up came from (its "xid"). A wake-up
-- can reach the worker before its commit is visible to new snapshots; the
-- claim first waits, at most wait_ms (default 1000), for that commit, and
-- moves now_ms and expires_at on by the time it waited. When it is still
-- not visible then, the result is
--   {"outcome": "busy", "retry_at": now_ms, "waiting_for": after_xid}
-- and the caller claims again with the same after_xid.
--
-- wake_logs: first bring the cursors of the log consumers among consumers
-- up to date, as a2_wake_log does (after the wait for after_xid), in the
-- claim's transaction: a woken log consumer's one call and one commit.
-- log_from: as a2_wake_log's, the earliest index the log wake-ups named.
--
-- Locks: the eligible cursor rows, for update, in primary-key order
-- (cursor_key, consumer, epoch), which no update changes, so racing claims
-- never wait on each other in a cycle; no session lock, but for wake_logs
-- a2_wake_log's (the session lock when a log cursor's run must change),
-- taken before any cursor row. A head another claim is taking is waited
-- for and re-checked in its new state.
drop function if exists a2_claim(text, text, bigint, bigint, jsonb, jsonb, integer, bigint,
                                  bigint, boolean);
drop function if exists a2_claim(text, text, bigint, bigint, jsonb, jsonb, integer, bigint,
                                  bigint, boolean, bigint, bigint);
drop function if exists a2_claim(text, text, bigint, bigint, jsonb, jsonb, integer, bigint,
                                  bigint, boolean, bigint, bigint, boolean);
drop function if exists a2_claim(text, text, bigint, bigint, jsonb, jsonb, integer, bigint,
                                  bigint, boolean, bigint, bigint, boolean, jsonb);
create or replace function a2_claim(session text, holder text, ttl_ms bigint default null,
                                    expires_at bigint default null, consumers jsonb default null,
                                    exclude jsonb default null, max_failures integer default null,
                                    through bigint default null, now_ms bigint default null,
                                    text_payloads boolean default false,
                                    after_xid bigint default null, wait_ms bigint default 1000,
                                    wake_logs boolean default false, lanes jsonb default null,
                                    log_from bigint default null)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_session text := a2_claim.session;
    v_holder text := a2_claim.holder;
    v_now bigint := coalesce(a2_claim.now_ms, a2__now_ms());
    v_expires bigint;
    v_max integer := nullif(a2_claim.max_failures, 0);
    v_through bigint := nullif(a2_claim.through, 0);
    v_served text[];
    v_excluded jsonb;
    v_lanes jsonb;
    v_clear bigint;
    v_tids tid[];
    v_dead_heads bigint[];
    v_dead_consumers text[];
    v_dead_keys text[];
    v_retry bigint;
    v_top bigint;
    v_heads jsonb;
    v_dead jsonb;
    v_waited timestamptz;
    v_waited_ms bigint;
    v_visible boolean;
begin
    -- (Checks written as plain expressions, the functions called only to
    -- raise: a call costs more than the expression.)
    if current_setting('transaction_isolation') <> 'read committed' then
        perform a2__writable('a2_claim');
    end if;
    if v_session is null or v_session = '' or octet_length(v_session) > 1024
       or v_holder is null or v_holder = '' or octet_length(v_holder) > 1024 then
        perform a2__name('session', v_session);
        perform a2__name('holder', v_holder);
    end if;
    if a2_claim.ttl_ms < 0 or a2_claim.expires_at < 0
       or (coalesce(a2_claim.expires_at, 0) = 0 and coalesce(a2_claim.ttl_ms, 0) <= 0) then
        perform a2__fail('INVALID_ARGUMENT', 'a claim needs a positive ttl or an expiry');
    end if;
    if v_max < 0 then
        perform a2__fail('INVALID_ARGUMENT', 'max failures must be at least 1 (0: no limit)');
    end if;
    if v_through < 0 or a2_claim.log_from < 0 then
        perform a2__fail('INVALID_ARGUMENT',
                         case when v_through < 0 then 'through' else 'log_from' end
                         || ' must not be negative');
    end if;
    v_expires := case when coalesce(a2_claim.expires_at, 0) > 0 then a2_claim.expires_at
                      else v_now + a2_claim.ttl_ms end;
    -- A transaction before the snapshot's xmin has ended: nothing to wait
    -- for (the common case, in one plain expression; a2__await_xid checks
    -- the arguments and waits).
    if a2_claim.after_xid is not null
       and (a2_claim.after_xid not between 0 and 4294967295
            or a2_claim.wait_ms is null or a2_claim.wait_ms < 0
            or (pg_snapshot_xmin(pg_current_snapshot())::text::bigint - a2_claim.after_xid)
               & 4294967295 not between 1 and 2147483647) then
        v_waited := clock_timestamp();
        v_visible := a2__await_xid(v_session, a2_claim.after_xid, a2_claim.wait_ms);
        v_waited_ms := (extract(epoch from clock_timestamp() - v_waited) * 1000)::bigint;
        v_now := v_now + v_waited_ms;
        v_expires := v_expires + v_waited_ms;
        if not v_visible then
            return jsonb_build_object('outcome', 'busy', 'retry_at', v_now,
                                      'waiting_for', a2_claim.after_xid,
                                      'dead_lettered', '[]'::jsonb);
        end if;
    end if;
    v_served := a2__served(a2_claim.consumers);
    if a2_claim.wake_logs then
        perform a2__wake_log(v_session, l.consumer, l.lane, l.types, l.backfill,
                             a2_claim.log_from)
           from a2__log_consumers(a2_claim.consumers) l;
    end if;
    if a2_claim.exclude is not null and jsonb_typeof(a2_claim.exclude) <> 'null' then
        if jsonb_typeof(a2_claim.exclude) <> 'array' then
            perform a2__fail('INVALID_ARGUMENT', 'exclude must be a JSON array');
        end if;
        select jsonb_agg(jsonb_build_object(
                   'consumer', a2__name('an excluded consumer', x->>'consumer'),
                   'cursor_key', a2__cursor_key(a2__opt_name('an excluded lane', x->>'lane'),
                                                a2__json_int('an excluded index', x->'index'))))
          into v_excluded
          from jsonb_array_elements(a2_claim.exclude) x;
    end if;
    if a2_claim.lanes is not null and jsonb_typeof(a2_claim.lanes) <> 'null' then
        if jsonb_typeof(a2_claim.lanes) <> 'array' then
            perform a2__fail('INVALID_ARGUMENT', 'lanes must be a JSON array');
        end if;
        select coalesce(jsonb_agg(jsonb_build_object(
                   'consumer', a2__name('a lane''s consumer', x->>'consumer'),
                   'cursor_key', a2__cursor_key(a2__name('a lane', x->>'lane'), null))),
                        '[]')
          into v_lanes
          from jsonb_array_elements(a2_claim.lanes) x;
    end if;
    v_clear := coalesce((select c.clear_index from a2_clears c where c.session_id = v_session), 0);

    -- The eligible rows, locked in primary-key order. The update finds them
    -- by ctid, a TID scan with sequential scans off (a join on the key can be
    -- planned as a scan of every cursor the session ever had). It is a
    -- statement of its own, so its snapshot sees the versions locked here,
    -- and nothing changes them while the locks are held.
    select coalesce(array_agg(e.tid), '{}') into v_tids
      from (select cur.ctid as tid
              from a2_cursors cur
             where cur.session_id = v_session and cur.head > v_clear
               and (v_through is null or cur.head <= v_through)
               and cur.failed_at is null
               and (v_served is null or cur.consumer = any(v_served))
               and (v_excluded is null
                    or not v_excluded @> jsonb_build_array(jsonb_build_object(
                               'consumer', cur.consumer, 'cursor_key', cur.cursor_key)))
               and (v_lanes is null
                    or v_lanes @> jsonb_build_array(jsonb_build_object(
                           'consumer', cur.consumer, 'cursor_key', cur.cursor_key)))
               and (cur.claim_expires_at is null or cur.claim_expires_at <= v_now)
             order by cur.cursor_key, cur.consumer, cur.epoch
               for update of cur) e;

    if cardinality(v_tids) > 0 then
        -- The claim, and its heads' events read afresh (this statement's
        -- snapshot follows the locks: a head the claim waited on may have
        -- moved to an event the lock's snapshot predates). A head whose
        -- event is gone (cleared and reclaimed meanwhile) is left out.
        with claimed as (
            update a2_cursors cur
               set attempt_count = cur.attempt_count + 1,
                   failure_count = cur.failure_count
                                   + case when cur.claim_holder is null then 0 else 1 end,
                   failed_at = case when cur.claim_holder is not null
                                         and cur.failure_count + 1 >= v_max
                                    then v_now else cur.failed_at end,
                   first_claimed_at = case when cur.claim_holder is not null
                                                and cur.failure_count + 1 >= v_max
                                           then cur.first_claimed_at
                                           else coalesce(cur.first_claimed_at, v_now) end,
                   last_claimed_at = case when cur.claim_holder is not null
                                               and cur.failure_count + 1 >= v_max
                                          then cur.last_claimed_at else v_now end,
                   claim_holder = case when cur.claim_holder is not null
                                            and cur.failure_count + 1 >= v_max
                                       then null else v_holder end,
                   claim_expires_at = case when cur.claim_holder is not null
                                                and cur.failure_count + 1 >= v_max
                                           then null else v_expires end
             where cur.ctid = any(v_tids)
            returning cur.*)
        select jsonb_agg(a2__head_json(c, e, v_clear, a2_claim.text_payloads)
                         order by c.head, c.consumer collate "C")
                   filter (where c.failed_at is null and e.idx is not null),
               jsonb_agg(a2__head_json(c, e, v_clear, a2_claim.text_payloads)
                         order by c.head, c.consumer collate "C")
                   filter (where c.failed_at is not null and e.idx is not null),
               greatest((select coalesce(max(x.idx), 0) from a2_events x
                          where x.session_id = v_session),
                        max(c.head) filter (where c.failed_at is null and e.idx is not null)),
               array_agg(c.head) filter (where c.failed_at is not null),
               array_agg(c.consumer) filter (where c.failed_at is not null),
               array_agg(c.cursor_key) filter (where c.failed_at is not null)
          into v_heads, v_dead, v_top, v_dead_heads, v_dead_consumers, v_dead_keys
          from claimed c
          -- (one lookup a head: a join could hash every event of the session)
          left join lateral (select e.* from a2_events e
                              where e.session_id = v_session and e.idx = c.head offset 0) e
            on true;
        -- Dead letters release their snapshot pins.
        if v_dead_heads is not null then
            perform a2__unpin(v_session, v_dead_heads, v_dead_consumers, v_dead_keys);
        end if;
        if v_heads is not null then
            return jsonb_build_object('outcome', 'claimed', 'heads', v_heads,
                                      'session_head', v_top,
                                      'dead_lettered', coalesce(v_dead, '[]'::jsonb));
        end if;
    end if;
    -- Nothing claimed (nothing eligible, or only dead letters): the nearest
    -- hold, read afresh.
    select min(cur.claim_expires_at) filter (where cur.claim_expires_at > v_now)
      into v_retry from a2_cursors cur
     where cur.session_id = v_session and cur.head > v_clear
       and (v_through is null or cur.head <= v_through)
       and cur.failed_at is null
       and (v_served is null or cur.consumer = any(v_served))
       and (v_excluded is null
            or not v_excluded @> jsonb_build_array(jsonb_build_object(
                       'consumer', cur.consumer, 'cursor_key', cur.cursor_key)))
       and (v_lanes is null
            or v_lanes @> jsonb_build_array(jsonb_build_object(
                   'consumer', cur.consumer, 'cursor_key', cur.cursor_key)));
    return jsonb_build_object('outcome', case when v_retry is null then 'settled' else 'busy' end,
                              'retry_at', v_retry, 'dead_lettered', coalesce(v_dead, '[]'::jsonb));
end
$fn$;

-- a2_renew(session, holder, claims, ttl_ms, expires_at, now_ms)
--
-- Extends holder's live claims (claims: [{"consumer", "lane", "index",
-- "attempt"}]) to now_ms + ttl_ms (or expires_at). Result:
--   {"renewed": [{"consumer", "lane", "index"}], "superseded": [...]}
-- superseded: claims this holder lost (taken over, completed, cleared). A
-- claim in neither list holds nothing yet (an event its cursor has not
-- reached) or was never there. Lists are by index, then consumer.
--
-- Locks: the claims' cursor rows, for update, in primary-key order.
create or replace function a2_renew(session text, holder text, claims jsonb,
                                    ttl_ms bigint default null, expires_at bigint default null,
                                    now_ms bigint default null)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_generic_plan
as $fn$
#variable_conflict use_column
declare
    v_session text := a2_renew.session;
    v_holder text := a2_renew.holder;
    v_now bigint := coalesce(a2_renew.now_ms, a2__now_ms());
    v_expires bigint;
    v_clear bigint;
    v_listed jsonb;
    v_out jsonb;
begin
    perform a2__writable('a2_renew');
    perform a2__name('session', v_session);
    perform a2__name('holder', v_holder);
    if a2_renew.ttl_ms < 0 or a2_renew.expires_at < 0
       or (coalesce(a2_renew.expires_at, 0) = 0 and coalesce(a2_renew.ttl_ms, 0) <= 0) then
        perform a2__fail('INVALID_ARGUMENT', 'a renewal needs a positive ttl or an expiry');
    end if;
    if a2_renew.claims is null or jsonb_typeof(a2_renew.claims) <> 'array' then
        perform a2__fail('INVALID_ARGUMENT', 'claims must be a JSON array');
    end if;
    v_expires := case when coalesce(a2_renew.expires_at, 0) > 0 then a2_renew.expires_at
                      else v_now + a2_renew.ttl_ms end;
    select jsonb_agg(jsonb_build_object('consumer', l.consumer, 'lane', l.lane, 'idx', l.idx,
                                        'attempt', l.attempt, 'ord', l.ord))
      into v_listed
      from (select c.*, row_number() over (order by c.idx, c.consumer collate "C") as ord
              from (select x->>'consumer' as consumer, x->>'lane' as lane,
                           a2__json_int('a claim''s index', x->'index') as idx,
                           a2__json_int('a claim''s attempt', x->'attempt')::integer as attempt
                      from jsonb_array_elements(a2_renew.claims) x) c
             where a2__check_attempt(c.consumer, c.lane, c.idx, c.attempt)) l;
    if v_listed is null then
        return jsonb_build_object('renewed', '[]'::jsonb, 'superseded', '[]'::jsonb);
    end if;
    v_clear := coalesce((select c.clear_index from a2_clears c where c.session_id = v_session), 0);

    with listed as (
        select l.*, a2__cursor_key(l.lane, l.idx) as cursor_key
          from jsonb_to_recordset(v_listed)
               as l(consumer text, lane text, idx bigint, attempt integer, ord bigint)),
    target as materialized (
        select cur.cursor_key, cur.consumer, cur.epoch
          from a2_cursors cur
          join listed on cur.cursor_key = listed.cursor_key and cur.consumer = listed.consumer
                     and cur.head = listed.idx and cur.attempt_count = listed.attempt
         where cur.session_id = v_session and listed.idx > v_clear and cur.failed_at is null
           and cur.claim_holder = v_holder and cur.claim_expires_at > v_now
         order by cur.cursor_key, cur.consumer, cur.epoch
           for update of cur),
    renewed as (
        update a2_cursors cur set claim_expires_at = v_expires
          from target
         where cur.session_id = v_session and cur.cursor_key = target.cursor_key
           and cur.consumer = target.consumer and cur.epoch = target.epoch
           and cur.failed_at is null and cur.claim_holder = v_holder
        returning cur.cursor_key, cur.consumer, cur.head, cur.attempt_count),
    verdict as (
        select listed.ord, listed.consumer, listed.lane, listed.idx,
               case when exists (select 1 from renewed
                                  where renewed.cursor_key = listed.cursor_key
                                    and renewed.consumer = listed.consumer
                                    and renewed.head = listed.idx
                                    and renewed.attempt_count = listed.attempt) then 'renewed'
                    when listed.idx <= v_clear then 'superseded'
                    when latest.epoch is null then null
                    when latest.head is distinct from listed.idx
                         and latest.position < listed.idx then null
                    when latest.head is distinct from listed.idx
                         or latest.attempt_count > listed.attempt then 'superseded'
                    end as verdict
          from listed
          left join lateral (select cur.epoch, cur.head, cur.position, cur.attempt_count
                               from a2_cursors cur
                              where cur.session_id = v_session
                                and cur.cursor_key = listed.cursor_key
                                and cur.consumer = listed.consumer
                              order by cur.epoch desc limit 1) latest on true)
    select jsonb_build_object(
               'renewed', coalesce(jsonb_agg(jsonb_build_object('consumer', v.consumer, 'lane', v.lane,
                                                                'index', v.idx) order by v.ord)
                                       filter (where v.verdict = 'renewed'), '[]'::jsonb),
               'superseded', coalesce(jsonb_agg(jsonb_build_object('consumer', v.consumer, 'lane', v.lane,
                                                                   'index', v.idx) order by v.ord)
                                          filter (where v.verdict = 'superseded'), '[]'::jsonb))
      into v_out
      from verdict v;
    return v_out;
end
$fn$;
