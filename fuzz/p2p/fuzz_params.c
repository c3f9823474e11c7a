/*
 * Fuzz target for the ec_transfer_params decoder (src/proto/params.c),
 * text an orchestrator (or whoever can reach the engine's API) puts on a
 * consumer's request.  Every input is decoded; every key of an accepted
 * value is looked up; a served item re-encodes and decodes to the same
 * address and size.  A violation aborts, which is how a fuzzer (or the
 * corpus replay, test_fuzz_params) reports it.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/params.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
fail(const char *what)
{
    fprintf(stderr, "fuzz_params: %s\n", what);
    abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    ect_params_t *p = NULL;
    if (ect__params_decode(text, &p) == ECT_OK) {
        cJSON *root = cJSON_Parse(text);
        for (cJSON *e = root != NULL ? root->child : NULL; e != NULL; e = e->next) {
            ect_params_item_t it;
            ect_status_t st = ect__params_find(p, e->string, &it);
            if (st != ECT_OK && st != ECT_ERR_PARSE)
                fail("a present key was not found");
            if (st != ECT_OK || !it.served)
                continue;
            if (it.peer_port == 0 || it.peer_host == NULL || it.peer_host[0] == '\0')
                fail("a served item without an address");
            char *again = NULL;
            it.metadata_json = NULL;
            if (ect__params_encode(&it, 1, &again) != ECT_OK)
                fail("a decoded item does not encode");
            ect_params_t *q = NULL;
            ect_params_item_t back;
            if (ect__params_decode(again, &q) != ECT_OK ||
                ect__params_find(q, it.mm_hash, &back) != ECT_OK || !back.served ||
                back.peer_port != it.peer_port || back.size_bytes != it.size_bytes ||
                strcmp(back.peer_host, it.peer_host) != 0)
                fail("an item changed in a round trip");
            ect__params_destroy(q);
            free(again);
        }
        cJSON_Delete(root);
        ect__params_destroy(p);
    }
    free(text);
    return 0;
}
