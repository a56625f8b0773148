-- vector_l1_ops: the L1 (taxicab) distance <+> as pgvector has it, indexed
-- by cagra, in float32 and in float16 storage.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

CREATE TABLE l1t (id int, v vector(12));
INSERT INTO l1t SELECT i, array_agg((sin(i * 0.37 + j * 1.1) * 3 + (i % 9) * 0.25)::real ORDER BY j)::vector
  FROM generate_series(1, 3000) i, generate_series(1, 12) j GROUP BY i;
CREATE TABLE l1q AS SELECT id AS qid, v AS q FROM l1t WHERE id % 250 = 3;
CREATE INDEX l1t_v ON l1t USING cagra (v vector_l1_ops);
SELECT metric, storage, nodes FROM cagra_index_info('l1t_v');
SELECT * FROM cagra_index_check('l1t_v');

-- how many queries' top 10 through the index have the exact top 10's
-- distances, in order
CREATE FUNCTION pg_temp.same_order() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	r record; got float8[]; want float8[]; same int := 0; total int := 0;
BEGIN
	FOR r IN SELECT q FROM l1q LOOP
		SET LOCAL enable_seqscan = off;
		SELECT array_agg(d) INTO got FROM (SELECT v <+> r.q AS d FROM l1t ORDER BY v <+> r.q LIMIT 10) s;
		SET LOCAL enable_seqscan = on;
		SET LOCAL enable_indexscan = off;
		SELECT array_agg(d) INTO want FROM (SELECT v <+> r.q AS d FROM l1t ORDER BY v <+> r.q LIMIT 10) s;
		RESET enable_indexscan;
		same := same + (got = want)::int;
		total := total + 1;
	END LOOP;
	RETURN same || '/' || total;
END
$$;

SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM l1t ORDER BY v <+> '[1,0,0,0,0,0,0,0,0,0,0,0]' LIMIT 10;
SELECT pg_temp.same_order() AS l1_same_order;
SELECT id, round((v <+> '[0,0,0,0,0,0,0,0,0,0,0,0]')::numeric, 4) AS l1 FROM l1t ORDER BY v <+> '[0,0,0,0,0,0,0,0,0,0,0,0]' LIMIT 3;
RESET enable_seqscan;
-- cagra_search returns the operator's values
SELECT count(*) AS rows, bool_and(abs(s.distance - (t.v <+> q.q)) < 1e-4) AS distances_are_l1
  FROM (SELECT row_number() OVER (ORDER BY qid) AS n, q FROM l1q) q
  JOIN cagra_search('l1t_v', ARRAY(SELECT q FROM l1q ORDER BY qid), 5) s ON s.query = q.n
  JOIN l1t t ON t.ctid = s.ctid;

-- float16: rechecked on the table's vectors, exact order
DROP INDEX l1t_v;
CREATE INDEX l1t_v16 ON l1t USING cagra (v vector_l1_ops) WITH (storage = float16);
SELECT metric, storage FROM cagra_index_info('l1t_v16');
SELECT pg_temp.same_order() AS l1_float16_same_order;
-- inserts
INSERT INTO l1t SELECT 5000 + qid, q FROM l1q;
SET enable_seqscan = off;
SELECT count(*) FILTER (WHERE id > 5000) AS inserted_found FROM (SELECT id FROM l1t ORDER BY v <+> (SELECT q FROM l1q WHERE qid = 253) LIMIT 2) s;
RESET enable_seqscan;
SELECT * FROM cagra_index_check('l1t_v16');
DROP TABLE l1t, l1q;
