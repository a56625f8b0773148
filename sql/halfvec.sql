-- The halfvec type of cagra's own (pgvector absent): pgvector's text and
-- binary forms, typmod, casts, functions and operators with pgvector's
-- results and messages, the halfvec operator classes of the index, and
-- cagra_search over halfvec queries.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;
-- the type is cagra's
SELECT e.extname AS owner_of_halfvec
  FROM pg_type t JOIN pg_depend d ON d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid
 WHERE t.typname = 'halfvec';

-- text: each element rounded to the nearest half, printed as the shortest
-- text of that half's float value
SELECT '[1,2,3]'::halfvec, ' [ 1.5 , -2e-8 , 65504 ] '::halfvec, '[0.1]'::halfvec;
SELECT '[1.00048828125, 0.333333, -0]'::halfvec, '[5.96e-8, 3e-8, 1e-9]'::halfvec;
SELECT '[65519]'::halfvec;                    -- rounds to the largest half
SELECT '[0.1,2]'::halfvec::text::halfvec = '[0.1,2]'::halfvec AS round_trip;
SELECT pg_column_size('[1,2,3]'::halfvec);    -- 4-byte header, int16 dim, int16 unused, 2 bytes an element

-- malformed input: pgvector's messages and SQLSTATEs
\set VERBOSITY sqlstate
SELECT '[65520]'::halfvec;
\set VERBOSITY default
SELECT '[70000]'::halfvec;
SELECT '[-1e39]'::halfvec;
SELECT '[nan]'::halfvec;
SELECT '[1,-inf]'::halfvec;
SELECT '[]'::halfvec;
SELECT '1,2'::halfvec;
SELECT '[1,2'::halfvec;
SELECT '[1,2]x'::halfvec;
SELECT '[1,,2]'::halfvec;
SELECT ('[' || repeat('1,', 16000) || '1]')::halfvec;

-- typmod
SELECT '[1,2]'::halfvec(2);
SELECT '[1,2]'::halfvec(3);
SELECT '[1,2]'::halfvec::halfvec(3);
SELECT NULL::halfvec(0);
SELECT NULL::halfvec(16001);
SELECT NULL::halfvec(2,3);
CREATE TABLE ht (id int, h halfvec(3));
INSERT INTO ht VALUES (1, '[1,2,3]'), (2, '[-0.5,0,1e-3]'), (3, NULL);
INSERT INTO ht VALUES (4, '[1,2]');
INSERT INTO ht VALUES (5, ARRAY[4,5,6]);       -- integer[]: an assignment cast
INSERT INTO ht VALUES (6, '[7,8,9]'::vector);   -- vector: an implicit cast
SELECT * FROM ht ORDER BY id;
SELECT atttypmod FROM pg_attribute WHERE attrelid = 'ht'::regclass AND attname = 'h';

-- casts, as pgvector has them
SELECT ARRAY[1,2]::halfvec, ARRAY[1.5,2]::real[]::halfvec, ARRAY[1.5,2]::float8[]::halfvec,
       ARRAY[1.5,2]::numeric[]::halfvec;
SELECT '[1,0.1]'::halfvec::real[], '[1,0.1]'::halfvec::vector, '[1,0.1]'::vector::halfvec;
SELECT '[1,2]'::halfvec::vector(2), '[1,2]'::vector::halfvec(2);
SELECT '[1,2]'::halfvec::vector(3);
SELECT '[1,2]'::vector::halfvec(3);
SELECT '[70000]'::vector::halfvec;
SELECT ARRAY[70000]::real[]::halfvec;
SELECT ARRAY[-70000]::int[]::halfvec;
SELECT ARRAY[NULL,1]::real[]::halfvec;
SELECT ARRAY[[1,2],[3,4]]::real[]::halfvec;
SELECT '{}'::real[]::halfvec;
SELECT ARRAY['nan']::real[]::halfvec;
SELECT ARRAY['[1,2]'::halfvec], ARRAY['[1,2]'::halfvec]::text;
SELECT '[1,2]'::halfvec::real[]::halfvec = '[1,2]' AS real_array_round_trip;

-- binary form: int16 dim, int16 unused, IEEE halves (big-endian)
SELECT halfvec_send('[1,2,-0.5]');
\getenv abs_builddir PG_ABS_BUILDDIR
\set binfile :abs_builddir '/results/halfvec.bin'
COPY (SELECT h FROM ht WHERE h IS NOT NULL ORDER BY id) TO :'binfile' WITH (FORMAT binary);
CREATE TABLE ht_copy (h halfvec(3));
COPY ht_copy FROM :'binfile' WITH (FORMAT binary);
SELECT h FROM ht_copy;
SELECT (SELECT array_agg(h ORDER BY id) FROM ht WHERE h IS NOT NULL) =
       (SELECT array_agg(h) FROM ht_copy) AS binary_round_trip;
CREATE TABLE ht_copy2 (h halfvec(2));
COPY ht_copy2 FROM :'binfile' WITH (FORMAT binary);
-- malformed binary values, written as bytea so COPY hands the bytes to halfvec_recv
CREATE TABLE raw (b bytea);
CREATE TABLE ht_any (h halfvec);
CREATE FUNCTION recv_bytes(bytes bytea, file text) RETURNS SETOF halfvec
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE raw;
    TRUNCATE ht_any;
    INSERT INTO raw VALUES (bytes);
    EXECUTE format('COPY raw TO %L WITH (FORMAT binary)', file);
    EXECUTE format('COPY ht_any FROM %L WITH (FORMAT binary)', file);
    RETURN QUERY SELECT h FROM ht_any;
END $$;
\set VERBOSITY terse
SELECT recv_bytes('\x000200003c004000', :'binfile');  -- [1,2]
SELECT recv_bytes('\x000200003c00', :'binfile');      -- one value short
SELECT recv_bytes('\x000100013c00', :'binfile');      -- unused is not 0
SELECT recv_bytes('\x00000000', :'binfile');          -- no dimensions
SELECT recv_bytes('\x3e810000', :'binfile');          -- 16001 dimensions
SELECT recv_bytes('\x000100007e00', :'binfile');      -- NaN
SELECT recv_bytes('\x00010000fc00', :'binfile');      -- -infinity
\set VERBOSITY default
DROP FUNCTION recv_bytes(bytea, text);
DROP TABLE raw, ht_any, ht_copy, ht_copy2;

-- distances and norms: pgvector's values, and the same as on the vectors
-- the halves widen to
SELECT '[1,2]'::halfvec <-> '[3,4]', '[1,2]'::halfvec <#> '[3,4]', '[1,2]'::halfvec <=> '[3,4]',
       '[1,2]'::halfvec <+> '[3,4]';
SELECT l2_distance('[1,2]'::halfvec, '[3,4]'), inner_product('[1,2]'::halfvec, '[3,4]'),
       cosine_distance('[1,2]'::halfvec, '[3,4]'), l1_distance('[1,2]'::halfvec, '[3,4]');
SELECT l2_norm('[3,4]'::halfvec), vector_dims('[3,4,5]'::halfvec);
SELECT '[0,0]'::halfvec <=> '[3,4]';
SELECT '[1,2]'::halfvec <-> '[3,4,5]';
SELECT count(*) AS disagreements
  FROM ht a, ht b
 WHERE a.h IS NOT NULL AND b.h IS NOT NULL
   AND (a.h <-> b.h <> a.h::vector <-> b.h::vector
        OR a.h <#> b.h <> a.h::vector <#> b.h::vector
        OR a.h <+> b.h <> a.h::vector <+> b.h::vector
        OR (a.h <=> b.h) IS DISTINCT FROM (a.h::vector <=> b.h::vector));

-- other functions and operators
SELECT l2_normalize('[3,4]'::halfvec), l2_normalize('[0,0]'::halfvec), subvector('[1,2,3]'::halfvec, 2, 2);
SELECT subvector('[1,2,3]'::halfvec, 4, 1);
SELECT '[1,2]'::halfvec || '[3]'::halfvec, '[1,2]'::halfvec + '[3,4]', '[1,2]'::halfvec - '[3,4]',
       '[1,2]'::halfvec * '[3,4]';
SELECT '[60000]'::halfvec + '[60000]';
SELECT '[0.001]'::halfvec * '[0.0001]';
SELECT avg(h), sum(h) FROM (VALUES ('[1,2]'::halfvec), ('[2,4]')) t(h);
SELECT avg(h) FROM ht WHERE false;
SELECT avg(h) FROM (VALUES ('[1,2]'::halfvec), ('[2,4,6]')) t(h);
-- comparisons and the btree operator class
SELECT '[1,2]'::halfvec < '[1,3]', '[1,2]'::halfvec = '[1,2]', halfvec_cmp('[1,2]', '[1,2,3]');
SELECT DISTINCT h FROM (VALUES ('[2,1]'::halfvec), ('[1,2]'), ('[2,1]'), ('[1,2,0]')) t(h) ORDER BY h;
CREATE INDEX ON ht USING btree (h);
SET enable_seqscan = off;
SELECT id FROM ht WHERE h = '[1,2,3]';
RESET enable_seqscan;

-- the index: the four halfvec operator classes, stored in float16 by default
CREATE TABLE hitems (id int PRIMARY KEY, h halfvec(8));
INSERT INTO hitems SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) FROM generate_series(1, 8) j)::halfvec
  FROM generate_series(1, 300) i;
CREATE INDEX hitems_l2 ON hitems USING cagra (h);
CREATE INDEX hitems_ip ON hitems USING cagra (h halfvec_ip_ops);
CREATE INDEX hitems_cos ON hitems USING cagra (h halfvec_cosine_ops);
CREATE INDEX hitems_l1 ON hitems USING cagra (h halfvec_l1_ops);
SELECT c.relname, o.opcname, (cagra_index_info(c.oid)).storage
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_opclass o ON o.oid = i.indclass[0]
 WHERE i.indrelid = 'hitems'::regclass AND c.relam = (SELECT oid FROM pg_am WHERE amname = 'cagra')
 ORDER BY c.relname;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM hitems ORDER BY h <-> '[1,0,0,0,0,0,0,0]' LIMIT 5;
-- each index returns the exact nearest rows, in order, with exact distances
CREATE FUNCTION nearest(op text, q halfvec, by_index boolean) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    r text;
BEGIN
    EXECUTE format('SET LOCAL enable_indexscan = %s', by_index);
    EXECUTE format('SET LOCAL enable_seqscan = %s', NOT by_index);
    EXECUTE format('SELECT string_agg(id || '':'' || round(d::numeric, 6), '','' ORDER BY d, id)
                      FROM (SELECT id, h %s $1 AS d FROM hitems ORDER BY h %s $1 LIMIT 10) s', op, op)
       INTO r USING q;
    RETURN r;
END $$;
SELECT op, nearest(op, h, true) = nearest(op, h, false) AS index_is_exact
  FROM (VALUES ('<->'), ('<#>'), ('<=>'), ('<+>')) o(op), (SELECT h FROM hitems WHERE id = 42) q
 ORDER BY op;
SELECT nearest('<->', h, true) FROM hitems WHERE id = 42;
-- inserts go to every index
INSERT INTO hitems VALUES (1000, (SELECT h FROM hitems WHERE id = 42));
SELECT id FROM hitems ORDER BY h <-> (SELECT h FROM hitems WHERE id = 42), id LIMIT 2;
RESET enable_seqscan;
DROP FUNCTION nearest(text, halfvec, boolean);

-- cagra_search over halfvec queries: the same rows as the vector queries
-- the halves widen to, on the halfvec and on a vector index
CREATE TABLE vitems AS SELECT id, h::vector(8) AS v FROM hitems;
CREATE INDEX vitems_l2 ON vitems USING cagra (v);
SELECT (SELECT array_agg((query, ctid, distance) ORDER BY query, distance, ctid)
          FROM cagra_search('hitems_l2', ARRAY(SELECT h FROM hitems WHERE id IN (1, 2, 3) ORDER BY id), 5)) =
       (SELECT array_agg((query, ctid, distance) ORDER BY query, distance, ctid)
          FROM cagra_search('hitems_l2', ARRAY(SELECT h::vector FROM hitems WHERE id IN (1, 2, 3) ORDER BY id), 5))
       AS halfvec_queries_match;
SELECT s.query, i.id, round(s.distance::numeric, 6) AS distance
  FROM cagra_search('vitems_l2', ARRAY['[1,0,0,0,0,0,0,0]'::halfvec], 3) s JOIN vitems i ON i.ctid = s.ctid
 ORDER BY s.query, s.distance, i.id;
SELECT count(*) FROM cagra_search('hitems_cos', ARRAY['[1,0,0,0,0,0,0,0]'::halfvec], 3,
                                  ARRAY(SELECT ctid FROM hitems WHERE id < 50));
SELECT * FROM cagra_search('hitems_l2', ARRAY['[1,2]'::halfvec], 3);
-- with both overloads, an array literal of no type names its type
SELECT count(*) FROM cagra_search('vitems_l2', '{"[1,0,0,0,0,0,0,0]"}', 3);
SELECT count(*) FROM cagra_search('vitems_l2', '{"[1,0,0,0,0,0,0,0]"}'::halfvec[], 3);

DROP TABLE ht, hitems, vitems;
