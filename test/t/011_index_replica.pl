# test/t/011_index_replica.pl — a streaming replica replays a cagra index
# (bulk build, generic WAL of inserts and vacuum, an unlogged table's index)
# and returns the same results as the primary.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION cagra');
$primary->backup('base');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;

# Built after the backup: the whole index reaches the standby through WAL.
$primary->safe_psql('postgres', q{
	SELECT setseed(0.7);
	CREATE TABLE items (id int PRIMARY KEY, v vector(24));
	INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 24) d
	                              WHERE i > 0)::vector
	  FROM generate_series(1, 3000) i;
	CREATE INDEX items_v ON items USING cagra (v vector_l2_ops);
	-- a vector that spans pages
	CREATE TABLE wide (id int, v vector(3000));
	INSERT INTO wide SELECT i, array_fill(i::real, ARRAY[3000])::vector FROM generate_series(1, 40) i;
	CREATE INDEX wide_v ON wide USING cagra (v vector_l2_ops) WITH (graph_degree = 8, intermediate_graph_degree = 16);
});
# Generic WAL: inserts, deletes, vacuum.
$primary->safe_psql('postgres', q{
	INSERT INTO items SELECT i, (SELECT array_agg(random()::real) FROM generate_series(1, 24) d
	                              WHERE i > 0)::vector
	  FROM generate_series(3001, 3500) i;
	DELETE FROM items WHERE id % 4 = 0;
	VACUUM items;
	INSERT INTO wide SELECT i, array_fill(i::real, ARRAY[3000])::vector FROM generate_series(41, 45) i;
});
$primary->wait_for_catchup($standby);

my $info = "SELECT nodes, live_nodes, deleted_nodes, generation FROM cagra_index_info('items_v')";
is($standby->safe_psql('postgres', $info), $primary->safe_psql('postgres', $info),
	'meta page replayed');
is($standby->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v')"),
	'0', 'index check clean on the standby');
is($standby->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('wide_v')"),
	'0', 'wide index check clean on the standby');

# Same answers, query by query (the graph is the same, so is the search).
my $q = q{SET enable_seqscan = off;
	SELECT string_agg(x.ids, ';' ORDER BY q.id) FROM items q CROSS JOIN LATERAL
	  (SELECT string_agg(i.id::text, ',') AS ids FROM
	     (SELECT id FROM items i ORDER BY i.v <-> q.v LIMIT 10) i) x
	 WHERE q.id % 100 = 1};
my $on_primary = $primary->safe_psql('postgres', $q);
ok($on_primary ne '', 'primary answers');
is($standby->safe_psql('postgres', $q), $on_primary, 'standby returns the same results');
my $w = "SET enable_seqscan = off; SELECT id FROM wide ORDER BY v <-> array_fill(43::real, ARRAY[3000])::vector LIMIT 1";
is($standby->safe_psql('postgres', $w), '43', 'wide vectors on the standby');

# Index scans on the standby never return deleted rows.
is( $standby->safe_psql('postgres', q{SET enable_seqscan = off;
	SELECT count(*) FROM (SELECT id FROM items ORDER BY v <-> (SELECT v FROM items WHERE id = 1)
	  LIMIT 500) s WHERE id % 4 = 0}),
	'0', 'no deleted row on the standby');

$standby->stop;
$primary->stop;
done_testing();
