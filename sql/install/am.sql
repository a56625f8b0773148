-- sql/install/am.sql — the cagra index access method, its operator classes
-- (on the types `vector` and `halfvec`, ours or pgvector's) and the index inspection
-- functions.

CREATE FUNCTION cagra_handler(internal) RETURNS index_am_handler
    AS 'MODULE_PATHNAME' LANGUAGE C;

CREATE ACCESS METHOD cagra TYPE INDEX HANDLER cagra_handler;
COMMENT ON ACCESS METHOD cagra IS 'CAGRA graph index for nearest-neighbour search';

-- Support function 1 of each operator class names the metric it indexes.
CREATE FUNCTION cagra_l2_support(internal) RETURNS integer
    AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION cagra_ip_support(internal) RETURNS integer
    AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION cagra_cosine_support(internal) RETURNS integer
    AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION cagra_l1_support(internal) RETURNS integer
    AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE OPERATOR CLASS vector_l2_ops
    DEFAULT FOR TYPE vector USING cagra AS
    OPERATOR 1 <-> (vector, vector) FOR ORDER BY float_ops,
    FUNCTION 1 cagra_l2_support(internal);

CREATE OPERATOR CLASS vector_ip_ops
    FOR TYPE vector USING cagra AS
    OPERATOR 1 <#> (vector, vector) FOR ORDER BY float_ops,
    FUNCTION 1 cagra_ip_support(internal);

CREATE OPERATOR CLASS vector_cosine_ops
    FOR TYPE vector USING cagra AS
    OPERATOR 1 <=> (vector, vector) FOR ORDER BY float_ops,
    FUNCTION 1 cagra_cosine_support(internal);

-- L1 (taxicab) distance.  Only where the vector type has the <+> operator
-- (cagra's own type and pgvector's do; another type named vector may not).
DO $l1$
BEGIN
    IF to_regoperator('<+>(vector,vector)') IS NOT NULL THEN
        CREATE OPERATOR CLASS vector_l1_ops
            FOR TYPE vector USING cagra AS
            OPERATOR 1 <+> (vector, vector) FOR ORDER BY float_ops,
            FUNCTION 1 cagra_l1_support(internal);
    END IF;
END
$l1$;

-- halfvec, pgvector's or cagra's own (vector.sql): the same operator classes
-- (its <->, <#>, <=>, <+> on halfvec); the index reads the elements as floats
-- and takes up to 16,000 dimensions (pgvector's HNSW stops at 4,000).  Not on
-- a type of that name that is neither (pgvector absent, cagra's vector
-- another's).
DO $halfvec$
BEGIN
    IF to_regtype('halfvec') IS NOT NULL
       AND (EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')
            OR EXISTS (SELECT 1 FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
                        WHERE d.classid = 'pg_type'::regclass AND d.objid = to_regtype('halfvec')
                          AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
                          AND e.extname = 'cagra')) THEN
        EXECUTE $ddl$
        CREATE OPERATOR CLASS halfvec_l2_ops
            DEFAULT FOR TYPE halfvec USING cagra AS
            OPERATOR 1 <-> (halfvec, halfvec) FOR ORDER BY float_ops,
            FUNCTION 1 cagra_l2_support(internal);
        CREATE OPERATOR CLASS halfvec_ip_ops
            FOR TYPE halfvec USING cagra AS
            OPERATOR 1 <#> (halfvec, halfvec) FOR ORDER BY float_ops,
            FUNCTION 1 cagra_ip_support(internal);
        CREATE OPERATOR CLASS halfvec_cosine_ops
            FOR TYPE halfvec USING cagra AS
            OPERATOR 1 <=> (halfvec, halfvec) FOR ORDER BY float_ops,
            FUNCTION 1 cagra_cosine_support(internal);
        CREATE OPERATOR CLASS halfvec_l1_ops
            FOR TYPE halfvec USING cagra AS
            OPERATOR 1 <+> (halfvec, halfvec) FOR ORDER BY float_ops,
            FUNCTION 1 cagra_l1_support(internal);
        $ddl$;
    END IF;
END
$halfvec$;

-- What the meta page of a cagra index says.
CREATE FUNCTION cagra_index_info(
        index regclass,
        OUT dimensions integer,
        OUT metric text,
        OUT graph_degree integer,
        OUT intermediate_graph_degree integer,
        OUT build_device text,
        OUT nodes bigint,
        OUT live_nodes bigint,
        OUT deleted_nodes bigint,
        OUT entry_nodes integer,
        OUT nodes_per_page integer,
        OUT pages_per_node integer,
        OUT pages bigint,
        OUT size_bytes bigint,
        OUT generation bigint,
        OUT long_edges boolean,
        OUT storage text,
        OUT reused_slots bigint,
        OUT search_itopk integer,
        OUT search_probes integer,
        OUT built_nodes bigint,
        OUT unlinked_nodes bigint)
    AS 'MODULE_PATHNAME' LANGUAGE C STRICT;

-- Every broken invariant of a cagra index, one line each; no rows when clean.
-- It reads the whole index and holds off its inserts meanwhile: superusers
-- only, unless granted (as amcheck does).
CREATE FUNCTION cagra_index_check(index regclass) RETURNS SETOF text
    AS 'MODULE_PATHNAME' LANGUAGE C STRICT;
REVOKE ALL ON FUNCTION cagra_index_check(regclass) FROM PUBLIC;
