-- Rows appended to an index past its first rows are counted unlinked, with
-- no search, and every search takes them as entries until the insert that
-- ends their run of 16 node ids links them (docs/storage.md, Inserts).
-- Each row must be found, in distance order with its exact distance, by
-- every path of the search while it is unlinked and after; VACUUM links
-- the rest before it starts.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;
SELECT setseed(0.3);
CREATE TABLE unl (id int PRIMARY KEY, v vector(8));
INSERT INTO unl SELECT i, array(SELECT random() FROM generate_series(1, 8) WHERE i > 0)::vector
  FROM generate_series(1, 288) i;
CREATE INDEX unl_v ON unl USING cagra (v) WITH (graph_degree = 8, intermediate_graph_degree = 16);
-- five rows far from the others, each near the one before
INSERT INTO unl SELECT 1000 + i, array(SELECT 5 + 0.01 * i + 0.001 * j FROM generate_series(1, 8) j)::vector
  FROM generate_series(1, 5) i;
SELECT nodes, live_nodes, unlinked_nodes FROM cagra_index_info('unl_v');
SELECT count(*) AS problems FROM cagra_index_check('unl_v');
SET enable_seqscan = off;
SET cagra.device = cpu;
-- the index scan: each row its own vector's first, the unlinked ones nearest
SELECT count(*) AS not_found_first
  FROM unl u WHERE (SELECT id FROM unl ORDER BY v <-> u.v LIMIT 1) <> u.id;
SELECT id, round((v <-> '[5,5,5,5,5,5,5,5]')::numeric, 4) AS distance
  FROM unl ORDER BY v <-> '[5,5,5,5,5,5,5,5]' LIMIT 7;
-- a filter, and the index's batch search
SELECT id FROM unl WHERE id % 2 = 0 ORDER BY v <-> '[5,5,5,5,5,5,5,5]' LIMIT 3;
SELECT s.query, u.id, round(s.distance::numeric, 4) AS distance
  FROM cagra_search('unl_v', ARRAY['[5,5,5,5,5,5,5,5]'::vector, (SELECT v FROM unl WHERE id = 1003)], 2) s
  JOIN unl u ON u.ctid = s.ctid ORDER BY s.query, s.distance;
-- the run's last row links them: none unlinked, every row reached
INSERT INTO unl SELECT 1005 + i, array(SELECT 5 + 0.01 * (5 + i) + 0.001 * j FROM generate_series(1, 8) j)::vector
  FROM generate_series(1, 11) i;
SELECT nodes, live_nodes, unlinked_nodes FROM cagra_index_info('unl_v');
SELECT count(*) AS problems FROM cagra_index_check('unl_v');
SELECT count(*) AS not_found_first
  FROM unl u WHERE (SELECT id FROM unl ORDER BY v <-> u.v LIMIT 1) <> u.id;
-- unlinked rows, one of them deleted: VACUUM links the others first
INSERT INTO unl SELECT 2000 + i, array(SELECT -3 - 0.01 * i FROM generate_series(1, 8))::vector
  FROM generate_series(1, 4) i;
DELETE FROM unl WHERE id = 2002;
SELECT nodes, live_nodes, unlinked_nodes FROM cagra_index_info('unl_v');
VACUUM unl;
SELECT nodes, live_nodes, unlinked_nodes FROM cagra_index_info('unl_v');
SELECT count(*) AS problems FROM cagra_index_check('unl_v');
SELECT id FROM unl ORDER BY v <-> '[-3,-3,-3,-3,-3,-3,-3,-3]' LIMIT 4;
RESET cagra.device;
RESET enable_seqscan;
DROP TABLE unl;
