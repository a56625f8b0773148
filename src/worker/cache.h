/*
 * cache.h — the worker's index copies, keyed by database, index,
 * relfilenode and generation, evicted least recently used first within
 * cagra.gpu_memory_limit per device, and the uploads in progress.
 * Worker process only.
 */
#pragma once

#include <memory>

#include "worker/engine.h"

/* The copy of the key's index that a search may use (touching it), or NULL. */
CagraIndexCopy *cagra_cache_lookup(const CagraIndexKey &key);

/* What to answer a search without a usable copy: NEED_INDEX (and the asker
 * becomes the uploader), LOADING or TOO_LARGE. */
CagraReply	cagra_cache_miss_reply(const CagraIndexKey &key, pid_t asker, char *msg, size_t msglen);

/* One UPLOAD chunk; the last one loads the copy. */
CagraReply	cagra_cache_upload(const CagraIndexKey &key, pid_t owner, CagraUploadPayload *p,
							   char *msg, size_t msglen) noexcept;

/* An UPDATE: the copy takes what inserts changed (OK), or does not
 * (NEED_INDEX: moved on, or due for a whole upload; msg says why); an
 * update that fails midway frees the copy. */
CagraReply	cagra_cache_update(const CagraIndexKey &key, CagraUpdatePayload *p, char *msg, size_t msglen) noexcept;

/* Per-device byte limit from cagra.gpu_memory_limit. */
uint64_t	cagra_cache_limit(void);

/* Free every cached copy (a build needs the device memory); returns how
 * many there were. */
int			cagra_cache_clear(void);

/* Free the copies of indexes whose file is gone: dropped (a table, schema
 * or database with them), or given a new file (REINDEX, TRUNCATE, VACUUM
 * FULL), here or, on a standby, by replay.  `wait_for_searches` is called
 * first when there is any, so that no search still uses one.  Returns how
 * many were freed. */
int			cagra_cache_free_dropped(void (*wait_for_searches) (void));

/* Forget which indexes were too large (the limit may have changed). */
void		cagra_cache_forget_limits(void);

/* Copy the cache list and memory figures into shared memory for
 * cagra_status: at once when a copy came, went or changed; when only the
 * copies' search counts moved, at most every CAGRA_PUBLISH_INTERVAL_MS.
 * True while such counts wait: call again within that interval. */
#define CAGRA_PUBLISH_INTERVAL_MS 50
bool		cagra_cache_publish(void);
