/*
 * guc.cpp — every cagra.* setting and its variable, defined in one place
 * (docs/reference.md lists them and says why each exists).
 *
 * Users tune six: cagra.itopk_size, cagra.max_scan_tuples,
 * cagra.enable_filtered_scan, cagra.device (the one device setting: where
 * searches run), cagra.worker_timeout and cagra.gpu_memory_limit.  The
 * others are for tests and developers, as PostgreSQL keeps its own (hidden
 * from SHOW ALL and postgresql.conf.sample): cagra.search_width,
 * cagra.max_iterations, cagra.entry_probes, cagra.skip_unread_distances,
 * cagra.vacuum_stop_before, cagra.worker_backend and
 * cagra.gpu_library.
 */
#include "protocol/protocol.h"

extern "C" {
#include "miscadmin.h"
#include "utils/guc.h"
}

/* searches (read by the backends) */
int			cagra_itopk_size = 0;	/* the index's own: CagraMetaData.search_itopk */
int			cagra_max_scan_tuples = 20000;
bool		cagra_enable_filtered_scan = true;
int			cagra_device = CAGRA_SEARCH_AUTO;
int			cagra_search_width = (int) cagra::kAutoSearchWidth;
int			cagra_max_iterations = 0;	/* automatic */
int			cagra_entry_probes = -1;	/* the index's own: CagraMetaData.search_probes */
bool		cagra_skip_unread_distances = true;

/* VACUUM (for tests) */
int			cagra_vacuum_stop_before = CAGRA_VACUUM_STOP_NOWHERE;

/* the worker and the round trip to it */
int			cagra_worker_timeout_ms = 10000;
int			cagra_gpu_memory_limit_mb = 0;
int			cagra_worker_backend = CAGRA_BACKEND_GPU;
char	   *cagra_gpu_library = NULL;

static const struct config_enum_entry cagra_device_options[] = {
	{"auto", CAGRA_SEARCH_AUTO, false},
	{"gpu", CAGRA_SEARCH_GPU, false},
	{"cpu", CAGRA_SEARCH_CPU, false},
	{NULL, 0, false}
};

static const struct config_enum_entry cagra_vacuum_stop_options[] = {
	{"off", CAGRA_VACUUM_STOP_NOWHERE, false},
	{"repair", CAGRA_VACUUM_STOP_REPAIR, false},
	{"reconnect", CAGRA_VACUUM_STOP_RECONNECT, false},
	{NULL, 0, false}
};

static const struct config_enum_entry cagra_backend_options[] = {
	{"gpu", CAGRA_BACKEND_GPU, false},
	{"cpu", CAGRA_BACKEND_CPU, false},
	{NULL, 0, false}
};

/* What PostgreSQL does for its developer options. */
#define CAGRA_DEVELOPER_SETTING (GUC_NO_SHOW_ALL | GUC_NOT_IN_SAMPLE)

static void
cagra_define_user_settings(void)
{
	DefineCustomIntVariable("cagra.itopk_size",
							"Candidates kept by a cagra index search (larger: better recall, slower).",
							"0 uses what the index's build measured it to need for recall 0.95 (at least 64).",
							&cagra_itopk_size, cagra_itopk_size, 0, (int) cagra::kMaxItopk,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("cagra.max_scan_tuples",
							"Most rows one cagra index scan returns when the executor keeps asking (filters, large LIMIT).",
							NULL, &cagra_max_scan_tuples, cagra_max_scan_tuples, 1, INT_MAX,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("cagra.enable_filtered_scan",
							 "Lets the planner use a cagra filtered scan for ORDER BY queries whose WHERE clause has an index.",
							 NULL, &cagra_enable_filtered_scan, cagra_enable_filtered_scan,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomEnumVariable("cagra.device",
							 "Where cagra index searches run: auto (the GPU worker when it runs), gpu, or cpu.",
							 "gpu raises an error when the worker cannot serve a search.",
							 &cagra_device, cagra_device, cagra_device_options,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("cagra.worker_timeout",
							"How long a backend waits for one answer of the GPU worker before searching on the CPU.",
							NULL, &cagra_worker_timeout_ms, cagra_worker_timeout_ms, 1, INT_MAX,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("cagra.gpu_memory_limit",
							"Device memory the GPU worker may use for cached index copies (0: 90% of the smallest device).",
							NULL, &cagra_gpu_memory_limit_mb, cagra_gpu_memory_limit_mb, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MB, NULL, NULL, NULL);
}

static void
cagra_define_developer_settings(void)
{
	DefineCustomIntVariable("cagra.search_width",
							"Nodes expanded per iteration of a cagra index search.",
							"0 chooses for where the search runs: 2 on the CPU, 1 on the GPU (more for small batches).",
							&cagra_search_width, cagra_search_width, 0, (int) cagra::kMaxSearchWidth,
							PGC_USERSET, CAGRA_DEVELOPER_SETTING, NULL, NULL, NULL);
	DefineCustomIntVariable("cagra.max_iterations",
							"Iteration limit of a cagra index search (0: chosen from itopk_size and search_width).",
							NULL, &cagra_max_iterations, cagra_max_iterations, 0, 100000,
							PGC_USERSET, CAGRA_DEVELOPER_SETTING, NULL, NULL, NULL);
	DefineCustomIntVariable("cagra.entry_probes",
							"Groups of entry nodes a CPU search of a cagra index measures besides their pivots (0: every entry).",
							"-1 uses what the index's build measured it to need (4 or 12).",
							&cagra_entry_probes, cagra_entry_probes, -1, (int) cagra::kMaxStoredEntries,
							PGC_USERSET, CAGRA_DEVELOPER_SETTING, NULL, NULL, NULL);
	DefineCustomBoolVariable("cagra.skip_unread_distances",
							 "Leaves a cagra scan's ORDER BY distance uncomputed where nothing above the scan reads it.",
							 NULL, &cagra_skip_unread_distances, cagra_skip_unread_distances,
							 PGC_USERSET, CAGRA_DEVELOPER_SETTING, NULL, NULL, NULL);
	DefineCustomEnumVariable("cagra.vacuum_stop_before",
							 "For tests: where VACUUM of a cagra index raises an error: before its repair, or before the links that follow it (off: nowhere).",
							 NULL, &cagra_vacuum_stop_before, cagra_vacuum_stop_before, cagra_vacuum_stop_options,
							 PGC_SUSET, CAGRA_DEVELOPER_SETTING, NULL, NULL, NULL);

	/* Server-start settings exist only where the worker can: PostgreSQL
	 * refuses PGC_POSTMASTER variables from a library loaded later. */
	if (!process_shared_preload_libraries_in_progress)
		return;
	DefineCustomEnumVariable("cagra.worker_backend",
							 "What executes the worker's requests: gpu (libcagra_gpu.so), or cpu (the core library, for tests).",
							 NULL, &cagra_worker_backend, cagra_worker_backend, cagra_backend_options,
							 PGC_POSTMASTER, CAGRA_DEVELOPER_SETTING, NULL, NULL, NULL);
	DefineCustomStringVariable("cagra.gpu_library",
							   "Path of libcagra_gpu.so, opened by the GPU worker only.",
							   NULL, &cagra_gpu_library, "$libdir/libcagra_gpu.so",
							   PGC_POSTMASTER, CAGRA_DEVELOPER_SETTING, NULL, NULL, NULL);
}

void
cagra_define_settings(void)
{
	cagra_define_user_settings();
	cagra_define_developer_settings();
	MarkGUCPrefixReserved("cagra");
}
