/*
 * search_pool.cpp — the worker's search threads (search_pool.h).  A job
 * goes to a free thread; when it is done the thread queues it as finished
 * and writes to an eventfd, which the main thread's wait set watches.  Jobs
 * started on the device go to the collector thread, which polls for their
 * answers while any is out and finishes them the same way.  Threads start
 * with every signal blocked: PostgreSQL's handlers belong to the main
 * thread.
 */
#include "worker/search_pool.h"

#include "boundary/boundary.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <poll.h>
#include <sys/eventfd.h>
#include <thread>
#include <unistd.h>

extern "C" {
#include "storage/ipc.h"
}

namespace
{

struct Pool
{
	std::mutex	mutex;
	std::condition_variable wake;
	std::deque<CagraSearchJob *> waiting;	/* submitted, not yet running */
	std::deque<CagraSearchJob *> finished;
	std::vector<std::thread> threads;
	int			in_flight = 0;
	int			filtered_in_flight = 0; /* of in_flight */
	int			started_in_flight = 0;	/* of in_flight: the collector's */
	int			batch_limit = 0;	/* shared batches at once */
	int			filtered_limit = 0;	/* filtered searches at once */
	std::atomic<bool> stopping{false};
	int			event_fd = -1;
	CagraSearchJobRunner run = nullptr;
	/* the collector thread and the started jobs it has not yet finished */
	std::thread collector;
	std::condition_variable collector_wake;
	std::atomic<int> out{0};
	CagraStartedCollector collect = nullptr;
};

Pool	   *pool = nullptr;

void
signal_finished(void)
{
	uint64_t	one = 1;

	/* a full counter still leaves the descriptor readable: nothing is lost */
	(void) !write(pool->event_fd, &one, sizeof(one));
}

void
thread_main(void)
{
	CagraSearchLane lane;
	std::unique_lock<std::mutex> lock(pool->mutex);

	for (;;)
	{
		pool->wake.wait(lock, [] { return pool->stopping || !pool->waiting.empty(); });
		if (pool->stopping)
			return;

		CagraSearchJob *job = pool->waiting.front();

		pool->waiting.pop_front();
		lock.unlock();
		pool->run(job, &lane);	/* noexcept */
		lock.lock();
		pool->finished.push_back(job);
		signal_finished();
	}
}

/* The collector's wait between polls that found nothing: it spins for the
 * length of a short walk after the last answer, then yields its core, then
 * sleeps, so that a slow search leaves the host's cores to the backends. */
void
collector_pause(std::chrono::steady_clock::duration idle)
{
	using namespace std::chrono;

	if (idle < microseconds(50))
	{
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
	}
	else if (idle < milliseconds(1))
		std::this_thread::yield();
	else
		std::this_thread::sleep_for(microseconds(20));
}

void
collector_main(void)
{
	std::vector<CagraSearchJob *> finished;
	std::unique_lock<std::mutex> lock(pool->mutex);

	finished.reserve(1024);		/* its turns allocate nothing */

	for (;;)
	{
		pool->collector_wake.wait(lock, [] { return pool->stopping || pool->out > 0; });
		if (pool->stopping)
			return;
		lock.unlock();

		auto		last = std::chrono::steady_clock::now();

		while (!pool->stopping && pool->out > 0)
		{
			finished.clear();
			pool->collect(finished);	/* noexcept */
			if (finished.empty())
			{
				collector_pause(std::chrono::steady_clock::now() - last);
				continue;
			}
			last = std::chrono::steady_clock::now();
			lock.lock();
			for (CagraSearchJob *job : finished)
				pool->finished.push_back(job);
			pool->out -= (int) finished.size();
			signal_finished();
			lock.unlock();
		}
		lock.lock();
	}
}

/* Before shared memory goes: running searches write into mapped segments. */
void
stop_pool(int code, Datum arg)
{
	{
		std::lock_guard<std::mutex> lock(pool->mutex);

		pool->stopping = true;
	}
	pool->wake.notify_all();
	pool->collector_wake.notify_all();
	for (auto &t : pool->threads)
		t.join();
	pool->threads.clear();
	if (pool->collector.joinable())
		pool->collector.join();
}

}							/* namespace */

int
cagra_search_pool_start(int batch_threads, int filtered_threads, CagraSearchJobRunner run,
						CagraStartedCollector collect) noexcept
{
	int			threads = batch_threads + filtered_threads;

	try
	{
		pool = new Pool();
		pool->run = run;
		pool->batch_limit = batch_threads;
		pool->filtered_limit = filtered_threads > 0 ? filtered_threads : batch_threads;
		pool->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (pool->event_fd < 0)
			return 0;

		try
		{
			for (int i = 0; i < threads; i++)
				pool->threads.push_back(cagra_start_thread(thread_main));
			if (collect && !pool->threads.empty())
			{
				pool->collector = cagra_start_thread(collector_main);
				pool->collect = collect;
			}
		}
		catch (...)
		{
			/* fewer threads than asked for still serve */
		}
	}
	catch (...)
	{
		return 0;
	}
	if (!pool->threads.empty())
		before_shmem_exit(stop_pool, (Datum) 0);
	return (int) pool->threads.size();
}

int
cagra_search_pool_fd(void)
{
	return pool->event_fd;
}

bool
cagra_search_pool_has_room(bool filtered)
{
	if (!pool)
		return false;

	int			on_threads = pool->in_flight - pool->started_in_flight;

	if (on_threads >= (int) pool->threads.size())
		return false;
	return filtered ? pool->filtered_in_flight < pool->filtered_limit
		: on_threads - pool->filtered_in_flight < pool->batch_limit;
}

void
cagra_search_pool_submit(CagraSearchJob *job)
{
	{
		std::lock_guard<std::mutex> lock(pool->mutex);

		pool->waiting.push_back(job);
		pool->in_flight++;
		pool->filtered_in_flight += job->filtered;
	}
	pool->wake.notify_one();
}

bool
cagra_search_pool_collects(void)
{
	return pool && pool->collect;
}

void
cagra_search_pool_track_started(void)
{
	{
		std::lock_guard<std::mutex> lock(pool->mutex);

		pool->in_flight++;
		pool->started_in_flight++;
		pool->out++;
	}
	pool->collector_wake.notify_one();
}

CagraSearchJob *
cagra_search_pool_take_finished(void)
{
	std::lock_guard<std::mutex> lock(pool->mutex);
	uint64_t	count;

	(void) !read(pool->event_fd, &count, sizeof(count));
	if (pool->finished.empty())
		return nullptr;

	CagraSearchJob *job = pool->finished.front();

	pool->finished.pop_front();
	pool->in_flight--;
	pool->filtered_in_flight -= job->filtered;
	pool->started_in_flight -= job->started_at != 0;
	if (!pool->finished.empty())
		signal_finished();		/* the read above reset the descriptor */
	return job;
}

int
cagra_search_pool_in_flight(void)
{
	return pool ? pool->in_flight : 0;
}

int
cagra_search_pool_batches_in_flight(void)
{
	return pool ? pool->in_flight - pool->filtered_in_flight - pool->started_in_flight : 0;
}

void
cagra_search_pool_wait(void)
{
	std::unique_lock<std::mutex> lock(pool->mutex);

	if (pool->in_flight == 0 || !pool->finished.empty())
		return;

	/* the finished queue grows under this mutex: poll it after each wake */
	while (pool->finished.empty())
	{
		lock.unlock();

		struct pollfd pfd = {pool->event_fd, POLLIN, 0};

		(void) poll(&pfd, 1, -1);
		lock.lock();
	}
}
