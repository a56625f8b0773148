-- A cagra index only answers ORDER BY <distance>: a path without one must
-- never win, not even with enable_seqscan = off (docs/troubleshooting.md
-- suggests it), where a partial index's plain or index-only scan (count(*)
-- needs no column) would otherwise tie with the disabled sequential scan
-- and fail with "cagra index scans need an ORDER BY".
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

CREATE TABLE pp (id int, grp int, v vector(3)) WITH (autovacuum_enabled = off);
INSERT INTO pp SELECT i, i % 3, ARRAY[i, i % 7, i % 5]::vector FROM generate_series(1, 300) i;
CREATE INDEX pp_v1 ON pp USING cagra (v) WITH (graph_degree = 8, intermediate_graph_degree = 16)
  WHERE grp = 1;
VACUUM ANALYZE pp;

SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM pp WHERE grp = 1;
SELECT count(*) FROM pp WHERE grp = 1;
EXPLAIN (COSTS OFF) SELECT id FROM pp WHERE grp = 1;
SELECT count(*) FROM (SELECT id FROM pp WHERE grp = 1) s;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM pp WHERE grp = 1;
SELECT count(*) FROM pp WHERE grp = 1;
RESET enable_bitmapscan;
-- with ORDER BY the index is used
EXPLAIN (COSTS OFF) SELECT id FROM pp WHERE grp = 1 ORDER BY v <-> '[10,3,0]' LIMIT 3;
SELECT id FROM pp WHERE grp = 1 ORDER BY v <-> '[10,3,0]' LIMIT 3;
RESET enable_seqscan;

DROP TABLE pp;
