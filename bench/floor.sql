-- bench_floor(session, payload): the least an append on the a2 tables does
-- (the session's lock, max(idx), the event row, one event cursor) in one
-- PL/pgSQL call: the ceiling any store append can reach on this schema.
-- bench/commit and bench/store load it into their throwaway databases.
create or replace function bench_floor(s text, p jsonb) returns bigint language plpgsql as $$
declare
    i bigint;
begin
    perform pg_advisory_xact_lock(hashtext(s));
    select coalesce(max(idx), 0) + 1 into i from a2_events where session_id = s;
    insert into a2_events (session_id, idx, event_type, payload, event_id, created_at)
    values (s, i, 'bench.tick', p, gen_random_uuid()::text, 0);
    insert into a2_cursors (session_id, consumer, cursor_key, epoch, kind, position, head)
    values (s, 'bench', '#' || i, i, 'event', i - 1, i);
    return i;
end $$;
create table if not exists bench_raw (id bigserial primary key, session_id text not null,
                                      payload jsonb not null);
