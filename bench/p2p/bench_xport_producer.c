/*
 * `ectier bench xport`'s entries and producer process (see
 * bench_xport_producer.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_xport_producer.h"
#include "cli_io.h"
#include "p2p/transport.h"
#include "p2p/xport_internal.h"

/* ---- the entries ----------------------------------------------------------------- */

uint64_t
ect_bench_xport_pattern(uint64_t block, uint64_t word)
{
    uint64_t x = (block + 1) * 0x9E3779B97F4A7C15ull ^ (word + 1) * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return x | 0x0101010101010101ull;
}

void
ect_bench_xport_region_params(ect_region_params_t *p, const char *name)
{
    memset(p, 0, sizeof(*p));
    p->name = name;
    p->geometry = (ect_geometry_t){.hidden_dim = BLOCK / 2,
                                   .dtype = ECT_DTYPE_BF16,
                                   .block_size_bytes = BLOCK,
                                   .num_blocks = REGION_BLOCKS};
}

void
ect_bench_xport_shape_run(size_t mib, unsigned frags, unsigned i, ect_run_t *remote,
                          ect_run_t *local)
{
    uint64_t n_blocks = ((uint64_t)mib << 20) / BLOCK;
    uint64_t per = n_blocks / frags, extra = n_blocks % frags, gap = frags > 1 ? 3 : 0;
    uint64_t count = per + (i < extra);
    unsigned rslot = (i * 7) % frags, lslot = (i * 5 + 3) % frags;
    *remote = (ect_run_t){rslot * (per + gap), count};
    *local = (ect_run_t){lslot * (per + gap), count};
}

void
ect_bench_xport_make_shape(struct shape *s, size_t mib, unsigned frags)
{
    s->mib = mib;
    s->frags = frags;
    s->n_blocks = ((uint64_t)mib << 20) / BLOCK;
    uint64_t k = 0;
    for (unsigned i = 0; i < frags; i++) {
        ect_run_t remote;
        ect_bench_xport_shape_run(mib, frags, i, &remote, &s->local[i]);
        for (uint64_t b = 0; b < remote.count; b++)
            s->remote[k++] = remote.first + b;
    }
    s->n_local = frags;
}

/* ---- the producer ---------------------------------------------------------------- */

/* The bench producer's grant table: the shape a hash names, moved by its
 * slot, every time.  Each claim gets runs of its own, freed when it is
 * finished: the stream server calls claim and finish on any of its
 * threads, and concurrent readers' grants are live at once. */
static ect_stream_status_t
bench_claim(void *user, const char *session, const char *hash, const uint8_t *token,
            uint64_t expect, ect_xport_grant_view_t *view_p, void **grant_p)
{
    (void)user, (void)session, (void)token;
    unsigned mib, fr;
    unsigned long long slot;
    if (sscanf(hash, "shape-%u-%u-%llu", &mib, &fr, &slot) != 3 || fr == 0 || fr > MAX_FRAGS ||
        mib == 0 || mib > 32 || slot >= REGION_BLOCKS)
        return ECT_STREAM_DENIED;
    if (expect != ((uint64_t)mib << 20) / BLOCK * BLOCK)
        return ECT_STREAM_SIZE_MISMATCH;
    ect_run_t *runs = malloc(fr * sizeof(*runs));
    if (runs == NULL)
        return ECT_STREAM_DENIED;
    size_t n = 0;
    for (unsigned i = 0; i < fr; i++) {
        ect_run_t r, local;
        ect_bench_xport_shape_run(mib, fr, i, &r, &local);
        r.first += slot;
        if (r.first + r.count > REGION_BLOCKS) {
            free(runs);
            return ECT_STREAM_DENIED;
        }
        if (n > 0 && runs[n - 1].first + runs[n - 1].count == r.first)
            runs[n - 1].count += r.count;
        else
            runs[n++] = r;
    }
    *view_p = (ect_xport_grant_view_t){runs, n, expect};
    *grant_p = runs;
    return ECT_STREAM_OK;
}

static void
bench_finish(void *user, void *grant, int sent)
{
    (void)user, (void)sent;
    free(grant);
}

static void
producer_main(int up, int down, const char *name, int serve_tcp, int serve_same_host)
{
    ect_region_params_t rp;
    ect_bench_xport_region_params(&rp, name);
    ect_region_t *region = NULL;
    ect_xport_server_t *server = NULL;
    ect_xport_grant_ops_t ops = {.claim = bench_claim, .finish = bench_finish};
    int st = ect_region_open(&rp, &region);
    if (st == ECT_OK) {
        for (uint64_t b = 0; b < REGION_BLOCKS; b++) {
            uint8_t *p = ect_region_block_ptr(region, b);
            for (uint64_t w = 0; w < BLOCK / 8; w++) {
                uint64_t v = ect_bench_xport_pattern(b, w);
                memcpy(p + 8 * w, &v, 8);
            }
        }
        ect_xport_server_params_t sp = {.data = ect_region_data(region),
                                        .block_size = BLOCK,
                                        .num_blocks = REGION_BLOCKS,
                                        .region_path = ect_region_path(region),
                                        .data_offset = ect_region_data_offset(region),
                                        .bind_host = "127.0.0.1",
                                        .send_timeout_ns = 20ull * 1000 * 1000 * 1000,
                                        .grants = &ops,
                                        .serve_tcp = serve_tcp,
                                        .serve_same_host = serve_same_host,
                                        .touch_pages = 1}; /* prefault's default */
        st = ect__xport_server_start(&sp, &server);
    }
    if (st != ECT_OK)
        fprintf(stderr, "bench xport: producer: %s\n", ect_last_error());
    size_t alen = 0;
    const void *agent = st == ECT_OK ? ect__xport_server_agent_metadata(server, &alen) : NULL;
    const char *path = region != NULL ? ect_region_path(region) : "";
    uint32_t lens[2] = {(uint32_t)alen, (uint32_t)strlen(path)};
    if (ect_cli_write_full(up, &st, sizeof(st)) || ect_cli_write_full(up, lens, sizeof(lens)) ||
        ect_cli_write_full(up, agent, alen) || ect_cli_write_full(up, path, lens[1]))
        _exit(3);
    close(up);
    char c;
    while (read(down, &c, 1) < 0 && errno == EINTR)
        ;
    ect__xport_server_stop(server);
    ect_region_close(region);
    _exit(0);
}

int
ect_bench_xport_producer_start(struct producer *p, int serve_tcp, int serve_same_host)
{
    static unsigned counter;
    memset(p, 0, sizeof(*p));
    snprintf(p->region_name, sizeof(p->region_name), "ectier_bench_xport_%d_%u", (int)getpid(),
             counter++);
    int up[2], down[2];
    if (pipe(up) != 0 || pipe(down) != 0) {
        perror("bench xport: pipe");
        return 1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("bench xport: fork");
        return 1;
    }
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        producer_main(up[1], down[0], p->region_name, serve_tcp, serve_same_host);
    }
    close(up[1]);
    close(down[0]);
    p->pid = pid;
    p->cmd_fd = down[1];
    int st;
    uint32_t lens[2];
    int rc = 1;
    if (ect_cli_read_full(up[0], &st, sizeof(st)) || st != ECT_OK ||
        ect_cli_read_full(up[0], lens, sizeof(lens)) || lens[1] >= sizeof(p->path))
        goto close_up;
    p->agent = malloc(lens[0] ? lens[0] : 1);
    if (p->agent == NULL || ect_cli_read_full(up[0], p->agent, lens[0]) ||
        ect_cli_read_full(up[0], p->path, lens[1]))
        goto close_up;
    p->agent_len = lens[0];
    rc = 0;
close_up:
    close(up[0]);
    if (rc != 0)
        fprintf(stderr, "bench xport: the producer did not start\n");
    return rc;
}

void
ect_bench_xport_producer_stop(struct producer *p)
{
    if (p->pid > 0) {
        if (ect_cli_write_full(p->cmd_fd, "q", 1) != 0)
            kill(p->pid, SIGKILL);
        close(p->cmd_fd);
        waitpid(p->pid, NULL, 0);
    }
    free(p->agent);
}
