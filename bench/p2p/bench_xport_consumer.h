/*
 * `ectier bench xport`'s consumer process (bench/p2p/bench_xport.c's file
 * comment says what it measures): it reads entries from a producer
 * (bench_xport_producer.h) with the real transport client, measures them
 * beside their ceilings, and answers the bench with its figures.
 */
#ifndef ECT_BENCH_XPORT_CONSUMER_H
#define ECT_BENCH_XPORT_CONSUMER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bench_xport_ceilings.h"
#include "bench_xport_producer.h"
#include "copy/cpu.h"
#include "p2p/transport.h"

#define READ_SECONDS 0.6 /* per shape and transport, after warm-up */
#define WAY_LEN      48  /* a ceiling's way, "rep movsb, 2 threads" */

enum mode { MODE_TCP, MODE_SAME_HOST, N_MODES };

static const size_t SIZES_MIB[] = {1, 8, 32};
#define N_SIZES (sizeof(SIZES_MIB) / sizeof(SIZES_MIB[0]))

/* Where a read's time goes besides moving its bytes, in seconds: starting
 * it (ect__xport_read_start: the request encoded and sent, the producer's
 * worker woken by it), and from the transport's settled callback (the last
 * byte landed) to the read seen DONE, on the receiving thread (as the
 * consumer completes a tcp read) or else on the waiting thread; on_rx: the
 * share of reads the receiving thread saw DONE. */
struct read_parts {
    double start, handoff, on_rx;
};

/* Reads at once, at most this many. */
#define MAX_READERS 4

/* The ceilings of a cold same-host read that meet pages as old as the
 * read's (bench_xport_consumer.c: as_old_pages): the ceiling's winning way,
 * and its winning way among those that find no thread polling (asleep_way);
 * and the pages' age. */
struct as_old {
    double gbps, asleep_gbps, age_s;
    char asleep_way[WAY_LEN];
};

_Static_assert(ECT_BENCH_TCP_MAX_CONNS == ECT_STREAM_MAX_STRIPES,
               "the striped ceiling has as many connections as a read has stripes");

/* The seed's comparison (issue 11): a SEED_MIB entry in 1, 16 and 1024 runs. */
#define SEED_CMD 100u
#define SEED_MIB 7u
static const unsigned SEED_FRAGS[3] = {1, 16, 1024};

/* Reads at once, MAX_READERS of them, each of an entry of READERS[k].mib
 * MiB, against all their bytes over as many bare connections at once: a
 * producer serving several consumers (clients of one connection each), or
 * one consumer fetching several entries (one client of up to
 * ECT_STREAM_MAX_STRIPES connections, the entries too small to stripe). */
#define READERS_CMD 110u
static const struct {
    size_t mib;
    int one_consumer;
} READERS[3] = {{1, 0}, {8, 0}, {1, 1}};

/* A consumer's answer for one size: GB/s (ceiling 0) or the ceiling
 * (ceiling 1: the best copy same-host, bare TCP over tcp) of warm/cold
 * reads, contiguous/fragmented, and what each ceiling was. */
#define N_FIGS                 8
#define FIG(cold, fr, ceiling) ((cold)*4 + (fr)*2 + (ceiling))

struct answer {
    int status;
    double fig[N_FIGS];
    char way[N_FIGS][WAY_LEN];
    struct read_parts parts[N_FIGS / 2]; /* of the reads of FIG(cold, fr, 0) */
    /* Same-host: the best copy that finds no thread polling (bench.h), of
     * the reads of FIG(cold, fr, 0), and its way. */
    double asleep[N_FIGS / 2];
    char asleep_way[N_FIGS / 2][WAY_LEN];
    /* Same-host cold contiguous: the best copy into pages as old as the
     * reads' (as_old_pages; gbps 0 where the region has too few slots, and
     * for the fragmented reads). */
    struct as_old as_old[N_FIGS / 2];
    /* The client's copy engine before and after the size's reads
     * (same-host: how the reads were copied). */
    struct ect__copy_cpu_stats copy_a, copy_z;
};

/* A consumer process (forked by start). */
struct consumer {
    pid_t pid;
    int cmd_fd;
    int res_fd;
};

/* Fork a consumer of producer p over the mode's transport (call before
 * this process starts any thread).  0 (*c filled), or 1 with a message on
 * stderr (*c is then safe to stop). */
int ect_bench_xport_consumer_start(struct consumer *c, const struct producer *p, enum mode mode);

/* Have the consumer measure size index i (< N_SIZES), or SEED_CMD + k, or
 * READERS_CMD + k; *a gets its answer (figures indexed by FIG).  0, or
 * non-zero when the consumer failed or is gone. */
int ect_bench_xport_consumer_measure(struct consumer *c, uint8_t i, struct answer *a);

/* End the consumer (it exits at end-of-file) and reap it. */
void ect_bench_xport_consumer_stop(struct consumer *c);

#endif /* ECT_BENCH_XPORT_CONSUMER_H */
