-- Included by selftest.sql: plants "a head of consumer :consumer completed
-- twice" (the audit line of one of its completions, again) in a transaction
-- of its own, and has fired.sql check it as :defect.
begin;
insert into chaos_audit(j) select j from chaos_audit
where j->>'consumer' = :'consumer' and j->>'transition' in ('completed', 'went_idle') limit 1;
\ir fired.sql
