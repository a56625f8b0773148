/*
 * engine_core.h — the worker's CPU engine (engine_core.cpp): the core
 * library on the worker's threads behind the engine interface.  Worker
 * process only.
 */
#pragma once

#include "worker/engine.h"

/* The engine; the caller hands it to cagra_engine_init. */
CagraEngine *cagra_core_engine_make(void);
