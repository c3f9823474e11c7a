/*
 * Starting the library's own threads (see thread.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"
#include "common/thread.h"

struct start {
    void *(*fn)(void *);
    void *arg;
    char name[16];
};

/* The new thread names itself before it runs fn, so nothing it does is
 * seen under the creator's name (the creator names it too, so the name is
 * there when ect__thread_start returns, whether or not it ran yet). */
static void *
trampoline(void *p)
{
    struct start st = *(struct start *)p;
    ect__free(p);
    pthread_setname_np(pthread_self(), st.name);
    return st.fn(st.arg);
}

ect_status_t
ect__thread_start(pthread_t *thread, void *(*fn)(void *), void *arg, const char *name)
{
    struct start *st = ect__malloc(sizeof(*st));
    if (st == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "cannot start thread %s: out of memory", name);
    st->fn = fn;
    st->arg = arg;
    snprintf(st->name, sizeof(st->name), "%s", name);
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    char short_name[sizeof(st->name)];
    memcpy(short_name, st->name, sizeof(short_name));
    int rc = pthread_create(thread, NULL, trampoline, st);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    if (rc == 0)
        pthread_setname_np(*thread, short_name);
    if (rc != 0) {
        ect__free(st);
        errno = rc;
        return ect__error_errno(rc == ENOMEM ? ECT_ERR_NO_MEMORY : ECT_ERR_IO,
                                "cannot start thread %s", name);
    }
    return ECT_OK;
}
