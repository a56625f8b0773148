# test/t/016_pgvector_dump.pl — pg_dump and restore with the real pgvector:
# a database with pgvector and cagra (a vector column, an HNSW and a cagra
# index on it, a halfvec column with a cagra index) restores into a fresh
# database with the same rows and working indexes; one with cagra alone
# (cagra's own type) restores as well.  Skipped without pgvector installed
# (.ci/install-deps.sh builds it).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('pgvdump');
$node->init;
$node->start;
plan skip_all => 'pgvector is not installed'
  unless $node->safe_psql('postgres', "SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'") eq '1';

my $query = q{SET enable_seqscan = off;
	SELECT string_agg(id::text, ',') FROM (SELECT id FROM items ORDER BY v <-> (SELECT v FROM items WHERE id = 42) LIMIT 3) s};
my $hquery = q{SET enable_seqscan = off;
	SELECT string_agg(id::text, ',') FROM (SELECT id FROM items ORDER BY h <-> (SELECT h FROM items WHERE id = 42) LIMIT 3) s};

sub fill
{
	my ($db, $with_half) = @_;
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, ($with_half ? 'CREATE EXTENSION vector; ' : '') . q{
		CREATE EXTENSION cagra;
		CREATE TABLE items (id int PRIMARY KEY, v vector(16));
		INSERT INTO items SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) FROM generate_series(1, 16) j)::vector
		  FROM generate_series(1, 1000) i;
		CREATE INDEX items_cagra ON items USING cagra (v);
	});
	$node->safe_psql($db, q{
		ALTER TABLE items ADD COLUMN h halfvec(16);
		UPDATE items SET h = v::halfvec;
		CREATE INDEX items_hnsw ON items USING hnsw (v vector_l2_ops);
		CREATE INDEX items_h_cagra ON items USING cagra (h halfvec_l2_ops);
	}) if $with_half;
}

sub dump_and_restore
{
	my ($from, $to) = @_;
	my $file = $node->basedir . "/$from.dump";
	$node->command_ok([ 'pg_dump', '-Fc', '-f', $file, '-d', $node->connstr($from) ], "pg_dump of $from");
	$node->safe_psql('postgres', "CREATE DATABASE $to");
	$node->command_ok([ 'pg_restore', '--exit-on-error', '-d', $node->connstr($to), $file ],
		"pg_restore into $to");
}

# pgvector and cagra together
fill('with_pgvector', 1);
my $before = $node->safe_psql('with_pgvector', $query);
my $hbefore = $node->safe_psql('with_pgvector', $hquery);
like($before, qr/^42,/, 'the cagra index finds the row itself first');
dump_and_restore('with_pgvector', 'with_pgvector_restored');
is($node->safe_psql('with_pgvector_restored', 'SELECT count(*) FROM items'), '1000', 'every row restored');
is($node->safe_psql('with_pgvector_restored', q{SELECT string_agg(extname, ',' ORDER BY extname) FROM pg_extension
	WHERE extname IN ('vector', 'cagra')}), 'cagra,vector', 'both extensions restored');
is($node->safe_psql('with_pgvector_restored', q{SELECT string_agg(c.relname || ':' || a.amname, ',' ORDER BY c.relname)
	FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
	WHERE i.indrelid = 'items'::regclass AND a.amname <> 'btree'}),
	'items_cagra:cagra,items_h_cagra:cagra,items_hnsw:hnsw', 'the indexes restored');
$node->safe_psql('with_pgvector_restored', 'DROP INDEX items_hnsw');
is($node->safe_psql('with_pgvector_restored', $query), $before, 'the restored cagra index answers as before');
is($node->safe_psql('with_pgvector_restored', $hquery), $hbefore, 'and the halfvec one');
is($node->safe_psql('with_pgvector_restored', "SELECT count(*) FROM cagra_index_check('items_cagra')"), '0',
	'the restored index checks clean');

# cagra alone: its own vector type travels with it
fill('alone', 0);
$before = $node->safe_psql('alone', $query);
dump_and_restore('alone', 'alone_restored');
is($node->safe_psql('alone_restored', q{SELECT count(*) FROM pg_extension WHERE extname = 'vector'}), '0',
	'no pgvector in the restored copy');
is($node->safe_psql('alone_restored', $query), $before, 'the restored index of cagra alone answers as before');

$node->stop;
done_testing();
