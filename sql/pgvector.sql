-- cagra beside the real pgvector (0.8.0, built from Debian's source package
-- by .ci/install-deps.sh; test/run-tests.sh skips this file when pgvector is
-- not installed).  In a database of its own: pgvector first, then cagra,
-- whose operator classes attach to pgvector's type; an existing pgvector
-- table and HNSW index, then USING cagra on the same column; pgvector's own
-- operators and functions unchanged; DROP EXTENSION either way; the error
-- when cagra came first.
CREATE DATABASE regress_cagra_pgvector;
\c regress_cagra_pgvector
SET client_min_messages = warning;
CREATE EXTENSION vector;
CREATE EXTENSION cagra;
RESET client_min_messages;
-- one type, pgvector's
SELECT e.extname AS owner_of_vector
  FROM pg_type t JOIN pg_depend d ON d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid
 WHERE t.typname = 'vector';
SELECT opcname, amname FROM pg_opclass c JOIN pg_am a ON a.oid = c.opcmethod
 WHERE amname IN ('cagra', 'hnsw') ORDER BY amname, opcname;

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

SELECT setseed(0.5);
CREATE TABLE items (id int PRIMARY KEY, embedding vector(8));
INSERT INTO items SELECT i, array(SELECT sin(i * 0.7 + j) + random() * 0.01 FROM generate_series(1, 8) j)::vector
  FROM generate_series(1, 2000) i;
CREATE INDEX items_hnsw ON items USING hnsw (embedding vector_l2_ops);
CREATE TABLE q AS SELECT embedding AS v FROM items WHERE id = 777;
SET enable_seqscan = off;
SELECT pg_temp.explain($q$SELECT id FROM items ORDER BY embedding <-> (SELECT v FROM q) LIMIT 5$q$) AS "QUERY PLAN";
CREATE TEMP TABLE hnsw_ids AS SELECT array_agg(id) AS ids FROM (SELECT id FROM items ORDER BY embedding <-> (SELECT v FROM q) LIMIT 5) s;

-- the same column, USING cagra: the same queries answered
CREATE INDEX items_cagra ON items USING cagra (embedding vector_l2_ops);
DROP INDEX items_hnsw;
SELECT pg_temp.explain($q$SELECT id FROM items ORDER BY embedding <-> (SELECT v FROM q) LIMIT 5$q$) AS "QUERY PLAN";
SELECT (SELECT array_agg(id) FROM (SELECT id FROM items ORDER BY embedding <-> (SELECT v FROM q) LIMIT 5) s)
       = (SELECT ids FROM hnsw_ids) AS same_rows_as_hnsw;
CREATE INDEX items_cagra_ip ON items USING cagra (embedding vector_ip_ops);
CREATE INDEX items_cagra_cos ON items USING cagra (embedding vector_cosine_ops);
SELECT id FROM items ORDER BY embedding <#> (SELECT v FROM q) LIMIT 1;
SELECT id FROM items ORDER BY embedding <=> (SELECT v FROM q) LIMIT 1;
-- pgvector's L1 operator, as pgvector-python's l1_distance sends it
CREATE INDEX items_cagra_l1 ON items USING cagra (embedding vector_l1_ops);
SELECT pg_temp.explain($q$SELECT id FROM items ORDER BY embedding <+> (SELECT v FROM q) LIMIT 1$q$) AS "QUERY PLAN";
SELECT id FROM items ORDER BY embedding <+> (SELECT v FROM q) LIMIT 1;
SELECT count(*) FROM cagra_search('items_cagra', ARRAY(SELECT v FROM q), 5);
RESET enable_seqscan;

-- halfvec columns: cagra's halfvec operator classes, beyond HNSW's 4,000 dimensions
CREATE TABLE halves (id int PRIMARY KEY, h halfvec(5000));
INSERT INTO halves SELECT i, array(SELECT sin(i * 0.37 + j * 0.01) FROM generate_series(1, 5000) j)::halfvec
  FROM generate_series(1, 300) i;
CREATE INDEX ON halves USING hnsw (h halfvec_l2_ops);
CREATE INDEX halves_cagra ON halves USING cagra (h halfvec_l2_ops);
CREATE INDEX halves_cagra_cos ON halves USING cagra (h halfvec_cosine_ops);
CREATE INDEX halves_cagra_l1 ON halves USING cagra (h halfvec_l1_ops);
-- a halfvec column is stored in float16 unless storage says otherwise
CREATE INDEX halves_cagra_f32 ON halves USING cagra (h halfvec_l2_ops) WITH (storage = float32);
SELECT c.relname, i.dimensions, i.metric, i.storage, i.nodes, i.pages
  FROM (VALUES ('halves_cagra'), ('halves_cagra_cos'), ('halves_cagra_f32')) c(relname),
	   cagra_index_info(c.relname::regclass) i;
DROP INDEX halves_cagra_f32;
CREATE TABLE hq AS SELECT h FROM halves WHERE id = 123;
SET enable_seqscan = off;
SELECT pg_temp.explain($q$SELECT id FROM halves ORDER BY h <-> (SELECT h FROM hq) LIMIT 3$q$) AS "QUERY PLAN";
SELECT id FROM halves ORDER BY h <-> (SELECT h FROM hq) LIMIT 1;
SELECT id FROM halves ORDER BY h <=> (SELECT h FROM hq) LIMIT 1;
SELECT id FROM halves ORDER BY h <+> (SELECT h FROM hq) LIMIT 1;
INSERT INTO halves VALUES (1000, (SELECT h FROM hq));
SELECT array_agg(id ORDER BY id) FROM (SELECT id FROM halves ORDER BY h <-> (SELECT h FROM hq) LIMIT 2) s;
RESET enable_seqscan;
SELECT count(*) AS problems FROM cagra_index_check('halves_cagra');
DROP TABLE halves, hq;

-- pgvector's operators and functions keep their meaning
SELECT '[1,2,3]'::vector + '[4,5,6]' AS sum, '[1,2,3]'::vector - '[1,1,1]' AS difference,
       '[1,2,3]'::vector * '[2,2,2]' AS product, '[1,2,3]'::vector || '[4,5]' AS concatenation;
SELECT l2_distance('[0,0]'::vector, '[3,4]'), '[0,0]'::vector <-> '[3,4]' AS l2,
       l1_distance('[0,0]'::vector, '[3,4]'), '[0,0]'::vector <+> '[3,4]' AS l1,
       inner_product('[1,2]'::vector, '[3,4]'), '[1,2]'::vector <#> '[3,4]' AS neg_ip,
       round(cosine_distance('[1,0]'::vector, '[1,1]')::numeric, 6) AS cosine;
SELECT vector_dims('[1,2,3]'::vector), round(vector_norm('[3,4]')::numeric, 3),
       l2_normalize('[3,4]'::vector), subvector('[1,2,3,4]'::vector, 2, 2);
SELECT avg(v), sum(v) FROM (VALUES ('[1,2]'::vector), ('[3,4]')) t(v);
SELECT '[1,2]'::halfvec, '{1:1,3:2}/3'::sparsevec;

-- float16 storage of elements it keeps as subnormals, on pgvector's vector
-- and halfvec: data and queries in [0, 1e-6]^16, the index order is exact
-- (distances compared: halfvec rows tie)
SELECT setseed(0.25);
CREATE TABLE tiny (id int, v vector(16), h halfvec(16));
INSERT INTO tiny SELECT i, a::vector, a::halfvec
  FROM (SELECT i, (SELECT array_agg(random() * 1e-6) FROM generate_series(1, 16) WHERE i > 0)::real[] AS a
          FROM generate_series(1, 500) i) s;
CREATE TABLE tiny_queries AS
  SELECT (SELECT array_agg(random() * 1e-6) FROM generate_series(1, 16) WHERE q > 0)::vector(16) AS q
  FROM generate_series(1, 20) q;
CREATE INDEX ON tiny USING cagra (v) WITH (storage = float16);
CREATE INDEX ON tiny USING cagra (h halfvec_l2_ops);
CREATE FUNCTION pg_temp.tiny_same_order(col text, cast_to text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
	r record; got float8[]; want float8[]; same int := 0; total int := 0;
	query text := format('SELECT array_agg(d) FROM (SELECT %1$I <-> $1::%2$s AS d FROM tiny ORDER BY %1$I <-> $1::%2$s LIMIT 10) s',
						 col, cast_to);
BEGIN
	FOR r IN SELECT q FROM tiny_queries LOOP
		SET LOCAL enable_seqscan = off;
		EXECUTE query INTO got USING r.q;
		SET LOCAL enable_seqscan = on;
		SET LOCAL enable_indexscan = off;
		EXECUTE query INTO want USING r.q;
		RESET enable_indexscan;
		same := same + (got = want)::int;
		total := total + 1;
	END LOOP;
	RETURN same || '/' || total;
END
$$;
SELECT pg_temp.tiny_same_order('v', 'vector') AS vector_same_order,
       pg_temp.tiny_same_order('h', 'halfvec') AS halfvec_same_order;
DROP TABLE tiny, tiny_queries;

-- DROP EXTENSION either way
DROP EXTENSION vector;              -- cagra's operator classes depend on the type
DROP EXTENSION cagra;               -- the indexes depend on its operator classes
DROP EXTENSION cagra CASCADE;       -- they go with it; pgvector and the data stay
SELECT count(*) FROM items WHERE embedding <-> (SELECT v FROM q) < 1;
SELECT indexrelid::regclass FROM pg_index WHERE indrelid = 'items'::regclass ORDER BY 1;
SET client_min_messages = warning;
CREATE EXTENSION cagra;
RESET client_min_messages;
CREATE INDEX items_cagra ON items USING cagra (embedding);
DROP EXTENSION vector CASCADE;      -- takes the columns, and cagra, whose operator classes are on the type
SELECT count(*) AS columns_left FROM pg_attribute WHERE attrelid = 'items'::regclass AND attnum > 0 AND NOT attisdropped;
SELECT count(*) AS cagra_left FROM pg_extension WHERE extname = 'cagra';

-- cagra first: it owns the type, and pgvector cannot be created beside it
CREATE EXTENSION cagra;
CREATE EXTENSION vector;
DROP EXTENSION cagra;
\c contrib_regression
DROP DATABASE regress_cagra_pgvector;
