# test/t/106_worker_build_no_stall.pl — one user's long build on the worker
# (CPU engine: cagra.worker_backend = cpu) must not make other work wait:
# searches of other sessions and databases keep being served by the worker
# while it builds, a cancelled build stops in the worker within seconds
# (the next build is served at once), DROP DATABASE of an unrelated database
# and a fast shutdown are answered within seconds.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use CagraGpuNode;

my $node = CagraGpuNode::cpu_worker('buildstall', "cagra.worker_timeout = '10s'\n");

# a small index searched by the worker, and a table whose build with a huge
# degree takes the worker's CPU engine a minute or more
$node->safe_psql('postgres', q{
	CREATE TABLE small (id int PRIMARY KEY, v vector(16));
	INSERT INTO small SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) FROM generate_series(1, 16) j)::vector
	  FROM generate_series(1, 2000) i;
	CREATE INDEX small_v ON small USING cagra (v);
	CREATE TABLE big (id int, v vector(64));
	INSERT INTO big SELECT i, array(SELECT sin(i * 0.013 * j + j) FROM generate_series(1, 64) j)::vector
	  FROM generate_series(1, 10000) i;
	CREATE ROLE builder LOGIN;
	GRANT CREATE ON SCHEMA public TO builder;
	GRANT ALL ON big TO builder;
	ALTER TABLE big OWNER TO builder;
});
$node->safe_psql('postgres', 'CREATE DATABASE other');

my $search = q{SELECT count(*) FROM cagra_search('small_v',
	ARRAY(SELECT v FROM small WHERE id % 200 = 0), 5)};
is($node->safe_psql('postgres', $search), '50', 'the worker serves searches before the build');
my $served_before = $node->safe_psql('postgres', 'SELECT queries FROM cagra_status');

# the long build, by an ordinary user, in the background
# A session running a minute-long CREATE INDEX (as $role) of $index, once
# the worker is in its graph build; returns the session and its pid.
sub start_long_build
{
	my ($index, $role) = @_;
	my $session = $node->background_psql('postgres', on_error_stop => 0);

	$session->query_safe("SET ROLE $role") if $role;
	$session->query_safe("SET maintenance_work_mem = '1GB'");
	my $pid = $session->query_safe('SELECT pg_backend_pid()');
	$session->query_until(qr/started/, qq{
	\\echo started
	CREATE INDEX $index ON big USING cagra (v) WITH (graph_degree = 512, intermediate_graph_degree = 1024);
});
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_progress_create_index WHERE pid = $pid AND phase LIKE '%kNN%'")
	  or die "the build of $index never reached the worker";
	sleep 1;    # the worker is in the graph build now
	return ($session, $pid);
}

my ($build, $pid) = start_long_build('big_v', 'builder');

# searches are served while it builds, by the worker, each well within the timeout
my ($slowest, $ok) = (0, 1);
for my $i (1 .. 5)
{
	my $t0 = time;
	$ok &&= $node->safe_psql('postgres', $search) eq '50';
	my $took = time - $t0;
	$slowest = $took if $took > $slowest;
}
ok($ok, 'searches during the build return their rows');
cmp_ok($slowest, '<', 3, "each search during the build answered in under 3 s (slowest $slowest s)");
cmp_ok($node->safe_psql('postgres', 'SELECT queries FROM cagra_status'), '>=', $served_before + 50,
	'the worker served them (no CPU fallback)');
is($node->safe_psql('postgres', 'SELECT fallbacks FROM cagra_status'), '0', 'no fallback');

# DROP DATABASE needs every backend, the worker too, to absorb a barrier
my $t0 = time;
$node->safe_psql('postgres', 'DROP DATABASE other');
cmp_ok(time - $t0, '<', 5, 'DROP DATABASE of an unrelated database is answered during the build');

# cancel the build: the worker stops it, and the next build is served at once
$t0 = time;
$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
$node->poll_query_until('postgres',
	"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid AND query LIKE 'CREATE INDEX%' AND state = 'active'")
  or die 'the build was not cancelled';
$build->quit;
my $builds = $node->safe_psql('postgres', 'SELECT builds FROM cagra_status');
$t0 = time;
$node->safe_psql('postgres', 'CREATE INDEX small_v2 ON small USING cagra (v)');
my $took = time - $t0;
cmp_ok($took, '<', 5, "the next build is served within seconds of the cancel ($took s)");
is($node->safe_psql('postgres', 'SELECT builds FROM cagra_status'), $builds + 1,
	'the next build ran on the worker');
like($node->safe_psql('postgres', "SELECT build_device FROM cagra_index_info('small_v2')"), qr/cpu/,
	'its graph came from the worker (CPU engine)');

# a build that is running when the server stops does not hold up a fast shutdown
my ($build2) = start_long_build('big_v2');
$t0 = time;
$node->stop('fast');
$took = time - $t0;
cmp_ok($took, '<', 10, "fast shutdown during a worker build takes seconds ($took s)");
eval { $build2->quit };

done_testing();
