# test/t/104_worker_two_gpus.pl — the worker with two or more devices (run
# by test/device-sql.sh on a machine with several GPUs; skipped elsewhere).
# Several indexes are built on the GPU and searched; the worker places each
# index copy on the device whose cached copies use the least memory
# (src/worker/cache.cpp), so the copies spread over the devices.  Checks
# from cagra_worker_cache that copies sit on every device up to the number
# of indexes and that each copy served searches, and that the searches on
# each device (index scans and cagra_search) return the rows of
# cagra.device = cpu.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CagraGpuNode;

my $node = CagraGpuNode::start('twogpus');
my $ndev = $node->safe_psql('postgres', 'SELECT cardinality(devices) FROM cagra_status');
plan skip_all => "the worker sees $ndev device(s), this test needs two" if $ndev < 2;
diag("devices ($ndev): " . $node->safe_psql('postgres', 'SELECT devices FROM cagra_status'));

sub status { return $node->safe_psql('postgres', "SELECT $_[0] FROM cagra_status"); }

# one index more than devices, at least four: every device gets a copy
my $nidx = $ndev < 4 ? 4 : $ndev + 1;
my $rows = 3000;
my $builds0 = status('builds');
for my $t (1 .. $nidx)
{
	$node->safe_psql('postgres', qq{
		CREATE TABLE t$t (id int PRIMARY KEY, v vector(16));
		INSERT INTO t$t SELECT i, array(SELECT sin(i * (0.3 + 0.07 * $t) + j * 1.1) + cos(i * 0.013 * j + $t)
		                                FROM generate_series(1, 16) j)::vector
		  FROM generate_series(1, $rows) i;
		CREATE INDEX t${t}_v ON t$t USING cagra (v) WITH (build_device = gpu);
	});
	is($node->safe_psql('postgres', "SELECT build_device, nodes FROM cagra_index_info('t${t}_v')"), "gpu|$rows",
		"t${t}_v built on the GPU");
	is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('t${t}_v')"), '0', "t${t}_v checks clean");
}
is(status('builds'), $builds0 + $nidx, 'every build counted by the worker');

# itopk_size well above k, so that the GPU and the CPU search find the
# same (exact) neighbours in these small tables
my $settings = 'SET cagra.itopk_size = 256; SET enable_seqscan = off;';
sub knn
{
	my ($t) = @_;
	return qq{SELECT string_agg(q.id || ':' || r.ids, ' ' ORDER BY q.id) FROM
	  (SELECT id, v FROM t$t WHERE id % 150 = 0) q,
	  LATERAL (SELECT string_agg(id::text, ',' ORDER BY d, id) ids
	           FROM (SELECT id, v <-> q.v AS d FROM t$t ORDER BY v <-> q.v LIMIT 10) s) r};
}
sub batch
{
	my ($t) = @_;
	return qq{SELECT string_agg(query || ':' || ctid::text, ' ' ORDER BY query, distance, ctid)
	  FROM cagra_search('t${t}_v', ARRAY(SELECT v FROM t$t WHERE id % 150 = 0 ORDER BY id), 10)};
}

my ($queries0, $uploads0) = split /\|/, status('queries, uploads');
for my $t (1 .. $nidx)
{
	my $gpu = $node->safe_psql('postgres', "SET cagra.device = gpu; $settings " . knn($t));
	my $cpu = $node->safe_psql('postgres', "SET cagra.device = cpu; $settings " . knn($t));
	like($gpu, qr/^150:150,/, "t$t: the GPU finds the query row first");
	is($gpu, $cpu, "t$t: index scans on the GPU return the rows of cagra.device = cpu");
	my $gpu_batch = $node->safe_psql('postgres', "SET cagra.device = gpu; $settings " . batch($t));
	my $cpu_batch = $node->safe_psql('postgres', "SET cagra.device = cpu; $settings " . batch($t));
	is($gpu_batch, $cpu_batch, "t$t: cagra_search on the GPU returns the rows of cagra.device = cpu");
}
is(status('uploads'), $uploads0 + $nidx, 'one copy loaded per index');
cmp_ok(status('queries') - $queries0, '>=', $nidx * 40, 'the searches were served by the worker');
is(status('fallbacks || \'|\' || errors'), '0|0', 'no fallbacks, no errors');

my $cache = q{
	SELECT c.relname, w.device, w.nodes, w.searches
	FROM cagra_worker_cache() w JOIN pg_class c ON c.oid = w.index
	WHERE w.database = (SELECT oid FROM pg_database WHERE datname = current_database())};
diag("cached copies (index|device|nodes|searches):\n" . $node->safe_psql('postgres', "$cache ORDER BY 1"));
is($node->safe_psql('postgres', "SELECT count(*) FROM ($cache) s"), $nidx, 'every index has a copy');
is($node->safe_psql('postgres', "SELECT count(DISTINCT device) FROM ($cache) s"), $ndev,
	'the copies are spread over every device');
is($node->safe_psql('postgres', "SELECT count(*) FROM ($cache) s WHERE searches = 0 OR nodes <> $rows"), '0',
	'every copy holds every node and served searches');
is($node->safe_psql('postgres', "SELECT string_agg(device::text, ',' ORDER BY device) FROM
	(SELECT device FROM ($cache) s GROUP BY device HAVING sum(searches) > 0) d"),
	join(',', 0 .. $ndev - 1), 'every device served searches');

# a build after the copies are placed, on whichever device has most room
$node->safe_psql('postgres', 'CREATE INDEX t1_v2 ON t1 USING cagra (v) WITH (build_device = gpu)');
is($node->safe_psql('postgres', "SELECT build_device FROM cagra_index_info('t1_v2')"), 'gpu',
	'a GPU build beside the cached copies');
is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('t1_v2')"), '0', 'and it checks clean');

$node->stop;
done_testing();
