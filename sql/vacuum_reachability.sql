-- VACUUM's repair keeps every live node reachable (docs/storage.md, Vacuum):
-- a live node whose only ways in came from deleted nodes must get another
-- one, since the rows that led to those deleted nodes are rewritten. Rows
-- inserted one at a time on a graph of degree 4 in 2 dimensions, a third of
-- them deleted; with these numbers node 166 had its only ways in from
-- deleted nodes, and the rows rewritten around them all took closer live
-- nodes.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;
SELECT setseed(0.07);
CREATE TABLE vreach (id serial PRIMARY KEY, v vector(2));
CREATE INDEX vreach_v ON vreach USING cagra (v) WITH (graph_degree = 4, intermediate_graph_degree = 8);
DO $$
BEGIN
  FOR i IN 1..200 LOOP
    INSERT INTO vreach (v) SELECT ARRAY[random(), random()]::vector;
  END LOOP;
END $$;
SELECT count(*) AS problems_before FROM cagra_index_check('vreach_v');
DELETE FROM vreach WHERE random() < 0.3;
VACUUM vreach;
SELECT nodes, live_nodes FROM cagra_index_info('vreach_v');
SELECT * FROM cagra_index_check('vreach_v');
-- the deleted slots taken again, by rows far from the others
INSERT INTO vreach (v) SELECT ARRAY[5 + random(), 5 + random()]::vector FROM generate_series(1, 60);
SELECT nodes, live_nodes FROM cagra_index_info('vreach_v');
SELECT * FROM cagra_index_check('vreach_v');
DROP TABLE vreach;
