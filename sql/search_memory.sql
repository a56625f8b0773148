-- cagra_search takes its queries in parts whose scratch memory fits
-- work_mem (one query at least), so its memory does not grow with the
-- array.  The rows are the same whatever the part size.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

CREATE TABLE sm (id int PRIMARY KEY, v vector(8));
INSERT INTO sm SELECT i, (SELECT array_agg(sin(i * j) * 10)::vector FROM generate_series(1, 8) j)
  FROM generate_series(1, 2000) i;
CREATE INDEX sm_v ON sm USING cagra (v) WITH (graph_degree = 16, intermediate_graph_degree = 32);
-- 1500 queries (some NULL: they keep their numbers and give no rows)
CREATE TABLE sm_q AS
SELECT q, CASE WHEN q % 97 = 0 THEN NULL ELSE
          (SELECT array_agg(cos(q * j) * 10)::vector FROM generate_series(1, 8) j) END AS v
  FROM generate_series(1, 1500) q;

CREATE TABLE sm_default AS
SELECT s.n, s.query, s.ctid AS tid, s.distance
  FROM cagra_search('sm_v', (SELECT array_agg(v ORDER BY q) FROM sm_q), 10)
       WITH ORDINALITY AS s(query, ctid, distance, n);
SELECT count(*) AS rows, count(DISTINCT query) AS queries FROM sm_default;

-- 64kB: parts of a few queries each; the same rows in the same order
-- (n: their position in the output)
SET work_mem = '64kB';
CREATE TABLE sm_small AS
SELECT s.n, s.query, s.ctid AS tid, s.distance
  FROM cagra_search('sm_v', (SELECT array_agg(v ORDER BY q) FROM sm_q), 10)
       WITH ORDINALITY AS s(query, ctid, distance, n);
RESET work_mem;
SELECT count(*) AS rows FROM sm_small;
SELECT count(*) AS differences FROM
  ((SELECT * FROM sm_default EXCEPT ALL SELECT * FROM sm_small)
   UNION ALL
   (SELECT * FROM sm_small EXCEPT ALL SELECT * FROM sm_default)) d;

-- k = 512 with the smallest work_mem: still one query per part at least
SET work_mem = '64kB';
SELECT count(*) FROM cagra_search('sm_v', ARRAY(SELECT v FROM sm_q WHERE q <= 20 AND v IS NOT NULL), 512);
RESET work_mem;

-- The scratch arrays the backend keeps between calls (in TopMemoryContext)
-- follow the part size, not the array: after 10,000 queries with the
-- default work_mem (4MB), a few MB, where one batch of all the queries
-- would have kept some 45 MB.
SELECT count(*) FROM cagra_search('sm_v',
  (SELECT array_agg((SELECT array_agg(cos(q * j) * 10)::vector FROM generate_series(1, 8) j))
     FROM generate_series(1, 10000) q), 10);
SELECT sum(total_bytes) < 8 * 1024 * 1024 AS kept_memory_bounded
  FROM pg_backend_memory_contexts WHERE name = 'TopMemoryContext';

-- The result rows go into a context the backend keeps between calls
-- ("cagra_search rows", its first block 8 MB), emptied when the query
-- that used it ends, also when it ends in an error.
CREATE TEMP VIEW sm_rows_memory AS
SELECT count(*) AS contexts, bool_and(total_bytes >= 8 * 1024 * 1024) AS kept,
       bool_and(used_bytes < 64 * 1024) AS empty
  FROM pg_backend_memory_contexts WHERE name = 'cagra_search rows';
SELECT * FROM sm_rows_memory;
SELECT CASE WHEN query > 0 THEN 1 / 0 END FROM cagra_search('sm_v', (SELECT array_agg(v ORDER BY q) FROM sm_q), 10);
SELECT * FROM sm_rows_memory;
-- two calls in one query, and a call rescanned for each outer row: the
-- first keeps its rows there, the others in the query's memory; the same
-- rows as alone
SELECT count(*) AS matched FROM
  cagra_search('sm_v', ARRAY(SELECT v FROM sm_q WHERE q <= 50 AND v IS NOT NULL ORDER BY q), 10) a
  JOIN cagra_search('sm_v', ARRAY(SELECT v FROM sm_q WHERE q <= 50 AND v IS NOT NULL ORDER BY q), 10) b
    ON a.query = b.query AND a.ctid = b.ctid;
SELECT count(*) AS rescanned FROM sm_q q,
  LATERAL cagra_search('sm_v', ARRAY[q.v], 4) s
 WHERE q.q <= 30 AND q.v IS NOT NULL;
-- a cursor's rows stay while other statements call cagra_search: what
-- it fetches before and after them is what a query of its own returns
CREATE FUNCTION pg_temp.sm_cursor_differences() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    c refcursor;
    r record;
    got text[] := '{}';
    other bigint;
    want text[];
BEGIN
    OPEN c FOR SELECT query, ctid FROM cagra_search('sm_v',
        ARRAY(SELECT v FROM sm_q WHERE q <= 50 AND v IS NOT NULL ORDER BY q), 10);
    FOR i IN 1 .. 200 LOOP
        FETCH c INTO r;
        got := got || (r.query || ':' || r.ctid);
    END LOOP;
    SELECT count(*) INTO other FROM cagra_search('sm_v', ARRAY(SELECT v FROM sm_q ORDER BY q), 10);
    SELECT count(*) INTO other FROM cagra_search('sm_v', ARRAY(SELECT v FROM sm_q WHERE q > 1000 ORDER BY q), 10);
    LOOP
        FETCH c INTO r;
        EXIT WHEN NOT FOUND;
        got := got || (r.query || ':' || r.ctid);
    END LOOP;
    CLOSE c;
    SELECT array_agg(query || ':' || ctid) INTO want FROM cagra_search('sm_v',
        ARRAY(SELECT v FROM sm_q WHERE q <= 50 AND v IS NOT NULL ORDER BY q), 10);
    RETURN (SELECT count(*) FROM ((SELECT unnest(got) EXCEPT ALL SELECT unnest(want))
                                  UNION ALL (SELECT unnest(want) EXCEPT ALL SELECT unnest(got))) d)
           + abs(cardinality(got) - 500);
END $$;
SELECT pg_temp.sm_cursor_differences() AS differences;
SELECT * FROM sm_rows_memory;

DROP TABLE sm, sm_q, sm_default, sm_small;
