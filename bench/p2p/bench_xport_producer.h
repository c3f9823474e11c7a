/*
 * `ectier bench xport`'s entries and its producer process: the bytes every
 * block holds, the shapes of the entries read, and a producer that serves
 * them from a real region with the real transport server.
 */
#ifndef ECT_BENCH_XPORT_PRODUCER_H
#define ECT_BENCH_XPORT_PRODUCER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <ectier/ectier.h>

#define BLOCK      7168u
#define FRAGS      16u
#define MAX_BLOCKS (((size_t)32 << 20) / BLOCK + 1)
/* Producer and consumer regions: the fragmented 32 MiB layout with gaps. */
#define REGION_BLOCKS (FRAGS * (MAX_BLOCKS / FRAGS + 3))
#define MAX_FRAGS     1024u

/* One entry's shape: its remote block ids and local runs. */
struct shape {
    size_t mib;
    unsigned frags; /* runs on each side */
    uint64_t n_blocks;
    uint64_t remote[MAX_BLOCKS];
    ect_run_t local[MAX_FRAGS];
    size_t n_local;
};

/* The producer's bytes: word `word` of block `block`; never zero,
 * different per block. */
uint64_t ect_bench_xport_pattern(uint64_t block, uint64_t word);

/* The parameters of a bench region named `name` (REGION_BLOCKS blocks of
 * BLOCK bytes) into *p. */
void ect_bench_xport_region_params(ect_region_params_t *p, const char *name);

/* Run i of an entry of mib MiB in frags runs (1, or a power of two up to
 * MAX_FRAGS) of near-equal length, in a permuted order with 3-block gaps:
 * the remote side uses one permutation, the local side another, so no two
 * runs coalesce on either side. */
void ect_bench_xport_shape_run(size_t mib, unsigned frags, unsigned i, ect_run_t *remote,
                               ect_run_t *local);

/* Fill *s with the entry of mib MiB (at most 32) in frags runs. */
void ect_bench_xport_make_shape(struct shape *s, size_t mib, unsigned frags);

/* A producer process (forked by start). */
struct producer {
    pid_t pid;
    int cmd_fd;
    char region_name[96];
    char path[512]; /* its region's file */
    uint8_t *agent; /* its server's offer (agent metadata) */
    size_t agent_len;
};

/* Fork a producer: it opens a region of its own, fills every block with
 * ect_bench_xport_pattern, and starts a transport server on 127.0.0.1
 * (the tcp stream, the same-host path, or both) whose grant table grants
 * every request for the shape its mm_hash names
 * ("shape-<MiB>-<frags>-<slot>", the shape moved by slot blocks), any
 * token; it serves until stopped.  Call before this process starts any
 * thread.  0 once it serves (*p filled); 1 with a message on stderr (*p is
 * then safe to stop). */
int ect_bench_xport_producer_start(struct producer *p, int serve_tcp, int serve_same_host);

/* Tell the producer to stop (or kill it), reap it, free *p's offer. */
void ect_bench_xport_producer_stop(struct producer *p);

#endif /* ECT_BENCH_XPORT_PRODUCER_H */
