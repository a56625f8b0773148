-- storage = float16 (docs/storage.md): vectors kept in half precision, half
-- the bytes.  The index's ORDER BY values are then lower bounds that the
-- executor rechecks on the heap's vector, so rows come in exact distance
-- order.  Values float16 cannot hold are refused at build and at insert,
-- changing nothing.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

-- Pairs of rows that float16 cannot tell apart: row 2i - 1 is base vector
-- i (every element a multiple of 1/8, exact in float16, the first in
-- [8, 16)), row 2i the same moved by 0.001 along the first axis, less than
-- half a float16 step there (1/256).  A query just beyond row 2i is closer
-- to it than to row 2i - 1, which only the recheck can see.
CREATE TABLE f16 (id int, v vector(8));
CREATE FUNCTION pg_temp.base(i int, shift real) RETURNS vector LANGUAGE sql IMMUTABLE AS $$
	SELECT array_agg(CASE WHEN j = 1 THEN 8 + (i % 64) / 8.0 + shift
						  ELSE round(sin(i * 0.37 + j * 1.1) * 40) / 8.0 END::real ORDER BY j)::vector
	  FROM generate_series(1, 8) j
$$;
INSERT INTO f16 SELECT 2 * i - 1, pg_temp.base(i, 0) FROM generate_series(1, 1500) i;
INSERT INTO f16 SELECT 2 * i, pg_temp.base(i, 0.001) FROM generate_series(1, 1500) i;
CREATE TABLE queries AS SELECT i AS qid, pg_temp.base(i, 0.002) AS q FROM generate_series(7, 1500, 75) i;

CREATE INDEX f16_l2 ON f16 USING cagra (v) WITH (storage = float16);
CREATE INDEX f32_l2 ON f16 USING cagra (v) WITH (storage = float32);
SELECT i.storage, i.nodes, i.pages
  FROM (VALUES ('f16_l2'), ('f32_l2')) c(relname), cagra_index_info(c.relname::regclass) i;
DROP INDEX f32_l2;

-- How many queries' top 10 through the index equal the exact top 10 of a
-- sequential scan: the same distances in the same order (rows at equal
-- distances may come in either order; `op` is the operator).
CREATE FUNCTION pg_temp.same_order(op text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	r record; got float8[]; want float8[]; same int := 0; total int := 0;
BEGIN
	FOR r IN SELECT q FROM queries LOOP
		SET LOCAL enable_seqscan = off;
		EXECUTE format('SELECT array_agg(d) FROM (SELECT v %s $1 AS d FROM f16 ORDER BY v %s $1 LIMIT 10) s', op, op)
			INTO got USING r.q;
		SET LOCAL enable_seqscan = on;
		SET LOCAL enable_indexscan = off;
		EXECUTE format('SELECT array_agg(d) FROM (SELECT v %s $1 AS d FROM f16 ORDER BY v %s $1 LIMIT 10) s', op, op)
			INTO want USING r.q;
		RESET enable_indexscan;
		same := same + (got = want)::int;
		total := total + 1;
	END LOOP;
	RETURN same || '/' || total;
END
$$;

-- EXPLAIN (COSTS OFF), with an InitPlan's value named as PostgreSQL 17 names
-- it, "(InitPlan 1).col1" (15: "InitPlan 1 (returns $0)" and "$0"), so that
-- the output is the same on both; the plans here have one InitPlan, of one
-- column.
CREATE FUNCTION pg_temp.explain(query text) RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
	line text;
BEGIN
	FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || query LOOP
		line := regexp_replace(line, '^(\s*InitPlan \d+) \(returns \$\d+\)$', '\1');
		RETURN NEXT regexp_replace(line, '\$0\M', '(InitPlan 1).col1', 'g');
	END LOOP;
END
$$;
SET enable_seqscan = off;
SELECT pg_temp.explain($q$SELECT id FROM f16 ORDER BY v <-> (SELECT q FROM queries LIMIT 1) LIMIT 10$q$) AS "QUERY PLAN";
SELECT pg_temp.same_order('<->') AS l2_same_order;
-- the closer row of a pair comes first, at its exact distance
SELECT id, round((v <-> pg_temp.base(7, 0.002))::numeric, 6) AS distance
  FROM f16 ORDER BY v <-> pg_temp.base(7, 0.002) LIMIT 2;

-- inner product and cosine, rechecked the same way
DROP INDEX f16_l2;
CREATE INDEX f16_ip ON f16 USING cagra (v vector_ip_ops) WITH (storage = float16);
SELECT pg_temp.same_order('<#>') AS ip_same_order;
DROP INDEX f16_ip;
CREATE INDEX f16_cos ON f16 USING cagra (v vector_cosine_ops) WITH (storage = float16);
SELECT pg_temp.same_order('<=>') AS cosine_same_order;
DROP INDEX f16_cos;

-- values beyond float16's range: refused at insert and at build, nothing changed
CREATE INDEX f16_l2 ON f16 USING cagra (v) WITH (storage = float16);
INSERT INTO f16 VALUES (9001, '[1, 2, 70000, 4, 5, 6, 7, 8]');
INSERT INTO f16 VALUES (9002, '[65504, -65504, 65519, 0, 0, 0, 0, 0]');	-- the largest that round to a finite half
SELECT nodes FROM cagra_index_info('f16_l2');
SELECT count(*) FROM f16 WHERE id >= 9000;
DROP INDEX f16_l2;
INSERT INTO f16 VALUES (9003, '[-1e6, 0, 0, 0, 0, 0, 0, 0]');
CREATE INDEX f16_l2 ON f16 USING cagra (v) WITH (storage = float16);
SELECT count(*) FROM pg_class WHERE relname = 'f16_l2';
-- cosine stores unit vectors: any finite value fits
CREATE INDEX f16_cos ON f16 USING cagra (v vector_cosine_ops) WITH (storage = float16);
SELECT storage, nodes FROM cagra_index_info('f16_cos');
SELECT * FROM cagra_index_check('f16_cos');

-- the reloption's values
CREATE INDEX f16_bad ON f16 USING cagra (v) WITH (storage = float64);
CREATE INDEX f16_auto ON f16 USING cagra (v vector_cosine_ops) WITH (storage = auto);
SELECT storage FROM cagra_index_info('f16_auto');

-- elements float16 keeps as subnormals (below 2^-14) or rounds to zero: their
-- rounding error is absolute, up to 2^-25, whatever the query's norm; the
-- order stays exact with a zero query and on data in [0, 1e-6]^16
CREATE TABLE fs (id int, v vector(4));
INSERT INTO fs VALUES (1, '[3e-8,0,0,0]'), (2, '[0,5e-8,0,0]');
INSERT INTO fs SELECT 10 + i, ARRAY[0.3 + i * 0.007, 0.5, 0.1 * (i % 7), 0.2] FROM generate_series(1, 100) i;
CREATE INDEX ON fs USING cagra (v) WITH (storage = float16);
SET enable_seqscan = off;
SELECT id FROM fs ORDER BY v <-> '[0,0,0,0]' LIMIT 3;
SELECT id FROM fs ORDER BY v <-> '[1e-8,0,0,0]' LIMIT 3;
RESET enable_seqscan;
SELECT setseed(0.25);
CREATE TABLE tiny (id int, v vector(16));
INSERT INTO tiny SELECT i, (SELECT array_agg(random() * 1e-6) FROM generate_series(1, 16) WHERE i > 0)
  FROM generate_series(1, 500) i;
CREATE TABLE tiny_queries AS
  SELECT (SELECT array_agg(random() * 1e-6) FROM generate_series(1, 16) WHERE q > 0)::vector(16) AS q
  FROM generate_series(1, 50) q;
CREATE FUNCTION pg_temp.tiny_same_order(op text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	r record; got float8[]; want float8[]; same int := 0; total int := 0;
BEGIN
	FOR r IN SELECT q FROM tiny_queries LOOP
		SET LOCAL enable_seqscan = off;
		EXECUTE format('SELECT array_agg(d) FROM (SELECT v %s $1 AS d FROM tiny ORDER BY v %s $1 LIMIT 10) s', op, op)
			INTO got USING r.q;
		SET LOCAL enable_seqscan = on;
		SET LOCAL enable_indexscan = off;
		EXECUTE format('SELECT array_agg(d) FROM (SELECT v %s $1 AS d FROM tiny ORDER BY v %s $1 LIMIT 10) s', op, op)
			INTO want USING r.q;
		RESET enable_indexscan;
		same := same + (got = want)::int;
		total := total + 1;
	END LOOP;
	RETURN same || '/' || total;
END
$$;
CREATE INDEX tiny_l2 ON tiny USING cagra (v) WITH (storage = float16);
SELECT pg_temp.tiny_same_order('<->') AS l2_same_order;
DROP INDEX tiny_l2;
CREATE INDEX tiny_l1 ON tiny USING cagra (v vector_l1_ops) WITH (storage = float16);
SELECT pg_temp.tiny_same_order('<+>') AS l1_same_order;
DROP INDEX tiny_l1;
CREATE INDEX tiny_ip ON tiny USING cagra (v vector_ip_ops) WITH (storage = float16);
SELECT pg_temp.tiny_same_order('<#>') AS ip_same_order;
DROP INDEX tiny_ip;
CREATE INDEX tiny_cos ON tiny USING cagra (v vector_cosine_ops) WITH (storage = float16);
SELECT pg_temp.tiny_same_order('<=>') AS cosine_same_order;
DROP TABLE fs, tiny, tiny_queries;

DROP TABLE f16, queries;
