# test/t/100_worker_states.pl — the GPU worker where it cannot run: without
# preload (status 'not preloaded'), with preload but no GPU library, and
# with the real library on a machine without a usable device.  Each time
# the worker exits 0 and is not restarted, and searches and builds run in
# the backends on the CPU with the same results.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('states');
$node->init;
$node->start;

my $setup = q{
	CREATE EXTENSION cagra;
	CREATE TABLE items (id int PRIMARY KEY, v vector(8));
	INSERT INTO items SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) + cos(i * 0.11 * j)
	                                  FROM generate_series(1, 8) j)::vector
	  FROM generate_series(1, 1000) i;
	CREATE INDEX items_v ON items USING cagra (v) WITH (graph_degree = 16);
};
$node->safe_psql('postgres', $setup);

# what the nearest neighbours of row 7 are, exactly and through the index
my $exact = $node->safe_psql('postgres', q{
	SELECT string_agg(id::text, ',' ORDER BY d, id) FROM (
	  SELECT id, v <-> (SELECT v FROM items WHERE id = 7) d FROM items ORDER BY d, id LIMIT 5) s});
my $via_index = q{
	SET enable_seqscan = off;
	SELECT string_agg(id::text, ',') FROM (
	  SELECT id FROM items ORDER BY v <-> (SELECT v FROM items WHERE id = 7) LIMIT 5) s};
my $via_search = q{
	SELECT string_agg(i.id::text, ',' ORDER BY s.distance, i.id)
	  FROM cagra_search('items_v', ARRAY[(SELECT v FROM items WHERE id = 7)], 5) s
	  JOIN items i ON i.ctid = s.ctid};

# --- not preloaded ---------------------------------------------------------------
is($node->safe_psql('postgres', 'SELECT state, pid IS NULL FROM cagra_status'),
	'not preloaded|t', 'status without preload');
is($node->safe_psql('postgres', $via_index), $exact, 'index scan without preload');
is($node->safe_psql('postgres', $via_search), $exact, 'cagra_search without preload');
my ($ret, $out, $err) = $node->psql('postgres', "SET cagra.device = gpu; $via_search");
isnt($ret, 0, 'cagra.device = gpu fails without the worker');
like($err, qr/cagra\.device is gpu but the cagra GPU worker is not running.*\n.*HINT:  Add cagra to shared_preload_libraries/s,
	'cagra.device = gpu error and hint');
($ret, $out, $err) = $node->psql('postgres',
	'CREATE INDEX ON items USING cagra (v) WITH (build_device = gpu)');
like($err, qr/cannot build index "items_v_idx" on the GPU: no cagra GPU worker is available/,
	'build_device = gpu without the worker');

# --- preloaded, no GPU library ------------------------------------------------------
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'cagra'
cagra.gpu_library = '/nonexistent/libcagra_gpu.so'
});
$node->restart;
$node->poll_query_until('postgres', "SELECT state <> 'not started' AND state <> 'starting' FROM cagra_status")
  or die 'worker never reported';
is($node->safe_psql('postgres', 'SELECT state, pid IS NULL, devices FROM cagra_status'),
	'no GPU library|t|{}', 'status: no GPU library');
like($node->safe_psql('postgres', 'SELECT message FROM cagra_status'),
	qr{/nonexistent/libcagra_gpu\.so}, 'status message names the library');
is($node->safe_psql('postgres', $via_index), $exact, 'index scan on the CPU');
is($node->safe_psql('postgres', $via_search), $exact, 'cagra_search on the CPU');
is($node->safe_psql('postgres', 'SELECT requests, fallbacks FROM cagra_status'), '0|0',
	'nothing went to the worker, and that is no fallback');

# exit code 0: no restart after bgw_restart_time (5 s)
sleep(6);
my $log = slurp_file($node->logfile);
my $exits = () = $log =~ /cagra gpu worker: .*libcagra_gpu\.so/g;
is($exits, 1, 'the worker ran once and was not restarted');
is($node->safe_psql('postgres',
	"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'cagra gpu worker'"),
	'0', 'no worker process');

# --- preloaded, the real GPU library ----------------------------------------------
my $lib = "$ENV{CAGRA_SRC}/build/gpu/libcagra_gpu.so";
SKIP:
{
	skip 'libcagra_gpu.so was not built', 3 unless $ENV{CAGRA_SRC} && -r $lib;
	$node->append_conf('postgresql.conf', "cagra.gpu_library = '$lib'\n");
	$node->restart;
	$node->poll_query_until('postgres', "SELECT state NOT IN ('not started', 'starting') FROM cagra_status")
	  or die 'worker never reported';
	my $state = $node->safe_psql('postgres', 'SELECT state FROM cagra_status');
	ok($state eq 'no device' || $state eq 'running', "real library: state '$state'");
	if ($state eq 'no device')
	{
		is($node->safe_psql('postgres', 'SELECT pid IS NULL, devices FROM cagra_status'), 't|{}',
			'no device: no pid, no devices');
	}
	else
	{
		isnt($node->safe_psql('postgres', 'SELECT devices FROM cagra_status'), '{}', 'devices listed');
	}
	is($node->safe_psql('postgres', $via_index), $exact, 'index scan with the real library');
}

# --- the worker's settings out of range, and removed ones ---------------------
# A preloaded library's settings are checked when it defines them, after the
# configuration file was read: PostgreSQL warns, names the range or the
# values and keeps the default (it does not refuse to start)
for my $bad (['cagra.gpu_memory_limit', -1, qr/-1 MB is outside the valid range for parameter "cagra\.gpu_memory_limit" \(0( MB)? \.\. 2147483647( MB)?\)/, '0'],
	['cagra.worker_backend', 'tpu', qr/invalid value for parameter "cagra\.worker_backend": "tpu"/, 'gpu'])
{
	my ($name, $value, $warning, $default) = @$bad;
	my $offset = -s $node->logfile;
	$node->append_conf('postgresql.conf', "$name = $value\n");
	$node->restart;
	like(substr(slurp_file($node->logfile), $offset), qr/WARNING:  $warning/,
		"$name = $value: PostgreSQL's warning");
	is($node->safe_psql('postgres', "SHOW $name"), $default, "$name keeps its default ($default)");
	$node->append_conf('postgresql.conf', "$name = $default\n");
}

# A setting cagra no longer has, left in postgresql.conf: a warning that
# names it, and the server runs
{
	my $offset = -s $node->logfile;
	$node->append_conf('postgresql.conf', "cagra.batch_window = 100\ncagra.concurrent_batches = 4\n");
	$node->restart;
	my $log = substr(slurp_file($node->logfile), $offset);
	for my $name ('cagra.batch_window', 'cagra.concurrent_batches')
	{
		like($log, qr/WARNING:  invalid configuration parameter name "\Q$name\E", removing it/,
			"removed $name: PostgreSQL warns at start");
	}
	is($node->safe_psql('postgres', 'SELECT count(*) FROM cagra_search(\'items_v\', ARRAY[(SELECT v FROM items WHERE id = 7)], 5)'),
		'5', 'the server runs with removed settings in postgresql.conf');
}

$node->stop;
done_testing();
