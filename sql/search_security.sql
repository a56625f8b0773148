-- Who may use cagra_search and the worker's status functions.
--  * cagra_search returns rows without row-level security policies: when
--    they apply to the caller it refuses (owners and BYPASSRLS roles
--    search); the ORDER BY query applies them.
--  * it needs SELECT on the table, or on every column the index reads, and
--    USAGE on the table's schema (an index's OID skips the name lookup);
--    cagra_index_info, which shows the table's row counts, needs the same.
--  * cagra_status, cagra_worker_status() and cagra_worker_cache() are for
--    pg_monitor, as PostgreSQL's statistics views.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

CREATE ROLE regress_cagra_owner;
CREATE ROLE regress_cagra_alice;
CREATE ROLE regress_cagra_bob;
CREATE ROLE regress_cagra_bypass BYPASSRLS;
CREATE ROLE regress_cagra_cols;
CREATE ROLE regress_cagra_other;

CREATE TABLE rls_t (id int PRIMARY KEY, owner name, grp int, v vector(3));
INSERT INTO rls_t SELECT i, CASE WHEN i <= 2 THEN 'regress_cagra_alice' ELSE 'regress_cagra_bob' END,
       i % 2, ARRAY[i, i % 7, i % 5]::vector
  FROM generate_series(1, 204) i;
CREATE INDEX rls_t_v ON rls_t USING cagra (v) WITH (graph_degree = 8, intermediate_graph_degree = 16);
ALTER TABLE rls_t OWNER TO regress_cagra_owner;
SET ROLE regress_cagra_owner;
ALTER TABLE rls_t ENABLE ROW LEVEL SECURITY;
CREATE POLICY rls_t_own ON rls_t USING (owner = current_user);
GRANT SELECT ON rls_t TO regress_cagra_alice, regress_cagra_bypass;
RESET ROLE;

-- alice sees 2 of 204 rows; the index scan applies the policy
SET ROLE regress_cagra_alice;
SELECT count(*) FROM rls_t;
SET enable_seqscan = off;
SELECT id FROM rls_t ORDER BY v <-> '[100,2,0]' LIMIT 3;
RESET enable_seqscan;
-- cagra_search would not: it refuses
SELECT * FROM cagra_search('rls_t_v', ARRAY['[100,2,0]']::vector[], 3);
RESET ROLE;

-- the owner (policies do not apply to it), a BYPASSRLS role and a
-- superuser search
SET ROLE regress_cagra_owner;
SELECT count(*) FROM cagra_search('rls_t_v', ARRAY['[100,2,0]']::vector[], 3);
SET ROLE regress_cagra_bypass;
SELECT count(*) FROM cagra_search('rls_t_v', ARRAY['[100,2,0]']::vector[], 3);
RESET ROLE;
SELECT count(*) FROM cagra_search('rls_t_v', ARRAY['[100,2,0]']::vector[], 3);

-- FORCE ROW LEVEL SECURITY: the policies apply to the owner too
SET ROLE regress_cagra_owner;
ALTER TABLE rls_t FORCE ROW LEVEL SECURITY;
SELECT * FROM cagra_search('rls_t_v', ARRAY['[100,2,0]']::vector[], 3);
ALTER TABLE rls_t NO FORCE ROW LEVEL SECURITY;
RESET ROLE;

-- with row security off (row_security = off), the policies make the
-- query itself fail, as for any query the policies would filter
SET ROLE regress_cagra_alice;
SET row_security = off;
SELECT * FROM cagra_search('rls_t_v', ARRAY['[100,2,0]']::vector[], 3);
RESET row_security;
RESET ROLE;

-- column privileges: SELECT on other columns only is not enough; SELECT
-- on the indexed column (and the columns of a partial index's predicate)
-- is
ALTER TABLE rls_t DISABLE ROW LEVEL SECURITY;
GRANT SELECT (id, owner) ON rls_t TO regress_cagra_cols;
SET ROLE regress_cagra_cols;
SELECT * FROM cagra_search('rls_t_v', ARRAY['[100,2,0]']::vector[], 3);
SELECT v <-> '[100,2,0]' FROM rls_t LIMIT 1;
RESET ROLE;
GRANT SELECT (v) ON rls_t TO regress_cagra_cols;
SET ROLE regress_cagra_cols;
SELECT count(*) FROM cagra_search('rls_t_v', ARRAY['[100,2,0]']::vector[], 3);
RESET ROLE;
CREATE INDEX rls_t_v_odd ON rls_t USING cagra (v) WITH (graph_degree = 8, intermediate_graph_degree = 16)
  WHERE grp = 1;
SET ROLE regress_cagra_cols;
SELECT * FROM cagra_search('rls_t_v_odd', ARRAY['[100,2,0]']::vector[], 3);
RESET ROLE;
GRANT SELECT (grp) ON rls_t TO regress_cagra_cols;
SET ROLE regress_cagra_cols;
SELECT count(*) FROM cagra_search('rls_t_v_odd', ARRAY['[100,2,0]']::vector[], 3);
RESET ROLE;
-- no privilege at all
SET ROLE regress_cagra_other;
SELECT * FROM cagra_search('rls_t_v', ARRAY['[100,2,0]']::vector[], 3);
RESET ROLE;

-- cagra_index_info shows the table's row counts: the same privileges as a
-- search (SELECT on the table or the index's columns)
SET ROLE regress_cagra_other;
SELECT live_nodes FROM cagra_index_info('rls_t_v');
RESET ROLE;
SET ROLE regress_cagra_cols;
SELECT live_nodes FROM cagra_index_info('rls_t_v');
RESET ROLE;

-- an index in a schema without USAGE: its name does not resolve, and its
-- OID reaches neither the rows nor the counts (as a query of the table
-- would not)
CREATE SCHEMA regress_cagra_hidden;
CREATE TABLE regress_cagra_hidden.h (id int, v vector(3));
INSERT INTO regress_cagra_hidden.h SELECT i, ARRAY[i, 0, 0] FROM generate_series(1, 50) i;
CREATE INDEX h_v ON regress_cagra_hidden.h USING cagra (v);
GRANT SELECT ON regress_cagra_hidden.h TO regress_cagra_other;
SELECT 'regress_cagra_hidden.h_v'::regclass::oid AS h_v \gset
SET ROLE regress_cagra_other;
SELECT count(*) FROM cagra_search('regress_cagra_hidden.h_v', ARRAY['[1,0,0]']::vector[], 3);
SELECT count(*) FROM cagra_search(:h_v, ARRAY['[1,0,0]']::vector[], 3);
SELECT count(*) FROM cagra_search(:h_v, ARRAY['[1,0,0]']::vector[], 3, ARRAY['(0,1)']::tid[]);
SELECT live_nodes FROM cagra_index_info(:h_v);
RESET ROLE;
GRANT USAGE ON SCHEMA regress_cagra_hidden TO regress_cagra_other;
SET ROLE regress_cagra_other;
SELECT count(*) FROM cagra_search(:h_v, ARRAY['[1,0,0]']::vector[], 3);
SELECT live_nodes FROM cagra_index_info(:h_v);
RESET ROLE;
DROP SCHEMA regress_cagra_hidden CASCADE;

-- the worker's status: pg_monitor, not PUBLIC; the function like the view
SET ROLE regress_cagra_other;
SELECT state FROM cagra_status;
SELECT state FROM cagra_worker_status();
SELECT count(*) FROM cagra_worker_cache();
SELECT count(*) FROM cagra_worker_timings();
RESET ROLE;
GRANT pg_monitor TO regress_cagra_other;
SET ROLE regress_cagra_other;
SELECT state FROM cagra_status;
SELECT state FROM cagra_worker_status();
SELECT count(*) FROM cagra_worker_cache();
SELECT count(*) FROM cagra_worker_timings();
RESET ROLE;
SELECT has_function_privilege('public', 'cagra_worker_status()', 'EXECUTE') AS public_status,
       has_function_privilege('public', 'cagra_worker_cache()', 'EXECUTE') AS public_cache,
       has_table_privilege('pg_monitor', 'cagra_status', 'SELECT') AS monitor_view,
       has_function_privilege('pg_monitor', 'cagra_worker_status()', 'EXECUTE') AS monitor_status,
       has_function_privilege('pg_monitor', 'cagra_worker_cache()', 'EXECUTE') AS monitor_cache,
       has_function_privilege('public', 'cagra_worker_timings()', 'EXECUTE') AS public_timings,
       has_function_privilege('pg_monitor', 'cagra_worker_timings()', 'EXECUTE') AS monitor_timings;

DROP TABLE rls_t;
DROP ROLE regress_cagra_owner, regress_cagra_alice, regress_cagra_bob, regress_cagra_bypass, regress_cagra_cols,
  regress_cagra_other;
