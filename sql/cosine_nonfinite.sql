-- Under cosine, vectors whose cosine distance is undefined are not
-- indexed: zero vectors, and vectors whose squared norm (summed in float,
-- as the <=> operator does) overflows to infinity; the operator gives NaN
-- for both, and an exact scan puts them last.  The build's NOTICE counts
-- them; inserts skip them the same way.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

CREATE TABLE cn (id int PRIMARY KEY, v vector(16));
INSERT INTO cn SELECT i, (SELECT array_agg(((i * 7 + j * 3) % 11) - 5 + 0.5)::vector FROM generate_series(1, 16) j)
  FROM generate_series(1, 200) i;
INSERT INTO cn VALUES (1001, array_fill(3e37::real, ARRAY[16])::vector),
                      (1002, array_fill(0::real, ARRAY[16])::vector);
SELECT id, v <=> array_fill(1::real, ARRAY[16])::vector AS distance FROM cn WHERE id > 1000 ORDER BY id;

CREATE INDEX cn_v ON cn USING cagra (v vector_cosine_ops)
  WITH (graph_degree = 8, intermediate_graph_degree = 16);
SELECT nodes, live_nodes FROM cagra_index_info('cn_v');

-- the exact order puts the overflowing vector last (NaN sorts last); the
-- index does not return it at all, rather than first
SELECT id FROM cn ORDER BY v <=> array_fill(1::real, ARRAY[16])::vector DESC, id LIMIT 2;
SET enable_seqscan = off;
SELECT count(*) FILTER (WHERE id > 1000) AS undefined_returned, count(*) AS rows
  FROM (SELECT id FROM cn ORDER BY v <=> array_fill(1::real, ARRAY[16])::vector LIMIT 5) s;
RESET enable_seqscan;
SELECT count(*) FILTER (WHERE c.id > 1000) AS undefined_returned, count(*) AS rows
  FROM cagra_search('cn_v', ARRAY[array_fill(1::real, ARRAY[16])::vector], 5) s
  JOIN cn c ON c.ctid = s.ctid;

-- inserts: not indexed either (a large finite norm still is)
INSERT INTO cn VALUES (1003, array_fill(-2e30::real, ARRAY[16])::vector),
                      (1004, array_fill(1e18::real, ARRAY[16])::vector);
SELECT nodes, live_nodes FROM cagra_index_info('cn_v');
SELECT * FROM cagra_index_check('cn_v');

-- the inner-product and L2 indexes keep every vector (their distances are
-- infinite, not undefined)
CREATE INDEX cn_ip ON cn USING cagra (v vector_ip_ops)
  WITH (graph_degree = 8, intermediate_graph_degree = 16);
SELECT nodes FROM cagra_index_info('cn_ip');

DROP TABLE cn;
