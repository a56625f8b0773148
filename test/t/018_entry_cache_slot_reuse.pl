# test/t/018_entry_cache_slot_reuse.pl — a session that searched an index
# before its rows were deleted, vacuumed and replaced by inserts into the
# freed slots (the entry nodes among them) sees the new rows, in order and
# with their own distances: on the primary and on a streaming standby, in
# sessions kept open across the change (each backend caches the entry
# nodes' vectors); after a tenth of the rows replaced three times, such a
# session answers exactly as a new one.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->start;
$primary->safe_psql('postgres', q{
	CREATE EXTENSION cagra;
	CREATE TABLE r (id int, v vector(2));
	INSERT INTO r SELECT i, ARRAY[i, 0] FROM generate_series(1, 3000) i;
	CREATE INDEX r_idx ON r USING cagra (v);
});
# and one under churn: random vectors, a tenth replaced at a time
$primary->safe_psql('postgres', q{
	SELECT setseed(0.3);
	CREATE TABLE c (id int, v vector(8));
	INSERT INTO c SELECT i, (SELECT array_agg(random()) FROM generate_series(1, 8) WHERE i > 0)
	  FROM generate_series(1, 3000) i;
	CREATE INDEX c_idx ON c USING cagra (v);
});
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

my $scan = q{SET enable_seqscan = off;
	SELECT string_agg(id::text, ',') FROM (SELECT id FROM r ORDER BY v <-> '[1500.25,0]' LIMIT 3) s;};
my $search = q{SELECT string_agg(round(distance)::text, ',' ORDER BY distance)
	FROM cagra_search('r_idx', ARRAY['[1500.25,0]'::vector], 3);};

# sessions that searched before the change, and stay open
# each query's five nearest rows and their distances, for one row in ten
my $churn_answers = q{SET enable_seqscan = off;
	SELECT string_agg(x.r, ';' ORDER BY q.id) FROM c q CROSS JOIN LATERAL
	  (SELECT string_agg(i.id || ':' || i.d, ',') AS r FROM
	     (SELECT id, v <-> q.v AS d FROM c i ORDER BY i.v <-> q.v LIMIT 5) i) x
	 WHERE q.id % 10 = 3;};
my %sessions = (primary => $primary->background_psql('postgres'),
	standby => $standby->background_psql('postgres'));
for my $where (sort keys %sessions)
{
	$sessions{$where}->query_safe($churn_answers);
	is($sessions{$where}->query_safe($scan), '1500,1501,1499', "$where: the scan before the change");
	is($sessions{$where}->query_safe($search), '0,1,1', "$where: cagra_search before the change");
}

# every row deleted and vacuumed; the new rows take the freed slots
$primary->safe_psql('postgres', q{
	DELETE FROM r;
	VACUUM r;
	INSERT INTO r SELECT 100000 + i, ARRAY[100000 + i, 0] FROM generate_series(1, 3000) i;
});
is($primary->safe_psql('postgres', q{SELECT nodes, reused_slots FROM cagra_index_info('r_idx')}),
	'3000|3000', 'the inserts took the slots vacuum freed');
# three rounds of a tenth of the rows deleted, vacuumed and replaced
for my $round (1 .. 3)
{
	$primary->safe_psql('postgres', qq{
		DELETE FROM c WHERE id % 10 = $round;
		VACUUM c;
		INSERT INTO c SELECT 10000 * $round + i, (SELECT array_agg(random()) FROM generate_series(1, 8) WHERE i > 0)
		  FROM generate_series(1, 300) i;
	});
}
is($primary->safe_psql('postgres', q{SELECT nodes, reused_slots FROM cagra_index_info('c_idx')}),
	'3000|900', 'the churn took the slots vacuum freed');
$primary->wait_for_catchup($standby);

for my $where (sort keys %sessions)
{
	is($sessions{$where}->query_safe($scan), '100001,100002,100003',
		"$where: the session open across the change finds the new nearest rows, in order");
	is($sessions{$where}->query_safe($search), '98501,98502,98503',
		"$where: cagra_search in that session measures the new vectors");
	# the search is deterministic: the same rows and distances as a new session's
	my $node = $where eq 'primary' ? $primary : $standby;
	is($sessions{$where}->query_safe($churn_answers), $node->safe_psql('postgres', $churn_answers),
		"$where: after the churn the session open across it answers as a new session does");
	$sessions{$where}->quit;
}
# a new session agrees
is($standby->safe_psql('postgres', $scan), '100001,100002,100003', 'a new session on the standby');

done_testing();
