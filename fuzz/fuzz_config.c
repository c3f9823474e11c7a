/*
 * Fuzz target for the config parser (and the size parser it uses).
 *
 * Any bytes go to ect_config_parse.  Besides "no crash, no leak, no
 * sanitizer report", it checks two properties: a config the parser accepts
 * passes ect_config_validate and formats; a refused one always leaves a
 * message.  The first 256 bytes also go to ect_size_parse as text.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <ectier/ectier.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ect_config_t cfg;
    char text[8192];
    size_t len;

    /* Warnings about P2P-only keys would flood the fuzzer's output. */
    ect_log_set_level(ECT_LOG_ERROR);
    ect_clear_error();
    if (ect_config_parse((const char *)data, size, &cfg) == ECT_OK) {
        if (ect_config_validate(&cfg) != ECT_OK)
            abort();
        if (ect_config_format(&cfg, text, sizeof(text), &len) != ECT_OK || len != strlen(text))
            abort();
    } else if (ect_last_error()[0] == '\0') {
        abort();
    }

    size_t n = size < 256 ? size : 256;
    uint64_t bytes;
    memcpy(text, data, n);
    text[n] = '\0';
    /* Any text: a size or a refusal that says why. */
    if (ect_size_parse(text, &bytes) != ECT_OK && ect_last_error()[0] == '\0')
        abort();
    return 0;
}
