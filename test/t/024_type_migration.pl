# test/t/024_type_migration.pl — the ways between cagra's own vector and
# halfvec types and pgvector's, as docs/from-pgvector.md gives them, with data:
#
#   1. cagra first, pgvector later: CREATE EXTENSION vector fails while cagra
#      owns the types; the columns go through text, cagra is installed again
#      after pgvector, the columns come back on pgvector's types and the cagra
#      indexes are rebuilt.
#   2. pgvector dropped while cagra stays: DROP EXTENSION vector fails while
#      cagra depends on it; the same steps the other way bring the columns to
#      cagra's own types.
#
# After each: every value unchanged (compared as text), the types owned by the
# right extension, the indexes answer as before and check clean.  Skipped
# without pgvector installed (.ci/install-deps.sh builds it).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('typemigration');
$node->init;
$node->start;
plan skip_all => 'pgvector is not installed'
  unless $node->safe_psql('postgres', "SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'") eq '1';

my $db = 'postgres';
sub sql { return $node->safe_psql($db, $_[0]); }

# Every row's values as text, in one digest.
my $digest_query = q{SELECT md5(string_agg(id || ' ' || v::text || ' ' || h::text, ',' ORDER BY id)) FROM items};
# The ten nearest of three rows, by each index (seq scans off).
my $nearest_query = q{SET enable_seqscan = off;
	SELECT string_agg(r, ' ' ORDER BY q) FROM (
	  SELECT q, (SELECT string_agg(id::text, ',' ORDER BY v <-> (SELECT v FROM items WHERE id = q), id)
	               FROM (SELECT id, v FROM items ORDER BY v <-> (SELECT v FROM items WHERE id = q) LIMIT 10) s)
	           || '/' ||
	            (SELECT string_agg(id::text, ',' ORDER BY h <=> (SELECT h FROM items WHERE id = q), id)
	               FROM (SELECT id, h FROM items ORDER BY h <=> (SELECT h FROM items WHERE id = q) LIMIT 10) s) AS r
	    FROM unnest(ARRAY[7, 300, 901]) q) t};
my $plan_query = q{SET enable_seqscan = off;
	EXPLAIN (COSTS OFF) SELECT id FROM items ORDER BY h <=> (SELECT h FROM items WHERE id = 7) LIMIT 10};
my $owners_query = q{SELECT string_agg(t.typname || ':' || e.extname, ',' ORDER BY t.typname)
	FROM pg_type t JOIN pg_depend d ON d.classid = 'pg_type'::regclass AND d.objid = t.oid AND d.deptype = 'e'
	JOIN pg_extension e ON e.oid = d.refobjid WHERE t.typname IN ('vector', 'halfvec')};

sub check_state
{
	my ($what, $owner, $digest, $nearest) = @_;
	is(sql($owners_query), "halfvec:$owner,vector:$owner", "$what: vector and halfvec are $owner\'s");
	is(sql('SELECT count(*) FROM items'), '1000', "$what: every row");
	is(sql($digest_query), $digest, "$what: every value unchanged");
	is(sql($nearest_query), $nearest, "$what: the rebuilt indexes answer as before");
	like(sql($plan_query), qr/Index Scan using items_h on items/, "$what: the halfvec index is used");
	is(sql(q{SELECT count(*) FROM cagra_index_check('items_v')}) . sql(q{SELECT count(*) FROM cagra_index_check('items_h')}),
		'00', "$what: both indexes check clean");
}

# --- cagra alone: its own vector and halfvec --------------------------------
sql(q{
	CREATE EXTENSION cagra;
	CREATE TABLE items (id int PRIMARY KEY, v vector(16), h halfvec(16));
	INSERT INTO items SELECT i, a::vector, a::halfvec
	  FROM (SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) + 1e-3 * i FROM generate_series(1, 16) j) AS a
	          FROM generate_series(1, 1000) i) s;
	CREATE INDEX items_v ON items USING cagra (v);
	CREATE INDEX items_h ON items USING cagra (h halfvec_cosine_ops);
});
my $digest = sql($digest_query);
my $nearest = sql($nearest_query);
like($nearest, qr/^7,.*\/7,/, 'the indexes find each row itself first');
is(sql($owners_query), 'halfvec:cagra,vector:cagra', 'cagra alone owns vector and halfvec');

# --- 1. cagra first, then pgvector --------------------------------------------
my ($rc, $out, $err) = $node->psql($db, 'CREATE EXTENSION vector');
isnt($rc, 0, 'CREATE EXTENSION vector fails while cagra owns the types');
like($err, qr/type "vector" already exists/, '... as the docs say');

sql(q{
	BEGIN;
	DROP INDEX items_v, items_h;
	ALTER TABLE items ALTER COLUMN v TYPE text, ALTER COLUMN h TYPE text;
	DROP EXTENSION cagra;
	CREATE EXTENSION vector;
	CREATE EXTENSION cagra;
	ALTER TABLE items ALTER COLUMN v TYPE vector(16) USING v::vector(16),
	                  ALTER COLUMN h TYPE halfvec(16) USING h::halfvec(16);
	CREATE INDEX items_v ON items USING cagra (v);
	CREATE INDEX items_h ON items USING cagra (h halfvec_cosine_ops);
	COMMIT;
});
check_state('cagra first, then pgvector', 'vector', $digest, $nearest);
sql('CREATE INDEX items_hnsw ON items USING hnsw (v vector_l2_ops)');
is(sql(q{SET enable_seqscan = off; SET enable_indexscan = on; DROP INDEX items_v;
	SELECT count(*) FROM (SELECT id FROM items ORDER BY v <-> (SELECT v FROM items WHERE id = 7) LIMIT 5) s}), '5',
	'pgvector\'s own index works on the moved column');
sql('CREATE INDEX items_v ON items USING cagra (v)');

# --- 2. pgvector dropped, cagra stays ---------------------------------------------
($rc, $out, $err) = $node->psql($db, 'DROP EXTENSION vector');
isnt($rc, 0, 'DROP EXTENSION vector fails while cagra and the columns use its types');
like($err, qr/cannot drop extension vector because other objects depend on it/, '... with PostgreSQL\'s message');

sql(q{
	BEGIN;
	DROP INDEX items_v, items_h, items_hnsw;
	ALTER TABLE items ALTER COLUMN v TYPE text, ALTER COLUMN h TYPE text;
	DROP EXTENSION cagra;
	DROP EXTENSION vector;
	CREATE EXTENSION cagra;
	ALTER TABLE items ALTER COLUMN v TYPE vector(16) USING v::vector(16),
	                  ALTER COLUMN h TYPE halfvec(16) USING h::halfvec(16);
	CREATE INDEX items_v ON items USING cagra (v);
	CREATE INDEX items_h ON items USING cagra (h halfvec_cosine_ops);
	COMMIT;
});
check_state('pgvector dropped, cagra stays', 'cagra', $digest, $nearest);
is(sql(q{SELECT count(*) FROM pg_extension WHERE extname = 'vector'}), '0', 'pgvector is gone');

$node->stop;
done_testing();
