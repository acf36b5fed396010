/*
 * adapter_upload.c — see adapter_upload.h: adapter upload / import / list /
 * get / delete for a tenant.
 */
#include "gateway/adapter_upload.h"
#include "gateway/adapter_template.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adapters/peft.h"
#include "db/adapter_files.h"
#include "gateway/http/http_util.h"
#include "gateway/http/multipart.h"
#include "gateway/job.h"

/* ---- adapter objects --------------------------------------------------------- */

json_t *lg_adapter_json(const char *name, const lg_adapter_version *v, int64_t created_at_ms, const char *owner)
{
    json_t *targets = json_array();
    const char *s = v->target_modules;
    while (*s) {
        const char *e = strchr(s, ',');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n)
            json_array_append_new(targets, json_stringn(s, n));
        s += n + (e ? 1 : 0);
    }
    return json_pack("{s:s,s:s,s:s,s:i,s:s,s:i,s:o,s:I,s:I,s:I,s:s}", "id", name, "object", "adapter", "name", name,
                     "version", (int)v->version, "digest", v->digest, "rank", (int)v->max_rank, "target_modules",
                     targets, "size_bytes", (json_int_t)v->size_bytes, "created_at", (json_int_t)(created_at_ms / 1000),
                     "updated_at", (json_int_t)(v->created_at / 1000), "owned_by", owner);
}

static int respond_adapter_not_found(lg_request *r, const char *name)
{
    return lg_respond_error(r, 404, "adapter_not_found", "name",
                            "The adapter `%s` does not exist or you do not have access to it.", name),
           0;
}

int lg_adapters_list(lg_request *r, const lg_adapter_admin *aa, const lg_tenant_obj *t)
{
    lg_tenant_adapter *v = NULL;
    int n = 0;
    if (lg_tenant_adapters_list(aa->adapters, t->id, &v, &n) != 0)
        return lg_respond_error(r, 500, NULL, NULL, "out of memory"), 0;
    json_t *data = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(data, lg_adapter_json(v[i].name, &v[i].version, v[i].created_at, t->name));
    free(v);
    return lg_respond_json(r, 200, json_pack("{s:s,s:o}", "object", "list", "data", data)), 0;
}

int lg_adapters_get(lg_request *r, const lg_adapter_admin *aa, const lg_tenant_obj *t, const char *name)
{
    lg_tenant_adapter a;
    if (!lg_tenant_adapters_find(aa->adapters, t->id, name, &a))
        return respond_adapter_not_found(r, name);
    return lg_respond_json(r, 200, lg_adapter_json(a.name, &a.version, a.created_at, t->name)), 0;
}

/* ---- delete ------------------------------------------------------------------- */

typedef struct del_job {
    lg_job j;
    lg_adapter_admin aa;
    int64_t tenant_id;
    char tenant[LG_STORE_NAME_MAX];
    char name[LG_STORE_NAME_MAX];
} del_job;

static void del_work(lg_job *jb)
{
    del_job *d = (del_job *)jb;
    lg_err err = {{0}};
    lg_store *st = lg_store_writer_acquire(d->aa.store);
    int rc = lg_store_adapter_delete(st, d->tenant, d->name, &err);
    if (rc == 0)
        lg_tenant_adapters_uninstall(d->aa.adapters, d->tenant_id, d->name);
    lg_store_writer_release(d->aa.store);
    if (rc == LG_STORE_NOT_FOUND)
        lg_job_fail(jb, 404, "adapter_not_found", "name",
                    "The adapter `%s` does not exist or you do not have access to it.", d->name);
    else if (rc != 0)
        lg_job_fail_store(jb, rc, "adapter_not_found", "conflict", "name", &err);
    else {
        jb->status = 200;
        jb->body = json_pack("{s:s,s:s,s:b}", "id", d->name, "object", "adapter", "deleted", 1);
    }
}

int lg_adapters_delete(lg_request *r, const lg_adapter_admin *aa, const lg_tenant_obj *t, const char *name)
{
    if (strlen(name) >= LG_STORE_NAME_MAX || !lg_tenant_adapters_find(aa->adapters, t->id, name, NULL))
        return respond_adapter_not_found(r, name);
    del_job *d = calloc(1, sizeof *d);
    if (!d)
        return lg_respond_error(r, 500, NULL, NULL, "out of memory"), 0;
    d->aa = *aa;
    d->j.work = del_work;
    d->tenant_id = t->id;
    snprintf(d->tenant, sizeof d->tenant, "%s", t->name);
    snprintf(d->name, sizeof d->name, "%s", name);
    return lg_job_run(r, &d->j);
}

/* ---- temporary upload directories ------------------------------------------------ */

static int make_tmp_dir(const char *data_dir, char *out, size_t cap, lg_err *err)
{
    char tdir[PATH_MAX];
    if ((size_t)snprintf(tdir, sizeof tdir, "%s/tmp", data_dir) >= sizeof tdir)
        return lg_fail(err, "data directory path too long");
    if (mkdir(tdir, 0700) != 0 && errno != EEXIST)
        return lg_fail(err, "creating %s: %s", tdir, strerror(errno));
    if ((size_t)snprintf(out, cap, "%s/upload-XXXXXX", tdir) >= cap)
        return lg_fail(err, "data directory path too long");
    if (!mkdtemp(out)) {
        int e = errno;
        out[0] = 0;
        return lg_fail(err, "creating a temporary directory in %s: %s", tdir, strerror(e));
    }
    return 0;
}

static void remove_tmp_dir(const char *dir)
{
    if (!dir[0])
        return;
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/" LG_ADAPTER_CONFIG_FILE, dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/" LG_ADAPTER_WEIGHTS_FILE, dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/" LG_ADAPTER_TEMPLATE_FILE, dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/" LG_ADAPTER_TOKENIZER_CONFIG_FILE, dir);
    unlink(p);
    rmdir(dir);
}

static int write_file(const char *path, const void *data, size_t len, lg_err *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0)
        return lg_fail(err, "creating %s: %s", path, strerror(errno));
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            return lg_fail(err, "writing %s: %s", path, strerror(e));
        }
        p += w;
        len -= (size_t)w;
    }
    if (close(fd) != 0)
        return lg_fail(err, "writing %s: %s", path, strerror(errno));
    return 0;
}

/* err->msg with every occurrence of `from` replaced by `to` (server paths
 * out of messages meant for clients). */
static void msg_replace(lg_err *err, const char *from, const char *to)
{
    size_t fl = strlen(from);
    if (!fl)
        return;
    char out[sizeof err->msg];
    size_t o = 0;
    const char *s = err->msg;
    while (*s && o + 1 < sizeof out) {
        if (!strncmp(s, from, fl)) {
            int n = snprintf(out + o, sizeof out - o, "%s", to);
            o += (size_t)n < sizeof out - o ? (size_t)n : sizeof out - o - 1;
            s += fl;
        } else {
            out[o++] = *s++;
        }
    }
    out[o] = 0;
    memcpy(err->msg, out, o + 1);
}

/* ---- commit: inspect, put, store, install (worker) ------------------------------------- */

typedef struct commit_in {
    const lg_adapter_admin *aa;
    int64_t tenant_id;
    const char *tenant;
    const char *name;
    const char *dir;          /* holds both files */
    const char *config;       /* the config's bytes (also in dir) */
    size_t config_len;
    const char *shown_dir;    /* what to call dir in messages ("" for uploads) */
    const char *config_param, *weights_param; /* params named by validation errors */
    const char *template_param;               /* the chat template's */
} commit_in;

static int commit(lg_job *j, const commit_in *in)
{
    const lg_adapter_admin *aa = in->aa;
    lg_err err = {{0}};
    lg_adapter_version v;
    char *tmpl = NULL;
    size_t tmpl_len = 0;
    if (lg_tenant_adapters_inspect(aa->adapters, in->dir, &v, &tmpl, &tmpl_len, &err) != 0) {
        char from[PATH_MAX + 2];
        snprintf(from, sizeof from, "%s/", in->dir);
        msg_replace(&err, from, in->shown_dir);
        msg_replace(&err, in->dir, in->shown_dir[0] ? in->shown_dir : "upload");
        msg_replace(&err, "adapter 'upload': ", "");
        const char *param = NULL;
        if (!strncmp(err.msg, LG_ADAPTER_TEMPLATE_FILE, strlen(LG_ADAPTER_TEMPLATE_FILE)) ||
            !strncmp(err.msg, LG_ADAPTER_TOKENIZER_CONFIG_FILE, strlen(LG_ADAPTER_TOKENIZER_CONFIG_FILE)))
            param = in->template_param;
        else if (strstr(err.msg, "safetensors"))
            param = in->weights_param;
        else if (strstr(err.msg, "adapter_config") || strstr(err.msg, "rank") || strstr(err.msg, "target"))
            param = in->config_param;
        /* what the refused parse allocated is free now: give the heap's free
         * pages back to the system (a hostile upload leaves no resident
         * memory behind; a refusal is rare, the call a few ms) */
        malloc_trim(0);
        return lg_job_fail(j, 400, "invalid_adapter", param, "The adapter was refused: %s", err.msg);
    }
    char wpath[PATH_MAX], digest[65], relpath[LG_ADAPTER_PATH_MAX];
    snprintf(wpath, sizeof wpath, "%s/" LG_ADAPTER_WEIGHTS_FILE, in->dir);
    int prc = lg_store_put_adapter_files_tmpl(aa->data_dir, in->config, in->config_len, tmpl, tmpl_len, wpath, digest,
                                              relpath, &err);
    free(tmpl);
    if (prc != 0)
        return lg_job_fail(j, 500, "store_error", NULL, "Storing the adapter's files failed: %s", err.msg);
    if (strcmp(digest, v.digest) != 0) /* the files changed under us: cannot happen with our own tmp dir */
        return lg_job_fail(j, 500, "store_error", NULL, "The adapter's digest changed while it was stored.");
    snprintf(v.path, sizeof v.path, "%s", relpath);

    lg_store *st = lg_store_writer_acquire(aa->store);
    lg_adapter_rec prev, rec;
    int got = lg_store_adapter_get(st, in->tenant, in->name, &prev, &err);
    bool replace = got == 0;
    int rc;
    if (got != 0 && got != LG_STORE_NOT_FOUND)
        rc = got;
    else if (replace)
        rc = lg_store_adapter_replace(st, in->tenant, in->name, &v, &rec, &err);
    else
        rc = lg_store_adapter_create(st, in->tenant, in->name, &v, &rec, &err);
    if (rc != 0) {
        lg_store_writer_release(aa->store);
        if (rc == LG_STORE_NOT_FOUND)
            return lg_job_fail(j, 404, "tenant_not_found", NULL, "The tenant `%s` no longer exists.", in->tenant);
        return lg_job_fail_store(j, rc, "adapter_not_found", "adapter_exists", "name", &err);
    }
    if (lg_tenant_adapters_install(aa->adapters, in->tenant_id, in->name, &rec.current, rec.created_at, &err) != 0) {
        /* undo the store change: the registry (and the engine) still hold the old state */
        lg_err e2 = {{0}};
        if (replace)
            lg_store_adapter_replace(st, in->tenant, in->name, &prev.current, NULL, &e2);
        else
            lg_store_adapter_delete(st, in->tenant, in->name, &e2);
        lg_store_writer_release(aa->store);
        return lg_job_fail(j, 500, "adapter_install_failed", NULL, "The engine could not load the adapter: %s",
                           err.msg);
    }
    lg_store_writer_release(aa->store);
    j->status = replace ? 200 : 201;
    j->body = lg_adapter_json(in->name, &rec.current, rec.created_at, in->tenant);
    return 0;
}

/* ---- upload (multipart) ------------------------------------------------------------- */

enum { F_NONE = 0, F_NAME, F_CONFIG, F_WEIGHTS, F_TEMPLATE, F_TOKCFG, F_N };

/* a text field kept in memory, at most max bytes */
typedef struct membuf {
    char *p;
    size_t len, cap;
} membuf;

static int membuf_add(membuf *b, const void *data, size_t len)
{
    if (b->len + len > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + len)
            cap *= 2;
        char *c = realloc(b->p, cap);
        if (!c)
            return -1;
        b->p = c;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
    return 0;
}
#define UPLOAD_SLICE ((size_t)4 << 20)

typedef struct upload {
    lg_job j;
    lg_adapter_admin aa;
    int64_t tenant_id;
    char tenant[LG_STORE_NAME_MAX];
    size_t max_weights;
    /* body walk (loop thread) */
    size_t off;
    bool last;
    char *slice;
    size_t slice_len;
    /* parse (worker) */
    lg_multipart *mp;
    int field;
    bool seen[F_N];
    membuf extra[2];      /* chat_template, tokenizer_config (optional) */
    char name[LG_STORE_NAME_MAX];
    size_t name_len;
    char *config;
    size_t config_len, config_cap;
    int wfd;
    lg_file_sink sink;
    bool sink_open;
    char dir[PATH_MAX];
    char param_buf[64];
    bool failed, finished;
} upload;

static void upload_free(lg_job *jb)
{
    upload *u = (upload *)jb;
    if (u->sink_open)
        lg_file_sink_discard(&u->sink);
    if (u->wfd >= 0)
        close(u->wfd);
    lg_multipart_free(u->mp);
    free(u->slice);
    free(u->config);
    free(u->extra[0].p);
    free(u->extra[1].p);
    free(u);
}

/* worker: drop the temporary files (after a failure or a client that left) */
static void upload_cleanup(upload *u)
{
    if (u->sink_open) {
        lg_file_sink_discard(&u->sink);
        u->sink_open = false;
    }
    if (u->wfd >= 0) {
        close(u->wfd);
        u->wfd = -1;
    }
    remove_tmp_dir(u->dir);
    u->dir[0] = 0;
}

static const char *field_label(int f)
{
    return f == F_NAME ? "name" : f == F_CONFIG ? "config" : f == F_TEMPLATE ? "chat_template"
                                           : f == F_TOKCFG ? "tokenizer_config" : "weights";
}

static int mp_begin(void *user, const lg_mp_part *p, lg_err *err)
{
    upload *u = user;
    int f = !strcmp(p->name, "name") ? F_NAME : !strcmp(p->name, "config") ? F_CONFIG
                                            : !strcmp(p->name, "weights") ? F_WEIGHTS
                                            : !strcmp(p->name, "chat_template") ? F_TEMPLATE
                                            : !strcmp(p->name, "tokenizer_config") ? F_TOKCFG : F_NONE;
    if (f == F_NONE) {
        snprintf(u->param_buf, sizeof u->param_buf, "%s", p->name);
        lg_job_fail(&u->j, 400, "unknown_parameter", u->param_buf,
                    "Unrecognized form field '%.100s': expected name, config and weights (and optionally "
                    "chat_template or tokenizer_config).",
                    p->name);
        return lg_fail(err, "unknown field");
    }
    if (u->seen[f]) {
        lg_job_fail(&u->j, 400, "duplicate_parameter", field_label(f), "The form field '%s' appears twice.",
                    field_label(f));
        return lg_fail(err, "duplicate field");
    }
    u->seen[f] = true;
    u->field = f;
    if (f == F_WEIGHTS) {
        lg_err e = {{0}};
        char path[PATH_MAX];
        if (!u->dir[0] && make_tmp_dir(u->aa.data_dir, u->dir, sizeof u->dir, &e) != 0) {
            lg_job_fail(&u->j, 500, "store_error", NULL, "Receiving the upload failed: %s", e.msg);
            return lg_fail(err, "tmp");
        }
        snprintf(path, sizeof path, "%s/" LG_ADAPTER_WEIGHTS_FILE, u->dir);
        u->wfd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (u->wfd < 0) {
            lg_job_fail(&u->j, 500, "store_error", NULL, "Receiving the upload failed: %s", strerror(errno));
            return lg_fail(err, "tmp");
        }
        if (lg_file_sink_init(&u->sink, u->wfd, u->max_weights, &e) != 0) {
            lg_job_fail(&u->j, 500, "store_error", NULL, "Receiving the upload failed: %s", e.msg);
            return lg_fail(err, "tmp");
        }
        u->sink_open = true;
    }
    return 0;
}

static int mp_data(void *user, const lg_mp_part *p, const void *data, size_t len, lg_err *err)
{
    upload *u = user;
    (void)p;
    /* name and config are text that ends up in C strings (and JSON has no
     * raw NUL): a NUL byte would silently cut the value ("a\0b" -> "a") */
    if ((u->field == F_NAME || u->field == F_CONFIG || u->field == F_TEMPLATE || u->field == F_TOKCFG) &&
        memchr(data, 0, len)) {
        lg_job_fail(&u->j, 400, "invalid_value", field_label(u->field),
                    "The form field '%s' contains a NUL byte; it must be text.", field_label(u->field));
        return lg_fail(err, "NUL byte");
    }
    switch (u->field) {
    case F_NAME:
        if (u->name_len + len >= sizeof u->name) {
            lg_job_fail(&u->j, 400, "invalid_value", "name", "The adapter name is longer than %d characters.",
                        (int)sizeof u->name - 1);
            return lg_fail(err, "name");
        }
        memcpy(u->name + u->name_len, data, len);
        u->name_len += len;
        u->name[u->name_len] = 0;
        return 0;
    case F_CONFIG:
        if (u->config_len + len > LG_ADAPTER_MAX_CONFIG) {
            lg_job_fail(&u->j, 400, "invalid_value", "config", "adapter_config.json is larger than %u bytes.",
                        LG_ADAPTER_MAX_CONFIG);
            return lg_fail(err, "config");
        }
        if (u->config_len + len > u->config_cap) {
            size_t cap = u->config_cap ? u->config_cap : 4096;
            while (cap < u->config_len + len)
                cap *= 2;
            char *c = realloc(u->config, cap);
            if (!c) {
                lg_job_fail(&u->j, 500, NULL, NULL, "out of memory");
                return lg_fail(err, "oom");
            }
            u->config = c;
            u->config_cap = cap;
        }
        memcpy(u->config + u->config_len, data, len);
        u->config_len += len;
        return 0;
    case F_TEMPLATE:
    case F_TOKCFG: {
        membuf *b = &u->extra[u->field == F_TOKCFG];
        size_t max = u->field == F_TOKCFG ? LG_ADAPTER_MAX_TOKENIZER_CONFIG : LG_ADAPTER_MAX_TEMPLATE;
        if (b->len + len > max) {
            lg_job_fail(&u->j, 400, "invalid_value", field_label(u->field), "%s is larger than %zu bytes.",
                        u->field == F_TOKCFG ? LG_ADAPTER_TOKENIZER_CONFIG_FILE : LG_ADAPTER_TEMPLATE_FILE, max);
            return lg_fail(err, "template");
        }
        if (membuf_add(b, data, len) != 0) {
            lg_job_fail(&u->j, 500, NULL, NULL, "out of memory");
            return lg_fail(err, "oom");
        }
        return 0;
    }
    case F_WEIGHTS: {
        lg_err e = {{0}};
        if (lg_file_sink_write(&u->sink, data, len, &e) != 0) {
            lg_job_fail(&u->j, 500, "store_error", NULL, "Receiving the upload failed: %s", e.msg);
            return lg_fail(err, "weights");
        }
        return 0;
    }
    }
    return 0;
}

static int mp_end(void *user, const lg_mp_part *p, lg_err *err)
{
    upload *u = user;
    (void)p;
    if (u->field == F_NAME) {
        lg_err e = {{0}};
        if (lg_store_check_adapter_name(u->name, &e) != 0) {
            lg_job_fail(&u->j, 400, "invalid_value", "name", "Invalid adapter name: %s", e.msg);
            return lg_fail(err, "name");
        }
        if (!strcmp(u->name, u->aa.model_id)) {
            lg_job_fail(&u->j, 400, "invalid_value", "name", "The adapter name `%s` is the base model's id.", u->name);
            return lg_fail(err, "name");
        }
    } else if (u->field == F_WEIGHTS) {
        lg_err e = {{0}};
        u->sink_open = false;
        int rc = lg_file_sink_finish(&u->sink, NULL, NULL, &e);
        int c = close(u->wfd);
        u->wfd = -1;
        if (rc != 0 || c != 0) {
            lg_job_fail(&u->j, 500, "store_error", NULL, "Receiving the upload failed: %s",
                        rc ? e.msg : strerror(errno));
            return lg_fail(err, "weights");
        }
    }
    u->field = F_NONE;
    return 0;
}

/* worker: one slice */
static void upload_work(void *arg)
{
    upload *u = arg;
    lg_err err = {{0}};
    u->j.status = 0;
    if (lg_multipart_feed(u->mp, u->slice, u->slice_len, &err) != 0 ||
        (u->last && lg_multipart_finish(u->mp, &err) != 0)) {
        if (u->j.status < 400)
            lg_job_fail(&u->j, 400, "invalid_multipart", NULL, "Malformed multipart/form-data body: %s", err.msg);
        u->failed = true;
        upload_cleanup(u);
        return;
    }
    if (!u->last)
        return;
    u->finished = true;
    for (int f = F_NAME; f <= F_WEIGHTS; f++)
        if (!u->seen[f]) {
            lg_job_fail(&u->j, 400, "missing_required_parameter", field_label(f),
                        "Missing required form field '%s' (the upload needs name, config = adapter_config.json "
                        "and weights = adapter_model.safetensors).",
                        field_label(f));
            u->failed = true;
            upload_cleanup(u);
            return;
        }
    char cpath[PATH_MAX];
    snprintf(cpath, sizeof cpath, "%s/" LG_ADAPTER_CONFIG_FILE, u->dir);
    if (write_file(cpath, u->config ? u->config : "", u->config_len, &err) != 0) {
        lg_job_fail(&u->j, 500, "store_error", NULL, "Receiving the upload failed: %s", err.msg);
        u->failed = true;
        upload_cleanup(u);
        return;
    }
    for (int k = 0; k < 2; k++) {
        if (!u->seen[k ? F_TOKCFG : F_TEMPLATE])
            continue;
        snprintf(cpath, sizeof cpath, "%s/%s", u->dir, k ? LG_ADAPTER_TOKENIZER_CONFIG_FILE : LG_ADAPTER_TEMPLATE_FILE);
        if (write_file(cpath, u->extra[k].p ? u->extra[k].p : "", u->extra[k].len, &err) != 0) {
            lg_job_fail(&u->j, 500, "store_error", NULL, "Receiving the upload failed: %s", err.msg);
            u->failed = true;
            upload_cleanup(u);
            return;
        }
    }
    commit_in in = {.aa = &u->aa, .tenant_id = u->tenant_id, .tenant = u->tenant, .name = u->name,
                    .dir = u->dir, .config = u->config ? u->config : "", .config_len = u->config_len,
                    .shown_dir = "", .config_param = "config", .weights_param = "weights",
                    .template_param = u->seen[F_TEMPLATE] ? "chat_template" : "tokenizer_config"};
    if (commit(&u->j, &in) != 0)
        u->failed = true;
    upload_cleanup(u);
}

static void upload_cleanup_work(void *arg) { upload_cleanup(arg); }
static void upload_free_done(lg_request *r, void *arg)
{
    (void)r;
    upload_free(&((upload *)arg)->j);
}

static void upload_step(lg_request *r, upload *u);

static void upload_done(lg_request *r, void *arg)
{
    upload *u = arg;
    if (!lg_request_h2o(r) && !u->finished && !u->failed) {
        /* the client left mid-way: drop what was written, on a worker */
        if (lg_request_defer(r, upload_cleanup_work, upload_free_done, u) != 0) {
            upload_cleanup(u);
            upload_free(&u->j);
        }
        return;
    }
    if (u->failed || u->finished) {
        lg_job_done(r, &u->j); /* answers (if the client is there) and frees */
        return;
    }
    upload_step(r, u);
}

/* loop: copy the next slice and hand it to a worker */
static void upload_step(lg_request *r, upload *u)
{
    size_t len = 0;
    const char *body = lg_request_body(r, &len);
    size_t n = len - u->off < UPLOAD_SLICE ? len - u->off : UPLOAD_SLICE;
    if (n)
        memcpy(u->slice, body + u->off, n);
    u->slice_len = n;
    u->off += n;
    u->last = u->off == len;
    if (lg_request_defer(r, upload_work, upload_done, u) != 0) {
        lg_respond_unavailable(r, 1, "The server is shutting down.");
        upload_cleanup(u); /* the pool is stopped: a few unlinks here */
        upload_free(&u->j);
    }
}

static void on_gone_noop(lg_request *r, void *user)
{
    (void)r;
    (void)user;
}

int lg_adapters_upload(lg_request *r, const lg_adapter_admin *aa, const lg_tenant_obj *t)
{
    size_t cl = 0, len = 0;
    const char *ct = lg_request_header(r, "content-type", &cl);
    char boundary[LG_MP_MAX_BOUNDARY + 1];
    lg_err err = {{0}};
    if (!ct || !lg_media_type_is(ct, cl, "multipart/form-data"))
        return lg_respond_error(r, 415, "unsupported_media_type", NULL,
                                "Adapter uploads are multipart/form-data with the fields name, config and weights."),
               0;
    if (lg_multipart_boundary(ct, cl, boundary, &err) != 0)
        return lg_respond_error(r, 400, "invalid_multipart", NULL, "%s", err.msg), 0;
    const char *body = lg_request_body(r, &len);
    if (!body || !len)
        return lg_respond_error(r, 400, "missing_body", NULL, "The upload has no body."), 0;
    upload *u = calloc(1, sizeof *u);
    if (u)
        u->slice = malloc(len < UPLOAD_SLICE ? len : UPLOAD_SLICE);
    if (!u || !u->slice) {
        if (u)
            free(u);
        return lg_respond_error(r, 500, NULL, NULL, "out of memory"), 0;
    }
    u->aa = *aa;
    u->j.free_fn = upload_free;
    u->wfd = -1;
    u->tenant_id = t->id;
    snprintf(u->tenant, sizeof u->tenant, "%s", t->name);
    u->max_weights = aa->max_upload;
    lg_mp_limits lim = {.max_parts = 8, .max_header_bytes = 8192};
    lg_mp_callbacks cb = {mp_begin, mp_data, mp_end};
    if (lg_multipart_create(boundary, &lim, &cb, u, &u->mp, &err) != 0) {
        upload_free(&u->j);
        return lg_respond_error(r, 400, "invalid_multipart", NULL, "%s", err.msg), 0;
    }
    /* the HTTP/1 peer-close probe: a client that leaves stops the upload */
    lg_request_set_hooks(r, &(lg_request_hooks){.on_client_gone = on_gone_noop}, NULL);
    upload_step(r, u);
    return 0;
}

/* ---- import from a server directory ----------------------------------------------------- */

typedef struct import_job {
    lg_job j;
    lg_adapter_admin aa;
    int64_t tenant_id;
    char tenant[LG_STORE_NAME_MAX];
    char name[LG_STORE_NAME_MAX];
    char *path;
    size_t max_weights;
} import_job;

static void import_free(lg_job *jb)
{
    import_job *m = (import_job *)jb;
    free(m->path);
    free(m);
}

static int copy_file(const char *src, const char *dst, size_t max, lg_err *err)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return lg_fail(err, "%s: %s", src, strerror(errno));
    struct stat sb;
    if (fstat(in, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(in);
        return lg_fail(err, "%s: not a regular file", src);
    }
    if (max && (size_t)sb.st_size > max) {
        close(in);
        return lg_fail(err, "%s: larger than %zu bytes", src, max);
    }
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0) {
        int e = errno;
        close(in);
        return lg_fail(err, "creating %s: %s", dst, strerror(e));
    }
    char *buf = malloc(1 << 20);
    int rc = buf ? 0 : lg_fail(err, "out of memory");
    size_t total = 0;
    while (rc == 0) {
        ssize_t n = read(in, buf, 1 << 20);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = lg_fail(err, "reading %s: %s", src, strerror(errno));
            break;
        }
        if (n == 0)
            break;
        total += (size_t)n;
        if (max && total > max) {
            rc = lg_fail(err, "%s: larger than %zu bytes", src, max);
            break;
        }
        for (ssize_t o = 0; o < n && rc == 0;) {
            ssize_t w = write(out, buf + o, (size_t)(n - o));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                rc = lg_fail(err, "writing %s: %s", dst, strerror(errno));
            else
                o += w;
        }
    }
    free(buf);
    close(in);
    if (close(out) != 0 && rc == 0)
        rc = lg_fail(err, "writing %s: %s", dst, strerror(errno));
    return rc;
}

static void import_work(lg_job *jb)
{
    import_job *m = (import_job *)jb;
    lg_err err = {{0}};
    char dir[PATH_MAX] = "", src[PATH_MAX], dst[PATH_MAX];
    char *config = NULL;
    size_t config_len = 0;
    struct stat sb;
    int se = stat(m->path, &sb) != 0 ? errno : 0;
    if (se || !S_ISDIR(sb.st_mode)) {
        lg_job_fail(jb, 400, "invalid_value", "path", "`%s` is not a directory on the server: %s", m->path,
                    se ? strerror(se) : "not a directory");
        return;
    }
    if (make_tmp_dir(m->aa.data_dir, dir, sizeof dir, &err) != 0) {
        lg_job_fail(jb, 500, "store_error", NULL, "Importing the adapter failed: %s", err.msg);
        return;
    }
    snprintf(src, sizeof src, "%s/" LG_ADAPTER_CONFIG_FILE, m->path);
    snprintf(dst, sizeof dst, "%s/" LG_ADAPTER_CONFIG_FILE, dir);
    int rc = copy_file(src, dst, LG_ADAPTER_MAX_CONFIG, &err);
    if (rc == 0) {
        snprintf(src, sizeof src, "%s/" LG_ADAPTER_WEIGHTS_FILE, m->path);
        snprintf(dst, sizeof dst, "%s/" LG_ADAPTER_WEIGHTS_FILE, dir);
        rc = copy_file(src, dst, m->max_weights, &err);
    }
    /* the adapter's own chat template, when the directory ships one */
    static const char *const extra[] = {LG_ADAPTER_TEMPLATE_FILE, LG_ADAPTER_TOKENIZER_CONFIG_FILE};
    static const size_t extra_max[] = {LG_ADAPTER_MAX_TEMPLATE, LG_ADAPTER_MAX_TOKENIZER_CONFIG};
    for (int k = 0; k < 2 && rc == 0; k++) {
        snprintf(src, sizeof src, "%s/%s", m->path, extra[k]);
        snprintf(dst, sizeof dst, "%s/%s", dir, extra[k]);
        if (stat(src, &sb) == 0 && (rc = copy_file(src, dst, extra_max[k], &err)) != 0)
            lg_err_prefix(&err, "%s", extra[k]);
    }
    if (rc != 0) {
        msg_replace(&err, dir, m->path);
        lg_job_fail(jb, 400, "invalid_value", "path", "Cannot import the adapter: %s", err.msg);
        remove_tmp_dir(dir);
        return;
    }
    snprintf(dst, sizeof dst, "%s/" LG_ADAPTER_CONFIG_FILE, dir);
    if (lg_read_file(dst, LG_ADAPTER_MAX_CONFIG, &config, &config_len, &err) != 0) {
        lg_job_fail(jb, 500, "store_error", NULL, "Importing the adapter failed: %s", err.msg);
        remove_tmp_dir(dir);
        return;
    }
    char shown[PATH_MAX + 2];
    snprintf(shown, sizeof shown, "%s/", m->path);
    commit_in in = {.aa = &m->aa, .tenant_id = m->tenant_id, .tenant = m->tenant, .name = m->name, .dir = dir,
                    .config = config, .config_len = config_len, .shown_dir = shown, .config_param = "path",
                    .weights_param = "path", .template_param = "path"};
    commit(jb, &in);
    free(config);
    remove_tmp_dir(dir);
}

int lg_adapters_import(lg_request *r, const lg_adapter_admin *aa, const lg_tenant_obj *t)
{
    json_t *body = lg_admin_json_body(r);
    if (!body)
        return 0;
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v)
    {
        if (strcmp(k, "name") && strcmp(k, "path")) {
            lg_respond_error(r, 400, "unknown_parameter", k, "Unrecognized request argument supplied: %s", k);
            json_decref(body);
            return 0;
        }
    }
    json_t *jn = json_object_get(body, "name"), *jp = json_object_get(body, "path");
    lg_err err = {{0}};
    int rc = 0;
    if (!json_is_string(jn))
        rc = lg_respond_error(r, 400, jn ? "invalid_type" : "missing_required_parameter", "name",
                              "`name` must be a string (the adapter's name).");
    else if (lg_store_check_adapter_name(json_string_value(jn), &err) != 0)
        rc = lg_respond_error(r, 400, "invalid_value", "name", "Invalid adapter name: %s", err.msg);
    else if (!strcmp(json_string_value(jn), aa->model_id))
        rc = lg_respond_error(r, 400, "invalid_value", "name", "The adapter name `%s` is the base model's id.",
                              aa->model_id);
    else if (!json_is_string(jp) || !json_string_length(jp) || json_string_length(jp) >= PATH_MAX - 64 ||
             strlen(json_string_value(jp)) != json_string_length(jp))
        rc = lg_respond_error(r, 400, jp ? "invalid_value" : "missing_required_parameter", "path",
                              "`path` must be a directory on the server holding adapter_config.json and "
                              "adapter_model.safetensors.");
    else {
        import_job *m = calloc(1, sizeof *m);
        if (!m || !(m->path = strdup(json_string_value(jp)))) {
            free(m);
            rc = lg_respond_error(r, 500, NULL, NULL, "out of memory");
        } else {
            m->aa = *aa;
            m->j.work = import_work;
            m->j.free_fn = import_free;
            m->tenant_id = t->id;
            m->max_weights = aa->max_upload;
            snprintf(m->tenant, sizeof m->tenant, "%s", t->name);
            snprintf(m->name, sizeof m->name, "%s", json_string_value(jn));
            json_decref(body);
            return lg_job_run(r, &m->j);
        }
    }
    (void)rc;
    json_decref(body);
    return 0;
}
