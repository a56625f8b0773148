# test/t/021_parallel_write.pl — a large index's pages are written by
# parallel workers as well as the leader (max_parallel_maintenance_workers
# bounds them): every page is the same as a one-writer build's, but for the
# WAL position (pd_lsn, and so pd_checksum) of each page and the meta page's
# generation, which starts at the WAL position, also when no worker could
# be started and the leader writes alone, and for an unlogged table's index
# (no WAL); a build in a subtransaction rolled back leaves nothing; REINDEX
# and REINDEX CONCURRENTLY write with several writers; a streaming standby replays
# the several writers' WAL to the same bytes and answers the same; an
# immediate stop right after the build commits leaves an index that answers
# and checks clean after recovery; rows linked by linkers replay to the same
# bytes, and an immediate stop while they link leaves a clean index.  The heap is scanned serially
# (parallel_workers = 0) and the table is below the core's exact-kNN size,
# so the graph does not depend on the build's thread count.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1, extra => ['--data-checksums']);
$primary->append_conf('postgresql.conf', qq{
max_parallel_maintenance_workers = 2
max_worker_processes = 8
autovacuum = off
wal_keep_size = '1GB'    # kept for the standby, which reconnects after each stop
});
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION cagra');
$primary->backup('base');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;

$primary->safe_psql('postgres', q{
	CREATE TABLE items (id int, v vector(1024)) WITH (parallel_workers = 0);
	INSERT INTO items SELECT i, (SELECT array_agg(sin(i * 0.013 * d + d) + cos(i * 0.29 + d * 0.7) * 0.2)
	                              FROM generate_series(1, 1024) d WHERE i > 0)::vector
	  FROM generate_series(1, 2000) i;
	VACUUM ANALYZE items;
});

# The build's DEBUG1 line, when several processes wrote the pages, says how
# many workers did.
sub build
{
	my ($name, $workers, $settings) = @_;
	$settings //= '';
	my ($ret, $out, $err) = $primary->psql('postgres',
		"SET client_min_messages = debug1; SET max_parallel_maintenance_workers = $workers; $settings
		 CREATE INDEX $name ON items USING cagra (v)");
	is($ret, 0, "build of $name succeeds") or diag($err);
	return $err =~ /pages written by (\d+) parallel workers and the leader/ ? $1 : -1;
}

is(build('one_writer', 0), -1, 'with no maintenance workers one process writes the pages');
my $writers = build('several_writers', 2);
cmp_ok($writers, '>=', 1, "pages written by $writers parallel workers and the leader");

sub file_of
{
	my ($node, $index) = @_;
	return $node->data_dir . '/' . $primary->safe_psql('postgres', "SELECT pg_relation_filepath('$index')");
}

sub read_file_raw
{
	my ($path) = @_;
	open(my $fh, '<:raw', $path) or die "open $path: $!";
	local $/;
	my $bytes = <$fh>;
	close($fh);
	return $bytes;
}

# A page with the fields that carry a WAL position zeroed: pd_lsn and
# pd_checksum in every page; in the meta page (block 0) also the generation,
# the uint64 after the page header (24 bytes) and twelve uint32 fields.
sub masked_pages
{
	my ($bytes) = @_;
	my @pages;
	for (my $off = 0; $off < length($bytes); $off += 8192)
	{
		my $page = substr($bytes, $off, 8192);
		substr($page, 0, 10) = "\0" x 10;
		substr($page, 24 + 48, 8) = "\0" x 8 if $off == 0;
		push @pages, $page;
	}
	return @pages;
}

# The number of pages, and the first page that differs (-1: none).
sub compare_pages
{
	my ($a, $b) = @_;
	my @pa = masked_pages($a);
	my @pb = masked_pages($b);
	return (scalar(@pa), scalar(@pb), -1) if @pa != @pb;
	for my $i (0 .. $#pa)
	{
		return (scalar(@pa), scalar(@pb), $i) if $pa[$i] ne $pb[$i];
	}
	return (scalar(@pa), scalar(@pb), -1);
}

# Workers asked for but none to be had (max_parallel_workers = 0): the
# leader writes every run through the shared slots itself.
is(build('no_worker_started', 2, 'SET max_parallel_workers = 0;'), 0,
	'with no worker started the leader writes through the parallel path alone');

my $one = read_file_raw(file_of($primary, 'one_writer'));
my $several = read_file_raw(file_of($primary, 'several_writers'));
my ($na, $nb, $diff) = compare_pages($one, read_file_raw(file_of($primary, 'no_worker_started')));
is($diff, -1, 'every page of the leader-alone build equals the one-writer build\'s, but for the WAL position');
$primary->safe_psql('postgres', 'DROP INDEX no_worker_started');

# An unlogged table's index: the workers write without WAL.
$primary->safe_psql('postgres',
	'CREATE UNLOGGED TABLE unlogged_items WITH (parallel_workers = 0) AS SELECT * FROM items ORDER BY id');
{
	my ($ret, $out, $err) = $primary->psql('postgres',
		"SET client_min_messages = debug1; SET max_parallel_maintenance_workers = 2;
		 CREATE INDEX unlogged_index ON unlogged_items USING cagra (v)");
	is($ret, 0, 'the unlogged build succeeds') or diag($err);
	like($err, qr/pages written by [12] parallel workers and the leader/, 'the unlogged build has several writers');
}
($na, $nb, $diff) = compare_pages($one, read_file_raw(file_of($primary, 'unlogged_index')));
is($diff, -1, 'every page of the unlogged build equals the one-writer build\'s, but for the WAL position');
$primary->safe_psql('postgres', 'DROP TABLE unlogged_items');
($na, $nb, $diff) = compare_pages($one, $several);
cmp_ok($na, '>=', 1024, "the index has $na pages");
diag("$na pages, written by $writers parallel workers and the leader");
is($nb, $na, 'both builds have the same number of pages');
is($diff, -1, 'every page of the several-writer build equals the one-writer build\'s, but for the WAL position');
is($primary->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('several_writers')"), '0',
	'the several-writer build checks clean');

my $queries = q{SET enable_seqscan = off;
	SELECT string_agg(r, ';' ORDER BY q) FROM (
	  SELECT q.id AS q, (SELECT string_agg(id::text, ',' ORDER BY v <-> q.v, id)
	                     FROM (SELECT id, v FROM items ORDER BY v <-> q.v LIMIT 10) s) AS r
	  FROM items q WHERE q.id % 97 = 0) x};
$primary->safe_psql('postgres', 'DROP INDEX one_writer');
my $answers = $primary->safe_psql('postgres', $queries);
like($primary->safe_psql('postgres', "SET enable_seqscan = off; EXPLAIN (COSTS OFF) SELECT id FROM items ORDER BY v <-> (SELECT v FROM items WHERE id = 1) LIMIT 10"),
	qr/several_writers/, 'the queries use the several-writer index');

# The standby replays the workers' WAL: the same answers, and after a
# restartpoint the same bytes in every page, WAL positions included.
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $queries), $answers, 'the standby answers as the primary');
$standby->safe_psql('postgres', 'CHECKPOINT');
is(read_file_raw(file_of($standby, 'several_writers')) eq $several ? 1 : 0, 1,
	'the standby\'s index file is byte-identical to the primary\'s');

# Inside a subtransaction that then rolls back: the workers write the
# subtransaction's new file, and the rollback leaves no index.
{
	my ($ret, $out, $err) = $primary->psql('postgres',
		"BEGIN; SAVEPOINT s; SET LOCAL client_min_messages = debug1; SET LOCAL max_parallel_maintenance_workers = 2;
		 CREATE INDEX in_savepoint ON items USING cagra (v); ROLLBACK TO s; COMMIT;");
	is($ret, 0, 'a build in a subtransaction succeeds') or diag($err);
	like($err, qr/pages written by [12] parallel workers and the leader/, 'and has several writers');
	is($primary->safe_psql('postgres', "SELECT count(*) FROM pg_class WHERE relname = 'in_savepoint'"), '0',
		'after the rollback to the savepoint no index is left');
}

# REINDEX (a new relfilenode, which the workers must write) and REINDEX
# CONCURRENTLY, both with several writers.
for my $reindex ('REINDEX INDEX several_writers', 'REINDEX INDEX CONCURRENTLY several_writers')
{
	my ($ret, $out, $err) = $primary->psql('postgres',
		"SET client_min_messages = debug1; SET max_parallel_maintenance_workers = 2; $reindex");
	is($ret, 0, "$reindex succeeds") or diag($err);
	like($err, qr/pages written by [12] parallel workers and the leader/, "$reindex has several writers");
	is($primary->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('several_writers')"), '0',
		"after $reindex the index checks clean");
	is($primary->safe_psql('postgres', $queries), $answers, "after $reindex the index answers the same");
}

# An immediate stop right after the build commits: recovery replays its WAL
# (the checkpoint before it gives a redo point before the build).
$primary->safe_psql('postgres', 'CHECKPOINT');
cmp_ok(build('after_crash', 2), '>=', 1, 'the build before the crash has several writers');
$primary->stop('immediate');
$primary->start;
is($primary->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('after_crash')"), '0',
	'after recovery the index checks clean');
($na, $nb, $diff) = compare_pages($one, read_file_raw(file_of($primary, 'after_crash')));
is($diff, -1, 'after recovery every page equals the one-writer build\'s, but for the WAL position');
$primary->safe_psql('postgres', 'DROP INDEX several_writers');
is($primary->safe_psql('postgres', $queries), $answers, 'after recovery the index answers as before');

# Rows linked by linkers (cagra preloaded): their WAL replays on the
# standby to the same bytes, and the standby answers as the primary; an
# immediate stop while linkers link leaves an index that checks clean.
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'cagra'\n");
$primary->restart;
$primary->wait_for_catchup($standby);
my $insert = sub {
	my ($from, $to) = @_;
	return "INSERT INTO items SELECT i, (SELECT array_agg(sin(i * 0.013 * d + d) + cos(i * 0.29 + d * 0.7) * 0.2)
	          FROM generate_series(1, 1024) d WHERE i > 0)::vector FROM generate_series($from, $to) i";
};
$primary->safe_psql('postgres', $insert->(2001, 2400));
ok($primary->poll_query_until('postgres', "SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'cagra linker'"),
	'a linker links the inserted rows');
ok($primary->poll_query_until('postgres', "SELECT unlinked_nodes < 16 FROM cagra_index_info('after_crash')"),
	'every complete run is linked');
$answers = $primary->safe_psql('postgres', $queries);
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', $queries), $answers, 'the standby answers as the primary after the linkers');
$standby->safe_psql('postgres', 'CHECKPOINT');
is(read_file_raw(file_of($standby, 'after_crash')) eq read_file_raw(file_of($primary, 'after_crash')) ? 1 : 0, 1,
	'the standby\'s index file is byte-identical to the primary\'s after the linkers');
$primary->safe_psql('postgres', $insert->(2401, 2800));
$primary->stop('immediate');
$primary->start;
is($primary->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('after_crash')"), '0',
	'an immediate stop while linkers link: the index checks clean after recovery');
is($primary->safe_psql('postgres', q{SET enable_seqscan = off;
	SELECT count(*) FROM items i WHERE i.id > 2000
	   AND (SELECT j.id FROM items j ORDER BY j.v <-> i.v LIMIT 1) IS DISTINCT FROM i.id}), '0',
	'and every inserted row finds itself');

done_testing();
