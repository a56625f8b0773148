-- The vector type: text and binary I/O, typmod, limits, casts, operators.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

-- text round trips
SELECT '[1,2,3]'::vector;
SELECT ' [ 1 , -2.5 ,3e2 ]  '::vector;
SELECT E'[\t1,\n2\r]'::vector;
SELECT '[0.1,1.23456789,-0,1e-45,3.4028235e38]'::vector;
SELECT '[1.5,2]'::vector::text::vector = '[1.5,2]'::vector AS round_trip;

-- malformed input: every case names the problem
SELECT ''::vector;
SELECT '1,2'::vector;
SELECT '['::vector;
SELECT '[1,2'::vector;
SELECT '[1,,2]'::vector;
SELECT '[1 2]'::vector;
SELECT '[1,2,]'::vector;
SELECT '[,]'::vector;
SELECT '[a]'::vector;
SELECT '[1,2]x'::vector;
SELECT '[1,2]]'::vector;
SELECT '[]'::vector;

-- NaN, infinity and values a float4 cannot hold
SELECT '[NaN]'::vector;
SELECT '[1,nan]'::vector;
SELECT '[Infinity]'::vector;
SELECT '[-inf,1]'::vector;
SELECT '[1e39]'::vector;
SELECT '[-1e39]'::vector;

-- dimension limits: 16000 is the most
SELECT vector_dims(('[' || array_to_string(array_fill(1, ARRAY[16000]), ',') || ']')::vector);
SELECT ('[' || array_to_string(array_fill(1, ARRAY[16001]), ',') || ']')::vector;
SELECT vector_dims(array_fill(1, ARRAY[16000])::vector);
SELECT array_fill(1, ARRAY[16001])::vector;

-- typmod
SELECT '[1,2,3]'::vector(3);
SELECT '[1,2]'::vector(3);
SELECT '[1,2]'::vector(2)::vector(3);
SELECT '[1]'::vector(0);
SELECT '[1]'::vector(16001);
SELECT '[1]'::vector(1, 2);
SELECT format_type('vector'::regtype, 16000);
CREATE TABLE vt (id int, v vector(3));
INSERT INTO vt VALUES (1, '[1,2,3]'), (2, '[4,5,6]'), (3, NULL);
INSERT INTO vt VALUES (4, '[1,2]');
INSERT INTO vt VALUES (4, '[1,2,3,4]');
UPDATE vt SET v = '[1,2]' WHERE id = 1;
INSERT INTO vt VALUES (5, ARRAY[7,8,9]);
INSERT INTO vt VALUES (6, ARRAY[7,8]::real[]);
SELECT * FROM vt ORDER BY id;
SELECT atttypmod FROM pg_attribute WHERE attrelid = 'vt'::regclass AND attname = 'v';

-- on-disk size: 4-byte header, int16 dim, int16 unused, 4 bytes per element
SELECT pg_column_size('[1,2,3]'::vector);

-- binary form: int16 dim, int16 unused, float4 values (big-endian)
SELECT vector_send('[1,2,-0.5]');
\getenv abs_builddir PG_ABS_BUILDDIR
\set binfile :abs_builddir '/results/vector.bin'
COPY (SELECT v FROM vt WHERE v IS NOT NULL ORDER BY id) TO :'binfile' WITH (FORMAT binary);
CREATE TABLE vt_copy (v vector(3));
COPY vt_copy FROM :'binfile' WITH (FORMAT binary);
SELECT v FROM vt_copy;
CREATE TABLE vt_copy2 (v vector(2));
COPY vt_copy2 FROM :'binfile' WITH (FORMAT binary);
-- malformed binary values, written as bytea so COPY hands the bytes to vector_recv
CREATE TABLE raw (b bytea);
CREATE TABLE vt_any (v vector);
CREATE FUNCTION recv_bytes(bytes bytea, file text) RETURNS SETOF vector
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE raw;
    TRUNCATE vt_any;
    INSERT INTO raw VALUES (bytes);
    EXECUTE format('COPY raw TO %L WITH (FORMAT binary)', file);
    EXECUTE format('COPY vt_any FROM %L WITH (FORMAT binary)', file);
    RETURN QUERY SELECT v FROM vt_any;
END $$;
\set VERBOSITY terse
SELECT recv_bytes('\x000200003f80000040000000', :'binfile');  -- [1,2]
SELECT recv_bytes('\x000200003f800000', :'binfile');          -- one value short
SELECT recv_bytes('\x000100013f800000', :'binfile');          -- unused is not 0
SELECT recv_bytes('\x00000000', :'binfile');                  -- no dimensions
SELECT recv_bytes('\x3e810000', :'binfile');                  -- 16001 dimensions
SELECT recv_bytes('\xffff0000', :'binfile');                  -- negative dimensions
SELECT recv_bytes('\x000100007fc00000', :'binfile');          -- NaN
SELECT recv_bytes('\x00010000ff800000', :'binfile');          -- -infinity
\set VERBOSITY default
DROP FUNCTION recv_bytes(bytea, text);
DROP TABLE raw, vt_any, vt_copy, vt_copy2;

-- a 16,000-dimension value stored out of line and read back
CREATE TABLE vt_big (v vector(16000));
INSERT INTO vt_big SELECT array_agg(i % 100)::vector FROM generate_series(1, 16000) i;
SELECT vector_dims(v), v::real[] = (SELECT array_agg((i % 100)::real) FROM generate_series(1, 16000) i)
  FROM vt_big;
DROP TABLE vt_big;

-- casts from and to arrays
SELECT ARRAY[1,2,3]::vector;
SELECT ARRAY[1.5,2.5]::real[]::vector;
SELECT ARRAY[1.5,2.5]::double precision[]::vector;
SELECT ARRAY[1.5,2.5]::numeric[]::vector;
SELECT ARRAY[1,2,3]::vector(3);
SELECT ARRAY[1,2,3]::vector(2);
SELECT '[1,2.5]'::vector::real[];
SELECT ARRAY[[1,2],[3,4]]::vector;
SELECT ARRAY[1,NULL]::vector;
SELECT '{}'::real[]::vector;
SELECT ARRAY['NaN']::real[]::vector;
SELECT ARRAY['-Infinity']::double precision[]::vector;
SELECT ARRAY['NaN']::numeric[]::vector;
SELECT ARRAY[1e300]::double precision[]::vector;
SELECT ARRAY[1e39]::numeric[]::vector;

-- distances against hand-computed values
SELECT '[0,0]'::vector <-> '[3,4]' AS l2_5,
       '[1,2,3]'::vector <-> '[4,5,6]' AS l2_sqrt27,
       '[1,2,3]'::vector <#> '[4,5,6]' AS neg_ip_32,
       '[1,0]'::vector <=> '[0,1]' AS cos_1,
       '[1,1]'::vector <=> '[2,2]' AS cos_0,
       '[1,0]'::vector <=> '[-1,0]' AS cos_2;
SELECT l2_distance('[1,1,1,1]'::vector, '[0,0,0,0]'), inner_product('[1,2]'::vector, '[3,4]'),
       cosine_distance('[3,0]'::vector, '[3,4]');
-- a zero vector has no direction: NaN, as in pgvector
SELECT '[0,0]'::vector <=> '[1,1]', cosine_distance('[1,1]'::vector, '[0,0]');
SELECT vector_dims('[1,2,3]'::vector), vector_norm('[3,4]'), vector_norm('[0,0]');
SELECT '[1,2]'::vector <-> '[1,2,3]';
SELECT '[1,2]'::vector <#> '[1,2,3]';
SELECT '[1,2]'::vector <=> '[1,2,3]';
SELECT inner_product('[1]'::vector, '[1,2]');

-- kernel tails and blocks: exact integer results for every length 1..70
SELECT count(*) AS wrong FROM (
  SELECT d,
         l2_distance(a::vector, b::vector) ^ 2 AS l2sq,
         inner_product(a::vector, b::vector) AS ip,
         (SELECT sum((a[i] - b[i]) ^ 2) FROM generate_subscripts(a, 1) i) AS l2sq_sql,
         (SELECT sum(a[i] * b[i]) FROM generate_subscripts(a, 1) i) AS ip_sql
    FROM (SELECT d,
                 (SELECT array_agg(i % 13 - 6) FROM generate_series(1, d) i) AS a,
                 (SELECT array_agg(i % 5) FROM generate_series(1, d) i) AS b
            FROM generate_series(1, 70) d) s
) t WHERE round(l2sq) <> l2sq_sql OR ip <> ip_sql OR abs(l2sq - l2sq_sql) > 1e-9;

-- the SQLSTATE of each kind of error
\set VERBOSITY sqlstate
SELECT '[1,2'::vector;                       -- invalid_text_representation
SELECT '[]'::vector;                         -- data_exception
SELECT '[NaN]'::vector;                      -- data_exception
SELECT '[1e39]'::vector;                     -- numeric_value_out_of_range
SELECT array_fill(1, ARRAY[16001])::vector;  -- program_limit_exceeded
SELECT '[1]'::vector(0);                     -- invalid_parameter_value
SELECT '[1,2]'::vector(3);                   -- data_exception
SELECT '[1,2]'::vector <-> '[1]';            -- data_exception
SELECT ARRAY[1,NULL]::vector;                -- null_value_not_allowed
\set VERBOSITY default

-- comparisons and the btree opclass
SELECT '[1,2]'::vector < '[1,3]', '[1,2]'::vector < '[1,2,0]', '[2]'::vector > '[1,9]',
       '[1,2]'::vector = '[1,2]', '[1,2]'::vector <> '[1,2]', '[1,2]'::vector <= '[1,2]',
       '[1,2]'::vector >= '[1,3]';
SELECT DISTINCT v FROM (VALUES ('[1,2]'::vector), ('[0,5]'), ('[1,2]'), ('[1,2,0]')) t(v)
 ORDER BY v;
CREATE TABLE vt_btree (v vector);
INSERT INTO vt_btree SELECT ARRAY[i % 10, i % 7]::vector FROM generate_series(1, 100) i;
CREATE INDEX ON vt_btree (v);
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT count(*) FROM vt_btree WHERE v = '[3,3]';
SELECT count(*) FROM vt_btree WHERE v = '[3,3]';
SELECT v FROM vt_btree WHERE v < '[0,3]' ORDER BY v;
RESET enable_seqscan;
DROP TABLE vt_btree;

DROP TABLE vt;

-- the rest of pgvector's functions, with its meanings and errors
SELECT '[1,2,3]'::vector + '[4,5,6]' AS sum, '[1,2,3]'::vector - '[1,1,1]' AS difference,
       '[1,2,3]'::vector * '[2,2,2]' AS product, '[1,2,3]'::vector || '[4,5]' AS concatenation;
SELECT '[1,2]'::vector + '[1,2,3]';
SELECT '[3e38]'::vector + '[3e38]';
SELECT '[1e-30]'::vector * '[1e-30]';
SELECT l1_distance('[0,0]'::vector, '[3,-4]'), '[0,0]'::vector <+> '[3,-4]' AS l1;
SELECT l1_distance('[1]'::vector, '[1,2]');
SELECT l2_normalize('[3,4]'::vector), l2_normalize('[0,0]'::vector);
SELECT subvector('[1,2,3,4,5]'::vector, 2, 3), subvector('[1,2,3,4,5]'::vector, 4, 10), subvector('[1,2,3,4,5]'::vector, -1, 3);
SELECT subvector('[1,2,3]'::vector, 2, 0);
SELECT subvector('[1,2,3]'::vector, 5, 2);
SELECT avg(v), sum(v) FROM (VALUES ('[1,2]'::vector), ('[3,4]'), ('[5,9]')) t(v);
SELECT avg(v) IS NULL AS avg_of_nothing, sum(v) IS NULL AS sum_of_nothing FROM (SELECT '[1]'::vector WHERE false) t(v);
SELECT avg(v) FROM (VALUES ('[1,2]'::vector), ('[1,2,3]')) t(v);
SELECT sum(v) FROM (VALUES ('[1,2]'::vector), ('[1,2,3]')) t(v);

-- avg's state functions, called with states made by hand, make no vector
-- the type's input refuses: none of no dimensions, of more than 16000, or
-- with NaN or infinity
SELECT vector_avg('{1}');
SELECT vector_avg('{0}') IS NULL AS avg_of_nothing;
SELECT vector_avg(array_agg(n)) FROM generate_series(1, 16002) n;
SELECT vector_dims(vector_avg(array_fill(2::float8, ARRAY[16001])));
SELECT vector_avg('{1,NaN}');
SELECT vector_avg('{1,Infinity}');
SELECT vector_avg('{1e-300,1e300}');
SELECT vector_avg('{NaN,1}');
SELECT vector_accum(array_fill(1::float8, ARRAY[16002]), '[1]');
SELECT vector_accum('{0}', '[1,2]');
SELECT vector_combine(array_fill(1::float8, ARRAY[16002]), '{0}');
SELECT vector_combine('{0}', array_fill(1::float8, ARRAY[16002]));
SELECT vector_combine('{1,2}', '{2,4}');
