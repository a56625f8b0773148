-- cagra_search with allowed rows whose nearest are dead but not yet
-- vacuumed: each query still gets min(k, visible allowed rows), the
-- nearest of them with their exact distances, both where every allowed
-- node is measured (few allowed rows) and where a traversal returns only
-- them (many); here in the backend (pg_regress runs without the worker,
-- test/t/107_worker_filtered.pl covers it).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

CREATE TABLE am (id int PRIMARY KEY, v vector(8));
INSERT INTO am SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) + cos(i * 0.011 * j) FROM generate_series(1, 8) j)::vector
  FROM generate_series(1, 20000) i;
CREATE INDEX am_idx ON am USING cagra (v);
CREATE TABLE amq AS SELECT row_number() OVER (ORDER BY id) AS qno, v AS q FROM am WHERE id IN (7, 5003, 17011);

-- Per query: how many rows cagra_search returns and how many it should
-- (min(k, visible allowed rows)); whether each is an allowed row at its
-- exact distance, in distance order; and whether recall@k against the exact
-- answer (a sequential scan) reaches 0.9 (where every allowed node is
-- measured the answer is exact; a traversal's may miss a row).
CREATE FUNCTION pg_temp.compare(allowed text, k int)
RETURNS TABLE (qno bigint, got bigint, want bigint, rows_ok boolean, recall_09 boolean)
LANGUAGE plpgsql AS $$
BEGIN
	RETURN QUERY EXECUTE format($q$
		WITH got AS (
			SELECT s.query AS qno, t.id, s.distance,
			       abs(s.distance - (t.v <-> amq.q)) <= 1e-5 * (1 + s.distance) AS exact,
			       t.ctid IN (SELECT t FROM %1$s) AS allowed,
			       s.distance >= lag(s.distance, 1, '-infinity') OVER (PARTITION BY s.query ORDER BY s.ordinality) AS ordered
			  FROM cagra_search('am_idx', ARRAY(SELECT q FROM amq ORDER BY qno), %2$s, ARRAY(SELECT t FROM %1$s))
			       WITH ORDINALITY s
			  JOIN am t ON t.ctid = s.ctid JOIN amq ON amq.qno = s.query),
		want AS (
			SELECT amq.qno, x.id FROM amq, LATERAL (
				SELECT id FROM am WHERE ctid IN (SELECT t FROM %1$s) ORDER BY v <-> amq.q, id LIMIT %2$s) x)
		SELECT amq.qno, (SELECT count(*) FROM got WHERE got.qno = amq.qno),
		       (SELECT count(*) FROM want WHERE want.qno = amq.qno),
		       coalesce((SELECT bool_and(exact AND allowed AND ordered) FROM got WHERE got.qno = amq.qno), true),
		       (SELECT count(*) FROM got JOIN want USING (qno, id) WHERE got.qno = amq.qno) >=
		       0.9 * (SELECT count(*) FROM want WHERE want.qno = amq.qno)
		  FROM amq ORDER BY 1 $q$, allowed, k);
END
$$;

-- the issue's case: the 1,000 rows nearest to the first query allowed
-- (every allowed node measured), the 990 nearest of them deleted
CREATE TABLE al AS SELECT am.ctid t, id, v <-> (SELECT q FROM amq WHERE qno = 1) d FROM am ORDER BY 3, 2 LIMIT 1000;
DELETE FROM am WHERE id IN (SELECT id FROM al ORDER BY d, id LIMIT 990);
SELECT count(*) FROM cagra_search('am_idx', ARRAY[(SELECT q FROM amq WHERE qno = 1)], 10, ARRAY(SELECT t FROM al));
SELECT * FROM pg_temp.compare('al', 10);
-- fewer than k left: all of them
SELECT * FROM pg_temp.compare('al', 25);
SELECT * FROM pg_temp.compare('al', 5);

-- rows this transaction deleted are invisible to it: 5 of the 10 left
BEGIN;
DELETE FROM am WHERE id IN (SELECT id FROM al ORDER BY d, id LIMIT 5 OFFSET 990);
SELECT * FROM pg_temp.compare('al', 10);
ROLLBACK;

-- small work_mem: one query a part, a few allowed vectors measured at a time
SET work_mem = 64;
SELECT * FROM pg_temp.compare('al', 10);
RESET work_mem;

-- 15,000 allowed rows (a traversal), the 1,000 nearest to the second
-- query deleted
CREATE TABLE al2 AS SELECT am.ctid t, id, v <-> (SELECT q FROM amq WHERE qno = 2) d FROM am ORDER BY 3, 2 LIMIT 15000;
DELETE FROM am WHERE id IN (SELECT id FROM al2 ORDER BY d, id LIMIT 1000);
SELECT * FROM pg_temp.compare('al2', 10);
SET work_mem = 64;
SELECT * FROM pg_temp.compare('al2', 10);
RESET work_mem;

-- once vacuumed, the same
VACUUM am;
SELECT * FROM pg_temp.compare('al', 10);
SELECT * FROM pg_temp.compare('al2', 10);

DROP TABLE am, amq, al, al2;
