/*
 * tenant_adapters.c — see tenant_adapters.h. One hash map keyed
 * "<tenant id>/<name>" (also the engine's name of the adapter) under a
 * read-write lock; entries are malloc'd and replaced whole. An entry also
 * holds one reference to its version's parsed chat template, if any.
 */
#include "gateway/tenant_adapters.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "adapters/peft.h"
#include "db/adapter_files.h"
#include "engine/base/strmap.h"
#include "gateway/adapter_template.h"

struct lg_tenant_adapters {
    lg_dp *engine;
    const lg_model_config *base;
    int max_lora_rank;
    const char *data_dir;
    char *bos_text, *eos_text;  /* the base model's, for adapters' templates (NULL: none) */
    bool templates_off;         /* --chat-template overrides every template */
    pthread_rwlock_t lock;
    lg_strmap *map; /* "<tenant id>/<name>" -> entry* */
};

typedef struct entry {
    lg_tenant_adapter a;   /* first: the map's value is also an lg_tenant_adapter* */
    lg_adapter_chat *chat; /* one reference; NULL: the base model's template */
} entry;

int lg_tenant_adapters_create(lg_dp *engine, const lg_model_config *base, int max_lora_rank, const char *data_dir,
                              lg_tenant_adapters **out, lg_err *err)
{
    lg_tenant_adapters *ta = calloc(1, sizeof *ta);
    if (!ta || !(ta->map = lg_strmap_new())) {
        free(ta);
        return lg_fail(err, "out of memory");
    }
    ta->engine = engine;
    ta->base = base;
    ta->max_lora_rank = max_lora_rank;
    ta->data_dir = data_dir;
    pthread_rwlock_init(&ta->lock, NULL);
    *out = ta;
    return 0;
}

static void entry_free(entry *e)
{
    if (e)
        lg_adapter_chat_unref(e->chat);
    free(e);
}

static void free_val(void *ctx, const char *key, void *val) { entry_free(val); }

int lg_tenant_adapters_set_chat(lg_tenant_adapters *ta, const char *bos_text, const char *eos_text,
                                bool templates_off, lg_err *err)
{
    free(ta->bos_text);
    free(ta->eos_text);
    ta->bos_text = bos_text ? strdup(bos_text) : NULL;
    ta->eos_text = eos_text ? strdup(eos_text) : NULL;
    ta->templates_off = templates_off;
    if ((bos_text && !ta->bos_text) || (eos_text && !ta->eos_text))
        return lg_fail(err, "out of memory");
    return 0;
}

void lg_tenant_adapters_free(lg_tenant_adapters *ta)
{
    if (!ta)
        return;
    lg_strmap_each(ta->map, free_val, NULL);
    lg_strmap_free(ta->map);
    free(ta->bos_text);
    free(ta->eos_text);
    pthread_rwlock_destroy(&ta->lock);
    free(ta);
}

static void adapter_key(char *buf, size_t n, int64_t tenant_id, const char *name)
{
    snprintf(buf, n, "%" PRId64 "/%s", tenant_id, name);
}

bool lg_tenant_adapters_find(lg_tenant_adapters *ta, int64_t tenant_id, const char *name, lg_tenant_adapter *out)
{
    char key[LG_STORE_NAME_MAX + 32];
    adapter_key(key, sizeof key, tenant_id, name);
    pthread_rwlock_rdlock(&ta->lock);
    lg_tenant_adapter *a = lg_strmap_get(ta->map, key);
    if (a && out)
        *out = *a;
    pthread_rwlock_unlock(&ta->lock);
    return a != NULL;
}

bool lg_tenant_adapters_find_chat(lg_tenant_adapters *ta, int64_t tenant_id, const char *name, lg_tenant_adapter *out,
                                  lg_adapter_chat **chat)
{
    char key[LG_STORE_NAME_MAX + 32];
    adapter_key(key, sizeof key, tenant_id, name);
    pthread_rwlock_rdlock(&ta->lock);
    entry *e = lg_strmap_get(ta->map, key);
    if (e && out)
        *out = e->a;
    *chat = e ? lg_adapter_chat_ref(e->chat) : NULL;
    pthread_rwlock_unlock(&ta->lock);
    return e != NULL;
}

typedef struct list_ctx {
    int64_t tenant_id;
    lg_tenant_adapter *v;
    int n, cap;
    bool oom;
} list_ctx;

static void list_one(void *ctx, const char *key, void *val)
{
    list_ctx *c = ctx;
    lg_tenant_adapter *a = val;
    if (a->tenant_id != c->tenant_id || c->oom)
        return;
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        lg_tenant_adapter *v = realloc(c->v, (size_t)cap * sizeof *v);
        if (!v) {
            c->oom = true;
            return;
        }
        c->v = v;
        c->cap = cap;
    }
    c->v[c->n++] = *a;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const lg_tenant_adapter *)a)->name, ((const lg_tenant_adapter *)b)->name);
}

int lg_tenant_adapters_list(lg_tenant_adapters *ta, int64_t tenant_id, lg_tenant_adapter **out, int *n)
{
    list_ctx c = {.tenant_id = tenant_id};
    pthread_rwlock_rdlock(&ta->lock);
    lg_strmap_each(ta->map, list_one, &c);
    pthread_rwlock_unlock(&ta->lock);
    if (c.oom) {
        free(c.v);
        return -1;
    }
    if (c.n > 1)
        qsort(c.v, (size_t)c.n, sizeof *c.v, by_name);
    *out = c.v;
    *n = c.n;
    return 0;
}

/* dir's own template, checked by parsing it (*text NULL: none). */
static int check_template(lg_tenant_adapters *ta, const char *dir, char **text, size_t *len, lg_err *err)
{
    const char *file = NULL;
    if (lg_adapter_template_read(dir, text, len, &file, err) != 0)
        return -1;
    if (!*text)
        return 0;
    lg_adapter_chat *c = NULL;
    lg_err perr = {{0}};
    if (lg_adapter_chat_new(*text, ta->bos_text, ta->eos_text, &c, &perr) != 0) {
        free(*text);
        *text = NULL;
        return lg_fail(err, "%s: the chat template does not parse: %s", file, perr.msg);
    }
    lg_adapter_chat_unref(c);
    return 0;
}

int lg_tenant_adapters_inspect(lg_tenant_adapters *ta, const char *dir, lg_adapter_version *out, char **tmpl,
                               size_t *tmpl_len, lg_err *err)
{
    memset(out, 0, sizeof *out);
    *tmpl = NULL;
    *tmpl_len = 0;
    lg_adapter *a = NULL;
    if (lg_adapter_load(dir, "upload", ta->base, ta->max_lora_rank, &a, err) != 0)
        return -1;
    snprintf(out->digest, sizeof out->digest, "%s", lg_adapter_digest(a));
    out->max_rank = lg_adapter_max_rank(a);
    bool seen[LG_LORA_N_TARGETS] = {0};
    for (int i = 0; i < lg_adapter_n_modules(a); i++)
        seen[lg_adapter_module(a, i)->target] = true;
    size_t off = 0;
    for (int t = 0; t < LG_LORA_N_TARGETS; t++)
        if (seen[t])
            off += (size_t)snprintf(out->target_modules + off, sizeof out->target_modules - off, "%s%s",
                                    off ? "," : "", lg_lora_target_name((lg_lora_target)t));
    lg_adapter_free(a);
    struct stat s1, s2;
    char p[4096];
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    if (stat(p, &s1) != 0)
        return lg_fail(err, "%s: %s", p, strerror(errno));
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    if (stat(p, &s2) != 0)
        return lg_fail(err, "%s: %s", p, strerror(errno));
    out->size_bytes = (int64_t)s1.st_size + (int64_t)s2.st_size;
    if (check_template(ta, dir, tmpl, tmpl_len, err) != 0)
        return -1;
    out->size_bytes += (int64_t)*tmpl_len;
    return 0;
}

int lg_tenant_adapters_install(lg_tenant_adapters *ta, int64_t tenant_id, const char *name,
                               const lg_adapter_version *v, int64_t created_at, lg_err *err)
{
    char key[LG_STORE_NAME_MAX + 32], dir[4096];
    adapter_key(key, sizeof key, tenant_id, name);
    snprintf(dir, sizeof dir, "%s/%s", ta->data_dir, v->path);
    entry *e = calloc(1, sizeof *e);
    if (!e)
        return lg_fail(err, "out of memory");
    lg_tenant_adapter *a = &e->a;
    /* the version's own template (stored as chat_template.jinja), parsed once here */
    char tp[4200];
    snprintf(tp, sizeof tp, "%s/" LG_ADAPTER_TEMPLATE_FILE, dir);
    struct stat sb;
    if (!ta->templates_off && stat(tp, &sb) == 0) {
        char *text = NULL;
        size_t len = 0;
        int trc = lg_read_file(tp, LG_ADAPTER_MAX_TEMPLATE, &text, &len, err);
        if (trc == 0)
            trc = lg_adapter_chat_new(text, ta->bos_text, ta->eos_text, &e->chat, err);
        free(text);
        if (trc != 0) {
            lg_err_prefix(err, LG_ADAPTER_TEMPLATE_FILE);
            free(e);
            return -1;
        }
    }
    a->tenant_id = tenant_id;
    snprintf(a->name, sizeof a->name, "%s", name);
    a->version = *v;
    a->created_at = created_at;
    /* the map first under the write lock so no request can pick the new
     * engine id before the map says it is current (and vice versa) */
    pthread_rwlock_wrlock(&ta->lock);
    int rc = lg_dp_add_adapter(ta->engine, key, dir, &a->engine_id, err); /* every engine, one id */
    if (rc == 0) {
        entry *old = lg_strmap_get(ta->map, key);
        if (lg_strmap_put(ta->map, key, e) != 0) {
            lg_dp_remove_adapter(ta->engine, key, NULL);
            rc = lg_fail(err, "out of memory");
        } else {
            entry_free(old);
            e = NULL;
        }
    }
    pthread_rwlock_unlock(&ta->lock);
    entry_free(e);
    return rc;
}

void lg_tenant_adapters_uninstall(lg_tenant_adapters *ta, int64_t tenant_id, const char *name)
{
    char key[LG_STORE_NAME_MAX + 32];
    adapter_key(key, sizeof key, tenant_id, name);
    pthread_rwlock_wrlock(&ta->lock);
    entry *e = lg_strmap_del(ta->map, key);
    if (e)
        lg_dp_remove_adapter(ta->engine, key, NULL);
    pthread_rwlock_unlock(&ta->lock);
    entry_free(e);
}

void lg_tenant_adapters_uninstall_tenant(lg_tenant_adapters *ta, int64_t tenant_id)
{
    lg_tenant_adapter *v = NULL;
    int n = 0;
    if (lg_tenant_adapters_list(ta, tenant_id, &v, &n) != 0)
        return;
    for (int i = 0; i < n; i++)
        lg_tenant_adapters_uninstall(ta, tenant_id, v[i].name);
    free(v);
}
