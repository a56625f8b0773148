-- cagra_search(index, queries, k, allowed tid[]): only the rows `allowed`
-- names come back (their nodes are the filter), min(k, matching) of them
-- per query, nearest first; exact over few allowed rows, a filtered
-- traversal widened for the pass rate over many (cagra::plan_filtered_search;
-- here in the backend: pg_regress runs without the worker, which
-- test/t/107_worker_filtered.pl covers); a ctid that a HOT update moved
-- still counts.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;

CREATE TABLE ft (id int, tenant int, note text, v vector(4)) WITH (fillfactor = 50);
INSERT INTO ft SELECT i, i % 50, 'n', ARRAY[sin(i * 0.37), cos(i * 0.11), sin(i * 0.05 + 1), cos(i * 0.7)]::vector
  FROM generate_series(1, 30000) i;
CREATE INDEX ft_v ON ft USING cagra (v) WITH (graph_degree = 16, intermediate_graph_degree = 32);
CREATE TABLE fq AS SELECT row_number() OVER (ORDER BY id) AS qno, v AS q FROM ft WHERE id % 3001 = 5;

-- For the rows `filter` selects: per query, whether cagra_search's rows all
-- pass it, how many there are, and whether recall@k against the exact
-- filtered top k reaches 0.95 (a bound, not the value: with the worker on
-- a GPU, test/device-sql.sh runs this file too).
CREATE FUNCTION pg_temp.check(filter text, k int)
RETURNS TABLE (queries bigint, rows_per_query numeric, all_pass boolean, recall_095 boolean)
LANGUAGE plpgsql AS $$
BEGIN
	RETURN QUERY EXECUTE format($q$
		WITH got AS (
			SELECT s.query, t.id FROM cagra_search('ft_v', ARRAY(SELECT q FROM fq ORDER BY qno), %2$s,
			                                       ARRAY(SELECT ctid FROM ft WHERE %1$s)) s
			  JOIN ft t ON t.ctid = s.ctid),
		want AS (
			SELECT fq.qno AS query, x.id FROM fq, LATERAL (
				SELECT id FROM ft WHERE %1$s ORDER BY v <-> fq.q LIMIT %2$s) x)
		SELECT count(DISTINCT g.query), round(count(*)::numeric / count(DISTINCT g.query), 2),
		       bool_and(g.id IN (SELECT id FROM ft WHERE %1$s)),
		       (SELECT count(*) FROM got JOIN want USING (query, id))::numeric /
		       (SELECT count(*) FROM want) >= 0.95
		  FROM got g $q$, filter, k);
END
$$;
SET enable_indexscan = off;
-- 2% of the rows (600): exact over them
SELECT * FROM pg_temp.check('tenant = 7', 10);
-- one matching row: one row per query
SELECT * FROM pg_temp.check('id = 12345', 10);
-- 27,000 rows allowed: a filtered traversal
SELECT * FROM pg_temp.check('tenant < 45', 10);
-- 9,000 (30%): more than a traversal of 214 candidates measures (at most
-- 7,360 distances), so that traversal
SELECT * FROM pg_temp.check('tenant < 15', 10);
RESET enable_indexscan;

-- no allowed row, or only NULLs, or TIDs of no row: no rows
SELECT count(*) FROM cagra_search('ft_v', ARRAY(SELECT q FROM fq), 5, '{}'::tid[]);
SELECT count(*) FROM cagra_search('ft_v', ARRAY(SELECT q FROM fq), 5, ARRAY[NULL]::tid[]);
SELECT count(*) FROM cagra_search('ft_v', ARRAY(SELECT q FROM fq), 5, '{"(0,0)","(999999,1)","(1,65535)"}'::tid[]);
-- a row moved by a HOT update is still found through its new ctid
-- (a HOT update: no new index entry, the index keeps the chain's root)
SELECT ctid AS old_ctid, (SELECT nodes FROM cagra_index_info('ft_v')) AS old_nodes FROM ft WHERE id = 4242 \gset
UPDATE ft SET note = 'updated' WHERE id = 4242;
SELECT ctid <> :'old_ctid' AS moved, (SELECT nodes FROM cagra_index_info('ft_v')) = :old_nodes AS hot
  FROM ft WHERE id = 4242;
SELECT t.id FROM cagra_search('ft_v', ARRAY(SELECT v FROM ft WHERE id = 4242), 1,
                              ARRAY(SELECT ctid FROM ft WHERE id = 4242)) s JOIN ft t ON t.ctid = s.ctid;
-- the same checks as the three-argument form: row-level security refuses
CREATE ROLE ft_reader;
GRANT SELECT ON ft, fq TO ft_reader;
ALTER TABLE ft ENABLE ROW LEVEL SECURITY;
CREATE POLICY ft_some ON ft FOR SELECT TO ft_reader USING (tenant = 1);
SET ROLE ft_reader;
SELECT count(*) FROM cagra_search('ft_v', ARRAY(SELECT q FROM fq), 5, ARRAY(SELECT ctid FROM ft));
RESET ROLE;
DROP TABLE ft, fq;
DROP ROLE ft_reader;
