/* The peer-to-peer half of `ectier demo` (P2P builds only). */
#ifndef ECT_TOOLS_P2P_DEMO_P2P_H
#define ECT_TOOLS_P2P_DEMO_P2P_H

/* Run it; encode_ms_per_item is the local encoder's measured cost for one
 * item of the same size, printed next to the fetch latency.  Returns 0 on
 * success, 1 with a message on stderr. */
int ect_demo_p2p(double encode_ms_per_item);

#endif
