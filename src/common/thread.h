/*
 * Starting the library's own threads: one home for how they start.  Every
 * thread the library runs starts here, so none of them ever takes a signal
 * meant for the application, and each shows under its own name in top,
 * gdb and /proc.
 */
#ifndef ECT_COMMON_THREAD_H
#define ECT_COMMON_THREAD_H

#include <pthread.h>

#include <ectier/status.h>

/*
 * Start fn(arg) on a new thread with every signal blocked (the
 * application's signals go to its own threads, never to ours); the thread
 * names itself `name` (at most 15 bytes, as the kernel keeps; longer is
 * cut) before fn runs.  Returns ECT_OK, or ECT_ERR_NO_MEMORY /
 * ECT_ERR_IO (the system refused a thread: EAGAIN, a limit) with a message
 * naming the thread; no thread then.
 * Thread safety: safe.
 */
ECT_MUST_CHECK ect_status_t ect__thread_start(pthread_t *thread, void *(*fn)(void *), void *arg,
                                              const char *name);

#endif /* ECT_COMMON_THREAD_H */
