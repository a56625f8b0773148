-- cagra_search settles the candidates of a whole batch together (headers
-- page by page, heap blocks in order, all-visible pages through their line
-- pointers).  The rows must be what a heap fetch gives: visible tuples only,
-- the TID of the visible member of a HOT chain, k per query, distance order.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

-- fillfactor 50: room on each page for HOT updates
CREATE TABLE sv (id int PRIMARY KEY, v vector(3), note text)
  WITH (fillfactor = 50, autovacuum_enabled = off);
INSERT INTO sv SELECT i, ARRAY[i * 0.37, sin(i) * 20, cos(i * 1.3) * 20]::vector, 'a'
  FROM generate_series(1, 600) i;
CREATE INDEX sv_v ON sv USING cagra (v) WITH (graph_degree = 8, intermediate_graph_degree = 16);
CREATE TABLE sv_before AS SELECT id, ctid AS old_ctid FROM sv;

-- HOT updates (v unchanged), then VACUUM: the index keeps the old TIDs,
-- which become redirect line pointers, and every page is all-visible
UPDATE sv SET note = 'b' WHERE id % 3 = 0;
VACUUM sv;
SELECT relallvisible = relpages AS all_visible FROM pg_class WHERE relname = 'sv';
SELECT count(*) AS moved FROM sv JOIN sv_before b USING (id) WHERE sv.ctid <> b.old_ctid;

CREATE TABLE sv_q (qid int, v vector(3));
INSERT INTO sv_q SELECT row_number() OVER (ORDER BY id), v FROM sv WHERE id % 60 = 0;

-- the exact answer (sequential scan), k = 5
CREATE TABLE sv_exact AS
SELECT q.qid, x.id, x.rank FROM sv_q q CROSS JOIN LATERAL
  (SELECT id, row_number() OVER (ORDER BY s.v <-> q.v, id) AS rank FROM sv s
    ORDER BY s.v <-> q.v, id LIMIT 5) x;

-- every returned ctid is the current one of its row, the rows are the
-- exact ones, in distance order
CREATE FUNCTION sv_check(OUT rows bigint, OUT current_ctids bigint, OUT exact bigint,
                         OUT ordered bool, OUT distances_right bool)
LANGUAGE sql AS $$
  WITH r AS (SELECT s.query, s.ctid, s.distance,
                    lag(s.distance) OVER (PARTITION BY s.query ORDER BY s.n) AS prev
               FROM cagra_search('sv_v', (SELECT array_agg(v ORDER BY qid) FROM sv_q), 5)
                    WITH ORDINALITY AS s(query, ctid, distance, n))
  SELECT count(*),
         count(t.id),
         count(e.id),
         bool_and(r.prev IS NULL OR r.prev <= r.distance),
         bool_and(abs(r.distance - (t.v <-> q.v)) < 1e-4)
    FROM r JOIN sv_q q ON q.qid = r.query
           LEFT JOIN sv t ON t.ctid = r.ctid
           LEFT JOIN sv_exact e ON e.qid = r.query AND e.id = t.id
$$;
SELECT * FROM sv_check();

-- the same through the heap fetch path (serializable transactions take it)
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT * FROM sv_check();
COMMIT;

-- pages no longer all-visible: deleted rows (not yet vacuumed) drop out and
-- the next candidates take their place, still 5 per query
DELETE FROM sv WHERE id IN (SELECT id FROM sv_exact WHERE rank <= 2);
DELETE FROM sv_exact WHERE rank <= 2;
INSERT INTO sv_exact
SELECT q.qid, x.id, 0 FROM sv_q q CROSS JOIN LATERAL
  (SELECT id FROM sv s ORDER BY s.v <-> q.v, id OFFSET 3 LIMIT 2) x;
SELECT * FROM sv_check();

-- after VACUUM the deleted rows' nodes are gone, the pages all-visible again
VACUUM sv;
SELECT relallvisible = relpages AS all_visible FROM pg_class WHERE relname = 'sv';
SELECT * FROM sv_check();

-- a query repeated in one batch gets the same rows each time
SELECT count(DISTINCT ctid) AS distinct_rows, count(*) AS rows
  FROM cagra_search('sv_v', array_fill((SELECT v FROM sv WHERE id = 301), ARRAY[50]), 4);

DROP FUNCTION sv_check();
DROP TABLE sv, sv_before, sv_q, sv_exact;
