/*
 * module.cpp — the library's magic block, which PostgreSQL checks when it
 * loads cagra.so.  Exactly one per shared object: _PG_init and the GUCs live
 * in src/cagra.cpp, which must not repeat PG_MODULE_MAGIC.
 */
extern "C" {
#include "postgres.h"
#include "fmgr.h"

PG_MODULE_MAGIC;
}
