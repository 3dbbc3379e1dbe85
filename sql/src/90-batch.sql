-- a2_batch: several operations in one call, one transaction, one round trip.

-- The keys each operation takes (besides "op"), as the named parameters of
-- its function. Stable, as its text[] constants are (array_in): declared
-- immutable, the planner would not inline it into a2__run_op's generic
-- plan, and each transaction would run it through the SQL function
-- executor anew (35 us of an a2_batch call).
create or replace function a2__op_keys(op text)
returns text[]
language sql
stable
as $fn$
select case op
    when 'append' then '{session,events,consumers,origin,now_ms,text_payloads}'
    when 'read' then '{session,after,max_events,types}'
    when 'cursors' then '{session}'
    when 'dead_letters' then '{session}'
    when 'wake_log' then '{session,consumer,lane,types,backfill,after_xid,wait_ms,log_from}'
    when 'claim' then '{session,holder,ttl_ms,expires_at,consumers,exclude,max_failures,through,now_ms,text_payloads,after_xid,wait_ms,wake_logs,lanes,log_from}'
    when 'renew' then '{session,holder,claims,ttl_ms,expires_at,now_ms}'
    when 'complete' then '{session,consumer,lane,index,attempt,events,consumers,now_ms,text_payloads}'
    when 'fail' then '{session,consumer,lane,index,attempt,error,max_failures,retry_after_ms,now_ms}'
    when 'redrive' then '{session,consumer,index,action,consumers}'
    when 'clear' then '{session,if_last,cause,marker_id,now_ms}'
    when 'reclaim' then '{session}'
    when 'pending_sessions' then '{consumers,after,max_sessions,now_ms}'
    when 'read_state' then '{session,reducer,at_index}'
    when 'write_state' then '{session,reducer,writes,now_ms}'
    when 'presence_write' then '{ns,participant,fields,ttl_ms,at,seen,now_ms,text_payloads}'
    when 'presence_read' then '{ns,now_ms,text_payloads}'
    when 'presence_reap' then '{ns,max_rows,now_ms}'
    end::text[]
$fn$;

-- One operation of a batch: {"op": name, <its function's named arguments>}.
create or replace function a2__run_op(o jsonb)
returns jsonb
language plpgsql
volatile
as $fn$
declare
    op text := o->>'op';
    keys text[] := a2__op_keys(o->>'op');
    extra text;
    r jsonb;
begin
    if keys is null then
        perform a2__fail('INVALID_ARGUMENT',
                         format('unknown operation %s', coalesce(quote_literal(op), 'null')));
    end if;
    -- (A plain expression: the keys left once op's are taken out; a
    -- query over jsonb_object_keys cost 10 us of every operation.)
    if (o - 'op') - keys <> '{}'::jsonb then
        select min(k) into extra from jsonb_object_keys((o - 'op') - keys) k;
        perform a2__fail('INVALID_ARGUMENT',
                         format('operation %s takes no argument %s', op, quote_literal(extra)));
    end if;
    case op
    when 'append' then
        r := a2_append(session => o->>'session', events => o->'events',
                       consumers => o->'consumers',
                       origin => a2__json_int('origin', o->'origin'),
                       now_ms => a2__json_int('now_ms', o->'now_ms'),
                       text_payloads => coalesce((o->>'text_payloads')::boolean, false));
    when 'read' then
        select coalesce(jsonb_agg(to_jsonb(x)), '[]') into r
          from a2_read(session => o->>'session',
                       after => coalesce(a2__json_int('after', o->'after'), 0),
                       max_events => a2__json_int('max_events', o->'max_events'),
                       types => o->'types') x;
    when 'cursors' then
        select coalesce(jsonb_agg(to_jsonb(x)), '[]') into r
          from a2_cursors(session => o->>'session') x;
    when 'dead_letters' then
        select coalesce(jsonb_agg(to_jsonb(x)), '[]') into r
          from a2_dead_letters(session => o->>'session') x;
    when 'wake_log' then
        r := a2_wake_log(session => o->>'session', consumer => o->>'consumer',
                         lane => o->>'lane', types => o->'types',
                         backfill => coalesce((o->>'backfill')::boolean, false),
                         after_xid => a2__json_int('after_xid', o->'after_xid'),
                         wait_ms => coalesce(a2__json_int('wait_ms', o->'wait_ms'), 1000),
                         log_from => a2__json_int('log_from', o->'log_from'));
    when 'claim' then
        r := a2_claim(session => o->>'session', holder => o->>'holder',
                      ttl_ms => a2__json_int('ttl_ms', o->'ttl_ms'),
                      expires_at => a2__json_int('expires_at', o->'expires_at'),
                      consumers => o->'consumers', exclude => o->'exclude',
                      max_failures => a2__json_int('max_failures', o->'max_failures')::integer,
                      through => a2__json_int('through', o->'through'),
                      now_ms => a2__json_int('now_ms', o->'now_ms'),
                      text_payloads => coalesce((o->>'text_payloads')::boolean, false),
                      after_xid => a2__json_int('after_xid', o->'after_xid'),
                      wait_ms => coalesce(a2__json_int('wait_ms', o->'wait_ms'), 1000),
                      wake_logs => coalesce((o->>'wake_logs')::boolean, false),
                      lanes => o->'lanes',
                      log_from => a2__json_int('log_from', o->'log_from'));
    when 'renew' then
        r := a2_renew(session => o->>'session', holder => o->>'holder', claims => o->'claims',
                      ttl_ms => a2__json_int('ttl_ms', o->'ttl_ms'),
                      expires_at => a2__json_int('expires_at', o->'expires_at'),
                      now_ms => a2__json_int('now_ms', o->'now_ms'));
    when 'complete' then
        r := a2_complete(session => o->>'session', consumer => o->>'consumer',
                         lane => o->>'lane', index => a2__json_int('index', o->'index'),
                         attempt => a2__json_int('attempt', o->'attempt')::integer,
                         events => coalesce(o->'events', '[]'), consumers => o->'consumers',
                         now_ms => a2__json_int('now_ms', o->'now_ms'),
                         text_payloads => coalesce((o->>'text_payloads')::boolean, false));
    when 'fail' then
        r := a2_fail(session => o->>'session', consumer => o->>'consumer', lane => o->>'lane',
                     index => a2__json_int('index', o->'index'),
                     attempt => a2__json_int('attempt', o->'attempt')::integer,
                     error => o->>'error',
                     max_failures => coalesce(a2__json_int('max_failures', o->'max_failures'), 1)::integer,
                     retry_after_ms => coalesce(a2__json_int('retry_after_ms', o->'retry_after_ms'), 0),
                     now_ms => a2__json_int('now_ms', o->'now_ms'));
    when 'redrive' then
        r := a2_redrive(session => o->>'session', consumer => o->>'consumer',
                        index => a2__json_int('index', o->'index'), action => o->>'action',
                        consumers => o->'consumers');
    when 'clear' then
        r := a2_clear(session => o->>'session', if_last => a2__json_int('if_last', o->'if_last'),
                      cause => o->'cause', marker_id => o->>'marker_id',
                      now_ms => a2__json_int('now_ms', o->'now_ms'));
    when 'reclaim' then
        r := a2_reclaim(session => o->>'session');
    when 'pending_sessions' then
        select coalesce(jsonb_agg(x.session), '[]') into r
          from a2_pending_sessions(consumers => o->'consumers', after => o->>'after',
                                   max_sessions => coalesce(a2__json_int('max_sessions',
                                                                         o->'max_sessions'),
                                                            100)::integer,
                                   now_ms => a2__json_int('now_ms', o->'now_ms')) x;
    when 'read_state' then
        select to_jsonb(x) into r
          from a2_read_state(session => o->>'session', reducer => o->>'reducer',
                             at_index => a2__json_int('at_index', o->'at_index')) x;
        r := coalesce(r, 'null');
    when 'write_state' then
        r := a2_write_state(session => o->>'session', reducer => o->>'reducer',
                            writes => o->'writes', now_ms => a2__json_int('now_ms', o->'now_ms'));
    when 'presence_write' then
        r := a2_presence_write(ns => o->>'ns', participant => o->>'participant',
                               fields => o->'fields', ttl_ms => a2__json_int('ttl_ms', o->'ttl_ms'),
                               at => a2__json_int('at', o->'at'),
                               seen => a2__json_int('seen', o->'seen'),
                               now_ms => a2__json_int('now_ms', o->'now_ms'),
                               text_payloads => coalesce((o->>'text_payloads')::boolean, false));
    when 'presence_read' then
        r := a2_presence_read(ns => o->>'ns', now_ms => a2__json_int('now_ms', o->'now_ms'),
                              text_payloads => coalesce((o->>'text_payloads')::boolean, false));
    when 'presence_reap' then
        r := a2_presence_reap(ns => o->>'ns',
                              max_rows => coalesce(a2__json_int('max_rows', o->'max_rows'),
                                                   1000)::integer,
                              now_ms => a2__json_int('now_ms', o->'now_ms'));
    end case;
    return r;
end
$fn$;

-- Whether operation o is a completion a2__complete_held can settle with
-- others of its session: a concurrent cursor's (lane absent or null), no
-- returned events, only a2_complete's keys, a session and a consumer of 1
-- to 1024 bytes, index and attempt plain whole numbers of at least 1, and
-- now_ms and text_payloads absent, null or plain. Anything else, a wrong
-- one included, runs through a2_complete, whose checks name the error.
create or replace function a2__batch_fast(o jsonb)
returns boolean
language sql
immutable
as $fn$
select o->>'op' = 'complete'
       and o - '{op,session,consumer,lane,index,attempt,events,consumers,now_ms,text_payloads}'::text[]
           = '{}'::jsonb
       and jsonb_typeof(o->'session') = 'string'
       and octet_length(o->>'session') between 1 and 1024
       and jsonb_typeof(o->'consumer') = 'string'
       and octet_length(o->>'consumer') between 1 and 1024
       and coalesce(jsonb_typeof(o->'lane'), 'null') = 'null'
       and coalesce(o->'events', '[]') = '[]'
       and jsonb_typeof(o->'index') = 'number' and o->>'index' ~ '^[1-9][0-9]{0,17}$'
       and jsonb_typeof(o->'attempt') = 'number' and o->>'attempt' ~ '^[1-9][0-9]{0,8}$'
       and (coalesce(jsonb_typeof(o->'now_ms'), 'null') = 'null'
            or o->>'now_ms' ~ '^-?[0-9]{1,18}$')
       and coalesce(jsonb_typeof(o->'text_payloads'), 'null') in ('null', 'boolean')
$fn$;

-- A run of consecutive completions of one session that a2__batch_fast
-- passed (run: their places in ops, from 1), settled into results: those
-- that hold their heads together (a2__complete_held), the rest after them,
-- one by one in the batch's order. A run of one goes through a2_complete.
create or replace function a2__batch_run(results jsonb[], ops jsonb, session text, run integer[])
returns jsonb[]
language plpgsql
volatile
as $fn$
declare
    r record;
    i integer;
begin
    if cardinality(run) > 1 then
        for r in select h.ord, h.result from a2__complete_held(session, ops, run) h loop
            results[r.ord] := r.result;
        end loop;
    end if;
    foreach i in array run loop
        if results[i] is null then
            results[i] := a2__run_op(ops->(i - 1));
        end if;
    end loop;
    return results;
end
$fn$;

-- a2_batch(ops)
--
-- Runs a list of operations (ops: a JSON array of at most 1000 objects
-- {"op": "append" | "claim" | "complete" | ..., <the function's named
-- arguments>}, as the a2_<op> functions take them) in the caller's
-- transaction, all or nothing (an operation that raises rolls the whole
-- call back), and returns one result per operation, in the order given: a
-- write's jsonb result, a read's rows as an array of objects (a2_read_state:
-- the object, or null).
--
-- Order: operations run grouped by session (byte order, then presence
-- namespace; operations with neither first), each group in the order
-- given. Two batches that touch the same sessions therefore take their
-- session locks in the same order and never wait on each other in a cycle.
-- Within one session a batch holds the session lock from its first write
-- that takes it; a completion later in the same session then waits for its
-- cursor row while holding it. Should that close a cycle with another
-- transaction, PostgreSQL's deadlock detector cancels one of them with
-- SQLSTATE 40P01: retry that one.
create or replace function a2_batch(ops jsonb)
returns jsonb
language plpgsql
volatile
set plan_cache_mode = force_generic_plan
as $fn$
declare
    x record;
    results jsonb[];
    run integer[];
    run_session text;
begin
    if ops is null or jsonb_typeof(ops) <> 'array' then
        perform a2__fail('INVALID_ARGUMENT', 'ops must be a JSON array of operations');
    end if;
    if jsonb_array_length(ops) > 1000 then
        perform a2__fail('INVALID_ARGUMENT', 'more than 1000 operations in one batch');
    end if;
    results := array_fill(null::jsonb, array[jsonb_array_length(ops)]);
    for x in select o.value as op, o.ordinality as ord,
                    jsonb_typeof(o.value) = 'object' and a2__batch_fast(o.value) as fast
               from jsonb_array_elements(ops) with ordinality as o
              order by coalesce(o.value->>'session', '') collate "C",
                       coalesce(o.value->>'ns', '') collate "C", o.ordinality loop
        if run is not null and (not x.fast or x.op->>'session' <> run_session) then
            results := a2__batch_run(results, ops, run_session, run);
            run := null;
        end if;
        if x.fast then
            run_session := x.op->>'session';
            run := array_append(run, x.ord::integer);
            continue;
        end if;
        if jsonb_typeof(x.op) <> 'object' then
            perform a2__fail('INVALID_ARGUMENT',
                             format('operation %s is not a JSON object', x.ord));
        end if;
        results[x.ord] := a2__run_op(x.op);
    end loop;
    if run is not null then
        results := a2__batch_run(results, ops, run_session, run);
    end if;
    return coalesce(to_jsonb(results), '[]');
end
$fn$;
