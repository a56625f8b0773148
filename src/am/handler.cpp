/*
 * handler.cpp — the cagra access method handler (the IndexAmRoutine),
 * opclass validation, reloptions, build phase names, the metric support
 * functions, and the one place each of build and search parameters is
 * assembled (the settings themselves: protocol/guc.cpp).
 */
#include "am/cagra_am.h"
#include "type/vector.h"

extern "C" {
#include "access/amvalidate.h"
#include "access/htup_details.h"
#include "catalog/pg_amop.h"
#include "catalog/pg_amproc.h"
#include "catalog/pg_opclass.h"
#include "catalog/pg_type.h"
#include "commands/progress.h"
#include "commands/vacuum.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/regproc.h"

PG_FUNCTION_INFO_V1(cagra_handler);
PG_FUNCTION_INFO_V1(cagra_l2_support);
PG_FUNCTION_INFO_V1(cagra_ip_support);
PG_FUNCTION_INFO_V1(cagra_cosine_support);
PG_FUNCTION_INFO_V1(cagra_l1_support);
}

relopt_kind cagra_relopt_kind;

static relopt_enum_elt_def cagra_device_values[] = {
	{"auto", CAGRA_DEVICE_AUTO},
	{"gpu", CAGRA_DEVICE_GPU},
	{"cpu", CAGRA_DEVICE_CPU},
	{NULL, 0}
};

static relopt_enum_elt_def cagra_storage_values[] = {
	{"auto", CAGRA_STORAGE_AUTO},
	{"float32", CAGRA_STORAGE_FLOAT32},
	{"float16", CAGRA_STORAGE_FLOAT16},
	{NULL, 0}
};

void
cagra_init_reloptions(void)
{
	cagra_relopt_kind = add_reloption_kind();
	add_int_reloption(cagra_relopt_kind, "graph_degree",
					  "Out-degree of the final CAGRA graph",
					  CAGRA_DEFAULT_DEGREE, CAGRA_MIN_DEGREE, CAGRA_MAX_DEGREE,
					  AccessExclusiveLock);
	add_int_reloption(cagra_relopt_kind, "intermediate_graph_degree",
					  "Out-degree of the kNN graph the CAGRA graph is pruned from",
					  CAGRA_DEFAULT_INTERMEDIATE_DEGREE, CAGRA_MIN_DEGREE,
					  CAGRA_MAX_INTERMEDIATE_DEGREE, AccessExclusiveLock);
	add_enum_reloption(cagra_relopt_kind, "build_device",
					   "Device that builds the graph",
					   cagra_device_values, CAGRA_DEVICE_AUTO,
					   "Valid values are \"auto\", \"gpu\" and \"cpu\".",
					   AccessExclusiveLock);
	add_enum_reloption(cagra_relopt_kind, "storage",
					   "Element type of the vectors the index stores",
					   cagra_storage_values, CAGRA_STORAGE_AUTO,
					   "Valid values are \"auto\", \"float32\" and \"float16\".",
					   AccessExclusiveLock);
}

bytea *
cagra_options(Datum reloptions, bool validate)
{
	static const relopt_parse_elt tab[] = {
		{"graph_degree", RELOPT_TYPE_INT, offsetof(CagraOptions, graph_degree)},
		{"intermediate_graph_degree", RELOPT_TYPE_INT, offsetof(CagraOptions, intermediate_graph_degree)},
		{"build_device", RELOPT_TYPE_ENUM, offsetof(CagraOptions, build_device)},
		{"storage", RELOPT_TYPE_ENUM, offsetof(CagraOptions, storage)},
	};
	CagraOptions *opts;

	if (validate)
		cagra_reject_pgvector_reloptions(reloptions);
	opts = (CagraOptions *) build_reloptions(reloptions, validate, cagra_relopt_kind,
											 sizeof(CagraOptions), tab, lengthof(tab));

	if (validate && opts && opts->graph_degree > opts->intermediate_graph_degree)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("graph_degree (%d) must not be greater than intermediate_graph_degree (%d)",
						opts->graph_degree, opts->intermediate_graph_degree),
				 errhint("Raise intermediate_graph_degree or lower graph_degree.")));
	return (bytea *) opts;
}

static CagraOptions *
cagra_options_of(Relation index)
{
	return (CagraOptions *) index->rd_options;
}

int
cagra_option_graph_degree(Relation index)
{
	CagraOptions *o = cagra_options_of(index);

	return o ? o->graph_degree : CAGRA_DEFAULT_DEGREE;
}

int
cagra_option_intermediate_degree(Relation index)
{
	CagraOptions *o = cagra_options_of(index);

	return o ? o->intermediate_graph_degree : CAGRA_DEFAULT_INTERMEDIATE_DEGREE;
}

int
cagra_option_build_device(Relation index)
{
	CagraOptions *o = cagra_options_of(index);

	return o ? o->build_device : CAGRA_DEVICE_AUTO;
}

cagra::ElementType
cagra_option_element_type(Relation index)
{
	CagraOptions *o = cagra_options_of(index);
	int			storage = o ? o->storage : CAGRA_STORAGE_AUTO;

	if (storage == CAGRA_STORAGE_FLOAT16 ||
		(storage == CAGRA_STORAGE_AUTO && cagra_index_is_halfvec(index)))
		return cagra::ElementType::Float16;
	return cagra::ElementType::Float32;
}

const char *
cagra_device_name(uint32 device)
{
	switch (device)
	{
		case CAGRA_DEVICE_AUTO:
			return "auto";
		case CAGRA_DEVICE_GPU:
			return "gpu";
		case CAGRA_DEVICE_CPU:
			return "cpu";
	}
	return "unknown";
}

/*
 * Support function 1 of every cagra opclass names the metric the opclass
 * indexes; the index asks it once, at build, and records it in the meta page.
 */
Datum
cagra_l2_support(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32((int32) cagra::Metric::L2);
}

Datum
cagra_ip_support(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32((int32) cagra::Metric::InnerProduct);
}

Datum
cagra_cosine_support(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32((int32) cagra::Metric::Cosine);
}

Datum
cagra_l1_support(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32((int32) cagra::Metric::L1);
}

cagra::Metric
cagra_index_metric(Relation index)
{
	FmgrInfo   *proc = index_getprocinfo(index, 1, 1);
	int32		code = DatumGetInt32(FunctionCall1Coll(proc, InvalidOid, (Datum) 0));

	if (code < 0 || !cagra::metric_is_valid((uint32) code))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
				 errmsg("support function 1 of the operator class of index \"%s\" returned an unknown metric %d",
						RelationGetRelationName(index), code)));
	return (cagra::Metric) code;
}

/* Whether the indexed column is pgvector's halfvec (read as floats). */
bool
cagra_index_is_halfvec(Relation index)
{
	return vector_type_is_halfvec(TupleDescAttr(RelationGetDescr(index), 0)->atttypid);
}

bool
cagra_index_rounds_vectors(Relation index, const CagraMetaData *meta)
{
	if (meta->element_type != (uint32) cagra::ElementType::Float16)
		return false;
	return !cagra_index_is_halfvec(index) || meta->metric == (uint32) cagra::Metric::Cosine;
}

/* The one place build parameters are assembled: the reloptions, and the
 * threads of a build in this backend (the worker's CPU engine sets its own). */
cagra::BuildParams
cagra_build_params(Relation index)
{
	cagra::BuildParams p;

	p.graph_degree = (uint32_t) cagra_option_graph_degree(index);
	p.intermediate_degree = (uint32_t) cagra_option_intermediate_degree(index);
	p.threads = (uint32_t) max_parallel_maintenance_workers + 1;
	return p;
}

/* The one place a search plan is resolved (core/search_plan.h): the
 * cagra.* settings as set, and what the index's build measured (the meta
 * page's search_itopk and search_probes; nothing without a meta page, as
 * the planner asks). */
cagra::SearchPlan
cagra_search_plan(const CagraMetaData *meta)
{
	cagra::SearchSettings settings;
	cagra::IndexSearchChoice index;

	settings.itopk_size = (uint32_t) cagra_itopk_size;
	settings.search_width = (uint32_t) cagra_search_width;
	settings.max_iterations = (uint32_t) cagra_max_iterations;
	settings.entry_probes = cagra_entry_probes;
	if (meta)
	{
		index.itopk_size = meta->search_itopk;
		index.entry_probes = meta->search_probes;
	}
	return cagra::resolve_search_plan(settings, index);
}

cagra::SearchParams
cagra_search_params(const CagraMetaData *meta)
{
	return cagra_search_plan(meta).params;
}

/* The index's own values: what a plan resolves to with the settings left
 * automatic. */
uint32
cagra_index_itopk(const CagraMetaData *meta)
{
	cagra::IndexSearchChoice index;

	if (meta)
		index.itopk_size = meta->search_itopk;
	return cagra::resolve_search_plan(cagra::SearchSettings{}, index).params.itopk_size;
}

uint32
cagra_index_probes(const CagraMetaData *meta)
{
	cagra::IndexSearchChoice index;

	if (meta)
		index.entry_probes = meta->search_probes;
	return cagra::resolve_search_plan(cagra::SearchSettings{}, index).params.entry_probes;
}

char *
cagra_buildphasename(int64 phasenum)
{
	switch (phasenum)
	{
		case PROGRESS_CREATEIDX_SUBPHASE_INITIALIZE:
			return (char *) "initializing";
		case CAGRA_PHASE_LOAD:
			return (char *) "loading tuples";
		case CAGRA_PHASE_KNN:
			return (char *) "building kNN graph";
		case CAGRA_PHASE_PRUNE:
			return (char *) "optimizing graph";
		case CAGRA_PHASE_WRITE:
			return (char *) "writing and WAL-logging index pages";
		case CAGRA_PHASE_RECEIVE:
			return (char *) "receiving the graph from the GPU worker";
		case CAGRA_PHASE_SYNC:
			return (char *) "syncing index pages to disk";
		case CAGRA_PHASE_MEASURE:
			return (char *) "measuring the search buffer";
	}
	return NULL;
}

/*
 * An opclass is valid when it has support function 1 (internal -> int4) and
 * only ordering operators of strategy 1 that return float8 and sort with
 * float8's btree family.
 */
bool
cagra_validate(Oid opclassoid)
{
	bool		result = true;
	HeapTuple	classtup = SearchSysCache1(CLAOID, ObjectIdGetDatum(opclassoid));

	if (!HeapTupleIsValid(classtup))
		elog(ERROR, "cache lookup failed for operator class %u", opclassoid);
	Form_pg_opclass classform = (Form_pg_opclass) GETSTRUCT(classtup);
	Oid			opfamilyoid = classform->opcfamily;
	char	   *opclassname = NameStr(classform->opcname);
	CatCList   *oprlist = SearchSysCacheList1(AMOPSTRATEGY, ObjectIdGetDatum(opfamilyoid));
	CatCList   *proclist = SearchSysCacheList1(AMPROCNUM, ObjectIdGetDatum(opfamilyoid));
	bool		has_support = false;

	for (int i = 0; i < proclist->n_members; i++)
	{
		Form_pg_amproc proc = (Form_pg_amproc) GETSTRUCT(&proclist->members[i]->tuple);

		if (proc->amprocnum != 1 ||
			!check_amproc_signature(proc->amproc, INT4OID, false, 1, 1, INTERNALOID))
		{
			ereport(INFO,
					(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
					 errmsg("cagra operator class \"%s\" has an invalid support function %s with number %d",
							opclassname, format_procedure(proc->amproc), proc->amprocnum)));
			result = false;
			continue;
		}
		has_support = true;
	}
	if (!has_support)
	{
		ereport(INFO,
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
				 errmsg("cagra operator class \"%s\" lacks support function 1", opclassname)));
		result = false;
	}

	for (int i = 0; i < oprlist->n_members; i++)
	{
		Form_pg_amop op = (Form_pg_amop) GETSTRUCT(&oprlist->members[i]->tuple);

		if (op->amopstrategy != 1 || op->amoppurpose != AMOP_ORDER ||
			!check_amop_signature(op->amopopr, FLOAT8OID, op->amoplefttype, op->amoprighttype) ||
			!opfamily_can_sort_type(op->amopsortfamily, FLOAT8OID))
		{
			ereport(INFO,
					(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
					 errmsg("cagra operator class \"%s\" has an invalid operator %s: only FOR ORDER BY operators of strategy 1 returning double precision are allowed",
							opclassname, format_operator(op->amopopr))));
			result = false;
		}
	}

	ReleaseCatCacheList(proclist);
	ReleaseCatCacheList(oprlist);
	ReleaseSysCache(classtup);
	return result;
}

Datum
cagra_handler(PG_FUNCTION_ARGS)
{
	IndexAmRoutine *am = makeNode(IndexAmRoutine);

	am->amstrategies = 0;
	am->amsupport = 1;
	am->amoptsprocnum = 0;
	am->amcanorder = false;
	am->amcanorderbyop = true;
	am->amcanbackward = false;
	am->amcanunique = false;
	am->amcanmulticol = false;
	am->amoptionalkey = true;
	am->amsearcharray = false;
	am->amsearchnulls = false;
	am->amstorage = false;
	am->amclusterable = false;
	am->ampredlocks = false;
	am->amcanparallel = false;
	am->amcaninclude = false;
	am->amusemaintenanceworkmem = false;
	am->amparallelvacuumoptions = VACUUM_OPTION_PARALLEL_BULKDEL;
	am->amkeytype = InvalidOid;

	am->ambuild = cagra_build;
	am->ambuildempty = cagra_buildempty;
	am->aminsert = cagra_insert;
	am->ambulkdelete = cagra_bulkdelete;
	am->amvacuumcleanup = cagra_vacuumcleanup;
	/* returns no column (vectors are stored prepared: normalised under
	 * cosine); an index-only scan that needs none (count(*)) has no ORDER
	 * BY, and cagra_costestimate prices it out */
	am->amcanreturn = NULL;
	am->amcostestimate = cagra_costestimate;
	am->amoptions = cagra_options;
	am->amproperty = NULL;
	am->ambuildphasename = cagra_buildphasename;
	am->amvalidate = cagra_validate;
	am->amadjustmembers = NULL;
	am->ambeginscan = cagra_beginscan;
	am->amrescan = cagra_rescan;
	am->amgettuple = cagra_gettuple;
	am->amgetbitmap = NULL;
	am->amendscan = cagra_endscan;
	am->ammarkpos = NULL;
	am->amrestrpos = NULL;
	am->amestimateparallelscan = NULL;
	am->aminitparallelscan = NULL;
	am->amparallelrescan = NULL;

	PG_RETURN_POINTER(am);
}
