# test/t/013_index_build.pl — a long cagra build reports its phases in
# pg_stat_progress_create_index, and a cancel request stops it promptly
# (the build threads are stopped and joined) leaving no index behind.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('build');
$node->init;
$node->append_conf('postgresql.conf', "max_parallel_maintenance_workers = 1\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION cagra;
	SELECT setseed(0.5);
	CREATE TABLE items (id int, v vector(64));
	INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 64) d
	                              WHERE i > 0)::vector
	  FROM generate_series(1, 60000) i;
});

# Start a build and watch it from another session.
my ($in, $out, $err) = ('', '', '');
my $build = IPC::Run::start(
	[
		'psql', '-X', '-d', $node->connstr('postgres'), '-c',
		"SET maintenance_work_mem = '512MB'; CREATE INDEX items_v ON items USING cagra (v vector_l2_ops)"
	],
	'<', \$in, '>', \$out, '2>', \$err);

ok( $node->poll_query_until('postgres', q{
		SELECT count(*) > 0 FROM pg_stat_progress_create_index
		 WHERE phase IN ('building index: building kNN graph', 'building index: optimizing graph')
		   AND tuples_total > 0}),
	'progress view shows a graph phase with a tuple total');

my $pid = $node->safe_psql('postgres', 'SELECT pid FROM pg_stat_progress_create_index');
my $t0 = time;
$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
$build->finish;
ok(time - $t0 < 20, 'cancel took effect promptly');
like($err, qr/canceling statement due to user request/, 'build canceled');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_class WHERE relname = 'items_v'"),
	'0', 'no index left behind');

# The same session keeps working, and a small build succeeds.
$node->safe_psql('postgres', q{
	DELETE FROM items WHERE id > 3000;
	CREATE INDEX items_v ON items USING cagra (v vector_l2_ops);
});
is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v')"),
	'0', 'index built after the canceled one is clean');

$node->stop;
done_testing();
