-- Long edges: on data whose clusters are larger than a kNN list and more
-- numerous than the fixed entry nodes, the plain graph has no edge between
-- clusters; the build notices (its navigation probe misses) and adds long
-- edges, and cagra_index_info says so.  Easy data keeps the plain graph.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;
SET max_parallel_maintenance_workers = 0;	-- one build thread: a deterministic graph
SELECT setseed(0.42);
CREATE TABLE le (id int PRIMARY KEY, v vector(16));
-- 400 clusters of 70 rows, far apart
INSERT INTO le
SELECT c * 70 + i,
       (SELECT array_agg(100 * sin(c * 1.7 + j * 2.3 + c * j * 0.01) + random() - 0.5)
          FROM generate_series(1, 16) j)::vector
  FROM generate_series(0, 399) c, generate_series(1, 70) i;
CREATE INDEX le_v ON le USING cagra (v) WITH (build_device = cpu);	-- the GPU build: test/gpu
SELECT long_edges, nodes FROM cagra_index_info('le_v');
-- recall@10 of 40 queries (rows' own vectors, nudged) against exact search
CREATE TABLE le_q AS
SELECT id AS qid, (SELECT array_agg(x + 0.01) FROM unnest(v::real[]) x)::vector AS q
  FROM le WHERE id % 701 = 0;
SET enable_indexscan = off;
CREATE TABLE le_exact AS
SELECT qid, (SELECT array_agg(id) FROM (SELECT id FROM le ORDER BY v <-> q LIMIT 10) s) AS ids FROM le_q;
RESET enable_indexscan;
SET enable_seqscan = off;
SELECT avg((SELECT count(*) FROM unnest(e.ids) x
             WHERE x = ANY (ARRAY(SELECT id FROM le ORDER BY v <-> q.q LIMIT 10)))) / 10 >= 0.95 AS recall_ok
  FROM le_q q JOIN le_exact e USING (qid);
RESET enable_seqscan;
-- few, small clusters: the plain graph navigates, no long edges
CREATE TABLE easy (id int, v vector(16));
INSERT INTO easy SELECT i, (SELECT array_agg(sin(i * 0.37 + j * 1.3)) FROM generate_series(1, 16) j)::vector
  FROM generate_series(1, 3000) i;
CREATE INDEX easy_v ON easy USING cagra (v);
SELECT long_edges FROM cagra_index_info('easy_v');
DROP TABLE le, le_q, le_exact, easy;
