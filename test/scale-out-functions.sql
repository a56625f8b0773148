-- test/scale-out-functions.sql: the coordinator-side functions of
-- docs/scale-out.md (the same text as in the doc), for a partitioned table
-- items (tenant int, id bigint, v vector) whose partitions are postgres_fdw
-- foreign tables, each shard holding a plain table items with a cagra index
-- items_v.  Not part of the extension: load them on the coordinator.
-- They need postgres_fdw (the partitions) and dblink (the batch search).

-- items_knn(q, k): top k of one query, one ORDER BY <-> LIMIT k per
-- partition (pushed down whole: the remote SQL has the ORDER BY and the
-- LIMIT), run at the same time (Async Foreign Scan), merged by the coordinator.
-- The partitions are read from the catalog at each call, so a partition
-- attached a moment ago is searched.
CREATE FUNCTION items_knn(q vector, k int)
RETURNS TABLE (tenant int, id bigint, distance float8)
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    sql text;
BEGIN
    SELECT string_agg(format('(SELECT tenant, id, v <-> $1 AS distance FROM %s ORDER BY v <-> $1 LIMIT $2)',
                             inhrelid::regclass), ' UNION ALL ' ORDER BY inhrelid)
      INTO sql
      FROM pg_inherits WHERE inhparent = 'items'::regclass;
    -- a sort key no shard's output is sorted by (distance + 0, then the
    -- tie-break) makes the plan Append + Sort rather than a Merge Append
    -- (which PostgreSQL 17 picks for ORDER BY distance, with an Incremental
    -- Sort for the tie-break): only an Append runs the shards asynchronously
    RETURN QUERY EXECUTE 'SELECT * FROM (' || sql || ') u ORDER BY distance + 0, tenant, id LIMIT $2'
        USING q, k;
END
$fn$;

-- items_batch_knn_shards(queries, k): every shard's top k for every query,
-- one cagra_search call per shard with the whole array, sent to all shards
-- at once through dblink (one round trip each), with the shard (the foreign
-- server's name) and the row key: cagra_search's ctids are local to a shard,
-- so the shard joins them to its rows before answering.
CREATE FUNCTION items_batch_knn_shards(queries vector[], k int)
RETURNS TABLE (query int, shard text, tenant int, id bigint, distance float8)
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    servers text[];
    srv text;
    remote text := format(
        'SELECT s.query, t.tenant, t.id, s.distance'
        ' FROM cagra_search(''items_v'', %L::vector[], %s) s JOIN items t ON t.ctid = s.ctid',
        queries, k);
BEGIN
    SELECT array_agg(fs.srvname::text ORDER BY p.inhrelid) INTO servers
      FROM pg_inherits p
      JOIN pg_foreign_table ft ON ft.ftrelid = p.inhrelid
      JOIN pg_foreign_server fs ON fs.oid = ft.ftserver
     WHERE p.inhparent = 'items'::regclass;
    BEGIN
        FOREACH srv IN ARRAY servers LOOP
            BEGIN
                -- a foreign server's name is a dblink connection string:
                -- its host, port, dbname and the user mapping are used
                PERFORM dblink_connect('knn_' || srv, srv);
            EXCEPTION WHEN OTHERS THEN
                RAISE EXCEPTION 'shard "%" cannot be reached: %', srv, SQLERRM;
            END;
            IF dblink_send_query('knn_' || srv, remote) <> 1 THEN
                RAISE EXCEPTION 'shard "%": %', srv, dblink_error_message('knn_' || srv);
            END IF;
        END LOOP;
        FOREACH srv IN ARRAY servers LOOP
            BEGIN
                RETURN QUERY SELECT r.query, srv, r.tenant, r.id, r.distance
                    FROM dblink_get_result('knn_' || srv)
                         AS r(query int, tenant int, id bigint, distance float8);
            EXCEPTION WHEN OTHERS THEN
                RAISE EXCEPTION 'shard "%": %', srv, SQLERRM;
            END;
            PERFORM dblink_disconnect('knn_' || srv);
        END LOOP;
    EXCEPTION WHEN OTHERS THEN
        -- close what this call opened, then fail
        PERFORM dblink_disconnect(c) FROM unnest(dblink_get_connections()) c WHERE c LIKE 'knn\_%';
        RAISE;
    END;
END
$fn$;

-- items_batch_knn(queries, k): the global top k of each query (numbered
-- from 1 in array order, as cagra_search numbers them).
CREATE FUNCTION items_batch_knn(queries vector[], k int)
RETURNS TABLE (query int, shard text, tenant int, id bigint, distance float8)
LANGUAGE sql VOLATILE AS $fn$
    SELECT query, shard, tenant, id, distance FROM (
        SELECT s.*, row_number() OVER (PARTITION BY s.query ORDER BY s.distance, s.tenant, s.id) AS rn
          FROM items_batch_knn_shards(queries, k) s) r
     WHERE rn <= k
     ORDER BY query, distance, tenant, id
$fn$;
