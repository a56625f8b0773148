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

-- The k nearest visible rows of each query (query numbers count from 1 in
-- array order), on the GPU worker when it runs, else on the CPU.
CREATE FUNCTION cagra_search(index regclass, queries vector[], k integer,
        OUT query integer, OUT ctid tid, OUT distance float8)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME' LANGUAGE C VOLATILE STRICT;
