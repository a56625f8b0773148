# test/t/114_worker_inserts.pl — with cagra.device = gpu inserts are
# planned by the worker (its CPU engine, cagra.worker_backend = cpu; with
# auto they stay in the backend): appended rows are linked a run of 16 at a
# time, each run one worker request whose queries are planned in one
# batch, and an insert into a freed slot is one worker query and plan; the
# worker's copy takes the inserted nodes
# through updates with no whole upload, every inserted row finds itself
# through the index, linked or not (a session keeps the appended nodes its
# merges read, and its later searches find rows appended since), inserts of
# several sessions queued
# while the worker is busy share one launch even when other inserts came
# between them (their keys differ, one copy serves them), and a worker
# terminated while inserts wait on it fails only the inserts it held,
# leaving an index that checks clean.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CagraGpuNode;
use IPC::Run;

my $node = CagraGpuNode::cpu_worker('inserts', "max_connections = 40\n");

my $dims = 16;
my $vector = sub {
	my ($seed) = @_;
	return "array(SELECT sin($seed * 0.37 + j * 1.3) + cos($seed * 0.11 * j) FROM generate_series(1, $dims) j)::vector";
};
$node->safe_psql('postgres', 'CREATE TABLE items (id int PRIMARY KEY, v vector(' . $dims . ')) '
	  . 'WITH (autovacuum_enabled = off)');
$node->safe_psql('postgres', 'INSERT INTO items SELECT i, ' . $vector->('i') . ' FROM generate_series(1, 2000) i');
$node->safe_psql('postgres', 'CREATE INDEX items_v ON items USING cagra (v) WITH (graph_degree = 16)');

sub status
{
	my ($cols) = @_;
	return $node->safe_psql('postgres', "SELECT $cols FROM cagra_status");
}

# Rows with id > $from that do not find themselves first through the index.
sub lost_rows
{
	my ($from, $device) = @_;
	return $node->safe_psql('postgres', qq{
		SET enable_seqscan = off; SET cagra.device = $device;
		SELECT count(*) FROM items i
		 WHERE i.id > $from
		   AND (SELECT j.id FROM items j ORDER BY j.v <-> i.v LIMIT 1) IS DISTINCT FROM i.id});
}

# --- inserts through the worker ---------------------------------------------------
# a first search loads the copy, so the inserts below meet it
$node->safe_psql('postgres', 'SELECT count(*) FROM cagra_search(\'items_v\', ARRAY[(SELECT v FROM items WHERE id = 1)], 1)');
my $plans = sub { $node->safe_psql('postgres', "SELECT events FROM cagra_worker_timings() WHERE step = 'plan'") };
my ($q0, $f0, $u0) = split /\|/, status('queries, fallbacks, uploads');
my $p0 = $plans->();
my $updates = sub { $node->safe_psql('postgres', "SELECT events FROM cagra_worker_timings() WHERE step = 'update'") };
my $up0 = $updates->();
$node->safe_psql('postgres', "SET cagra.device = gpu; INSERT INTO items VALUES (" . join('), (', map { "$_, " . $vector->($_) } 2001 .. 2200) . ')');
# ids 2000 to 2199: the runs of 16 up to 2191 are linked (by linkers, or
# by the inserts when the linkers fall behind), 2192 on are not
ok($node->poll_query_until('postgres', "SELECT unlinked_nodes = 8 FROM cagra_index_info('items_v')"),
	'200 rows appended: the last 8, short of a run, stay unlinked');
my ($q1, $f1, $u1) = split /\|/, status('queries, fallbacks, uploads');
is($q1 - $q0, 192, 'the worker searched the neighbours of each of the 192 rows linked');
my $batches = $plans->() - $p0;
ok($batches >= 3 && $batches <= 12, "and planned them a run or more (up to 4) a batch: $batches batches");
is($f1 - $f0, 0, 'none fell back to the CPU');
# a copy of 2,000 nodes leaves at most 64 inserted ones to the backends:
# past 16 the inserting backend sends them, with the rows their reverse
# edges changed, and the copy grows without a whole upload
is($u1 - $u0, 0, 'the 200 inserts made no whole upload of the copy');
# the update goes with a search: the linkers' last request may have been
# made before the last runs were linked
$node->safe_psql('postgres', 'SELECT count(*) FROM cagra_search(\'items_v\', ARRAY[(SELECT v FROM items WHERE id = 1)], 1)');
ok($node->poll_query_until('postgres', "SELECT nodes >= 2184 FROM cagra_worker_cache()"),
	'the copy took the inserted nodes (at most 16 left to the backends)');
cmp_ok($updates->() - $up0, '>', 0, 'cagra_worker_timings counts the updates the copy took');
is(lost_rows(2000, 'auto'), '0', 'every row inserted through the worker finds itself (scan through the worker)');
# a filtered search through the updated copy (which finds its nodes by
# their heap TIDs) returns only allowed rows, the inserted one first
is( $node->safe_psql(
		'postgres', q{
	SET cagra.device = gpu;
	SELECT count(*), bool_and(i.id BETWEEN 2001 AND 2150), (array_agg(i.id ORDER BY r.distance))[1]
	  FROM cagra_search('items_v', ARRAY[(SELECT v FROM items WHERE id = 2100)], 5,
						ARRAY(SELECT ctid FROM items WHERE id BETWEEN 2001 AND 2150)) r
	  JOIN items i ON i.ctid = r.ctid}),
	'5|t|2100', 'a filtered search through the updated copy finds the inserted rows it allows');
# allowed rows many enough for the worker to search among (the few above
# are measured in the backend): each of the last inserted rows, on heap
# blocks the copy had no rows of before, finds itself
my $qf = status('queries');
is( $node->safe_psql(
		'postgres', q{
	SET cagra.device = gpu;
	SELECT count(*) FROM cagra_search('items_v', ARRAY(SELECT v FROM items WHERE id > 2150 ORDER BY id), 1,
									  ARRAY(SELECT ctid FROM items WHERE id % 3 = 0 OR id > 2150)) r
	  JOIN items i ON i.ctid = r.ctid
	 WHERE i.id > 2150}),
	'50', 'a filtered search through the worker finds each appended row it allows');
cmp_ok(status('queries') - $qf, '>=', 50, 'the worker searched them');
is(lost_rows(2000, 'cpu'), '0', 'and through a scan on the CPU');
is($node->safe_psql('postgres', "SELECT string_agg(p, '; ') FROM cagra_index_check('items_v') p"), '',
	'index check clean');

# a stream of similar rows, a run of 16 near one point far from the rest:
# the worker plans every row of the run (a run's rows are not each other's
# candidates), where each row's nearest, the run's rows before it, would
# have left its plan to the backend
my $nodes = $node->safe_psql('postgres', "SELECT nodes FROM cagra_index_info('items_v')");
my $fill = (16 - $nodes % 16) % 16;
$node->safe_psql('postgres', "SET cagra.device = gpu; INSERT INTO items VALUES ("
	  . join('), (', map { "$_, " . $vector->($_) } 6001 .. 6000 + $fill) . ')')
  if $fill > 0;
my $near = sub {
	my ($k) = @_;
	return "array(SELECT 40 + 0.001 * $k * j FROM generate_series(1, $dims) j)::vector";
};
# the run is linked by a linker or by the insert: the message is looked for
# in the server log, where DEBUG1 goes while the run is linked
$node->poll_query_until('postgres', "SELECT unlinked_nodes = 0 FROM cagra_index_info('items_v')");
$node->append_conf('postgresql.conf', "log_min_messages = debug1\n");
$node->reload;
my $log_from = -s $node->logfile;
my ($ok, $stdout, $stderr) = $node->psql('postgres',
	"SET cagra.device = gpu; SET client_min_messages = debug1; INSERT INTO items VALUES ("
	  . join('), (', map { (6100 + $_) . ', ' . $near->($_) } 1 .. 16) . ')');
is($ok, 0, 'a run of 16 similar rows inserted');
ok($node->poll_query_until('postgres', "SELECT unlinked_nodes = 0 FROM cagra_index_info('items_v')"),
	'the run is linked');
my $linked_log = slurp_file($node->logfile, $log_from);
like($linked_log, qr/LOG:  statement: INSERT INTO items VALUES \(6101, /,
	'the server log of the run is read');
is(scalar(() = ($stderr . $linked_log) =~ /planned in the backend/g), 0, 'the worker planned each of them')
  or diag($stderr . $linked_log);
$node->append_conf('postgresql.conf', "log_min_messages = warning\n");
$node->reload;
is(lost_rows(6100, 'cpu'), '0', 'each of them finds itself');
is($node->safe_psql('postgres', "SELECT string_agg(p, '; ') FROM cagra_index_check('items_v') p"), '',
	'index check clean after the stream');

# one session: the appended nodes its merges read are kept, and those
# appended since are read at its next merge
is( $node->safe_psql(
		'postgres', q{
	SET enable_seqscan = off; SET cagra.device = gpu;
	INSERT INTO items VALUES (2250, } . $vector->(2250) . q{);
	SELECT id FROM items ORDER BY v <-> (SELECT v FROM items WHERE id = 2250) LIMIT 1;
	INSERT INTO items VALUES (2251, } . $vector->(2251) . q{);
	SELECT id FROM items ORDER BY v <-> (SELECT v FROM items WHERE id = 2251) LIMIT 1;}),
	"2250\n2251", 'rows appended in one session are found by its later searches');

# four sessions inserting at once: their updates race (the later ones find
# the copy moved on), and searches read before an update meet a copy that
# holds nodes they do not count yet
my @writers;
for my $w (0 .. 3)
{
	my $sql = "SET cagra.device = gpu;\n" . join('', map { "INSERT INTO items VALUES ($_, " . $vector->($_) . ");\n" }
		  grep { $_ % 4 == $w } 5001 .. 5240);
	push @writers, IPC::Run::start(
		[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres') ],
		'<', \$sql, '>', \my $out, '2>', \my $err);
}
$_->finish or die 'an inserting session failed' for @writers;
my ($u2, $f2) = split /\|/, status('uploads, fallbacks');
is("$u2|$f2", "$u1|$f1", 'four sessions inserting at once: no whole upload, no fallback');
is(lost_rows(5000, 'auto'), '0', 'every row they inserted finds itself through the worker');
is($node->safe_psql('postgres', "SELECT string_agg(p, '; ') FROM cagra_index_check('items_v') p"), '',
	'index check clean');

# cagra.device = auto (the default): an appended row that ends no run asks
# nothing of the worker
$q0 = status('queries');
$node->safe_psql('postgres', 'INSERT INTO items VALUES (2201, ' . $vector->(2201) . ')');
is(status('queries'), $q0, 'cagra.device = auto: the insert did not ask the worker');

# --- batching across generations --------------------------------------------------
# a vacuum makes the next search load a fresh copy, which then serves every
# insert below (a copy serves a bounded count of inserts made after it); the
# slots it frees make each insert below search and plan at once
$node->safe_psql('postgres', 'DELETE FROM items WHERE id <= 30');
$node->safe_psql('postgres', 'VACUUM items');
$node->safe_psql('postgres', 'SELECT count(*) FROM cagra_search(\'items_v\', ARRAY[(SELECT v FROM items WHERE id = 1)], 1)');
# The worker stopped: two inserts queue their searches, an insert on the CPU
# counts a node (a new generation), two more queue theirs with the newer key.
# One copy serves all four: one launch when the worker comes back.
my ($b0, $qb0) = split /\|/, status('batches, queries');
my $pid = status('pid');
kill 'STOP', $pid;
my @h;
my $queue = sub {
	my ($id) = @_;
	push @h, IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'), '-c',
		  "SET cagra.worker_timeout = '60s'; SET cagra.device = gpu; INSERT INTO items VALUES ($id, " . $vector->($id) . ')' ],
		'>', \my $out, '2>', \my $err);
};
my $waiting = sub {
	my ($count) = @_;
	$node->poll_query_until('postgres', qq{
		SELECT count(*) = $count FROM pg_stat_activity
		 WHERE wait_event_type = 'Extension' AND query LIKE '%INSERT INTO items%' AND pid <> pg_backend_pid()})
	  or die "$count inserts never waited on the worker";
};
$queue->($_) for 2301, 2302;
$waiting->(2);
$node->safe_psql('postgres', 'SET cagra.device = cpu; INSERT INTO items VALUES (2300, ' . $vector->(2300) . ')');
$queue->($_) for 2303, 2304;
$waiting->(4);
kill 'CONT', $pid;
$_->finish for @h;
my ($b1, $qb1) = split /\|/, status('batches, queries');
is($qb1 - $qb0, 4, 'four insert searches served');
is($b1 - $b0, 1, 'in one launch, though an insert came between them');
is($node->safe_psql('postgres', 'SELECT count(*) FROM items WHERE id BETWEEN 2300 AND 2304'), '5',
	'all five rows inserted');
is(lost_rows(2200, 'cpu'), '0', 'each finds itself');

# --- the worker terminated while inserts wait on it -----------------------------
# With cagra.device = gpu an insert the worker held fails; nothing of it
# stays, and the index checks clean.
my $generation = status('generation');
my $count_before = $node->safe_psql('postgres', 'SELECT count(*) FROM items');
$pid = status('pid');
kill 'STOP', $pid;
@h = ();
my @errs;
for my $id (3001, 3002)
{
	my ($out, $err) = ('', '');
	push @h, IPC::Run::start(
		[ 'psql', '-X', '-A', '-t', '-d', $node->connstr('postgres'), '-c',
		  "SET cagra.worker_timeout = '60s'; SET cagra.device = gpu; INSERT INTO items VALUES ($id, " . $vector->($id) . ')' ],
		'>', \$out, '2>', \$err);
	push @errs, \$err;
}
$waiting->(2);
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
kill 'CONT', $pid;
$_->finish for @h;
like(${ $errs[0] } . ${ $errs[1] }, qr{cagra}, 'the inserts the worker held failed with cagra.device = gpu');
is($node->safe_psql('postgres', 'SELECT count(*) FROM items'), $count_before, 'and left no row');
is($node->safe_psql('postgres', "SELECT string_agg(p, '; ') FROM cagra_index_check('items_v') p"), '',
	'index check clean after the worker died');
is($node->safe_psql('postgres', "SELECT live_nodes = (SELECT count(*) FROM items) FROM cagra_index_info('items_v')"),
	't', 'the live count is the table\'s');
$node->safe_psql('postgres', 'INSERT INTO items VALUES (3003, ' . $vector->(3003) . ')');
is(lost_rows(3000, 'cpu'), '0', 'an insert with cagra.device = auto meanwhile finds itself');

# the worker comes back and serves inserts again
$node->poll_query_until('postgres', "SELECT state = 'running' AND generation > $generation FROM cagra_status")
  or die 'worker did not come back';
$q0 = status('queries');
$node->safe_psql('postgres', 'SET cagra.device = gpu; INSERT INTO items VALUES (20001, ' . $vector->(20001) . ')');
ok(status('queries') > $q0, 'the new worker serves inserts');
is(lost_rows(20000, 'auto'), '0', 'and the row finds itself');

# --- rows inserted into freed slots, found by their TIDs ------------------------
# A filtered search finds the copy's nodes by their heap TIDs.  Rows
# inserted into slots a vacuum freed give those nodes new TIDs through the
# copy's updates; the wider new rows mostly land on other heap pages, so
# most freed TIDs are left unused.  Allowed the freed TIDs, the search must
# return the rows at them now, each once, and no node by a TID it had.
$node->safe_psql('postgres', q{
	CREATE TABLE reused (id int PRIMARY KEY, v vector(16), pad text) WITH (autovacuum_enabled = off);
	INSERT INTO reused SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) + cos(i * 0.11 * j)
	                                  FROM generate_series(1, 16) j)::vector FROM generate_series(1, 2000) i;
	CREATE INDEX reused_v ON reused USING cagra (v) WITH (graph_degree = 16);
	CREATE TABLE freed AS SELECT ctid AS t FROM reused WHERE id <= 40;
	DELETE FROM reused WHERE id <= 40;
	VACUUM reused;
});
$u0 = status('uploads');
$node->safe_psql('postgres', q{
	SET cagra.device = gpu;
	SELECT count(*) FROM cagra_search('reused_v', ARRAY[(SELECT v FROM reused WHERE id = 100)], 1);
	INSERT INTO reused SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) + cos(i * 0.11 * j)
	                                   FROM generate_series(1, 16) j)::vector, repeat('x', 500)
	  FROM generate_series(7001, 7040) i;
});
is(status('uploads') - $u0, 1, 'one whole upload, the first search\'s: the inserts went to the copy as updates');
my $at_freed = $node->safe_psql('postgres', 'SELECT count(*) FROM reused WHERE ctid IN (SELECT t FROM freed)');
cmp_ok($at_freed, '<', 40, "the new rows took other TIDs ($at_freed of 40 at freed ones)");
is( $node->safe_psql(
		'postgres', q{
	SET cagra.device = gpu;
	SELECT count(*), count(DISTINCT r.ctid), count(*) FILTER (WHERE r.ctid IN (SELECT t FROM freed))
	  FROM cagra_search('reused_v', ARRAY[(SELECT v FROM reused WHERE id = 7020)], 40,
						ARRAY(SELECT t FROM freed)) r}),
	"$at_freed|$at_freed|$at_freed", 'allowed the freed TIDs, the search returns the rows at them now, once each');

# --- linkers stopped, and none to start --------------------------------------------
# Linkers terminated while sessions insert leave their runs unlinked, never
# lost: the next linkers link them, and every row finds itself.
$node->safe_psql('postgres', 'CREATE TABLE streamed (id int PRIMARY KEY, v vector(16)); '
	  . 'CREATE INDEX streamed_v ON streamed USING cagra (v) WITH (graph_degree = 16); '
	  . 'INSERT INTO streamed SELECT i, ' . $vector->('i') . ' FROM generate_series(1, 500) i');
my $inserter = IPC::Run::start(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'), '-c',
	  join('; ', map { my $f = 1000 + 40 * $_; "INSERT INTO streamed SELECT i, " . $vector->('i')
			. " FROM generate_series($f, " . ($f + 39) . ") i" } 0 .. 99) ],
	'>', \my $ins_out, '2>', \my $ins_err);
my $terminated = 0;
while ($inserter->pumpable)
{
	$terminated += $node->safe_psql('postgres',
		"SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE backend_type = 'cagra linker'");
	$inserter->pump_nb;
}
ok($inserter->finish, 'a session inserted 4,000 rows while linkers were terminated') or diag($ins_err);
cmp_ok($terminated, '>', 0, "linkers were terminated ($terminated)");
# the next run's insert hands them to a linker
$node->safe_psql('postgres', "INSERT INTO streamed SELECT i, " . $vector->('i') . " FROM generate_series(8001, 8016) i");
ok($node->poll_query_until('postgres', "SELECT unlinked_nodes < 16 FROM cagra_index_info('streamed_v')"),
	'the runs they left are linked after the next run');
is($node->safe_psql('postgres', q{
	SET enable_seqscan = off;
	SELECT count(*) FROM streamed i
	 WHERE (SELECT j.id FROM streamed j ORDER BY j.v <-> i.v LIMIT 1) IS DISTINCT FROM i.id}), '0',
	'every row finds itself');
is($node->safe_psql('postgres', "SELECT string_agg(p, '; ') FROM cagra_index_check('streamed_v') p"), '',
	'index check clean after the linkers were terminated');

# A temporary table's index lives in its session's own buffers: its runs
# are linked by the inserts, never handed to a linker.
is( $node->safe_psql(
		'postgres', "CREATE TEMP TABLE scratch (id int, v vector(16));
	CREATE INDEX scratch_v ON scratch USING cagra (v) WITH (graph_degree = 16);
	INSERT INTO scratch SELECT i, " . $vector->('i') . " FROM generate_series(1, 100) i;
	INSERT INTO scratch SELECT i, " . $vector->('i') . " FROM generate_series(101, 300) i;
	SELECT unlinked_nodes FROM cagra_index_info('scratch_v');
	SELECT count(*) FROM cagra_index_check('scratch_v');
	SET enable_seqscan = off;
	SELECT count(*) FROM scratch i WHERE (SELECT j.id FROM scratch j ORDER BY j.v <-> i.v LIMIT 1) IS DISTINCT FROM i.id"),
	"12\n0\n0", 'a temporary index: its inserts link every run they end, it checks clean and every row finds itself');

# With no background worker slot left for a linker (the logical
# replication launcher and the GPU worker hold both), the insert ending a
# run links it.
$node->append_conf('postgresql.conf', "max_worker_processes = 2\n");
$node->restart;
$node->poll_query_until('postgres', "SELECT state = 'running' FROM cagra_status") or die 'worker not running';
my $n0 = $node->safe_psql('postgres', "SELECT nodes FROM cagra_index_info('streamed_v')");
$node->safe_psql('postgres', "INSERT INTO streamed SELECT i, " . $vector->('i') . " FROM generate_series(9001, 9100) i");
is($node->safe_psql('postgres', "SELECT unlinked_nodes FROM cagra_index_info('streamed_v')"), ($n0 + 100) % 16,
	'no linker can start: the inserts linked every run they ended');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'cagra linker'"), '0',
	'and no linker runs');

$node->stop;
done_testing();
