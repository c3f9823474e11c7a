/*
 * `ectier demo` runs the reference engine loop of examples/engine_loop.c in
 * this binary: compile that file here, without its main().
 */
#define ECT_EXAMPLE_NO_MAIN
#include "engine_loop.c"
