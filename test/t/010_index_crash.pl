# test/t/010_index_crash.pl — a cagra index survives an immediate stop in the
# middle of concurrent inserts, deletes and vacuums, and one in the middle of
# VACUUM's index pass: after crash recovery cagra_index_check is clean (the
# live count included), the index answers, and it keeps taking inserts.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('crash');
$node->init;
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION cagra;
	SELECT setseed(0.3);
	CREATE TABLE items (id bigserial PRIMARY KEY, v vector(8));
	INSERT INTO items (v) SELECT ARRAY[random(), random(), random(), random(),
	                                   random(), random(), random(), random()]::vector
	  FROM generate_series(1, 3000);
	CREATE INDEX items_v ON items USING cagra (v vector_l2_ops)
	  WITH (graph_degree = 16, intermediate_graph_degree = 32);
});

my $dir = PostgreSQL::Test::Utils::tempdir;
my %scripts = (
	'insert.sql' => "INSERT INTO items (v) SELECT ARRAY[random(), random(), random(), random(),"
	  . " random(), random(), random(), random()]::vector FROM generate_series(1, 5);\n",
	'delete.sql' => "DELETE FROM items WHERE id = (SELECT (random() * max(id))::bigint FROM items);\n",
	'vacuum.sql' => "VACUUM items;\n",
);
for my $f (keys %scripts)
{
	open(my $fh, '>', "$dir/$f") or die;
	print $fh $scripts{$f};
	close $fh;
}

# Writers in the background, then an immediate stop while they run.
my ($out, $err) = ('', '');
my $bench = IPC::Run::start(
	[
		'pgbench', '-n', '-c', '4', '-j', '2', '-T', '60',
		'-h', $node->host, '-p', $node->port,
		'-f', "$dir/insert.sql\@10", '-f', "$dir/delete.sql\@3",
		'-f', "$dir/vacuum.sql\@1", 'postgres'
	],
	'>', \$out, '2>', \$err);
$node->poll_query_until('postgres',
	"SELECT nodes > 4000 FROM cagra_index_info('items_v')")
  or die 'inserts did not start';
$node->stop('immediate');
$bench->finish;

$node->start;
is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v')"),
	'0', 'index check clean after crash recovery');
ok( $node->safe_psql('postgres',
		"SELECT live_nodes >= (SELECT count(*) FROM items) FROM cagra_index_info('items_v')") eq 't',
	'every row is in the index');

# The index still answers with the rows a sequential scan finds.
my $q = "SELECT array_agg(id ORDER BY id) FROM (SELECT id FROM items"
  . " ORDER BY v <-> '[0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.5]' LIMIT 5) s";
my $exact = $node->safe_psql('postgres', "SET enable_indexscan = off; $q");
# (a wide search: the question is whether the graph is whole after
# recovery, not the recall of the default itopk on random churned data)
my $found = $node->safe_psql('postgres', "SET enable_seqscan = off; SET cagra.itopk_size = 256; $q");
is($found, $exact, 'index scan after recovery finds the exact top 5');

# Writable after recovery.
$node->safe_psql('postgres', q{
	INSERT INTO items (v) VALUES ('[0.5,0.5,0.5,0.5,0.5,0.5,0.5,0.51]');
	DELETE FROM items WHERE id % 7 = 0;
	VACUUM items;
});
is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v')"),
	'0', 'index check clean after more writes');
is( $node->safe_psql('postgres',
		"SELECT live_nodes = (SELECT count(*) FROM items) FROM cagra_index_info('items_v')"),
	't', 'live count matches the table after vacuum');

# An immediate stop in the middle of VACUUM's index pass (slowed down by
# the cost delay, which the pass honours page by page): the deletions that
# reached the WAL and the live count stay consistent.
$node->safe_psql('postgres', q{
	CREATE TABLE churn (id int PRIMARY KEY, v vector(8)) WITH (autovacuum_enabled = off);
	INSERT INTO churn SELECT i, ARRAY[sin(i), cos(i), sin(2 * i), cos(3 * i), sin(5 * i),
	                                  cos(7 * i), sin(11 * i), cos(13 * i)]::vector
	  FROM generate_series(1, 20000) i;
	CREATE INDEX churn_v ON churn USING cagra (v) WITH (graph_degree = 16, intermediate_graph_degree = 32);
	DELETE FROM churn WHERE id % 2 = 0;
});
my ($vout, $verr) = ('', '');
my $vacuum = IPC::Run::start(
	[ 'psql', '-X', '-d', $node->connstr('postgres'), '-c', 'SET vacuum_cost_delay = 100',
	  '-c', 'SET vacuum_cost_limit = 1', '-c', 'VACUUM churn' ],
	'>', \$vout, '2>', \$verr);
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_progress_vacuum WHERE phase = 'vacuuming indexes'")
  or die 'vacuum never reached the index pass';
# long enough into the pass that some pages' deletions are in the WAL
$node->poll_query_until('postgres', "SELECT live_nodes < 19500 FROM cagra_index_info('churn_v')")
  or die 'the index pass marked nothing';
$node->safe_psql('postgres', 'CREATE TABLE wal_flushed ()');    # its commit flushes the WAL so far
$node->stop('immediate');
$vacuum->finish;
$node->start;
my ($nodes, $live) = split /\|/,
  $node->safe_psql('postgres', "SELECT nodes, live_nodes FROM cagra_index_info('churn_v')");
ok($live > 10000 && $live < 20000, "the crash came mid-pass ($live of $nodes nodes live)");
is($node->safe_psql('postgres', "SELECT string_agg(p, '; ') FROM cagra_index_check('churn_v') p"),
	'', 'index check clean (live count included) after a crash during the index pass');
$node->safe_psql('postgres', 'VACUUM churn');
is($node->safe_psql('postgres', "SELECT live_nodes FROM cagra_index_info('churn_v')"), '10000',
	'the next VACUUM completes the pass');

$node->stop;
done_testing();
