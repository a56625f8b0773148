# test/t/025_check_deleted_paths.pl — cagra_index_check reports a live node
# that only paths through deleted nodes reach: a deleted node's row is
# overwritten when an insert takes its slot, and the node would be lost
# then.  While a VACUUM is unfinished (stopped after its deletion marks) that
# state is expected and the check is quiet: no slot is reusable and the next
# VACUUM repairs and links.  An index whose meta page does not say so (one
# made before vacuum_unfinished existed, the field patched to 0 here while
# the server is stopped) gets the rows.  The graph of
# sql/vacuum_reachability.sql: node 192's only way in comes from deleted
# node 138.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('check_deleted_paths');
$node->init;
$node->append_conf('postgresql.conf', "autovacuum = off\n");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION cagra;
	SELECT setseed(0.15);
	CREATE TABLE vreach (id serial PRIMARY KEY, v vector(2));
	CREATE INDEX vreach_v ON vreach USING cagra (v) WITH (graph_degree = 4, intermediate_graph_degree = 8);
	DO $$
	BEGIN
	  FOR i IN 1..200 LOOP
	    INSERT INTO vreach (v) SELECT ARRAY[random(), random()]::vector;
	  END LOOP;
	END $$;
	DELETE FROM vreach WHERE random() < 0.3;
});

sub check_rows
{
	return $node->safe_psql('postgres', "SELECT string_agg(p, '; ') FROM cagra_index_check('vreach_v') p");
}

my ($ret, $out, $err) = $node->psql('postgres', 'SET cagra.vacuum_stop_before = repair; VACUUM vreach');
like($err, qr/stopped before its repair/, 'the VACUUM stopped after its deletion marks');
is(check_rows(), '', 'an unfinished vacuum: the check is quiet');

# vacuum_unfinished: the page header (24 bytes), then CagraMetaData's field
my $file = $node->data_dir . '/' . $node->safe_psql('postgres', "SELECT pg_relation_filepath('vreach_v')");
my $offset = 24 + 5236;
$node->stop;
open(my $fh, '+<:raw', $file) or die "open $file: $!";
seek($fh, $offset, 0);
read($fh, my $flag, 4) == 4 or die "short read";
is(unpack('V', $flag), 1, 'the meta page says the vacuum is unfinished');
seek($fh, $offset, 0);
print $fh pack('V', 0);
close($fh);
$node->start;

my $rows = check_rows();
like($rows, qr/node 192: live, but every edge path to it from the entry nodes passes a deleted node/,
	'the check reports the node that hangs only on deleted nodes');
unlike($rows, qr/no edge path leads/, 'through the deleted nodes every live node is reached');

# A VACUUM (the dead rows are still in the table) repairs and links.
$node->safe_psql('postgres', 'VACUUM vreach');
is(check_rows(), '', 'clean after the next VACUUM');
$node->safe_psql('postgres',
	'INSERT INTO vreach (v) SELECT ARRAY[5 + random(), 5 + random()]::vector FROM generate_series(1, 60)');
is(check_rows(), '', 'clean after inserts take the deleted slots');
is($node->safe_psql('postgres', "SELECT nodes FROM cagra_index_info('vreach_v')"), '200', 'the slots were taken again');

$node->stop;
done_testing();
