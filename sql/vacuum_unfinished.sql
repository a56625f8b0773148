-- A VACUUM stopped (a crash, an error, a cancel) after its deletion marks
-- leaves live nodes that hang only on deleted nodes' rows (expected then:
-- no insert takes a deleted slot until a VACUUM completes, so the check is
-- quiet; test/t/025 shows the rows it gives otherwise), and one stopped
-- after its repair, before its links, live nodes with no way in at all,
-- which cagra_index_check reports.  The next VACUUM, even one that deletes
-- nothing from the index, repairs and links them (docs/storage.md, Vacuum).
-- The graph of vacuum_reachability.sql: node 166's only ways in come from
-- deleted nodes.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;
SELECT setseed(0.07);
CREATE TABLE vunf (id serial PRIMARY KEY, v vector(2));
CREATE INDEX vunf_v ON vunf USING cagra (v) WITH (graph_degree = 4, intermediate_graph_degree = 8);
DO $$
BEGIN
  FOR i IN 1..200 LOOP
    INSERT INTO vunf (v) SELECT ARRAY[random(), random()]::vector;
  END LOOP;
END $$;
DELETE FROM vunf WHERE random() < 0.3;
-- the setting is for developers only
SELECT count(*) AS shown FROM pg_settings WHERE name = 'cagra.vacuum_stop_before';
SET cagra.vacuum_stop_before = repair;
VACUUM vunf;
SELECT nodes, live_nodes FROM cagra_index_info('vunf_v');
SELECT * FROM cagra_index_check('vunf_v');
SET cagra.vacuum_stop_before = reconnect;
VACUUM vunf;
RESET cagra.vacuum_stop_before;
SELECT * FROM cagra_index_check('vunf_v');
-- Rows without a vector, so that the next VACUUM finds the dead rows the
-- stopped one left on too few of the table's pages to scan the index
-- (PostgreSQL bypasses index vacuuming then): only amvacuumcleanup runs.
INSERT INTO vunf (v) SELECT NULL FROM generate_series(1, 50000);
VACUUM vunf;
SELECT nodes, live_nodes FROM cagra_index_info('vunf_v');
SELECT * FROM cagra_index_check('vunf_v');
-- the deleted slots taken again (an unfinished vacuum keeps them from
-- inserts), by rows far from the others
INSERT INTO vunf (v) SELECT ARRAY[5 + random(), 5 + random()]::vector FROM generate_series(1, 60);
SELECT nodes, live_nodes FROM cagra_index_info('vunf_v');
SELECT * FROM cagra_index_check('vunf_v');
DROP TABLE vunf;
