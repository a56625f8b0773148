/*
 * gpu_loader.h — the GPU library's C API as a table of function pointers,
 * resolved with dlopen/dlsym inside the worker process only.
 */
#pragma once

#include "../../gpu/cagra_gpu.h"

typedef struct CagraGpuApi
{
	const char *(*version) (void);
	int			(*api_version) (void);
	const char *(*last_error) (void);
	void		(*default_build_params) (cagra_gpu_build_params *);
	void		(*default_search_params) (cagra_gpu_search_params *);
	cagra_gpu_status (*device_count) (int *);
	cagra_gpu_status (*get_device_info) (int, cagra_gpu_device_info *);
	cagra_gpu_status (*build_memory) (uint64_t, uint32_t, const cagra_gpu_build_params *, uint64_t *);
	cagra_gpu_status (*index_memory) (uint64_t, uint32_t, uint32_t, cagra_gpu_dtype, uint64_t *);
	cagra_gpu_status (*build) (int, const float *, uint64_t, uint32_t, cagra_gpu_metric,
							   const cagra_gpu_build_params *, uint32_t *, uint32_t *, uint32_t,
							   uint32_t *);
	cagra_gpu_status (*index_load) (int, const void *, cagra_gpu_dtype, uint64_t, uint32_t,
									const uint32_t *, uint32_t, cagra_gpu_metric,
									const uint32_t *, uint32_t, cagra_gpu_index **);
	cagra_gpu_status (*search) (cagra_gpu_index *, const float *, uint32_t, uint32_t,
								const cagra_gpu_search_params *, const uint64_t *, uint32_t *,
								float *);
	cagra_gpu_status (*search_context_create) (int, cagra_gpu_search_context **);
	void		(*search_context_free) (cagra_gpu_search_context *);
	cagra_gpu_status (*search_in) (cagra_gpu_search_context *, cagra_gpu_index *, const float *,
								   uint32_t, uint32_t, const cagra_gpu_search_params *,
								   const uint64_t *, uint32_t *, float *);
	uint64_t	(*index_device_bytes) (const cagra_gpu_index *);
	void		(*index_free) (cagra_gpu_index *);
} CagraGpuApi;

/* Open the library at `path` ("$libdir/" is expanded) and resolve every
 * function.  NULL on failure, with the reason in `why`. */
const CagraGpuApi *cagra_gpu_open(const char *path, char *why, size_t whylen);
