-- Slots that vacuum frees are taken again by inserts (docs/storage.md): an
-- index under churn stays near its REINDEX size, the reused rows are found,
-- deleted ones never come back, and the index checks clean.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

CREATE FUNCTION pg_temp.vec(id int) RETURNS vector LANGUAGE sql IMMUTABLE AS $$
	SELECT array_agg(sin(id * 0.731 + i * 1.37 + (id % 7) * i * 0.011)::real ORDER BY i)::vector
	  FROM generate_series(1, 16) i
$$;
CREATE TABLE churn (id int PRIMARY KEY, v vector(16));
INSERT INTO churn SELECT i, pg_temp.vec(i) FROM generate_series(1, 10000) i;
CREATE INDEX churn_v ON churn USING cagra (v) WITH (graph_degree = 16, intermediate_graph_degree = 32);
CREATE TEMP TABLE built AS SELECT pages, nodes FROM cagra_index_info('churn_v');

-- the rows whose own vector, probed, comes back first
CREATE FUNCTION pg_temp.found_self(ids int[]) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	hits int := 0; p int; got int;
BEGIN
	SET LOCAL enable_seqscan = off;
	FOREACH p IN ARRAY ids LOOP
		SELECT id INTO got FROM churn ORDER BY v <-> pg_temp.vec(p) LIMIT 1;
		hits := hits + (got = p)::int;
	END LOOP;
	RETURN hits || '/' || cardinality(ids);
END
$$;

-- everything deleted, vacuumed, and the same rows inserted again: every
-- insert takes a freed slot, the index does not grow
DELETE FROM churn;
VACUUM churn;
SELECT nodes, live_nodes, deleted_nodes, reused_slots FROM cagra_index_info('churn_v');
INSERT INTO churn SELECT i, pg_temp.vec(i) FROM generate_series(1, 10000) i;
SELECT i.nodes = b.nodes AS same_nodes, i.pages = b.pages AS same_pages, i.live_nodes, i.deleted_nodes,
	   i.reused_slots
  FROM cagra_index_info('churn_v') i, built b;
SELECT pg_temp.found_self(ARRAY[1, 777, 5000, 9999]);
SELECT * FROM cagra_index_check('churn_v');

-- steady churn: a third deleted and as many inserted, three times over
-- (the repair plans 1,024 rows at a time within this memory)
SET maintenance_work_mem = '1MB';
DELETE FROM churn WHERE id % 3 = 1;
VACUUM churn;
INSERT INTO churn SELECT i, pg_temp.vec(i) FROM generate_series(1, 10000) i WHERE i % 3 = 1;
DELETE FROM churn WHERE id % 3 = 2;
VACUUM churn;
INSERT INTO churn SELECT i, pg_temp.vec(i) FROM generate_series(1, 10000) i WHERE i % 3 = 2;
DELETE FROM churn WHERE id % 3 = 0;
VACUUM churn;
INSERT INTO churn SELECT i, pg_temp.vec(i) FROM generate_series(1, 10000) i WHERE i % 3 = 0;
SELECT i.nodes = b.nodes AS same_nodes, i.pages = b.pages AS same_pages, i.live_nodes, i.deleted_nodes
  FROM cagra_index_info('churn_v') i, built b;
SELECT pg_temp.found_self(ARRAY[2, 3, 4, 1001, 4444, 8000]);
RESET maintenance_work_mem;
SELECT * FROM cagra_index_check('churn_v');

-- more inserted than vacuum freed: the freed slots first, then appended
DELETE FROM churn WHERE id <= 100;
VACUUM churn;
INSERT INTO churn SELECT i, pg_temp.vec(i) FROM generate_series(10001, 10150) i;
SELECT i.nodes - b.nodes AS appended, i.live_nodes, i.deleted_nodes FROM cagra_index_info('churn_v') i, built b;
SELECT pg_temp.found_self(ARRAY[10001, 10100, 10150]);
-- a deleted row's vector finds a live row, never the deleted one
SELECT id > 100 AS not_deleted FROM churn ORDER BY v <-> pg_temp.vec(50) LIMIT 1;
SELECT * FROM cagra_index_check('churn_v');
DROP TABLE churn;
