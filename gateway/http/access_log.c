/*
 * access_log.c — see access_log.h. Double buffering: writers fill `buf`
 * under `mu`; the thread swaps it with its own and writes outside the lock.
 */
#include "gateway/http/access_log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FLUSH_BYTES (64u << 10)
#define MAX_PENDING (8u << 20)
#define FLUSH_MS 100

struct lg_access_log {
    int fd;
    bool own_fd;
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *buf;
    size_t len, cap;
    uint64_t dropped, dropped_reported;
    bool stop;
};

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return; /* nowhere to report it: the log itself is the sink */
        }
        p += w;
        n -= (size_t)w;
    }
}

static void *log_main(void *p)
{
    lg_access_log *log = p;
    char *mine = NULL;
    size_t mine_cap = 0;
    pthread_mutex_lock(&log->mu);
    for (;;) {
        while (!log->stop && log->len < FLUSH_BYTES) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += FLUSH_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            if (pthread_cond_timedwait(&log->cv, &log->mu, &ts) == ETIMEDOUT && log->len)
                break;
        }
        bool stop = log->stop;
        /* swap buffers */
        char *b = log->buf;
        size_t n = log->len, c = log->cap;
        log->buf = mine;
        log->cap = mine_cap;
        log->len = 0;
        mine = b;
        mine_cap = c;
        uint64_t dropped = log->dropped - log->dropped_reported;
        log->dropped_reported = log->dropped;
        pthread_mutex_unlock(&log->mu);
        if (n)
            write_all(log->fd, mine, n);
        if (dropped) {
            char m[128];
            int k = snprintf(m, sizeof m, "{\"event\":\"access_log_dropped\",\"lines\":%llu}\n",
                             (unsigned long long)dropped);
            write_all(log->fd, m, (size_t)k);
        }
        pthread_mutex_lock(&log->mu);
        if (stop && log->len == 0)
            break;
    }
    pthread_mutex_unlock(&log->mu);
    free(mine);
    return NULL;
}

int lg_access_log_open(const char *path, lg_access_log **out, lg_err *err)
{
    *out = NULL;
    lg_access_log *log = calloc(1, sizeof *log);
    if (!log)
        return lg_fail(err, "out of memory");
    if (!strcmp(path, "-")) {
        log->fd = STDERR_FILENO;
    } else {
        log->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (log->fd < 0) {
            int e = errno;
            free(log);
            return lg_fail(err, "access log %s: %s", path, strerror(e));
        }
        log->own_fd = true;
    }
    pthread_mutex_init(&log->mu, NULL);
    pthread_cond_init(&log->cv, NULL);
    if (pthread_create(&log->tid, NULL, log_main, log) != 0) {
        if (log->own_fd)
            close(log->fd);
        free(log);
        return lg_fail(err, "cannot start the access log thread");
    }
    *out = log;
    return 0;
}

void lg_access_log_write(lg_access_log *log, const char *line, size_t len)
{
    pthread_mutex_lock(&log->mu);
    if (log->stop || log->len + len + 1 > MAX_PENDING) {
        log->dropped++;
        pthread_mutex_unlock(&log->mu);
        return;
    }
    if (log->len + len + 1 > log->cap) {
        size_t nc = log->cap ? log->cap : 16384;
        while (nc < log->len + len + 1)
            nc *= 2;
        char *nb = realloc(log->buf, nc);
        if (!nb) {
            log->dropped++;
            pthread_mutex_unlock(&log->mu);
            return;
        }
        log->buf = nb;
        log->cap = nc;
    }
    memcpy(log->buf + log->len, line, len);
    log->buf[log->len + len] = '\n';
    log->len += len + 1;
    if (log->len >= FLUSH_BYTES)
        pthread_cond_signal(&log->cv);
    pthread_mutex_unlock(&log->mu);
}

uint64_t lg_access_log_dropped(lg_access_log *log)
{
    pthread_mutex_lock(&log->mu);
    uint64_t d = log->dropped;
    pthread_mutex_unlock(&log->mu);
    return d;
}

void lg_access_log_close(lg_access_log *log)
{
    if (!log)
        return;
    pthread_mutex_lock(&log->mu);
    log->stop = true;
    pthread_cond_signal(&log->cv);
    pthread_mutex_unlock(&log->mu);
    pthread_join(log->tid, NULL);
    if (log->own_fd)
        close(log->fd);
    pthread_mutex_destroy(&log->mu);
    pthread_cond_destroy(&log->cv);
    free(log->buf);
    free(log);
}
