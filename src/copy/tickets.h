/*
 * The CPU copy engine's ticket table: issued, unretired batches by ticket.
 *
 * An open-addressing hash (linear probing, backward-shift deletion, so no
 * tombstones).  Tickets are consecutive, so `ticket & mask` spreads them
 * perfectly and a lookup is O(1) however long an old ticket stays
 * unretired.  Each slot holds the ticket next to its value, so a probe
 * never reads a batch record.  The load factor stays at most one half.
 *
 * Locking: none; the engine's mutex guards every call.
 */
#ifndef ECT_COPY_TICKETS_H
#define ECT_COPY_TICKETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ectier/status.h>

struct ect__ticket_slot {
    uint64_t ticket;
    void *value; /* NULL: the slot is empty */
};

struct ect__tickets {
    struct ect__ticket_slot *slot;
    size_t cap; /* a power of two */
    size_t count;
};

/* An empty table of min_cap slots (a power of two, >= 2).  ECT_OK or
 * ECT_ERR_NO_MEMORY (message set). */
ect_status_t ect__tickets_init(struct ect__tickets *t, size_t min_cap);

/* Free the slots (not the values). */
void ect__tickets_cleanup(struct ect__tickets *t);

/* Make room for one more ticket.  *grew_p is set when the table allocated.
 * ECT_OK, or ECT_ERR_NO_MEMORY (message set; the table is unchanged). */
ect_status_t ect__tickets_reserve(struct ect__tickets *t, bool *grew_p);

/* Add ticket (not in the table) with value (not NULL); a reserve must have
 * succeeded since the last insert. */
void ect__tickets_insert(struct ect__tickets *t, uint64_t ticket, void *value);

/* The value of ticket, or NULL; *slot_p gets its slot (for remove_at). */
void *ect__tickets_find(const struct ect__tickets *t, uint64_t ticket, size_t *slot_p);

/* Remove the ticket in slot (as found by ect__tickets_find, with no insert
 * or remove since). */
void ect__tickets_remove_at(struct ect__tickets *t, size_t slot);

/* Call fn on every value (teardown). */
void ect__tickets_each(struct ect__tickets *t, void (*fn)(void *value));

#endif /* ECT_COPY_TICKETS_H */
