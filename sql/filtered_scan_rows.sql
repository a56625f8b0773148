-- The rows a cagra filtered scan returns are the table's own: their ctid,
-- tableoid and xmin are real, so ctid joins, row locks (FOR UPDATE, SKIP
-- LOCKED), EvalPlanQual and WHERE CURRENT OF work on them as on any scan's
-- rows.  The filtered scan is forced by disabling the other plans (without
-- the worker the planner would not choose it: filtered_scan.sql).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

CREATE TABLE ft (id int PRIMARY KEY, cat int, v vector(4)) WITH (autovacuum_enabled = off);
INSERT INTO ft SELECT i, i % 50, ARRAY[sin(i * 0.7), cos(i * 1.3), sin(i * 2.9), cos(i * 0.11)]
  FROM generate_series(1, 5000) i;
CREATE INDEX ft_v ON ft USING cagra (v) WITH (graph_degree = 16, intermediate_graph_degree = 32);
CREATE INDEX ft_cat ON ft (cat);
ANALYZE ft;
-- a second version of some rows, so that ctids differ from the first ones
UPDATE ft SET cat = cat WHERE id % 7 = 0;

SET enable_seqscan = off;
SET enable_bitmapscan = off;
SET enable_indexscan = off;
PREPARE near(int) AS
	SELECT id FROM ft WHERE cat = $1 ORDER BY v <-> '[1,0,0,1]' LIMIT 3;
EXPLAIN (COSTS OFF) EXECUTE near(3);

-- the system columns are the row's: those an index scan of the primary key finds
SELECT id, ctid = (SELECT ctid FROM ft t WHERE t.id = ft.id) AS same_ctid,
	   tableoid::regclass, xmin = (SELECT xmin FROM ft t WHERE t.id = ft.id) AS same_xmin
  FROM ft WHERE cat = 3 ORDER BY v <-> '[1,0,0,1]' LIMIT 3;

-- a ctid join deletes the rows the scan found
BEGIN;
WITH nn AS (SELECT ctid FROM ft WHERE cat = 3 ORDER BY v <-> '[1,0,0,1]' LIMIT 10)
DELETE FROM ft USING nn WHERE ft.ctid = nn.ctid;
SELECT count(*) FROM ft WHERE cat = 3;
ROLLBACK;

-- row locks: the plan locks what the scan returns
EXPLAIN (COSTS OFF)
	SELECT id FROM ft WHERE cat = 3 ORDER BY v <-> '[1,0,0,1]' LIMIT 3 FOR UPDATE SKIP LOCKED;
SELECT id FROM ft WHERE cat = 3 ORDER BY v <-> '[1,0,0,1]' LIMIT 3 FOR UPDATE;
SELECT id FROM ft WHERE cat = 3 ORDER BY v <-> '[1,0,0,1]' LIMIT 3 FOR NO KEY UPDATE SKIP LOCKED;
SELECT id FROM ft WHERE cat = 3 ORDER BY v <-> '[1,0,0,1]' LIMIT 3 FOR SHARE;

-- WHERE CURRENT OF: the row the cursor is on
BEGIN;
DECLARE c CURSOR FOR SELECT id FROM ft WHERE cat = 3 ORDER BY v <-> '[1,0,0,1]' LIMIT 3;
FETCH 2 FROM c;
UPDATE ft SET cat = 1000 WHERE CURRENT OF c RETURNING id, cat;
FETCH 1 FROM c;
DELETE FROM ft WHERE CURRENT OF c RETURNING id;
COMMIT;
SELECT id, cat FROM ft WHERE cat = 1000;
EXECUTE near(3);
-- and of a cursor that locks its rows
BEGIN;
DECLARE cu CURSOR FOR SELECT id FROM ft WHERE cat = 4 ORDER BY v <-> '[1,0,0,1]' LIMIT 3 FOR UPDATE;
FETCH 1 FROM cu;
UPDATE ft SET cat = 1001 WHERE CURRENT OF cu RETURNING id, cat;
ROLLBACK;

-- a partitioned table: each partition's rows carry its tableoid
CREATE TABLE fp (id int, cat int, v vector(4)) PARTITION BY RANGE (id);
CREATE TABLE fp1 PARTITION OF fp FOR VALUES FROM (1) TO (2501);
CREATE TABLE fp2 PARTITION OF fp FOR VALUES FROM (2501) TO (5001);
INSERT INTO fp SELECT id, cat, v FROM ft;
CREATE INDEX fp_v ON fp USING cagra (v) WITH (graph_degree = 16, intermediate_graph_degree = 32);
CREATE INDEX fp_cat ON fp (cat);
ANALYZE fp;
EXPLAIN (COSTS OFF) SELECT id FROM fp WHERE cat = 3 ORDER BY v <-> '[1,0,0,1]' LIMIT 3;
SELECT id, tableoid::regclass, ctid = (SELECT ctid FROM fp t WHERE t.id = fp.id AND t.tableoid = fp.tableoid)
	   AS same_ctid
  FROM fp WHERE cat = 3 ORDER BY v <-> '[1,0,0,1]' LIMIT 3;
SELECT id FROM fp WHERE cat = 3 ORDER BY v <-> '[1,0,0,1]' LIMIT 3 FOR UPDATE;

RESET enable_seqscan;
RESET enable_bitmapscan;
RESET enable_indexscan;
DROP TABLE fp;
DROP TABLE ft;
