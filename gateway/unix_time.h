/*
 * unix_time.h — wall-clock time as the product's objects carry it: OpenAI
 * objects and the limits' months in Unix seconds, the store's rows and the
 * usage ledger in Unix milliseconds. (Durations use lg_now, the monotonic
 * clock of engine/base/common.h.)
 */
#ifndef LG_GW_UNIX_TIME_H
#define LG_GW_UNIX_TIME_H

#include <stdint.h>
#include <time.h>

static inline int64_t lg_unix_now(void) { return (int64_t)time(NULL); }

static inline int64_t lg_unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
