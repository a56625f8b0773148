# test/t/108_worker_cancel_storm.pl — the worker's request slots under
# load and cancels (its CPU engine): sessions whose cagra_search calls are
# cancelled by a 2 ms statement_timeout, at any step of their round trip
# (queued, taken, answered, uploading the copy), and calls of 3,000 queries
# in parts cancelled after 15 ms (also while a part waits on the worker as
# the one before is settled), run beside clients whose index scans must all
# succeed.  Slots move by compare-and-swap
# (protocol.h); a slot freed twice, answered after it was reused or lost
# would show as a failed or wrong search, a worker that stops answering, or
# slots that never come back.  Then sessions cancelled while they upload
# the copy: the next session must not be told the dead one is loading (it
# was, for twice cagra.worker_timeout, before the worker checked that the
# uploading backend still exists; rounds 2-5 and 7 of 12 failed so).  Last,
# sessions with cagra.device = gpu that meet a copy another one is loading
# must wait for it, not fail.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CagraGpuNode;

my $node = CagraGpuNode::cpu_worker('cancelstorm', "max_connections = 40\n");

$node->safe_psql('postgres', q{
	CREATE TABLE items (id int PRIMARY KEY, v vector(16));
	INSERT INTO items SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) + cos(i * 0.11 * j)
	                                  FROM generate_series(1, 16) j)::vector
	  FROM generate_series(1, 20000) i;
	CREATE INDEX items_v ON items USING cagra (v) WITH (graph_degree = 16);
});
my $generation = $node->safe_psql('postgres', 'SELECT generation FROM cagra_status');

my $scan = q{
	\set q random(1, 20000)
	SET enable_seqscan = off;
	SELECT id FROM items ORDER BY v <-> (SELECT v FROM items WHERE id = :q) LIMIT 10;
};
my $cancelled = q{
	\set q random(1, 19900)
	DO $$ BEGIN
	  SET LOCAL statement_timeout = '2ms';
	  PERFORM count(*) FROM cagra_search('items_v', ARRAY(SELECT v FROM items WHERE id BETWEEN 1 AND 80), 10);
	EXCEPTION WHEN query_canceled THEN NULL;
	END $$;
};

# 3,000 queries: three parts, the second and third queued on the worker
# while the backend settles the part before, so cancels also land while a
# request is pending there
my $pipelined = q{
	DO $$ BEGIN
	  SET LOCAL work_mem = '64MB';
	  SET LOCAL statement_timeout = '15ms';
	  PERFORM count(*) FROM cagra_search('items_v', ARRAY(SELECT v FROM items WHERE id <= 3000), 10);
	EXCEPTION WHEN query_canceled THEN NULL;
	END $$;
};

my $dir = PostgreSQL::Test::Utils::tempdir;
my @runs;
for my $run ([ 'scan', $scan, 4, '' ], [ 'cancelled', $cancelled, 6, '-C' ], [ 'pipelined', $pipelined, 3, '-C' ])
{
	my ($name, $script, $clients, $reconnect) = @$run;
	my $file = "$dir/$name.sql";
	PostgreSQL::Test::Utils::append_to_file($file, $script);
	my ($out, $err) = ('', '');
	my @cmd = ('pgbench', '-n', '-f', $file, '-c', $clients, '-j', 2, '-T', 8, ($reconnect ? ($reconnect) : ()),
		'-d', $node->connstr('postgres'));
	push @runs, [ $name, IPC::Run::start(\@cmd, '>', \$out, '2>', \$err), \$out, \$err ];
}
my %processed;
for my $r (@runs)
{
	my ($name, $h, $out, $err) = @$r;
	$h->finish;
	is($h->result(0), 0, "pgbench ($name) exited cleanly") or diag($$err);
	like($$out, qr/number of failed transactions: 0 /, "no $name transaction failed");
	($processed{$name}) = $$out =~ /number of transactions actually processed: (\d+)/;
}
cmp_ok($processed{scan}, '>', 0, "index scans ran ($processed{scan})");
cmp_ok($processed{cancelled}, '>', 0, "cancelled calls ran ($processed{cancelled})");
cmp_ok($processed{pipelined}, '>', 0, "cancelled pipelined calls ran ($processed{pipelined})");

is($node->safe_psql('postgres', 'SELECT state, generation FROM cagra_status'), "running|$generation",
	'the worker still runs, in the same generation');
is($node->safe_psql('postgres', 'SELECT uploads FROM cagra_status'), '1', 'one copy uploaded, none stuck');

# the worker serves the next search, with the right rows
my $before = $node->safe_psql('postgres', 'SELECT queries FROM cagra_status');
my $check = q{
	SET enable_seqscan = off;
	SELECT string_agg(id::text, ',') FROM (
	  SELECT id FROM items ORDER BY v <-> (SELECT v FROM items WHERE id = 4242) LIMIT 3) s};
my $result = $node->safe_psql('postgres', $check);
like($result, qr/^4242,/, 'a search after the storm finds the row itself first');
is($node->safe_psql('postgres', 'SELECT queries FROM cagra_status'), $before + 1, 'through the worker');
is($node->safe_psql('postgres', "SET cagra.device = cpu; $check"), $result, 'same rows as the CPU search');

# --- a session cancelled while it uploads the copy -----------------------------
# Each REINDEX makes a new copy key, so the next search uploads the copy;
# that search is cancelled after 1 to 12 ms, in some rounds before the
# worker saw it, in others while the session streams the copy.  The session
# then exits; the next session's search must be served by the worker at
# once (it uploads the copy itself), not told that the dead one is loading.
my @missed;
for my $ms (1 .. 12)
{
	$node->safe_psql('postgres', 'REINDEX INDEX items_v');
	$node->psql('postgres', qq{
		SET statement_timeout = '${ms}ms';
		SELECT count(*) FROM cagra_search('items_v', ARRAY(SELECT v FROM items WHERE id <= 50), 10)});
	# its backend is gone (exiting after the client left takes a moment)
	$node->poll_query_until('postgres', q{
		SELECT count(*) = 0 FROM pg_stat_activity
		 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()});
	my $q = $node->safe_psql('postgres', 'SELECT queries FROM cagra_status');
	$node->safe_psql('postgres', "SET enable_seqscan = off; $check");
	push @missed, $ms if $node->safe_psql('postgres', 'SELECT queries FROM cagra_status') != $q + 1;
}
is(join(',', @missed), '', 'after every cancelled upload the next search went to the worker');

# --- sessions that demand the GPU while another loads the copy ------------
# With cagra.device = gpu a search that meets a copy another session is
# uploading waits for it (with auto it searches on the CPU meanwhile).
# Each round makes a new copy key, then eight sessions search at once: one
# uploads, the others must wait and succeed.
my $demanding = "$dir/demanding.sql";
PostgreSQL::Test::Utils::append_to_file($demanding, q{
	\set q random(1, 20000)
	SET cagra.device = gpu;
	SET enable_seqscan = off;
	SELECT id FROM items ORDER BY v <-> (SELECT v FROM items WHERE id = :q) LIMIT 10;
});
my @failed_rounds;
for my $round (1 .. 10)
{
	$node->safe_psql('postgres', 'REINDEX INDEX items_v');
	my $uploads = $node->safe_psql('postgres', 'SELECT uploads FROM cagra_status');
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ 'pgbench', '-n', '-f', $demanding, '-c', 8, '-j', 8, '-t', 3,
							 '-d', $node->connstr('postgres') ], '>', \$out, '2>', \$err);
	push @failed_rounds, "$round: " . join('', grep { /ERROR|error/ } split /^/, $err)
	  unless $ok && $out =~ /number of failed transactions: 0 /
	  && $node->safe_psql('postgres', 'SELECT uploads FROM cagra_status') == $uploads + 1;
}
is(join("\n", @failed_rounds), '', 'sessions demanding the GPU waited for the copy one of them loaded');

$node->stop;
done_testing();
