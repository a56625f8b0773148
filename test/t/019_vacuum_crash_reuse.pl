# test/t/019_vacuum_crash_reuse.pl — after an immediate stop in the middle
# of VACUUM's index pass (nodes marked deleted, the rows that point at them
# not yet repaired), inserts take no such slot: a slot becomes reusable only
# once a vacuum has repaired every edge into it (docs/storage.md), so no
# live row keeps an edge into a reused slot that meant the row deleted
# there.  The page format records no incarnation of a slot, so neither
# cagra_index_check nor this test could tell such an edge from a good one
# once the slot is taken: the test compares the edges the index file holds
# after the crash with those it holds later, read while the server is
# stopped.
use strict;
use warnings;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('vacuum_crash_reuse');
$node->init;
$node->append_conf('postgresql.conf', "autovacuum = off\n");
$node->start;

$node->safe_psql('postgres', q{
	CREATE EXTENSION cagra;
	CREATE TABLE churn (id int PRIMARY KEY, v vector(8));
	INSERT INTO churn SELECT i, ARRAY[sin(i), cos(i), sin(2 * i), cos(3 * i), sin(5 * i),
	                                  cos(7 * i), sin(11 * i), cos(13 * i)]::vector
	  FROM generate_series(1, 20000) i;
	CREATE INDEX churn_v ON churn USING cagra (v) WITH (graph_degree = 16, intermediate_graph_degree = 32);
	DELETE FROM churn WHERE id % 2 = 0;
});
my $file = $node->data_dir . '/' . $node->safe_psql('postgres', "SELECT pg_relation_filepath('churn_v')");

sub read_bytes
{
	my ($fh, $off, $len) = @_;
	seek($fh, $off, 0);
	read($fh, my $buf, $len) == $len or die "short read at $off";
	return $buf;
}

# The index as the file holds it (the server stopped): per node its flags
# and row.  One page a node group here (checked), rows first.
sub read_index
{
	open(my $fh, '<:raw', $file) or die "open $file: $!";
	# the meta page: the page header (24 bytes), then CagraMetaData
	my ($degree) = unpack('V', read_bytes($fh, 24 + 16, 4));
	my ($nodes_per_group, $pages_per_group, $n) = unpack('V3', read_bytes($fh, 24 + 32, 12));
	my ($stride) = unpack('V', read_bytes($fh, 24 + 4160, 4));
	my ($reuse_next) = unpack('V', read_bytes($fh, 24 + 4188, 4));
	die "expected one page a node group, got $pages_per_group" unless $pages_per_group == 1;
	my (@flags, @rows);
	for my $id (0 .. $n - 1)
	{
		my $rec = 8192 * (1 + int($id / $nodes_per_group)) + 24 + ($id % $nodes_per_group) * $stride;
		my ($f) = unpack('v', read_bytes($fh, $rec + 6, 2));
		push @flags, $f;
		push @rows, [ unpack("V$degree", read_bytes($fh, $rec + 8, 4 * $degree)) ];
	}
	close($fh);
	return { n => $n, reuse_next => $reuse_next, flags => \@flags, rows => \@rows };
}

sub is_live { my ($ix, $id) = @_; return ($ix->{flags}[$id] & 3) == 1; }

# live node -> deleted node: edges vacuum has not repaired yet
sub unrepaired_edges
{
	my ($ix) = @_;
	my @edges;
	for my $id (0 .. $ix->{n} - 1)
	{
		next unless is_live($ix, $id);
		push @edges, map { [ $id, $_ ] } grep { $_ < $ix->{n} && !is_live($ix, $_) } @{ $ix->{rows}[$id] };
	}
	return @edges;
}

# Of the edges of `before` into then deleted slots, those whose slot now
# holds a live node while the same row still has the edge.
sub stale_edges
{
	my ($before, $after, @edges) = @_;
	return grep {
		my ($src, $dst) = @$_;
		is_live($after, $dst) && is_live($after, $src) && grep { $_ == $dst } @{ $after->{rows}[$src] }
	} @edges;
}

sub check_rows
{
	return $node->safe_psql('postgres', "SELECT string_agg(p, '; ') FROM cagra_index_check('churn_v') p");
}

# An immediate stop in the middle of VACUUM's index pass (slowed down by
# the cost delay, which the pass honours page by page), once some pages'
# marks are in the WAL.
my ($vout, $verr) = ('', '');
my $vacuum = IPC::Run::start(
	[ 'psql', '-X', '-d', $node->connstr('postgres'), '-c', 'SET vacuum_cost_delay = 100',
	  '-c', 'SET vacuum_cost_limit = 1', '-c', 'VACUUM churn' ],
	'>', \$vout, '2>', \$verr);
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_progress_vacuum WHERE phase = 'vacuuming indexes'")
  or die 'vacuum never reached the index pass';
$node->poll_query_until('postgres', "SELECT live_nodes < 19000 FROM cagra_index_info('churn_v')")
  or die 'the index pass marked nothing';
$node->safe_psql('postgres', 'CREATE TABLE wal_flushed ()');    # its commit flushes the WAL so far
$node->stop('immediate');
$vacuum->finish;
$node->start;
$node->stop;
my $crashed = read_index();
my @unrepaired = unrepaired_edges($crashed);
cmp_ok(scalar(@unrepaired), '>', 0,
	'the crash left live rows pointing at marked, unrepaired nodes (' . scalar(@unrepaired) . ' edges)');
$node->start;
is(check_rows(), '', 'cagra_index_check clean after the crash');

# Inserts after the crash: none takes a marked, unrepaired slot.
$node->safe_psql('postgres', q{
	INSERT INTO churn SELECT 100000 + i, ARRAY[sin(i * 0.3), cos(i), sin(2 * i), cos(i * 0.7), 0.5, 0.5, 0.5, 0.5]::vector
	  FROM generate_series(1, 500) i});
$node->stop;
my $inserted = read_index();
my @stale = stale_edges($crashed, $inserted, @unrepaired);
is(scalar(@stale), 0, 'inserts after the crash: no live row keeps an edge into a reused slot that meant the old row')
  or diag('e.g. ' . join(', ', map { "$_->[0] -> $_->[1]" } @stale[ 0 .. ($#stale < 4 ? $#stale : 4) ]));
$node->start;
is(check_rows(), '', 'cagra_index_check clean after the inserts');

# A vacuum that completes repairs every edge into a deleted slot; then
# inserts take the slots again.
$node->safe_psql('postgres', 'VACUUM churn');
my $reused0 = $node->safe_psql('postgres', "SELECT reused_slots FROM cagra_index_info('churn_v')");
$node->safe_psql('postgres', q{
	INSERT INTO churn SELECT 200000 + i, ARRAY[cos(i * 0.3), sin(i), cos(2 * i), sin(i * 0.7), 0.1, 0.2, 0.3, 0.4]::vector
	  FROM generate_series(1, 500) i});
cmp_ok($node->safe_psql('postgres', "SELECT reused_slots FROM cagra_index_info('churn_v')") - $reused0, '>', 0,
	'after a completed vacuum, inserts take freed slots');
$node->stop;
my $vacuumed = read_index();
is(scalar(unrepaired_edges($vacuumed)), 0, 'no live row points at a deleted node after the completed vacuum');
is(scalar(stale_edges($crashed, $vacuumed, @unrepaired)), 0,
	'no live row keeps an edge from before the crash into a reused slot');
$node->start;
is(check_rows(), '', 'cagra_index_check clean');
is($node->safe_psql('postgres', "SELECT count(*) FROM churn"),
	$node->safe_psql('postgres', "SELECT live_nodes FROM cagra_index_info('churn_v')"),
	'live count matches the table');

$node->stop;
done_testing();
