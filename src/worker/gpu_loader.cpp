/*
 * gpu_loader.cpp — opens libcagra_gpu.so in the worker process and resolves
 * its C API (gpu/cagra_gpu.h).  Only the worker calls this: backends and the
 * postmaster never load CUDA.
 */
#include "worker/gpu_loader.h"

extern "C" {
#include "postgres.h"
#include "miscadmin.h"
}

#include <dlfcn.h>
#include <string>

static CagraGpuApi cagra_gpu_api;

/* "$libdir/x" -> "<pkglibdir>/x", as dynamic_library_path would. */
static std::string
cagra_expand_libdir(const char *path)
{
	std::string p(path);

	if (p.rfind("$libdir", 0) == 0)
		p = std::string(pkglib_path) + p.substr(strlen("$libdir"));
	return p;
}

template <class F>
static bool
cagra_resolve(void *lib, const char *name, F *out, char *why, size_t whylen)
{
	void	   *sym = dlsym(lib, name);

	if (!sym)
	{
		snprintf(why, whylen, "symbol %s missing from the GPU library", name);
		return false;
	}
	*out = reinterpret_cast<F>(sym);
	return true;
}

const CagraGpuApi *
cagra_gpu_open(const char *path, char *why, size_t whylen)
{
	std::string full = cagra_expand_libdir(path);
	void	   *lib = dlopen(full.c_str(), RTLD_NOW | RTLD_LOCAL);

	if (!lib)
	{
		const char *err = dlerror();

		if (err)
			strlcpy(why, err, whylen);
		else
			snprintf(why, whylen, "cannot open %s", full.c_str());
		return NULL;
	}

	CagraGpuApi *a = &cagra_gpu_api;
	bool		ok = true;

#define CAGRA_GPU_RESOLVE(member, symbol) \
	ok = ok && cagra_resolve(lib, #symbol, &a->member, why, whylen);
	CAGRA_GPU_FUNCTIONS(CAGRA_GPU_RESOLVE)
#undef CAGRA_GPU_RESOLVE

	if (ok && a->api_version() != CAGRA_GPU_API_VERSION)
	{
		snprintf(why, whylen, "%s has API version %d, this cagra.so needs %d",
				 full.c_str(), a->api_version(), CAGRA_GPU_API_VERSION);
		ok = false;
	}
	if (!ok)
	{
		dlclose(lib);
		return NULL;
	}
	return a;
}
