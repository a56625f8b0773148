-- The worker's SQL surface without a preloaded worker (pg_regress does not
-- preload cagra): the status says so, cagra_search runs on the CPU, and bad
-- arguments get clear errors.  The worker itself is tested by
-- test/t/1*_worker_*.pl.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

SELECT state, pid, devices, requests, fallbacks, message FROM cagra_status;
SELECT count(*) FROM cagra_worker_cache();
SELECT count(*) FROM cagra_worker_timings();

CREATE TABLE ws (id int PRIMARY KEY, v vector(4));
INSERT INTO ws SELECT i, ARRAY[i, i % 7, (i * 13) % 11, 1]::vector FROM generate_series(1, 300) i;
CREATE INDEX ws_v ON ws USING cagra (v) WITH (graph_degree = 8, intermediate_graph_degree = 16);
CREATE INDEX ws_id ON ws (id);

-- two queries, k = 3: the rows themselves come first, distances ascend
SELECT s.query, w.id, round(s.distance::numeric, 4) AS distance
  FROM cagra_search('ws_v', ARRAY['[10,3,9,1]', '[200,4,7,1]']::vector[], 3) s
  JOIN ws w ON w.ctid = s.ctid
 ORDER BY s.query, s.distance, w.id;

-- only rows visible to the snapshot: deleted rows disappear at once
DELETE FROM ws WHERE id = 10;
SELECT count(*) FILTER (WHERE w.id = 10) AS deleted_returned, count(*) AS rows
  FROM cagra_search('ws_v', ARRAY['[10,3,9,1]']::vector[], 3) s JOIN ws w ON w.ctid = s.ctid;

-- NULL elements give no rows; an empty array gives none
SELECT query, count(*) FROM cagra_search('ws_v', ARRAY[NULL, '[1,1,1,1]']::vector[], 2) GROUP BY query;
SELECT count(*) FROM cagra_search('ws_v', ARRAY[]::vector[], 2);

-- errors
SELECT * FROM cagra_search('ws_v', ARRAY['[1,1,1,1]']::vector[], 0);
SELECT * FROM cagra_search('ws_v', ARRAY['[1,1,1,1]']::vector[], 513);
SELECT * FROM cagra_search('ws_v', ARRAY['[1,1,1]']::vector[], 3);
SELECT * FROM cagra_search('ws_id', ARRAY['[1,1,1,1]']::vector[], 3);
SELECT * FROM cagra_search('ws', ARRAY['[1,1,1,1]']::vector[], 3);
SET cagra.device = tpu;
-- removed settings (the worker's batching is fixed): an error in a session
SET cagra.batch_window = 10;
SHOW cagra.resident_search;
-- the user settings; developer ones are hidden from pg_settings but set as any
SELECT name, setting, context FROM pg_settings WHERE name LIKE 'cagra.%' ORDER BY name;
SET cagra.search_width = 4;
SHOW cagra.search_width;
RESET cagra.search_width;
SET cagra.device = gpu;
SELECT * FROM cagra_search('ws_v', ARRAY['[1,1,1,1]']::vector[], 3);
SET enable_seqscan = off;
SELECT id FROM ws ORDER BY v <-> '[1,1,1,1]' LIMIT 1;
RESET enable_seqscan;
RESET cagra.device;

-- SELECT privilege on the table is needed
CREATE ROLE ws_nobody;
SET ROLE ws_nobody;
SELECT * FROM cagra_search('ws_v', ARRAY['[1,1,1,1]']::vector[], 3);
RESET ROLE;
DROP ROLE ws_nobody;

DROP TABLE ws;
