/*
 * `ectier bench [--json] [--plot DIR] [NAME...]`: runs the registered
 * benchmarks (all by default), and holds what they share (bench.h): figure
 * output (text, JSON lines, gnuplot charts), the copy engine's line and
 * cache-state helpers.  The CPU copy ceiling they share is in
 * copy_ceiling.c, medians in median.c.
 *
 * Under --json, stdout carries only the JSON objects, one a line; every
 * other line a benchmark prints (headers, breakdowns, notes) goes to stderr,
 * so `ectier bench --json copy > copy.jsonl` is machine-readable whatever
 * the benchmarks print.  Under --plot DIR, each benchmark that reports
 * figures with an entry size gets DIR/<bench>.dat (one block a series:
 * size in MiB, value, ceiling), DIR/<bench>.gp and, through gnuplot,
 * DIR/<bench>.png: value against entry size, solid, with its ceiling
 * dashed in the same colour beside it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "common/clock.h"
#include "copy/cpu.h"
#include "copy/ntcopy.h"
#include "ectier_build_config.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static const struct ect_bench benches[] = {
    {"cache", "cache ops at 1K vs 1M entries; runs per entry after 1M random ops", ect_bench_cache},
    {"copy", "cpu copy engine save/load of 1-32 MiB entries vs the best copy", ect_bench_copy},
    {"cuda", "CUDA copy engine: save/load vs one pinned copy; overlap with compute",
     ect_bench_cuda},
    {"region", "first copies into a region with and without pre-fault", ect_bench_region},
    {"step", "scheduler+worker save/load steps of 1-32 MiB entries vs the best copy",
     ect_bench_step},
#if ECT_HAVE_P2P
    {"control", "control-plane round trip vs bare ZeroMQ DEALER/ROUTER", ect_bench_control},
    {"session", "producer XferReq->XferAck round trip vs bare ZeroMQ; acks/s with 8 consumers",
     ect_bench_session},
    {"xport", "P2P reads of 1-32 MiB entries: the TCP stream vs bare TCP, same-host vs memcpy",
     ect_bench_xport},
#endif
    {NULL, NULL, NULL},
};

/* ---- figure output ---------------------------------------------------------------- */

struct kept_fig {
    char *series;
    double bytes, value, ceiling;
};

static struct {
    const char *bench; /* the benchmark running now */
    FILE *json;        /* --json: the real stdout; NULL otherwise */
    const char *plot_dir;
    struct kept_fig *kept; /* --plot: this bench's figures that have a size */
    size_t n_kept, cap_kept;
    char unit[16];
} out;

static void
json_string(FILE *f, const char *s)
{
    if (s == NULL) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void
json_number(FILE *f, double v, int have)
{
    if (have)
        fprintf(f, "%.6g", v);
    else
        fputs("null", f);
}

static void
keep_for_plot(const ect_bench_fig_t *fig)
{
    if (out.plot_dir == NULL || fig->bytes <= 0)
        return;
    if (out.n_kept == out.cap_kept) {
        size_t cap = out.cap_kept ? out.cap_kept * 2 : 32;
        struct kept_fig *k = realloc(out.kept, cap * sizeof(*k));
        if (k == NULL)
            return; /* the chart misses a point; the figure itself was printed */
        out.kept = k;
        out.cap_kept = cap;
    }
    char *series = strdup(fig->series != NULL ? fig->series : fig->name);
    if (series == NULL)
        return;
    out.kept[out.n_kept++] = (struct kept_fig){
        .series = series, .bytes = fig->bytes, .value = fig->value, .ceiling = fig->ceiling};
    if (out.unit[0] == '\0' && fig->unit != NULL)
        snprintf(out.unit, sizeof(out.unit), "%s", fig->unit);
}

void
ect_bench_figure(const ect_bench_fig_t *fig)
{
    int have_ceiling = fig->ceiling > 0;
    double ratio = have_ceiling ? fig->value / fig->ceiling : 0.0;
    int have_target = fig->target > 0 && have_ceiling;
    int met = fig->lower_is_better ? ratio <= fig->target : ratio >= fig->target;
    keep_for_plot(fig);
    if (out.json != NULL) {
        FILE *f = out.json;
        fputs("{\"bench\": ", f);
        json_string(f, out.bench);
        fputs(", \"name\": ", f);
        json_string(f, fig->name);
        fputs(", \"value\": ", f);
        json_number(f, fig->value, 1);
        fputs(", \"unit\": ", f);
        json_string(f, fig->unit);
        fputs(", \"ceiling\": ", f);
        json_number(f, fig->ceiling, have_ceiling);
        fputs(", \"ceiling_is\": ", f);
        json_string(f, have_ceiling ? fig->ceiling_is : NULL);
        fputs(", \"ratio\": ", f);
        json_number(f, ratio, have_ceiling);
        fputs(", \"target\": ", f);
        json_number(f, fig->target, have_target);
        fprintf(f, ", \"better\": \"%s\"", fig->lower_is_better ? "lower" : "higher");
        fprintf(f, ", \"met\": %s", !have_target ? "null" : met ? "true" : "false");
        fputs(", \"bytes\": ", f);
        if (fig->bytes > 0)
            fprintf(f, "%.0f", fig->bytes);
        else
            fputs("null", f);
        fputs(", \"series\": ", f);
        json_string(f, fig->bytes > 0 ? (fig->series != NULL ? fig->series : fig->name) : NULL);
        fputs("}\n", f);
        fflush(f);
        return;
    }
    printf("  %-44s %10.3f %-6s", fig->name, fig->value, fig->unit);
    if (have_ceiling)
        printf(" ceiling %10.3f %-6s ratio %5.2f", fig->ceiling, fig->unit, ratio);
    if (have_target)
        printf("  (target %s%.2f%s)", fig->lower_is_better ? "<= " : "", fig->target,
               met ? "" : ", MISSED");
    if (have_ceiling && fig->ceiling_is != NULL)
        printf("  [%s]", fig->ceiling_is);
    printf("\n");
}

void
ect_bench_copy_figure(const char *name, const char *series, double gbps, double ceiling,
                      const char *ceiling_is, double bytes)
{
    ect_bench_fig_t fig = {.name = name,
                           .value = gbps,
                           .unit = "GB/s",
                           .ceiling = ceiling,
                           .ceiling_is = ceiling_is,
                           .target = 0.9,
                           .bytes = bytes,
                           .series = series};
    ect_bench_figure(&fig);
}

void
ect_bench_row(const char *what, double value, double ceiling, const char *unit, double target)
{
    ect_bench_fig_t fig = {
        .name = what, .value = value, .unit = unit, .ceiling = ceiling, .target = target};
    ect_bench_figure(&fig);
}

static int
cmp_kept(const void *a, const void *b)
{
    const struct kept_fig *x = a, *y = b;
    int c = strcmp(x->series, y->series);
    return c != 0 ? c : (x->bytes > y->bytes) - (x->bytes < y->bytes);
}

static void
drop_kept(void)
{
    for (size_t i = 0; i < out.n_kept; i++)
        free(out.kept[i].series);
    out.n_kept = 0;
    out.unit[0] = '\0';
}

static int
write_plot_files(const char *dir, const char *bench, char *png, size_t png_len, char *gp,
                 size_t gp_len)
{
    char dat[4096];
    snprintf(dat, sizeof(dat), "%s/%s.dat", dir, bench);
    snprintf(gp, gp_len, "%s/%s.gp", dir, bench);
    snprintf(png, png_len, "%s/%s.png", dir, bench);
    FILE *d = fopen(dat, "w"), *g = fopen(gp, "w");
    if (d == NULL || g == NULL) {
        fprintf(stderr, "ectier bench --plot: cannot write %s: %s\n", d == NULL ? dat : gp,
                strerror(errno));
        if (d != NULL)
            fclose(d);
        if (g != NULL)
            fclose(g);
        return -1;
    }
    qsort(out.kept, out.n_kept, sizeof(*out.kept), cmp_kept);
    fprintf(g,
            "# ectier bench %s: written by `ectier bench --plot`; run with gnuplot\n"
            "set terminal pngcairo size 1100,650 noenhanced font \",10\"\n"
            "set output '%s'\n"
            "set title 'ectier bench %s: %s against entry size (solid), its ceiling (dashed)'\n"
            "set xlabel 'entry size (MiB)'\nset ylabel '%s'\n"
            "set logscale x 2\nset grid\nset key outside right top\nset yrange [0:*]\n",
            bench, png, bench, out.unit, out.unit);
    fprintf(g, "plot ");
    size_t block = 0;
    for (size_t i = 0; i < out.n_kept;) {
        size_t j = i;
        int has_ceiling = 0;
        while (j < out.n_kept && strcmp(out.kept[j].series, out.kept[i].series) == 0) {
            const struct kept_fig *k = &out.kept[j];
            fprintf(d, "%.6g %.6g %.6g\n", k->bytes / (1 << 20), k->value,
                    k->ceiling > 0 ? k->ceiling : 0.0 / 0.0);
            has_ceiling |= k->ceiling > 0;
            j++;
        }
        fprintf(d, "\n\n");
        char title[256];
        snprintf(title, sizeof(title), "%s", out.kept[i].series);
        for (char *p = title; *p != '\0'; p++)
            if (*p == '\'')
                *p = '"';
        fprintf(g, "%s'%s/%s.dat' index %zu using 1:2 with linespoints lc %zu lw 2 pt 7 title '%s'",
                block > 0 ? ", \\\n     " : "", dir, bench, block, block + 1, title);
        if (has_ceiling)
            fprintf(g,
                    ", \\\n     '%s/%s.dat' index %zu using 1:3 with linespoints lc %zu dt 2 pt 6 "
                    "title '%s: ceiling'",
                    dir, bench, block, block + 1, title);
        block++;
        i = j;
    }
    fprintf(g, "\n");
    int bad = ferror(d) || ferror(g);
    bad |= fclose(d) != 0;
    bad |= fclose(g) != 0;
    if (bad) {
        fprintf(stderr, "ectier bench --plot: writing %s or %s failed\n", dat, gp);
        return -1;
    }
    return 0;
}

/* Run gnuplot on the script.  0 done; 1 gnuplot missing; -1 it failed. */
static int
run_gnuplot(const char *gp)
{
    char *const argv[] = {"gnuplot", (char *)gp, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    /* Its messages go to our stderr; under --json stdout is the JSON. */
    posix_spawn_file_actions_adddup2(&fa, 2, 1);
    pid_t pid;
    int rc = posix_spawnp(&pid, "gnuplot", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc == ENOENT)
        return 1;
    if (rc != 0) {
        fprintf(stderr, "ectier bench --plot: cannot run gnuplot: %s\n", strerror(rc));
        return -1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* After a benchmark: its chart, if it reported figures with a size.
 * Returns 0, 1 when gnuplot is missing, -1 on failure. */
static int
plot_bench(const char *bench)
{
    if (out.plot_dir == NULL)
        return 0;
    if (out.n_kept == 0) {
        fprintf(stderr,
                "ectier bench --plot: %s reports no figure against an entry size; no "
                "chart\n",
                bench);
        return 0;
    }
    char png[4096], gp[4096];
    int rc = write_plot_files(out.plot_dir, bench, png, sizeof(png), gp, sizeof(gp));
    drop_kept();
    if (rc != 0)
        return -1;
    rc = run_gnuplot(gp);
    if (rc == 0)
        fprintf(stderr, "ectier bench --plot: wrote %s\n", png);
    else if (rc < 0)
        fprintf(stderr, "ectier bench --plot: gnuplot failed on %s\n", gp);
    return rc;
}

/* ---- the copy engine's line ------------------------------------------------------------ */

/* "<before>X us<after> (mean of n)", X the mean of n samples that took ns
 * in all, with `decimals` decimals; nothing when n is 0. */
static void
print_mean_us(const char *before, const char *after, int decimals, uint64_t ns, uint64_t n)
{
    if (n > 0)
        printf("%s%.*f us%s (mean of %llu)", before, decimals, (double)ns / 1e3 / (double)n, after,
               (unsigned long long)n);
}

void
ect_bench_copy_engine_line(const char *indent, const struct ect__copy_cpu_stats *a,
                           const struct ect__copy_cpu_stats *z)
{
    uint64_t woken = z->handoffs_woken - a->handoffs_woken;
    uint64_t polling = z->handoffs_polling - a->handoffs_polling;
    printf("%scopy engine: pieces by copy threads %llu, by the waiting caller %llu; %llu "
           "batches copied inside submit (%llu of them by the learned choice, which handed "
           "off %llu); %llu wake-ups",
           indent, (unsigned long long)(z->pieces_by_threads - a->pieces_by_threads),
           (unsigned long long)(z->pieces_by_waiters - a->pieces_by_waiters),
           (unsigned long long)(z->batches_inline - a->batches_inline),
           (unsigned long long)(z->learned_inline - a->learned_inline),
           (unsigned long long)(z->learned_handoffs - a->learned_handoffs),
           (unsigned long long)(z->wakeups - a->wakeups));
    uint64_t wakeups = z->wakeups - a->wakeups;
    if (wakeups > 0)
        printf(" (the submitter spent %.1f us in each)",
               (double)(z->wake_signal_ns - a->wake_signal_ns) / 1e3 / (double)wakeups);
    print_mean_us("; a woken copy thread took its first piece ", " after submit", 1,
                  z->handoff_woken_ns - a->handoff_woken_ns, woken);
    print_mean_us("; a polling one ", " after", 1, z->handoff_polling_ns - a->handoff_polling_ns,
                  polling);
    /* Where a handed-off batch's time goes beside its pieces (cpu.h). */
    print_mean_us("; a handed-off batch landed ", " after submit", 1,
                  z->handed_landed_ns - a->handed_landed_ns, z->handed_landed - a->handed_landed);
    print_mean_us(", its waiter took a first piece ", " after submit", 1,
                  z->waiter_first_piece_ns - a->waiter_first_piece_ns,
                  z->waiter_first_pieces - a->waiter_first_pieces);
    print_mean_us(" and saw it landed ", " after the last byte", 1,
                  z->waiter_after_landing_ns - a->waiter_after_landing_ns,
                  z->waiters_after_landing - a->waiters_after_landing);
    print_mean_us("; a copier went from one piece to the next in ", "", 2,
                  z->piece_gap_ns - a->piece_gap_ns, z->piece_gaps - a->piece_gaps);
    uint64_t saves = z->saves - a->saves, saves_nt = z->saves_nt - a->saves_nt;
    uint64_t nt = z->batches_nt - a->batches_nt;
    for (int d = 0; d < 2; d++) {
        uint64_t ns = z->timed_piece_ns[d] - a->timed_piece_ns[d];
        if (ns > 0)
            printf("; a copier copied its %s pieces at %.1f GB/s", d == 0 ? "save" : "load",
                   (double)(z->timed_piece_bytes[d] - a->timed_piece_bytes[d]) / (double)ns);
    }
    printf("; non-temporal stores for %llu of %llu saves, %llu of %llu loads; the engine's "
           "lock found held %llu times\n",
           (unsigned long long)saves_nt, (unsigned long long)saves,
           (unsigned long long)(nt - saves_nt),
           (unsigned long long)(z->batches - a->batches - saves),
           (unsigned long long)(z->lock_waits - a->lock_waits));
}

/* ---- cache state ---------------------------------------------------------------------- */

#if defined(__x86_64__)
__attribute__((target("clflushopt"))) static void
flush_opt(const char *p, const char *end)
{
    for (; p < end; p += 64)
        _mm_clflushopt((void *)p);
}

void
ect_bench_cold(const void *p, size_t len)
{
    if (len == 0)
        return;
    const char *c = (const char *)((uintptr_t)p & ~(uintptr_t)63), *end = (const char *)p + len;
    /* clflushopt is weakly ordered and ~15x faster than clflush here; the
     * fence completes it before the timed copy. */
    /* CPUID directly: clang 14's __builtin_cpu_supports does not know
     * "clflushopt". */
    if (ect__cpu_leaf7_ebx_has(23))
        flush_opt(c, end);
    else
        for (; c < end; c += 64)
            _mm_clflush(c);
    _mm_mfence();
}

int
ect_bench_cold_works(void)
{
    return 1;
}
#else
void
ect_bench_cold(const void *p, size_t len)
{
    (void)p;
    (void)len;
}

int
ect_bench_cold_works(void)
{
    return 0;
}
#endif

const char *
ect_bench_cold_describe(void)
{
    return ect_bench_cold_works() ? "evicted from the caches (clflushopt)"
                                  : "warm (no cache flush here)";
}

void
ect_bench_warm(const void *p, size_t len)
{
    const volatile unsigned char *c = p;
    unsigned char x = 0;
    for (size_t i = 0; i < len; i += 64)
        x ^= c[i];
    if (len > 0)
        x ^= c[len - 1];
    __asm__ volatile("" : : "r"(x));
}

int
ect_bench_engine_stats(const void *engine, struct ect__copy_cpu_stats *st)
{
    return ect__copy_cpu_stats((ect_copy_engine_t *)engine, st) != ECT_OK;
}

int
ect_bench_wait_copy_threads_asleep(ect_bench_copy_stats_fn stats, const void *arg,
                                   const char *bench)
{
    uint64_t give_up = ect__now_ns() + 1000000000u; /* a copy thread that never sleeps */
    for (;;) {
        struct ect__copy_cpu_stats st;
        if (stats(arg, &st) != 0) {
            fprintf(stderr, "bench %s: no copy engine counters: %s\n", bench, ect_last_error());
            return 1;
        }
        if (st.threads_asleep == st.threads)
            return 0;
        if (ect__now_ns() > give_up) {
            fprintf(stderr,
                    "bench %s: %" PRIu64 " of %" PRIu64
                    " copy threads still awake 1 s after their last batch\n",
                    bench, st.threads - st.threads_asleep, st.threads);
            return 1;
        }
        sched_yield();
    }
}

int
ect_bench_rest_copy_threads(ect_bench_copy_stats_fn stats, const void *arg, const char *bench)
{
    if (stats != NULL && ect_bench_wait_copy_threads_asleep(stats, arg, bench) != 0)
        return 1;
    uint64_t until = ect__now_ns() + ECT_BENCH_ASLEEP_MIN_NS;
    while (ect__now_ns() < until)
        ;
    return 0;
}

/* ---- the command ------------------------------------------------------------------------ */

/* `--selftest`: a fixed set of figures through the same output path (text,
 * --json, --plot), measuring nothing, so tests can check the output's shape
 * without running a benchmark.  Covers: no ceiling, a met and a missed
 * target, a target the ratio must stay under, a name that needs JSON
 * escaping, two series with sizes. */
static int
selftest(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("  fixed figures for tests; nothing is measured\n");
    ect_bench_row("no ceiling", 2.5, 0, "us", 0);
    ect_bench_row("quote \" backslash \\ tab \t", 1, 2, "GB/s", 0);
    ect_bench_figure(&(ect_bench_fig_t){.name = "a round trip, lower is better",
                                        .value = 12,
                                        .unit = "us",
                                        .ceiling = 10,
                                        .target = 1.3,
                                        .lower_is_better = 1});
    static const double mib[] = {1, 8, 32};
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < 3; i++) {
            char name[64];
            snprintf(name, sizeof(name), "%s %2.0f MiB", s ? "load" : "save", mib[i]);
            ect_bench_fig_t fig = {.name = name,
                                   .value = 8 + 2 * i + s,
                                   .unit = "GB/s",
                                   .ceiling = 12 + i,
                                   .ceiling_is = "fixed",
                                   .target = 0.9,
                                   .bytes = mib[i] * (1 << 20),
                                   .series = s ? "load" : "save"};
            ect_bench_figure(&fig);
        }
    }
    return 0;
}

int
ect_cli_bench(int argc, char **argv)
{
    static const char usage[] =
        "usage: ectier bench [--json] [--plot DIR] [NAME...]\n"
        "  --json      one JSON object per figure on stdout (name, value, unit, ceiling, ratio,\n"
        "              target, ...); every other line goes to stderr\n"
        "  --plot DIR  also write DIR/<bench>.png (gnuplot): bandwidth against entry size,\n"
        "              with its ceiling beside it, per benchmark\n"
        "  --selftest  instead of the benchmarks, print fixed figures (for tests)\n";
    int rc = 0, json = 0, self = 0;
    const char *plot_dir = NULL;
    char *names[64];
    int n_names = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("%sbenchmarks:\n", usage);
            for (const struct ect_bench *b = benches; b->name != NULL; b++)
                printf("  %-12s %s\n", b->name, b->summary);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--selftest") == 0) {
            self = 1;
        } else if (strcmp(argv[i], "--plot") == 0) {
            if (i + 1 >= argc)
                return ect_cli_usage_error("bench", usage, "--plot needs a directory");
            plot_dir = argv[++i];
        } else if (argv[i][0] == '-') {
            return ect_cli_usage_error("bench", usage, "unknown option '%s'", argv[i]);
        } else {
            int known = 0;
            for (const struct ect_bench *b = benches; b->name != NULL; b++)
                known |= strcmp(argv[i], b->name) == 0;
            if (!known)
                return ect_cli_usage_error("bench", usage, "no benchmark named '%s'", argv[i]);
            if (n_names < (int)(sizeof(names) / sizeof(names[0])))
                names[n_names++] = argv[i];
        }
    }
    if (plot_dir != NULL && mkdir(plot_dir, 0777) != 0 && errno != EEXIST)
        return ect_cli_fail("bench", "--plot: cannot create %s: %s", plot_dir, strerror(errno));
    memset(&out, 0, sizeof(out));
    out.plot_dir = plot_dir;
    if (json) {
        fflush(stdout);
        int fd = dup(STDOUT_FILENO);
        if (fd < 0 || (out.json = fdopen(fd, "w")) == NULL ||
            dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
            return ect_cli_fail("bench", "--json: cannot set up the output: %s", strerror(errno));
    }
    int plot_missing = 0, plot_failed = 0;
    static const struct ect_bench self_bench = {"selftest", "fixed figures for tests", selftest};
    const struct ect_bench *todo[sizeof(benches) / sizeof(benches[0])];
    size_t n_todo = 0;
    if (self)
        todo[n_todo++] = &self_bench;
    for (const struct ect_bench *b = benches; b->name != NULL && !self; b++) {
        int wanted = n_names == 0;
        for (int i = 0; i < n_names; i++)
            if (strcmp(names[i], b->name) == 0)
                wanted = 1;
        if (wanted)
            todo[n_todo++] = b;
    }
    for (size_t k = 0; k < n_todo; k++) {
        const struct ect_bench *b = todo[k];
        printf("== bench %s: %s\n", b->name, b->summary);
        fflush(stdout);
        out.bench = b->name;
        if (b->run(1, (char *[]){(char *)b->name, NULL}) != 0)
            rc = 1;
        fflush(stdout);
        int p = plot_bench(b->name);
        plot_missing |= p > 0;
        plot_failed |= p < 0;
        drop_kept();
    }
    free(out.kept);
    if (out.json != NULL)
        fclose(out.json);
    if (plot_missing) {
        fprintf(stderr,
                "ectier bench --plot: gnuplot is not installed, so no PNG was drawn; the data "
                "and the gnuplot scripts are in %s (apt-get install gnuplot-nox, then run "
                "gnuplot on each .gp file)\n",
                plot_dir);
        rc = 1;
    }
    if (plot_failed)
        rc = 1;
    return rc;
}
