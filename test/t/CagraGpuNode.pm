# test/t/CagraGpuNode.pm — the clusters the worker tests start.  start():
# for the GPU tests (102-104), cagra preloaded with the GPU library of
# CAGRA_GPU_LIBRARY, crash restarts on, the extension created and the
# worker's first report awaited; the calling test is skipped when there is
# no library or the worker found no device.  cpu_worker(): the worker with
# its CPU engine (no GPU needed), running.
package CagraGpuNode;

use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use Test::More;

# A running node named $name, or skip_all.
sub start
{
	my ($name) = @_;
	my $lib = $ENV{CAGRA_GPU_LIBRARY};
	plan skip_all => 'CAGRA_GPU_LIBRARY not set (device check only)' unless $lib && -r $lib;

	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	# restart_after_crash: a SIGKILL must take the cluster through crash
	# recovery, which PostgreSQL::Test::Cluster turns off by default
	$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'cagra'
cagra.gpu_library = '$lib'
maintenance_work_mem = '1GB'
restart_after_crash = on
});
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION cagra');
	$node->poll_query_until('postgres', "SELECT state NOT IN ('not started', 'starting') FROM cagra_status")
	  or die 'worker never reported';
	my $state = $node->safe_psql('postgres', 'SELECT state FROM cagra_status');
	if ($state ne 'running')
	{
		diag($node->safe_psql('postgres', 'SELECT message FROM cagra_status'));
		plan skip_all => "worker state '$state': no device here";
	}
	return $node;
}

# A running node named $name whose worker runs the core library
# (cagra.worker_backend = cpu, which batches with no window), with $extra settings; the
# extension is created in database postgres unless $no_extension.
sub cpu_worker
{
	my ($name, $extra, $no_extension) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);

	$node->init;
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'cagra'\n"
		  . "cagra.worker_backend = cpu\n" . ($extra // ''));
	$node->start;
	return $node if $no_extension;
	$node->safe_psql('postgres', 'CREATE EXTENSION cagra');
	$node->poll_query_until('postgres', "SELECT state = 'running' FROM cagra_status")
	  or die 'worker not running';
	return $node;
}

1;
