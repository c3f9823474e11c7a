/*
 * `ectier bench xport`: P2P read bandwidth of the data transports (SPEC §12:
 * the stream >= 0.9 x what the same loopback TCP carries; same-host path
 * >= 0.8 x the best copy of the same bytes).
 *
 * Producer and consumer are separate processes, both forked from this one.
 * The producer opens a real region in /dev/shm, fills it, starts a
 * transport server and serves until told to stop.  Its grant table is the
 * bench's own: it grants every request for the shape the request's mm_hash
 * names ("shape-<MiB>-<fragmented>-<slot>"), any token, so the figures are
 * the data plane's alone (the XferReq/XferAck round trip that makes a real
 * grant is `ectier bench session`).  The consumer opens its own region,
 * reads entries with the transport client, checks the first read of every
 * shape byte for byte, and sends its figures back.
 *
 * Entries are 1, 8 and 32 MiB of 7168-byte blocks: contiguous (one run on
 * both sides), and fragmented (16 runs on each side, placed out of order
 * with gaps).  Each figure is the median of the reps' bandwidths.
 *
 * Ceilings, measured in the same run:
 *   tcp        the same bytes between the same buffers (the producer's
 *              region, ours) over a bare loopback TCP connection between
 *              two processes: a 16-byte request, then one send() of the
 *              whole range, received with one recv(MSG_WAITALL) or as the
 *              stream's client receives (woken at its marks: 1 MiB at a
 *              time, the last 256 KiB on their own),
 *              both each rep, on one connection reused like ours, in the
 *              same cache state, reps alternating with the reads: the
 *              faster way's median; and `ucx_perftest -t tag_bw` over
 *              UCX_TLS=tcp (ectier 0.1's transport) for comparison.  A
 *              line per size says where a read's time goes besides the
 *              bytes: starting it, and from the last byte landed to the
 *              read seen DONE, which a bare transfer lacks: on the
 *              receiving thread, as the consumer completes a tcp read,
 *              unless the waiting thread held the lock then (the line
 *              gives the share).
 *   the seed   a 7 MiB entry in 1, 16 and 1024 runs against one UCX get per
 *              7 KiB block, the seed's transfer (ucx_perftest ucp_get of
 *              7168 bytes over UCX_TLS=tcp, many in flight, one entry's
 *              gets a run: seed_way): target >= 5x where the entry is
 *              fragmented, never slower.  Our read twice: over one
 *              connection (tcp_stripes 1), and striped over
 *              ECT_STREAM_MAX_STRIPES connections (the stream's stripes,
 *              proto/stream.h), the target's row.  Each is measured with
 *              reps alternating with the same 7 MiB over as many bare
 *              connections at once (one send() a connection, a receiving
 *              thread a stripe): no read beats the seed's way by more than
 *              its bare connections do, so their quotients are the most
 *              each row can show on the machine.
 *   same host  the best copy (bench.h: memcpy, non-temporal stores, rep
 *              movsb, on 1 thread and on as many as copy one batch in the
 *              client's engine) of the same bytes from the
 *              producer's region (mapped read-only) into ours, in the same
 *              cache state, reps alternating with the reads; and beside
 *              each contiguous row a reference row against the best copy
 *              that finds no thread polling (one thread, or helpers woken
 *              when the clock starts): what a read whose copy threads
 *              sleep until it comes could do here.  The ceiling copies
 *              right after the read, into the pages the read has just
 *              written, while a cold read writes pages last written a
 *              rotation of the region's slots before (1 and 8 MiB; 32 MiB
 *              has one slot), and on the project's VMs a page left alone
 *              costs more to write the longer it was.  So beside each
 *              contiguous cold row of 1 and 8 MiB a third reference row
 *              holds the read to the ceiling's way copying into pages as
 *              old as the read's (a paced pass after the figure,
 *              as_old_pages), a fourth to its best way that also finds no
 *              thread polling copying into such pages (the machine's
 *              limit for a read that meets both as the read does), and a
 *              line gives the ceilings and the age.
 *              Each timed read follows an untimed one (of the slot before
 *              when cold) and then 1 ms or more of the client's copy
 *              threads asleep while the reading thread spins: the
 *              client's own state as a run of reads leaves it, not as the
 *              ceiling's samples between reads do, and wake-ups as after
 *              a real pause (bench step times its steps the same way).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ectier/ectier.h>

#include "../bench.h"
#include "bench_xport_ceilings.h"
#include "bench_xport_consumer.h"
#include "bench_xport_producer.h"
#include "p2p/xport_internal.h"

/* ---- the bench --------------------------------------------------------------------------- */

static const char *const MODE_NAMES[N_MODES] = {"tcp", "same_host"};

static void
print_row(enum mode mode, size_t i, int fr, int cold, double value, double ceiling, const char *vs,
          const char *ceiling_is, double target)
{
    char what[96], series[64];
    snprintf(what, sizeof(what), "%-9s %2zu MiB %-10s %-4s vs %s", MODE_NAMES[mode], SIZES_MIB[i],
             fr ? "16 runs" : "contiguous", cold ? "cold" : "warm", vs);
    snprintf(series, sizeof(series), "%s %s %s", MODE_NAMES[mode], fr ? "16 runs" : "contiguous",
             cold ? "cold" : "warm");
    if (ceiling > 0) {
        ect_bench_fig_t fig = {.name = what,
                               .value = value,
                               .unit = "GB/s",
                               .ceiling = ceiling,
                               .ceiling_is =
                                   ceiling_is != NULL && ceiling_is[0] ? ceiling_is : NULL,
                               .target = target,
                               .bytes = (double)((uint64_t)SIZES_MIB[i] << 20),
                               .series = series};
        ect_bench_figure(&fig);
    } else {
        printf("  %-50s %10.3f %-6s (no ceiling)\n", what, value, "GB/s");
    }
}

/* A cold contiguous same-host figure against the ceilings that meet pages
 * as old as the read's (as_old_pages), and how they differ from the
 * ceiling beside the figure. */
static void
print_as_old(size_t i, double value, double ceiling, const char *way, const struct as_old *o)
{
    char what[112];
    snprintf(what, sizeof(what),
             "  ref: same_host %2zu MiB contiguous cold vs copy into as old pages", SIZES_MIB[i]);
    ect_bench_figure(&(ect_bench_fig_t){
        .name = what, .value = value, .unit = "GB/s", .ceiling = o->gbps, .ceiling_is = way});
    snprintf(what, sizeof(what),
             "  ref: same_host %2zu MiB contiguous cold vs no thread polling, into as old pages",
             SIZES_MIB[i]);
    ect_bench_figure(&(ect_bench_fig_t){.name = what,
                                        .value = value,
                                        .unit = "GB/s",
                                        .ceiling = o->asleep_gbps,
                                        .ceiling_is = o->asleep_way});
    printf("    the ceiling's way (%s) into pages as old as the cold reads' (last written %.1f ms "
           "before, median) %.1f GB/s, its best way that finds no thread polling (%s) %.1f GB/s, "
           "into pages just written (the ceiling beside the figure) %.1f GB/s\n",
           way, o->age_s * 1e3, o->gbps, o->asleep_way, o->asleep_gbps, ceiling);
}

/* Where one size's reads spent their time besides moving bytes (struct
 * read_parts), next to their whole time.  A bare transfer has no hand-off
 * to a waiting thread, and its start is only the request's send.  A tcp
 * read is seen DONE on its receiving thread unless the waiting thread held
 * the lock then (the share is printed).  A same-host read copies inside
 * its start on the calling thread, so its start is most of it. */
static void
print_read_parts(enum mode mode, size_t bytes, const struct answer *a)
{
    static const int ORDER[4][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}}; /* {cold, fr} */
    double v[3][4], on_rx[4];
    for (int k = 0; k < 4; k++) {
        int fig = FIG(ORDER[k][0], ORDER[k][1], 0);
        v[0][k] = a->fig[fig] > 0 ? (double)bytes / a->fig[fig] / 1e3 : -1;
        v[1][k] = a->parts[fig / 2].start * 1e6;
        v[2][k] = a->parts[fig / 2].handoff * 1e6;
        on_rx[k] = a->parts[fig / 2].on_rx * 100;
    }
    /* A negative part was not measured: no rep of the figure had it (a
     * same-host read that lands inside its start gets no settled callback,
     * so it has no hand-off). */
    char text[3][4][16];
    int any_none = 0;
    for (int p = 0; p < 3; p++)
        for (int k = 0; k < 4; k++) {
            if (v[p][k] < 0) {
                snprintf(text[p][k], sizeof(text[p][k]), "none");
                any_none |= p == 2;
            } else {
                snprintf(text[p][k], sizeof(text[p][k]), p == 0 ? "%.0f" : "%.1f", v[p][k]);
            }
        }
    char where[96] = "";
    if (mode == MODE_TCP)
        snprintf(where, sizeof(where),
                 " (seen on the receiving thread in %.0f / %.0f / %.0f / %.0f %% of reads)",
                 on_rx[0], on_rx[1], on_rx[2], on_rx[3]);
    printf("    a %s read's parts (medians, us; contiguous warm / cold, 16 runs warm / cold%s): "
           "in all %s / %s / %s / %s; starting it (%s) %s / %s / %s / %s; last byte landed to "
           "%s %s / %s / %s / %s%s\n",
           MODE_NAMES[mode], any_none ? "; none: every read landed inside its start" : "",
           text[0][0], text[0][1], text[0][2], text[0][3],
           mode == MODE_TCP ? "request sent, producer woken"
                            : "the batch submitted, copy threads woken or not, this thread's "
                              "pieces copied",
           text[1][0], text[1][1], text[1][2], text[1][3],
           mode == MODE_TCP ? "the read seen DONE" : "the waiting thread seeing DONE", text[2][0],
           text[2][1], text[2][2], text[2][3], where);
}

/* Runs of ucx_perftest per in-flight setting for the seed's way. */
#define SEED_TRIES 3

/*
 * The seed's way of moving the 7 MiB entry the rows compare on: one UCX get
 * per 7 KiB block, every get of the entry posted at once (ucx_perftest's
 * ucp_get over UCX_TLS=tcp, 16 or 256 in flight), one entry's gets timed a
 * run, as the seed moves an entry, after a warm-up: the faster setting's
 * median of SEED_TRIES runs, as the bare TCP ceilings take the faster way's
 * median.  Before, one run a setting timed the 400 gets that the 1 GiB rule
 * allows (2.8 MiB, not half an entry): one sample each, 0.46-0.90 GB/s
 * over 4 runs of the bench here and 0.55-1.30 on an H100 host, and a
 * shorter transfer than the seed's, whose start weighed more (256 in
 * flight, 4-5 runs each on 2026-12-07 here: 400 gets 0.40-0.44 GB/s,
 * 1 024 gets 0.40-0.53, 9 363 gets 0.48-0.69).  GB/s, or < 0.
 */
static double
seed_way(void)
{
    const size_t gets = ((size_t)SEED_MIB << 20) / BLOCK;
    static const unsigned in_flight[2] = {16, 256};
    double best = -1;
    setenv("UCX_TLS", "tcp", 1);
    for (int k = 0; k < 2; k++) {
        double t[SEED_TRIES];
        size_t n = 0;
        for (int i = 0; i < SEED_TRIES; i++) {
            double v = ect_bench_perftest("ucp_get", BLOCK, 1, in_flight[k], gets);
            if (v > 0)
                t[n++] = v;
        }
        double med = n > 0 ? ect_bench_median(t, n) : -1;
        if (med > best)
            best = med;
    }
    unsetenv("UCX_TLS");
    return best;
}

static int
run_mode(enum mode mode)
{
    struct producer p;
    struct consumer c = {.pid = -1};
    int rc = 1;
    if (ect_bench_xport_producer_start(&p, mode == MODE_TCP, mode == MODE_SAME_HOST) != 0 ||
        ect_bench_xport_consumer_start(&c, &p, mode) != 0)
        goto stop;
    /* Each size: our reads, then the ceilings right after, so both see the
     * same machine (these VMs are shared and noisy). */
    for (uint8_t i = 0; i < N_SIZES; i++) {
        static struct answer a;
        if (ect_bench_xport_consumer_measure(&c, i, &a) != 0)
            goto stop;
        const double *fig = a.fig;
        size_t bytes = (size_t)(((uint64_t)SIZES_MIB[i] << 20) / BLOCK * BLOCK);
        double tag = -1;
        if (mode == MODE_TCP) {
            if (ect_bench_perftest_available()) {
                setenv("UCX_TLS", "tcp", 1);
                tag = ect_bench_perftest("tag_bw", bytes, 1, 0, 0);
                unsetenv("UCX_TLS");
            }
        }
        for (int fr = 0; fr < 2; fr++)
            for (int cold = 0; cold < 2; cold++) {
                int same_host = mode == MODE_SAME_HOST;
                print_row(mode, i, fr, cold, fig[FIG(cold, fr, 0)], fig[FIG(cold, fr, 1)],
                          same_host ? "best copy" : "bare TCP", a.way[FIG(cold, fr, 1)],
                          same_host ? 0.8 : 0.9);
                if (same_host && !fr) {
                    /* What a read that finds no copy thread polling could do. */
                    char what[96];
                    snprintf(what, sizeof(what),
                             "  ref: same_host %2zu MiB contiguous %-4s vs no thread polling",
                             SIZES_MIB[i], cold ? "cold" : "warm");
                    int k = FIG(cold, fr, 0) / 2;
                    ect_bench_figure(&(ect_bench_fig_t){.name = what,
                                                        .value = fig[FIG(cold, fr, 0)],
                                                        .unit = "GB/s",
                                                        .ceiling = a.asleep[k],
                                                        .ceiling_is = a.asleep_way[k]});
                    if (cold && a.as_old[k].gbps > 0)
                        print_as_old(i, fig[FIG(cold, fr, 0)], fig[FIG(cold, fr, 1)],
                                     a.way[FIG(cold, fr, 1)], &a.as_old[k]);
                }
                if (same_host)
                    continue;
                if (!cold)
                    print_row(mode, i, fr, cold, fig[FIG(cold, fr, 0)], tag, "UCX tag_bw", NULL, 0);
            }
        print_read_parts(mode, bytes, &a);
        if (mode == MODE_SAME_HOST)
            ect_bench_copy_engine_line("    the reads' ", &a.copy_a, &a.copy_z);
        fflush(stdout);
    }
    if (mode == MODE_TCP) {
        /* The seed moved bytes with one transfer descriptor per 7 KiB block
         * (one UCX get each); ucx_perftest's ucp_get of 7168-byte messages
         * over UCX_TLS=tcp is that, on the same loopback. */
        double seed = -1;
        if (ect_bench_perftest_available())
            seed = seed_way();
        for (unsigned k = 0; k < 3; k++) {
            static struct answer a;
            if (ect_bench_xport_consumer_measure(&c, (uint8_t)(SEED_CMD + k), &a) != 0)
                goto stop;
            const double *fig = a.fig;
            for (int striped = 0; striped < 2; striped++) {
                char what[96];
                snprintf(what, sizeof(what), "tcp 7 MiB %4u runs %s vs UCX get per block",
                         SEED_FRAGS[k], striped ? "4 stripes" : "1 stream ");
                double read = fig[2 * striped];
                /* The target is the striped read's: what a consumer with
                 * cores to spare does. */
                if (seed > 0)
                    ect_bench_row(what, read, seed, "GB/s",
                                  !striped            ? 0
                                  : SEED_FRAGS[k] > 1 ? 5.0
                                                      : 1.0);
                else
                    printf("  %-50s %10.3f %-6s (no ucx_perftest)\n", what, read, "GB/s");
                /* No read beats the seed's way by more than its bare
                 * connections do: say how far it is in this run. */
                double bare_gbps = fig[2 * striped + 1];
                if (bare_gbps > 0) {
                    printf("    bare TCP over %d connection%s moves the same 7 MiB at %.3f GB/s "
                           "(this read: %.2f of it)",
                           striped ? ECT_BENCH_TCP_MAX_CONNS : 1, striped ? "s" : "", bare_gbps,
                           read / bare_gbps);
                    if (seed > 0)
                        printf(", %.2fx the seed's way: the most this row could show here",
                               bare_gbps / seed);
                    printf("\n");
                }
            }
        }
        for (unsigned k = 0; k < 3; k++) {
            static struct answer a;
            if (ect_bench_xport_consumer_measure(&c, (uint8_t)(READERS_CMD + k), &a) != 0)
                goto stop;
            char what[96];
            snprintf(what, sizeof(what), "tcp %2zu MiB x %d %s at once vs bare TCP", READERS[k].mib,
                     MAX_READERS, READERS[k].one_consumer ? "reads, 1 consumer," : "consumers");
            ect_bench_fig_t fig = {.name = what,
                                   .value = a.fig[0],
                                   .unit = "GB/s",
                                   .ceiling = a.fig[1],
                                   .ceiling_is = a.way[1],
                                   .target = 0.9};
            ect_bench_figure(&fig);
        }
    }
    rc = 0;
stop:
    ect_bench_xport_consumer_stop(&c);
    ect_bench_xport_producer_stop(&p);
    return rc;
}

int
ect_bench_xport(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    int have = ect_bench_perftest_find();
    printf("  entries of 1/8/32 MiB in %u-byte blocks, contiguous or 16 runs; producer and\n"
           "  consumer in separate processes; figure: median over %.1f s of reads (start to DONE)\n"
           "  tcp ceiling: the same bytes between the same buffers (the producer's region,\n"
           "  ours) as one send() over a bare loopback TCP connection between two\n"
           "  processes, received both ways each rep, with recv(MSG_WAITALL) and as our client\n"
           "  does (woken once %u KiB are queued, the last %u KiB on their own), in the same\n"
           "  cache state, reps alternating with the reads; the ceiling is the faster way's\n"
           "  median;\n"
           "  for reference %s\n"
           "  the seed's way: a 7 MiB entry moved as one UCX get per 7 KiB block (ucx_perftest\n"
           "  ucp_get -s %u over UCX_TLS=tcp, one entry's %zu gets a run after a warm-up,\n"
           "  the faster of 16 and 256 in flight, the median of %d runs each); our read over one\n"
           "  connection and striped over %d, each with reps alternating with the same bytes\n"
           "  over as many bare connections at once\n"
           "  same-host ceiling: the best copy of the same bytes, region to region, on 1 thread\n"
           "  and on as many as copy one batch in the client's copy engine (memcpy, NT stores,\n"
           "  rep movsb; bench.h), reps alternating with the reads; cold contiguous 1 and 8 MiB\n"
           "  also against the ceiling's way into pages as old as the reads' (a paced pass);\n"
           "  each same-host read follows an untimed read of the slot before, then 1 ms or\n"
           "  more of the copy threads asleep, this thread spinning\n"
           "  warm = one entry re-read; cold = each rep the next slot of the region, %s\n",
           BLOCK, READ_SECONDS, ECT_XPORT_STREAM_RCVLOWAT_MAX >> 10,
           ECT_XPORT_STREAM_RCVLOWAT >> 10,
           have ? "ucx_perftest -t tag_bw -e over UCX_TLS=tcp (ectier 0.1's transport)"
                : "(ucx_perftest not found)",
           BLOCK, ((size_t)SEED_MIB << 20) / BLOCK, SEED_TRIES, ECT_BENCH_TCP_MAX_CONNS,
           ect_bench_cold_describe());
    fflush(stdout);
    int rc = 0;
    for (int m = 0; m < N_MODES; m++)
        if (run_mode((enum mode)m) != 0)
            rc = 1;
    return rc;
}
