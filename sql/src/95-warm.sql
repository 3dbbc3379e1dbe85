-- a2_warm: a connection made ready for its first operations.

-- a2_warm()
--
-- A backend's first call of a PL/pgSQL function compiles it and plans each
-- statement it runs, and its first touch of a table loads the catalog
-- entries of the table and its indexes: for a2_claim, a2_batch and the
-- functions under them some 10 to 50 ms, which a fresh worker would add to
-- the first head it claims. a2_warm pays that up front, in the paths a
-- worker takes: it appends four events to a session of its own (a random
-- name under "a2.warm.", one append of one event and one of three), claims
-- them for consumer "a2.warm", and in one a2_batch completes the first
-- (with a child event), fails the second and completes the last two
-- together (a run of completions, a2__complete_held); then it rolls all of
-- it back (a subtransaction). Nothing it wrote stays, so nothing is
-- decoded for a2-consumer and no worker is woken. The caller's transaction
-- gets a transaction id: call it in a transaction block that is rolled back
-- (begin; select a2_warm(); rollback), as a2_store_warm does, and nothing
-- commits; in autocommit its commit writes one WAL record, and waits for it
-- as any commit does (for a synchronous standby too).
-- Results:
--   {"warmed": true}
--   {"warmed": false, "reason": <the error that stopped the cycle>}: on a
--     read-only standby, say; whatever ran before the error is planned.
-- liba2worker calls it for each runner's connection (a2_store_warm).
create or replace function a2_warm()
returns jsonb
language plpgsql
volatile
as $fn$
declare
    v_session text := 'a2.warm.' || md5(random()::text || clock_timestamp()::text);
    v_event jsonb := jsonb_build_object('type', 'a2.warm', 'payload_text', '{}',
                                        'targets', '[{"consumer": "a2.warm"}]'::jsonb);
    v_claim jsonb;
    v_done jsonb;
    v_failed jsonb;
    v_reason text;
begin
    begin
        perform a2_append(session => v_session, events => jsonb_build_array(v_event),
                          text_payloads => true);
        perform a2_append(session => v_session,
                          events => jsonb_build_array(v_event, v_event, v_event),
                          text_payloads => true);
        v_claim := a2_claim(session => v_session, holder => 'a2.warm', ttl_ms => 60000,
                            consumers => '["a2.warm"]', text_payloads => true,
                            after_xid => (pg_current_xact_id()::text::bigint & 4294967295));
        v_done := v_claim->'heads'->0;
        v_failed := v_claim->'heads'->1;
        if jsonb_array_length(v_claim->'heads') is distinct from 4 then
            raise exception 'a2_warm claimed % heads, not 4',
                coalesce(jsonb_array_length(v_claim->'heads'), 0);
        end if;
        perform a2_batch(ops => jsonb_build_array(
            jsonb_build_object('op', 'complete', 'session', v_session,
                               'consumer', 'a2.warm', 'lane', null,
                               'index', v_done->'index', 'attempt', v_done->'attempt',
                               'events', jsonb_build_array(jsonb_build_object(
                                   'type', 'a2.warm', 'payload_text', '{}',
                                   'id', md5(v_session))),
                               'text_payloads', true),
            jsonb_build_object('op', 'fail', 'session', v_session,
                               'consumer', 'a2.warm', 'lane', null,
                               'index', v_failed->'index', 'attempt', v_failed->'attempt',
                               'error', 'a2.warm', 'max_failures', 3,
                               'retry_after_ms', 1000),
            jsonb_build_object('op', 'complete', 'session', v_session,
                               'consumer', 'a2.warm', 'lane', null,
                               'index', v_claim->'heads'->2->'index',
                               'attempt', v_claim->'heads'->2->'attempt'),
            jsonb_build_object('op', 'complete', 'session', v_session,
                               'consumer', 'a2.warm', 'lane', null,
                               'index', v_claim->'heads'->3->'index',
                               'attempt', v_claim->'heads'->3->'attempt')));
        raise sqlstate 'A2W00';
    exception
        when sqlstate 'A2W00' then
            return '{"warmed": true}'::jsonb;
        when others then
            get stacked diagnostics v_reason = message_text;
    end;
    return jsonb_build_object('warmed', false, 'reason', v_reason);
end
$fn$;
