/*
 * pg_compat.h — the one place where cagra's PostgreSQL-facing code differs
 * between the PostgreSQL major versions it is built for (15 and 17; 16
 * takes the 17 branch).  Call sites use the names below, never
 * PG_VERSION_NUM themselves.
 *
 * PostgreSQL 16 renamed the physical identity of a relation's files:
 * RelFileNode (rd_node, smgr_rnode.node, .relNode) became RelFileLocator
 * (rd_locator, smgr_rlocator.locator, .relNumber); log_newpage(),
 * log_newpages() and ReadRecentBuffer() take the new type, under the same
 * names and argument order.
 *
 * PostgreSQL 17 ties a WaitEventSet to a resource owner (or none) instead of
 * allocating it in a memory context.
 *
 * PostgreSQL 16 checks privileges on a schema through object_aclcheck(),
 * which replaced pg_namespace_aclcheck().
 *
 * It includes only PostgreSQL headers (docs/architecture.md: boundary).
 */
#pragma once

extern "C" {
#include "postgres.h"

#if PG_VERSION_NUM >= 160000
#include "storage/relfilelocator.h"
#else
#include "storage/relfilenode.h"
#endif
#include "catalog/pg_namespace.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/memutils.h"
#include "utils/rel.h"
}

#if PG_VERSION_NUM >= 160000

/* What identifies a relation's files on disk (a rewrite gives a new one). */
typedef RelFileLocator CagraRelFileId;

#define CAGRA_REL_FILE_ID(rel)			((rel)->rd_locator)
#define CAGRA_REL_FILE_NUMBER(rel)		((rel)->rd_locator.relNumber)
#define CAGRA_REL_TABLESPACE(rel)		((rel)->rd_locator.spcOid)
#define CAGRA_REL_FILE_ID_EQUALS(a, b)	RelFileLocatorEquals((a), (b))

#else

typedef RelFileNode CagraRelFileId;

#define CAGRA_REL_FILE_ID(rel)			((rel)->rd_node)
#define CAGRA_REL_FILE_NUMBER(rel)		((rel)->rd_node.relNode)
#define CAGRA_REL_TABLESPACE(rel)		((rel)->rd_node.spcNode)
#define CAGRA_REL_FILE_ID_EQUALS(a, b)	RelFileNodeEquals((a), (b))

#endif

/* A WaitEventSet for the life of the process: in TopMemoryContext, and
 * released by no resource owner. */
static inline WaitEventSet *
cagra_create_process_wait_event_set(int nevents)
{
#if PG_VERSION_NUM >= 170000
	return CreateWaitEventSet(NULL, nevents);
#else
	return CreateWaitEventSet(TopMemoryContext, nevents);
#endif
}

/* Whether the user holds the privileges of mode on the schema. */
static inline AclResult
cagra_schema_aclcheck(Oid nspid, Oid userid, AclMode mode)
{
#if PG_VERSION_NUM >= 160000
	return object_aclcheck(NamespaceRelationId, nspid, userid, mode);
#else
	return pg_namespace_aclcheck(nspid, userid, mode);
#endif
}
