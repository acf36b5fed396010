/*
 * admin_key.c — see admin_key.h.
 */
#include "gateway/http/admin_key.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gateway/http/request.h"

static void sha256(const void *p, size_t n, uint8_t out[32])
{
    unsigned int len = 32;
    EVP_Digest(p, n, out, &len, EVP_sha256(), NULL);
}

static void set_key(lg_admin_key *k, const char *key, size_t len)
{
    sha256(key, len, k->sha256);
    snprintf(k->hint, sizeof k->hint, "%.13s…", key);
}

/* the line of a key file, without its newline; a key has no spaces */
static int parse_key_text(char *buf, size_t n, const char *path, size_t *klen, lg_err *err)
{
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        n--;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] <= ' ' || (unsigned char)buf[i] >= 0x7f)
            return lg_fail(err, "%s: the admin key must be one line of printable ASCII without spaces", path);
    if (n < LG_ADMIN_KEY_MIN_LEN)
        return lg_fail(err, "%s: the admin key is %zu characters; at least %d are required", path, n,
                       LG_ADMIN_KEY_MIN_LEN);
    *klen = n;
    return 0;
}

static int read_key_file(const char *path, lg_admin_key *k, lg_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return lg_fail(err, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return lg_fail(err, "%s is not a regular file", path);
    }
    if (st.st_mode & 077) {
        close(fd);
        return lg_fail(err, "%s is readable by other users (mode %03o): the admin key must be private; run: chmod 600 %s",
                       path, (unsigned)(st.st_mode & 0777), path);
    }
    if (st.st_uid != geteuid()) {
        close(fd);
        return lg_fail(err, "%s belongs to another user (uid %u)", path, (unsigned)st.st_uid);
    }
    char buf[1024];
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    if (n < 0)
        return lg_fail(err, "cannot read %s: %s", path, strerror(errno));
    if ((size_t)n == sizeof buf)
        return lg_fail(err, "%s: too long for an admin key", path);
    size_t klen;
    if (parse_key_text(buf, (size_t)n, path, &klen, err) != 0)
        return -1;
    set_key(k, buf, klen);
    OPENSSL_cleanse(buf, sizeof buf);
    return 0;
}

static int generate_key_file(const char *path, lg_admin_key *k, lg_err *err)
{
    uint8_t raw[32];
    if (RAND_bytes(raw, sizeof raw) != 1)
        return lg_fail(err, "no random bytes for the admin key (OpenSSL RAND_bytes failed)");
    static const char b64u[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    char key[64];
    size_t o = 0;
    memcpy(key, "lg-admin-", 9);
    o = 9;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < sizeof raw; i++) {
        acc = acc << 8 | raw[i];
        bits += 8;
        while (bits >= 6) {
            key[o++] = b64u[(acc >> (bits - 6)) & 63];
            bits -= 6;
        }
    }
    if (bits)
        key[o++] = b64u[(acc << (6 - bits)) & 63];
    key[o] = 0; /* 9 + 43 characters */
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return lg_fail(err, "cannot create %s: %s", tmp, strerror(errno));
    key[o] = '\n';
    ssize_t w = write(fd, key, o + 1);
    key[o] = 0;
    if (w != (ssize_t)(o + 1) || fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return lg_fail(err, "cannot write %s: %s", tmp, strerror(e));
    }
    close(fd);
    if (link(tmp, path) != 0) { /* not rename: never replace a key another process just wrote */
        int e = errno;
        unlink(tmp);
        if (e == EEXIST)
            return read_key_file(path, k, err);
        return lg_fail(err, "cannot create %s: %s", path, strerror(e));
    }
    unlink(tmp);
    /* the directory entry must survive a crash too */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = 0;
        int dfd = open(dir[0] ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
    }
    set_key(k, key, o);
    OPENSSL_cleanse(key, sizeof key);
    OPENSSL_cleanse(raw, sizeof raw);
    return 0;
}

int lg_admin_key_load_from(const char *data_dir, const char *env_value, lg_admin_key *out, lg_err *err)
{
    memset(out, 0, sizeof *out);
    if (env_value) {
        size_t n = strlen(env_value);
        char buf[1024];
        if (n >= sizeof buf)
            return lg_fail(err, "%s is too long", LG_ADMIN_KEY_ENV);
        memcpy(buf, env_value, n);
        size_t klen;
        if (parse_key_text(buf, n, LG_ADMIN_KEY_ENV, &klen, err) != 0)
            return -1;
        set_key(out, buf, klen);
        OPENSSL_cleanse(buf, sizeof buf);
        out->source = LG_ADMIN_KEY_FROM_ENV;
        return 0;
    }
    if (snprintf(out->path, sizeof out->path, "%s/admin.key", data_dir) >= (int)sizeof out->path)
        return lg_fail(err, "data dir path too long");
    struct stat st;
    if (lstat(out->path, &st) == 0) {
        out->source = LG_ADMIN_KEY_FROM_FILE;
        return read_key_file(out->path, out, err);
    }
    if (errno != ENOENT)
        return lg_fail(err, "cannot check %s: %s", out->path, strerror(errno));
    out->source = LG_ADMIN_KEY_GENERATED;
    return generate_key_file(out->path, out, err);
}

int lg_admin_key_load(const char *data_dir, lg_admin_key *out, lg_err *err)
{
    const char *env = getenv(LG_ADMIN_KEY_ENV);
    return lg_admin_key_load_from(data_dir, env && *env ? env : NULL, out, err);
}

bool lg_admin_key_matches(const lg_admin_key *k, const char *presented, size_t len)
{
    uint8_t h[32];
    sha256(presented, len, h);
    return CRYPTO_memcmp(h, k->sha256, 32) == 0;
}

int lg_auth_admin(const lg_auth_in *in, void *admin_key, lg_auth_result *out)
{
    if (!in->bearer) {
        out->status = 401;
        return -1;
    }
    if (!lg_admin_key_matches(admin_key, in->bearer, in->bearer_len)) {
        out->status = 401;
        out->message = "Incorrect operator key provided.";
        return -1;
    }
    out->principal_ptr = admin_key;
    return 0;
}
