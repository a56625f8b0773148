# test/t/015_check_standby.pl — cagra_index_check on a hot standby while
# replay changes the index (inserts, deletes and vacuums on the primary)
# never reports false problems: a pass that replay overlapped is run again,
# and when replay never holds still the check says so with an error.  Once
# replay is idle the check is clean.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time);

my $primary = PostgreSQL::Test::Cluster->new('checkprimary');
$primary->init(allows_streaming => 1);
$primary->start;
$primary->safe_psql('postgres', q{
	CREATE EXTENSION cagra;
	SELECT setseed(0.3);
	CREATE SEQUENCE items_id;
	CREATE TABLE items (id bigint DEFAULT nextval('items_id'), v vector(8));
	CREATE INDEX items_id_idx ON items (id);
	INSERT INTO items (v) SELECT (SELECT array_agg(random()::real) FROM generate_series(1, 8) d
	                              WHERE i > 0)::vector
	  FROM generate_series(1, 3000) i;
	CREATE INDEX items_v ON items USING cagra (v) WITH (graph_degree = 16, intermediate_graph_degree = 32);
});
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('checkstandby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v')"), '0',
	'clean on the standby before the load');

# The load: inserts (9 in 10 transactions), deletes and vacuums.
my $dir = PostgreSQL::Test::Utils::tempdir;
PostgreSQL::Test::Utils::append_to_file("$dir/insert.sql", q{
INSERT INTO items (v) SELECT (SELECT array_agg(random()::real) FROM generate_series(1, 8) d WHERE g > 0)::vector FROM generate_series(1, 3) g;
});
PostgreSQL::Test::Utils::append_to_file("$dir/delete.sql", q{
\set d random(1, 3000)
DELETE FROM items WHERE id BETWEEN :d AND :d + 20;
});
PostgreSQL::Test::Utils::append_to_file("$dir/vacuum.sql", "VACUUM items;\n");
my $seconds = 12;
my ($bout, $berr) = ('', '');
my $bench = IPC::Run::start(
	[ 'pgbench', '-n', '-T', $seconds, '-c', '2', '-f', "$dir/insert.sql\@18",
	  '-f', "$dir/delete.sql\@1", '-f', "$dir/vacuum.sql\@1",
	  '-h', $primary->host, '-p', $primary->port, 'postgres' ],
	'>', \$bout, '2>', \$berr);

# The check in a loop on the standby meanwhile.
my ($rounds, $clean, $changed, $cancelled, $false) = (0, 0, 0, 0, 0);
my $first_false = '';
my $start = time;
while (time - $start < $seconds - 1)
{
	my ($ret, $out, $err) = $standby->psql('postgres', "SELECT * FROM cagra_index_check('items_v')");
	$rounds++;
	if ($ret == 0 && $out eq '')
	{
		$clean++;
	}
	elsif ($err =~ /recovery changed it during each of \d+ attempts/)
	{
		$changed++;
	}
	elsif ($err =~ /conflict with recovery/)
	{
		$cancelled++;
	}
	else
	{
		$false++;
		$first_false = "$out $err" if $first_false eq '';
	}
}
my $bench_ok = $bench->finish;
note("rounds $rounds: clean $clean, replay never settled $changed, cancelled $cancelled, problems $false");
ok($bench_ok, 'the load ran') or diag("pgbench: $bout $berr");
ok($rounds >= 5, 'the check ran during the load');
is($false, 0, 'no problem reported while replay changed the index') or diag($first_false);

$primary->wait_for_catchup($standby);
my $info = "SELECT nodes, live_nodes, generation FROM cagra_index_info('items_v')";
is($standby->safe_psql('postgres', $info), $primary->safe_psql('postgres', $info), 'standby caught up');
ok($standby->safe_psql('postgres', "SELECT generation FROM cagra_index_info('items_v')") >
	$primary->safe_psql('postgres', "SELECT 0"), 'generation read');
is($standby->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v')"), '0',
	'clean on the standby once replay is idle');
is($primary->safe_psql('postgres', "SELECT count(*) FROM cagra_index_check('items_v')"), '0',
	'clean on the primary');

$standby->stop;
$primary->stop;
done_testing();
