/*
 * info.cpp — SQL functions that inspect a cagra index:
 *   cagra_index_info(regclass)   what the meta page says, plus the size;
 *   cagra_index_check(regclass)  every broken invariant, one text row each;
 * and what every SQL function taking an index asks before it opens and
 * reads one.
 */
#include "am/cagra_am.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

extern "C" {
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xlog.h"
#include "catalog/index.h"
#include "catalog/pg_class.h"
#include "commands/defrem.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/bitmapset.h"
#include "nodes/pg_list.h"
#include "optimizer/optimizer.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(cagra_index_info);
PG_FUNCTION_INFO_V1(cagra_index_check);
}

/*
 * The one way the SQL functions open a cagra index (cagra_am.h).  The table
 * is locked first when it can be found, as PostgreSQL's own commands do, so
 * that a DROP INDEX (which locks the table, then the index) cannot deadlock
 * with us; *heap_out gets it (NULL: not wanted).
 */
Relation
cagra_open_sql_index(Oid relid, bool need_valid, Relation *heap_out)
{
	Oid			heapoid = IndexGetRelation(relid, true);
	Relation	heap = NULL;
	Relation	index;

	if (heap_out && OidIsValid(heapoid))
		heap = table_open(heapoid, AccessShareLock);
	index = try_relation_open(relid, AccessShareLock);
	if (index == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("relation with OID %u does not exist", relid)));
	if (index->rd_rel->relkind == RELKIND_PARTITIONED_INDEX)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is a partitioned index", RelationGetRelationName(index)),
				 errdetail("A partitioned index has no pages: each partition has an index of its own."),
				 errhint("Pass the index of one partition.")));
	if (index->rd_rel->relkind != RELKIND_INDEX)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not an index", RelationGetRelationName(index))));
	if (index->rd_rel->relam != get_index_am_oid("cagra", false))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s\" is not a cagra index", RelationGetRelationName(index))));
	if (RELATION_IS_OTHER_TEMP(index))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot access temporary indexes of other sessions")));
	if (!RelationIsPermanent(index) && RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cannot access unlogged index \"%s\" during recovery",
						RelationGetRelationName(index))));
	/* the table may have changed between the look-up and the lock */
	if (heap && index->rd_index->indrelid != heapoid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("index \"%s\" changed while it was opened", RelationGetRelationName(index)),
				 errhint("Try again.")));
	if (RelationGetNumberOfBlocks(index) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cagra index \"%s\" has never been built", RelationGetRelationName(index)),
				 errdetail("Its build did not finish (an interrupted or failed CREATE INDEX CONCURRENTLY leaves such an index behind)."),
				 errhint("REINDEX the index, or drop it and create it again.")));
	if (need_valid && !index->rd_index->indisvalid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("cagra index \"%s\" is not valid", RelationGetRelationName(index)),
				 errdetail("An interrupted or failed CREATE INDEX CONCURRENTLY or REINDEX CONCURRENTLY left it behind: it may lack rows."),
				 errhint("REINDEX the index, or drop it and create it again.")));
	if (heap_out)
		*heap_out = heap ? heap : table_open(index->rd_index->indrelid, AccessShareLock);
	return index;
}

/* The nodes of the unlinked span still unlinked (live ones). */
static int64
cagra_count_unlinked(Relation index, const CagraMetaData *meta)
{
	int64		count = 0;

	for (uint32 id = cagra_first_unlinked(meta); id < meta->n; id++)
	{
		CagraNodeHeader hdr;

		cagra_read_record_bytes(index, meta, id, 0, sizeof(hdr), &hdr);
		count += (hdr.flags & CAGRA_NODE_UNLINKED) && cagra_node_is_live(hdr.flags);
	}
	return count;
}

/*
 * What reading the index's rows asks of the caller, as the equivalent
 * SELECT ... ORDER BY would: USAGE on the table's schema (an OID reaches
 * the index without the name lookup that checks it), and SELECT on the
 * table or on every column the index reads (its key, the columns of its
 * expressions and predicate).
 */
void
cagra_check_read_access(Relation index, Relation heap)
{
	Oid			relid = RelationGetRelid(heap);
	Oid			nspid = RelationGetNamespace(heap);
	Oid			userid = GetUserId();

	if (cagra_schema_aclcheck(nspid, userid, ACL_USAGE) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_SCHEMA, get_namespace_name(nspid));
	if (pg_class_aclcheck(relid, userid, ACL_SELECT) == ACLCHECK_OK)
		return;

	Bitmapset  *cols = NULL;
	List	   *exprs = RelationGetIndexExpressions(index);
	List	   *pred = RelationGetIndexPredicate(index);
	int			col = -1;

	for (int i = 0; i < index->rd_index->indnatts; i++)
		if (index->rd_index->indkey.values[i] != 0)
			cols = bms_add_member(cols, index->rd_index->indkey.values[i] - FirstLowInvalidHeapAttributeNumber);
	pull_varattnos((Node *) exprs, 1, &cols);
	pull_varattnos((Node *) pred, 1, &cols);
	/* no column at all: the table's message, as a query would give */
	if (bms_is_empty(cols) || pg_attribute_aclcheck_all(relid, userid, ACL_SELECT, ACLMASK_ANY) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, RelationGetRelationName(heap));
	while ((col = bms_next_member(cols, col)) >= 0)
	{
		AttrNumber	attno = (AttrNumber) (col + FirstLowInvalidHeapAttributeNumber);

		if (pg_attribute_aclcheck(relid, attno, userid, ACL_SELECT) != ACLCHECK_OK)
			aclcheck_error_col(ACLCHECK_NO_PRIV, OBJECT_COLUMN, RelationGetRelationName(heap),
							   get_attname(relid, attno, false));
	}
}

Datum
cagra_index_info(PG_FUNCTION_ARGS)
{
	Oid			relid = PG_GETARG_OID(0);
	TupleDesc	tupdesc;
	Relation	heap;
	Relation	index = cagra_open_sql_index(relid, false, &heap);
	CagraMetaData meta;

	/* its counts are the table's: for those who may read it */
	cagra_check_read_access(index, heap);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	cagra_read_meta(index, &meta);

	BlockNumber pages = RelationGetNumberOfBlocks(index);
	Datum		values[21];
	bool		nulls[21] = {false};

	values[0] = Int32GetDatum((int32) meta.dims);
	values[1] = CStringGetTextDatum(cagra::metric_name((cagra::Metric) meta.metric));
	values[2] = Int32GetDatum((int32) meta.graph_degree);
	values[3] = Int32GetDatum((int32) meta.intermediate_degree);
	values[4] = CStringGetTextDatum(cagra_device_name(meta.build_device));
	values[5] = Int64GetDatum((int64) meta.n);
	values[6] = Int64GetDatum((int64) meta.live);
	values[7] = Int64GetDatum((int64) meta.n - (int64) meta.live);
	values[8] = Int32GetDatum((int32) meta.entry_count);
	values[9] = Int32GetDatum((int32) meta.nodes_per_group);
	values[10] = Int32GetDatum((int32) meta.pages_per_group);
	values[11] = Int64GetDatum((int64) pages);
	values[12] = Int64GetDatum((int64) pages * BLCKSZ);
	values[13] = Int64GetDatum((int64) meta.generation);
	values[14] = BoolGetDatum((meta.build_flags & CAGRA_BUILT_LONG_EDGES) != 0);
	values[15] = CStringGetTextDatum(cagra::element_type_name((cagra::ElementType) meta.element_type));
	values[16] = Int64GetDatum((int64) meta.reused);
	values[17] = Int32GetDatum((int32) cagra_index_itopk(&meta));
	values[18] = Int32GetDatum((int32) cagra_index_probes(&meta));
	values[19] = Int64GetDatum((int64) meta.built_nodes);
	values[20] = Int64GetDatum(cagra_count_unlinked(index, &meta));
	if (meta.dims == 0)
		nulls[0] = nulls[9] = nulls[10] = true;

	index_close(index, AccessShareLock);
	table_close(heap, AccessShareLock);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(tupdesc, values, nulls)));
}

/* ---- the check ---- */

typedef struct CagraCheck
{
	List	   *lines;			/* the first CAGRA_CHECK_MAX_PROBLEMS problems */
	uint64		problems;
	bool	   *live;			/* meta.n flags from the node pass (NULL: none) */
} CagraCheck;

#define CAGRA_CHECK_MAX_PROBLEMS 1000

/* On a standby, how many times the check runs again when replay changed the
 * index under it. */
#define CAGRA_CHECK_RECOVERY_ATTEMPTS 10

static void
cagra_problem(CagraCheck *c, const char *fmt,...) pg_attribute_printf(2, 3);

static void
cagra_problem(CagraCheck *c, const char *fmt,...)
{
	char		buf[512];
	va_list		args;

	c->problems++;
	if (c->problems > CAGRA_CHECK_MAX_PROBLEMS)
		return;
	va_start(args, fmt);
	vsnprintf(buf, sizeof(buf), fmt, args);
	va_end(args);
	c->lines = lappend(c->lines, pstrdup(buf));
}

static void
cagra_meta_problem_line(void *arg, bool fatal, const char *problem)
{
	cagra_problem((CagraCheck *) arg, "%s", problem);
}

static int
cagra_cmp_u32(const void *a, const void *b)
{
	uint32		x = *(const uint32 *) a,
				y = *(const uint32 *) b;

	return x < y ? -1 : x > y;
}

static void
cagra_check_row(CagraCheck *c, const CagraMetaData *meta, uint32 id, bool is_live, const uint32 *row,
				uint32 *sorted)
{
	bool		seen_padding = false;
	uint32		real = 0;

	for (uint32 j = 0; j < meta->graph_degree; j++)
	{
		uint32		t = row[j];

		if (t == cagra::kInvalidNode)
		{
			seen_padding = true;
			continue;
		}
		if (seen_padding)
		{
			cagra_problem(c, "node %u: padding before edge %u (slot %u)", id, t, j);
			seen_padding = false;
		}
		if (t >= meta->n)
			cagra_problem(c, "node %u: edge %u out of range (%u nodes)", id, t, meta->n);
		else if (t == id)
			cagra_problem(c, "node %u: self edge", id);
		sorted[real++] = t;
	}
	qsort(sorted, real, sizeof(uint32), cagra_cmp_u32);
	for (uint32 j = 1; j < real; j++)
		if (sorted[j] == sorted[j - 1])
			cagra_problem(c, "node %u: duplicate edge %u", id, sorted[j]);
	if (real == 0 && is_live && meta->live > meta->graph_degree + 1)
		cagra_problem(c, "node %u: row has no edge in a graph of %u live nodes", id, meta->live);
}

static void
cagra_check_vector(CagraCheck *c, const CagraMetaData *meta, uint32 id, const float *x)
{
	double		norm = 0;

	for (uint32 i = 0; i < meta->dims; i++)
	{
		if (std::isnan(x[i]) || std::isinf(x[i]))
		{
			cagra_problem(c, "node %u: vector element %u is %s", id, i, std::isnan(x[i]) ? "NaN" : "infinite");
			return;
		}
		norm += (double) x[i] * x[i];
	}
	if (meta->metric == (uint32) cagra::Metric::Cosine && fabs(sqrt(norm) - 1.0) > 1e-3)
		cagra_problem(c, "node %u: vector norm %g, expected 1 under cosine", id, sqrt(norm));
}

/* Every node, against the meta page; live nodes' heap TIDs against the
 * table's `heap_blocks`. */
static void
cagra_check_nodes(CagraCheck *c, Relation index, const CagraMetaData *meta, BlockNumber heap_blocks)
{
	char	   *rec = (char *) palloc(Max(meta->record_size, 1));
	uint32	   *sorted = (uint32 *) palloc(meta->graph_degree * sizeof(uint32));
	float	   *vec = (float *) palloc(Max(meta->dims, 1) * sizeof(float));
	uint32		live = 0;

	for (uint32 id = 0; id < meta->n; id++)
	{
		CagraNodeHeader hdr;

		CHECK_FOR_INTERRUPTS();
		cagra_read_record_bytes(index, meta, id, 0, meta->record_size, rec);
		memcpy(&hdr, rec, sizeof(hdr));
		bool		is_live = (hdr.flags & CAGRA_NODE_LIVE) != 0;
		bool		is_deleted = (hdr.flags & CAGRA_NODE_DELETED) != 0;

		if (is_live == is_deleted || (hdr.flags & ~(CAGRA_NODE_LIVE | CAGRA_NODE_DELETED | CAGRA_NODE_UNLINKED)))
			cagra_problem(c, "node %u: bad flags %04x", id, hdr.flags);
		else if ((hdr.flags & CAGRA_NODE_UNLINKED) && id < cagra_first_unlinked(meta))
			cagra_problem(c, "node %u: unlinked, but before the unlinked nodes (from %u)", id,
						  cagra_first_unlinked(meta));
		if (c->live)
			c->live[id] = is_live;
		if (is_live)
		{
			live++;
			if (!ItemPointerIsValid(&hdr.heap_tid))
				cagra_problem(c, "node %u: invalid heap TID", id);
			else if (ItemPointerGetBlockNumberNoCheck(&hdr.heap_tid) >= heap_blocks)
				cagra_problem(c, "node %u: heap TID (%u,%u) beyond the table's %u blocks", id,
							  ItemPointerGetBlockNumberNoCheck(&hdr.heap_tid),
							  ItemPointerGetOffsetNumberNoCheck(&hdr.heap_tid), heap_blocks);
		}
		/* an unlinked node's row is written when it is linked */
		cagra_check_row(c, meta, id, is_live && !(hdr.flags & CAGRA_NODE_UNLINKED),
						(const uint32 *) (rec + CAGRA_ROW_OFFSET), sorted);
		cagra_format_of(meta).load(rec + cagra_vector_offset(meta->graph_degree), vec);
		if (is_live)
			cagra_check_vector(c, meta, id, vec);
	}
	if (live != meta->live)
		cagra_problem(c, "meta page: live count %u, but %u nodes are live", meta->live, live);
	pfree(rec);
	pfree(sorted);
	pfree(vec);
}

/* The meta page as it is, unchecked (the check reports what is wrong). */
static void
cagra_read_raw_meta(Relation index, CagraMetaData *meta)
{
	Buffer		buf = ReadBuffer(index, CAGRA_METAPAGE_BLKNO);

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	memcpy(meta, cagra_meta_of(BufferGetPage(buf)), sizeof(*meta));
	UnlockReleaseBuffer(buf);
}

/*
 * A breadth-first walk from the entry nodes (and the nodes that may be
 * unlinked, which searches take as entries) along the graph's edges, rows
 * read from the pages as it goes; with through_deleted false it neither
 * starts at nor goes on from a deleted node.  Returns the n flags of the
 * nodes reached (palloc'd).
 */
static bool *
cagra_walk_from_entries(CagraCheck *c, Relation index, const CagraMetaData *meta, bool through_deleted)
{
	uint32		n = meta->n;
	uint32		reached = 0;
	bool	   *seen = (bool *) palloc_extended(n, MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
	uint32	   *queue = (uint32 *) palloc_extended((Size) n * sizeof(uint32), MCXT_ALLOC_HUGE);
	uint32	   *row = (uint32 *) palloc(meta->graph_degree * sizeof(uint32));

	for (uint32 i = 0; i < meta->entry_count + meta->unlinked; i++)
	{
		uint32		e = i < meta->entry_count ? meta->entries[i] : cagra_first_unlinked(meta) + (i - meta->entry_count);

		if (e < n && !seen[e] && (through_deleted || c->live[e]))
		{
			seen[e] = true;
			queue[reached++] = e;
		}
	}
	for (uint32 head = 0; head < reached; head++)
	{
		if ((head & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
		if (!through_deleted && !c->live[queue[head]])
			continue;
		cagra_read_record_bytes(index, meta, queue[head], CAGRA_ROW_OFFSET,
								meta->graph_degree * sizeof(uint32), row);
		for (uint32 j = 0; j < meta->graph_degree; j++)
			if (row[j] < n && !seen[row[j]])
			{
				seen[row[j]] = true;
				queue[reached++] = row[j];
			}
	}
	pfree(queue);
	pfree(row);
	return seen;
}

/*
 * Every live node must be reachable from the fixed entry nodes along the
 * graph's edges, through deleted nodes too, as searches go: a node without
 * a way in is returned by no search.  And, where an entry node is live,
 * along live nodes' rows alone, as VACUUM leaves the graph: a deleted
 * node's row is overwritten when an insert takes its slot, so a live node
 * that hangs only on it would be lost then.  Not while a vacuum is
 * unfinished (a crash or a cancel midway): no insert takes a slot then, and
 * the next vacuum repairs and links (vacuum.cpp).
 */
static void
cagra_check_reachable(CagraCheck *c, Relation index, const CagraMetaData *meta)
{
	uint32		n = meta->n;
	uint32		unreached = 0,
				through_deleted_only = 0;

	if (n == 0 || meta->entry_count == 0)
		return;

	bool		live_paths = false;

	for (uint32 i = 0; i < meta->entry_count; i++)
		live_paths |= meta->entries[i] < n && c->live[meta->entries[i]];
	live_paths &= !meta->vacuum_unfinished;

	bool	   *seen = cagra_walk_from_entries(c, index, meta, true);
	bool	   *seen_live = live_paths ? cagra_walk_from_entries(c, index, meta, false) : NULL;

	for (uint32 id = 0; id < n; id++)
	{
		if (!c->live[id])
			continue;
		if (!seen[id])
		{
			if (unreached++ < 10)
				cagra_problem(c, "node %u: live, but no edge path leads to it from the entry nodes", id);
		}
		else if (live_paths && !seen_live[id] && through_deleted_only++ < 10)
			cagra_problem(c, "node %u: live, but every edge path to it from the entry nodes passes a deleted node",
						  id);
	}
	if (unreached > 10)
		cagra_problem(c, "%u live nodes in all cannot be reached from the entry nodes", unreached);
	if (through_deleted_only > 10)
		cagra_problem(c, "%u live nodes in all can be reached only through deleted nodes", through_deleted_only);
	pfree(seen);
	if (seen_live)
		pfree(seen_live);
}

/* One check of the whole index against the meta page it read into *meta. */
static void
cagra_check_pass(CagraCheck *c, Relation index, Relation heap, CagraMetaData *meta_out)
{
	CagraMetaData &meta = *meta_out;

	c->lines = NIL;
	c->problems = 0;
	c->live = NULL;
	cagra_read_raw_meta(index, &meta);

	/* the table only grows while we hold our lock on it, and rows reach the
	 * table before the index: counted after the meta page, its blocks hold
	 * every row of the nodes the meta page counts */
	BlockNumber heap_blocks = RelationGetNumberOfBlocks(heap);

	if (cagra_validate_meta(&meta, RelationGetNumberOfBlocks(index), cagra_meta_problem_line, c))
	{
		c->live = (bool *) palloc_extended(Max(meta.n, 1), MCXT_ALLOC_HUGE | MCXT_ALLOC_ZERO);
		cagra_check_nodes(c, index, &meta, heap_blocks);
		cagra_check_reachable(c, index, &meta);
		pfree(c->live);
		c->live = NULL;
	}
}

/*
 * On a primary, writers wait while the check runs (the writers' lock), so
 * it sees one consistent graph.  A standby's replay takes no such lock: an
 * insert or a vacuum replayed while the check reads would show as edges out
 * of range or a wrong live count.  Every change that makes those bumps the
 * meta page's generation (insert.cpp, vacuum.cpp) after the pages that
 * carry it, so a pass that began and ended at one generation read no such
 * change; during recovery the check runs again until a pass does, and
 * gives up with an error (never with false problems) when replay keeps
 * changing the index.
 */
Datum
cagra_index_check(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			relid = PG_GETARG_OID(0);
	Relation	heap;
	Relation	index = cagra_open_sql_index(relid, false, &heap);
	CagraCheck	c;
	int			attempts = 0;

	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);

	cagra_lock_writers(index, ShareLock);
	for (;;)
	{
		CagraMetaData before,
					after;

		cagra_check_pass(&c, index, heap, &before);
		attempts++;
		if (!RecoveryInProgress())
			break;
		/* replay changed nothing the pass compared with (VACUUM's marks
		 * change the live count without a new generation) */
		cagra_read_raw_meta(index, &after);
		if (after.generation == before.generation && after.n == before.n && after.live == before.live)
			break;
		list_free_deep(c.lines);
		if (attempts >= CAGRA_CHECK_RECOVERY_ATTEMPTS)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("could not check index \"%s\": recovery changed it during each of %d attempts",
							RelationGetRelationName(index), attempts),
					 errdetail("On a standby, the check cannot hold off the replay of changes to the index."),
					 errhint("Run the check again when replay is idle, or on the primary.")));
		/* let replay move on a little before the next pass */
		pg_usleep(10000L * attempts);
		CHECK_FOR_INTERRUPTS();
	}
	cagra_unlock_writers(index, ShareLock);

	ListCell   *lc;
	bool		isnull = false;

	foreach(lc, c.lines)
	{
		Datum		value = CStringGetTextDatum((char *) lfirst(lc));

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &isnull);
	}
	if (c.problems > CAGRA_CHECK_MAX_PROBLEMS)
	{
		char		more[64];

		snprintf(more, sizeof(more), "... and %llu more problems",
				 (unsigned long long) (c.problems - CAGRA_CHECK_MAX_PROBLEMS));
		Datum		value = CStringGetTextDatum(more);

		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &isnull);
	}

	index_close(index, AccessShareLock);
	table_close(heap, AccessShareLock);
	return (Datum) 0;
}
