/*
 * status.cpp — cagra_worker_status() (the view cagra_status) and
 * cagra_worker_cache(): what the worker is doing, read from shared memory.
 *
 * Who may see it follows pg_stat_activity's rules (docs/reference.md):
 * EXECUTE is granted to pg_monitor, not PUBLIC (sql/install/worker.sql),
 * and the cache's rows of other databases are shown only to roles with the
 * privileges of pg_read_all_stats, whoever else is granted the function.
 */
#include "protocol/protocol.h"

extern "C" {
#include "catalog/pg_authid.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(cagra_worker_status);
PG_FUNCTION_INFO_V1(cagra_worker_cache);
PG_FUNCTION_INFO_V1(cagra_worker_timings);
}

#define CAGRA_STATUS_COLS 20

static Datum
cagra_device_array(const CagraWorkerShared *sh)
{
	Datum		names[CAGRA_MAX_DEVICES];

	for (int d = 0; d < sh->device_count; d++)
		names[d] = CStringGetTextDatum(sh->device_names[d]);
	return PointerGetDatum(construct_array(names, sh->device_count, TEXTOID, -1, false, TYPALIGN_INT));
}

Datum
cagra_worker_status(PG_FUNCTION_ARGS)
{
	TupleDesc	tupdesc;
	Datum		values[CAGRA_STATUS_COLS];
	bool		nulls[CAGRA_STATUS_COLS];
	CagraWorkerShared *sh = cagra_worker_shared;

	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "cagra_worker_status must return a row type");
	tupdesc = BlessTupleDesc(tupdesc);
	memset(nulls, true, sizeof(nulls));

	if (!sh)
	{
		values[0] = CStringGetTextDatum("not preloaded");
		nulls[0] = false;
		values[CAGRA_STATUS_COLS - 1] = CStringGetTextDatum("cagra is not in shared_preload_libraries: searches and builds run in the backends, on the CPU");
		nulls[CAGRA_STATUS_COLS - 1] = false;
		PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
	}

	memset(nulls, false, sizeof(nulls));
	LWLockAcquire(sh->lock, LW_SHARED);
	values[0] = CStringGetTextDatum(cagra_worker_state_name(sh->state));
	values[1] = CStringGetTextDatum(sh->backend == CAGRA_BACKEND_GPU ? "gpu" : "cpu");
	values[2] = Int32GetDatum((int32) sh->pid);
	nulls[2] = sh->pid == 0;
	values[3] = TimestampTzGetDatum(sh->started_at);
	nulls[3] = sh->started_at == 0;
	values[4] = Int64GetDatum((int64) sh->generation);
	values[5] = cagra_device_array(sh);
	values[6] = Float8GetDatum((double) sh->memory_used / (1024.0 * 1024.0));
	values[7] = Float8GetDatum((double) sh->memory_limit / (1024.0 * 1024.0));
	nulls[7] = sh->memory_limit == 0;
	values[8] = Int32GetDatum(sh->ncopies);
	values[CAGRA_STATUS_COLS - 1] = CStringGetTextDatum(sh->message);
	nulls[CAGRA_STATUS_COLS - 1] = sh->message[0] == '\0';
	LWLockRelease(sh->lock);

	uint64		queries = pg_atomic_read_u64(&sh->queries);
	uint64		batches = pg_atomic_read_u64(&sh->batches);

	values[9] = Int64GetDatum((int64) pg_atomic_read_u64(&sh->requests));
	values[10] = Int64GetDatum((int64) queries);
	values[11] = Int64GetDatum((int64) batches);
	values[12] = Float8GetDatum(batches ? (double) queries / (double) batches : 0.0);
	nulls[12] = batches == 0;
	values[13] = Int64GetDatum((int64) pg_atomic_read_u64(&sh->uploads));
	values[14] = Int64GetDatum((int64) pg_atomic_read_u64(&sh->builds));
	values[15] = Int64GetDatum((int64) pg_atomic_read_u64(&sh->fallbacks));
	values[16] = Int64GetDatum((int64) pg_atomic_read_u64(&sh->errors));
	values[17] = Float8GetDatum((double) pg_atomic_read_u64(&sh->timing_us[CAGRA_TIMING_QUEUE]) / 1000.0);
	values[18] = Float8GetDatum((double) pg_atomic_read_u64(&sh->timing_us[CAGRA_TIMING_ENGINE]) / 1000.0);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

Datum
cagra_worker_cache(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	CagraWorkerShared *sh = cagra_worker_shared;

	InitMaterializedSRF(fcinfo, 0);
	if (!sh)
		return (Datum) 0;

	CagraPublishedCopy copies[CAGRA_MAX_PUBLISHED_CACHE];
	int			n;

	LWLockAcquire(sh->lock, LW_SHARED);
	n = sh->ncopies;
	memcpy(copies, sh->copies, sizeof(CagraPublishedCopy) * n);
	LWLockRelease(sh->lock);

	bool		all_databases = has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);

	for (int i = 0; i < n; i++)
	{
		Datum		values[8];
		bool		nulls[8] = {false};

		if (!all_databases && copies[i].db != MyDatabaseId)
			continue;
		values[0] = ObjectIdGetDatum(copies[i].db);
		values[1] = ObjectIdGetDatum(copies[i].index);
		values[2] = Int64GetDatum((int64) copies[i].generation);
		values[3] = Int64GetDatum((int64) copies[i].n);
		values[4] = Int32GetDatum(copies[i].device);
		values[5] = Float8GetDatum((double) copies[i].bytes / (1024.0 * 1024.0));
		values[6] = Int64GetDatum((int64) copies[i].searches);
		values[7] = TimestampTzGetDatum(copies[i].loaded_at);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* The names and units of CagraTimingStep, in its order. */
static const struct
{
	const char *step;
	const char *per;
}			cagra_timing_steps[CAGRA_TIMING_STEPS] = {
	{"pickup", "batch"},
	{"queue", "query"},
	{"job", "batch"},
	{"engine", "batch"},
	{"device", "batch"},
	{"handback", "batch"},
	{"wake", "request"},
	{"round trip", "request"},
	{"loop busy", "loop turn"},
	{"resident", "batch"},
	{"plan", "batch"},
	{"drain", "drain"},
	{"update", "update"},
};

Datum
cagra_worker_timings(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	CagraWorkerShared *sh = cagra_worker_shared;

	InitMaterializedSRF(fcinfo, 0);
	if (!sh)
		return (Datum) 0;
	for (int t = 0; t < CAGRA_TIMING_STEPS; t++)
	{
		uint64		us = pg_atomic_read_u64(&sh->timing_us[t]);
		uint64		events = pg_atomic_read_u64(&sh->timing_events[t]);
		Datum		values[5];
		bool		nulls[5] = {false};

		values[0] = CStringGetTextDatum(cagra_timing_steps[t].step);
		values[1] = CStringGetTextDatum(cagra_timing_steps[t].per);
		values[2] = Int64GetDatum((int64) events);
		values[3] = Float8GetDatum((double) us / 1000.0);
		values[4] = Float8GetDatum(events ? (double) us / (double) events : 0.0);
		nulls[4] = events == 0;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
