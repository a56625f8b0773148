/*
 * guc.cpp — the GUCs of the GPU worker and of search offload:
 * cagra.device, cagra.batch_window, cagra.batch_max, cagra.gpu_memory_limit,
 * cagra.worker_timeout, cagra.resident_search, cagra.gpu_library and
 * cagra.worker_backend.
 */
#include "protocol/protocol.h"

extern "C" {
#include "miscadmin.h"
#include "utils/guc.h"
}

int			cagra_device = CAGRA_SEARCH_AUTO;
int			cagra_batch_window_us = 100;
int			cagra_batch_max = 4096;
int			cagra_concurrent_batches = 4;
int			cagra_concurrent_filtered_searches = 8;
int			cagra_gpu_memory_limit_mb = 0;
int			cagra_worker_timeout_ms = 10000;
bool		cagra_resident_search = true;
char	   *cagra_gpu_library = NULL;
int			cagra_worker_backend = CAGRA_BACKEND_GPU;

static const struct config_enum_entry cagra_device_options[] = {
	{"auto", CAGRA_SEARCH_AUTO, false},
	{"gpu", CAGRA_SEARCH_GPU, false},
	{"cpu", CAGRA_SEARCH_CPU, false},
	{NULL, 0, false}
};

static const struct config_enum_entry cagra_backend_options[] = {
	{"gpu", CAGRA_BACKEND_GPU, false},
	{"cpu", CAGRA_BACKEND_CPU, false},
	{NULL, 0, false}
};

void
cagra_worker_define_gucs(void)
{
	DefineCustomEnumVariable("cagra.device",
							 "Where cagra index searches run: auto (the GPU worker when it runs), gpu, or cpu.",
							 "gpu raises an error when the worker cannot serve a search.",
							 &cagra_device, CAGRA_SEARCH_AUTO, cagra_device_options,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("cagra.batch_window",
							"Microseconds the GPU worker waits for more searches of the same index before a launch, while another launch runs.",
							"With no launch running, a search starts at once.", &cagra_batch_window_us, 100, 0, 1000000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("cagra.batch_max",
							"Most queries the GPU worker runs in one launch.",
							NULL, &cagra_batch_max, 4096, 1, 1000000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("cagra.gpu_memory_limit",
							"Device memory the GPU worker may use for cached index copies (0: 90% of the smallest device).",
							NULL, &cagra_gpu_memory_limit_mb, 0, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MB, NULL, NULL, NULL);
	DefineCustomIntVariable("cagra.worker_timeout",
							"How long a backend waits for one answer of the GPU worker before searching on the CPU.",
							NULL, &cagra_worker_timeout_ms, 10000, 1, INT_MAX,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);

	DefineCustomBoolVariable("cagra.resident_search",
							 "Whether the GPU worker answers small unfiltered batches with a search kernel that stays running on the device.",
							 "Off launches a kernel for every batch.",
							 &cagra_resident_search, true,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);

	/* Server-start settings exist only where the worker can: PostgreSQL
	 * refuses PGC_POSTMASTER variables from a library loaded later. */
	if (!process_shared_preload_libraries_in_progress)
		return;
	DefineCustomStringVariable("cagra.gpu_library",
							   "Path of libcagra_gpu.so, opened by the GPU worker only.",
							   NULL, &cagra_gpu_library, "$libdir/libcagra_gpu.so",
							   PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("cagra.concurrent_batches",
							"Search batches the GPU worker runs at the same time, each on a thread and CUDA stream of its own.",
							"1 runs one launch at a time.  The CPU backend always runs one.",
							&cagra_concurrent_batches, 4, 1, 64,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("cagra.concurrent_filtered_searches",
							"Filtered searches the GPU worker runs at the same time, on threads of their own besides those of cagra.concurrent_batches.",
							"Each filtered search is a launch of its own whose allowed rows the thread first maps to the copy's nodes.  0 runs them on the batch threads.  The CPU backend runs them with its one batch.",
							&cagra_concurrent_filtered_searches, 8, 0, 64,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomEnumVariable("cagra.worker_backend",
							 "What executes the worker's requests: gpu (libcagra_gpu.so), or cpu (the core library; for tests and GPU-less hosts that want batching).",
							 NULL, &cagra_worker_backend, CAGRA_BACKEND_GPU, cagra_backend_options,
							 PGC_POSTMASTER, 0, NULL, NULL, NULL);
}
