-- bench/store/txn.sql: the server time of one store operation in a
-- transaction of its own, without the network, the client or the commit.
-- bench_txn(op, n) runs op n times, each in a transaction it rolls back
-- (so the tables stay as they were, and every run starts as the first),
-- and returns the mean in microseconds. A plain expression or a statement
-- of a PL/pgSQL function is made ready anew in each transaction, which is
-- why a loop in one transaction would understate what a call costs.
--   floor           bench_floor(): the least append (bench/floor.sql)
--   append          a2_append of one event with an id and one target
--   claim           a2_claim of a session's one head (served consumer,
--                   after_xid), as a woken runner claims
--   claim_complete  that claim, then a2_complete of its head
--   claim_empty     a2_claim of a session with nothing to run
--   log_claim       a2_claim with wake_logs: a log consumer's run started at
--                   a session's one event and claimed, as a woken runner of
--                   a log consumer claims
--   log_claim_complete  that claim, then a2_complete of its head
-- Needs sql/schema.sql and bench/floor.sql; call it outside a transaction
-- block: call bench_txn_setup(); select ... from bench_txn_run(...).
create or replace procedure bench_txn_setup()
language plpgsql
as $$
begin
    if not exists (select 1 from a2_events where session_id = 'txn-1') then
        perform a2_append(session => 'txn-1',
                          events => '[{"type": "t", "targets": [{"consumer": "bench"}]}]');
    end if;
    if not exists (select 1 from a2_events where session_id = 'txn-log') then
        perform a2_append(session => 'txn-log', events => '[{"type": "t"}]');
    end if;
end
$$;

create or replace procedure bench_txn(op text, n integer, inout us numeric default null)
language plpgsql
as $$
declare
    t0 timestamptz;
    r jsonb;
    x bigint := pg_snapshot_xmin(pg_current_snapshot())::text::bigint - 1;
begin
    commit;
    t0 := clock_timestamp();
    for i in 1..n loop
        if op = 'floor' then
            perform bench_floor('txn-' || (i % 64), '{"n": 1}');
        elsif op = 'append' then
            r := a2_append(session => 'txn-' || (i % 64),
                           events => jsonb_build_array(jsonb_build_object(
                               'type', 'bench', 'id', md5(i::text), 'payload_text', '{"n": 1}',
                               'targets', '[{"consumer": "bench"}]'::jsonb)),
                           now_ms => 1, text_payloads => true);
        elsif op in ('claim', 'claim_complete') then
            r := a2_claim(session => 'txn-1', holder => 'h', expires_at => 99999999999999,
                          consumers => '["bench"]', after_xid => x, now_ms => 1000,
                          text_payloads => true);
            if r->>'outcome' <> 'claimed' then
                raise exception 'bench_txn: the claim found nothing: %', r;
            end if;
            if op = 'claim_complete' then
                r := a2_complete(session => 'txn-1', consumer => 'bench', lane => null,
                                 index => 1, attempt => (r->'heads'->0->>'attempt')::integer,
                                 events => '[]', consumers => '["bench"]', now_ms => 1000,
                                 text_payloads => true);
            end if;
        elsif op in ('log_claim', 'log_claim_complete') then
            r := a2_claim(session => 'txn-log', holder => 'h', expires_at => 99999999999999,
                          consumers => '[{"name": "logbench", "log": {"lane": "bench", "types": ["t"], "backfill": true}}]',
                          after_xid => x, now_ms => 1000, text_payloads => true,
                          wake_logs => true);
            if r->>'outcome' <> 'claimed' then
                raise exception 'bench_txn: the log claim found nothing: %', r;
            end if;
            if op = 'log_claim_complete' then
                r := a2_complete(session => 'txn-log', consumer => 'logbench', lane => 'bench',
                                 index => 1, attempt => (r->'heads'->0->>'attempt')::integer,
                                 events => '[]',
                                 consumers => '[{"name": "logbench", "log": {"lane": "bench", "types": ["t"]}}]',
                                 now_ms => 1000, text_payloads => true);
                if r->>'outcome' <> 'completed' then
                    raise exception 'bench_txn: the log completion: %', r;
                end if;
            end if;
        elsif op = 'claim_empty' then
            r := a2_claim(session => 'txn-none', holder => 'h', expires_at => 99999999999999,
                          consumers => '["bench"]', now_ms => 1000, text_payloads => true);
        else
            raise exception 'bench_txn: no operation %', op;
        end if;
        rollback;
    end loop;
    us := round(extract(epoch from clock_timestamp() - t0) * 1e6 / n, 1);
end
$$;
