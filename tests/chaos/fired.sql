-- Included by selftest.sql after a planted defect (in the transaction it
-- began, named in :defect as "LABEL EXPECTED"): runs check.sql, prints
-- "LABEL EXPECTED FIRED" (the invariants that fired, "-" for none), and
-- rolls the defect back.
\o /dev/null
\ir check.sql
\o
select :'defect' || ' ' || coalesce(string_agg(ord::text, ',' order by ord), '-')
from chaos_result where violations <> 0;
rollback;
