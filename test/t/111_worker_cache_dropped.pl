# test/t/111_worker_cache_dropped.pl — the worker frees the copies of
# indexes that are gone, without a search asking: a dropped index's (DROP
# INDEX, DROP TABLE, DROP DATABASE, a temporary index at the session's
# end), and a rebuilt or moved one's older file's (REINDEX, TRUNCATE, SET
# TABLESPACE), on a primary and on a standby, so that cagra_worker_cache()
# lists only copies of live indexes, one per index; a drop rolled back
# keeps the copy.  With the worker's CPU engine.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('cachedrop');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', q{
shared_preload_libraries = 'cagra'
cagra.worker_backend = cpu
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION cagra');
$node->poll_query_until('postgres', "SELECT state = 'running' FROM cagra_status")
  or die 'worker not running';

sub make_table
{
	my ($db, $table) = @_;
	$node->safe_psql($db, qq{
		CREATE TABLE $table (id int PRIMARY KEY, v vector(8));
		INSERT INTO $table SELECT i, array(SELECT sin(i * 0.37 + j * 1.3) FROM generate_series(1, 8) j)::vector
		  FROM generate_series(1, 1000) i;
		CREATE INDEX ${table}_v ON $table USING cagra (v);
	});
}

# a search through the worker (which uploads the copy the first time)
sub search
{
	my ($db, $table) = @_;
	return $node->safe_psql($db, qq{SET enable_seqscan = off;
		SELECT id FROM $table ORDER BY v <-> (SELECT v FROM $table WHERE id = 7) LIMIT 1});
}

# the copies the worker lists: (index, generation) of each, in order
sub cache
{
	my ($on) = @_;
	$on //= $node;
	return $on->safe_psql('postgres',
		'SELECT string_agg(index::text || \'@\' || generation, \' \' ORDER BY index, generation) FROM cagra_worker_cache()');
}

# what cache() lists for these (index, generation) pairs
sub listing
{
	my (@pairs) = @_;
	return join(' ', map { "$_->[0]\@$_->[1]" } sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] } @pairs);
}

sub oid_of
{
	my ($db, $index) = @_;
	return $node->safe_psql($db, "SELECT '$index'::regclass::oid");
}

sub generation_of
{
	my ($db, $index) = @_;
	return $node->safe_psql($db, "SELECT generation FROM cagra_index_info('$index')");
}

# the worker looks every second; a copy still listed after 20 s stayed
sub cache_becomes
{
	my ($want, $name, $on) = @_;
	my $got;
	for (1 .. 200)
	{
		$got = cache($on);
		last if $got eq $want;
		usleep(100_000);
	}
	is($got, $want, $name);
}

make_table('postgres', 'a');
make_table('postgres', 'b');
is(search('postgres', 'a'), '7', 'a searched through the worker');
is(search('postgres', 'b'), '7', 'b searched through the worker');
my ($a_oid, $b_oid) = (oid_of('postgres', 'a_v'), oid_of('postgres', 'b_v'));
my $a_gen = generation_of('postgres', 'a_v');
my $b_gen = generation_of('postgres', 'b_v');
is(cache(), listing([$a_oid, $a_gen], [$b_oid, $b_gen]), 'one copy of each index');

# a drop rolled back leaves the index, and its copy serves on
$node->safe_psql('postgres', 'BEGIN; DROP INDEX a_v; ROLLBACK');
sleep 2;
is(cache(), listing([$a_oid, $a_gen], [$b_oid, $b_gen]), 'a rolled back drop keeps the copy');
my $uploads = $node->safe_psql('postgres', 'SELECT uploads FROM cagra_status');
is(search('postgres', 'a'), '7', 'the index searched again');
is($node->safe_psql('postgres', 'SELECT uploads FROM cagra_status'), $uploads, 'from the copy it had');

# REINDEX: a new file; the old one's copy goes without another search,
# and a search then loads the new one, alone
$node->safe_psql('postgres', 'REINDEX INDEX a_v');
cache_becomes(listing([$b_oid, $b_gen]), "REINDEX: the old file's copy is freed");
is(search('postgres', 'a'), '7', 'the rebuilt index searched');
my $a_gen2 = generation_of('postgres', 'a_v');
isnt($a_gen2, $a_gen, 'the rebuilt index has a generation of its own');
is(cache(), listing([$a_oid, $a_gen2], [$b_oid, $b_gen]), 'one copy of the rebuilt index');

# two DROP INDEX / CREATE INDEX cycles leave the last index's copy only
for my $cycle (1 .. 2)
{
	$node->safe_psql('postgres', 'DROP INDEX a_v; CREATE INDEX a_v ON a USING cagra (v)');
	is(search('postgres', 'a'), '7', "cycle $cycle: the new index searched");
	$a_oid = oid_of('postgres', 'a_v');
	$a_gen = generation_of('postgres', 'a_v');
	cache_becomes(listing([$a_oid, $a_gen], [$b_oid, $b_gen]), "cycle $cycle: the dropped index's copy is freed");
}

# TRUNCATE gives the index a new file too; DROP TABLE takes its index
$node->safe_psql('postgres', 'TRUNCATE b');
cache_becomes(listing([$a_oid, $a_gen]), 'TRUNCATE: the old file\'s copy is freed');
$node->safe_psql('postgres', 'DROP TABLE a');
cache_becomes('', 'DROP TABLE: its index\'s copy is freed');
is($node->safe_psql('postgres', 'SELECT cached_indexes, memory_used_mb FROM cagra_status'), '0|0',
	'cagra_status counts no copy and no memory');

# DROP DATABASE takes the copies of its indexes
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION cagra');
make_table('other', 'c');
is(search('other', 'c'), '7', 'an index of another database searched');
cache_becomes(oid_of('other', 'c_v') . '@' . generation_of('other', 'c_v'), 'its copy is listed');
$node->safe_psql('postgres', 'DROP DATABASE other');
cache_becomes('', 'DROP DATABASE: the copy is freed');

# an index in a tablespace of its own, and a temporary one: their copies
# stay while the index does (the worker finds their files), and go with it
my $dir = PostgreSQL::Test::Utils::tempdir_short();
$node->safe_psql('postgres', "CREATE TABLESPACE elsewhere LOCATION '$dir'");
make_table('postgres', 'd');
$node->safe_psql('postgres', 'ALTER INDEX d_v SET TABLESPACE elsewhere');
is(search('postgres', 'd'), '7', 'an index in another tablespace searched');
my $d_entry = listing([oid_of('postgres', 'd_v'), generation_of('postgres', 'd_v')]);
cache_becomes($d_entry, 'its copy is listed');
my $session = $node->background_psql('postgres');
$session->query_safe(q{
	CREATE TEMP TABLE t (id int, v vector(8));
	INSERT INTO t SELECT i, array(SELECT cos(i * 0.29 + j) FROM generate_series(1, 8) j)::vector
	  FROM generate_series(1, 1000) i;
	CREATE INDEX t_v ON t USING cagra (v);
});
my $temp_search = q{SET enable_seqscan = off;
	SELECT id FROM t ORDER BY v <-> (SELECT v FROM t WHERE id = 7) LIMIT 1};
is($session->query_safe($temp_search), '7', 'a temporary index searched');
my $t_entry = listing([$session->query_safe("SELECT 't_v'::regclass::oid"),
	$session->query_safe("SELECT generation FROM cagra_index_info('t_v')")]);
my $both = join(' ', sort { (split /\@/, $a)[0] <=> (split /\@/, $b)[0] } $d_entry, $t_entry);
cache_becomes($both, 'its copy is listed');
$uploads = $node->safe_psql('postgres', 'SELECT uploads FROM cagra_status');
sleep 2;
is(search('postgres', 'd'), '7', 'the index in another tablespace searched again');
is($session->query_safe($temp_search), '7', 'the temporary index searched again');
is($node->safe_psql('postgres', 'SELECT uploads FROM cagra_status'), $uploads,
	'both from the copies they had: the worker found their files');
is(cache(), $both, 'both copies still listed');
$session->quit;
cache_becomes($d_entry, 'the session\'s end drops its temporary index, and the copy goes');
$node->safe_psql('postgres', 'ALTER INDEX d_v SET TABLESPACE pg_default');
cache_becomes('', 'moving the index to another tablespace frees the old file\'s copy');
$node->safe_psql('postgres', 'DROP TABLESPACE elsewhere');

# a standby's worker: the replayed drop removes the file there
make_table('postgres', 'e');
$node->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('cachedrop_standby');
$standby->init_from_backup($node, 'base', has_streaming => 1);
$standby->start;
$standby->poll_query_until('postgres', "SELECT state = 'running' FROM cagra_status")
  or die 'standby worker not running';
is($standby->safe_psql('postgres', q{SET enable_seqscan = off;
	SELECT id FROM e ORDER BY v <-> (SELECT v FROM e WHERE id = 7) LIMIT 1}), '7',
	'the standby searched through its worker');
cache_becomes(listing([oid_of('postgres', 'e_v'), generation_of('postgres', 'e_v')]),
	'the standby\'s worker lists the copy', $standby);
$node->safe_psql('postgres', 'DROP INDEX e_v');
$node->wait_for_catchup($standby);
cache_becomes('', 'DROP INDEX replayed: the standby\'s copy is freed', $standby);

$standby->stop;
$node->stop;
done_testing();
