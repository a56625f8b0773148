-- cagra_search, cagra_index_info and cagra_index_check on indexes that are
-- not ready: never built (an interrupted CREATE INDEX CONCURRENTLY), not
-- valid, partitioned parents; and on OIDs that are no relation.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

CREATE TABLE st (id int PRIMARY KEY, v vector(3));
INSERT INTO st SELECT i, ARRAY[i, i % 7, i % 5]::vector FROM generate_series(1, 300) i;

-- A CREATE INDEX CONCURRENTLY that fails while it loads the rows (its
-- predicate divides by zero at row 150) leaves an index that is not valid
-- and was never written: 0 blocks.
CREATE INDEX CONCURRENTLY st_never ON st USING cagra (v)
  WITH (graph_degree = 8, intermediate_graph_degree = 16)
  WHERE 1 / (id - 150) IS NOT NULL;
SELECT indisvalid, indisready, pg_relation_size('st_never') AS bytes
  FROM pg_index WHERE indexrelid = 'st_never'::regclass;
SELECT * FROM cagra_search('st_never', ARRAY['[1,1,1]']::vector[], 3);
SELECT nodes FROM cagra_index_info('st_never');
SELECT * FROM cagra_index_check('st_never');
DROP INDEX st_never;

-- A built index that is not valid (a CREATE INDEX CONCURRENTLY stopped
-- before its validation leaves one: rows inserted meanwhile are missing).
-- Here the flag is cleared by hand.  The planner ignores it; cagra_search
-- refuses it; info and check still describe it.
CREATE INDEX st_v ON st USING cagra (v) WITH (graph_degree = 8, intermediate_graph_degree = 16);
UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'st_v'::regclass;
SELECT * FROM cagra_search('st_v', ARRAY['[1,1,1]']::vector[], 3);
SELECT nodes, live_nodes FROM cagra_index_info('st_v');
SELECT count(*) AS problems FROM cagra_index_check('st_v');
REINDEX INDEX st_v;
SELECT indisvalid FROM pg_index WHERE indexrelid = 'st_v'::regclass;
SELECT count(*) FROM cagra_search('st_v', ARRAY['[1,1,1]']::vector[], 3);

-- A partitioned table's index: the parent has no pages of its own
CREATE TABLE stp (id int, v vector(3)) PARTITION BY RANGE (id);
CREATE TABLE stp1 PARTITION OF stp FOR VALUES FROM (0) TO (1000);
INSERT INTO stp SELECT i, ARRAY[i, 1, 2]::vector FROM generate_series(1, 50) i;
CREATE INDEX stp_v ON stp USING cagra (v) WITH (graph_degree = 8, intermediate_graph_degree = 16);
SELECT relkind FROM pg_class WHERE relname = 'stp_v';
SELECT * FROM cagra_search('stp_v', ARRAY['[1,1,1]']::vector[], 3);
SELECT * FROM cagra_index_info('stp_v');
SELECT * FROM cagra_index_check('stp_v');
-- the partition's own index works
SELECT count(*) FROM cagra_search('stp1_v_idx', ARRAY['[1,1,1]']::vector[], 3);
SELECT nodes FROM cagra_index_info('stp1_v_idx');

-- OIDs of no relation (regclass takes any number)
SELECT * FROM cagra_search(4000000000::oid::regclass, ARRAY['[1,1,1]']::vector[], 3);
SELECT * FROM cagra_index_info(4000000000::oid::regclass);
SELECT * FROM cagra_index_check(4000000000::oid::regclass);
-- other relation kinds
SELECT * FROM cagra_index_info('st');
SELECT * FROM cagra_index_info('st_pkey');
SELECT * FROM cagra_index_check('stp');

DROP TABLE st, stp;

-- the error codes
CREATE TABLE st (id int PRIMARY KEY, v vector(3));
INSERT INTO st SELECT i, ARRAY[i, i % 7, i % 5]::vector FROM generate_series(1, 300) i;
CREATE INDEX st_v ON st USING cagra (v) WITH (graph_degree = 8, intermediate_graph_degree = 16);
CREATE TABLE stp (id int, v vector(3)) PARTITION BY RANGE (id);
CREATE TABLE stp1 PARTITION OF stp FOR VALUES FROM (0) TO (1000);
CREATE INDEX stp_v ON stp USING cagra (v) WITH (graph_degree = 8, intermediate_graph_degree = 16);
CREATE FUNCTION st_sqlstate(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE q;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE;
END $$;
UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'st_v'::regclass;
SELECT f, st_sqlstate(format('SELECT * FROM %s(%s)', f, a)) AS sqlstate
  FROM (VALUES ('cagra_index_info', '''stp_v'''), ('cagra_index_check', '''stp_v'''),
               ('cagra_search', '''stp_v'', ARRAY[''[1,1,1]'']::vector[], 1'),
               ('cagra_index_info', '4000000000::oid::regclass'),
               ('cagra_index_check', '4000000000::oid::regclass'),
               ('cagra_search', '4000000000::oid::regclass, ARRAY[''[1,1,1]'']::vector[], 1'),
               ('cagra_search', '''st_v'', ARRAY[''[1,1,1]'']::vector[], 1')) x(f, a);
DROP FUNCTION st_sqlstate(text);
DROP TABLE st, stp;
