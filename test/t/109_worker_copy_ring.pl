# test/t/109_worker_copy_ring.pl — loading the worker's copy of an index
# reads every page of it once; it reads them through a ring of buffers
# (BAS_BULKREAD, as a large sequential scan does), so a copy of an index
# larger than shared_buffers leaves the other pages in shared buffers where
# they were.  The worker's CPU engine serves the search, the copy's answer
# is the backend's own.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('copyring');
$node->init;
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'cagra'
cagra.worker_backend = cpu
shared_buffers = 16MB
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION cagra');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_buffercache');
$node->safe_psql('postgres', 'CREATE EXTENSION pg_prewarm');
$node->poll_query_until('postgres', "SELECT state = 'running' FROM cagra_status")
  or die 'worker not running';

# 30,000 x 128 float32: about 2,400 index pages, more than the 2,048 buffers
$node->safe_psql('postgres', q{
	CREATE TABLE items (id int PRIMARY KEY, v vector(128));
	INSERT INTO items SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) + cos(i * 0.011 * j)
	                                  FROM generate_series(1, 128) j)::vector
	  FROM generate_series(1, 30000) i;
	CREATE TABLE others (id int, pad text);
	INSERT INTO others SELECT i, repeat('x', 200) FROM generate_series(1, 52000) i;
	SET maintenance_work_mem = '256MB';
	CREATE INDEX items_v ON items USING cagra (v);
});
my $index_pages = $node->safe_psql('postgres', "SELECT pg_relation_size('items_v') / 8192");
cmp_ok($index_pages, '>', 2048, "the index ($index_pages pages) is larger than shared_buffers");

my $cached = sub {
	my ($rel) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*) FROM pg_buffercache b JOIN pg_class c ON b.relfilenode = pg_relation_filenode(c.oid)
		 WHERE c.relname = '$rel' AND b.reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database())});
};
# another table's pages fill most of shared buffers
$node->safe_psql('postgres', "SELECT pg_prewarm('others')");
my $others_before = $cached->('others');
cmp_ok($others_before, '>', 1400, "another table's pages are in shared buffers ($others_before)");

my $query = q{(SELECT v FROM items WHERE id = 77)};
my $through_worker = $node->safe_psql('postgres', qq{
	SELECT string_agg(id::text, ',' ORDER BY d, id) FROM (
	  SELECT id, v <-> $query AS d FROM items ORDER BY v <-> $query LIMIT 10) s});
is($node->safe_psql('postgres', 'SELECT uploads FROM cagra_status'), '1', 'the search loaded a copy into the worker');
my $index_cached = $cached->('items_v');
cmp_ok($index_cached, '<=', 64, "the copy went through a ring: $index_cached of the index's $index_pages pages in shared buffers");
is($cached->('others'), $others_before, "the other table's pages stayed in shared buffers");

# (a search in the backend reads the pages it visits into shared buffers)
my $in_backend = $node->safe_psql('postgres', qq{
	SET cagra.device = cpu;
	SELECT string_agg(id::text, ',' ORDER BY d, id) FROM (
	  SELECT id, v <-> $query AS d FROM items ORDER BY v <-> $query LIMIT 10) s});
is($through_worker, $in_backend, 'the copy answers as the backend does');
like($through_worker, qr/^77,/, 'the row itself comes first');

$node->stop;
done_testing();
