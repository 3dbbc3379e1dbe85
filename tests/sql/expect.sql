-- expect(got, want, step): got must contain want (jsonb @>); returns
-- "step: ok", or raises naming the step, what came and what was expected.
-- Included by cycle.sql; test_sql_cycle.sh loads it before a wrong
-- expectation to see that the check fails.
create function pg_temp.expect(got jsonb, want jsonb, step text) returns text
language plpgsql as $$
begin
    if got is null or not got @> want then
        raise exception 'step "%": got %, expected it to contain %', step, got, want;
    end if;
    return step || ': ok';
end $$;
