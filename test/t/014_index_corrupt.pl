# test/t/014_index_corrupt.pl — a corrupted meta page (or node header) of a
# cagra index gives a clear error (ERRCODE_INDEX_CORRUPTED, XX002, with a
# REINDEX hint) from every reader, never a crash; cagra_index_check lists
# the problem as a row.  Every meta field is checked against its limits
# (search parameters, the float16 norm bound and the reused slots too,
# which searches and inserts use); a field no reader depends on is listed
# by the check only.  An index of an older on-disk format is refused by
# every reader with ERRCODE_FEATURE_NOT_SUPPORTED (0A000) and a REINDEX
# INDEX hint.  The server is stopped, bytes of the index file are
# patched, and it is started again.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('corrupt');
$node->init;
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION cagra;
	CREATE TABLE t (id int PRIMARY KEY, v vector(4));
	INSERT INTO t SELECT i, ARRAY[i, i % 7, i % 5, 1]::vector FROM generate_series(1, 300) i;
	CREATE INDEX t_v ON t USING cagra (v) WITH (graph_degree = 8, intermediate_graph_degree = 16);
	CHECKPOINT;
});
my $file = $node->data_dir . '/' . $node->safe_psql('postgres', "SELECT pg_relation_filepath('t_v')");
my ($nodes, $pages) = split /\|/, $node->safe_psql('postgres', "SELECT nodes, pages FROM cagra_index_info('t_v')");
is($nodes, '300', 'index built');

# The meta page: the page header (24 bytes), then CagraMetaData.
my %field = (
	version => 24 + 4,
	dims => 24 + 8,
	graph_degree => 24 + 16,
	record_size => 24 + 28,
	n => 24 + 40,
	entry_count => 24 + 56,
	entry0 => 24 + 60,
	build_device => 24 + 24,
	row_stride => 24 + 4160,
	max_norm => 24 + 4184,
	reused => 24 + 4192,
	search_itopk => 24 + 5224,
	search_probes => 24 + 5228,
	unlinked => 24 + 5240);

sub read_bytes
{
	my ($off, $len) = @_;
	open(my $fh, '<:raw', $file) or die "open $file: $!";
	seek($fh, $off, 0);
	read($fh, my $buf, $len);
	close($fh);
	return $buf;
}

sub write_bytes
{
	my ($off, $bytes) = @_;
	open(my $fh, '+<:raw', $file) or die "open $file: $!";
	seek($fh, $off, 0);
	print $fh $bytes;
	close($fh);
}

my $original = read_bytes(0, 2 * 8192);

# Patch while the server is down, then start it again.
sub corrupt
{
	my ($off, $bytes) = @_;
	$node->stop;
	write_bytes(0, $original);
	write_bytes($off, $bytes);
	$node->start;
}

sub err_of
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	return $err;
}

my $record_size = unpack('V', read_bytes($field{record_size}, 4));
my @cases = (
	[ 'entry count', $field{entry_count}, pack('V', 1000000), qr/1000000 entry nodes, at most/ ],
	[ 'entry node beyond the nodes', $field{entry0}, pack('V', 5000), qr/entry node 5000 out of range \(300 nodes\)/ ],
	[ 'dimensions', $field{dims}, pack('V', 100000), qr/100000 dimensions, more than/ ],
	[ 'graph degree', $field{graph_degree}, pack('V', 0), qr/graph_degree 0 out of range/ ],
	[ 'record size', $field{record_size}, pack('V', $record_size + 4), qr/does not match 4 dimensions and degree 8/ ],
	[ 'node count beyond the blocks', $field{n}, pack('V', 300000), qr/index has $pages blocks, 300000 nodes need/ ],
	# fields that do not place the nodes, but that searches and inserts use
	[ 'search_itopk', $field{search_itopk}, pack('V', 99999), qr/search_itopk 99999 out of range \(0 to 1024\)/ ],
	[ 'search_probes', $field{search_probes}, pack('V', 99999), qr/search_probes 99999 out of range \(0 to 1024\)/ ],
	[ 'max_norm', $field{max_norm}, pack('V', 0x7fc00000), qr/max_norm nan is not a finite non-negative number/ ],
	[ 'unlinked span', $field{unlinked}, pack('V', 5000), qr/meta page: 5000 unlinked nodes of 300/ ],
	# one reused slot (reused = 1), logged beyond the nodes
	[ 'reused slot', $field{reused}, pack('VVV', 1, 0, 5000), qr/reused slot 5000 out of range \(300 nodes\)/ ]);

for my $c (@cases)
{
	my ($what, $off, $bytes, $problem) = @$c;

	corrupt($off, $bytes);
	my $scan = err_of("SET enable_seqscan = off; SELECT id FROM t ORDER BY v <-> '[1,1,1,1]' LIMIT 3");
	like($scan, qr/ERROR:  XX002: cagra index "t_v" is corrupted: .*$problem/, "$what: index scan error");
	like($scan, qr/HINT:  REINDEX the index/, "$what: hint");
	like(err_of("SELECT * FROM cagra_search('t_v', ARRAY['[1,1,1,1]']::vector[], 3)"),
		qr/XX002: cagra index "t_v" is corrupted: .*$problem/, "$what: cagra_search error");
	like(err_of("INSERT INTO t VALUES (1000, '[1,2,3,4]')"),
		qr/XX002: cagra index "t_v" is corrupted/, "$what: insert error");
	like(err_of("SELECT * FROM cagra_index_info('t_v')"),
		qr/XX002: cagra index "t_v" is corrupted/, "$what: cagra_index_info error");
	like($node->safe_psql('postgres', "SELECT * FROM cagra_index_check('t_v')"),
		$problem, "$what: cagra_index_check lists it");
	is($node->safe_psql('postgres', 'SELECT 1'), '1', "$what: the server runs");
}

# A field only the build reads back (the device it ran on): listed by the
# check, and no reader stops for it.
corrupt($field{build_device}, pack('V', 7));
like($node->safe_psql('postgres', "SELECT * FROM cagra_index_check('t_v')"), qr/meta page: unknown build device 7/,
	'build device: cagra_index_check lists it');
is($node->safe_psql('postgres', "SET enable_seqscan = off; SELECT id FROM t ORDER BY v <-> '[10,3,0,1]' LIMIT 1"),
	'10', 'build device: searches go on');

# An index of on-disk format 1 (rows and vectors interleaved): every reader
# refuses it, naming the formats and the REINDEX that rebuilds it.
corrupt($field{version}, pack('V', 1));
{
	my $old = qr/ERROR:  0A000: index "t_v" has on-disk format 1, this version of cagra reads format 2/;
	my $scan = err_of("SET enable_seqscan = off; SELECT id FROM t ORDER BY v <-> '[1,1,1,1]' LIMIT 3");
	like($scan, $old, 'format 1: index scan refused');
	like($scan, qr/HINT:  Rebuild it with REINDEX INDEX public\.t_v\./, 'format 1: hint');
	like(err_of("SELECT * FROM cagra_search('t_v', ARRAY['[1,1,1,1]']::vector[], 3)"), $old,
		'format 1: cagra_search refused');
	like(err_of("INSERT INTO t VALUES (1000, '[1,2,3,4]')"), $old, 'format 1: insert refused');
	like(err_of("VACUUM t"), $old, 'format 1: vacuum refused');
	like(err_of("SELECT * FROM cagra_index_info('t_v')"), $old, 'format 1: cagra_index_info refused');
	like($node->safe_psql('postgres', "SELECT * FROM cagra_index_check('t_v')"),
		qr/on-disk format 1, this version of cagra reads format 2/, 'format 1: cagra_index_check lists it');
	is($node->safe_psql('postgres', 'SELECT 1'), '1', 'format 1: the server runs');
}

# A live node's heap TID beyond the table's blocks: node 0's header is at
# the start of block 1 (after the page header), ItemPointerData first.
my $heap_blocks = $node->safe_psql('postgres', "SELECT pg_relation_size('t') / 8192");
corrupt(8192 + 24, pack('vv', 0, 50000));
like($node->safe_psql('postgres', "SELECT * FROM cagra_index_check('t_v')"),
	qr/node 0: heap TID \(50000,\d+\) beyond the table's $heap_blocks blocks/,
	'cagra_index_check flags a heap TID beyond the table');

# A node flagged unlinked (its flags after the 6-byte heap TID) before the
# meta page's unlinked span, which searches would not take as an entry
corrupt(8192 + 24 + 6, pack('v', 0x0005));
like($node->safe_psql('postgres', "SELECT * FROM cagra_index_check('t_v')"),
	qr/node 0: unlinked, but before the unlinked nodes \(from 300\)/,
	'cagra_index_check flags an unlinked node outside the unlinked span');

# A live node no edge leads to (what inserts used to leave behind, issue 12):
# every row's edge to it becomes a second copy of the row's first edge.
{
	$node->stop;
	write_bytes(0, $original);
	# one page a group here: block 1 + id / k, rows row_stride apart
	my $npp = unpack('V', read_bytes(24 + 32, 4));
	my $stride = unpack('V', read_bytes($field{row_stride}, 4));
	is(unpack('V', read_bytes(24 + 36, 4)), 1, 'one page a node group');
	my $count = unpack('V', read_bytes($field{entry_count}, 4));
	my %entry = map { unpack('V', read_bytes($field{entry0} + 4 * $_, 4)) => 1 } 0 .. $count - 1;
	my ($x) = grep { !$entry{$_} } reverse 0 .. 299;
	my @saved;
	for my $id (0 .. 299)
	{
		my $row = 8192 * (1 + int($id / $npp)) + 24 + ($id % $npp) * $stride + 8;
		my @edges = unpack('V8', read_bytes($row, 32));
		push @saved, [ $row, read_bytes($row, 32) ];
		next unless grep { $_ == $x } @edges;
		my $first = (grep { $_ != $x } @edges)[0];
		write_bytes($row, pack('V8', map { $_ == $x ? $first : $_ } @edges));
	}
	$node->start;
	like($node->safe_psql('postgres', "SELECT * FROM cagra_index_check('t_v')"),
		qr/node $x: live, but no edge path leads to it from the entry nodes/,
		'cagra_index_check finds a node no search can reach');
	$node->stop;
	write_bytes($_->[0], $_->[1]) for @saved;
	$node->start;
}

# Restored, the index is clean again.
$node->stop;
write_bytes(0, $original);
$node->start;
is($node->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('t_v')"), '0', 'restored index is clean');
is($node->safe_psql('postgres', "SET enable_seqscan = off; SELECT id FROM t ORDER BY v <-> '[10,3,0,1]' LIMIT 1"),
	'10', 'and searches');

$node->stop;
done_testing();
