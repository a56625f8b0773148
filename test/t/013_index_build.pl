# test/t/013_index_build.pl — a long cagra build reports its phases in
# pg_stat_progress_create_index, and a cancel request stops it promptly
# (the build threads are stopped and joined) leaving no index behind; a
# crash during a build leaves no index either, and a crash right after one
# (its pages written around shared buffers, fsynced, and WAL-logged since the
# last checkpoint) leaves one that replays clean, float32 and float16 alike.
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

# A crash (immediate stop) while the graph is being built: after recovery
# there is no index, and the table takes a new build.
$node->safe_psql('postgres', q{
	INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 64) d
	                              WHERE i > 0)::vector
	  FROM generate_series(3001, 60000) i;
});
($in, $out, $err) = ('', '', '');
$build = IPC::Run::start(
	[
		'psql', '-X', '-d', $node->connstr('postgres'), '-c',
		"SET maintenance_work_mem = '512MB'; CREATE INDEX items_crash ON items USING cagra (v vector_l2_ops)"
	],
	'<', \$in, '>', \$out, '2>', \$err);
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) > 0 FROM pg_stat_progress_create_index
		 WHERE phase IN ('building index: building kNN graph', 'building index: optimizing graph')}),
	'a second build is under way');
$node->stop('immediate');
$build->finish;
$node->start;
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_class WHERE relname = 'items_crash'"),
	'0', 'a crash during the build leaves no index');

# Builds that commit, then a crash before any checkpoint: recovery replays
# their pages from WAL (the pages were written to the file directly).
$node->safe_psql('postgres', q{
	DELETE FROM items WHERE id > 20000;
	CHECKPOINT;
	CREATE INDEX items_f32 ON items USING cagra (v vector_l2_ops) WITH (storage = float32);
	CREATE INDEX items_f16 ON items USING cagra (v vector_l2_ops) WITH (storage = float16);
});
my $probe = q{SET enable_seqscan = off; SET cagra.device = cpu;
	SELECT id FROM items ORDER BY v <-> (SELECT v FROM items WHERE id = 1234) LIMIT 1};
my $before = $node->safe_psql('postgres',
	"SELECT string_agg(pages::text || ':' || nodes, ',') FROM (VALUES ('items_v'), ('items_f32'), ('items_f16')) c(r),
	   cagra_index_info(c.r::regclass)");
$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres',
	"SELECT string_agg(pages::text || ':' || nodes, ',') FROM (VALUES ('items_v'), ('items_f32'), ('items_f16')) c(r),
	   cagra_index_info(c.r::regclass)"), $before, 'after recovery the indexes have their pages and nodes');
for my $idx ('items_f32', 'items_f16')
{
	is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('$idx')"), '0',
		"$idx checks clean after recovery");
}
$node->safe_psql('postgres', 'DROP INDEX items_v, items_f32');
is($node->safe_psql('postgres', $probe), '1234', 'the float16 index answers after recovery');

$node->stop;
done_testing();
