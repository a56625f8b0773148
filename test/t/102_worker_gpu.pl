# test/t/102_worker_gpu.pl — the worker on a real device (run by
# test/device-sql.sh on the GPU machine; skipped elsewhere): CREATE INDEX
# is built on the GPU, searches are served by the GPU with the recall of
# the CPU path (float16 and L1 indexes too), filtered ones too (a widened
# traversal, every allowed node measured, an index scan continued in worker
# rounds), inserts with cagra.device = gpu send their runs' neighbour
# searches to the GPU and its copy takes the inserted nodes in place, and a worker
# killed with SIGKILL during a batch takes the cluster through crash
# recovery, after which the index checks clean and the worker serves again.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CagraGpuNode;
use IPC::Run;

my $node = CagraGpuNode::start('gpu');
diag('devices: ' . $node->safe_psql('postgres', 'SELECT devices FROM cagra_status'));
# the worker's start names each device's compute capability and the image it runs
my ($image_line) = slurp_file($node->logfile) =~ /(cagra gpu worker: device 0: .*)/;
like($image_line // '', qr/compute capability \d+\.\d+, .* GiB, runs (the sm_\d+ cubin|PTX compute_\d+, compiled by the driver for sm_\d+)$/,
	'the worker logs device 0 and the image it runs');
diag($image_line // 'no device line in the log');

$node->safe_psql('postgres', q{
	CREATE TABLE items (id int PRIMARY KEY, v vector(64));
	INSERT INTO items SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) + cos(i * 0.011 * j) + (i % 97) * 0.01
	                                  FROM generate_series(1, 64) j)::vector
	  FROM generate_series(1, 50000) i;
	CREATE TABLE queries AS SELECT id, v FROM items WHERE id % 500 = 0;
});

sub status { return $node->safe_psql('postgres', "SELECT $_[0] FROM cagra_status"); }

$node->safe_psql('postgres', 'CREATE INDEX items_v ON items USING cagra (v) WITH (build_device = gpu)');
is(status('builds'), '1', 'CREATE INDEX built on the GPU');
is($node->safe_psql('postgres', "SELECT build_device, nodes FROM cagra_index_info('items_v')"), 'gpu|50000',
	'index records the GPU build');
is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v')"), '0', 'GPU-built index checks clean');

# recall@10 of the GPU search and of the CPU search against exact results
my $recall = q{
	WITH r AS (SELECT s.query, s.ctid FROM cagra_search('items_v', ARRAY(SELECT v FROM queries ORDER BY id), 10) s),
	     e AS (SELECT q.rn AS query, x.ctid FROM
	             (SELECT row_number() OVER (ORDER BY id) rn, v FROM queries) q,
	             LATERAL (SELECT ctid FROM items ORDER BY v <-> q.v LIMIT 10) x)
	SELECT round(count(r.ctid)::numeric / count(*), 3) FROM e LEFT JOIN r USING (query, ctid)};
my $q0 = status('queries');
my $gpu_recall = $node->safe_psql('postgres', "SET enable_indexscan = off; $recall");
cmp_ok(status('queries') - $q0, '>=', 100, 'cagra_search served by the GPU');
my $cpu_recall = $node->safe_psql('postgres', "SET cagra.device = cpu; SET enable_indexscan = off; $recall");
diag("recall\@10: GPU $gpu_recall, CPU $cpu_recall");
cmp_ok($gpu_recall, '>=', 0.95, 'GPU recall@10 >= 0.95');
cmp_ok($gpu_recall, '>=', $cpu_recall - 0.02, 'GPU recall close to the CPU recall');

# storage = float16: half the device bytes, the recall of float32
$node->safe_psql('postgres', 'CREATE INDEX items_v16 ON items USING cagra (v) WITH (build_device = gpu, storage = float16)');
(my $recall16 = $recall) =~ s/'items_v'/'items_v16'/;
my $gpu_recall16 = $node->safe_psql('postgres', "SET enable_indexscan = off; $recall16");
my $mb = $node->safe_psql('postgres', q{
	SELECT string_agg(round(c.size_mb)::text, '|' ORDER BY r.relname) FROM cagra_worker_cache() c
	  JOIN pg_class r ON r.oid = c.index WHERE r.relname IN ('items_v', 'items_v16')});
diag("float16: recall\@10 $gpu_recall16 (float32 $gpu_recall), device MB float32|float16 $mb");
cmp_ok($gpu_recall16, '>=', $gpu_recall - 0.005, 'float16 recall within 0.005 of float32');
my ($mb32, $mb16) = split /\|/, $mb;
cmp_ok($mb16, '<', 0.75 * $mb32, 'float16 copy takes less device memory');
$node->safe_psql('postgres', 'DROP INDEX items_v16');

# vector_l1_ops: built and searched on the GPU like the other classes
$node->safe_psql('postgres', 'CREATE INDEX items_l1 ON items USING cagra (v vector_l1_ops) WITH (build_device = gpu)');
is($node->safe_psql('postgres', "SELECT metric, build_device FROM cagra_index_info('items_l1')"), 'l1|gpu',
	'the L1 index was built on the GPU');
(my $recall_l1 = $recall) =~ s/'items_v'/'items_l1'/;
$recall_l1 =~ s/<->/<+>/;
$q0 = status('queries');
my $gpu_recall_l1 = $node->safe_psql('postgres', "SET enable_indexscan = off; $recall_l1");
cmp_ok(status('queries') - $q0, '>=', 100, 'the L1 cagra_search was served by the GPU');
diag("L1: recall\@10 $gpu_recall_l1");
cmp_ok($gpu_recall_l1, '>=', 0.95, 'GPU L1 recall@10 >= 0.95');
$node->safe_psql('postgres', 'DROP INDEX items_l1');

$q0 = status('queries');
my $scan = q{SET cagra.device = gpu; SET enable_seqscan = off;
	SELECT id FROM items ORDER BY v <-> (SELECT v FROM queries WHERE id = 1000) LIMIT 3};
like($node->safe_psql('postgres', $scan), qr/^1000\n/, 'index scan on the GPU finds the row');
is(status('queries'), $q0 + 1, 'the index scan was served by the GPU');
is(status('errors || \'|\' || fallbacks'), '0|0', 'no errors, no fallbacks');

# filtered searches on the GPU: 50% of the rows allowed (a traversal widened
# for the pass rate), 1% and 0.1% (each allowed node measured)
for my $c ([ 'id % 100 < 50', '50%' ], [ 'id % 100 = 7', '1%' ], [ 'id % 1000 = 7', '0.1%' ])
{
	my ($filter, $what) = @$c;
	$q0 = status('queries');
	my ($got, $failing) = split /\|/, $node->safe_psql('postgres', qq{
		SET enable_indexscan = off;
		WITH r AS (SELECT s.query, s.ctid FROM cagra_search('items_v', ARRAY(SELECT v FROM queries ORDER BY id), 10,
		                                                     ARRAY(SELECT ctid FROM items WHERE $filter)) s),
		     e AS (SELECT q.rn AS query, x.ctid FROM
		             (SELECT row_number() OVER (ORDER BY id) rn, v FROM queries) q,
		             LATERAL (SELECT ctid FROM items WHERE $filter ORDER BY v <-> q.v LIMIT 10) x)
		SELECT round(count(r.ctid)::numeric / count(*), 3),
		       (SELECT count(*) FROM r WHERE ctid NOT IN (SELECT ctid FROM items WHERE $filter))
		  FROM e LEFT JOIN r USING (query, ctid)});
	diag("filtered cagra_search, $what allowed: recall\@10 $got");
	cmp_ok($got, '>=', 0.95, "$what allowed: recall\@10 >= 0.95");
	is($failing, '0', "$what allowed: only allowed rows");
	is(status('queries') - $q0, 100, "$what allowed: served by the GPU");
}
# a WHERE the index does not see (5% pass): the scan asks the GPU again with
# more candidates until it has its rows
$q0 = status('queries');
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off;
	SELECT count(*) FROM (SELECT id FROM items WHERE id % 20 = 3
	                       ORDER BY v <-> (SELECT v FROM queries WHERE id = 1000) LIMIT 10) s}), '10',
	'filtered index scan: 10 rows');
cmp_ok(status('queries') - $q0, '>=', 2, 'its continuation served by the GPU');
is(status('errors || \'|\' || fallbacks'), '0|0', 'no errors, no fallbacks');

# inserts with cagra.device = gpu: the rows appended are linked a run of 16
# at a time, each run's neighbour searches and plans one request to the
# worker, and the GPU copy takes the inserted nodes in place
# (cagra_gpu_index_update), with no whole upload; then four sessions at
# once; afterwards the updated copy answers as the pages do: as many
# inserted rows find themselves first through the GPU as through the
# backend's search of the pages
my $row = sub {
	my ($from, $to) = @_;
	return "SET cagra.device = gpu; INSERT INTO items SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) "
	  . "+ cos(i * 0.011 * j) + (i % 89) * 0.02 FROM generate_series(1, 64) j)::vector FROM generate_series($from, $to) i";
};
my ($iq0, $iu0) = split /\|/, status('queries || \'|\' || uploads');
$node->safe_psql('postgres', $row->(50001, 51000));
# ids 50000 to 50999: 62 runs of 16 linked (by linkers, or by the inserts
# when the linkers fall behind), the last 8 rows unlinked
ok($node->poll_query_until('postgres', "SELECT unlinked_nodes = 8 FROM cagra_index_info('items_v')"),
	'1,000 rows appended: the last 8, short of a run, stay unlinked');
my ($iq1, $iu1) = split /\|/, status('queries || \'|\' || uploads');
is($iq1 - $iq0, 992, 'the GPU worker searched the neighbours of each of the 992 rows linked');
is($iu1 - $iu0, 0, 'the GPU copy took the inserted nodes with no whole upload');
my @writers = map {
	my $from = 51001 + 500 * $_;
	IPC::Run::start([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c',
					  $row->($from, $from + 499) ], '>', \my $o, '2>', \my $e)
} 0 .. 3;
$_->finish or die 'an inserting session failed' for @writers;
is(status('uploads || \'|\' || errors || \'|\' || fallbacks'), "$iu1|0|0",
	'four sessions inserting through the GPU: no whole upload, no error, no fallback');
my $not_first = sub {
	my ($device) = @_;
	return $node->safe_psql('postgres', qq{
		SET enable_seqscan = off; SET cagra.device = $device;
		SELECT count(*) FROM items i
		 WHERE i.id > 50000
		   AND (SELECT j.id FROM items j ORDER BY j.v <-> i.v LIMIT 1) IS DISTINCT FROM i.id});
};
my ($on_gpu, $on_pages) = ($not_first->('gpu'), $not_first->('cpu'));
diag("inserted rows not found first: $on_gpu through the GPU copy, $on_pages through the pages");
cmp_ok($on_gpu, '<=', $on_pages + 30, 'the updated GPU copy finds the inserted rows as the pages do');
cmp_ok($on_gpu, '<=', 30, 'at most 1% of the inserted rows not found first');
is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v')"), '0',
	'the index checks clean after the inserts');

# SIGKILL of the worker during a batch: crash recovery, then service again.
# The worker is stopped first so that the batch is surely in flight (a GPU
# answers it faster than any poll) when the SIGKILL lands.
my $pid = status('pid');
kill 'STOP', $pid;
my ($out, $err) = ('', '');
my $bg = IPC::Run::start(
	[ 'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'), '-c',
	  "SET application_name = 'batch'; SELECT count(*) FROM cagra_search('items_v', ARRAY(SELECT v FROM items WHERE id % 5 = 0), 10)" ],
	'>', \$out, '2>', \$err);
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'batch' AND wait_event = 'Extension'");
kill 'KILL', $pid;
$bg->finish;
$node->poll_query_until('postgres', "SELECT state = 'running' FROM cagra_status")
  or die 'worker did not come back after the crash';
is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v')"), '0',
	'index checks clean after crash recovery');
like($node->safe_psql('postgres', $scan), qr/^1000\n/, 'the new worker serves searches');

$node->stop;
done_testing();
