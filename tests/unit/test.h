/*
 * test.h — the smallest test harness: CHECK records a failure and goes on,
 * TEST_MAIN prints "N passed, N failed" and returns non-zero on failure.
 */
#ifndef LG_TEST_H
#define LG_TEST_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int lg_t_pass, lg_t_fail;
#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (cond) lg_t_pass++;                                                            \
        else {                                                                            \
            lg_t_fail++;                                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);      \
        }                                                                                 \
    } while (0)
#define CHECK_MSG(cond, ...)                                                              \
    do {                                                                                  \
        if (cond) lg_t_pass++;                                                            \
        else {                                                                            \
            lg_t_fail++;                                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
        }                                                                                 \
    } while (0)
#define TEST_DONE()                                                                       \
    do {                                                                                  \
        printf("%d passed, %d failed\n", lg_t_pass, lg_t_fail);                           \
        return lg_t_fail ? 1 : 0;                                                         \
    } while (0)
#endif
