-- CREATE EXTENSION cagra attaches to an existing type named vector (pgvector's)
-- instead of creating its own.  pgvector is not installed here, so a stand-in
-- plays its part: a type named vector with pgvector's layout, whose I/O and
-- distance functions are cagra's C functions under other SQL names.
-- Everything happens in a database of its own, dropped at the end.
\set orig_db :DBNAME
CREATE DATABASE cagra_standin;
\c cagra_standin

CREATE TYPE vector;
CREATE FUNCTION standin_in(cstring, oid, integer) RETURNS vector
    AS '$libdir/cagra', 'vector_in' LANGUAGE C IMMUTABLE STRICT;
CREATE FUNCTION standin_out(vector) RETURNS cstring
    AS '$libdir/cagra', 'vector_out' LANGUAGE C IMMUTABLE STRICT;
CREATE FUNCTION standin_typmod_in(cstring[]) RETURNS integer
    AS '$libdir/cagra', 'vector_typmod_in' LANGUAGE C IMMUTABLE STRICT;
CREATE FUNCTION standin_recv(internal, oid, integer) RETURNS vector
    AS '$libdir/cagra', 'vector_recv' LANGUAGE C IMMUTABLE STRICT;
CREATE FUNCTION standin_send(vector) RETURNS bytea
    AS '$libdir/cagra', 'vector_send' LANGUAGE C IMMUTABLE STRICT;
CREATE TYPE vector (
    INPUT = standin_in, OUTPUT = standin_out, TYPMOD_IN = standin_typmod_in,
    RECEIVE = standin_recv, SEND = standin_send, STORAGE = external
);
CREATE FUNCTION standin_typmod(vector, integer, boolean) RETURNS vector
    AS '$libdir/cagra', 'vector' LANGUAGE C IMMUTABLE STRICT;
CREATE CAST (vector AS vector) WITH FUNCTION standin_typmod(vector, integer, boolean) AS IMPLICIT;
CREATE FUNCTION standin_l2(vector, vector) RETURNS float8
    AS '$libdir/cagra', 'l2_distance' LANGUAGE C IMMUTABLE STRICT;
CREATE FUNCTION standin_neg_ip(vector, vector) RETURNS float8
    AS '$libdir/cagra', 'vector_negative_inner_product' LANGUAGE C IMMUTABLE STRICT;
CREATE FUNCTION standin_cosine(vector, vector) RETURNS float8
    AS '$libdir/cagra', 'cosine_distance' LANGUAGE C IMMUTABLE STRICT;
CREATE OPERATOR <-> (LEFTARG = vector, RIGHTARG = vector, FUNCTION = standin_l2);
CREATE OPERATOR <#> (LEFTARG = vector, RIGHTARG = vector, FUNCTION = standin_neg_ip);
CREATE OPERATOR <=> (LEFTARG = vector, RIGHTARG = vector, FUNCTION = standin_cosine);

CREATE TABLE items (id int, v vector(3));
INSERT INTO items VALUES (1, '[1,0,0]'), (2, '[0,2,0]'), (3, '[1,1,1]'), (4, '[0,0,3]');

CREATE EXTENSION cagra;

-- still one type named vector, and it is not a member of cagra
SELECT count(*) AS vector_types FROM pg_type WHERE typname = 'vector';
SELECT count(*) AS owned_by_cagra
  FROM pg_depend d JOIN pg_extension e ON d.refobjid = e.oid
 WHERE e.extname = 'cagra' AND d.classid = 'pg_type'::regclass
   AND d.objid = 'vector'::regtype;
-- cagra declared none of its own type functions or vector operators
SELECT proname FROM pg_proc
 WHERE prosrc IN ('vector_in', 'l2_distance', 'cosine_distance') ORDER BY proname;
SELECT count(*) AS operators FROM pg_operator
 WHERE oprleft = 'vector'::regtype AND oprname IN ('<->', '<#>', '<=>');

-- the stand-in's values and operators work as before
SELECT id, v, v <-> '[1,1,1]' AS l2, v <#> '[1,1,1]' AS neg_ip, v <=> '[1,1,1]' AS cosine
  FROM items ORDER BY v <-> '[1,1,1]', id;
SELECT '[1,2]'::vector(3);
INSERT INTO items VALUES (5, '[1,2]');

-- cagra's operator classes are on the stand-in type, with its operators
SELECT c.opcname, c.opcintype::regtype, o.amopopr::regoperator, p.oprcode
  FROM pg_opclass c
  JOIN pg_amop o ON o.amopfamily = c.opcfamily
  JOIN pg_operator p ON p.oid = o.amopopr
 WHERE c.opcmethod = (SELECT oid FROM pg_am WHERE amname = 'cagra')
 ORDER BY c.opcname;

-- and a cagra index on a column of the stand-in type answers each operator
-- (the first five distances, as the index returns them: ties cannot reorder)
INSERT INTO items SELECT i, format('[%s,%s,%s]', i % 7, i % 11, i % 13)::vector
  FROM generate_series(5, 300) i;
SET enable_seqscan = off;
CREATE INDEX items_l2 ON items USING cagra (v vector_l2_ops);
EXPLAIN (COSTS OFF) SELECT id FROM items ORDER BY v <-> '[1,1,1]' LIMIT 5;
SELECT array_agg(round(d::numeric, 6)) AS l2
  FROM (SELECT v <-> '[1,1,1]' AS d FROM items ORDER BY v <-> '[1,1,1]' LIMIT 5) s;
CREATE INDEX items_ip ON items USING cagra (v vector_ip_ops);
SELECT array_agg(d) AS neg_ip
  FROM (SELECT v <#> '[1,1,1]' AS d FROM items ORDER BY v <#> '[1,1,1]' LIMIT 5) s;
CREATE INDEX items_cosine ON items USING cagra (v vector_cosine_ops);
SELECT array_agg(round(d::numeric, 6)) AS cosine
  FROM (SELECT v <=> '[1,2,3]' AS d FROM items ORDER BY v <=> '[1,2,3]' LIMIT 5) s;
RESET enable_seqscan;
SELECT * FROM cagra_index_check('items_l2');

-- the indexes depend on cagra; dropping it drops them (with CASCADE) but
-- leaves the type and the data alone
DROP EXTENSION cagra;
SET client_min_messages = warning;
DROP EXTENSION cagra CASCADE;
RESET client_min_messages;
SELECT count(*) AS cagra_indexes FROM pg_indexes WHERE tablename = 'items';
SELECT id, v FROM items WHERE id <= 4 ORDER BY id;

-- a type named vector of another shape is refused
CREATE SCHEMA other;
CREATE TYPE other.vector AS (x integer);
CREATE EXTENSION cagra SCHEMA other;

-- pgvector installed in one schema, cagra asked for another: refused with a
-- hint.  An extension named vector cannot be installed here, so its catalog
-- row is faked inside a transaction that is rolled back.
CREATE SCHEMA elsewhere;
BEGIN;
INSERT INTO pg_extension (oid, extname, extowner, extnamespace, extrelocatable, extversion)
SELECT (SELECT max(oid)::int8 + 1 FROM pg_extension)::oid, 'vector', 10,
       'public'::regnamespace, false, '0.8.0';
CREATE EXTENSION cagra SCHEMA elsewhere;
ROLLBACK;
SELECT count(*) AS extensions_named_vector FROM pg_extension WHERE extname = 'vector';

\c :orig_db
DROP DATABASE cagra_standin;
