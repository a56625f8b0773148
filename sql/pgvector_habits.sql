-- What a pgvector user is likely to try on a cagra index, in a database
-- without pgvector: each gets a message that says what cagra takes instead.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS cagra;
RESET client_min_messages;
CREATE TABLE habits (id int, label text, embedding vector(3));
INSERT INTO habits VALUES (1, 'a', '[1,0,0]'), (2, 'b', '[0,1,0]'), (3, 'c', '[0,0,1]');

-- pgvector's hnsw parameters: the hint names graph_degree and intermediate_graph_degree
CREATE INDEX ON habits USING cagra (embedding) WITH (m = 16, ef_construction = 64);
CREATE INDEX ON habits USING cagra (embedding) WITH (graph_degree = 32, ef_construction = 64);
CREATE INDEX habits_cagra ON habits USING cagra (embedding);
ALTER INDEX habits_cagra SET (m = 16);
-- any other unknown parameter keeps PostgreSQL's own message
CREATE INDEX ON habits USING cagra (embedding) WITH (lists = 100);

-- a column cagra cannot index: the hint names the types it can
CREATE INDEX ON habits USING cagra (id);
CREATE INDEX ON habits USING cagra (label);
-- a named operator class of another type is left to PostgreSQL
CREATE INDEX ON habits USING cagra (id vector_l2_ops);
SELECT count(*) AS cagra_indexes FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = 'habits'::regclass;

-- pgvector's search settings do nothing here: a WARNING names cagra.itopk_size
SET hnsw.ef_search = 100;
SET ivfflat.probes = 10;
BEGIN;
SET LOCAL hnsw.ef_search = 100;
COMMIT;
RESET hnsw.ef_search;
-- other placeholders are PostgreSQL's business
SET myapp.setting = 'x';
SET cagra.itopk_size = 32;
RESET cagra.itopk_size;
DROP TABLE habits;
