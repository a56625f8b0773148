-- The inner-product graph is an L2 graph over vectors augmented with
-- sqrt(M^2 - |x|^2) (docs/index.md): in one and two dimensions, where
-- inner product's own nearest neighbours are all the largest values, a scan
-- still reaches every matching row in order.  Each plan's answer is checked
-- against the exact one (a scan of every row and a sort), for a filter the
-- graph search cannot see, after inserts of vectors longer than every built
-- one, and after deletes and VACUUM's repair.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

-- 3,000 distinct values in [-15, 15]; tag: 1 row in 25
CREATE TABLE ip1 (id int, tag int, v vector(1)) WITH (autovacuum_enabled = off);
INSERT INTO ip1 SELECT i, i % 25, ARRAY[(i * 7919 % 3001) / 100.0 - 15]::vector FROM generate_series(1, 3000) i;
-- norms 0.1 to 10 at golden-angle directions
CREATE TABLE ip2 (id int, tag int, v vector(2)) WITH (autovacuum_enabled = off);
INSERT INTO ip2 SELECT i, i % 25, ARRAY[r * cos(i * 2.39996), r * sin(i * 2.39996)]::vector
  FROM (SELECT i, 0.1 + (i * 7919 % 3001) / 303.0 AS r FROM generate_series(1, 3000) i) s;
CREATE INDEX ip1_v ON ip1 USING cagra (v vector_ip_ops) WITH (graph_degree = 16, intermediate_graph_degree = 32);
CREATE INDEX ip2_v ON ip2 USING cagra (v vector_ip_ops) WITH (graph_degree = 16, intermediate_graph_degree = 32);

-- For each of 8 query vectors: whether the plan gave as many rows as the
-- exact answer (min(k, matching rows)), in nondecreasing distance, and the
-- share of the exact answer's rows among them.
CREATE FUNCTION pg_temp.against_exact(tab text, filter text, k int, OUT queries int, OUT plan text,
									  OUT same_count int, OUT in_order int, OUT found_over_95pct int)
LANGUAGE plpgsql AS $$
DECLARE
	q text;
	got int[];
	want int[];
	ordered boolean;
	line text;
	qv text;
BEGIN
	queries := 0; same_count := 0; in_order := 0; found_over_95pct := 0; plan := 'other';
	FOR qv IN SELECT CASE WHEN tab = 'ip1' THEN format('[%s]', round((i - 4.5)::numeric / 2, 2))
						  ELSE format('[%s,%s]', round(cos(i)::numeric, 3), round(sin(i)::numeric, 3)) END
				FROM generate_series(1, 8) i LOOP
		q := format('SELECT id, v <#> %L AS d FROM %I WHERE %s ORDER BY v <#> %L LIMIT %s', qv, tab, filter, qv, k);
		IF queries = 0 THEN
			FOR line IN EXECUTE 'EXPLAIN (COSTS OFF) ' || q LOOP
				IF line LIKE '%Index Scan using ' || tab || '_v%' THEN plan := 'index scan'; END IF;
			END LOOP;
		END IF;
		EXECUTE format('SELECT array_agg(id ORDER BY n), coalesce(bool_and(d >= prev), true) '
					   'FROM (SELECT id, d, n, lag(d) OVER (ORDER BY n) AS prev '
					   'FROM (SELECT id, d, row_number() OVER () AS n FROM (%s) r) s) t', q) INTO got, ordered;
		EXECUTE format('SELECT array_agg(id) FROM (SELECT id FROM %I WHERE %s ORDER BY (v <#> %L) + 0 LIMIT %s) s',
					   tab, filter, qv, k) INTO want;
		queries := queries + 1;
		same_count := same_count + (coalesce(cardinality(got), 0) = coalesce(cardinality(want), 0))::int;
		in_order := in_order + ordered::int;
		found_over_95pct := found_over_95pct +
			((SELECT count(*) FROM unnest(got) g WHERE g = ANY (want)) >= 0.95 * coalesce(cardinality(want), 0))::int;
	END LOOP;
END
$$;

SET enable_seqscan = off;
-- a filter the graph search cannot see: the scan continues until 40 pass
SELECT * FROM pg_temp.against_exact('ip1', 'tag = 3', 40);
SELECT * FROM pg_temp.against_exact('ip2', 'tag = 3', 40);
-- more rows than the search buffer holds
SELECT * FROM pg_temp.against_exact('ip1', 'true', 300);
SELECT * FROM pg_temp.against_exact('ip2', 'true', 300);

-- inserts of vectors up to twice as long as every built one (beyond M)
INSERT INTO ip1 SELECT i, i % 25, ARRAY[(i * 7919 % 3001) / 50.0 - 30]::vector FROM generate_series(3001, 4500) i;
INSERT INTO ip2 SELECT i, i % 25, ARRAY[r * cos(i * 2.39996), r * sin(i * 2.39996)]::vector
  FROM (SELECT i, 0.2 + (i * 7919 % 3001) / 151.0 AS r FROM generate_series(3001, 4500) i) s;
SELECT * FROM pg_temp.against_exact('ip1', 'tag = 3', 40);
SELECT * FROM pg_temp.against_exact('ip2', 'tag = 3', 40);

-- deletes and the repair of the rows that pointed at them
DELETE FROM ip1 WHERE id % 3 = 0;
DELETE FROM ip2 WHERE id % 3 = 0;
VACUUM ip1;
VACUUM ip2;
SELECT * FROM pg_temp.against_exact('ip1', 'tag = 3', 40);
SELECT * FROM pg_temp.against_exact('ip2', 'tag = 3', 40);
RESET enable_seqscan;

-- 16,000 dimensions, the most an index takes: the graph is built over 16,001
CREATE TABLE ip_wide (id int, v vector(16000));
INSERT INTO ip_wide SELECT i, array_fill(i::real, ARRAY[16000])::vector FROM generate_series(1, 40) i;
CREATE INDEX ip_wide_v ON ip_wide USING cagra (v vector_ip_ops);
SET enable_seqscan = off;
SELECT id FROM ip_wide ORDER BY v <#> array_fill(1::real, ARRAY[16000])::vector LIMIT 3;
RESET enable_seqscan;

-- components whose squares overflow a float sum: the largest norm, which
-- the meta page keeps, stays finite
CREATE TABLE ip_huge (id int, v vector(4));
INSERT INTO ip_huge SELECT i, ARRAY[i * 1e17, 1e19, 1e19, 1e19]::vector FROM generate_series(1, 40) i;
CREATE INDEX ip_huge_v ON ip_huge USING cagra (v vector_ip_ops);
INSERT INTO ip_huge VALUES (41, '[5e18,1e19,1e19,1e19]');
SET enable_seqscan = off;
SELECT id FROM ip_huge ORDER BY v <#> '[1,0,0,0]' LIMIT 3;
RESET enable_seqscan;

DROP TABLE ip1, ip2, ip_wide, ip_huge;
