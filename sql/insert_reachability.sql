-- Rows inserted one statement at a time into an index created on an empty
-- table, on random data of high dimension: every row stays reachable from
-- the entry nodes (cagra_index_check walks the graph) and an index scan for
-- its own vector finds it first (a wide one: the question is whether each
-- row was linked, not the recall of the default buffer on random data of
-- 1,900 dimensions).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;
SELECT setseed(0.7);
CREATE TABLE reach (id int PRIMARY KEY, v vector(1900));
CREATE INDEX reach_v ON reach USING cagra (v);
DO $$
BEGIN
  FOR i IN 1..1000 LOOP
    INSERT INTO reach SELECT i, array(SELECT random() - 0.5 FROM generate_series(1, 1900))::vector;
  END LOOP;
END $$;
SELECT nodes, live_nodes FROM cagra_index_info('reach_v');
SELECT count(*) AS problems FROM cagra_index_check('reach_v');
SET enable_seqscan = off;
SET cagra.itopk_size = 512;
SELECT count(*) AS not_found_first
  FROM reach r
 WHERE (SELECT id FROM reach ORDER BY v <-> r.v LIMIT 1) <> r.id;
RESET cagra.itopk_size;
RESET enable_seqscan;
DROP TABLE reach;
