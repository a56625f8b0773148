# test/t/015_worker_cache_privileges.pl — who sees the worker's cache:
# cagra_worker_cache() is for pg_monitor (not PUBLIC), and a role granted
# the function without the privileges of pg_read_all_stats sees only the
# copies of its own database, as pg_stat_activity hides other users'
# queries.  With the worker's CPU engine (no GPU needed).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CagraGpuNode;

my $node = CagraGpuNode::cpu_worker('cacheprivs', '', 1);
$node->safe_psql('postgres', 'CREATE DATABASE other');
for my $db ('postgres', 'other')
{
	$node->safe_psql($db, q{
		CREATE EXTENSION cagra;
		CREATE TABLE items (id int PRIMARY KEY, v vector(8));
		INSERT INTO items SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) FROM generate_series(1, 8) j)::vector
		  FROM generate_series(1, 500) i;
		CREATE INDEX items_v ON items USING cagra (v) WITH (graph_degree = 8, intermediate_graph_degree = 16);
	});
}
$node->poll_query_until('postgres', "SELECT state = 'running' FROM cagra_status")
  or die 'worker not running';
# one search in each database: the worker caches a copy of each index
for my $db ('postgres', 'other')
{
	$node->safe_psql($db, "SELECT count(*) FROM cagra_search('items_v', ARRAY['[1,1,1,1,1,1,1,1]']::vector[], 3)");
}
is($node->safe_psql('postgres', 'SELECT count(DISTINCT database) FROM cagra_worker_cache()'), '2',
	'the superuser sees the copies of both databases');

$node->safe_psql('postgres', q{
	CREATE ROLE app LOGIN;
	CREATE ROLE watcher LOGIN IN ROLE pg_monitor;
	CREATE ROLE granted LOGIN;
	GRANT EXECUTE ON FUNCTION cagra_worker_cache() TO granted;
});

my ($ret, $out, $err) = $node->psql('postgres', 'SELECT count(*) FROM cagra_worker_cache()',
	extra_params => [ '-U', 'app' ]);
like($err, qr/permission denied for function cagra_worker_cache/, 'not for PUBLIC');
($ret, $out, $err) = $node->psql('postgres', 'SELECT state FROM cagra_status', extra_params => [ '-U', 'app' ]);
like($err, qr/permission denied for view cagra_status/, 'the view neither');

is($node->safe_psql('postgres', 'SELECT count(DISTINCT database) FROM cagra_worker_cache()',
	extra_params => [ '-U', 'watcher' ]), '2', 'pg_monitor sees every database');
is($node->safe_psql('postgres', 'SELECT state FROM cagra_status', extra_params => [ '-U', 'watcher' ]),
	'running', 'and the status');

is($node->safe_psql('postgres',
	"SELECT count(*) FILTER (WHERE database = (SELECT oid FROM pg_database WHERE datname = current_database())) || '/' || count(*) FROM cagra_worker_cache()",
	extra_params => [ '-U', 'granted' ]), '1/1',
	'a role granted the function alone sees its own database only');

$node->stop;
done_testing();
