/*
 * The CPU copy engine's ticket table (see tickets.h).
 */
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"
#include "copy/tickets.h"

/* The slot of ticket, or of the empty slot where its probe ends. */
static size_t
probe(const struct ect__ticket_slot *slot, size_t cap, uint64_t ticket)
{
    size_t mask = cap - 1, i = (size_t)ticket & mask;
    while (slot[i].value != NULL && slot[i].ticket != ticket)
        i = (i + 1) & mask;
    return i;
}

ect_status_t
ect__tickets_init(struct ect__tickets *t, size_t min_cap)
{
    memset(t, 0, sizeof(*t));
    t->slot = ect__calloc(min_cap, sizeof(*t->slot));
    if (t->slot == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "copy cpu: cannot allocate the ticket table");
    t->cap = min_cap;
    return ECT_OK;
}

void
ect__tickets_cleanup(struct ect__tickets *t)
{
    ect__free(t->slot);
    memset(t, 0, sizeof(*t));
}

ect_status_t
ect__tickets_reserve(struct ect__tickets *t, bool *grew_p)
{
    *grew_p = false;
    if ((t->count + 1) * 2 <= t->cap)
        return ECT_OK;
    size_t cap = t->cap * 2;
    struct ect__ticket_slot *slot = ect__calloc(cap, sizeof(*slot));
    if (slot == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "copy cpu: cannot grow the ticket table to %zu", cap);
    for (size_t i = 0; i < t->cap; i++)
        if (t->slot[i].value != NULL)
            slot[probe(slot, cap, t->slot[i].ticket)] = t->slot[i];
    ect__free(t->slot);
    t->slot = slot;
    t->cap = cap;
    *grew_p = true;
    return ECT_OK;
}

void
ect__tickets_insert(struct ect__tickets *t, uint64_t ticket, void *value)
{
    size_t i = probe(t->slot, t->cap, ticket);
    t->slot[i] = (struct ect__ticket_slot){.ticket = ticket, .value = value};
    t->count++;
}

void *
ect__tickets_find(const struct ect__tickets *t, uint64_t ticket, size_t *slot_p)
{
    size_t i = probe(t->slot, t->cap, ticket);
    *slot_p = i;
    return t->slot[i].value;
}

/* Backward-shift deletion: later members of the probe chain move up into the
 * hole unless their home slot lies cyclically after it, so lookups never need
 * tombstones. */
void
ect__tickets_remove_at(struct ect__tickets *t, size_t hole)
{
    size_t mask = t->cap - 1;
    t->slot[hole].value = NULL;
    for (size_t j = (hole + 1) & mask; t->slot[j].value != NULL; j = (j + 1) & mask) {
        size_t home = (size_t)t->slot[j].ticket & mask;
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!stays) {
            t->slot[hole] = t->slot[j];
            t->slot[j].value = NULL;
            hole = j;
        }
    }
    t->count--;
}

void
ect__tickets_each(struct ect__tickets *t, void (*fn)(void *value))
{
    for (size_t i = 0; i < t->cap; i++)
        if (t->slot[i].value != NULL)
            fn(t->slot[i].value);
}
