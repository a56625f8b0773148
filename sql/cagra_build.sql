-- The cagra access method on small tables: builds (empty, one row, small),
-- each operator class, NULL and zero vectors, inserts, wrong dimensions,
-- reloptions, unlogged tables, plans, cagra_index_info / cagra_index_check.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

-- small tables: the planner may prefer a sort, so make it use the index
SET enable_seqscan = off;

-- an empty table gives a valid empty index (meta page only)
CREATE TABLE t_empty (id int, v vector(3));
CREATE INDEX t_empty_idx ON t_empty USING cagra (v vector_l2_ops);
SELECT dimensions, metric, graph_degree, intermediate_graph_degree, build_device,
       nodes, live_nodes, deleted_nodes, entry_nodes, pages, size_bytes, generation > 0 AS has_generation
  FROM cagra_index_info('t_empty_idx');
SELECT generation AS gen0 FROM cagra_index_info('t_empty_idx') \gset
SELECT * FROM cagra_index_check('t_empty_idx');
SELECT id FROM t_empty ORDER BY v <-> '[1,2,3]' LIMIT 5;
-- inserts into the empty index
INSERT INTO t_empty VALUES (1, '[1,2,3]'), (2, '[3,2,1]'), (3, NULL);
SELECT id FROM t_empty ORDER BY v <-> '[1,2,3]' LIMIT 5;
-- each insert bumps the generation
SELECT nodes, live_nodes, entry_nodes, generation - :gen0 AS bumps FROM cagra_index_info('t_empty_idx');
SELECT * FROM cagra_index_check('t_empty_idx');

-- one row
CREATE TABLE t_one (id int, v vector(2));
INSERT INTO t_one VALUES (1, '[0,1]');
CREATE INDEX t_one_idx ON t_one USING cagra (v);
SELECT id, v <-> '[0,0]' AS dist FROM t_one ORDER BY v <-> '[0,0]' LIMIT 3;
SELECT nodes, live_nodes FROM cagra_index_info('t_one_idx');
SELECT * FROM cagra_index_check('t_one_idx');

-- a small table, fewer rows than graph_degree, then inserts beyond it:
-- rows start with padding that the inserts fill in
CREATE TABLE t_small (id int, v vector(3));
INSERT INTO t_small SELECT i, ARRAY[i, i % 5, i % 3]::vector FROM generate_series(1, 10) i;
CREATE INDEX t_small_idx ON t_small USING cagra (v vector_l2_ops)
  WITH (graph_degree = 8, intermediate_graph_degree = 16);
SELECT id, v <-> '[4,4,1]' AS dist FROM t_small ORDER BY v <-> '[4,4,1]' LIMIT 4;
INSERT INTO t_small SELECT i, ARRAY[i, i % 5, i % 3]::vector FROM generate_series(11, 200) i;
SELECT nodes, live_nodes FROM cagra_index_info('t_small_idx');
SELECT * FROM cagra_index_check('t_small_idx');
-- the same five as the exact order (sorted: equal distances may swap)
SELECT array_agg(id ORDER BY id) AS ids FROM (SELECT id FROM t_small ORDER BY v <-> '[50,2,1]' LIMIT 5) s;
SET enable_indexscan = off;
SET enable_seqscan = on;
SELECT array_agg(id ORDER BY id) AS ids FROM (SELECT id FROM t_small ORDER BY v <-> '[50,2,1]' LIMIT 5) s;
RESET enable_indexscan;
SET enable_seqscan = off;

-- deleted nodes are never returned, even once vacuum has let the heap reuse
-- their TIDs for new rows (entry nodes included: the scan caches their
-- vectors, not their flags); the new rows take the slots vacuum freed
-- (sql/slot_reuse.sql), so the index does not grow
CREATE TABLE t_reuse (id int, v vector(2)) WITH (autovacuum_enabled = off);
INSERT INTO t_reuse SELECT i, ARRAY[i % 20, i / 20]::vector FROM generate_series(1, 400) i;
CREATE INDEX t_reuse_idx ON t_reuse USING cagra (v) WITH (graph_degree = 8, intermediate_graph_degree = 16);
SELECT count(*) AS rows, count(DISTINCT id) AS distinct_ids FROM
  (SELECT id FROM t_reuse ORDER BY v <-> '[10,10]' LIMIT 1000) s;
DELETE FROM t_reuse WHERE id % 2 = 0;
VACUUM t_reuse;
INSERT INTO t_reuse SELECT i, ARRAY[i % 20, i / 20 + 0.5]::vector FROM generate_series(1001, 1200) i;
SELECT nodes, live_nodes, deleted_nodes FROM cagra_index_info('t_reuse_idx');
SELECT count(*) AS rows, count(DISTINCT id) AS distinct_ids, count(*) FILTER (WHERE id % 2 = 0 AND id <= 400) AS deleted
  FROM (SELECT id FROM t_reuse ORDER BY v <-> '[10,10]' LIMIT 1000) s;
SELECT * FROM cagra_index_check('t_reuse_idx');
DROP TABLE t_reuse;

-- each operator class returns the operator's own values, in order
CREATE TABLE t_ops (id int, v vector(2));
INSERT INTO t_ops SELECT i, ARRAY[cos(i * 0.1) * (1 + i % 4), sin(i * 0.1) * (1 + i % 4)]::vector
  FROM generate_series(1, 300) i;
CREATE INDEX t_ops_l2 ON t_ops USING cagra (v vector_l2_ops);
SELECT id, round((v <-> '[2,0]')::numeric, 6) AS dist FROM t_ops ORDER BY v <-> '[2,0]' LIMIT 3;
DROP INDEX t_ops_l2;
CREATE INDEX t_ops_ip ON t_ops USING cagra (v vector_ip_ops);
SELECT id, round((v <#> '[1,0]')::numeric, 6) AS dist FROM t_ops ORDER BY v <#> '[1,0]' LIMIT 3;
SELECT metric FROM cagra_index_info('t_ops_ip');
DROP INDEX t_ops_ip;
CREATE INDEX t_ops_cos ON t_ops USING cagra (v vector_cosine_ops);
SELECT id, round((v <=> '[1,0]')::numeric, 6) AS dist FROM t_ops ORDER BY v <=> '[1,0]' LIMIT 3;
SELECT metric FROM cagra_index_info('t_ops_cos');
SELECT * FROM cagra_index_check('t_ops_cos');
EXPLAIN (COSTS OFF) SELECT id FROM t_ops ORDER BY v <=> '[1,0]' LIMIT 3;
-- an operator the index does not serve: no index scan
EXPLAIN (COSTS OFF) SELECT id FROM t_ops ORDER BY v <-> '[1,0]' LIMIT 3;
DROP INDEX t_ops_cos;

-- cosine: zero vectors are not indexed (their cosine distance is undefined)
CREATE TABLE t_zero (id int, v vector(2));
INSERT INTO t_zero VALUES (1, '[1,0]'), (2, '[0,0]'), (3, '[0,1]'), (4, NULL);
CREATE INDEX t_zero_idx ON t_zero USING cagra (v vector_cosine_ops);
INSERT INTO t_zero VALUES (5, '[0,0]'), (6, '[1,1]');
SELECT nodes, live_nodes FROM cagra_index_info('t_zero_idx');
SELECT id FROM t_zero ORDER BY v <=> '[1,0.1]' LIMIT 10;

-- a column without typmod: the first vector fixes the dimensions
CREATE TABLE t_any (id int, v vector);
CREATE INDEX t_any_idx ON t_any USING cagra (v vector_l2_ops);
SELECT dimensions, nodes_per_page FROM cagra_index_info('t_any_idx');
INSERT INTO t_any VALUES (1, '[1,2]'), (2, '[2,3]');
SELECT dimensions, nodes FROM cagra_index_info('t_any_idx');
-- wrong dimensions on insert: a clear error, nothing changes
INSERT INTO t_any VALUES (3, '[1,2,3]');
SELECT nodes FROM cagra_index_info('t_any_idx');
-- and for a query vector
SELECT id FROM t_any ORDER BY v <-> '[1,2,3]' LIMIT 1;
-- a build over mixed dimensions fails the same way
CREATE TABLE t_mixed (v vector);
INSERT INTO t_mixed VALUES ('[1,2]'), ('[1,2,3]');
CREATE INDEX ON t_mixed USING cagra (v vector_l2_ops);

-- the typmod catches it first on a constrained column
INSERT INTO t_small VALUES (0, '[1,2]');

-- reloptions
CREATE INDEX ON t_small USING cagra (v) WITH (graph_degree = 64, intermediate_graph_degree = 32);
CREATE INDEX ON t_small USING cagra (v) WITH (graph_degree = 1);
CREATE INDEX ON t_small USING cagra (v) WITH (graph_degree = 5000);
CREATE INDEX ON t_small USING cagra (v) WITH (intermediate_graph_degree = 1);
CREATE INDEX ON t_small USING cagra (v) WITH (intermediate_graph_degree = 2000);
CREATE INDEX ON t_small USING cagra (v) WITH (build_device = tpu);
CREATE INDEX ON t_small USING cagra (v) WITH (build_device = gpu);
CREATE INDEX ON t_small USING cagra (v) WITH (ef_construction = 10);
CREATE INDEX t_small_cpu ON t_small USING cagra (v) WITH (build_device = cpu, graph_degree = 4, intermediate_graph_degree = 4);
SELECT graph_degree, intermediate_graph_degree, build_device FROM cagra_index_info('t_small_cpu');
ALTER INDEX t_small_cpu SET (graph_degree = 16);
DROP INDEX t_small_cpu;
-- only one column, no INCLUDE, no UNIQUE
CREATE INDEX ON t_small USING cagra (v, id);
CREATE UNIQUE INDEX ON t_small USING cagra (v);

-- maintenance_work_mem too small for the whole build: the rows beyond it go
-- to temporary files and the graph is built from all of them, the same graph
-- as with ample memory (one build thread: the same graph for the same rows)
SET max_parallel_maintenance_workers = 0;
CREATE TABLE t_mem (id int, v vector(64));
INSERT INTO t_mem SELECT i, array(SELECT sin(i * 0.37 + j) + cos(i * 0.011 * j) FROM generate_series(1, 64) j)::vector
  FROM generate_series(1, 3000) i;
CREATE TABLE t_mem_answers (mem text, q int, ids int[]);
SET maintenance_work_mem = '1MB';
CREATE INDEX t_mem_v ON t_mem USING cagra (v) WITH (build_device = cpu);
-- every node from the build, none inserted one at a time
SELECT nodes, live_nodes, built_nodes FROM cagra_index_info('t_mem_v');
SELECT count(*) AS problems FROM cagra_index_check('t_mem_v');
SET enable_seqscan = off;
INSERT INTO t_mem_answers
  SELECT '1MB', q.id, ARRAY(SELECT id FROM t_mem ORDER BY v <-> q.v LIMIT 10)
    FROM t_mem q WHERE q.id % 50 = 0;
RESET enable_seqscan;
DROP INDEX t_mem_v;
SET maintenance_work_mem = '64MB';
CREATE INDEX t_mem_v ON t_mem USING cagra (v) WITH (build_device = cpu);
SELECT nodes, live_nodes, built_nodes FROM cagra_index_info('t_mem_v');
SET enable_seqscan = off;
INSERT INTO t_mem_answers
  SELECT '64MB', q.id, ARRAY(SELECT id FROM t_mem ORDER BY v <-> q.v LIMIT 10)
    FROM t_mem q WHERE q.id % 50 = 0;
RESET enable_seqscan;
-- the same answers at both, and the exact ten nearest (all but a few)
SELECT count(*) AS queries, count(*) FILTER (WHERE a.ids = b.ids) AS same_answers
  FROM t_mem_answers a JOIN t_mem_answers b ON a.q = b.q AND a.mem = '1MB' AND b.mem = '64MB';
SELECT sum(cardinality(ARRAY(SELECT unnest(a.ids) INTERSECT
                             SELECT id FROM (SELECT id FROM t_mem ORDER BY (v <-> q.v) + 0 LIMIT 10) e))) >= 0.99 * 600
         AS recall_at_10_above_099
  FROM t_mem_answers a JOIN t_mem q ON q.id = a.q WHERE a.mem = '1MB';
-- those files count against temp_file_limit: over it the build fails and
-- leaves no index
SET maintenance_work_mem = '1MB';
SET temp_file_limit = '100kB';
CREATE INDEX t_mem_limited ON t_mem USING cagra (v) WITH (build_device = cpu);
RESET temp_file_limit;
SELECT count(*) AS left_behind FROM pg_class WHERE relname = 't_mem_limited';
DROP TABLE t_mem, t_mem_answers;
RESET maintenance_work_mem;
RESET max_parallel_maintenance_workers;

-- an unlogged table (its index has an init fork)
CREATE UNLOGGED TABLE t_unlogged (id int, v vector(3));
INSERT INTO t_unlogged SELECT i, ARRAY[i, 2 * i, 0]::vector FROM generate_series(1, 100) i;
CREATE INDEX t_unlogged_idx ON t_unlogged USING cagra (v);
SELECT id FROM t_unlogged ORDER BY v <-> '[10,20.5,1]' LIMIT 3;
INSERT INTO t_unlogged VALUES (1000, '[10,20.5,1]');
SELECT id FROM t_unlogged ORDER BY v <-> '[10,20.5,1]' LIMIT 3;
SELECT * FROM cagra_index_check('t_unlogged_idx');

-- a temporary table (local buffers, no WAL)
CREATE TEMP TABLE t_temp (id int, v vector(2));
INSERT INTO t_temp SELECT i, ARRAY[i, (i * 7) % 11]::vector FROM generate_series(1, 500) i;
CREATE INDEX t_temp_idx ON t_temp USING cagra (v);
SELECT id FROM t_temp ORDER BY v <-> '[250.2,4]' LIMIT 3;
INSERT INTO t_temp VALUES (1000, '[250.3,4]');
DELETE FROM t_temp WHERE id = 250;
VACUUM t_temp;
SELECT id FROM t_temp ORDER BY v <-> '[250.2,4]' LIMIT 3;
SELECT * FROM cagra_index_check('t_temp_idx');
DROP TABLE t_temp;

-- 16,000 dimensions: a node spans several pages
CREATE TABLE t_wide (id int, v vector(16000));
INSERT INTO t_wide SELECT i, array_fill(i::real, ARRAY[16000])::vector FROM generate_series(1, 30) i;
CREATE INDEX t_wide_idx ON t_wide USING cagra (v) WITH (graph_degree = 8, intermediate_graph_degree = 16);
SELECT dimensions, nodes, nodes_per_page, pages_per_node, pages FROM cagra_index_info('t_wide_idx');
INSERT INTO t_wide SELECT i, array_fill(i::real, ARRAY[16000])::vector FROM generate_series(31, 35) i;
SELECT * FROM cagra_index_check('t_wide_idx');
SELECT id FROM t_wide ORDER BY v <-> array_fill(33.2::real, ARRAY[16000])::vector LIMIT 3;
DELETE FROM t_wide WHERE id = 33;
VACUUM t_wide;
SELECT id FROM t_wide ORDER BY v <-> array_fill(33.2::real, ARRAY[16000])::vector LIMIT 3;
SELECT * FROM cagra_index_check('t_wide_idx');

-- EXPLAIN (COSTS OFF), with an InitPlan's value named as PostgreSQL 17 names
-- it, "(InitPlan 1).col1" (15: "InitPlan 1 (returns $0)" and "$0"), so that
-- the output is the same on both; the plans here have one InitPlan, of one
-- column.
CREATE FUNCTION pg_temp.explain(query text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
	line text;
BEGIN
	FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || query LOOP
		line := regexp_replace(line, '^(\s*InitPlan \d+) \(returns \$\d+\)$', '\1');
		RETURN NEXT regexp_replace(line, '\$0\M', '(InitPlan 1).col1', 'g');
	END LOOP;
END
$$;

-- a NULL query vector (not a constant, so the index is used): rows come
-- with NULL distances, in no particular order
SELECT count(*), count(d) FROM (SELECT id, v <-> (SELECT NULL::vector) AS d FROM t_small
  ORDER BY v <-> (SELECT NULL::vector) LIMIT 50) s;
SELECT pg_temp.explain($q$SELECT id FROM t_small ORDER BY v <-> (SELECT NULL::vector) LIMIT 50$q$) AS "QUERY PLAN";

-- the index is never used without an ORDER BY distance
RESET enable_seqscan;
EXPLAIN (COSTS OFF) SELECT id FROM t_small WHERE v = '[1,1,1]';
EXPLAIN (COSTS OFF) SELECT count(*) FROM t_small;

-- info and check refuse other relations
SELECT * FROM cagra_index_info('t_small');
SELECT * FROM cagra_index_check('t_small');

-- search settings that contradict each other: a clear error (through the
-- index, which a planner that prices the GPU worker's round trip would not
-- choose for 3 rows)
SET enable_seqscan = off;
SET cagra.itopk_size = 8;
SET cagra.search_width = 16;
SELECT id FROM t_small ORDER BY v <-> '[1,1,1]' LIMIT 3;
RESET cagra.itopk_size;
RESET cagra.search_width;
RESET enable_seqscan;

-- the check is for superusers unless granted; the info shows the table's
-- row counts, to those who may read the table
CREATE ROLE regress_cagra_nobody;
SET ROLE regress_cagra_nobody;
SELECT * FROM cagra_index_check('t_small_idx');
SELECT nodes FROM cagra_index_info('t_small_idx');
RESET ROLE;
DROP ROLE regress_cagra_nobody;

-- opclass validation
SELECT amvalidate(oid) FROM pg_opclass WHERE opcmethod = (SELECT oid FROM pg_am WHERE amname = 'cagra') ORDER BY opcname;

DROP TABLE t_empty, t_one, t_small, t_ops, t_zero, t_any, t_mixed, t_unlogged, t_wide;
