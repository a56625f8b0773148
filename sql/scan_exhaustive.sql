-- When the graph search of a scan stops (cagra.max_scan_tuples rows
-- returned, or no more found) and the executor still wants rows, the scan
-- goes on with every node it has not returned, in distance order: a filter
-- the search cannot see never makes LIMIT k return fewer than min(k,
-- matching rows), and the rows stay in distance order.  Checked against
-- the exact answer (a sequential scan and a sort) for the index scan (no
-- index on the filter's column) and the filtered scan, with
-- cagra.max_scan_tuples low so that the search stops early.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

-- tag: 4 rows of 20,000 each (0.02%); grp: 200 rows each, with an index
CREATE TABLE sx (id int, tag int, grp int, v vector(8)) WITH (autovacuum_enabled = off);
INSERT INTO sx SELECT i, i % 5000, i % 100, array_agg(sin(i * 0.37 + d * 1.1) + cos(i * 0.013 * d) ORDER BY d)::vector
  FROM generate_series(1, 20000) i, generate_series(1, 8) d GROUP BY i;
CREATE INDEX sx_v ON sx USING cagra (v) WITH (graph_degree = 16, intermediate_graph_degree = 32);
CREATE INDEX sx_grp ON sx (grp);
VACUUM ANALYZE sx;

-- The plan's answer for each of 10 queries (vectors of rows) against the
-- exact one (ordered by an expression no index answers: a scan of every
-- row and a sort): how many queries got as many rows as the exact answer,
-- and how many got the exact answer itself (the same rows in the same order).
CREATE FUNCTION pg_temp.against_exact(filter text, k int, OUT queries int, OUT plan text,
									  OUT same_count int, OUT same_rows int)
LANGUAGE plpgsql AS $$
DECLARE
	q text;
	got int[];
	want int[];
	line text;
	qid int;
BEGIN
	queries := 0; same_count := 0; same_rows := 0; plan := 'other';
	FOR qid IN SELECT i * 1999 FROM generate_series(1, 10) i LOOP
		q := format('SELECT id FROM sx WHERE %s ORDER BY v <-> (SELECT v FROM sx WHERE id = %s) LIMIT %s',
					filter, qid, k);
		IF queries = 0 THEN
			FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
				IF line LIKE '%Cagra Filtered Scan%' THEN plan := 'filtered scan';
				ELSIF line LIKE '%Index Scan using sx_v%' AND plan = 'other' THEN plan := 'index scan';
				END IF;
			END LOOP;
		END IF;
		EXECUTE format('SELECT array_agg(id) FROM (%s) s', q) INTO got;
		EXECUTE format('SELECT array_agg(id) FROM (SELECT id FROM sx WHERE %s '
					   'ORDER BY (v <-> (SELECT v FROM sx WHERE id = %s)) + 0 LIMIT %s) s', filter, qid, k)
			INTO want;
		queries := queries + 1;
		same_count := same_count + (coalesce(cardinality(got), 0) = coalesce(cardinality(want), 0))::int;
		same_rows := same_rows + (got IS NOT DISTINCT FROM want)::int;
	END LOOP;
END
$$;

-- the index scan: the executor filters its rows (no index on tag)
SET enable_seqscan = off;
SET cagra.max_scan_tuples = 50;
SELECT * FROM pg_temp.against_exact('tag = 7', 3);
SELECT * FROM pg_temp.against_exact('tag = 7', 10);
SELECT * FROM pg_temp.against_exact('tag IN (11, 12)', 5);
SELECT * FROM pg_temp.against_exact('tag = -1', 3);
SET cagra.max_scan_tuples = 1000;
SELECT * FROM pg_temp.against_exact('tag = 4999 AND id > 0', 10);
-- the default: the CPU search stops at live rows / graph_degree results
RESET cagra.max_scan_tuples;
SELECT * FROM pg_temp.against_exact('tag = 7', 10);
SELECT * FROM pg_temp.against_exact('tag IN (11, 12)', 10);

-- rescans (a scan per outer row) start each search and pass afresh
SET cagra.max_scan_tuples = 50;
EXPLAIN (COSTS OFF) SELECT q.id, (SELECT array_agg(id) FROM (SELECT s.id FROM sx s WHERE s.tag = 7
															 ORDER BY s.v <-> q.v LIMIT 3) g)
  FROM sx q WHERE q.id % 2000 = 1;
SELECT count(*) AS queries, bool_and(got = want) AS exact
  FROM (SELECT q.id, (SELECT array_agg(id) FROM (SELECT s.id FROM sx s WHERE s.tag = 7
											   ORDER BY s.v <-> q.v LIMIT 3) g) AS got,
			   (SELECT array_agg(id) FROM (SELECT s.id FROM sx s WHERE s.tag = 7
										   ORDER BY (s.v <-> q.v) + 0 LIMIT 3) w) AS want
		  FROM sx q WHERE q.id % 2000 = 1) t;

-- every row, in distance order, past cagra.max_scan_tuples
SET cagra.max_scan_tuples = 50;
SELECT count(*) AS rows, count(DISTINCT id) AS distinct_rows, bool_and(d >= prev) AS in_order
  FROM (SELECT id, d, lag(d, 1, 0::float8) OVER (ORDER BY n) AS prev
		  FROM (SELECT id, v <-> '[1,1,1,1,0,0,0,0]' AS d, row_number() OVER () AS n
				  FROM (SELECT id, v FROM sx ORDER BY v <-> '[1,1,1,1,0,0,0,0]' LIMIT 100000) o) s) t;

-- the filtered scan (forced): the filter's index allows 200 rows, of
-- which the other condition passes 4
SET enable_bitmapscan = off;
SET enable_indexscan = off;
SET cagra.max_scan_tuples = 20;
SELECT * FROM pg_temp.against_exact('grp = 7 AND (id / 100) % 50 = 3', 3);
SELECT * FROM pg_temp.against_exact('grp = 7 AND (id / 100) % 50 = 3', 10);
SELECT * FROM pg_temp.against_exact('grp = 8 AND id % 2 = 1', 5);
EXPLAIN (COSTS OFF) SELECT q.id, (SELECT array_agg(id) FROM (SELECT s.id FROM sx s WHERE s.grp = 7 AND (s.id / 100) % 50 = 3
															 ORDER BY s.v <-> q.v LIMIT 3) g)
  FROM sx q WHERE q.id % 2000 = 1;
SELECT count(*) AS queries, bool_and(got = want) AS exact
  FROM (SELECT q.id, (SELECT array_agg(id) FROM (SELECT s.id FROM sx s WHERE s.grp = 7 AND (s.id / 100) % 50 = 3
											   ORDER BY s.v <-> q.v LIMIT 3) g) AS got,
			   (SELECT array_agg(id) FROM (SELECT s.id FROM sx s WHERE s.grp = 7 AND (s.id / 100) % 50 = 3
										   ORDER BY (s.v <-> q.v) + 0 LIMIT 3) w) AS want
		  FROM sx q WHERE q.id % 2000 = 1) t;
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
	SELECT id FROM sx WHERE grp = 7 AND (id / 100) % 50 = 3 ORDER BY v <-> '[1,1,1,1,0,0,0,0]' LIMIT 10;
-- more rows than one traversal keeps: rounds up to 1,024, then the pass
RESET cagra.max_scan_tuples;
SELECT count(*) AS rows, count(DISTINCT id) AS distinct_rows, bool_and(d >= prev) AS in_order,
	   bool_and(grp < 10 AND id % 2 = 0) AS all_pass
  FROM (SELECT id, grp, d, lag(d, 1, 0::float8) OVER (ORDER BY n) AS prev
		  FROM (SELECT id, grp, v <-> '[1,1,1,1,0,0,0,0]' AS d, row_number() OVER () AS n
				  FROM (SELECT id, grp, v FROM sx WHERE grp < 10 AND id % 2 = 0
						 ORDER BY v <-> '[1,1,1,1,0,0,0,0]' LIMIT 1000) o) s) t;
RESET enable_bitmapscan;
RESET enable_indexscan;

-- float16 storage: the order values are bounds the executor rechecks
DROP INDEX sx_v;
CREATE INDEX sx_v ON sx USING cagra (v) WITH (graph_degree = 16, intermediate_graph_degree = 32, storage = float16);
SET cagra.max_scan_tuples = 50;
SELECT * FROM pg_temp.against_exact('tag = 7', 3);
SELECT * FROM pg_temp.against_exact('tag IN (11, 12)', 10);

RESET cagra.max_scan_tuples;
RESET enable_seqscan;
DROP TABLE sx;
