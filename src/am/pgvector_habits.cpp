/*
 * pgvector_habits.cpp — clear messages for what a pgvector user is likely to
 * try on a cagra index:
 *
 *   WITH (m = 16, ef_construction = 64) on a cagra index: an error whose hint
 *     names graph_degree and intermediate_graph_degree;
 *   CREATE INDEX ... USING cagra (id) on an int column: an error that names
 *     the types cagra indexes, where PostgreSQL would say that the type has no
 *     default operator class and hint at defining one;
 *   SET hnsw.ef_search = 100 in a database without pgvector: a WARNING that
 *     the setting does nothing, naming cagra.itopk_size.
 *
 * The last two come from a ProcessUtility hook, so they need cagra loaded
 * in the session (always so with shared_preload_libraries = 'cagra').  A
 * reserved prefix (MarkGUCPrefixReserved("hnsw")) would have been simpler,
 * but it would refuse the settings of a session that loads pgvector later.
 */
#include "am/cagra_am.h"

extern "C" {
#include "access/reloptions.h"
#include "catalog/namespace.h"
#include "catalog/pg_opclass.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "lib/stringinfo.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/catcache.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
}

static ProcessUtility_hook_type prev_process_utility = NULL;

void
cagra_reject_pgvector_reloptions(Datum reloptions)
{
	ListCell   *lc;

	foreach(lc, untransformRelOptions(reloptions))
	{
		DefElem    *opt = (DefElem *) lfirst(lc);

		if (strcmp(opt->defname, "m") == 0 || strcmp(opt->defname, "ef_construction") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unrecognized parameter \"%s\" for a cagra index", opt->defname),
					 errdetail("\"m\" and \"ef_construction\" are parameters of pgvector's hnsw indexes."),
					 errhint("A cagra index takes graph_degree (default %d, every node's out-degree: m = 16 compares with graph_degree = 32) "
							 "and intermediate_graph_degree (default %d, in place of ef_construction).",
							 CAGRA_DEFAULT_DEGREE, CAGRA_DEFAULT_INTERMEDIATE_DEGREE)));
	}
}

/* The types with a default cagra operator class, as "halfvec or vector". */
static char *
cagra_indexable_types(Oid am)
{
	StringInfoData names;
	CatCList   *classes = SearchSysCacheList1(CLAAMNAMENSP, ObjectIdGetDatum(am));
	List	   *types = NIL;
	ListCell   *lc;

	for (int i = 0; i < classes->n_members; i++)
	{
		Form_pg_opclass opclass = (Form_pg_opclass) GETSTRUCT(&classes->members[i]->tuple);

		if (opclass->opcdefault)
			types = lappend(types, format_type_be(opclass->opcintype));
	}
	ReleaseCatCacheList(classes);

	initStringInfo(&names);
	foreach(lc, types)
		appendStringInfo(&names, "%s%s",
						 foreach_current_index(lc) == 0 ? "" :
						 lnext(types, lc) == NULL ? " or " : ", ",
						 (char *) lfirst(lc));
	return names.data;
}

/*
 * The column of CREATE INDEX ... USING cagra, when no operator class is
 * named, must be of a type that has a default cagra operator class.
 * Expressions, named operator classes and several columns (which cagra
 * does not support) are left to PostgreSQL's own checks.
 */
static void
cagra_check_index_columns(IndexStmt *stmt)
{
	Oid			am = get_index_am_oid("cagra", true);
	Oid			relid;
	IndexElem  *elem;
	AttrNumber	attnum;
	Oid			type;

	if (!OidIsValid(am) || list_length(stmt->indexParams) != 1)
		return;
	/* no lock: DefineIndex locks and looks again; this only picks a message */
	relid = RangeVarGetRelid(stmt->relation, NoLock, true);
	if (!OidIsValid(relid))
		return;
	elem = (IndexElem *) linitial(stmt->indexParams);
	if (elem->name == NULL || elem->opclass != NIL)
		return;
	attnum = get_attnum(relid, elem->name);
	if (attnum == InvalidAttrNumber)
		return;
	type = get_atttype(relid, attnum);
	if (OidIsValid(GetDefaultOpClass(type, am)))
		return;
	ereport(ERROR,
			(errcode(ERRCODE_DATATYPE_MISMATCH),
			 errmsg("cagra cannot index column \"%s\" of type %s", elem->name, format_type_be(type)),
			 errhint("A cagra index takes a column of type %s.", cagra_indexable_types(am))));
}

/*
 * SET of a pgvector search setting in a database without pgvector: the
 * setting stays a placeholder nothing reads.
 */
static void
cagra_warn_pgvector_setting(VariableSetStmt *stmt)
{
	if (stmt->kind != VAR_SET_VALUE || stmt->name == NULL ||
		(strncmp(stmt->name, "hnsw.", 5) != 0 && strncmp(stmt->name, "ivfflat.", 8) != 0))
		return;
	if ((GetConfigOptionFlags(stmt->name, true) & GUC_CUSTOM_PLACEHOLDER) == 0 ||
		OidIsValid(get_extension_oid("vector", true)))
		return;
	ereport(WARNING,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("setting \"%s\" has no effect: pgvector is not installed in this database", stmt->name),
			 errhint("The search buffer of a cagra index is set with cagra.itopk_size.")));
}

static void
cagra_process_utility(PlannedStmt *pstmt, const char *query_string, bool read_only_tree,
					  ProcessUtilityContext context, ParamListInfo params, QueryEnvironment *env,
					  DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;

	if (IsA(parsetree, IndexStmt) && ((IndexStmt *) parsetree)->accessMethod != NULL &&
		strcmp(((IndexStmt *) parsetree)->accessMethod, "cagra") == 0)
		cagra_check_index_columns((IndexStmt *) parsetree);

	if (prev_process_utility)
		prev_process_utility(pstmt, query_string, read_only_tree, context, params, env, dest, qc);
	else
		standard_ProcessUtility(pstmt, query_string, read_only_tree, context, params, env, dest, qc);

	/* after the SET, which creates the placeholder */
	if (IsA(parsetree, VariableSetStmt))
		cagra_warn_pgvector_setting((VariableSetStmt *) parsetree);
}

void
cagra_init_pgvector_habits(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = cagra_process_utility;
}
