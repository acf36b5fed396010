/*
 * adapter_files.c — content-addressed adapter directories (see
 * adapter_files.h for the layout and the invariant).
 *
 * Order of a put, and why:
 *   1. hash config || weights (the name must be known before anything is
 *      visible under adapters/);
 *   2. adapters/<digest> exists: done (the content is already there;
 *      a directory there is always complete);
 *   3. mkdtemp tmp/put-XXXXXX; write + fsync the config; write + fsync the
 *      weights, or rename the uploaded temp file in and fsync it;
 *   4. fsync tmp/put-XXXXXX (its entries are durable);
 *   5. rename it to adapters/<digest> (atomic: all or nothing visible);
 *      EEXIST/ENOTEMPTY means a concurrent put of the same content won:
 *      remove ours, done;
 *   6. fsync adapters/ and tmp/ (the rename is durable).
 * An adapter that ships a chat template stores it as chat_template.jinja in
 * the same directory, named <digest>-<16 hex of the template's SHA-256> so
 * that one adapter under two templates is two directories.
 * A crash anywhere leaves either no adapters/<digest> or a complete one,
 * plus perhaps a stray tmp/put-* directory (harmless).
 */
#include "db/adapter_files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static int lg_fsync_dir(const char *path, lg_err *err)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return lg_fail(err, "opening directory %s: %s", path, strerror(errno));
    int rc = fsync(fd), e = errno;
    close(fd);
    return rc ? lg_fail(err, "fsync %s: %s", path, strerror(e)) : 0;
}

static int lg_mkdir_p1(const char *path, lg_err *err)
{
    if (mkdir(path, 0750) != 0 && errno != EEXIST)
        return lg_fail(err, "creating directory %s: %s", path, strerror(errno));
    return 0;
}

/* DATA_DIR/<sub> into buf, creating it if missing. */
static int lg_subdir(const char *data_dir, const char *sub, char *buf, size_t size, lg_err *err)
{
    if (!data_dir || !*data_dir)
        return lg_fail(err, "expected a data directory");
    if ((size_t)snprintf(buf, size, "%s/%s", data_dir, sub) >= size)
        return lg_fail(err, "data directory path too long");
    return lg_mkdir_p1(buf, err);
}

static int lg_write_all(int fd, const void *data, size_t len, const char *path, lg_err *err)
{
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len > (1u << 30) ? (1u << 30) : len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return lg_fail(err, "writing %s: %s", path, strerror(errno));
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Creates path with the bytes, fsynced. */
static int lg_write_file(const char *path, const void *data, size_t len, lg_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
    if (fd < 0)
        return lg_fail(err, "creating %s: %s", path, strerror(errno));
    int rc = lg_write_all(fd, data, len, path, err);
    if (!rc && fsync(fd) != 0)
        rc = lg_fail(err, "fsync %s: %s", path, strerror(errno));
    if (close(fd) != 0 && !rc)
        rc = lg_fail(err, "closing %s: %s", path, strerror(errno));
    return rc;
}

static int lg_fsync_file(const char *path, lg_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return lg_fail(err, "opening %s: %s", path, strerror(errno));
    int rc = fsync(fd), e = errno;
    close(fd);
    return rc ? lg_fail(err, "fsync %s: %s", path, strerror(e)) : 0;
}

/* SHA-256 hex of config || (weights bytes, or the file at weights_path). */
static int lg_digest(const void *config, size_t config_len, const void *weights, size_t weights_len,
                     const char *weights_path, char hex[65], lg_err *err)
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int rc = 0;
    if (!ctx || !EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) || !EVP_DigestUpdate(ctx, config, config_len)) {
        rc = lg_fail(err, "SHA-256 failed (OpenSSL)");
        goto done;
    }
    if (weights_path) {
        int fd = open(weights_path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            rc = lg_fail(err, "opening %s: %s", weights_path, strerror(errno));
            goto done;
        }
        enum { BUF = 1 << 20 };
        unsigned char *buf = malloc(BUF);
        if (!buf) {
            close(fd);
            rc = lg_fail(err, "out of memory");
            goto done;
        }
        for (;;) {
            ssize_t r = read(fd, buf, BUF);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                rc = lg_fail(err, "reading %s: %s", weights_path, strerror(errno));
                break;
            }
            if (r == 0)
                break;
            if (!EVP_DigestUpdate(ctx, buf, (size_t)r)) {
                rc = lg_fail(err, "SHA-256 failed (OpenSSL)");
                break;
            }
        }
        free(buf);
        close(fd);
        if (rc)
            goto done;
    } else if (!EVP_DigestUpdate(ctx, weights, weights_len)) {
        rc = lg_fail(err, "SHA-256 failed (OpenSSL)");
        goto done;
    }
    unsigned char md[32];
    unsigned int n = 0;
    if (!EVP_DigestFinal_ex(ctx, md, &n) || n != 32) {
        rc = lg_fail(err, "SHA-256 failed (OpenSSL)");
        goto done;
    }
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
done:
    EVP_MD_CTX_free(ctx);
    return rc;
}

static bool lg_is_dir(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* Removes tmp/put-XXXXXX and what is in it (our two files at most). */
static void lg_remove_put_dir(const char *dir)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/" LG_ADAPTER_TEMPLATE_FILE, dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/" LG_ADAPTER_CONFIG_FILE, dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/" LG_ADAPTER_WEIGHTS_FILE, dir);
    unlink(p);
    rmdir(dir);
}

static int lg_put(const char *data_dir, const void *config, size_t config_len, const void *weights, size_t weights_len,
                  const char *weights_path, const char *tmpl, size_t tmpl_len, char digest_out[65],
                  char relpath_out[LG_ADAPTER_PATH_MAX], lg_err *err)
{
    char adir[PATH_MAX], tdir[PATH_MAX], put[PATH_MAX], final[PATH_MAX], cfg[PATH_MAX], wts[PATH_MAX];
    char digest[65], tdigest[65], dname[96];
    if (!config && config_len)
        return lg_fail(err, "expected adapter_config.json bytes");
    if (weights_path) {
        struct stat sb;
        if (lstat(weights_path, &sb) != 0)
            return lg_fail(err, "uploaded weights %s: %s", weights_path, strerror(errno));
        if (!S_ISREG(sb.st_mode))
            return lg_fail(err, "uploaded weights %s is not a regular file", weights_path);
    }
    if (lg_subdir(data_dir, "adapters", adir, sizeof adir, err) || lg_subdir(data_dir, "tmp", tdir, sizeof tdir, err) ||
        lg_digest(config, config_len, weights, weights_len, weights_path, digest, err))
        return -1;
    /* an adapter with a template of its own: <digest>-<16 hex of the template's SHA-256> */
    if (tmpl && lg_digest(tmpl, tmpl_len, "", 0, NULL, tdigest, err))
        return -1;
    if (tmpl)
        snprintf(dname, sizeof dname, "%s-%.16s", digest, tdigest);
    else
        snprintf(dname, sizeof dname, "%s", digest);
    snprintf(final, sizeof final, "%s/%s", adir, dname);
    if (lg_is_dir(final)) {
        /* already stored: complete by the invariant */
        if (weights_path && unlink(weights_path) != 0 && errno != ENOENT)
            return lg_fail(err, "removing %s: %s", weights_path, strerror(errno));
        goto ok;
    }
    snprintf(put, sizeof put, "%s/put-XXXXXX", tdir);
    if (!mkdtemp(put))
        return lg_fail(err, "creating a directory in %s: %s", tdir, strerror(errno));
    snprintf(cfg, sizeof cfg, "%s/" LG_ADAPTER_CONFIG_FILE, put);
    snprintf(wts, sizeof wts, "%s/" LG_ADAPTER_WEIGHTS_FILE, put);
    bool moved = false; /* the upload is in put/ and must go back on failure */
    if (lg_write_file(cfg, config, config_len, err))
        goto fail;
    if (tmpl) {
        char tp[PATH_MAX];
        snprintf(tp, sizeof tp, "%s/" LG_ADAPTER_TEMPLATE_FILE, put);
        if (lg_write_file(tp, tmpl, tmpl_len, err))
            goto fail;
    }
    if (weights_path) {
        if (rename(weights_path, wts) != 0) {
            if (errno == EXDEV)
                lg_fail(err, "uploaded weights %s are on another file system than %s: write uploads to %s",
                        weights_path, adir, tdir);
            else
                lg_fail(err, "moving %s to %s: %s", weights_path, wts, strerror(errno));
            goto fail;
        }
        moved = true;
        if (lg_fsync_file(wts, err))
            goto fail;
    } else if (lg_write_file(wts, weights, weights_len, err)) {
        goto fail;
    }
    if (lg_fsync_dir(put, err))
        goto fail;
    if (rename(put, final) != 0) {
        if (errno != EEXIST && errno != ENOTEMPTY) {
            lg_fail(err, "renaming %s to %s: %s", put, final, strerror(errno));
            goto fail;
        }
        lg_remove_put_dir(put); /* a concurrent put of the same content won */
        moved = false;
    }
    if (lg_fsync_dir(adir, err) || lg_fsync_dir(tdir, err)) {
        lg_err_prefix(err, "adapters/%s is in place but its rename may not be durable", dname);
        return -1;
    }
ok:
    memcpy(digest_out, digest, 65);
    snprintf(relpath_out, LG_ADAPTER_PATH_MAX, "adapters/%s", dname);
    return 0;
fail:
    if (moved && rename(wts, weights_path) != 0) {
        lg_err_prefix(err, "the upload stays in %s (moving it back failed: %s)", wts, strerror(errno));
        return -1;
    }
    lg_remove_put_dir(put);
    return -1;
}

int lg_store_put_adapter_files(const char *data_dir, const void *config, size_t config_len, const void *weights,
                               size_t weights_len, char digest_out[65], char relpath_out[LG_ADAPTER_PATH_MAX],
                               lg_err *err)
{
    if (!weights && weights_len)
        return lg_fail(err, "expected adapter_model.safetensors bytes");
    return lg_put(data_dir, config, config_len, weights ? weights : "", weights_len, NULL, NULL, 0, digest_out,
                  relpath_out, err);
}

int lg_store_put_adapter_files_from_tmp(const char *data_dir, const void *config, size_t config_len,
                                        const char *weights_tmp_path, char digest_out[65],
                                        char relpath_out[LG_ADAPTER_PATH_MAX], lg_err *err)
{
    return lg_store_put_adapter_files_tmpl(data_dir, config, config_len, NULL, 0, weights_tmp_path, digest_out,
                                           relpath_out, err);
}

int lg_store_put_adapter_files_tmpl(const char *data_dir, const void *config, size_t config_len, const char *tmpl,
                                    size_t tmpl_len, const char *weights_tmp_path, char digest_out[65],
                                    char relpath_out[LG_ADAPTER_PATH_MAX], lg_err *err)
{
    if (!weights_tmp_path || !*weights_tmp_path)
        return lg_fail(err, "expected the path of the uploaded weights");
    if (tmpl && tmpl_len > LG_ADAPTER_MAX_TEMPLATE)
        return lg_fail(err, LG_ADAPTER_TEMPLATE_FILE " is larger than %u bytes", LG_ADAPTER_MAX_TEMPLATE);
    return lg_put(data_dir, config, config_len, NULL, 0, weights_tmp_path, tmpl, tmpl_len, digest_out, relpath_out,
                  err);
}

int lg_store_tmp_file(const char *data_dir, char *path_out, size_t path_size, int *fd_out, lg_err *err)
{
    char tdir[PATH_MAX];
    if (lg_subdir(data_dir, "tmp", tdir, sizeof tdir, err))
        return -1;
    if ((size_t)snprintf(path_out, path_size, "%s/upload-XXXXXX", tdir) >= path_size)
        return lg_fail(err, "temp file path does not fit %zu bytes", path_size);
    int fd = mkostemp(path_out, O_CLOEXEC);
    if (fd < 0)
        return lg_fail(err, "creating a temp file in %s: %s", tdir, strerror(errno));
    *fd_out = fd;
    return 0;
}
