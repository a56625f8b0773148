# test/t/107_worker_filtered.pl — filtered searches through the worker (its
# CPU engine): cagra_search with allowed rows at every selectivity down to
# one row (a traversal widened for the pass rate when many rows pass, each
# allowed node measured when few do) returns only allowed rows, min(k,
# matching) per query, recall@10 >= 0.95 against the exact filtered answer,
# served by the worker; an index scan with a WHERE the index does not see
# continues on the worker in rounds of growing itopk_size, in distance
# order, then on the CPU (and the next such scan of the session starts at
# the size the last one needed); the filtered scan (the WHERE has an index) sends
# the worker the rows the filter's bitmap allows; cancel works while a
# filtered request waits; with
# rows inserted, deleted and vacuumed by another session meanwhile, no row
# that fails the filter or that the snapshot cannot see comes back; when
# the nearest allowed rows are dead but not yet vacuumed, cagra_search still
# returns min(k, visible allowed rows).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use CagraGpuNode;

my $node = CagraGpuNode::cpu_worker('filteredworker', "autovacuum = off\n");

# 20,000 rows, cat = id % 100: each cat value is 1% of the rows
$node->safe_psql('postgres', q{
	CREATE TABLE items (id int, cat int, v vector(8)) WITH (fillfactor = 50);
	INSERT INTO items SELECT i, i % 100, array(SELECT sin(i * 0.37 + j * 1.3) + cos(i * 0.011 * j)
	                                           FROM generate_series(1, 8) j)::vector
	  FROM generate_series(1, 20000) i;
	CREATE INDEX items_v ON items USING cagra (v) WITH (graph_degree = 16);
	VACUUM items;
	-- rows of cat 0: the cat filters below keep the query's own row out
	CREATE TABLE queries AS SELECT row_number() OVER (ORDER BY id) AS qno, v FROM items WHERE id % 1000 = 500;
});

# the worker's rounds of a scan that keeps asking for more: the index's own
# search buffer (its build measured it), doubled up to the kernel's 512
my $itopk = $node->safe_psql('postgres', "SELECT search_itopk FROM cagra_index_info('items_v')");
my $max_rounds = 1;
for (my $size = $itopk; $size < 512; $size *= 2) { $max_rounds++; }

sub status
{
	my ($cols) = @_;
	return $node->safe_psql('postgres', "SELECT $cols FROM cagra_status");
}

# For the rows `filter` selects, cagra_search with them allowed: queries
# answered, rows per query, whether all pass, and recall@k against the
# exact filtered answer (a sequential scan and a sort).
sub check_search
{
	my ($filter, $k) = @_;
	return $node->safe_psql('postgres', qq{
		SET enable_indexscan = off;
		WITH got AS (
			SELECT s.query, t.id, t.cat FROM cagra_search('items_v', ARRAY(SELECT v FROM queries ORDER BY qno), $k,
			                                              ARRAY(SELECT ctid FROM items WHERE $filter)) s
			  JOIN items t ON t.ctid = s.ctid),
		want AS (
			SELECT q.qno AS query, x.id FROM queries q, LATERAL (
				SELECT id FROM items WHERE $filter ORDER BY v <-> q.v LIMIT $k) x)
		SELECT count(DISTINCT g.query), round(count(*)::numeric / NULLIF(count(DISTINCT g.query), 0), 1),
		       bool_and(g.id IN (SELECT id FROM items WHERE $filter)),
		       (SELECT count(*) FROM got JOIN want USING (query, id))::numeric /
		       NULLIF((SELECT count(*) FROM want), 0) >= 0.95
		  FROM got g});
}

my $nq = $node->safe_psql('postgres', 'SELECT count(*) FROM queries');
is($nq, '20', '20 queries');

# --- cagra_search with allowed rows -------------------------------------------
# 90% and 50% pass: traversals widened for the pass rate; 10%, 1%, 5 rows and
# one row: fewer rows than a traversal would measure, so each is measured
my @cases = (
	[ 'cat < 90', '10.0', '90% of the rows (a traversal)' ],
	[ 'cat < 50', '10.0', '50% of the rows (a traversal)' ],
	[ 'cat < 10', '10.0', '10% of the rows' ],
	[ 'cat = 7', '10.0', '1% of the rows' ],
	[ 'id IN (17, 4242, 9999, 12345, 19999)', '5.0', 'five rows' ],
	[ 'id = 4242', '1.0', 'one row' ]);
for my $c (@cases)
{
	my ($filter, $per_query, $what) = @$c;
	my ($q0, $f0) = split /\|/, status('queries, fallbacks');
	is(check_search($filter, 10), "20|$per_query|t|t",
		"$what: min(10, matching) rows per query, all allowed, recall\@10 >= 0.95");
	my ($q1, $f1) = split /\|/, status('queries, fallbacks');
	is($q1 - $q0, 20, "$what: the worker served the 20 queries");
	is($f1, $f0, "$what: no fallback");
}
is(check_search('cat < 0', 10), '0|||', 'no row allowed: no rows');

# the same rows as the backend's own filtered search (exact there too when few pass)
my $rows = q{
	SELECT string_agg(s.query || ':' || t.id, ',' ORDER BY s.query, s.distance, t.id)
	  FROM cagra_search('items_v', ARRAY(SELECT v FROM queries ORDER BY qno), 10,
	                    ARRAY(SELECT ctid FROM items WHERE cat = 7)) s JOIN items t ON t.ctid = s.ctid};
is($node->safe_psql('postgres', $rows), $node->safe_psql('postgres', "SET cagra.device = cpu; $rows"),
	'1% allowed: the worker returns the backend\'s rows');

# a HOT-updated row: its ctid names the heap-only tuple, the copy holds the
# chain's root, which is what the backend sends and the worker looks up
my $root = $node->safe_psql('postgres', 'SELECT ctid FROM items WHERE id = 4242');
my $nodes = $node->safe_psql('postgres', "SELECT nodes FROM cagra_index_info('items_v')");
$node->safe_psql('postgres', 'UPDATE items SET cat = cat WHERE id = 4242');
isnt($node->safe_psql('postgres', 'SELECT ctid FROM items WHERE id = 4242'), $root,
	'the update gave the row a new ctid');
is($node->safe_psql('postgres', "SELECT nodes FROM cagra_index_info('items_v')"), $nodes,
	'a HOT update: no new index entry');
my ($hq0, $hu0) = split /\|/, status('queries, uploads');
is($node->safe_psql('postgres', q{
	SELECT string_agg(t.id::text, ',') FROM cagra_search('items_v', ARRAY(SELECT v FROM queries WHERE qno = 1), 3,
	                                                     ARRAY(SELECT ctid FROM items WHERE id = 4242)) s
	  JOIN items t ON t.ctid = s.ctid}), '4242', 'a HOT-updated allowed row is found by its new ctid');
is(status('queries, uploads'), ($hq0 + 1) . "|$hu0", 'through the worker, with the same copy');

# rows appended after the worker's copy: merged from the pages, filtered too
my $uploads = status('uploads');
$node->safe_psql('postgres', q{
	INSERT INTO items SELECT 100000 + qno, 7, v FROM queries WHERE qno IN (1, 2);
	INSERT INTO items SELECT 200000 + qno, 8, v FROM queries WHERE qno IN (1, 2)});
is($node->safe_psql('postgres', q{
	SELECT string_agg(t.id::text, ',' ORDER BY t.id)
	  FROM cagra_search('items_v', ARRAY(SELECT v FROM queries WHERE qno IN (1, 2) ORDER BY qno), 1,
	                    ARRAY(SELECT ctid FROM items WHERE cat = 7)) s JOIN items t ON t.ctid = s.ctid}),
	'100001,100002', 'appended allowed rows are found, appended rows not allowed are not');
is(status('uploads'), $uploads, 'without a new copy');

# --- index scans whose filter the index does not see ----------------------------
# ORDER BY v <-> q LIMIT 10 WHERE cat < 5: one row in 20 passes, so the
# first round (the index's itopk_size) gives too few and the scan asks the
# worker again with twice as many candidates, up to 512
my $scan_q = q{SELECT v FROM queries WHERE qno = 3};
my $scan = qq{
	SET enable_seqscan = off;
	SET enable_bitmapscan = off;
	SELECT string_agg(id || ':' || (v <-> ($scan_q)), ',' ORDER BY n) FROM (
	  SELECT id, v, row_number() OVER () AS n FROM (
	    SELECT id, v FROM items WHERE cat < 5 ORDER BY v <-> ($scan_q) LIMIT 10) l) s};
like($node->safe_psql('postgres', qq{
	SET enable_seqscan = off;
	EXPLAIN (COSTS OFF) SELECT id FROM items WHERE cat < 5 ORDER BY v <-> ($scan_q) LIMIT 10}),
	qr/Index Scan using items_v/, 'the filtered query is an index scan');

# the ids of a scan's rows, and whether their distances never decrease
sub scan_rows
{
	my ($out) = @_;
	my (@ids, @d);
	for (split /,/, $out)
	{
		my ($id, $dist) = split /:/;
		push @ids, $id;
		push @d, $dist;
	}
	my $sorted = 1;
	$sorted &&= $d[$_ - 1] <= $d[$_] for 1 .. $#d;
	return (\@ids, $sorted);
}

my $exact_ids = $node->safe_psql('postgres', qq{
	SET enable_indexscan = off;
	SELECT string_agg(id::text, ',' ORDER BY d) FROM (
	  SELECT id, v <-> ($scan_q) AS d FROM items WHERE cat < 5 ORDER BY d LIMIT 10) s});
my %exact = map { $_ => 1 } split /,/, $exact_ids;
my $q0 = status('queries');
my ($ids, $sorted) = scan_rows($node->safe_psql('postgres', $scan));
my $rounds = status('queries') - $q0;
is(scalar(@$ids), 10, 'the filtered index scan returns 10 rows');
ok($sorted, 'in distance order');
cmp_ok(scalar(grep { $exact{$_} } @$ids), '>=', 9, 'recall@10 of the scan >= 0.9');
cmp_ok($rounds, '>=', 2, "the continuation was served by the worker ($rounds rounds)");
cmp_ok($rounds, '<=', $max_rounds, "in rounds of $itopk up to 512 candidates");

# the same scan again in one session: its first round asks for the k that
# the last scans of the index say costs least, so one round serves it, also
# after one scan that returned few (no filter: one round); after 16 such
# scans the first round is itopk_size again and the filtered scan takes its
# rounds
my $again = $node->safe_psql('postgres', qq{
	SET enable_seqscan = off;
	SET enable_bitmapscan = off;
	CREATE TEMP TABLE seen (n serial, queries bigint);
	INSERT INTO seen (queries) SELECT queries FROM cagra_status;
	SELECT count(*) FROM (SELECT id FROM items WHERE cat < 5 ORDER BY v <-> ($scan_q) LIMIT 10) s;
	INSERT INTO seen (queries) SELECT queries FROM cagra_status;
	SELECT count(*) FROM (SELECT id FROM items WHERE cat < 5 ORDER BY v <-> ($scan_q) LIMIT 10) s;
	INSERT INTO seen (queries) SELECT queries FROM cagra_status;
	SELECT count(*) FROM (SELECT id FROM items ORDER BY v <-> ($scan_q) LIMIT 10) s;
	SELECT count(*) FROM (SELECT id FROM items WHERE cat < 5 ORDER BY v <-> ($scan_q) LIMIT 10) s;
	INSERT INTO seen (queries) SELECT queries FROM cagra_status;
	DO \$\$ BEGIN FOR i IN 1 .. 16 LOOP
	  PERFORM count(*) FROM (SELECT id FROM items ORDER BY v <-> ($scan_q) LIMIT 10) s;
	END LOOP; END \$\$;
	SELECT count(*) FROM (SELECT id FROM items WHERE cat < 5 ORDER BY v <-> ($scan_q) LIMIT 10) s;
	INSERT INTO seen (queries) SELECT queries FROM cagra_status;
	SELECT string_agg((queries - lag)::text, ',' ORDER BY n) FROM (
	  SELECT n, queries, lag(queries) OVER (ORDER BY n) FROM seen) d WHERE lag IS NOT NULL});
my @again = split /\n/, $again;
is($again[-1], "$rounds,1,2," . (16 + $rounds),
	"a scan like the last ones takes one round, also after one that returned few; after 16 such, the rounds again ($again[-1])");

# three matching rows: the rounds up to 512 find some, the CPU search the rest
my $few = qq{
	SET enable_seqscan = off;
	SET enable_bitmapscan = off;
	SELECT string_agg(id || ':' || (v <-> ($scan_q)), ',' ORDER BY n) FROM (
	  SELECT id, v, row_number() OVER () AS n FROM (
	    SELECT id, v FROM items WHERE id IN (17, 9999, 19999) ORDER BY v <-> ($scan_q) LIMIT 10) l) s};
$q0 = status('queries');
($ids, $sorted) = scan_rows($node->safe_psql('postgres', $few));
is(join(',', sort { $a <=> $b } @$ids), '17,9999,19999', 'three matching rows: all three');
ok($sorted, 'in distance order');
is(status('queries') - $q0, $max_rounds, "$max_rounds worker rounds ($itopk .. 512), then the CPU search");

# --- the filtered scan: the filter's bitmap gives the worker the allowed rows ---------
# WHERE cat = 3 (1%, 200 rows) with cat's own index: one worker round with
# the rows allowed, the exact filtered answer, in order.  The other plans
# are disabled: on 20,000 rows the bitmap heap scan and sort of 200 rows
# costs less.
$node->safe_psql('postgres', 'CREATE INDEX items_cat ON items (cat); ANALYZE items');
my $only_filtered = 'SET enable_bitmapscan = off; SET enable_indexscan = off; SET enable_seqscan = off;';
my $fscan = qq{
	$only_filtered
	SELECT string_agg(id || ':' || (v <-> ($scan_q)), ',' ORDER BY n) FROM (
	  SELECT id, v, row_number() OVER () AS n FROM (
	    SELECT id, v FROM items WHERE cat = 3 ORDER BY v <-> ($scan_q) LIMIT 10) l) s};
my $fexplain = $node->safe_psql('postgres', qq{
	$only_filtered
	EXPLAIN (ANALYZE, VERBOSE, COSTS OFF, TIMING OFF, SUMMARY OFF)
	SELECT id FROM items WHERE cat = 3 ORDER BY v <-> ($scan_q) LIMIT 10});
like($fexplain, qr/Custom Scan \(Cagra Filtered Scan\) on public.items/, 'a 1% filter with an index: the filtered scan');
like($fexplain, qr/Actual Allowed Rows: 200\b/, 'the bitmap allowed the 200 rows of cat 3');
like($fexplain, qr/Worker Rounds: 1\b/, 'one round, served by the worker');
$q0 = status('queries');
($ids, $sorted) = scan_rows($node->safe_psql('postgres', $fscan));
is(status('queries') - $q0, 1, 'one worker search');
is(join(',', @$ids), $node->safe_psql('postgres', qq{
	SET cagra.enable_filtered_scan = off;
	SET enable_indexscan = off;
	SELECT string_agg(id::text, ',' ORDER BY d) FROM (
	  SELECT id, v <-> ($scan_q) AS d FROM items WHERE cat = 3 ORDER BY d LIMIT 10) s}),
	'the exact filtered answer, in order');

# the planner's choice with the worker, on 100,000 rows: the index scan for a
# filter that passes half the rows, the filtered scan for 1% (1,000 rows),
# the bitmap heap scan and sort for 10 rows
$node->safe_psql('postgres', q{
	CREATE TABLE many (id int, half int, cat int, rare int, v vector(8));
	INSERT INTO many SELECT i, i % 2, i % 100, i % 10000,
	       array(SELECT sin(i * 0.37 + j * 1.3) + cos(i * 0.011 * j) FROM generate_series(1, 8) j)::vector
	  FROM generate_series(1, 100000) i;
	SET maintenance_work_mem = '256MB';
	CREATE INDEX many_v ON many USING cagra (v) WITH (graph_degree = 16);
	CREATE INDEX ON many (half); CREATE INDEX ON many (cat); CREATE INDEX ON many (rare);
	ANALYZE many;
});
for my $case (['half = 1', qr/Index Scan using many_v/, 'half the rows: the index scan'],
	['cat = 7', qr/Custom Scan \(Cagra Filtered Scan\)/, '1%: the filtered scan'],
	['rare = 7', qr/Sort.*Bitmap Heap Scan/s, '10 rows: the bitmap heap scan and sort'])
{
	my ($where, $plan, $name) = @$case;
	like($node->safe_psql('postgres', qq{
		EXPLAIN (COSTS OFF) SELECT id FROM many WHERE $where ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10}),
		$plan, "planned with the worker, $name");
}
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM (SELECT id FROM many WHERE cat = 7 ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10) s}),
	'10', 'the filtered scan chosen by cost returns 10 rows');

# a search through the worker is priced as a round trip, not as the index
# pages the backend would read: a table of 100 rows is sorted whole, unless
# the searches run in the backend
$node->safe_psql('postgres', q{
	CREATE TABLE few AS SELECT * FROM many WHERE id <= 100;
	CREATE INDEX few_v ON few USING cagra (v);
	ANALYZE few;
});
my $few_query = q{EXPLAIN (COSTS OFF) SELECT id FROM few ORDER BY v <-> '[1,0,0,0,0,0,0,0]' LIMIT 10};
like($node->safe_psql('postgres', $few_query), qr/Sort.*Seq Scan on few/s,
	'planned with the worker, 100 rows: the sequential scan and sort');
like($node->safe_psql('postgres', "SET cagra.device = cpu; $few_query"), qr/Index Scan using few_v/,
	'planned for the backend (cagra.device = cpu), 100 rows: the index scan');

# --- cancel while a filtered request waits in the worker's queue --------------------
# the worker is stopped, so the request stays queued until the timeout
my $worker_pid = status('pid');
$q0 = status('queries');
kill 'STOP', $worker_pid;
my ($ret, $out, $err) = $node->psql('postgres', q{
	SET statement_timeout = '300ms';
	SELECT count(*) FROM cagra_search('items_v', ARRAY(SELECT v FROM queries), 10,
	                                  ARRAY(SELECT ctid FROM items WHERE cat < 50))});
kill 'CONT', $worker_pid;
like($err, qr/canceling statement due to statement timeout/, 'statement_timeout ends a filtered search that waits');
sleep(1);    # the worker goes on, finds the request given up
is(status('queries'), $q0, 'the abandoned request was not searched');
is(check_search('cat < 50', 10), '20|10.0|t|t', 'the next filtered search is served');

# --- concurrent inserts, deletes and vacuum under a filter ---------------------------
# another session keeps inserting rows of cat 7 and 8 near the queries and
# deleting them, with a VACUUM now and then (new copies, reused slots);
# every search must return only visible rows that pass the filter, and
# min(10, visible matching) of them
my $writes = '';
for my $round (1 .. 60)
{
	my $base = 300000 + $round * 100;
	$writes .= "INSERT INTO items SELECT $base + qno, 7 + qno % 2, (SELECT array_agg(x + 0.0001 * $round)
	              FROM unnest(v::real[]) x)::vector FROM queries;\n";
	$writes .= "DELETE FROM items WHERE id BETWEEN $base - 200 AND $base - 100;\n";
	$writes .= "DELETE FROM items WHERE cat = 7 AND id % 97 = $round % 97 AND id < 20000;\n";
	$writes .= "VACUUM items;\n" if $round % 15 == 0;
	$writes .= "SELECT pg_sleep(0.05);\n";
}
my $script = $node->basedir . '/writes.sql';
open(my $fh, '>', $script) or die "cannot write $script: $!";
print $fh $writes;
close($fh);
my $writer = IPC::Run::start(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-f', $script, '-d', $node->connstr('postgres') ],
	'>', \my $writer_out, '2>', \my $writer_err);

my $bad = 0;
my $checks = 0;
my ($served0) = status('queries');
while ($writer->pumpable && $checks < 200)
{
	$writer->pump_nb;
	# cagra_search: every row visible (joins the table) and of cat 7, and
	# min(10, cat-7 rows) per query
	my $r = $node->safe_psql('postgres', q{
		WITH got AS (
			SELECT s.query, t.id, t.cat FROM cagra_search('items_v', ARRAY(SELECT v FROM queries ORDER BY qno), 10,
			                                              ARRAY(SELECT ctid FROM items WHERE cat = 7)) s
			  LEFT JOIN items t ON t.ctid = s.ctid)
		SELECT count(*) FILTER (WHERE id IS NULL OR cat <> 7),
		       count(*) = 10 * (SELECT count(*) FROM queries) FROM got});
	if ($r ne '0|t')
	{
		$bad++;
		diag("cagra_search: $r (rows failing, all there)");
	}
	# the index scan and the filtered scan: 10 rows of cat 7, in order (the
	# executor checks the filter and the row's visibility itself)
	for my $plan ('SET cagra.enable_filtered_scan = off', 'SET enable_indexscan = off')
	{
		my $out = $node->safe_psql('postgres', qq{
			SET enable_seqscan = off;
			SET enable_bitmapscan = off;
			$plan;
			SELECT string_agg(id || ':' || cat || ':' || (v <-> ($scan_q)), ',' ORDER BY n) FROM (
			  SELECT id, cat, v, row_number() OVER () AS n FROM (
			    SELECT id, cat, v FROM items WHERE cat = 7 ORDER BY v <-> ($scan_q) LIMIT 10) l) s});
		my @rows = split /,/, $out;
		my @d = map { (split /:/)[2] } @rows;
		my $in_order = 1;
		$in_order &&= $d[$_ - 1] <= $d[$_] for 1 .. $#d;
		if (!(scalar(@rows) == 10 && $in_order && !grep { (split /:/)[1] != 7 } @rows))
		{
			$bad++;
			diag("$plan: " . scalar(@rows) . " rows, in order $in_order: $out");
		}
	}
	$checks++;
}
$writer->finish;
is($writer_err, '', 'the writer ran without errors');
cmp_ok($checks, '>=', 5, "searches ran while the writer worked ($checks rounds)");
is($bad, 0, 'no invisible row, no row failing the filter, never fewer rows than asked');
cmp_ok(status('queries') - $served0, '>', 0, 'the worker served searches meanwhile');
is(check_search('cat = 7', 10), '20|10.0|t|t', 'after the writer: exact filtered answers');

# --- allowed rows whose nearest are dead, not yet vacuumed ---------------------
# the worker's candidates for the query are all dead: the backend measures
# every allowed row and still returns min(k, visible allowed rows), exactly
# the nearest (the 1,000 rows nearest to query 1, the 990 nearest of them
# deleted: every allowed node measured; 15,000 nearest to query 2, its
# 1,000 nearest deleted: a traversal)
$node->safe_psql('postgres', q{
	CREATE TABLE near1 AS SELECT i.ctid t, id FROM items i, queries q WHERE q.qno = 1
	  ORDER BY i.v <-> q.v, id LIMIT 1000;
	DELETE FROM items WHERE id IN (SELECT id FROM near1 LIMIT 990);
	CREATE TABLE near2 AS SELECT i.ctid t, id FROM items i, queries q WHERE q.qno = 2
	  ORDER BY i.v <-> q.v, id LIMIT 15000;
	DELETE FROM items WHERE id IN (SELECT id FROM near2 LIMIT 1000);
});
for my $c ([ 'near1', 1, 'every allowed row measured' ], [ 'near2', 2, 'a traversal' ])
{
	my ($allowed, $qno, $what) = @$c;
	my ($q0, $f0) = split /\|/, status('queries, fallbacks');
	my $got = $node->safe_psql('postgres', qq{
		SELECT string_agg(t.id::text, ',' ORDER BY s.distance, t.id)
		  FROM cagra_search('items_v', ARRAY(SELECT v FROM queries WHERE qno = $qno), 10,
		                    ARRAY(SELECT t FROM $allowed)) s JOIN items t ON t.ctid = s.ctid});
	my $want = $node->safe_psql('postgres', qq{
		SELECT string_agg(id::text, ',' ORDER BY d, id) FROM (
		  SELECT i.id, i.v <-> q.v AS d FROM items i, queries q
		   WHERE q.qno = $qno AND i.ctid IN (SELECT t FROM $allowed) ORDER BY 2, 1 LIMIT 10) x});
	my @got = split /,/, $got;
	my %want = map { $_ => 1 } split /,/, $want;
	is(scalar(@got), 10, "nearest allowed rows dead ($what): 10 rows");
	cmp_ok(scalar(grep { $want{$_} } @got), '>=', 9, "nearest allowed rows dead ($what): the nearest visible ones");
	my ($q1, $f1) = split /\|/, status('queries, fallbacks');
	is($q1 - $q0, 1, "nearest allowed rows dead ($what): the worker served the query");
	is($f1, $f0, "nearest allowed rows dead ($what): no fallback");
}
is($node->safe_psql('postgres', q{
	SELECT string_agg(t.id::text, ',' ORDER BY s.distance, t.id)
	  FROM cagra_search('items_v', ARRAY(SELECT v FROM queries WHERE qno = 1), 10, ARRAY(SELECT t FROM near1)) s
	  JOIN items t ON t.ctid = s.ctid}),
	$node->safe_psql('postgres', q{
	SELECT string_agg(id::text, ',' ORDER BY d, id) FROM (
	  SELECT i.id, i.v <-> q.v AS d FROM items i, queries q
	   WHERE q.qno = 1 AND i.ctid IN (SELECT t FROM near1) ORDER BY 2, 1 LIMIT 10) x}),
	'every allowed row measured: exactly the nearest visible rows');

$node->stop;
done_testing();
