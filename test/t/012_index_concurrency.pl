# test/t/012_index_concurrency.pl — concurrent inserts, searches, deletes and
# vacuums on one cagra index under pgbench end with no error, a clean
# cagra_index_check, a live count equal to the table's, and good answers.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('concurrency');
$node->init;
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION cagra;
	SELECT setseed(0.9);
	CREATE TABLE items (id bigserial PRIMARY KEY, v vector(8));
	INSERT INTO items (v) SELECT ARRAY[random(), random(), random(), random(),
	                                   random(), random(), random(), random()]::vector
	  FROM generate_series(1, 3000);
	CREATE INDEX items_v ON items USING cagra (v vector_l2_ops)
	  WITH (graph_degree = 16, intermediate_graph_degree = 32);
});

my $vec = "ARRAY[random(), random(), random(), random(), random(), random(), random(), random()]::vector";
$node->pgbench(
	'-n -c 6 -j 2 -t 150',
	0,
	[qr{actually processed: 900/900}],
	[qr{^$}],
	'concurrent inserts, searches, deletes and vacuum',
	{
		'cagra-insert@6' => "INSERT INTO items (v) VALUES ($vec);",
		'cagra-search@6' =>
		  "SET enable_seqscan = off; SELECT id FROM items ORDER BY v <-> $vec LIMIT 10;",
		'cagra-delete@2' =>
		  "DELETE FROM items WHERE id IN (SELECT id FROM items ORDER BY v <-> $vec LIMIT 2);",
		'cagra-vacuum@1' => "VACUUM items;",
	});

is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v')"),
	'0', 'index check clean');
$node->safe_psql('postgres', 'VACUUM items');
is( $node->safe_psql('postgres',
		"SELECT live_nodes = (SELECT count(*) FROM items) FROM cagra_index_info('items_v')"),
	't', 'live count equals the table after vacuum');

# Recall@10 over 20 queries against a sequential scan.
my $q = q{SELECT q.id AS qid, x.id FROM (SELECT id, v FROM items ORDER BY id LIMIT 20) q
	CROSS JOIN LATERAL (SELECT i.id FROM items i ORDER BY i.v <-> q.v LIMIT 10) x};
$node->safe_psql('postgres', "SET enable_indexscan = off; CREATE TABLE exact AS $q");
$node->safe_psql('postgres', "SET enable_seqscan = off; CREATE TABLE found AS $q");
is($node->safe_psql('postgres', "SELECT count(*) FROM exact"), '200', 'exact answers');
is( $node->safe_psql('postgres',
		"SELECT count(*)::float8 / 200 >= 0.95 FROM (SELECT * FROM found INTERSECT SELECT * FROM exact) s"),
	't', 'recall@10 >= 0.95 after the concurrent run');

$node->stop;
done_testing();
