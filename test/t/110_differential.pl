# test/t/110_differential.pl — a randomized differential test: PostgreSQL
# checks the cagra index against its own sequential scan.
#
# Each round makes a random table (dimensions, rows, one of the four metrics
# through its operator class, storage float32 or float16, data uniform,
# clustered, on a small integer grid full of ties, or tiny values that are
# subnormal in float16, some NULL vectors), indexes it, and then alternates
# random queries with random changes (deletes, deletes of a query's nearest
# rows, updates, VACUUM, inserts that reuse the slots VACUUM freed). The
# queries run in a session kept open for the whole round (its caches live
# across the other sessions' changes) and in one opened after each change:
# ORDER BY ... LIMIT with filters of every selectivity down to one row and
# LIMIT 1 to 100, under a forced index scan, a forced Cagra Filtered Scan or
# the planner's choice; cursors read by several FETCHes; FOR UPDATE (SKIP
# LOCKED while another session holds some of the rows); a
# LATERAL join of several queries; a semi-join filter; a ctid-based DELETE
# fed by the nearest rows; WHERE CURRENT OF; cagra_search with and without
# allowed rows. A reference session that cannot use the index looks up
# every returned row by ctid and by id and recomputes its distance and its
# filter, and counts the rows that match.
#
# The index is approximate, so recall is not checked. What is checked, each
# promise as a check of its own (one test line per check and cluster):
#   no_error        the statement succeeds
#   row_visible     each returned row is a row the statement can see
#   row_identity    its ctid, tableoid and xmin are the row's own
#   passes_filter   it satisfies the WHERE clause (or the allowed rows)
#   no_duplicate    no row comes twice in one answer
#   exact_distance  a returned distance is the row's exact distance
#                   (cagra_search: the index's own, within float32 summing
#                   and, with float16 storage, the rounding of the stored
#                   vector, as documented)
#   distance_order  rows come in nondecreasing exact distance, but for
#                   the float32 rounding of the index's own distance
#                   (cagra_search: nondecreasing returned distance)
#   row_count       LIMIT k gives min(k, matching rows); cagra_search gives
#                   min(k, allowed visible rows), and without allowed rows
#                   min(k, visible rows) while no dead row is in the index
#                   (fewer is documented when invisible rows crowd it);
#                   an index scan may lack the rows its DEBUG1 line says
#                   the graph search passed over (docs/index.md), except
#                   under inner product, whose graph is built to reach
#                   every row (the rows short of LIMIT are summed by metric)
#   current_of      UPDATE ... WHERE CURRENT OF updates the fetched row
#   mutation        the random changes themselves succeed
#   reference       the reference session reads the rows and the table
#
# Rows whose vector is NULL (and zero vectors under cosine, which the data
# never has) are not indexed, as documented: an answer may leave them out,
# or give them last (NULL distance), as the sequential scan does.
#
# Everything runs twice: on a server without the worker (and with a
# streaming standby, whose long-lived session reads too), and on one with
# the worker's CPU engine (shared_preload_libraries = 'cagra',
# cagra.worker_backend = cpu). Environment: CAGRA_DIFF_SEED (default a fixed
# seed, so the README's test command gives the same rounds each time;
# "random" draws one; printed first and in every failure), CAGRA_DIFF_SECONDS (default 70, both
# servers together), CAGRA_DIFF_ROUNDS (rounds per server, instead of the
# time bound), CAGRA_DIFF_ONLY (plain or worker: one server only),
# CAGRA_DIFF_ROUND (run only that round, to reproduce a failure),
# CAGRA_DIFF_REPORTS (failures printed per check and server, default 5).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use CagraGpuNode;

# BackgroundPsql notes every query and its whole output in the log: for the
# thousands of statements here that is tens of megabytes, while a failure
# message carries its statement anyway.
{
	no warnings 'redefine';
	*PostgreSQL::Test::BackgroundPsql::note = sub { };
}

# (an empty variable counts as unset)
my $seed = $ENV{CAGRA_DIFF_SEED} || 20261206;
$seed = int(rand(2**31)) if $seed eq 'random';
my $seconds = $ENV{CAGRA_DIFF_SECONDS} || 70;
my $rounds_wanted = $ENV{CAGRA_DIFF_ROUNDS} || undef;
my $only_round = $ENV{CAGRA_DIFF_ROUND} || undef;
my @clusters = grep { !$ENV{CAGRA_DIFF_ONLY} || $_ eq $ENV{CAGRA_DIFF_ONLY} } qw(plain worker);
diag("CAGRA_DIFF_SEED=$seed");

my %operator = (l2 => '<->', ip => '<#>', cosine => '<=>', l1 => '<+>');
my @checks = qw(no_error row_visible row_identity passes_filter no_duplicate exact_distance distance_order
  row_count current_of mutation reference);
my $max_reports = $ENV{CAGRA_DIFF_REPORTS} || 5;    # failures printed per check and cluster

my %failures;           # cluster => check => [messages]
my %counted;            # cluster => check => times checked
my %short;              # cluster => metric => rows LIMIT answers lacked
my ($cluster, $round, $context);    # where the checks are: for their messages
my @new_failures;       # [check, index] of the failures of the statement being checked
my $explainable;        # [settings, statement] whose plan a failure message shows

sub fail_check
{
	my ($check, $what) = @_;
	push @new_failures, [ $check, scalar @{ $failures{$cluster}{$check} // [] } ];
	push @{ $failures{$cluster}{$check} },
	  "CAGRA_DIFF_SEED=$seed CAGRA_DIFF_ONLY=$cluster CAGRA_DIFF_ROUND=$round: $what\n  $context";
}

sub check
{
	my ($check, $ok, $what) = @_;
	$counted{$cluster}{$check}++;
	fail_check($check, $what) unless $ok;
	return $ok;
}

# A statement (or several) in a background session: (rows as arrays of
# fields, error text or undef).
# Rows the scans of the statement being checked passed over (their DEBUG1
# line): the one shortfall row_count allows (docs/index.md), but under inner
# product.
my $passed_over = 0;

sub run_sql
{
	my ($session, $sql) = @_;
	$session->{stderr} = '';
	my $out = $session->query($sql);
	my $err = $session->{stderr};
	$passed_over += $1 while $err =~ /(\d+) rows the graph search passed over lie nearer/g;
	return (undef, $err) if $err =~ /^(?:psql:.*?)?(ERROR|FATAL|PANIC):/m;
	my @rows = map { [ split /\|/, $_, -1 ] } grep { $_ ne '' } split /\n/, $out;
	return (\@rows, undef);
}

sub open_session
{
	my ($node, @settings) = @_;
	my $session = $node->background_psql('postgres', on_error_stop => 0, timeout => 600);
	$session->set_query_timer_restart();
	$session->query_safe(join '', map { "SET $_;" } @settings) if @settings;
	return $session;
}

sub pick { return $_[ int(rand(@_)) ]; }

# --- one round's table ----------------------------------------------------------

# One element of a row's vector (SQL over the row's id and the element's
# number j) for the data's shape.
sub element_sql
{
	my ($shape, $metric, $row) = @_;
	return '(random() * 2 - 1)' if $shape eq 'uniform';
	return "(sin(($row % 5) * 7.1 + j) + (random() - 0.5) * 0.05)" if $shape eq 'clustered';
	# grid: many ties and duplicates; cosine needs no zero vector
	return ($metric eq 'cosine' ? 'CASE WHEN j = 1 THEN 1 ELSE 0 END + ' : '') . 'floor(random() * 4)'
	  if $shape eq 'grid';
	return '(random() * 1e-6)' if $shape eq 'tiny';
	return '((random() * 2 - 1) * power(10, floor(random() * 5) - 2))';    # scales from 0.01 to 100
}

# The vector of the row whose id is $row (its reference makes the planner
# evaluate the subquery for each row).
sub vector_sql
{
	my ($t, $row) = @_;
	my $e = element_sql($t->{shape}, $t->{metric}, $row);
	return "array(SELECT $e FROM generate_series(1, $t->{dim}) j WHERE $row > 0)::vector";
}

# A query vector near the data (or a stored row's vector, unless $literal;
# or, after the rows nearest a vector were deleted, often that vector).
sub query_vector
{
	my ($t, $literal) = @_;
	return $t->{deleted_near} if $t->{deleted_near} && !$literal && rand() < 0.4;
	return "(SELECT v FROM $t->{name} WHERE v IS NOT NULL ORDER BY id OFFSET " . int(rand(50)) . ' LIMIT 1)'
	  if !$literal && rand() < 0.2;
	my @x;
	for my $j (1 .. $t->{dim})
	{
		my $shape = $t->{shape};
		push @x,
			$shape eq 'uniform' ? rand() * 2 - 1
		  : $shape eq 'clustered' ? sin(int(rand(5)) * 7.1 + $j) + (rand() - 0.5) * 0.1
		  : $shape eq 'grid' ? int(rand(4))
		  : $shape eq 'tiny' ? (rand() < 0.5 ? 0 : rand() * 1e-6)
		  : (rand() * 2 - 1) * 10**(int(rand(5)) - 2);
	}
	$x[0] = 1 if $t->{metric} eq 'cosine' && !grep { $_ != 0 } @x;
	return "'[" . join(',', map { sprintf('%.6g', $_) } @x) . "]'::vector";
}

# A WHERE clause over alias t of random selectivity.
sub random_filter
{
	my ($t) = @_;
	my $n = $t->{next_id};
	my $r = rand();
	return 'true' if $r < 0.2;
	return 't.cat < ' . (1 + int(rand(100))) if $r < 0.35;
	return 't.cat = ' . int(rand(100)) if $r < 0.45;
	return 't.cat IN (' . join(',', map { int(rand(100)) } 1 .. 3) . ')' if $r < 0.5;
	return 't.id % ' . (2 + int(rand(1000))) . ' = ' . int(rand(2)) if $r < 0.6;
	return 't.id = ' . (1 + int(rand($n))) if $r < 0.67;
	return 't.id IN (' . join(',', map { 1 + int(rand($n)) } 1 .. 1 + int(rand(8))) . ')' if $r < 0.74;
	my $lo = 1 + int(rand($n));
	return "t.id BETWEEN $lo AND " . ($lo + int(rand(200))) if $r < 0.8;
	return "t.cat IN (SELECT c FROM $t->{name}_picks)" if $r < 0.9;
	return 't.cat < ' . (1 + int(rand(50))) . ' AND t.id % ' . (2 + int(rand(20))) . ' = 0';
}

sub random_k { my $r = rand(); return $r < 0.2 ? 1 : $r < 0.5 ? 10 : 1 + int(rand(100)); }

# Settings of one statement: the plan it is pushed to, the search's size.
sub plan_settings
{
	my ($t) = @_;
	my @set;
	my $plan = pick('index', 'filtered', 'planner');
	$passed_over = 0;
	push @set, 'enable_seqscan = off', 'cagra.enable_filtered_scan = off' if $plan eq 'index';
	push @set, 'enable_seqscan = off', 'enable_indexscan = off', 'enable_bitmapscan = off'
	  if $plan eq 'filtered';
	push @set, 'cagra.itopk_size = ' . pick(16, 32) if rand() < 0.3;
	# the scan's DEBUG1 line counts the rows its graph search passed over
	push @set, 'client_min_messages = debug1' if $plan ne 'planner' || rand() < 0.5;
	return join '', map { "SET LOCAL $_; " } @set;
}

sub new_table
{
	my ($node) = @_;
	my $t = {
		name => "t$round",
		dim => pick(1, 2, 3, 4, 8, 16, 32),
		rows => pick(200, 500, 1000, 2000, 3000),
		metric => pick(qw(l2 ip cosine l1)),
		storage => pick(qw(float32 float16)),
		shape => pick(qw(uniform clustered grid tiny scaled)),
		degree => pick(4, 8, 16, 32),
		cat_index => rand() < 0.6,
		build_empty => rand() < 0.15,
	};
	$t->{op} = $operator{ $t->{metric} };
	$t->{next_id} = $t->{rows} + 1;
	my $name = $t->{name};
	my $vector = vector_sql($t, 'i');
	my $intermediate = 2 * $t->{degree};
	my $index = "CREATE INDEX ${name}_v ON $name USING cagra (v vector_$t->{metric}_ops)"
	  . " WITH (graph_degree = $t->{degree}, intermediate_graph_degree = $intermediate, storage = $t->{storage})";
	my $load = "SELECT setseed(" . rand() . ");
		INSERT INTO $name SELECT i, floor(random() * 100), CASE WHEN random() < 0.01 THEN NULL ELSE $vector END
		  FROM generate_series(1, $t->{rows}) i;";
	$node->safe_psql('postgres', "
		CREATE TABLE $name (id int PRIMARY KEY, cat int, v vector($t->{dim})) WITH (autovacuum_enabled = off);
		CREATE TABLE ${name}_picks AS SELECT c FROM generate_series(0, 99) c WHERE c % " . (2 + int(rand(30))) . " = 0;
		CREATE TABLE ${name}_deleted (c tid);
		" . ($t->{cat_index} ? "CREATE INDEX ON $name (cat);" : '') . "
		" . ($t->{build_empty} ? "$index; $load" : "$load $index;") . "
		ANALYZE $name;");
	$t->{oid} = $node->safe_psql('postgres', "SELECT '$name'::regclass::oid");
	$t->{dirty} = 0;
	$context = "table: $name (" . join(', ', map { "$_ $t->{$_}" } qw(dim rows metric storage shape degree))
	  . ', cat index ' . ($t->{cat_index} ? 'yes' : 'no') . ($t->{build_empty} ? ', built empty' : '') . ')';
	return $t;
}

# --- changes ----------------------------------------------------------------------

sub mutate
{
	my ($node, $t) = @_;
	my $name = $t->{name};
	my @steps = @{ pick([qw(delete_random vacuum insert)], [qw(delete_all vacuum insert)], ['delete_near'],
			['delete_near'], [qw(delete_near vacuum)], ['insert'], ['update_vectors'], [qw(update_cat vacuum)],
			['vacuum'], ['delete_random'], [qw(delete_near vacuum insert)]) };
	# the rows a delete_near deletes, for the queries of the next phase only
	$node->safe_psql('postgres', "TRUNCATE ${name}_deleted");
	delete $t->{deleted_near};
	for my $step (@steps)
	{
		my $sql = "SELECT setseed(" . rand() . "); ";
		if ($step eq 'delete_random')
		{
			$sql .= "DELETE FROM $name WHERE random() < " . pick(0.05, 0.2, 0.5, 0.9);
		}
		elsif ($step eq 'delete_all')
		{
			$sql .= "DELETE FROM $name";
		}
		elsif ($step eq 'delete_near')
		{
			my $q = query_vector($t, 1);
			$t->{deleted_near} = $q;
			$sql .= "SET enable_indexscan = off; SET cagra.enable_filtered_scan = off;
				WITH d AS (DELETE FROM $name WHERE id IN (
					SELECT id FROM $name WHERE v IS NOT NULL ORDER BY v $t->{op} $q LIMIT " . pick(10, 100, 500) . ")
					RETURNING ctid)
				INSERT INTO ${name}_deleted SELECT ctid FROM d";
		}
		elsif ($step eq 'vacuum')
		{
			$sql = "VACUUM $name";
		}
		elsif ($step eq 'insert')
		{
			my $n = pick(50, 500, $t->{rows});
			my $first = $t->{next_id};
			$t->{next_id} += $n;
			$sql .= "INSERT INTO $name SELECT i, floor(random() * 100), " . vector_sql($t, 'i')
			  . " FROM generate_series($first, $first + $n - 1) i";
		}
		elsif ($step eq 'update_vectors')
		{
			$sql .= "UPDATE $name SET v = " . vector_sql($t, 'id') . ' WHERE random() < 0.1';
		}
		else
		{
			$sql .= "UPDATE $name SET cat = floor(random() * 100) WHERE random() < 0.1";
		}
		my ($ret, $out, $err) = $node->psql('postgres', $sql);
		check('mutation', $ret == 0, "$step failed: $err\n  statement: $sql");
		$t->{dirty} = $step eq 'vacuum' ? 0 : $step eq 'insert' ? $t->{dirty} : 1;
	}
	my ($ret, $out, $err) = $node->psql('postgres', "ANALYZE $name");
	check('mutation', $ret == 0, "ANALYZE failed: $err");
	return join ', ', @steps;
}

# --- the checks of one answer -------------------------------------------------------

# $rows: [ctid, tableoid, id, xmin, distance] each (empty fields where the
# statement did not select them). %a: filter, query, k (undef: no count
# check), search (cagra_search's distance semantics), ordered.
sub check_answer
{
	my ($ref, $t, $sql, $rows, %a) = @_;
	my $name = $t->{name};
	my $what = "statement: $sql";
	my $statement_passed_over = $passed_over;
	my @ctids = map { $_->[0] } @$rows;
	my @ids = map { $_->[2] eq '' ? 'NULL' : $_->[2] } @$rows;
	my ($ref_rows, $err) = run_sql($ref, "
		SELECT count(*) FILTER (WHERE t.v IS NOT NULL), count(*) FROM $name t WHERE $a{filter};
		SELECT u.n, c.id, t.ctid, t.xmin, ($a{filter}), t.v $t->{op} $a{query}, vector_norm(t.v), vector_norm($a{query})
		  FROM unnest('{" . join(',', map { "\"$_\"" } @ctids) . "}'::tid[], '{" . join(',', @ids) . "}'::int[])
		       WITH ORDINALITY u(c, i, n)
		  LEFT JOIN $name c ON c.ctid = u.c
		  LEFT JOIN $name t ON t.id = u.i
		 ORDER BY u.n");
	if ($err)
	{
		# a table a sequential scan cannot read: name the relation of the
		# file the error names
		my ($file) = $err =~ m{relation base/\d+/(\d+)};
		my ($name) = $file ? @{ (run_sql($ref, "SELECT oid::regclass FROM pg_class WHERE relfilenode = $file"))[0] // [] } : ();
		check('reference', 0, "the reference query failed: $err" . ($name ? "  (relation $name->[0])" : '')
			  . "\n  $what");
		return;
	}
	my ($indexed, $matching) = @{ shift(@$ref_rows) };

	my %seen;
	my ($previous, $previous_tolerance);
	for my $i (0 .. $#$rows)
	{
		my ($ctid, $tableoid, $id, $xmin, $distance) = @{ $rows->[$i] };
		my (undef, $id_at_ctid, $row_ctid, $row_xmin, $passes, $exact, $norm, $query_norm) = @{ $ref_rows->[$i] };
		my $row = "row " . ($i + 1) . " (ctid $ctid, id " . ($id // '') . ")";
		next unless check('row_visible', $row_ctid ne '', "$row: no visible row has this id\n  $what");
		check('row_identity', $id_at_ctid eq $id && $row_ctid eq $ctid,
			"$row: the row with this id is at ctid $row_ctid; at ctid $ctid is id '$id_at_ctid'\n  $what");
		check('row_identity', $tableoid eq $t->{oid}, "$row: tableoid $tableoid, the table's is $t->{oid}\n  $what")
		  if $tableoid ne '';
		check('row_identity', $xmin eq $row_xmin, "$row: xmin $xmin, the row's is $row_xmin\n  $what")
		  if $xmin ne '';
		check('passes_filter', $passes eq 't', "$row: fails the filter $a{filter}\n  $what");
		check('no_duplicate', !$seen{$id}++, "$row: returned twice\n  $what");
		if ($distance ne '')
		{
			my $tolerance = $a{search} ? search_tolerance($t, $exact, $norm, $query_norm) : 0;
			check('exact_distance', $exact ne '' && abs($distance - $exact) <= $tolerance,
				"$row: distance $distance, exact $exact (tolerance $tolerance)\n  $what");
		}
		next unless $a{ordered};
		# a NULL vector's NULL distance sorts last, as in the sequential scan
		my $key = $a{search} ? $distance : $exact;
		$key = 'Inf' if $key eq '';
		check('distance_order', !defined $previous || $key >= $previous - $previous_tolerance,
			"$row: distance $key after " . ($previous // '') . "\n  $what");
		$previous = $key;
		$previous_tolerance = $exact eq '' ? 0 : summing_tolerance($t, $exact, $norm, $query_norm);
	}
	if (defined $a{k})
	{
		# rows whose vector is NULL may come last (the sequential scan) or not
		# at all (not indexed)
		my $least = $a{k} < $indexed ? $a{k} : $indexed;
		my $most = $a{k} < $matching ? $a{k} : $matching;
		my $skipped = @$rows < $least && !$a{search} && $t->{metric} ne 'ip' ? $statement_passed_over : 0;
		$short{$cluster}{ $t->{metric} } += $least - @$rows if @$rows < $least && !$a{search};
		note("row_count: " . ($least - @$rows) . " matching rows short; the scan passed over $skipped "
			 . "(docs/index.md)\n  $what")
		  if $skipped && $skipped >= $least - @$rows;
		check('row_count', (@$rows >= $least || $skipped >= $least - @$rows) && @$rows <= $most,
			scalar(@$rows) . " rows for k = $a{k} where $indexed match ($matching with NULL vectors)\n  $what");
	}
}

# How far the index's own distance may be from the operator's: summed in
# float32 in the index's order, a few ulps (relative for l2 and l1, against
# the norms for ip, and absolute for cosine, whose unit vectors the index
# rounds once more). Rows whose exact distances differ by less may come in
# either order.
sub summing_tolerance
{
	my ($t, $exact, $norm, $query_norm) = @_;
	my $d = $t->{dim};
	return $d * 2**-23 * $norm * $query_norm if $t->{metric} eq 'ip';
	return $d * 2**-23 if $t->{metric} eq 'cosine';
	return $d * 2**-23 * abs($exact);
}

# How far cagra_search's distance may be from the exact one: the index's
# own, and with float16 storage the distance to the stored vector, each
# element rounded to half precision (relative 2^-11, or 2^-25 absolute
# below the normal range), as documented.
sub search_tolerance
{
	my ($t, $exact, $norm, $query_norm) = @_;
	my $d = $t->{dim};
	my $summing = summing_tolerance(@_);
	return $summing if $t->{storage} eq 'float32';
	my $rounding = 2**-11 * $norm + sqrt($d) * 2**-25;    # |x - half(x)|, Euclidean
	my $bound =
		$t->{metric} eq 'l2' ? $rounding
	  : $t->{metric} eq 'ip' ? $query_norm * $rounding
	  : $t->{metric} eq 'cosine' ? 2 * (2**-11 + sqrt($d) * 2**-25)
	  : sqrt($d) * $rounding;
	return 2 * $bound + $summing;
}

# --- the statements -------------------------------------------------------------------

my $columns = 't.ctid, t.tableoid, t.id';

sub query_select
{
	my ($session, $ref, $t) = @_;
	my ($filter, $q, $k) = (random_filter($t), query_vector($t), random_k());
	my $with_distance = rand() < 0.5;
	my $with_xmin = rand() < 0.3;
	my $lock = $t->{read_only} ? '' : pick('', '', '', ' FOR UPDATE', ' FOR UPDATE SKIP LOCKED', ' FOR SHARE');
	# SKIP LOCKED while another session holds some rows: those do not match
	my $locked;
	if ($lock =~ /SKIP LOCKED/ && rand() < 0.7)
	{
		$locked = 't.id % ' . (2 + int(rand(9))) . ' = ' . int(rand(2));
		run_sql($t->{locker}, "BEGIN; SELECT count(*) FROM (SELECT FROM $t->{name} t WHERE $locked FOR UPDATE) s;");
	}
	my $settings = plan_settings($t);
	my $select = "SELECT $columns, " . ($with_xmin ? 't.xmin' : 'NULL') . ', '
	  . ($with_distance ? "t.v $t->{op} $q" : 'NULL')
	  . " FROM $t->{name} t WHERE $filter ORDER BY t.v $t->{op} $q LIMIT $k$lock";
	$explainable = [ $settings, $select ];
	my $sql = "BEGIN; $settings$select; ROLLBACK;";
	my ($rows, $err) = run_sql($session, $sql);
	if ($locked)
	{
		run_sql($t->{locker}, 'ROLLBACK');
		$sql .= " (another session holding the rows WHERE $locked FOR UPDATE)";
		$filter = "($filter) AND NOT ($locked)";
	}
	return unless check('no_error', !defined $err, ($err // '') . "\n  statement: $sql");
	check_answer($ref, $t, $sql, $rows, filter => $filter, query => $q, k => $k, ordered => 1);
}

sub query_cursor
{
	my ($session, $ref, $t) = @_;
	my ($filter, $q) = (random_filter($t), query_vector($t));
	my @fetches = map { random_k() } 1 .. 1 + int(rand(3));
	my $k = 0;
	$k += $_ for @fetches;
	my $settings = plan_settings($t);
	my $select = "SELECT $columns, NULL, t.v $t->{op} $q FROM $t->{name} t WHERE $filter ORDER BY t.v $t->{op} $q";
	$explainable = [ $settings, $select ];
	my $sql = "BEGIN; ${settings}DECLARE c CURSOR FOR $select; " . join('', map { "FETCH $_ FROM c; " } @fetches)
	  . 'COMMIT;';
	my ($rows, $err) = run_sql($session, $sql);
	return unless check('no_error', !defined $err, ($err // '') . "\n  statement: $sql");
	check_answer($ref, $t, $sql, $rows, filter => $filter, query => $q, k => $k, ordered => 1);
}

# UPDATE ... WHERE CURRENT OF a cursor over the index updates the row
# fetched last (rolled back). The update runs only when the FETCH gave all
# it asked for: past the end, the cursor is on no row.
sub query_current_of
{
	my ($session, $ref, $t) = @_;
	my ($filter, $q, $n) = (random_filter($t), query_vector($t), 1 + int(rand(5)));
	my $settings = plan_settings($t);
	my $select = "SELECT $columns, NULL, NULL FROM $t->{name} t WHERE $filter ORDER BY t.v $t->{op} $q FOR UPDATE";
	$explainable = [ $settings, $select ];
	my $sql = "BEGIN; ${settings}DECLARE c CURSOR FOR $select; FETCH $n FROM c;";
	my ($rows, $err) = run_sql($session, $sql);
	if (!$err && @$rows == $n)
	{
		my $update = "UPDATE $t->{name} SET cat = cat WHERE CURRENT OF c RETURNING id;";
		$sql .= " $update";
		(my $updated, $err) = run_sql($session, $update);
		$t->{dirty} = 1;    # the rolled-back update leaves a dead row version in the index
		check('current_of', $err || (@$updated == 1 && $updated->[0][0] eq $rows->[-1][2]),
			'updated ' . join(',', map { $_->[0] } @{ $updated // [] }) . ", fetched last $rows->[-1][2]\n"
			  . "  statement: $sql");
	}
	run_sql($session, 'ROLLBACK');
	$sql .= ' ROLLBACK;';
	return unless check('no_error', !defined $err, ($err // '') . "\n  statement: $sql");
	check_answer($ref, $t, $sql, $rows, filter => $filter, query => $q, k => $n, ordered => 1);
}

# A LATERAL join: several queries in one statement.
sub query_lateral
{
	my ($session, $ref, $t) = @_;
	my ($filter, $k) = (random_filter($t), random_k());
	my @q = map { query_vector($t) } 1 .. 2 + int(rand(3));
	my $values = join ', ', map { '(' . ($_ + 1) . ", $q[$_])" } 0 .. $#q;
	my $settings = plan_settings($t);
	my $select = "SELECT qq.n, x.* FROM (VALUES $values) qq(n, q) CROSS JOIN LATERAL ("
	  . "SELECT $columns, NULL, t.v $t->{op} qq.q FROM $t->{name} t WHERE $filter ORDER BY t.v $t->{op} qq.q LIMIT $k) x";
	$explainable = [ $settings, $select ];
	my $sql = "BEGIN; $settings$select; COMMIT;";
	my ($rows, $err) = run_sql($session, $sql);
	return unless check('no_error', !defined $err, ($err // '') . "\n  statement: $sql");
	for my $n (1 .. @q)
	{
		my @mine = map { [ @$_[ 1 .. 5 ] ] } grep { $_->[0] == $n } @$rows;
		check_answer($ref, $t, "$sql (query $n)", \@mine, filter => $filter, query => $q[ $n - 1 ], k => $k,
			ordered => 1);
	}
}

# DELETE of the rows a CTE found by ctid (rolled back).
sub query_ctid_delete
{
	my ($session, $ref, $t) = @_;
	my ($filter, $q, $k) = (random_filter($t), query_vector($t), random_k());
	my $settings = plan_settings($t);
	my $delete = "WITH nn AS (SELECT t.ctid FROM $t->{name} t WHERE $filter ORDER BY t.v $t->{op} $q LIMIT $k)"
	  . " DELETE FROM $t->{name} t USING nn WHERE t.ctid = nn.ctid RETURNING $columns, NULL, NULL";
	$explainable = [ $settings, $delete ];
	my $sql = "BEGIN; $settings$delete; ROLLBACK;";
	my ($rows, $err) = run_sql($session, $sql);
	return unless check('no_error', !defined $err, ($err // '') . "\n  statement: $sql");
	check_answer($ref, $t, $sql, $rows, filter => $filter, query => $q, k => $k, ordered => 0);
}

sub query_search
{
	my ($session, $ref, $t) = @_;
	my @q = map { $t->{deleted_near} && rand() < 0.5 ? $t->{deleted_near} : query_vector($t) } 1 .. 1 + int(rand(4));
	my $k = random_k();
	my $allowed = rand() < 0.5;
	my $filter = $allowed ? random_filter($t) : 'true';
	my $allowed_sql = "ARRAY(SELECT t.ctid FROM $t->{name} t WHERE $filter)";
	# the TIDs of rows deleted since (dead, not yet vacuumed, or slots that
	# VACUUM freed for new rows) allowed too, as a list made earlier is
	if ($allowed && $t->{deleted_near} && rand() < 0.8)
	{
		$allowed_sql .= " || ARRAY(SELECT c FROM $t->{name}_deleted)";
		$filter = "($filter) OR t.ctid IN (SELECT c FROM $t->{name}_deleted)";
	}
	my $sql = 'BEGIN; ' . (rand() < 0.3 ? 'SET LOCAL cagra.itopk_size = ' . pick(16, 32) . '; ' : '')
	  . "SELECT s.query, s.ctid, NULL, t.id, NULL, s.distance FROM cagra_search('$t->{name}_v', ARRAY["
	  . join(', ', @q) . "]::vector[], $k" . ($allowed ? ", $allowed_sql" : '')
	  . ") s LEFT JOIN $t->{name} t ON t.ctid = s.ctid; COMMIT;";
	my ($rows, $err) = run_sql($session, $sql);
	return unless check('no_error', !defined $err, ($err // '') . "\n  statement: $sql");
	for my $n (1 .. @q)
	{
		my @mine = map { [ @$_[ 1 .. 5 ] ] } grep { $_->[0] == $n } @$rows;
		check_answer($ref, $t, "$sql (query $n)", \@mine, filter => $filter, query => $q[ $n - 1 ],
			k => ($allowed || !$t->{dirty} ? $k : undef), search => 1, ordered => 1);
	}
}

my @kinds = (
	[ \&query_select, 8 ], [ \&query_cursor, 2 ], [ \&query_current_of, 1 ], [ \&query_lateral, 2 ],
	[ \&query_ctid_delete, 1 ], [ \&query_search, 4 ]);

# A standby's session runs only what reads.
my %reads = map { $_ => 1 } (\&query_select, \&query_cursor, \&query_lateral, \&query_search);

sub random_query
{
	my ($session, $ref, $t) = @_;
	@new_failures = ();
	$explainable = undef;
	my @mine = grep { !$t->{read_only} || $reads{ $_->[0] } } @kinds;
	my $weight = 0;
	$weight += $_->[1] for @mine;
	my $r = rand($weight);
	for my $kind (@mine)
	{
		next if ($r -= $kind->[1]) >= 0;
		$kind->[0]->(@_);
		last;
	}
	return unless @new_failures && $explainable;
	# the plan that gave the wrong answer, in the failure's message
	my ($settings, $statement) = @$explainable;
	my ($plan, $err) = run_sql($session, "BEGIN; ${settings}EXPLAIN (COSTS OFF) $statement; ROLLBACK;");
	my $nodes = $err ? "EXPLAIN failed: $err" : join(' > ',
		map { $_->[0] =~ s/^\s*(?:->\s*)?//r } grep { $_->[0] !~ /^\s+[A-Z][a-zA-Z ]+: / } @$plan);
	$failures{$cluster}{ $_->[0] }[ $_->[1] ] .= "\n  plan: $nodes" for @new_failures;
}

# --- rounds -----------------------------------------------------------------------------

sub run_round
{
	my ($node, $standby) = @_;
	# a round's choices follow from the seed, the server and the round alone,
	# so that CAGRA_DIFF_ONLY and CAGRA_DIFF_ROUND repeat it
	my $server = $cluster eq 'worker' ? 1 : 0;
	srand(($seed * 1_000_003 + $round * 7_919 + $server * 104_729) % 2**31);
	my $t = new_table($node);
	my $table_context = $context;
	my $ref = open_session($node, 'enable_indexscan = off', 'enable_bitmapscan = off',
		'cagra.enable_filtered_scan = off', 'enable_indexonlyscan = off');
	my $long = open_session($node);
	$t->{locker} = open_session($node);
	my $standby_long;
	if ($standby)
	{
		$node->wait_for_catchup($standby);
		$standby_long = open_session($standby);
	}
	my $phases = 2 + int(rand(3));
	my @changes;
	for my $phase (1 .. $phases)
	{
		my $fresh = open_session($node);
		for my $i (1 .. 8)
		{
			my $r = rand();
			my ($session, $which) =
				$standby && $r < 0.3 ? ($standby_long, 'long-lived session on the standby')
			  : $r < 0.65 ? ($long, 'long-lived session')
			  : ($fresh, 'fresh session');
			$context = "$table_context; phase $phase, after changes: "
			  . (@changes ? join('; ', @changes) : 'none') . "; $which";
			$t->{read_only} = $session == ($standby_long // 0);
			random_query($session, $ref, $t);
		}
		$fresh->quit;
		next if $phase == $phases;
		push @changes, mutate($node, $t);
		$node->wait_for_catchup($standby) if $standby;
	}
	$_->quit for grep { defined } $ref, $long, $t->{locker}, $standby_long;
	$node->safe_psql('postgres', "DROP TABLE $t->{name}, $t->{name}_picks, $t->{name}_deleted");
}

my $started = time();
for my $i (0 .. $#clusters)
{
	$cluster = $clusters[$i];
	my $node =
	  $cluster eq 'worker'
	  ? CagraGpuNode::cpu_worker('diffworker', "max_parallel_maintenance_workers = 0\n")
	  : PostgreSQL::Test::Cluster->new('diffplain');
	my $standby;
	if ($cluster eq 'plain')
	{
		# with a streaming standby whose sessions query the replayed index
		# (never cancelled by replay: it waits for them)
		$node->init(allows_streaming => 1);
		$node->append_conf('postgresql.conf', "max_parallel_maintenance_workers = 0\n");
		$node->start;
		$node->safe_psql('postgres', 'CREATE EXTENSION cagra');
		$node->backup('diffbackup');
		$standby = PostgreSQL::Test::Cluster->new('diffstandby');
		$standby->init_from_backup($node, 'diffbackup', has_streaming => 1);
		$standby->append_conf('postgresql.conf', "max_standby_streaming_delay = -1\n");
		$standby->start;
	}
	# each server gets its share of what is left of the time
	my $deadline = time() + ($started + $seconds - time()) / (@clusters - $i);
	my $rounds = 0;
	for ($round = $only_round // 1;; $round++)
	{
		run_round($node, $standby);
		$rounds++;
		last if defined $only_round;
		last if defined $rounds_wanted ? $rounds >= $rounds_wanted : time() >= $deadline;
	}
	diag("$cluster: $rounds rounds, " . sprintf('%.0f s', time() - $started));
	diag("$cluster: rows short of LIMIT, by metric: " . join(', ', map { "$_ " . ($short{$cluster}{$_} // 0) } qw(l2 ip cosine l1)));
	if ($cluster eq 'worker')
	{
		# A linker loading a copy for its plans makes a search that meets the
		# load fall back (cagra.device = auto): a few; and no request is
		# answered with an error, also when a batch's first backend asks
		# again before the batch's other requests are answered.
		my ($fallbacks, $errors, $queries) =
		  split /\|/, $node->safe_psql('postgres', 'SELECT fallbacks, errors, queries FROM cagra_status');
		is($errors, 0, 'worker: no request answered with an error');
		cmp_ok($fallbacks, '<=', $queries / 100, "worker: at most 1% of its queries fell back to the CPU ($fallbacks of $queries)");
	}
	for my $check (@checks)
	{
		my $failed = $failures{$cluster}{$check} // [];
		ok(!@$failed, "$cluster: $check (" . ($counted{$cluster}{$check} // 0) . ' checks, '
			  . scalar(@$failed) . ' failed)');
		diag($_) for grep { defined } @$failed[ 0 .. $max_reports - 1 ];
	}
	$standby->stop if $standby;
	$node->stop;
}

done_testing();
