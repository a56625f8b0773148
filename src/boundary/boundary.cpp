/*
 * boundary.cpp — statuses from exceptions, their report as PostgreSQL
 * errors, and C++ objects owned by memory contexts (boundary.h).
 */
#include "boundary/boundary.h"

#include <cstring>
#include <exception>
#include <new>

#include "core/types.h"

extern "C" {
#include "utils/memutils.h"
}

/* ---- status ---- */

void
cagra_status_ok(CagraStatus *st)
{
	memset(st, 0, sizeof(*st));
	st->ok = true;
}

static int
cagra_sqlstate_of(cagra::ErrorCode code)
{
	switch (code)
	{
		case cagra::ErrorCode::InvalidParameter:
			return ERRCODE_INVALID_PARAMETER_VALUE;
		case cagra::ErrorCode::InvalidData:
			return ERRCODE_DATA_EXCEPTION;
		case cagra::ErrorCode::OutOfMemory:
			return ERRCODE_OUT_OF_MEMORY;
		case cagra::ErrorCode::Cancelled:
			return ERRCODE_QUERY_CANCELED;
		case cagra::ErrorCode::Corrupt:
			return ERRCODE_INDEX_CORRUPTED;
	}
	return ERRCODE_INTERNAL_ERROR;
}

void
cagra_status_from_current_exception(CagraStatus *st)
{
	memset(st, 0, sizeof(*st));
	st->ok = false;
	st->sqlstate = ERRCODE_INTERNAL_ERROR;
	try
	{
		throw;
	}
	catch (const CagraPgError &e)
	{
		st->edata = e.edata;
	}
	catch (const cagra::Error &e)
	{
		st->sqlstate = cagra_sqlstate_of(e.code());
		strlcpy(st->message, e.what(), sizeof(st->message));
		strlcpy(st->hint, e.hint().c_str(), sizeof(st->hint));
	}
	catch (const std::bad_alloc &)
	{
		st->sqlstate = ERRCODE_OUT_OF_MEMORY;
		strlcpy(st->message, "out of memory", sizeof(st->message));
	}
	catch (const std::exception &e)
	{
		snprintf(st->message, sizeof(st->message), "internal error in cagra: %s", e.what());
	}
	catch (...)
	{
		strlcpy(st->message, "internal error in cagra: unknown exception", sizeof(st->message));
	}
}

void
cagra_report_status(const CagraStatus *st)
{
	if (st->edata)
		ReThrowError(st->edata);
	ereport(ERROR,
			(errcode(st->sqlstate),
			 errmsg("%s", st->message),
			 st->hint[0] ? errhint("%s", st->hint) : 0));
	pg_unreachable();
}

/* ---- C++ objects owned by memory contexts ---- */

struct CagraOwner
{
	MemoryContextCallback cb;
	void	   *obj;
	void		(*destroy) (void *);
};

static void
cagra_owner_callback(void *arg)
{
	CagraOwner *owner = (CagraOwner *) arg;

	if (owner->obj)
		owner->destroy(owner->obj);
	owner->obj = NULL;
}

CagraOwner *
cagra_owner_new(MemoryContext cxt, void *obj, void (*destroy) (void *))
{
	CagraOwner *owner = (CagraOwner *) MemoryContextAllocZero(cxt, sizeof(CagraOwner));

	owner->obj = obj;
	owner->destroy = destroy;
	owner->cb.func = cagra_owner_callback;
	owner->cb.arg = owner;
	MemoryContextRegisterResetCallback(cxt, &owner->cb);
	return owner;
}

void
cagra_owner_free(CagraOwner *owner)
{
	cagra_owner_callback(owner);
}
