# test/t/103_worker_gpu_oom.pl — the worker on a real device that runs out
# of memory (run by test/device-sql.sh on the GPU machine; skipped
# elsewhere).  test/gpu/hold_memory takes all but 64 MB of every device;
# then CREATE INDEX with build_device = gpu fails with an ERROR and changes
# nothing, build_device = auto builds on the CPU with a NOTICE, searches with
# cagra.device = auto fall back to the CPU with a NOTICE and the CPU's rows,
# cagra.device = gpu raises an ERROR, and cagra_status counts the
# fallbacks.  Once the memory is given back the GPU serves again.  Last,
# cagra.gpu_memory_limit below the size of an index copy: the same
# fallback and ERROR, without holding memory.
#
# Needs CAGRA_GPU_LIBRARY (libcagra_gpu.so) and CAGRA_HOLD_MEMORY (the
# hold_memory program, built with the GPU library).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CagraGpuNode;
use IPC::Run;
use Time::HiRes qw(sleep);

my $hold = $ENV{CAGRA_HOLD_MEMORY};
plan skip_all => 'CAGRA_GPU_LIBRARY not set (device check only)' unless $ENV{CAGRA_GPU_LIBRARY};
plan skip_all => 'CAGRA_HOLD_MEMORY (test/gpu/hold_memory) not set or not executable'
  unless $hold && -x $hold;

# MB each hold_memory process leaves free: less than the library's own
# headroom (64 MiB beside every allocation), so nothing new fits at all.
my $leave_mb = 64;

my $node = CagraGpuNode::start('gpuoom');
my $ndev = $node->safe_psql('postgres', 'SELECT cardinality(devices) FROM cagra_status');
diag("devices ($ndev): " . $node->safe_psql('postgres', 'SELECT devices FROM cagra_status'));

# items: 30,000 x 128, a copy of about 19 MB and a build of more than its
# 15 MB of vectors; probe: 1,000 x 16, only used to send the worker a request.
$node->safe_psql('postgres', q{
	CREATE TABLE items (id int PRIMARY KEY, v vector(128));
	INSERT INTO items SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) + cos(i * 0.011 * j) + (i % 89) * 0.01
	                                  FROM generate_series(1, 128) j)::vector
	  FROM generate_series(1, 30000) i;
	CREATE TABLE queries AS SELECT id, v FROM items WHERE id % 1500 = 0;
	CREATE TABLE probe (id int PRIMARY KEY, v vector(16));
	INSERT INTO probe SELECT i, array(SELECT sin(i * 0.5 + j) FROM generate_series(1, 16) j)::vector
	  FROM generate_series(1, 1000) i;
	CREATE INDEX probe_v ON probe USING cagra (v) WITH (build_device = gpu);
});

sub status { return $node->safe_psql('postgres', "SELECT $_[0] FROM cagra_status"); }

# psql with verbose errors (the SQLSTATE precedes each message): exit code,
# stdout, stderr
sub run_sql
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	my $ret = $node->psql('postgres', $sql, stdout => \$out, stderr => \$err,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return ($ret, $out, $err);
}

# The worker rereads its settings (and forgets which copies did not fit)
# on SIGHUP.  A setting it publishes, the limit, shows when it has: each
# value passed here must differ from the current one.  The probe search is
# a request, after which the worker publishes the limit.
sub set_limit_and_wait
{
	my ($mb) = @_;
	$node->safe_psql('postgres',
		$mb eq 'reset' ? 'ALTER SYSTEM RESET cagra.gpu_memory_limit' : "ALTER SYSTEM SET cagra.gpu_memory_limit = $mb");
	$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
	for (1 .. 300)
	{
		$node->psql('postgres', q{SET enable_seqscan = off;
			SELECT id FROM probe ORDER BY v <-> (SELECT v FROM probe WHERE id = 1) LIMIT 1});
		my $limit = status('memory_limit_mb');
		return 1 if ($mb eq 'reset' ? $limit ne '' && $limit != 4 : $limit == $mb);
		sleep 0.1;
	}
	die "the worker did not take cagra.gpu_memory_limit = $mb";
}

# Start one hold_memory per device; returns the harnesses once each says
# how much it holds.
sub hold_devices
{
	my @held;
	for my $dev (0 .. $ndev - 1)
	{
		my ($in, $out, $err) = ('', '', '');
		my $h = IPC::Run::start([ $hold, $dev, $leave_mb ], '<', \$in, '>', \$out, '2>', \$err);
		my $deadline = time + 120;
		while ($out !~ /holding (\d+) MB, (\d+) MB free/)
		{
			die "hold_memory $dev exited: $err" unless $h->pumpable;
			die "hold_memory $dev said nothing in 120 s: $err" if time > $deadline;
			$h->pump_nb;
			sleep 0.1;
		}
		my ($held_mb, $free_mb) = $out =~ /holding (\d+) MB, (\d+) MB free/;
		diag("device $dev: hold_memory holding $held_mb MB, $free_mb MB free");
		cmp_ok($free_mb, '<=', $leave_mb + 8, "device $dev: at most ${leave_mb} MB (+8) left free");
		push @held, $h;
	}
	return @held;
}

sub release_devices
{
	for my $h (@_)
	{
		$h->signal('TERM');
		$h->finish;
		is($h->result(0), 0, 'hold_memory released its memory and exited 0');
	}
}

# the rows of every query through the index, in distance order
my $knn = q{
	SET enable_seqscan = off;
	SELECT string_agg(q.id || ':' || r.ids, ' ' ORDER BY q.id) FROM queries q,
	  LATERAL (SELECT string_agg(id::text, ',' ORDER BY d, id) ids
	           FROM (SELECT id, v <-> q.v AS d FROM items ORDER BY v <-> q.v LIMIT 10) s) r};
my $nq = $node->safe_psql('postgres', 'SELECT count(*) FROM queries');
my $batch = q{
	SELECT string_agg(query || ':' || ctid::text, ' ' ORDER BY query, distance, ctid)
	FROM cagra_search('items_v', ARRAY(SELECT v FROM queries ORDER BY id), 10)};
my $table_sum = q{SELECT count(*) || '|' || md5(string_agg(md5(id || ':' || v::text), '' ORDER BY id)) FROM items};
my $table_before = $node->safe_psql('postgres', $table_sum);

# the worker has its contexts on every device and one copy loaded before
# the memory goes
is($node->safe_psql('postgres', q{SET cagra.device = gpu; SET enable_seqscan = off;
	SELECT id FROM probe ORDER BY v <-> (SELECT v FROM probe WHERE id = 7) LIMIT 1}), '7',
	'probe index searched on the GPU');

my @held = hold_devices();

# --- builds ------------------------------------------------------------------------
my ($builds0, $fallbacks0) = split /\|/, status('builds, fallbacks');
my ($ret, $out, $err) = run_sql('CREATE INDEX items_v ON items USING cagra (v) WITH (build_device = gpu)');
isnt($ret, 0, 'CREATE INDEX with build_device = gpu fails without device memory');
like($err,
	qr/ERROR:  55000: could not build index "items_v" on the GPU: this build needs [\d.]+ MiB of device memory, but only [\d.]+ MiB of [\d.]+ MiB are free/,
	'the ERROR says how much memory the build needs and how much is free (SQLSTATE 55000)');
like($err, qr/HINT:  Use build_device = auto to build on the CPU when the GPU fails\./, 'with a hint');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_class WHERE relname = 'items_v'"), '0', 'no index left behind');
is($node->safe_psql('postgres', $table_sum), $table_before, 'the table is unchanged');
is(status('builds'), $builds0, 'no build counted');
cmp_ok(status('fallbacks'), '>', $fallbacks0, 'the failed offload is counted in cagra_status.fallbacks');

($fallbacks0) = status('fallbacks');
($ret, $out, $err) = run_sql('CREATE INDEX items_v ON items USING cagra (v) WITH (build_device = auto)');
is($ret, 0, 'CREATE INDEX with build_device = auto succeeds');
like($err,
	qr/NOTICE:  00000: building index "items_v" on the CPU: the GPU worker failed: this build needs [\d.]+ MiB of device memory, but only [\d.]+ MiB/,
	'with a NOTICE that it builds on the CPU and why');
is($node->safe_psql('postgres', "SELECT build_device, nodes FROM cagra_index_info('items_v')"), 'cpu|30000',
	'the index records the CPU build');
is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v')"), '0', 'and checks clean');
is(status('builds'), $builds0, 'no GPU build counted');
cmp_ok(status('fallbacks'), '>', $fallbacks0, 'the fallback is counted');

my $cpu_rows = $node->safe_psql('postgres', "SET cagra.device = cpu; $knn");
my $cpu_batch = $node->safe_psql('postgres', "SET cagra.device = cpu; $batch");
like($cpu_rows, qr/^1500:1500,/, 'the CPU search finds each query row first');

# --- searches ----------------------------------------------------------------------
($ret, $out, $err) = run_sql("SET cagra.device = gpu; $knn");
isnt($ret, 0, 'cagra.device = gpu: the search fails when the copy cannot be loaded');
like($err,
	qr/ERROR:  55000: cagra search could not run on the GPU worker: the index copy was not loaded: this index needs [\d.]+ MiB of device memory, but only [\d.]+ MiB of [\d.]+ MiB are free/,
	'with an ERROR that says why (SQLSTATE 55000)');
like($err, qr/HINT:  SET cagra.device = auto to search on the CPU when the worker fails\./, 'and a hint');

# the worker remembers that the copy did not fit; SIGHUP makes it try again
set_limit_and_wait(60001);
my ($uploads0, $queries0);
($uploads0, $queries0, $fallbacks0) = split /\|/, status('uploads, queries, fallbacks');
($ret, $out, $err) = run_sql("SET cagra.device = auto; $knn");
is($ret, 0, 'cagra.device = auto: the search succeeds');
like($err,
	qr/NOTICE:  00000: cagra search runs on the CPU: the index copy was not loaded: this index needs [\d.]+ MiB of device memory, but only [\d.]+ MiB/,
	'with a NOTICE that it runs on the CPU and why');
my $notices = () = $err =~ /NOTICE:/g;
is($notices, 1, 'one NOTICE for the whole session');
is($out, $cpu_rows, 'the same rows as cagra.device = cpu');
cmp_ok(status('fallbacks') - $fallbacks0, '>=', $nq, 'every query counted as a fallback');
is(status('uploads || \'|\' || queries'), "$uploads0|$queries0", 'no copy loaded, no query served by the GPU');

($ret, $out, $err) = run_sql("SET cagra.device = auto; $batch");
is($ret, 0, 'cagra_search with cagra.device = auto succeeds');
like($err, qr/NOTICE:  00000: cagra search runs on the CPU: /, 'with a NOTICE');
is($out, $cpu_batch, 'cagra_search returns the rows of cagra.device = cpu');

# --- memory back -------------------------------------------------------------------
release_devices(@held);
set_limit_and_wait(60002);
($uploads0, $queries0, $fallbacks0) = split /\|/, status('uploads, queries, fallbacks');
($ret, $out, $err) = run_sql("SET cagra.device = gpu; $knn");
is($ret, 0, 'with the memory back, cagra.device = gpu searches succeed');
like($out, qr/^1500:1500,/, 'the GPU finds each query row first');
is(status('uploads'), $uploads0 + 1, 'the copy was loaded');
cmp_ok(status('queries') - $queries0, '>=', $nq, 'every query was served by the GPU');
is(status('fallbacks'), $fallbacks0, 'no fallback');
is($node->safe_psql('postgres', q{SELECT c.nodes FROM cagra_worker_cache() c
	WHERE c.index = 'items_v'::regclass AND c.database = (SELECT oid FROM pg_database WHERE datname = current_database())}),
	'30000', 'cagra_worker_cache lists the copy');

($builds0) = status('builds');
$node->safe_psql('postgres', 'CREATE INDEX items_v_gpu ON items USING cagra (v) WITH (build_device = gpu)');
is(status('builds'), $builds0 + 1, 'a GPU build works again');
is($node->safe_psql('postgres', "SELECT build_device FROM cagra_index_info('items_v_gpu')"), 'gpu', 'recorded as such');
$node->safe_psql('postgres', 'DROP INDEX items_v_gpu');

# --- cagra.gpu_memory_limit below the size of a copy -----------------------------
set_limit_and_wait(4);
is(status('memory_limit_mb'), '4', 'cagra_status shows the limit');
# a new relfilenode: the copy cached above no longer matches
$node->safe_psql('postgres', 'REINDEX INDEX items_v');
($uploads0, $fallbacks0) = split /\|/, status('uploads, fallbacks');
($ret, $out, $err) = run_sql("SET cagra.device = auto; $knn");
is($ret, 0, 'a copy over the limit: cagra.device = auto succeeds');
like($err,
	qr/NOTICE:  00000: cagra search runs on the CPU: the index copy was not loaded: a copy of this index needs \d+ MB of device memory, cagra.gpu_memory_limit allows 4 MB/,
	'with a NOTICE naming the limit');
my $cpu_rows2 = $node->safe_psql('postgres', "SET cagra.device = cpu; $knn");
is($out, $cpu_rows2, 'the same rows as cagra.device = cpu');
cmp_ok(status('fallbacks') - $fallbacks0, '>=', $nq, 'the fallbacks are counted');
($ret, $out, $err) = run_sql("SET cagra.device = gpu; $knn");
isnt($ret, 0, 'cagra.device = gpu fails');
like($err,
	qr/ERROR:  55000: cagra search could not run on the GPU worker: (?:the index copy was not loaded: )?a copy of this index needs \d+ MB of device memory, cagra.gpu_memory_limit allows 4 MB/,
	'with an ERROR naming the limit');
is(status('uploads'), $uploads0, 'nothing was loaded');

set_limit_and_wait('reset');
($queries0) = status('queries');
like($node->safe_psql('postgres', "SET cagra.device = gpu; $knn"), qr/^1500:1500,/,
	'after the limit is reset, the GPU serves the search');
cmp_ok(status('queries') - $queries0, '>=', $nq, 'counted as GPU queries');
is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v')"), '0', 'the index checks clean');

$node->stop;
done_testing();
