/*
 * boundary.h — C++ inside PostgreSQL: the one way each side of the boundary
 * is crossed (docs/architecture.md).
 *
 *  - No exception crosses into PostgreSQL code: C++ work runs inside
 *    cagra_guard(), which turns whatever it throws into a CagraStatus; the
 *    caller, in a frame without C++ objects, reports it with
 *    cagra_report_status().
 *  - A PostgreSQL error inside C++ code (a buffer read under a searcher)
 *    becomes a CagraPgError exception, unwinds the C++ frames, and is
 *    re-thrown by cagra_report_status().
 *  - C++ objects that outlive a call are tied to a memory context
 *    (CagraOwner), so an error's context reset deletes them.
 *  - Threads start with every signal blocked: PostgreSQL's handlers belong
 *    to the process's own thread.
 *
 * Used by the access method, the backend's worker client and the worker
 * process; it includes only PostgreSQL and the core library.
 */
#pragma once

extern "C" {
#include "postgres.h"
}

#include <csignal>
#include <pthread.h>
#include <thread>
#include <utility>

/* What a C++ step reports to its PostgreSQL caller instead of throwing. */
typedef struct CagraStatus
{
	bool		ok;
	int			sqlstate;		/* ERRCODE_* when !ok and edata == NULL */
	char		message[512];
	char		hint[256];
	ErrorData  *edata;			/* a PostgreSQL error caught inside C++ code */
} CagraStatus;

void		cagra_status_ok(CagraStatus *st);
/* Fill `st` from the exception being handled (call inside catch (...)). */
void		cagra_status_from_current_exception(CagraStatus *st);
/* ereport(ERROR) for a failed status; call from a frame without C++ objects. */
void		cagra_report_status(const CagraStatus *st) pg_attribute_noreturn();

/* Run fn(); false (and `st` says why) when it threw. */
template <class Fn>
static inline bool
cagra_guard(CagraStatus *st, Fn &&fn) noexcept
{
	try
	{
		fn();
		cagra_status_ok(st);
		return true;
	}
	catch (...)
	{
		cagra_status_from_current_exception(st);
		return false;
	}
}

/* cagra_guard, then an ERROR for a failure (a frame without C++ objects
 * of its own: the lambda's are gone when it reports). */
template <class Fn>
static inline void
cagra_guard_or_error(Fn &&fn)
{
	CagraStatus st;

	if (!cagra_guard(&st, std::forward<Fn>(fn)))
		cagra_report_status(&st);
}

/* A PostgreSQL error turned into a C++ exception inside C++ code. */
struct CagraPgError
{
	ErrorData  *edata;
};

/* Ties the lifetime of a C++ object to a memory context: deleted when the
 * context is reset or deleted (also on error), or earlier by cagra_owner_free. */
typedef struct CagraOwner CagraOwner;
CagraOwner *cagra_owner_new(MemoryContext cxt, void *obj, void (*destroy) (void *));
void		cagra_owner_free(CagraOwner *owner);

template <class T>
static void
cagra_delete_object(void *p)
{
	delete static_cast<T *>(p);
}

/* Every signal blocked while it lives; threads started meanwhile (and the
 * threads they start) inherit the mask. */
class CagraSignalsBlocked
{
  public:
	CagraSignalsBlocked()
	{
		sigset_t	all;

		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old_);
	}
	~CagraSignalsBlocked() { pthread_sigmask(SIG_SETMASK, &old_, NULL); }
	CagraSignalsBlocked(const CagraSignalsBlocked &) = delete;
	CagraSignalsBlocked &operator=(const CagraSignalsBlocked &) = delete;

  private:
	sigset_t	old_;
};

/* A thread running fn, started with every signal blocked (throws what
 * std::thread throws). */
template <class Fn>
static inline std::thread
cagra_start_thread(Fn &&fn)
{
	CagraSignalsBlocked blocked;

	return std::thread(std::forward<Fn>(fn));
}
