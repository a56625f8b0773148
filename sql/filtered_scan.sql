-- The cagra filtered scan: a WHERE clause with an index of its own gives the
-- search its allowed rows (the filter's bitmap index scan), the search
-- returns only them, and every condition is checked again on the rows
-- fetched from the heap.  The planner picks it by cost between the index
-- scan that filters what it returns and the bitmap heap scan and sort, when
-- the GPU worker searches.  pg_regress starts no worker: a search in the
-- backend would read every node header to find the allowed rows, so the
-- planner keeps its own plans here (TAP 107 shows the choice with the
-- worker), and the filtered scan is run by disabling the others, which do
-- not govern it.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

CREATE TABLE fs (id int, category int, tenant int, lang text, v vector(8)) WITH (autovacuum_enabled = off);
INSERT INTO fs SELECT i, i % 100, i % 20, CASE WHEN i % 3 = 0 THEN 'en' ELSE 'de' END,
	   array_agg(sin(i * 0.37 + d * 1.1) ORDER BY d)::vector
  FROM generate_series(1, 100000) i, generate_series(1, 8) d GROUP BY i;
SET maintenance_work_mem = '256MB';
CREATE INDEX fs_v ON fs USING cagra (v) WITH (graph_degree = 16, intermediate_graph_degree = 32);
CREATE INDEX fs_category ON fs (category);
CREATE INDEX fs_tenant ON fs (tenant);
CREATE INDEX fs_id ON fs (id);
-- statistics of the whole table, so the estimates EXPLAIN shows are exact
ALTER TABLE fs ALTER category SET STATISTICS 1000, ALTER tenant SET STATISTICS 1000;
VACUUM ANALYZE fs;

-- without the worker, 1% of the rows: the bitmap heap scan and a sort
EXPLAIN (COSTS OFF) SELECT id FROM fs WHERE category = 42 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10;
-- half the rows: the index scan, filtering what it returns
EXPLAIN (COSTS OFF) SELECT id FROM fs WHERE category < 50 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10;
-- the filtered scan, the other plans disabled: its search exact over the
-- 1,000 allowed rows
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SET enable_indexscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM fs WHERE category = 42 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10;
-- an OR of two indexes' conditions: their bitmaps ORed, and the condition
-- no index answers checked on the rows
EXPLAIN (COSTS OFF) SELECT id FROM fs WHERE (category = 42 OR tenant = 3) AND lang = 'en'
	ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10;
-- what the searches did
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
	SELECT id FROM fs WHERE category = 42 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10;
RESET enable_seqscan;
RESET enable_bitmapscan;
RESET enable_indexscan;

-- whether `got` is an exact answer as `want` is: as many rows, in distance
-- order, none farther than want's last (the table has rows at nearly equal
-- distances, which the GPU and the CPU may rank either way)
CREATE FUNCTION pg_temp.same_answer(got int[], want int[]) RETURNS boolean
LANGUAGE sql AS $$
	WITH g AS (SELECT n, fs.v <-> '[1,0,0,0,0,0,0,0]' AS d FROM unnest(got) WITH ORDINALITY u(id, n) JOIN fs USING (id)),
	     w AS (SELECT max(fs.v <-> '[1,0,0,0,0,0,0,0]') AS last FROM unnest(want) u(id) JOIN fs USING (id))
	SELECT coalesce(cardinality(got), 0) = coalesce(cardinality(want), 0)
	   AND (SELECT count(DISTINCT x) FROM unnest(got) x) = coalesce(cardinality(got), 0)
	   AND coalesce((SELECT bool_and(d <= w.last + 1e-6) FROM g, w), true)
	   AND coalesce((SELECT bool_and(a.d <= b.d + 1e-6) FROM g a JOIN g b ON b.n = a.n + 1), true)
$$;

-- the rows against the exact answer (the same query without cagra's plans):
-- the planner's choice, and the filtered scan forced (the other plans
-- disabled)
CREATE FUNCTION pg_temp.against_exact(filter text, k int, OUT chosen text, OUT nrows int, OUT all_pass boolean,
									  OUT same_as_exact boolean, OUT chosen_same boolean)
LANGUAGE plpgsql AS $$
DECLARE
	q text := format('SELECT id FROM fs WHERE %s ORDER BY v <-> ''[1,0,0,0,0,0,0,0]'' LIMIT %s', filter, k);
	got int[]; want int[]; planned int[]; passing int; line text; forced boolean := false;
BEGIN
	chosen := 'other';
	FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
		IF line LIKE '%Cagra Filtered Scan%' THEN chosen := 'filtered scan'; END IF;
	END LOOP;
	EXECUTE format('SELECT array_agg(id) FROM (%s) s', q) INTO planned;
	SET LOCAL enable_seqscan = off;
	SET LOCAL enable_bitmapscan = off;
	SET LOCAL enable_indexscan = off;
	FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
		IF line LIKE '%Cagra Filtered Scan%' THEN forced := true; END IF;
	END LOOP;
	IF NOT forced THEN RAISE EXCEPTION 'no filtered scan for %', filter; END IF;
	EXECUTE format('SELECT array_agg(id) FROM (%s) s', q) INTO got;
	EXECUTE format('SELECT count(*) FROM fs WHERE (%s) AND id = ANY ($1)', filter) INTO passing USING got;
	SET LOCAL cagra.enable_filtered_scan = off;
	SET LOCAL enable_seqscan = on;
	SET LOCAL enable_bitmapscan = on;
	EXECUTE format('SELECT array_agg(id) FROM (%s) s', q) INTO want;
	nrows := coalesce(cardinality(got), 0);
	all_pass := passing = nrows;
	same_as_exact := pg_temp.same_answer(got, want);
	chosen_same := pg_temp.same_answer(planned, want);
	RESET enable_seqscan;
	RESET enable_bitmapscan;
	RESET enable_indexscan;
	RESET cagra.enable_filtered_scan;
RESET enable_bitmapscan;
END
$$;
-- single conditions, AND (two bitmaps), OR, IN lists, a condition no index
-- answers, a single matching row (past the rounds the worker answers:
-- every allowed row measured), more rows asked for than pass (1,000
-- allowed, a third of them 'en'), nothing passing
SELECT f, k, e.*
  FROM (VALUES ('category = 42', 10), ('category = 42 AND lang = ''en''', 10),
               ('category IN (1, 2, 3)', 10), ('category = 7 OR tenant = 3', 10),
               ('category = 42 AND tenant = 2', 10), ('category = 42 AND id + 0 = 4242', 10),
               ('category = 42 AND lang = ''en''', 400), ('category = 42', 150),
               ('category IN (5, 6, 7, 8)', 700), ('category = 42 AND tenant = 3', 10)) AS t(f, k),
       LATERAL pg_temp.against_exact(f, k) e;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SET enable_indexscan = off;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
	SELECT id FROM fs WHERE category = 42 AND id + 0 = 4242 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10;
-- a filter of one btree: its TIDs read from the index one by one, no
-- bitmap (Actual Allowed Rows: exactly the rows that pass)
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
	SELECT id FROM fs WHERE category IN (5, 6, 7, 8) ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10;
-- a bitmap larger than work_mem turns lossy: its pages allow every row on
-- them, and the conditions checked on the rows keep the answer exact
SET work_mem = '64kB';
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
	SELECT id FROM fs WHERE category IN (5, 6, 7, 8) OR tenant = 3 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10;
SELECT pg_temp.same_answer(array_agg(id), (SELECT array_agg(id) FROM (SELECT id FROM fs
						   WHERE category + 0 IN (5, 6, 7, 8) OR tenant + 0 = 3
						   ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10) e)) AS same_as_exact
  FROM (SELECT id FROM fs WHERE category IN (5, 6, 7, 8) OR tenant = 3
		ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10) s;
RESET work_mem;
RESET enable_seqscan;
RESET enable_bitmapscan;
RESET enable_indexscan;
-- another access method that returns TIDs one by one (hash; an IN list on the
-- btree above gives them out of order, which is sorted before the search)
CREATE INDEX fs_tenant_hash ON fs USING hash (tenant);
DROP INDEX fs_tenant;
SELECT e.* FROM pg_temp.against_exact('tenant = 3', 10) e;
CREATE INDEX fs_tenant ON fs (tenant);
DROP INDEX fs_tenant_hash;

-- the filtered scan from here on
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SET enable_indexscan = off;

-- rescans with new parameters: each category's nearest row (LATERAL)
SELECT c.category, s.id,
	   s.id = (SELECT id FROM fs f WHERE f.category + 0 = c.category ORDER BY f.v <-> c.q LIMIT 1) AS exact
  FROM (SELECT g AS category, ('[' || g || ',0,0,0,0,0,0,1]')::vector AS q FROM generate_series(10, 13) g) c,
	   LATERAL (SELECT id FROM fs WHERE category = c.category ORDER BY v <-> c.q LIMIT 1) s
 ORDER BY c.category;

-- a generic prepared plan, its parameters in the filter and the query
SET plan_cache_mode = force_generic_plan;
PREPARE near(int, vector) AS SELECT id FROM fs WHERE category = $1 ORDER BY v <-> $2 LIMIT 10;
EXPLAIN (COSTS OFF) EXECUTE near(42, '[1,0,0,0,0,0,0,0]');
CREATE TEMP TABLE near_42 AS EXECUTE near(42, '[1,0,0,0,0,0,0,0]');
CREATE TEMP TABLE near_43 AS EXECUTE near(43, '[0,1,0,0,0,0,0,0]');
SELECT (SELECT array_agg(id ORDER BY id) FROM near_42)
	 = (SELECT array_agg(id ORDER BY id) FROM (SELECT id FROM fs WHERE category + 0 = 42
		 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10) e) AS same_42,
	   (SELECT array_agg(id ORDER BY id) FROM near_43)
	 = (SELECT array_agg(id ORDER BY id) FROM (SELECT id FROM fs WHERE category + 0 = 43
		 ORDER BY v <-> '[0,1,0,0,0,0,0,0]' LIMIT 10) e) AS same_43;
DEALLOCATE near;
RESET plan_cache_mode;

-- MVCC: a row deleted or updated in this transaction, as the snapshot sees it
BEGIN;
CREATE TEMP TABLE nearest AS
	SELECT id FROM fs WHERE category = 42 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 2;
DELETE FROM fs WHERE id = (SELECT min(id) FROM nearest);
UPDATE fs SET lang = 'fr' WHERE id = (SELECT max(id) FROM nearest);		-- a HOT update
SELECT id IN (SELECT id FROM nearest) AS was_nearest, lang
  FROM (SELECT id, lang FROM fs WHERE category = 42 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 2) s ORDER BY 1, 2;
ROLLBACK;

-- row-level security: the policy's condition is checked on every row
CREATE ROLE fs_reader;
GRANT SELECT ON fs TO fs_reader;
ALTER TABLE fs ENABLE ROW LEVEL SECURITY;
CREATE POLICY fs_tenant ON fs FOR SELECT TO fs_reader USING (tenant <> 2);
SET ROLE fs_reader;
EXPLAIN (COSTS OFF) SELECT id FROM fs WHERE category = 42 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10;
-- category 42 is in tenant 2 only: nothing
SELECT count(*) FROM (SELECT id FROM fs WHERE category = 42 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10) s;
SELECT count(*) AS nrows, bool_and(tenant <> 2) AS all_allowed
  FROM (SELECT id, tenant FROM fs WHERE category IN (42, 43) ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10) s;
RESET ROLE;
ALTER TABLE fs DISABLE ROW LEVEL SECURITY;
DROP POLICY fs_tenant ON fs;
REVOKE SELECT ON fs FROM fs_reader;
DROP ROLE fs_reader;

RESET enable_seqscan;
RESET enable_bitmapscan;
RESET enable_indexscan;

-- off: the planner's own plans only, even with them disabled
SET cagra.enable_filtered_scan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM fs WHERE category = 42 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10;
RESET cagra.enable_filtered_scan;
RESET enable_bitmapscan;

-- an index that rounds its vectors to float16 gets no filtered scan (its
-- order is a bound the executor rechecks)
DROP INDEX fs_v;
SET maintenance_work_mem = '256MB';
CREATE INDEX fs_v16 ON fs USING cagra (v) WITH (graph_degree = 16, intermediate_graph_degree = 32, storage = float16);
EXPLAIN (COSTS OFF) SELECT id FROM fs WHERE category = 42 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10;
DROP TABLE fs;
