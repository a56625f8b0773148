-- pgvector's habits where pgvector is installed (test/run-tests.sh skips
-- this file without pgvector): SET hnsw.ef_search stays pgvector's business
-- even before pgvector's library is loaded in the session, and the error for
-- a column cagra cannot index names both types it takes.
CREATE DATABASE regress_cagra_pgvector_settings;
\c regress_cagra_pgvector_settings
SET client_min_messages = warning;
CREATE EXTENSION vector;
CREATE EXTENSION cagra;
RESET client_min_messages;
\c regress_cagra_pgvector_settings
-- a new session: cagra loaded, pgvector not yet
LOAD 'cagra';
SELECT count(*) AS pgvector_settings_defined FROM pg_settings WHERE name LIKE 'hnsw.%';
SET hnsw.ef_search = 100;
SHOW hnsw.ef_search;
CREATE TABLE items (id int, embedding vector(3), half halfvec(3));
CREATE INDEX ON items USING cagra (id);
CREATE INDEX ON items USING cagra (embedding) WITH (m = 16);
CREATE INDEX ON items USING cagra (half);
\c contrib_regression
DROP DATABASE regress_cagra_pgvector_settings;
