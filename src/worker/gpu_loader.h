/*
 * gpu_loader.h — the GPU library's C API (gpu/cagra_gpu.h) as a table of
 * function pointers, resolved with dlopen/dlsym inside the worker process
 * only.  The pointer types come from the header's own declarations, so a
 * changed signature cannot go unnoticed here.
 */
#pragma once

#include "gpu/cagra_gpu.h"

/* Every function of the API: X(member, symbol). */
#define CAGRA_GPU_FUNCTIONS(X) \
	X(version, cagra_gpu_version) \
	X(api_version, cagra_gpu_api_version) \
	X(last_error, cagra_gpu_last_error) \
	X(default_build_params, cagra_gpu_default_build_params) \
	X(default_search_params, cagra_gpu_default_search_params) \
	X(device_count, cagra_gpu_device_count) \
	X(get_device_info, cagra_gpu_get_device_info) \
	X(build_memory, cagra_gpu_build_memory) \
	X(index_memory, cagra_gpu_index_memory) \
	X(build, cagra_gpu_build) \
	X(index_load, cagra_gpu_index_load) \
	X(index_update, cagra_gpu_index_update) \
	X(search, cagra_gpu_search) \
	X(search_context_create, cagra_gpu_search_context_create) \
	X(search_context_free, cagra_gpu_search_context_free) \
	X(search_in, cagra_gpu_search_in) \
	X(search_context_device_ms, cagra_gpu_search_context_device_ms) \
	X(search_context_resident, cagra_gpu_search_context_resident) \
	X(search_context_on_query_done, cagra_gpu_search_context_on_query_done) \
	X(resident_start, cagra_gpu_resident_start) \
	X(resident_collect, cagra_gpu_resident_collect) \
	X(search_nodes, cagra_gpu_search_nodes) \
	X(search_nodes_in, cagra_gpu_search_nodes_in) \
	X(measure_pairs_in, cagra_gpu_measure_pairs_in) \
	X(index_device_bytes, cagra_gpu_index_device_bytes) \
	X(index_free, cagra_gpu_index_free)

typedef struct CagraGpuApi
{
#define CAGRA_GPU_MEMBER(member, symbol) decltype(&symbol) member;
	CAGRA_GPU_FUNCTIONS(CAGRA_GPU_MEMBER)
#undef CAGRA_GPU_MEMBER
} CagraGpuApi;

/* Open the library at `path` ("$libdir/" is expanded) and resolve every
 * function.  NULL on failure, with the reason in `why`. */
const CagraGpuApi *cagra_gpu_open(const char *path, char *why, size_t whylen);
