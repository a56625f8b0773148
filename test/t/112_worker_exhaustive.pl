# test/t/112_worker_exhaustive.pl — scans served by the worker (its CPU
# engine) never return fewer rows than asked while enough rows pass the
# filter: the index scan with a filter the index cannot see and the
# filtered scan, with cagra.max_scan_tuples low so that their searches
# stop early, return the exact answer of a sequential scan (0.02% filters);
# and the filtered scan's rows keep their identity (ctid, tableoid, xmin,
# row locks) when it is the planner's own choice.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CagraGpuNode;

my $node = CagraGpuNode::cpu_worker('exhaustiveworker', "autovacuum = off\n");

# tag: 4 rows of 20,000 each (0.02%, no index); grp: 1% (an index)
$node->safe_psql('postgres', q{
	CREATE TABLE items (id int PRIMARY KEY, tag int, grp int, v vector(8));
	INSERT INTO items SELECT i, i % 5000, i % 100,
	       array(SELECT sin(i * 0.37 + j * 1.3) + cos(i * 0.011 * j) FROM generate_series(1, 8) j)::vector
	  FROM generate_series(1, 20000) i;
	CREATE INDEX items_v ON items USING cagra (v) WITH (graph_degree = 16);
	CREATE INDEX items_grp ON items (grp);
	VACUUM ANALYZE items;
});

sub worker_queries
{
	return $node->safe_psql('postgres', 'SELECT queries FROM cagra_status');
}

# For 10 queries (vectors of rows): the plan, how many got as many rows as
# the exact answer (ordered by an expression no index answers), and how
# many got the exact answer itself.
sub against_exact
{
	my ($settings, $filter, $k) = @_;
	my $q = "SELECT id FROM items WHERE $filter ORDER BY v <-> (SELECT v FROM items WHERE id = qid) LIMIT $k";
	my $exact = "SELECT id FROM items WHERE $filter ORDER BY (v <-> (SELECT v FROM items WHERE id = qid)) + 0 LIMIT $k";
	my $plan = $node->safe_psql('postgres', "$settings EXPLAIN (COSTS OFF) " . ($q =~ s/qid/1999/gr));
	my ($same_count, $same_rows) = (0, 0);

	for my $i (1 .. 10)
	{
		my $qid = $i * 1999;
		my $got = $node->safe_psql('postgres',
			"$settings SELECT coalesce(string_agg(id::text, ','), '') FROM (" . ($q =~ s/qid/$qid/gr) . ") s");
		my $want = $node->safe_psql('postgres',
			"SELECT coalesce(string_agg(id::text, ','), '') FROM (" . ($exact =~ s/qid/$qid/gr) . ") s");
		$same_count++ if scalar(split(/,/, $got)) == scalar(split(/,/, $want));
		$same_rows++ if $got eq $want;
	}
	return ($plan, $same_count, $same_rows);
}

# --- the index scan: the executor filters its rows ------------------------------
my $q0 = worker_queries();
for my $case (['tag = 7', 3], ['tag = 7', 10], ['tag IN (11, 12)', 5], ['tag = -1', 3])
{
	my ($filter, $k) = @$case;
	my ($plan, $same_count, $same_rows) =
	  against_exact('SET enable_seqscan = off; SET cagra.max_scan_tuples = 50;', $filter, $k);
	like($plan, qr/Index Scan using items_v/, "$filter LIMIT $k: the index scan");
	is($same_count, 10, "$filter LIMIT $k: as many rows as the exact answer");
	is($same_rows, 10, "$filter LIMIT $k: the exact answer");
}
cmp_ok(worker_queries() - $q0, '>', 0, 'the worker served the index scans');

# --- the filtered scan: allowed rows the other condition mostly rejects -------
my $only_filtered = 'SET enable_bitmapscan = off; SET enable_indexscan = off; SET enable_seqscan = off;';
$q0 = worker_queries();
for my $case (['grp = 7 AND (id / 100) % 50 = 3', 3], ['grp = 7 AND (id / 100) % 50 = 3', 10],
	['grp = 8 AND id % 2 = 1', 5])
{
	my ($filter, $k) = @$case;
	my ($plan, $same_count, $same_rows) =
	  against_exact("$only_filtered SET cagra.max_scan_tuples = 20;", $filter, $k);
	like($plan, qr/Cagra Filtered Scan/, "$filter LIMIT $k: the filtered scan");
	is($same_count, 10, "$filter LIMIT $k: as many rows as the exact answer");
	is($same_rows, 10, "$filter LIMIT $k: the exact answer");
}
cmp_ok(worker_queries() - $q0, '>', 0, 'the worker served the filtered scans');

# --- the filtered scan as the planner's choice: the rows' identity ------------
$node->safe_psql('postgres', q{
	CREATE TABLE ft (id int PRIMARY KEY, cat int, v vector(16));
	INSERT INTO ft SELECT i, i % 50, array(SELECT sin(i * 0.37 + j * 1.3) FROM generate_series(1, 16) j)::vector
	  FROM generate_series(1, 30000) i;
	CREATE INDEX ft_v ON ft USING cagra (v);
	CREATE INDEX ft_cat ON ft (cat);
	ANALYZE ft;
});
# the worker's first rounds of the index scan find LIMIT 3 of 2% at less cost;
# without the index scan, the planner weighs the filtered scan against the
# bitmap heap scan and sort
my $no_index_scan = 'SET enable_indexscan = off;';
my $near = "FROM ft WHERE cat = 3 ORDER BY v <-> (SELECT v FROM ft WHERE id = 17) LIMIT 3";
like($node->safe_psql('postgres', "$no_index_scan EXPLAIN (COSTS OFF) SELECT id $near"),
	qr/Cagra Filtered Scan/, 'a 2% filter with an index: the filtered scan');
is($node->safe_psql('postgres', qq{
	$no_index_scan
	SELECT bool_and(ctid = (SELECT ctid FROM ft t WHERE t.id = s.id) AND tableoid = 'ft'::regclass
	                AND xmin = (SELECT xmin FROM ft t WHERE t.id = s.id)), count(*)
	  FROM (SELECT id, ctid, tableoid, xmin $near) s}),
	't|3', 'ctid, tableoid and xmin are the rows\' own');
is($node->safe_psql('postgres', "$no_index_scan SELECT count(*) FROM (SELECT id $near FOR UPDATE SKIP LOCKED) s"),
	'3', 'FOR UPDATE SKIP LOCKED locks the rows');
is($node->safe_psql('postgres', qq{
	$no_index_scan
	BEGIN;
	WITH nn AS (SELECT ctid $near) DELETE FROM ft USING nn WHERE ft.ctid = nn.ctid;
	SELECT count(*) FROM ft WHERE cat = 3;
	ROLLBACK}),
	'597', 'a ctid join deletes the rows the scan found');

done_testing();
