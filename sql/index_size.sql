-- The page layout (format 2, docs/storage.md) at many dimensions: an index
-- takes at most 1.05 x its nodes' bytes (heap TID and flags 8 B, row
-- 4 * degree B, vector 4 * dims B) plus two pages (the meta page, the last
-- group's last page), whether a vector fits a page many times, crosses
-- pages or spans several; each index finds a row's own vector first, is
-- clean under cagra_index_check, and takes inserts (rows and vectors are
-- written apart) that keep both true.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;
SET enable_seqscan = off;

-- a deterministic vector of `dims` elements for row `id`
CREATE FUNCTION pg_temp.vec(id int, dims int) RETURNS vector LANGUAGE sql IMMUTABLE AS $$
	SELECT array_agg(sin(id * 0.731 + i * 1.37 + (id % 7) * i * 0.011)::real ORDER BY i)::vector
	  FROM generate_series(1, dims) i
$$;

-- Build an index of `nrows` rows at `dims` dimensions (vectors stored as
-- `storage`: 4 or 2 bytes an element), insert `nins` more,
-- and report the layout, the size against the bound (ratio: the node
-- pages, the meta page left out, to the nodes' bytes), whether the probed
-- rows (built and inserted) come first for their own vector, and the check.
CREATE FUNCTION pg_temp.size_case(ndims int, nrows int, nins int, deg int DEFAULT 32,
								  ideg int DEFAULT 64, stored text DEFAULT 'float32')
RETURNS TABLE (dims int, degree int, storage text, nodes bigint, per_group int, group_pages int,
			   pages bigint, ratio numeric, within_bound boolean, found_self text, problems bigint)
LANGUAGE plpgsql AS $$
DECLARE
	node_bytes bigint := 8 + 4 * deg + (CASE stored WHEN 'float16' THEN 2 ELSE 4 END) * ndims;
	probes int[] := ARRAY[1, nrows / 2, nrows, nrows + nins];
	hits int := 0;
	p int;
	got int;
BEGIN
	SET LOCAL client_min_messages = warning;
	DROP TABLE IF EXISTS size_t;
	RESET client_min_messages;
	EXECUTE format('CREATE TABLE size_t (id int, v vector(%s))', ndims);
	INSERT INTO size_t SELECT i, pg_temp.vec(i, ndims) FROM generate_series(1, nrows) i;
	EXECUTE format('CREATE INDEX size_t_v ON size_t USING cagra (v) WITH (graph_degree = %s, intermediate_graph_degree = %s, storage = %s)',
				   deg, ideg, stored);
	INSERT INTO size_t SELECT i, pg_temp.vec(i, ndims) FROM generate_series(nrows + 1, nrows + nins) i;
	FOREACH p IN ARRAY probes LOOP
		SELECT id INTO got FROM size_t ORDER BY v <-> pg_temp.vec(p, ndims) LIMIT 1;
		IF got = p THEN
			hits := hits + 1;
		END IF;
	END LOOP;
	RETURN QUERY
		SELECT i.dimensions, i.graph_degree, i.storage, i.nodes, i.nodes_per_page, i.pages_per_node, i.pages,
			   round((i.size_bytes - 8192)::numeric / (i.nodes * node_bytes), 3),
			   i.size_bytes <= 1.05 * i.nodes * node_bytes + 2 * 8192,
			   hits || '/' || cardinality(probes),
			   (SELECT count(*) FROM cagra_index_check('size_t_v'))
		  FROM cagra_index_info('size_t_v') i;
END
$$;

SELECT * FROM pg_temp.size_case(3, 4000, 60);
SELECT * FROM pg_temp.size_case(128, 1000, 40);
SELECT * FROM pg_temp.size_case(768, 500, 20);
SELECT * FROM pg_temp.size_case(1024, 1000, 40);
SELECT * FROM pg_temp.size_case(1536, 300, 20);
SELECT * FROM pg_temp.size_case(2000, 200, 10);
SELECT * FROM pg_temp.size_case(16000, 12, 3);
-- float16 vectors: half the vector bytes, the same bound, odd dimensions too
SELECT * FROM pg_temp.size_case(3, 4000, 60, stored => 'float16');
SELECT * FROM pg_temp.size_case(129, 1000, 40, stored => 'float16');
SELECT * FROM pg_temp.size_case(1024, 1000, 40, stored => 'float16');
SELECT * FROM pg_temp.size_case(4001, 100, 10, stored => 'float16');
SELECT * FROM pg_temp.size_case(16000, 12, 3, stored => 'float16');
-- rows over two pages of a group, vectors in the tails of the first
SELECT * FROM pg_temp.size_case(16, 2000, 120, 64, 64);
-- a degree so large for its vectors that rows are packed across pages
SELECT * FROM pg_temp.size_case(2, 400, 60, 300, 300);

-- an index built empty: every node comes by insert, group after group
DROP TABLE size_t;
CREATE TABLE size_t (id int, v vector(1024));
CREATE INDEX size_t_v ON size_t USING cagra (v);
INSERT INTO size_t SELECT i, pg_temp.vec(i, 1024) FROM generate_series(1, 40) i;
SELECT nodes, nodes_per_page, pages_per_node, pages,
	   size_bytes <= 1.05 * nodes * (8 + 4 * 32 + 4 * 1024) + 2 * 8192 AS within_bound
  FROM cagra_index_info('size_t_v');
SELECT count(*) FILTER (WHERE (SELECT id FROM size_t ORDER BY v <-> pg_temp.vec(p, 1024) LIMIT 1) = p) AS found_self
  FROM generate_series(1, 40, 13) p;
SELECT * FROM cagra_index_check('size_t_v');

-- vacuum marks headers page by page and repairs rows across the layout
DELETE FROM size_t WHERE id % 3 = 0;
VACUUM size_t;
SELECT nodes, live_nodes FROM cagra_index_info('size_t_v');
SELECT * FROM cagra_index_check('size_t_v');
SELECT id FROM size_t ORDER BY v <-> pg_temp.vec(14, 1024) LIMIT 1;
DROP TABLE size_t;
