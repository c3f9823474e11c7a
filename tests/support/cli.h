/*
 * Running the built `ectier` binary (ECT_CLI_PATH) from a test: its stdout
 * and stderr go to memfds (nothing is left on disk), it is killed when it
 * outlives its deadline, and the caller gets the exit status, both outputs
 * and how long it ran.  Used by the CLI tests that check what a person sees
 * (tests/integration/test_cli_*.c, test_demo.c).
 */
#ifndef ECT_TESTS_SUPPORT_CLI_H
#define ECT_TESTS_SUPPORT_CLI_H

#include <stdio.h>
#include <sys/types.h>

#include "harness.h"

struct ts_cli_run {
    int rc;      /* exit status, 128 + signal, or -1 when killed at the deadline */
    double secs; /* how long it ran */
    char *out;   /* stdout, NUL-terminated (malloc'd) */
    char *err;   /* stderr, likewise */
};

/* Run argv (argv[0] is the program; NULL-terminated) with at most
 * deadline_s seconds; sh 1 runs argv[0] as a /bin/sh command line instead.
 * Fills *r (free with ts_cli_run_free); fails the case if it cannot run. */
void ts_cli_exec(struct ts_cli_run *r, double deadline_s, int sh, const char *const *argv);

/* Run `ectier ARGS...` (NULL-terminated, at most 62) within deadline_s
 * seconds, as ts_cli_exec. */
void ts_cli_run(struct ts_cli_run *r, double deadline_s, const char *arg0, ...);

/* Start `ectier ARGS...` (argv: "ectier" then the arguments, NULL-terminated)
 * in the background, as a child that dies with the test (PR_SET_PDEATHSIG):
 * *out_p reads its stdout, *err_p (when err_p is not NULL) its stderr, which
 * is otherwise the test's.  For the long-running commands (`ectier
 * producer`) whose output a test reads as it comes.  Returns the child's
 * pid; fails the case if it cannot start. */
pid_t ts_cli_spawn(const char *const *argv, FILE **out_p, FILE **err_p);

/* Free the outputs of a run (r itself is the caller's). */
void ts_cli_run_free(struct ts_cli_run *r);

#define CHECK_CLI_RC(r, want)                                                                      \
    CHECK_MSG((r)->rc == (want), "exit %d, expected %d\nstdout: %s\nstderr: %s", (r)->rc, (want),  \
              (r)->out, (r)->err)

#endif /* ECT_TESTS_SUPPORT_CLI_H */
