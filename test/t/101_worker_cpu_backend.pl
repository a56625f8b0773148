# test/t/101_worker_cpu_backend.pl — the real IPC path with the worker's CPU
# engine (cagra.worker_backend = cpu): searches and builds go through the
# worker (status counters show it) with the same results as in the
# backend; appended rows are found, vacuumed rows never returned; requests
# of several sessions are batched; and a worker that is stopped, terminated
# or slow never leaves a session hanging: statement_timeout and cancel
# work while waiting, cagra.worker_timeout and a terminated worker mean a
# CPU search with a NOTICE, and the worker comes back; a build cancelled
# while the worker runs it is stopped there, and the next one is served; a
# build beyond maintenance_work_mem streams every row to the worker during
# its scan, holding no more than maintenance_work_mem, and writes the graph
# a build with ample memory writes.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CagraGpuNode;
use IPC::Run;
use Time::HiRes qw(sleep);

my $node = CagraGpuNode::cpu_worker('cpuworker');

$node->safe_psql('postgres', q{
	CREATE TABLE items (id int PRIMARY KEY, v vector(16));
	INSERT INTO items SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) + cos(i * 0.11 * j)
	                                  FROM generate_series(1, 16) j)::vector
	  FROM generate_series(1, 2000) i;
});

sub status
{
	my ($cols) = @_;
	return $node->safe_psql('postgres', "SELECT $cols FROM cagra_status");
}

# --- build offload ------------------------------------------------------------------
$node->safe_psql('postgres', 'CREATE INDEX items_v ON items USING cagra (v) WITH (graph_degree = 16)');
is(status('builds'), '1', 'CREATE INDEX went through the worker');
is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v')"), '0',
	'worker-built index passes cagra_index_check');
is($node->safe_psql('postgres', "SELECT nodes, live_nodes FROM cagra_index_info('items_v')"),
	'2000|2000', 'worker-built index holds every row');

# --- searches through the worker -------------------------------------------------
my $queries = 'ARRAY(SELECT v FROM items WHERE id % 100 = 0 ORDER BY id)';
my $search = "SELECT string_agg(query || ':' || ctid::text, ' ' ORDER BY query, distance, ctid)
              FROM cagra_search('items_v', $queries, 5)";
my $on_cpu = $node->safe_psql('postgres', "SET cagra.device = cpu; $search");
my $exact_sql = q{SET enable_indexscan = off; SET enable_bitmapscan = off;
	SELECT string_agg(q || ':' || c, ' ' ORDER BY q, d, c) FROM (
	  SELECT q.rn AS q, r.ctid::text AS c, r.d FROM
	    (SELECT row_number() OVER (ORDER BY id) rn, v FROM items WHERE id % 100 = 0) q,
	    LATERAL (SELECT ctid, v <-> q.v AS d FROM items ORDER BY v <-> q.v LIMIT 5) r) s};
my $exact = $node->safe_psql('postgres', $exact_sql);
is($on_cpu, $exact, 'cagra_search on the CPU finds the exact neighbours');
is($node->safe_psql('postgres', $search), $exact, 'cagra_search through the worker finds them too');
is(status('uploads, cached_indexes, queries >= 20, fallbacks'), '1|1|t|0',
	'one index copy uploaded, queries served by the worker');
is($node->safe_psql('postgres', 'SELECT count(*) FROM cagra_worker_cache() c JOIN pg_class r ON r.oid = c.index'
	. " WHERE r.relname = 'items_v' AND c.nodes = 2000"), '1', 'cagra_worker_cache lists the copy');

$node->safe_psql('postgres', 'CREATE TABLE q AS SELECT v FROM items WHERE id = 1234');
my $scan = q{
	SET enable_seqscan = off;
	SELECT string_agg(id::text, ',') FROM (
	  SELECT id FROM items ORDER BY v <-> (SELECT v FROM q) LIMIT 5) s};
my $before = status('queries');
my $scan_result = $node->safe_psql('postgres', $scan);
like($scan_result, qr/^1234,/, 'index scan through the worker finds the row itself first');
is(status('queries'), $before + 1, 'the index scan was served by the worker');
# only search counts moved: the worker publishes them within 50 ms, idle or not
ok($node->poll_query_until('postgres', q{
	SELECT c.searches = s.queries FROM cagra_worker_cache() c JOIN pg_class r ON r.oid = c.index, cagra_status s
	 WHERE r.relname = 'items_v'}), 'cagra_worker_cache shows every search of the copy once the worker is idle');
# every step of those round trips was timed, and the steps fit in the round trip
is($node->safe_psql('postgres', q{
	SELECT bool_and(events > 0) FILTER (WHERE step IN ('pickup', 'queue', 'job', 'engine', 'handback',
	                                                   'wake', 'round trip', 'loop busy'))
	       AND bool_and(events = 0) FILTER (WHERE step IN ('device', 'resident'))
	       AND sum(mean_us) FILTER (WHERE step IN ('queue', 'wake')) <=
	           sum(mean_us) FILTER (WHERE step = 'round trip')
	  FROM cagra_worker_timings()}), 't',
	'cagra_worker_timings counts each step of the searches (no device time or resident kernel on the CPU engine)');
is($node->safe_psql('postgres', "SET cagra.device = cpu; $scan"), $scan_result,
	'same rows as the CPU scan');

# appended rows: searched in the backend and merged, no new upload
$node->safe_psql('postgres', q{INSERT INTO items VALUES (5001, (SELECT v FROM q))});
like($node->safe_psql('postgres', $scan), qr/^(1234,5001|5001,1234),/, 'a row inserted after the copy is found');
is(status('uploads'), '1', 'appended rows did not need a new copy');

# vacuum: a new generation, a new copy, and the deleted row is never returned
$node->safe_psql('postgres', 'DELETE FROM items WHERE id = 1234');
$node->safe_psql('postgres', 'VACUUM items');
unlike($node->safe_psql('postgres', $scan), qr/\b1234\b/, 'deleted row not returned after VACUUM');
is(status('uploads'), '2', 'vacuum made the worker load a new copy');
# the row comes back into the slot vacuum freed: the copy still serves (the
# backend searches the reused slot itself), no new upload
$node->safe_psql('postgres', q{INSERT INTO items VALUES (1234, (SELECT v FROM q))});
is($node->safe_psql('postgres', "SELECT reused_slots > 0 FROM cagra_index_info('items_v')"), 't',
	'the insert took a slot vacuum freed');
$before = status('queries');
like($node->safe_psql('postgres', $scan), qr/^(1234,5001|5001,1234),/, 'the row in the reused slot is found');
is(status('queries'), $before + 1, 'through the worker');
is(status('uploads'), '2', 'without a new copy');

# --- batching of several sessions ------------------------------------------------
# Searches queued while the worker is busy (here: stopped) go in one launch
# when it comes back.
my ($batches0, $queries0) = split /\|/, status('batches, queries');
my $busy_pid = status('pid');
kill 'STOP', $busy_pid;
my @h;
for my $i (1 .. 4)
{
	my $out = '';
	push @h, IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'), '-c',
		  "SELECT count(*) FROM cagra_search('items_v', ARRAY[(SELECT v FROM items WHERE id = $i)], 3)" ],
		'>', \$out, '2>', \my $err);
}
$node->poll_query_until('postgres', q{
	SELECT count(*) = 4 FROM pg_stat_activity
	 WHERE wait_event_type = 'Extension' AND query LIKE '%cagra_search%' AND pid <> pg_backend_pid()});
kill 'CONT', $busy_pid;
$_->finish for @h;
my ($batches1, $queries1) = split /\|/, status('batches, queries');
is($queries1 - $queries0, 4, 'four queries served');
is($batches1 - $batches0, 1, 'the queries of four sessions queued meanwhile shared one launch');

# --- a stopped worker: statement_timeout, cancel, worker_timeout -------------------
my $pid = status('pid');
my $one = "SELECT count(*) FROM cagra_search('items_v', ARRAY[(SELECT v FROM items WHERE id = 42)], 3)";
kill 'STOP', $pid;
my ($ret, $out, $err) = $node->psql('postgres', "SET statement_timeout = '300ms'; $one");
like($err, qr/canceling statement due to statement timeout/, 'statement_timeout while waiting on the worker');

($ret, $out, $err) = $node->psql('postgres', "SET cagra.worker_timeout = '200ms'; $one");
is($out, '3', 'cagra.worker_timeout: the search completes on the CPU');
like($err, qr/NOTICE:  cagra search runs on the CPU: the cagra GPU worker did not answer within cagra.worker_timeout/,
	'NOTICE of the fallback');

# 4,000 queries go in parts; the second is written straight into its
# request and queued while the first is searched: when that request times
# out, its queries are taken back out of it for the CPU search
my $parts = q{
	SET work_mem = '64MB';
	SET cagra.worker_timeout = '200ms';
	SET cagra.device = %s;
	SELECT count(*), md5(string_agg(s.query || ':' || s.ctid, ',' ORDER BY s.query, s.distance, s.ctid))
	  FROM cagra_search('items_v', (SELECT array_agg(v ORDER BY id) FROM items, generate_series(1, 2)), 3) s};
($ret, $out, $err) = $node->psql('postgres', sprintf($parts, 'auto'));
is($out, $node->safe_psql('postgres', sprintf($parts, 'cpu')),
	'a part whose queued request timed out is searched on the CPU from its own queries');
like($err, qr/did not answer within cagra.worker_timeout/, 'NOTICE of that fallback');

# cancel while waiting
my ($bout, $berr) = ('', '');
my $bg = IPC::Run::start(
	[ 'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'), '-c',
	  "SET application_name = 'waiter'; $one" ],
	'>', \$bout, '2>', \$berr);
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'waiter' AND wait_event = 'Extension'")
  or die 'the search never waited on the worker';
$node->safe_psql('postgres', "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'waiter'");
$bg->finish;
like($berr, qr/canceling statement due to user request/, 'cancel while waiting on the worker');

kill 'CONT', $pid;
my $q0 = status('queries');
is($node->safe_psql('postgres', $one), '3', 'worker serves again after the abandoned requests');
is(status('queries'), $q0 + 1, 'that search went through the worker');

# --- the worker terminated during a search -----------------------------------------
my ($generation) = status('generation');
kill 'STOP', $pid;
($bout, $berr) = ('', '');
$bg = IPC::Run::start(
	[ 'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'), '-c',
	  "SET application_name = 'victim'; SET cagra.worker_timeout = '60s'; "
	  . "SELECT string_agg(ctid::text, ',' ORDER BY distance, ctid) FROM cagra_search('items_v', ARRAY[(SELECT v FROM items WHERE id = 42)], 3)" ],
	'>', \$bout, '2>', \$berr);
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'victim' AND wait_event = 'Extension'")
  or die 'the search never waited on the worker';
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
kill 'CONT', $pid;
$bg->finish;
my $expected = $node->safe_psql('postgres',
	"SET cagra.device = cpu; SELECT string_agg(ctid::text, ',' ORDER BY distance, ctid) FROM cagra_search('items_v', ARRAY[(SELECT v FROM items WHERE id = 42)], 3)");
is((split /\n/, $bout)[-1], $expected, 'the search completed on the CPU with the right rows');
like($berr, qr/NOTICE:  cagra search runs on the CPU: the cagra GPU worker exited or restarted during the request/,
	'NOTICE says the worker went away');

# it comes back (bgw_restart_time 5 s) as a new generation, with an empty cache
$node->poll_query_until('postgres', "SELECT state = 'running' AND generation = $generation + 1 FROM cagra_status")
  or die 'worker did not come back';
isnt(status('pid'), $pid, 'a new worker process');
is(status('cached_indexes'), '0', 'the new worker starts with an empty cache');
is($node->safe_psql('postgres', $search), $node->safe_psql('postgres', "SET cagra.device = cpu; $search"),
	'searches go through the new worker with the same results');

# cancel while the worker runs a build: the session leaves the running
# request (and its mailbox); the worker finishes, frees the slot and serves
# the next build.  The build's rows outgrow maintenance_work_mem: its
# temporary files go with the cancel.
$node->safe_psql('postgres', q{
	CREATE TABLE big AS SELECT i AS id, array(SELECT sin(i * 0.1 + j) + cos(i * 0.013 * j)
	                                          FROM generate_series(1, 32) j)::vector(32) AS v
	  FROM generate_series(1, 30000) i});
my $builds0 = status('builds');
($bout, $berr) = ('', '');
$bg = IPC::Run::start(
	[ 'psql', '-X', '-d', $node->connstr('postgres'), '-c', "SET application_name = 'builder'",
	  '-c', "SET maintenance_work_mem = '1MB'", '-c', 'CREATE INDEX big_v ON big USING cagra (v)' ],
	'>', \$bout, '2>', \$berr);
$node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_progress_create_index p JOIN pg_stat_activity a USING (pid)
	 WHERE a.application_name = 'builder' AND p.phase LIKE '%kNN%'})
  or die 'the build never reached the worker';
$node->safe_psql('postgres', "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'builder'");
$bg->finish;
like($berr, qr/canceling statement due to user request/, 'CREATE INDEX cancelled while the worker builds');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_ls_tmpdir()'), '0', 'no temporary file left behind');
# the worker stops the abandoned build (test 106 times it) and serves the next
$node->safe_psql('postgres', 'CREATE INDEX big_v ON big USING cagra (v) WITH (graph_degree = 8, intermediate_graph_degree = 16)');
is(status('builds'), $builds0 + 1, 'the cancelled build was stopped, the next one goes through the worker');
is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('big_v')"), '0', 'and checks clean');

# storage = float16: the worker's copy holds halves, its searches find what
# the backend's do, and index scans through it come in exact distance order
$node->safe_psql('postgres', 'CREATE INDEX big_v16 ON big USING cagra (v) WITH (storage = float16)');
$node->safe_psql('postgres', 'DROP INDEX big_v');
my $search16 = "SELECT string_agg(query || ':' || ctid::text, ' ' ORDER BY query, distance, ctid)
                FROM cagra_search('big_v16', ARRAY(SELECT v FROM big WHERE id % 1000 = 0 ORDER BY id), 5)";
my $uploads16 = status('uploads');
is($node->safe_psql('postgres', $search16), $node->safe_psql('postgres', "SET cagra.device = cpu; $search16"),
	'float16 index: cagra_search through the worker as in the backend');
is(status('uploads'), $uploads16 + 1, 'float16 index copy uploaded to the worker');
my $order16 = q{SET enable_seqscan = off;
	SELECT bool_and(d >= prev) FROM (
	  SELECT d, lag(d, 1, 0::float8) OVER (ORDER BY n) AS prev FROM (
	    SELECT row_number() OVER () AS n, d FROM (
	      SELECT v <-> (SELECT v FROM big WHERE id = 777) AS d FROM big
	       ORDER BY v <-> (SELECT v FROM big WHERE id = 777) LIMIT 20) a) b) c};
my $queries16 = status('queries');
is($node->safe_psql('postgres', $order16), 't', 'float16 index scan through the worker: ascending exact distances');
is(status('queries'), $queries16 + 1, 'that scan was served by the worker');

# a build beyond maintenance_work_mem: the rows go to temporary files and
# stream to the worker during the scan, the backend holding no more than
# maintenance_work_mem, and the graph is the one a build with ample memory
# makes (both scans serial, so the rows come in the same order)
$node->safe_psql('postgres', q{SET max_parallel_maintenance_workers = 0;
	CREATE INDEX items_v_ample ON items USING cagra (v) WITH (graph_degree = 16)});
my $builds1 = status('builds');
my ($sret, $sout, $serr) = $node->psql('postgres', q{SET client_min_messages = debug1;
	SET maintenance_work_mem = '1MB'; SET max_parallel_maintenance_workers = 0;
	CREATE INDEX items_v_small ON items USING cagra (v) WITH (graph_degree = 16)});
is($sret, 0, '1MB build succeeds');
like($serr, qr/\d+ rows, beyond maintenance_work_mem: [\d.]+ MB of vectors in temporary files/,
	'its rows went to temporary files');
my ($held) = $serr =~ /the heap scan held at most (\d+) bytes of rows in memory \(maintenance_work_mem 1024 kB\); it streamed them to the worker/;
ok(defined $held, 'they streamed to the worker during the scan');
cmp_ok($held // 1e12, '<=', 1024 * 1024, 'the backend held at most maintenance_work_mem of them');
unlike($serr, qr/NOTICE/, 'without a NOTICE');
is(status('builds'), $builds1 + 1, 'the worker built it');
is($node->safe_psql('postgres', "SELECT nodes || '|' || built_nodes FROM cagra_index_info('items_v_small')"),
	$node->safe_psql('postgres', "SELECT count(*) || '|' || count(*) FROM items"), 'every row is in the built graph');
is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v_small')"), '0', 'it checks clean');

# node pages (block 1 on) with their WAL position (pd_lsn, pd_checksum) masked
sub node_pages
{
	my ($index) = @_;
	my $path = $node->data_dir . '/' . $node->safe_psql('postgres', "SELECT pg_relation_filepath('$index')");
	open(my $fh, '<:raw', $path) or die "open $path: $!";
	local $/;
	my $bytes = <$fh>;
	close($fh);
	my @pages;
	for (my $off = 8192; $off < length($bytes); $off += 8192)
	{
		my $page = substr($bytes, $off, 8192);
		substr($page, 0, 10) = "\0" x 10;
		push @pages, $page;
	}
	return join('', @pages);
}
$node->safe_psql('postgres', 'CHECKPOINT');
my $ample_pages = node_pages('items_v_ample');
ok(length($ample_pages) > 0 && node_pages('items_v_small') eq $ample_pages,
	'its node pages (TIDs, graph rows, vectors) equal those of the build with ample memory');
$node->safe_psql('postgres', 'DROP INDEX items_v; DROP INDEX items_v_ample');
(my $search_small = $search) =~ s/'items_v'/'items_v_small'/;
is($node->safe_psql('postgres', $search_small), $node->safe_psql('postgres', $exact_sql),
	'cagra_search finds the exact neighbours in it');

# cancel while the heap scan streams (a slow index expression keeps the
# scan going): the chunk in flight is given back, the worker builds nothing
# for it, and the next build streams and is built there
$node->safe_psql('postgres', q{
	CREATE FUNCTION slow_v(v vector) RETURNS vector IMMUTABLE LANGUAGE plpgsql AS
	  $$BEGIN PERFORM pg_sleep(0.0005); RETURN v; END$$});
my ($builds3, $fallbacks3) = split /\|/, status('builds, fallbacks');
($bout, $berr) = ('', '');
$bg = IPC::Run::start(
	[ 'psql', '-X', '-d', $node->connstr('postgres'), '-c', "SET application_name = 'streamer'",
	  '-c', "SET maintenance_work_mem = '1MB'", '-c', 'SET max_parallel_maintenance_workers = 0',
	  '-c', 'CREATE INDEX big_slow ON big USING cagra (slow_v(v))' ],
	'>', \$bout, '2>', \$berr);
$node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_progress_create_index p JOIN pg_stat_activity a USING (pid)
	 WHERE a.application_name = 'streamer' AND p.phase = 'building index: loading tuples'
	   AND p.tuples_done >= 5000})
  or die 'the build never streamed';
$node->safe_psql('postgres', "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'streamer'");
$bg->finish;
like($berr, qr/canceling statement due to user request/, 'CREATE INDEX cancelled while its scan streams');
is(status('builds, fallbacks'), "$builds3|$fallbacks3", 'the worker built nothing for it');
$node->safe_psql('postgres', 'CREATE INDEX big_v8 ON big USING cagra (v) WITH (graph_degree = 8, intermediate_graph_degree = 16)');
is(status('builds, fallbacks'), ($builds3 + 1) . "|$fallbacks3", 'the next build streams to the worker and is built there');
is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('big_v8')"), '0', 'and checks clean');
$node->safe_psql('postgres', 'DROP INDEX big_v8; DROP FUNCTION slow_v(vector)');

# vectors beyond cagra.gpu_memory_limit: the worker refuses the stream
# (every chunk after the first refused one too), the scan goes on and the
# graph is built in the backend, with a NOTICE that names the setting
$node->safe_psql('postgres', 'ALTER SYSTEM SET cagra.gpu_memory_limit = 1');
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
# the worker publishes the limit it read after a request
my $limit_taken = 0;
for (1 .. 300)
{
	$node->safe_psql('postgres', "SELECT count(*) FROM cagra_search('items_v_small', ARRAY[(SELECT v FROM items LIMIT 1)], 1)");
	$limit_taken = status('memory_limit_mb') eq '1' and last;
	sleep 0.1;
}
$limit_taken or die 'the worker did not take cagra.gpu_memory_limit = 1';
my ($builds2, $fallbacks2) = split /\|/, status('builds, fallbacks');
my ($lret, $lout, $lerr) = $node->psql('postgres', 'CREATE INDEX big_v_limited ON big USING cagra (v)');
is($lret, 0, 'a build whose vectors exceed cagra.gpu_memory_limit succeeds');
like($lerr, qr/NOTICE:  building index "big_v_limited" on the CPU: the GPU worker failed: the build's vectors need more than the 1 MB cagra.gpu_memory_limit allows/,
	'on the CPU, with a NOTICE naming the limit');
is(status('builds, fallbacks'), $builds2 . '|' . ($fallbacks2 + 1), 'the worker built nothing; one fallback counted');
is($node->safe_psql('postgres', "SELECT nodes || '|' || built_nodes FROM cagra_index_info('big_v_limited')"),
	'30000|30000', 'every row is in its graph');
is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('big_v_limited')"), '0', 'it checks clean');
$node->safe_psql('postgres', 'DROP INDEX big_v_limited');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET cagra.gpu_memory_limit');
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');

# build_device = gpu needs a GPU engine, not the CPU one
($ret, $out, $err) = $node->psql('postgres', 'CREATE INDEX ON items USING cagra (v) WITH (build_device = gpu)');
like($err, qr/no cagra GPU worker is available/, 'build_device = gpu refused with the CPU engine');

$node->stop;
done_testing();
