# test/t/020_scale_out.pl — scale-out with PostgreSQL's own tools
# (docs/scale-out.md): a coordinator whose partitioned table items (LIST by
# tenant) has one postgres_fdw foreign partition per shard cluster, each shard
# a plain table with its own cagra index.  Checks the pushed-down plan, exact
# and approximate answers against independently computed ones, writes through
# the coordinator, a stopped shard, a shard attached later, and the batch
# search (one cagra_search per shard through dblink).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $DIM = 16;
my $src = $ENV{CAGRA_SRC} // '.';
my $functions = slurp_file("$src/test/scale-out-functions.sql");

my $coord = PostgreSQL::Test::Cluster->new('coordinator');
$coord->init;
$coord->start;
my @shards;
for my $i (1 .. 3)
{
	my $s = PostgreSQL::Test::Cluster->new("shard$i");
	$s->init;
	$s->start;
	push @shards, $s;
}

# rows of tenant $t with ids $from..$to on shard $t (deterministic per shard)
sub load_rows
{
	my ($node, $t, $from, $to) = @_;
	$node->safe_psql('postgres', qq{
		SELECT setseed(0.$t$from);
		INSERT INTO items SELECT $t, g,
		    (SELECT array_agg(random()::real) FROM generate_series(1, $DIM) d WHERE g > 0)::vector
		  FROM generate_series($from, $to) g;
	});
}

sub setup_shard
{
	my ($node, $t) = @_;
	$node->safe_psql('postgres', qq{
		CREATE EXTENSION cagra;
		CREATE TABLE items (tenant int NOT NULL, id bigint NOT NULL, v vector($DIM),
		                    PRIMARY KEY (tenant, id));
	});
	load_rows($node, $t, 1, 2000);
	$node->safe_psql('postgres',
		'CREATE INDEX items_v ON items USING cagra (v vector_l2_ops); ANALYZE items');
}

sub attach_shard
{
	my ($node, $t) = @_;
	my $host = $node->host;
	my $port = $node->port;
	$coord->safe_psql('postgres', qq{
		CREATE SERVER shard$t FOREIGN DATA WRAPPER postgres_fdw
		  OPTIONS (host '$host', port '$port', dbname 'postgres',
		           extensions 'cagra', async_capable 'true', fetch_size '100');
		CREATE USER MAPPING FOR PUBLIC SERVER shard$t;
		CREATE FOREIGN TABLE items_s$t (tenant int NOT NULL, id bigint NOT NULL, v vector($DIM))
		  SERVER shard$t OPTIONS (table_name 'items');
		ALTER TABLE items ATTACH PARTITION items_s$t FOR VALUES IN ($t);
		ANALYZE items_s$t;
	});
}

setup_shard($shards[$_ - 1], $_) for 1 .. 3;
$coord->safe_psql('postgres', qq{
	CREATE EXTENSION cagra; CREATE EXTENSION postgres_fdw; CREATE EXTENSION dblink;
	CREATE TABLE items (tenant int NOT NULL, id bigint NOT NULL, v vector($DIM)) PARTITION BY LIST (tenant);
});
attach_shard($shards[$_ - 1], $_) for 1 .. 3;
$coord->safe_psql('postgres', $functions);

# 50 queries, the same on every node
srand(17);
my @queries = map {
	'[' . join(',', map { sprintf('%.4f', rand()) } 1 .. $DIM) . ']'
} 1 .. 50;
my $qvalues = join(',', map { "($_, '$queries[$_ - 1]')" } 1 .. @queries);
for my $n ($coord, @shards)
{
	$n->safe_psql('postgres', "CREATE TABLE q (n int, v vector($DIM)); INSERT INTO q VALUES $qvalues");
}

# "n|tenant,id;tenant,id;..." lines, one per query, from rows "n|tenant|id"
sub by_query
{
	my ($rows) = @_;
	my %h;
	for (split /\n/, $rows)
	{
		my ($n, $t, $id) = split /\|/;
		push @{ $h{$n} }, "$t,$id";
	}
	return \%h;
}

sub same_sets
{
	my ($a, $b) = @_;
	my $diff = 0;
	for my $n (1 .. @queries)
	{
		my $x = join(';', sort @{ $a->{$n} // [] });
		my $y = join(';', sort @{ $b->{$n} // [] });
		$diff++ if $x ne $y;
	}
	return $diff;
}

# exact top k: a sequential scan on each shard, merged here
sub exact_topk
{
	my ($k) = @_;
	my @all;
	for my $s (@shards)
	{
		push @all, map { [ split /\|/ ] } split /\n/, $s->safe_psql('postgres', qq{
			SET enable_indexscan = off; SET enable_bitmapscan = off;
			SELECT q.n, x.tenant, x.id, x.d FROM q CROSS JOIN LATERAL
			  (SELECT tenant, id, v <-> q.v AS d FROM items ORDER BY 3 LIMIT $k) x});
	}
	my %h;
	push @{ $h{ $_->[0] } }, $_ for @all;
	my %top;
	for my $n (keys %h)
	{
		my @s = sort { $a->[3] <=> $b->[3] } @{ $h{$n} };
		$top{$n} = [ map { "$_->[1],$_->[2]" } @s[ 0 .. $k - 1 ] ];
	}
	return \%top;
}

my $via_knn = q{SELECT q.n, r.tenant, r.id FROM q CROSS JOIN LATERAL items_knn(q.v, 10) r};
my $via_parent = q{SELECT q.n, x.tenant, x.id FROM q CROSS JOIN LATERAL
	(SELECT tenant, id FROM items i ORDER BY i.v <-> q.v LIMIT 10) x};

# (a) the plans
my $plan = $coord->safe_psql('postgres',
	"EXPLAIN VERBOSE SELECT tenant, id FROM items ORDER BY v <-> '$queries[0]' LIMIT 10");
my @remote = $plan =~ /Remote SQL: (.*)/g;
is(scalar(grep { /ORDER BY \(v OPERATOR\(public\.<->\)/ } @remote), 3,
	'partitioned table: ORDER BY <-> pushed to each of the 3 shards');
is(scalar(grep { /LIMIT/ } @remote), 0,
	'partitioned table: no LIMIT in the remote SQL (PostgreSQL 15 does not push it below an Append, as the doc says)');
like($plan, qr/Merge Append/, 'partitioned table: Merge Append on the coordinator');

my ($ret, $out, $err) = $coord->psql('postgres', qq{
	LOAD 'auto_explain';
	SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on;
	SET auto_explain.log_verbose = on; SET auto_explain.log_level = notice;
	SELECT * FROM items_knn('$queries[0]', 10)});
is($ret, 0, 'items_knn runs under auto_explain');
@remote = $err =~ /Remote SQL: (.*)/g;
is(scalar(grep { /ORDER BY \(v OPERATOR\(public\.<->\) .*\) ASC NULLS LAST LIMIT 10::bigint/ } @remote), 3,
	'items_knn: ORDER BY <-> LIMIT pushed to each of the 3 shards')
  or diag($err);
is(scalar(() = $err =~ /Async Foreign Scan/g), 3, 'items_knn: an Async Foreign Scan per shard');
# (a Result node that computes the sort key may come between)
like($err, qr/->\s+Sort\s+\(cost.*\n.*\n\s+Sort Key: .*<->.*\n(?:\s+->\s+Result\s.*\n.*\n)?\s+->\s+Append/,
	'items_knn: Sort over Append on the coordinator');

# (b) exact answers on 3 x 2,000 rows
my $exact = exact_topk(10);
is(same_sets(by_query($coord->safe_psql('postgres', $via_knn)), $exact), 0,
	'3 x 2,000: items_knn equals the exact top 10 of every query');
is(same_sets(by_query($coord->safe_psql('postgres', $via_parent)), $exact), 0,
	'3 x 2,000: ORDER BY <-> LIMIT on the partitioned table equals the exact top 10');

# (c) recall on 3 x 10,000 rows against one server holding the same rows
for my $i (1 .. 3)
{
	load_rows($shards[ $i - 1 ], $i, 2001, 10000);
	$shards[ $i - 1 ]->safe_psql('postgres', 'REINDEX INDEX items_v; ANALYZE items');
}
$coord->safe_psql('postgres', qq{
	CREATE TABLE single AS SELECT tenant, id, v FROM items;
	CREATE INDEX single_v ON single USING cagra (v vector_l2_ops);
	ANALYZE single;
});
is($coord->safe_psql('postgres', 'SELECT count(*) FROM single'), '30000', 'single server has the 30,000 rows');
$exact = exact_topk(10);
# a small candidate list on every node, so that recall is below 1 and the
# comparison means something
for my $n ($coord, @shards)
{
	$n->append_conf('postgresql.conf', 'cagra.itopk_size = 10');
	$n->reload;
}
sub recall
{
	my ($got) = @_;
	my ($hit, $all) = (0, 0);
	for my $n (1 .. @queries)
	{
		my %e = map { $_ => 1 } @{ $exact->{$n} };
		$hit += grep { $e{$_} } @{ $got->{$n} // [] };
		$all += 10;
	}
	return $hit / $all;
}
my $r_single = recall(by_query($coord->safe_psql('postgres', q{SET enable_seqscan = off;
	SELECT q.n, x.tenant, x.id FROM q CROSS JOIN LATERAL
	  (SELECT tenant, id FROM single s ORDER BY s.v <-> q.v LIMIT 10) x})));
my $r_knn = recall(by_query($coord->safe_psql('postgres', $via_knn)));
my $r_parent = recall(by_query($coord->safe_psql('postgres', $via_parent)));
note("recall\@10: single server $r_single, items_knn $r_knn, partitioned table $r_parent");
ok($r_single > 0.8, "single-server recall\@10 $r_single is that of a working index");
ok($r_knn >= $r_single - 0.01, "items_knn recall\@10 $r_knn not below single server's $r_single - 0.01");
ok($r_parent >= $r_single - 0.01, "partitioned-table recall\@10 $r_parent not below single server's $r_single - 0.01");
for my $n ($coord, @shards)
{
	$n->append_conf('postgresql.conf', 'cagra.itopk_size = 64');
	$n->reload;
}

# (f) the batch search returns, query by query, the rows of items_knn
my $per_query = by_query($coord->safe_psql('postgres', $via_knn));
my $batch = $coord->safe_psql('postgres',
	'SELECT query, tenant, id FROM items_batch_knn(ARRAY(SELECT v FROM q ORDER BY n), 10)');
is(same_sets(by_query($batch), $per_query), 0, 'batch search: the same 10 rows per query as items_knn');
my $shard_col = $coord->safe_psql('postgres', q{SELECT count(*) FROM
	items_batch_knn(ARRAY(SELECT v FROM q ORDER BY n), 10) WHERE shard <> 'shard' || tenant});
is($shard_col, '0', 'batch search: the shard column names the server holding the row');

# (d) writes through the coordinator
my ($q1, $q2) = @queries[ 1, 2 ];
$coord->safe_psql('postgres', "INSERT INTO items VALUES (2, 100001, '$q1')");
is($shards[1]->safe_psql('postgres', 'SELECT count(*) FROM items WHERE id = 100001'), '1', 'insert landed on shard2');
is($shards[0]->safe_psql('postgres', 'SELECT count(*) FROM items WHERE id = 100001')
	 . $shards[2]->safe_psql('postgres', 'SELECT count(*) FROM items WHERE id = 100001'), '00', 'and on no other shard');
is($coord->safe_psql('postgres', "SELECT tenant || ',' || id FROM items_knn('$q1', 1)"), '2,100001',
	'inserted row found by the next search');
is($coord->safe_psql('postgres', "SELECT tenant || ',' || id FROM items_batch_knn(ARRAY['$q1']::vector[], 1)"),
	'2,100001', 'and by the next batch search');
$coord->safe_psql('postgres', "UPDATE items SET v = '$q2' WHERE tenant = 3 AND id = 7");
is($coord->safe_psql('postgres', "SELECT tenant || ',' || id FROM items_knn('$q2', 1)"), '3,7',
	'updated row found at its new vector');
$coord->safe_psql('postgres', 'DELETE FROM items WHERE tenant = 2 AND id = 100001');
isnt($coord->safe_psql('postgres', "SELECT tenant || ',' || id FROM items_knn('$q1', 1)"), '2,100001',
	'deleted row not found by the next search');
is($coord->safe_psql('postgres', "SELECT count(*) FROM items_batch_knn(ARRAY['$q1']::vector[], 10) WHERE id = 100001"),
	'0', 'nor by the next batch search');

# (e) a shard down
my $before = $coord->safe_psql('postgres', "SELECT tenant || ',' || id FROM items_knn('$q2', 10)");
$shards[1]->stop;
($ret, $out, $err) = $coord->psql('postgres', "SELECT * FROM items_knn('$q2', 10)");
isnt($ret, 0, 'shard2 stopped: the search fails');
like($err, qr/could not connect to server "shard2"/, 'the error names the server')
  or diag($err);
($ret, $out, $err) = $coord->psql('postgres', "SELECT * FROM items ORDER BY v <-> '$q2' LIMIT 10");
like($err, qr/could not connect to server "shard2"/, 'the partitioned-table query fails naming it too');
($ret, $out, $err) = $coord->psql('postgres', "SELECT * FROM items_batch_knn(ARRAY['$q2']::vector[], 10)");
like($err, qr/shard "shard2" cannot be reached/, 'the batch search fails naming it');
is($coord->safe_psql('postgres', q{SELECT count(*) FROM unnest(dblink_get_connections()) c}), '0',
	'a new session holds no dblink connection');
$shards[1]->start;
is($coord->safe_psql('postgres', "SELECT tenant || ',' || id FROM items_knn('$q2', 10)"), $before,
	'shard2 started again: the same answer');

# a shard added later: tenant 4 on a fourth cluster, attached as a partition
my $s4 = PostgreSQL::Test::Cluster->new('shard4');
$s4->init;
$s4->start;
push @shards, $s4;
setup_shard($s4, 4);
$s4->safe_psql('postgres', "UPDATE items SET v = '$queries[3]' WHERE id = 11");
attach_shard($s4, 4);
is($coord->safe_psql('postgres', "SELECT tenant || ',' || id FROM items_knn('$queries[3]', 1)"), '4,11',
	'attached shard4 searched by the next items_knn');
is($coord->safe_psql('postgres', "SELECT tenant || ',' || id FROM items ORDER BY v <-> '$queries[3]' LIMIT 1"), '4,11',
	'and by the next query on the partitioned table');
is($coord->safe_psql('postgres', "SELECT shard || ':' || tenant || ',' || id FROM items_batch_knn(ARRAY['$queries[3]']::vector[], 1)"),
	'shard4:4,11', 'and by the next batch search');

$_->stop for ($coord, @shards);
done_testing();
