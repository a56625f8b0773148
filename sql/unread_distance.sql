-- The ORDER BY distance that nothing reads is not computed
-- (cagra.skip_unread_distances, docs/index.md): a cagra scan under only
-- Limit and LockRows nodes returns NULL in the junk column that would hold
-- embedding <-> q, so the executor neither computes it nor reads an out of
-- line vector back for it.  Any plan that may read the value keeps it.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;
LOAD 'cagra';	-- the hook is installed when the library loads

CREATE TABLE ud (id int, category int, v vector(8)) WITH (autovacuum_enabled = off);
INSERT INTO ud SELECT i, i % 10, array_agg((hashint4(i * 8 + d) % 1000) / 1000.0 ORDER BY d)::vector
  FROM generate_series(1, 2000) i, generate_series(1, 8) d GROUP BY i;
CREATE INDEX ud_v ON ud USING cagra (v) WITH (graph_degree = 16, intermediate_graph_degree = 32);
CREATE INDEX ud_category ON ud (category);
VACUUM ANALYZE ud;
SET enable_seqscan = off;
SET enable_sort = off;

-- the junk column becomes NULL: under a Limit, with a filter, under LockRows
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ud ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 5;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ud WHERE category = 3 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 5;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ud ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 5 FOR UPDATE;
-- the filtered scan's too
SET enable_indexscan = off;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ud WHERE category = 3 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 5;
RESET enable_indexscan;

-- left as they are: a visible distance, WITH TIES (which compares the
-- values), a sort above the scan, the setting off
EXPLAIN (VERBOSE, COSTS OFF) SELECT id, v <-> '[1,0,0,0,0,0,0,0]' AS d FROM ud ORDER BY d LIMIT 5;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ud ORDER BY v <-> '[1,0,0,0,0,0,0,0]' FETCH FIRST 5 ROWS WITH TIES;
EXPLAIN (VERBOSE, COSTS OFF)
SELECT id FROM (SELECT id, v <-> '[1,0,0,0,0,0,0,0]' AS d FROM ud ORDER BY d LIMIT 5) s ORDER BY d DESC;
SET cagra.skip_unread_distances = off;
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ud ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 5;
RESET cagra.skip_unread_distances;

-- the same rows in the same order, with the setting and without, for the
-- plain scan, the filtered one and a float16 index (whose order the
-- executor rechecks on the heap's vectors)
CREATE FUNCTION pg_temp.both_ways(query text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
	skipped int[]; computed int[];
BEGIN
	EXECUTE format('SELECT array_agg(id) FROM (%s) s', query) INTO skipped;
	SET LOCAL cagra.skip_unread_distances = off;
	EXECUTE format('SELECT array_agg(id) FROM (%s) s', query) INTO computed;
	RETURN cardinality(skipped) = 5 AND skipped = computed;
END $$;
SELECT pg_temp.both_ways('SELECT id FROM ud ORDER BY v <-> ''[1,0,0,0,0,0,0,0]'' LIMIT 5');
SELECT pg_temp.both_ways('SELECT id FROM ud WHERE category = 3 ORDER BY v <-> ''[1,0,0,0,0,0,0,0]'' LIMIT 5');
SET enable_indexscan = off;
SELECT pg_temp.both_ways('SELECT id FROM ud WHERE category = 3 ORDER BY v <-> ''[1,0,0,0,0,0,0,0]'' LIMIT 5');
RESET enable_indexscan;
DROP INDEX ud_v;
CREATE INDEX ud_v16 ON ud USING cagra (v) WITH (graph_degree = 16, intermediate_graph_degree = 32, storage = float16);
EXPLAIN (VERBOSE, COSTS OFF) SELECT id FROM ud ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 5;
SELECT pg_temp.both_ways('SELECT id FROM ud ORDER BY v <-> ''[1,0,0,0,0,0,0,0]'' LIMIT 5');
-- and the exact answer (the distances shown are the operator's)
SELECT id, round((v <-> '[1,0,0,0,0,0,0,0]')::numeric, 6) AS d FROM ud ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 5;
SET enable_indexscan = off;
SELECT id, round((v <-> '[1,0,0,0,0,0,0,0]')::numeric, 6) AS d FROM ud ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 5;

DROP TABLE ud;
