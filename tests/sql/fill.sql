-- pg_temp.fill(session, n, consumer, stage): n events for consumer appended
-- to session at now_ms 1000; with stage 'claimed' their heads then claimed
-- by holder "old" for 600 s, with 'completed' also completed, in a2_batch
-- calls of 500. Included by the scripts test_store_scale runs.
create function pg_temp.fill(session text, n integer, consumer text, stage text)
returns void
language plpgsql as $$
declare
    c jsonb;
    ops jsonb;
begin
    perform a2_append(session => session, now_ms => 1000, events => (
        select jsonb_agg(jsonb_build_object('type', 'job', 'targets',
                                            jsonb_build_array(jsonb_build_object('consumer', consumer))))
          from generate_series(1, n)));
    if stage = 'appended' then
        return;
    end if;
    c := a2_claim(session => session, holder => 'old', ttl_ms => 600000,
                  consumers => jsonb_build_array(consumer), now_ms => 1000);
    if stage = 'claimed' then
        return;
    end if;
    for chunk in 0 .. (n - 1) / 500 loop
        ops := (select jsonb_agg(jsonb_build_object('op', 'complete', 'session', session,
                                                    'consumer', consumer, 'index', h->'index',
                                                    'attempt', h->'attempt', 'now_ms', 1000))
                  from jsonb_array_elements(c->'heads') with ordinality as x(h, ord)
                 where (x.ord - 1) / 500 = chunk);
        perform a2_batch(ops);
    end loop;
end
$$;
