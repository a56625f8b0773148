-- The planner chooses between the cagra index scan (which checks a WHERE
-- filter on the rows it returns: its graph search's, up to
-- cagra.max_scan_tuples of them, then every other node in distance order)
-- and an exact search of the rows that pass the filter, by cost: the scan's
-- run cost grows as the filter's selectivity falls, and a scan whose graph
-- search would stop before finding the LIMIT's rows (leaving them to a pass
-- over the whole index) is never chosen.  Whichever plan it picks,
-- LIMIT k returns min(k, matching rows) rows.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

CREATE TABLE fp (id int, category int, rare bool, v vector(8)) WITH (autovacuum_enabled = off);
INSERT INTO fp SELECT i, i % 100, i % 5000 = 7,
	   array_agg(sin(i * 0.37 + d * 1.1) ORDER BY d)::vector
  FROM generate_series(1, 20000) i, generate_series(1, 8) d GROUP BY i;
CREATE INDEX fp_v ON fp USING cagra (v) WITH (graph_degree = 16, intermediate_graph_degree = 32);
CREATE INDEX fp_category ON fp (category);
CREATE INDEX fp_rare ON fp (rare);
VACUUM ANALYZE fp;

-- no filter: the index
EXPLAIN (COSTS OFF) SELECT id FROM fp ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10;
-- a filter that passes half the rows: the index, filtering what it returns
EXPLAIN (COSTS OFF) SELECT id FROM fp WHERE category < 50 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10;
-- a filter that passes 4 rows of 20,000, fewer than the LIMIT: the index
-- scan's graph search would stop before finding them
-- (cagra.max_scan_tuples); the rows that pass are found through their own
-- index and sorted
EXPLAIN (COSTS OFF) SELECT id FROM fp WHERE rare ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10;
SELECT count(*) FROM (SELECT id FROM fp WHERE rare ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10) s;
-- the same with a smaller max_scan_tuples, where 1% is too selective too
SET cagra.max_scan_tuples = 500;
EXPLAIN (COSTS OFF) SELECT id FROM fp WHERE category = 42 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10;
SELECT count(*) FROM (SELECT id FROM fp WHERE category = 42 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10) s;
RESET cagra.max_scan_tuples;

-- whichever plan: min(10, matching) rows, each passing the filter, nearly all
-- of them the exact answer's (recall@10; the exact plans give 10 of 10)
CREATE FUNCTION pg_temp.against_exact(filter text, OUT nrows int, OUT all_pass boolean, OUT recall numeric)
LANGUAGE plpgsql AS $$
DECLARE
	got int[]; want int[]; passing int;
BEGIN
	EXECUTE format('SELECT array_agg(id) FROM (SELECT id FROM fp WHERE %s ORDER BY v <-> ''[1,0,0,0,0,0,0,0]'' LIMIT 10) s', filter)
		INTO got;
	EXECUTE format('SELECT count(*) FROM fp WHERE (%s) AND id = ANY ($1)', filter) INTO passing USING got;
	SET LOCAL enable_indexscan = off;
	EXECUTE format('SELECT array_agg(id) FROM (SELECT id FROM fp WHERE %s ORDER BY v <-> ''[1,0,0,0,0,0,0,0]'' LIMIT 10) s', filter)
		INTO want;
	nrows := cardinality(got);
	all_pass := passing = nrows;
	recall := (SELECT count(*) FROM unnest(got) g WHERE g = ANY (want))::numeric / cardinality(want);
END
$$;
SELECT f, (pg_temp.against_exact(f)).nrows, (pg_temp.against_exact(f)).all_pass,
	   (pg_temp.against_exact(f)).recall >= 0.9 AS recall_ok
  FROM unnest(ARRAY['category < 50', 'rare', 'category = 42', 'category IN (1, 2, 3)',
                    'rare OR category = 9']) f;
-- a join that supplies the filter: the categories of one group
CREATE TABLE fp_group (category int, grp text);
INSERT INTO fp_group SELECT c, CASE WHEN c % 10 = 3 THEN 'threes' ELSE 'other' END FROM generate_series(0, 99) c;
ANALYZE fp_group;
SELECT count(*) AS nrows, bool_and(category % 10 = 3) AS all_pass FROM (
	SELECT f.id, f.category FROM fp f JOIN fp_group g USING (category) WHERE g.grp = 'threes'
	 ORDER BY f.v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10) s;
SELECT (SELECT array_agg(id) FROM (SELECT f.id FROM fp f JOIN fp_group g USING (category) WHERE g.grp = 'threes'
		 ORDER BY f.v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10) s)
	 = (SELECT array_agg(id) FROM (SELECT id FROM fp WHERE category % 10 = 3
		 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10) s) AS same_as_exact;

-- row-level security: the policy is a filter like any other, through the
-- index or not; a role sees min(10, its rows) rows, all its own
CREATE ROLE fp_reader;
GRANT SELECT ON fp TO fp_reader;
ALTER TABLE fp ENABLE ROW LEVEL SECURITY;
CREATE POLICY fp_one ON fp FOR SELECT TO fp_reader USING (category = 1 OR rare);
SET ROLE fp_reader;
SELECT count(*) AS nrows, bool_and(category = 1 OR rare) AS all_allowed FROM (
	SELECT id, category, rare FROM fp ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10) s;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count(*) AS nrows, bool_and(category = 1 OR rare) AS all_allowed FROM (
	SELECT id, category, rare FROM fp ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10) s;
RESET enable_seqscan;
RESET enable_bitmapscan;
RESET ROLE;
DROP TABLE fp, fp_group;
DROP ROLE fp_reader;
