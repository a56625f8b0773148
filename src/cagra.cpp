/*
 * cagra.cpp — the extension's entry: _PG_init with the GUCs
 * (cagra.*) and the reloptions of the cagra access method.
 */
#include "am/cagra_am.h"
#include "worker/worker.h"

extern "C" {
#include "fmgr.h"
#include "utils/guc.h"

PGDLLEXPORT void _PG_init(void);
}

int			cagra_itopk_size = 64;
int			cagra_search_width = 1;
int			cagra_max_iterations = 0;
int			cagra_max_scan_tuples = 20000;

static void
cagra_define_search_gucs(void)
{
	DefineCustomIntVariable("cagra.itopk_size",
							"Candidates kept by a cagra index search (larger: better recall, slower).",
							NULL, &cagra_itopk_size, 64, 1, 1024,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("cagra.search_width",
							"Nodes expanded per iteration of a cagra index search.",
							NULL, &cagra_search_width, 1, 1, 64,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("cagra.max_iterations",
							"Iteration limit of a cagra index search (0: chosen from itopk_size and search_width).",
							NULL, &cagra_max_iterations, 0, 0, 100000,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("cagra.max_scan_tuples",
							"Most rows one cagra index scan returns when the executor keeps asking (filters, large LIMIT).",
							NULL, &cagra_max_scan_tuples, 20000, 1, INT_MAX,
							PGC_USERSET, 0, NULL, NULL, NULL);
}

void
_PG_init(void)
{
	cagra_init_reloptions();
	cagra_define_search_gucs();
	cagra_worker_register();
	MarkGUCPrefixReserved("cagra");
}
