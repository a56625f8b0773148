# test/t/022_concurrent_inserts.pl — 16 sessions insert into one cagra index
# side by side while others search, delete and vacuum; afterwards, and after
# an immediate stop in the middle of the same stream: every inserted row
# finds itself through the index, cagra_index_check is clean, the live count
# is the table's, and a streaming standby answers byte for byte as the
# primary does.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "max_connections = 40\n");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION cagra');
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;

my $dims = 16;
my $random_vector = 'array(SELECT random() FROM generate_series(1, ' . $dims . ') WHERE g > 0)::vector';
$primary->safe_psql('postgres', qq{
	SELECT setseed(0.45);
	CREATE TABLE items (id bigserial PRIMARY KEY, v vector($dims)) WITH (autovacuum_enabled = off);
	INSERT INTO items (v) SELECT $random_vector FROM generate_series(1, 2000) g;
	CREATE INDEX items_v ON items USING cagra (v vector_l2_ops)
	  WITH (graph_degree = 16, intermediate_graph_degree = 32);
});

my $dir = PostgreSQL::Test::Utils::tempdir;
my %scripts = (
	'insert.sql' => "INSERT INTO items (v) SELECT $random_vector FROM generate_series(1, 4) g;\n",
	'search.sql' => "SET enable_seqscan = off;\n"
	  . "SELECT id FROM items ORDER BY v <-> (SELECT $random_vector FROM (SELECT 1 AS g) s) LIMIT 10;\n",
	'delete.sql' => "DELETE FROM items WHERE id = (SELECT floor(random() * 2000)::bigint + 1);\n",
	'vacuum.sql' => "VACUUM items;\n",
);
for my $f (keys %scripts)
{
	open(my $fh, '>', "$dir/$f") or die;
	print $fh $scripts{$f};
	close $fh;
}

# 16 inserting sessions, 3 searching, 1 deleting and vacuuming, for `-t`
# transactions each or until stopped.
sub start_stream
{
	my ($node, $transactions) = @_;
	my @common = ('-n', '-h', $node->host, '-p', $node->port);
	my @benches;
	for my $run (
		[ '-c', '16', '-j', '4', '-t', $transactions, '-f', "$dir/insert.sql" ],
		[ '-c', '3', '-j', '1', '-T', '600', '-f', "$dir/search.sql" ],
		[ '-c', '1', '-j', '1', '-T', '600', '-f', "$dir/delete.sql\@20", '-f', "$dir/vacuum.sql\@1" ])
	{
		my ($out, $err) = ('', '');
		push @benches,
		  [ IPC::Run::start([ 'pgbench', @common, @$run, 'postgres' ], '>', \$out, '2>', \$err), \$out, \$err ];
	}
	return @benches;
}

# The checks after a stream: one row each, on the primary and the standby.
sub check_index
{
	my ($label) = @_;

	is($primary->safe_psql('postgres', "SELECT string_agg(p, '; ') FROM cagra_index_check('items_v') p"),
		'', "$label: index check clean");
	# INDEX_CLEANUP ON: PostgreSQL skips the index pass when few heap pages
	# hold dead rows, which would leave their nodes counted
	$primary->safe_psql('postgres', 'VACUUM (INDEX_CLEANUP ON) items');
	is( $primary->safe_psql('postgres',
			"SELECT live_nodes = (SELECT count(*) FROM items) FROM cagra_index_info('items_v')"),
		't', "$label: the live count is the table's");

	# every row inserted by the stream is found by its own vector, at
	# distance 0, through the index (an unreachable node never is; a wide
	# search, as the question is whether each node was linked, not the
	# recall of the default buffer on random churned data)
	my $lost = $primary->safe_psql('postgres', q{
		SET enable_seqscan = off; SET cagra.itopk_size = 512;
		SELECT count(*) FROM items i
		 WHERE i.id > 2000
		   AND (SELECT j.id FROM items j ORDER BY j.v <-> i.v LIMIT 1) IS DISTINCT FROM i.id});
	my $inserted = $primary->safe_psql('postgres', 'SELECT count(*) FROM items WHERE id > 2000');
	ok($inserted > 0, "$label: rows were inserted ($inserted)");
	is($lost, '0', "$label: every inserted row finds itself through the index");
	like(
		$primary->safe_psql('postgres', q{SET enable_seqscan = off;
			EXPLAIN (COSTS OFF) SELECT j.id FROM items j ORDER BY j.v <-> '[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]' LIMIT 1}),
		qr/Index Scan using items_v/, "$label: the lookup is an index scan");

	$primary->wait_for_catchup($standby);
	my $q = q{SET enable_seqscan = off;
		SELECT string_agg(x.found, ';' ORDER BY q.id) FROM items q CROSS JOIN LATERAL
		  (SELECT string_agg(j.id || ':' || (j.v <-> q.v), ',') AS found FROM
		     (SELECT id, v FROM items j ORDER BY j.v <-> q.v LIMIT 10) j) x
		 WHERE q.id % 50 = 3};
	my $on_primary = $primary->safe_psql('postgres', $q);
	ok($on_primary ne '', "$label: the primary answers");
	is($standby->safe_psql('postgres', $q), $on_primary, "$label: the standby answers byte for byte the same");
	is($standby->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v')"),
		'0', "$label: index check clean on the standby");
}

# --- a stream to its end ---------------------------------------------------------
my @benches = start_stream($primary, 60);

# inserts run side by side: two inserting sessions hold the writers' lock
# at once (an insert that held it exclusively would never share it)
my $together = 0;
for (1 .. 300)
{
	$together = $primary->safe_psql('postgres', q{
		SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		 WHERE l.locktype = 'page' AND l.relation = 'items_v'::regclass AND l.page = 0
		   AND l.granted AND a.query LIKE 'INSERT%'});
	last if $together >= 2;
}
ok($together >= 2, 'two inserts hold the writers\' lock at once');

$benches[0][0]->finish;
ok($benches[0][0]->result == 0, 'the inserting sessions succeeded') or diag ${ $benches[0][2] };
like(${ $benches[0][1] }, qr{actually processed: 960/960}, 'every insert transaction ran');
# the searching and deleting sessions stopped: TERM, as a run started in
# the background ignores INT (and pgbench would then run its 600 s)
for my $b (@benches[ 1 .. 2 ])
{
	$b->[0]->signal('TERM');
	$b->[0]->finish;
}
check_index('after the stream');

# --- an immediate stop in the middle of a stream --------------------------------
my $before = $primary->safe_psql('postgres', "SELECT nodes FROM cagra_index_info('items_v')");
@benches = start_stream($primary, 100000);
$primary->poll_query_until('postgres', "SELECT nodes > $before + 600 FROM cagra_index_info('items_v')")
  or die 'inserts did not start';
$primary->stop('immediate');
$_->[0]->finish for @benches;
$primary->start;
check_index('after a crash mid-stream');

# writable after recovery
$primary->safe_psql('postgres', "INSERT INTO items (v) SELECT $random_vector FROM generate_series(1, 50) g");
is($primary->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v')"),
	'0', 'index check clean after more inserts');

$standby->stop;
$primary->stop;
done_testing();
