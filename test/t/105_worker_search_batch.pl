# test/t/105_worker_search_batch.pl — cagra_search through the worker (its
# CPU engine) with rows the worker's copy lacks and rows the snapshot must
# not see: rows appended after the copy was made are merged in from the
# index pages (no new upload), rows deleted or updated since are not
# returned, HOT-updated rows come back with their current ctid, and a large
# batch, searched in parts while earlier parts are settled, gives the same
# rows as the search in the backend.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CagraGpuNode;

my $node = CagraGpuNode::cpu_worker('batchworker', "autovacuum = off\n");

$node->safe_psql('postgres', q{
	CREATE TABLE items (id int PRIMARY KEY, v vector(8), note text) WITH (fillfactor = 50);
	INSERT INTO items SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) + cos(i * 0.11 * j)
	                                  FROM generate_series(1, 8) j)::vector, 'a'
	  FROM generate_series(1, 3000) i;
	CREATE INDEX items_v ON items USING cagra (v) WITH (graph_degree = 16);
	VACUUM items;
	CREATE TABLE queries AS SELECT id AS qid, v FROM items WHERE id % 30 = 0;
});

sub status
{
	my ($cols) = @_;
	return $node->safe_psql('postgres', "SELECT $cols FROM cagra_status");
}

# the rows of cagra_search, as "query:id" in output order, for $device
sub rows
{
	my ($device) = @_;
	return $node->safe_psql('postgres', qq{
		SET cagra.device = $device;
		SELECT string_agg(s.query || ':' || i.id, ',' ORDER BY s.n)
		  FROM cagra_search('items_v', (SELECT array_agg(v ORDER BY qid) FROM queries), 5)
		       WITH ORDINALITY AS s(query, ctid, distance, n)
		  LEFT JOIN items i ON i.ctid = s.ctid});
}

my $cpu = rows('cpu');
my @cpu_rows = split /,/, $cpu;
is(scalar(@cpu_rows), 500, 'the backend search: 5 rows for each of 100 queries');
is(scalar(grep { /^(\d+):(\d+)$/ && $2 == 30 * $1 } @cpu_rows), 100, 'each query finds its own row');
my $q0 = status('queries');
is(rows('auto'), $cpu, 'a batch of 100 queries: the worker gives the rows of the backend search');
is(status('queries') - $q0, 100, 'the batch went through the worker');
my $uploads = status('uploads');

# rows appended after the copy: close copies of three queries' vectors
$node->safe_psql('postgres', q{
	INSERT INTO items SELECT 10000 + qid, (SELECT array_agg(x + 0.001) FROM unnest(v::real[]) x)::vector, 'new'
	  FROM queries WHERE qid IN (30, 600, 2970)});
my $found = $node->safe_psql('postgres', q{
	SELECT string_agg(i.id::text, ',' ORDER BY i.id)
	  FROM cagra_search('items_v', (SELECT array_agg(v ORDER BY qid) FROM queries), 2) s
	  JOIN items i ON i.ctid = s.ctid WHERE i.note = 'new'});
is($found, '10030,10600,12970', 'rows appended after the copy are found');
is(status('uploads'), $uploads, 'without loading a new copy');
is(rows('auto'), rows('cpu'), 'worker and backend agree with the appended rows');

# a call of 3,003 queries (every row) goes in parts of 1,024: each part after the first
# is queued on the worker while the backend settles the one before, and
# the worker's copy lacks the appended rows, so each part's answer gets
# them merged in
my $pipelined = q{
	SET work_mem = '64MB';
	SET cagra.device = %s;
	SELECT md5(string_agg(s.query || ':' || s.ctid || ':' || s.distance, ',' ORDER BY s.n))
	  FROM cagra_search('items_v', (SELECT array_agg(v ORDER BY id) FROM items), 5)
	       WITH ORDINALITY AS s(query, ctid, distance, n)};
my ($q1, $b1) = split /\|/, status('queries, batches');
my $parts = $node->safe_psql('postgres', sprintf($pipelined, 'auto'));
my ($q2, $b2) = split /\|/, status('queries, batches');
is($q2 - $q1, 3003, 'the 3,003 queries went through the worker');
is($b2 - $b1, 3, 'in three requests');
is($parts, $node->safe_psql('postgres', sprintf($pipelined, 'cpu')),
	'the parts give the rows and distances of the backend search');

# deleted rows (not vacuumed: the copy still has them) and HOT updates
$node->safe_psql('postgres', q{
	DELETE FROM items WHERE id IN (60, 90, 10600);
	UPDATE items SET note = 'hot' WHERE id % 30 = 0 AND id % 60 <> 0});
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM cagra_search('items_v', (SELECT array_agg(v ORDER BY qid) FROM queries), 5) s
	  JOIN items i ON i.ctid = s.ctid WHERE i.id IN (60, 90, 10600)}), '0', 'deleted rows are not returned');
is(rows('auto'), rows('cpu'), 'worker and backend agree after deletes and HOT updates');

# VACUUM prunes the HOT chains (the index keeps redirect TIDs) and makes
# the pages all-visible; the ctids returned are those of the current rows
$node->safe_psql('postgres', 'VACUUM items');
is($node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE i.id IS NULL), count(*) FILTER (WHERE i.note = 'hot') > 0
	  FROM cagra_search('items_v', (SELECT array_agg(v ORDER BY qid) FROM queries), 5) s
	  LEFT JOIN items i ON i.ctid = s.ctid}), '0|t',
	'after VACUUM every ctid is a current row, HOT-updated ones among them');
is(rows('auto'), rows('cpu'), 'worker and backend agree after VACUUM');

$node->stop;
done_testing();
