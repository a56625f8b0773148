/*
 * cagra.cpp — the extension's entry: the library's magic block and _PG_init,
 * which defines the settings (cagra.*) and the reloptions and registers the
 * GPU worker.  The only file that sees every folder of src/.
 */
#include "am/cagra_am.h"
#include "protocol/protocol.h"

extern "C" {
#include "fmgr.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

PGDLLEXPORT void _PG_init(void);
}

void
_PG_init(void)
{
	cagra_init_reloptions();
	cagra_define_settings();
	cagra_init_filtered_scan();
	cagra_init_unread_distance();
	cagra_init_pgvector_habits();
	cagra_worker_register();
}
