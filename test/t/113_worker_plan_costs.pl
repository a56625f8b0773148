# test/t/113_worker_plan_costs.pl — with the worker preloaded (its CPU
# engine), the planner picks the index where it is faster than a sequential
# scan and sort: the cases of pgvector's own cost and filtering tests (its
# TAP 039 and 017), on vectors of 384 dimensions and of 1,536, stored out of
# line (TOAST, which the sequential scan's cost leaves out), on 10,000 rows of
# 3 dimensions with attribute and distance filters; where the filter passes
# few rows, the sort of those wins, as it should. The same plans hold when
# the backend searches (cagra.device = cpu), and the index scans planned
# with the worker are served by it.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use CagraGpuNode;

my $node = CagraGpuNode::cpu_worker('plancosts');

sub plan_of
{
	my ($settings, $query) = @_;
	return $node->safe_psql('postgres', "$settings EXPLAIN (COSTS OFF) $query");
}

# a query vector from a fixed sequence, so that failures can be replayed
sub query_vector
{
	my ($dim, $seed) = @_;
	return '[' . join(',', map { sprintf('%.4f', (sin($_ * 12.9898 + $seed) + 1) / 2) } 1 .. $dim) . ']';
}

# --- pgvector's TAP 039: vectors of 384 and 1,536 dimensions -----------------------
for my $case ([384, 3000], [1536, 2000])
{
	my ($dim, $n) = @$case;
	$node->safe_psql('postgres', qq{
		CREATE TABLE tst (i int4, v vector($dim));
		INSERT INTO tst SELECT i, array(SELECT random() FROM generate_series(1, $dim) WHERE i > 0)::vector
		  FROM generate_series(1, $n) i;
		CREATE INDEX idx ON tst USING cagra (v);
		ANALYZE tst;
	});
	is($node->safe_psql('postgres', q{
		SELECT pg_relation_size(reltoastrelid) > 10 * pg_relation_size(oid) FROM pg_class WHERE relname = 'tst'}),
		$dim == 1536 ? 't' : 'f', "$dim dimensions: the vectors are " . ($dim == 1536 ? 'in TOAST' : 'in line'));
	my $q = query_vector($dim, 1);
	for my $where ('', "WHERE v <-> '$q' < 1")
	{
		my $query = "SELECT i FROM tst $where ORDER BY v <-> '$q' LIMIT 10";
		my $what = $where ? 'with a distance filter' : 'nearest 10';
		like(plan_of('', $query), qr/Index Scan using idx/, "$dim dimensions, $what: the index, with the worker");
		like(plan_of('SET cagra.device = cpu;', $query), qr/Index Scan using idx/,
			"$dim dimensions, $what: the index, searched in the backend");
	}
	my $before = $node->safe_psql('postgres', 'SELECT queries FROM cagra_status');
	is($node->safe_psql('postgres', "SELECT count(*) FROM (SELECT i FROM tst ORDER BY v <-> '$q' LIMIT 10) s"),
		'10', "$dim dimensions: 10 rows");
	cmp_ok($node->safe_psql('postgres', 'SELECT queries FROM cagra_status'), '>', $before,
		"$dim dimensions: the index scan went through the worker");
	$node->safe_psql('postgres', 'DROP TABLE tst');
}

# --- pgvector's TAP 017: 10,000 rows of 3 dimensions, filters --------------------
$node->safe_psql('postgres', q{
	CREATE TABLE tst (i int4, v vector(3), c int4, t text);
	INSERT INTO tst SELECT i, ARRAY[(i * 0.618034) % 1, (i * 0.414214) % 1, (i * 0.732051) % 1],
	       i % 50, 'test ' || i
	  FROM generate_series(1, 10000) i;
	CREATE INDEX idx ON tst USING cagra (v);
	ANALYZE tst;
});
my $q = query_vector(3, 2);
my $order = "ORDER BY v <-> '$q'";
my @cases = (
	["$order LIMIT 1", qr/Index Scan using idx/, 'the nearest row'],
	["$order LIMIT 20", qr/Index Scan using idx/, 'no filter'],
	# the index would walk some 1,000 rows for 20 that pass, ten times slower
	# than sorting the 200 that pass (pgvector's test marks its own index plan
	# here as one to avoid)
	["WHERE c = 7 $order LIMIT 20", qr/Sort.*Seq Scan/s, 'an attribute filter passing 2%'],
	["WHERE c != 7 $order LIMIT 20", qr/Index Scan using idx/, 'an attribute filter removing 2%'],
	["WHERE c >= 1 $order LIMIT 20", qr/Index Scan using idx/, 'a comparison removing 2%'],
	["WHERE t LIKE '%test%' $order LIMIT 20", qr/Index Scan using idx/, 'a LIKE removing few rows'],
	["WHERE t LIKE '%other%' $order LIMIT 20", qr/Seq Scan/, 'a LIKE passing no row'],
	["WHERE v <-> '$q' < 1 $order LIMIT 20", qr/Index Scan using idx/, 'a distance filter'],
	["WHERE v <-> '$q' < 1", qr/Seq Scan/, 'a distance filter without ORDER BY'],
	["WHERE v <-> '$q' < 1 $order", qr/Seq Scan/, 'a distance filter without LIMIT']);
for my $case (@cases)
{
	my ($rest, $plan, $what) = @$case;
	like(plan_of('', "SELECT i FROM tst $rest"), $plan, "10,000 x 3, $what, with the worker");
	like(plan_of('SET cagra.device = cpu;', "SELECT i FROM tst $rest"), $plan,
		"10,000 x 3, $what, searched in the backend");
}

# the index scan returns what the sort of every row returns
my $exact = $node->safe_psql('postgres', qq{
	SET enable_indexscan = off;
	SELECT string_agg(i::text, ',' ORDER BY d, i) FROM (SELECT i, v <-> '$q' AS d FROM tst WHERE c != 7 $order LIMIT 20) s});
is($node->safe_psql('postgres', qq{
	SELECT string_agg(i::text, ',' ORDER BY d, i) FROM (SELECT i, v <-> '$q' AS d FROM tst WHERE c != 7 $order LIMIT 20) s}),
	$exact, 'the filtered index scan gives the exact 20 nearest');

# a partial index on the filter's condition is the one chosen
$node->safe_psql('postgres', 'CREATE INDEX partial_idx ON tst USING cagra (v) WHERE (c = 7); ANALYZE tst');
like(plan_of('', "SELECT i FROM tst WHERE c = 7 $order LIMIT 20"), qr/Index Scan using partial_idx/,
	'the partial index on the filter, with the worker');

$node->stop;
done_testing();
