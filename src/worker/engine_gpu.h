/*
 * engine_gpu.h — the worker's GPU engine (engine_gpu.cpp): the GPU
 * library's C API behind the engine interface.  Worker process only.
 */
#pragma once

#include "worker/engine.h"
#include "worker/gpu_loader.h"

/* The engine over an opened library; the caller hands it to cagra_engine_init. */
CagraEngine *cagra_gpu_engine_make(const CagraGpuApi *api);
