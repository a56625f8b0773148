-- sql/install/worker.sql — the GPU worker's status, its cache of index
-- copies, and batched searches (cagra_search).

CREATE FUNCTION cagra_worker_status(
        OUT state text,
        OUT backend text,
        OUT pid integer,
        OUT started_at timestamptz,
        OUT generation bigint,
        OUT devices text[],
        OUT memory_used_mb float8,
        OUT memory_limit_mb float8,
        OUT cached_indexes integer,
        OUT requests bigint,
        OUT queries bigint,
        OUT batches bigint,
        OUT mean_batch_size float8,
        OUT uploads bigint,
        OUT builds bigint,
        OUT fallbacks bigint,
        OUT errors bigint,
        OUT queue_time_ms float8,
        OUT search_time_ms float8,
        OUT message text)
    AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE;

CREATE VIEW cagra_status AS SELECT * FROM cagra_worker_status();

-- The index copies the worker holds (database and index by OID: the
-- worker has no database connection).
CREATE FUNCTION cagra_worker_cache(
        OUT database oid,
        OUT index oid,
        OUT generation bigint,
        OUT nodes bigint,
        OUT device integer,
        OUT size_mb float8,
        OUT searches bigint,
        OUT loaded_at timestamptz)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE;

-- Where searches' round trips through the worker go, step by step, summed
-- since the server started (docs/worker.md, "Profiling a round trip").
CREATE FUNCTION cagra_worker_timings(
        OUT step text,
        OUT per text,
        OUT events bigint,
        OUT total_ms float8,
        OUT mean_us float8)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE;

-- Monitoring, as PostgreSQL's own statistics views: for pg_monitor (and
-- superusers), not PUBLIC; the function and the view over it alike.
-- cagra_worker_cache() shows other databases' copies only to roles with the
-- privileges of pg_read_all_stats (pg_monitor has them), whoever else is
-- granted it.
REVOKE ALL ON FUNCTION cagra_worker_status() FROM PUBLIC;
REVOKE ALL ON FUNCTION cagra_worker_cache() FROM PUBLIC;
REVOKE ALL ON FUNCTION cagra_worker_timings() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION cagra_worker_status() TO pg_monitor;
GRANT EXECUTE ON FUNCTION cagra_worker_timings() TO pg_monitor;
GRANT EXECUTE ON FUNCTION cagra_worker_cache() TO pg_monitor;
GRANT SELECT ON cagra_status TO pg_monitor;

-- The k nearest visible rows of each query (query numbers count from 1 in
-- array order), on the GPU worker when it runs, else on the CPU.
CREATE FUNCTION cagra_search(index regclass, queries vector[], k integer,
        OUT query integer, OUT ctid tid, OUT distance float8)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT;
-- Only among the rows `allowed` names (their ctids): a filter the caller
-- computed, e.g. ARRAY(SELECT ctid FROM items WHERE tenant = 7).
CREATE FUNCTION cagra_search(index regclass, queries vector[], k integer, allowed tid[],
        OUT query integer, OUT ctid tid, OUT distance float8)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'cagra_search' LANGUAGE C VOLATILE STRICT;
-- The same with halfvec queries, where the type exists (cagra's own, or
-- pgvector's).
DO $halfvec_search$
BEGIN
    IF to_regtype('halfvec') IS NOT NULL THEN
        EXECUTE $ddl$
        CREATE FUNCTION cagra_search(index regclass, queries halfvec[], k integer,
                OUT query integer, OUT ctid tid, OUT distance float8)
            RETURNS SETOF record
            AS 'MODULE_PATHNAME', 'cagra_search' LANGUAGE C VOLATILE STRICT;
        CREATE FUNCTION cagra_search(index regclass, queries halfvec[], k integer, allowed tid[],
                OUT query integer, OUT ctid tid, OUT distance float8)
            RETURNS SETOF record
            AS 'MODULE_PATHNAME', 'cagra_search' LANGUAGE C VOLATILE STRICT;
        $ddl$;
    END IF;
END
$halfvec_search$;
