-- sql/install/vector.sql — first part of the install script: the types
-- `vector` and `halfvec`.
--
-- Created only when the extension's schema has no type named vector yet.
-- When pgvector is installed there first, cagra attaches to pgvector's types
-- (same on-disk layouts) and to their operators <->, <#>, <=> and <+>, and
-- creates none of the objects below; the index opclasses (am.sql) then refer
-- to pgvector's types.

\echo Use "CREATE EXTENSION cagra" to load this file. \quit

DO $install_vector$
DECLARE
    existing oid := to_regtype('vector');  -- search_path is the target schema
    pgvector_schema name;
BEGIN
    IF existing IS NOT NULL THEN
        -- Attach only to a type with pgvector's layout: variable length,
        -- int alignment, typmod vector(n), no element type.
        PERFORM 1 FROM pg_type
         WHERE oid = existing AND typlen = -1 AND typalign = 'i'
           AND typelem = 0 AND typmodin <> 0 AND typtype = 'b';
        IF NOT FOUND THEN
            RAISE EXCEPTION 'type "%.vector" exists but does not have the layout of pgvector''s vector',
                            current_schema()
                USING ERRCODE = 'duplicate_object',
                      HINT = 'Install cagra into another schema: CREATE EXTENSION cagra SCHEMA ...;';
        END IF;
        -- When the type is pgvector's, record that cagra depends on pgvector:
        -- pg_dump then creates pgvector first on restore (without it, it
        -- goes by name, cagra first, which makes its own type and leaves no
        -- room for pgvector's).  The operator classes already depend on
        -- pgvector's objects; this is the same dependency at the level of
        -- the extensions, which is what pg_dump orders by.
        INSERT INTO pg_catalog.pg_depend (classid, objid, objsubid, refclassid, refobjid, refobjsubid, deptype)
        SELECT 'pg_catalog.pg_extension'::regclass, c.oid, 0, 'pg_catalog.pg_extension'::regclass, v.oid, 0, 'n'
          FROM pg_catalog.pg_extension c, pg_catalog.pg_extension v, pg_catalog.pg_depend d
         WHERE c.extname = 'cagra' AND v.extname = 'vector'
           AND d.classid = 'pg_catalog.pg_type'::regclass AND d.objid = existing
           AND d.refclassid = 'pg_catalog.pg_extension'::regclass AND d.refobjid = v.oid AND d.deptype = 'e';
        RETURN;
    END IF;

    -- pgvector installed in another schema: attach there rather than create a
    -- second, incompatible type of the same name.
    SELECT n.nspname INTO pgvector_schema
      FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'vector';
    IF FOUND THEN
        RAISE EXCEPTION 'pgvector is installed in schema "%", cagra in schema "%"',
                        pgvector_schema, current_schema()
            USING ERRCODE = 'invalid_schema_name',
                  HINT = format('Create cagra in pgvector''s schema: CREATE EXTENSION cagra SCHEMA %I;',
                                pgvector_schema);
    END IF;

    EXECUTE $ddl$
    CREATE TYPE vector;

    CREATE FUNCTION vector_in(cstring, oid, integer) RETURNS vector
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_out(vector) RETURNS cstring
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_typmod_in(cstring[]) RETURNS integer
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_recv(internal, oid, integer) RETURNS vector
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_send(vector) RETURNS bytea
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

    CREATE TYPE vector (
        INPUT     = vector_in,
        OUTPUT    = vector_out,
        TYPMOD_IN = vector_typmod_in,
        RECEIVE   = vector_recv,
        SEND      = vector_send,
        STORAGE   = external
    );

    -- typmod and casts
    CREATE FUNCTION vector(vector, integer, boolean) RETURNS vector
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION array_to_vector(integer[], integer, boolean) RETURNS vector
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION array_to_vector(real[], integer, boolean) RETURNS vector
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION array_to_vector(double precision[], integer, boolean) RETURNS vector
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION array_to_vector(numeric[], integer, boolean) RETURNS vector
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_to_float4(vector, integer, boolean) RETURNS real[]
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

    CREATE CAST (vector AS vector)
        WITH FUNCTION vector(vector, integer, boolean) AS IMPLICIT;
    CREATE CAST (integer[] AS vector)
        WITH FUNCTION array_to_vector(integer[], integer, boolean) AS ASSIGNMENT;
    CREATE CAST (real[] AS vector)
        WITH FUNCTION array_to_vector(real[], integer, boolean) AS ASSIGNMENT;
    CREATE CAST (double precision[] AS vector)
        WITH FUNCTION array_to_vector(double precision[], integer, boolean) AS ASSIGNMENT;
    CREATE CAST (numeric[] AS vector)
        WITH FUNCTION array_to_vector(numeric[], integer, boolean) AS ASSIGNMENT;
    CREATE CAST (vector AS real[])
        WITH FUNCTION vector_to_float4(vector, integer, boolean) AS IMPLICIT;

    -- distances and other functions
    CREATE FUNCTION l2_distance(vector, vector) RETURNS float8
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION inner_product(vector, vector) RETURNS float8
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_negative_inner_product(vector, vector) RETURNS float8
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION cosine_distance(vector, vector) RETURNS float8
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_dims(vector) RETURNS integer
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_norm(vector) RETURNS float8
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

    CREATE OPERATOR <-> (
        LEFTARG = vector, RIGHTARG = vector, FUNCTION = l2_distance,
        COMMUTATOR = '<->'
    );
    CREATE OPERATOR <#> (
        LEFTARG = vector, RIGHTARG = vector, FUNCTION = vector_negative_inner_product,
        COMMUTATOR = '<#>'
    );
    CREATE OPERATOR <=> (
        LEFTARG = vector, RIGHTARG = vector, FUNCTION = cosine_distance,
        COMMUTATOR = '<=>'
    );

    -- the rest of pgvector's functions on vector (src/type/vector_math.cpp)
    CREATE FUNCTION l1_distance(vector, vector) RETURNS float8
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION l2_normalize(vector) RETURNS vector
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION subvector(vector, integer, integer) RETURNS vector
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_add(vector, vector) RETURNS vector
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_sub(vector, vector) RETURNS vector
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_mul(vector, vector) RETURNS vector
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_concat(vector, vector) RETURNS vector
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_accum(double precision[], vector) RETURNS double precision[]
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_combine(double precision[], double precision[]) RETURNS double precision[]
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_avg(double precision[]) RETURNS vector
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

    CREATE OPERATOR <+> (
        LEFTARG = vector, RIGHTARG = vector, FUNCTION = l1_distance,
        COMMUTATOR = '<+>'
    );
    CREATE OPERATOR + (
        LEFTARG = vector, RIGHTARG = vector, FUNCTION = vector_add,
        COMMUTATOR = +
    );
    CREATE OPERATOR - (
        LEFTARG = vector, RIGHTARG = vector, FUNCTION = vector_sub
    );
    CREATE OPERATOR * (
        LEFTARG = vector, RIGHTARG = vector, FUNCTION = vector_mul,
        COMMUTATOR = *
    );
    CREATE OPERATOR || (
        LEFTARG = vector, RIGHTARG = vector, FUNCTION = vector_concat
    );
    CREATE AGGREGATE avg(vector) (
        SFUNC = vector_accum, STYPE = double precision[], FINALFUNC = vector_avg,
        COMBINEFUNC = vector_combine, INITCOND = '{0}', PARALLEL = SAFE
    );
    CREATE AGGREGATE sum(vector) (
        SFUNC = vector_add, STYPE = vector, COMBINEFUNC = vector_add, PARALLEL = SAFE
    );

    -- comparisons and the default btree opclass (DISTINCT, ORDER BY, UNIQUE)
    CREATE FUNCTION vector_lt(vector, vector) RETURNS boolean
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_le(vector, vector) RETURNS boolean
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_eq(vector, vector) RETURNS boolean
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_ne(vector, vector) RETURNS boolean
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_ge(vector, vector) RETURNS boolean
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_gt(vector, vector) RETURNS boolean
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_cmp(vector, vector) RETURNS integer
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

    CREATE OPERATOR < (
        LEFTARG = vector, RIGHTARG = vector, FUNCTION = vector_lt,
        COMMUTATOR = >, NEGATOR = >=,
        RESTRICT = scalarltsel, JOIN = scalarltjoinsel
    );
    CREATE OPERATOR <= (
        LEFTARG = vector, RIGHTARG = vector, FUNCTION = vector_le,
        COMMUTATOR = >=, NEGATOR = >,
        RESTRICT = scalarlesel, JOIN = scalarlejoinsel
    );
    CREATE OPERATOR = (
        LEFTARG = vector, RIGHTARG = vector, FUNCTION = vector_eq,
        COMMUTATOR = =, NEGATOR = <>,
        RESTRICT = eqsel, JOIN = eqjoinsel
    );
    CREATE OPERATOR <> (
        LEFTARG = vector, RIGHTARG = vector, FUNCTION = vector_ne,
        COMMUTATOR = <>, NEGATOR = =,
        RESTRICT = neqsel, JOIN = neqjoinsel
    );
    CREATE OPERATOR >= (
        LEFTARG = vector, RIGHTARG = vector, FUNCTION = vector_ge,
        COMMUTATOR = <=, NEGATOR = <,
        RESTRICT = scalargesel, JOIN = scalargejoinsel
    );
    CREATE OPERATOR > (
        LEFTARG = vector, RIGHTARG = vector, FUNCTION = vector_gt,
        COMMUTATOR = <, NEGATOR = <=,
        RESTRICT = scalargtsel, JOIN = scalargtjoinsel
    );

    CREATE OPERATOR CLASS vector_ops
        DEFAULT FOR TYPE vector USING btree AS
        OPERATOR 1 <,
        OPERATOR 2 <=,
        OPERATOR 3 =,
        OPERATOR 4 >=,
        OPERATOR 5 >,
        FUNCTION 1 vector_cmp(vector, vector);
    -- halfvec: half-precision elements (src/type/halfvec.cpp), pgvector's
    -- names, forms and casts
    CREATE TYPE halfvec;

    CREATE FUNCTION halfvec_in(cstring, oid, integer) RETURNS halfvec
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_out(halfvec) RETURNS cstring
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_typmod_in(cstring[]) RETURNS integer
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_recv(internal, oid, integer) RETURNS halfvec
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_send(halfvec) RETURNS bytea
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

    CREATE TYPE halfvec (
        INPUT     = halfvec_in,
        OUTPUT    = halfvec_out,
        TYPMOD_IN = halfvec_typmod_in,
        RECEIVE   = halfvec_recv,
        SEND      = halfvec_send,
        STORAGE   = external
    );

    CREATE FUNCTION halfvec(halfvec, integer, boolean) RETURNS halfvec
        AS 'MODULE_PATHNAME', 'halfvec_typmod' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_to_vector(halfvec, integer, boolean) RETURNS vector
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_to_halfvec(vector, integer, boolean) RETURNS halfvec
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION array_to_halfvec(integer[], integer, boolean) RETURNS halfvec
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION array_to_halfvec(real[], integer, boolean) RETURNS halfvec
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION array_to_halfvec(double precision[], integer, boolean) RETURNS halfvec
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION array_to_halfvec(numeric[], integer, boolean) RETURNS halfvec
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_to_float4(halfvec, integer, boolean) RETURNS real[]
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

    CREATE CAST (halfvec AS halfvec)
        WITH FUNCTION halfvec(halfvec, integer, boolean) AS IMPLICIT;
    CREATE CAST (halfvec AS vector)
        WITH FUNCTION halfvec_to_vector(halfvec, integer, boolean) AS ASSIGNMENT;
    CREATE CAST (vector AS halfvec)
        WITH FUNCTION vector_to_halfvec(vector, integer, boolean) AS IMPLICIT;
    CREATE CAST (halfvec AS real[])
        WITH FUNCTION halfvec_to_float4(halfvec, integer, boolean) AS ASSIGNMENT;
    CREATE CAST (integer[] AS halfvec)
        WITH FUNCTION array_to_halfvec(integer[], integer, boolean) AS ASSIGNMENT;
    CREATE CAST (real[] AS halfvec)
        WITH FUNCTION array_to_halfvec(real[], integer, boolean) AS ASSIGNMENT;
    CREATE CAST (double precision[] AS halfvec)
        WITH FUNCTION array_to_halfvec(double precision[], integer, boolean) AS ASSIGNMENT;
    CREATE CAST (numeric[] AS halfvec)
        WITH FUNCTION array_to_halfvec(numeric[], integer, boolean) AS ASSIGNMENT;

    CREATE FUNCTION l2_distance(halfvec, halfvec) RETURNS float8
        AS 'MODULE_PATHNAME', 'halfvec_l2_distance' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION inner_product(halfvec, halfvec) RETURNS float8
        AS 'MODULE_PATHNAME', 'halfvec_inner_product' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_negative_inner_product(halfvec, halfvec) RETURNS float8
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION cosine_distance(halfvec, halfvec) RETURNS float8
        AS 'MODULE_PATHNAME', 'halfvec_cosine_distance' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION l1_distance(halfvec, halfvec) RETURNS float8
        AS 'MODULE_PATHNAME', 'halfvec_l1_distance' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION vector_dims(halfvec) RETURNS integer
        AS 'MODULE_PATHNAME', 'halfvec_vector_dims' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION l2_norm(halfvec) RETURNS float8
        AS 'MODULE_PATHNAME', 'halfvec_l2_norm' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION l2_normalize(halfvec) RETURNS halfvec
        AS 'MODULE_PATHNAME', 'halfvec_l2_normalize' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION subvector(halfvec, integer, integer) RETURNS halfvec
        AS 'MODULE_PATHNAME', 'halfvec_subvector' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_add(halfvec, halfvec) RETURNS halfvec
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_sub(halfvec, halfvec) RETURNS halfvec
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_mul(halfvec, halfvec) RETURNS halfvec
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_concat(halfvec, halfvec) RETURNS halfvec
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_accum(double precision[], halfvec) RETURNS double precision[]
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_combine(double precision[], double precision[]) RETURNS double precision[]
        AS 'MODULE_PATHNAME', 'vector_combine' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_avg(double precision[]) RETURNS halfvec
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

    CREATE OPERATOR <-> (
        LEFTARG = halfvec, RIGHTARG = halfvec, FUNCTION = l2_distance,
        COMMUTATOR = '<->'
    );
    CREATE OPERATOR <#> (
        LEFTARG = halfvec, RIGHTARG = halfvec, FUNCTION = halfvec_negative_inner_product,
        COMMUTATOR = '<#>'
    );
    CREATE OPERATOR <=> (
        LEFTARG = halfvec, RIGHTARG = halfvec, FUNCTION = cosine_distance,
        COMMUTATOR = '<=>'
    );
    CREATE OPERATOR <+> (
        LEFTARG = halfvec, RIGHTARG = halfvec, FUNCTION = l1_distance,
        COMMUTATOR = '<+>'
    );
    CREATE OPERATOR + (
        LEFTARG = halfvec, RIGHTARG = halfvec, FUNCTION = halfvec_add,
        COMMUTATOR = +
    );
    CREATE OPERATOR - (
        LEFTARG = halfvec, RIGHTARG = halfvec, FUNCTION = halfvec_sub
    );
    CREATE OPERATOR * (
        LEFTARG = halfvec, RIGHTARG = halfvec, FUNCTION = halfvec_mul,
        COMMUTATOR = *
    );
    CREATE OPERATOR || (
        LEFTARG = halfvec, RIGHTARG = halfvec, FUNCTION = halfvec_concat
    );
    CREATE AGGREGATE avg(halfvec) (
        SFUNC = halfvec_accum, STYPE = double precision[], FINALFUNC = halfvec_avg,
        COMBINEFUNC = halfvec_combine, INITCOND = '{0}', PARALLEL = SAFE
    );
    CREATE AGGREGATE sum(halfvec) (
        SFUNC = halfvec_add, STYPE = halfvec, COMBINEFUNC = halfvec_add, PARALLEL = SAFE
    );

    CREATE FUNCTION halfvec_lt(halfvec, halfvec) RETURNS boolean
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_le(halfvec, halfvec) RETURNS boolean
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_eq(halfvec, halfvec) RETURNS boolean
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_ne(halfvec, halfvec) RETURNS boolean
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_ge(halfvec, halfvec) RETURNS boolean
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_gt(halfvec, halfvec) RETURNS boolean
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
    CREATE FUNCTION halfvec_cmp(halfvec, halfvec) RETURNS integer
        AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

    CREATE OPERATOR < (
        LEFTARG = halfvec, RIGHTARG = halfvec, FUNCTION = halfvec_lt,
        COMMUTATOR = >, NEGATOR = >=,
        RESTRICT = scalarltsel, JOIN = scalarltjoinsel
    );
    CREATE OPERATOR <= (
        LEFTARG = halfvec, RIGHTARG = halfvec, FUNCTION = halfvec_le,
        COMMUTATOR = >=, NEGATOR = >,
        RESTRICT = scalarlesel, JOIN = scalarlejoinsel
    );
    CREATE OPERATOR = (
        LEFTARG = halfvec, RIGHTARG = halfvec, FUNCTION = halfvec_eq,
        COMMUTATOR = =, NEGATOR = <>,
        RESTRICT = eqsel, JOIN = eqjoinsel
    );
    CREATE OPERATOR <> (
        LEFTARG = halfvec, RIGHTARG = halfvec, FUNCTION = halfvec_ne,
        COMMUTATOR = <>, NEGATOR = =,
        RESTRICT = neqsel, JOIN = neqjoinsel
    );
    CREATE OPERATOR >= (
        LEFTARG = halfvec, RIGHTARG = halfvec, FUNCTION = halfvec_ge,
        COMMUTATOR = <=, NEGATOR = <,
        RESTRICT = scalargesel, JOIN = scalargejoinsel
    );
    CREATE OPERATOR > (
        LEFTARG = halfvec, RIGHTARG = halfvec, FUNCTION = halfvec_gt,
        COMMUTATOR = <, NEGATOR = <=,
        RESTRICT = scalargtsel, JOIN = scalargtjoinsel
    );

    CREATE OPERATOR CLASS halfvec_ops
        DEFAULT FOR TYPE halfvec USING btree AS
        OPERATOR 1 <,
        OPERATOR 2 <=,
        OPERATOR 3 =,
        OPERATOR 4 >=,
        OPERATOR 5 >,
        FUNCTION 1 halfvec_cmp(halfvec, halfvec);
    $ddl$;
END
$install_vector$;
