# test/t/001_extension.pl — the extension in a real cluster: CREATE EXTENSION,
# vectors stored, read back across a restart and a crash, dumped and restored,
# and DROP EXTENSION.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->start;

$node->safe_psql('postgres', 'CREATE EXTENSION cagra');
is($node->safe_psql('postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'cagra'"),
	'0.1.0', 'extension installed');

$node->safe_psql('postgres', q{
	CREATE TABLE items (id int PRIMARY KEY, v vector(3));
	INSERT INTO items SELECT i, ARRAY[i, i * 0.5, -i]::vector
	  FROM generate_series(1, 1000) i;
});

# A clean restart and an immediate stop (crash recovery) keep every row.
$node->restart;
is($node->safe_psql('postgres', "SELECT v FROM items WHERE id = 3"),
	'[3,1.5,-3]', 'vector read back after restart');
$node->safe_psql('postgres', "INSERT INTO items VALUES (1001, '[0.25,1e-3,7]')");
$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres', "SELECT count(*), sum(vector_norm(v))::int FROM items"),
	'1001|750757', 'all rows after crash recovery');
is($node->safe_psql('postgres', "SELECT v FROM items WHERE id = 1001"),
	'[0.25,0.001,7]', 'last row after crash recovery');

# Errors reach the client with their message.
my ($ret, $stdout, $stderr) =
  $node->psql('postgres', "INSERT INTO items VALUES (2000, '[1,2]')");
isnt($ret, 0, 'wrong dimensions rejected');
like($stderr, qr/expected 3 dimensions, not 2/, 'dimension error message');

# pg_dump writes CREATE EXTENSION and the vectors as text; a restore into
# another database reads them back unchanged.
my $dump = $node->basedir . '/dump.sql';
$node->command_ok([ 'pg_dump', '-d', $node->connstr('postgres'), '-f', $dump ], 'pg_dump');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('restored'),
		'-f', $dump ], 'restore');
is($node->safe_psql('restored', "SELECT count(*) FROM items"), '1001', 'restored rows');
is($node->safe_psql('restored', "SELECT md5(string_agg(v::text, ';' ORDER BY id)) FROM items"),
	$node->safe_psql('postgres', "SELECT md5(string_agg(v::text, ';' ORDER BY id)) FROM items"),
	'restored vectors equal the originals');

$node->safe_psql('postgres', 'DROP TABLE items; DROP EXTENSION cagra');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_type WHERE typname = 'vector'"),
	'0', 'DROP EXTENSION removes the type');

$node->stop;
done_testing();
