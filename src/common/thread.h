/*
 * Starting the library's own threads: one home for how they start.
 */
#ifndef ECT_COMMON_THREAD_H
#define ECT_COMMON_THREAD_H

#include <pthread.h>

/*
 * Start fn(arg) on a new thread with every signal blocked (the
 * application's signals go to its own threads, never to ours); the thread
 * names itself `name` (at most 15 bytes, as the kernel keeps; longer is
 * cut) before fn runs.  Returns 0, or an error number: ENOMEM, or
 * pthread_create's (no thread then).
 * Thread safety: safe.
 */
int ect__thread_start(pthread_t *thread, void *(*fn)(void *), void *arg, const char *name);

#endif /* ECT_COMMON_THREAD_H */
