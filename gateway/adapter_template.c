/*
 * adapter_template.c — see adapter_template.h.
 */
#include "gateway/adapter_template.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "db/adapter_files.h"

struct lg_adapter_chat {
    atomic_int refs;
    lg_chat_template *t;
};

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* the "chat_template" of tokenizer_config.json: a string, or the "default" of a list of {name, template} */
static const char *json_template(json_t *root)
{
    json_t *ct = json_object_get(root, "chat_template");
    if (json_is_string(ct))
        return json_string_value(ct);
    size_t i;
    json_t *e;
    if (json_is_array(ct))
        json_array_foreach(ct, i, e)
        {
            const char *name = json_string_value(json_object_get(e, "name"));
            if (name && !strcmp(name, "default") && json_is_string(json_object_get(e, "template")))
                return json_string_value(json_object_get(e, "template"));
        }
    return NULL;
}

int lg_adapter_template_read(const char *dir, char **text, size_t *len, const char **file, lg_err *err)
{
    char p[PATH_MAX];
    *text = NULL;
    *len = 0;
    *file = NULL;
    snprintf(p, sizeof p, "%s/" LG_ADAPTER_TEMPLATE_FILE, dir);
    if (exists(p)) {
        *file = LG_ADAPTER_TEMPLATE_FILE;
        if (lg_read_file(p, LG_ADAPTER_MAX_TEMPLATE, text, len, err) != 0)
            return lg_err_prefix(err, LG_ADAPTER_TEMPLATE_FILE " (at most %u bytes)", LG_ADAPTER_MAX_TEMPLATE), -1;
        if (memchr(*text, 0, *len)) {
            free(*text);
            *text = NULL;
            return lg_fail(err, LG_ADAPTER_TEMPLATE_FILE ": contains a NUL byte; a template is text");
        }
        return 0;
    }
    snprintf(p, sizeof p, "%s/" LG_ADAPTER_TOKENIZER_CONFIG_FILE, dir);
    if (!exists(p))
        return 0;
    *file = LG_ADAPTER_TOKENIZER_CONFIG_FILE;
    char *buf = NULL;
    size_t n = 0;
    if (lg_read_file(p, LG_ADAPTER_MAX_TOKENIZER_CONFIG, &buf, &n, err) != 0)
        return lg_err_prefix(err, LG_ADAPTER_TOKENIZER_CONFIG_FILE), -1;
    json_error_t je;
    json_t *root = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &je);
    free(buf);
    if (!json_is_object(root)) {
        json_decref(root);
        return lg_fail(err, LG_ADAPTER_TOKENIZER_CONFIG_FILE ": not a JSON object (line %d: %s)", je.line, je.text);
    }
    int rc = 0;
    const char *t = json_template(root);
    if (!json_object_get(root, "chat_template")) {
        /* no template: the base model's */
    } else if (!t) {
        rc = lg_fail(err, LG_ADAPTER_TOKENIZER_CONFIG_FILE ": \"chat_template\" must be a string (or a list with "
                          "a \"default\" template)");
    } else if (strlen(t) > LG_ADAPTER_MAX_TEMPLATE) {
        rc = lg_fail(err, LG_ADAPTER_TOKENIZER_CONFIG_FILE ": \"chat_template\" is larger than %u bytes",
                     LG_ADAPTER_MAX_TEMPLATE);
    } else if (!(*text = strdup(t))) {
        rc = lg_fail(err, "out of memory");
    } else {
        *len = strlen(t);
    }
    json_decref(root);
    return rc;
}

int lg_adapter_chat_new(const char *text, const char *bos_text, const char *eos_text, lg_adapter_chat **out,
                        lg_err *err)
{
    lg_adapter_chat *c = calloc(1, sizeof *c);
    if (!c)
        return lg_fail(err, "out of memory");
    if (lg_chat_template_new(text, NULL, bos_text, eos_text, &c->t, err) != 0) {
        free(c);
        return -1;
    }
    atomic_init(&c->refs, 1);
    *out = c;
    return 0;
}

lg_adapter_chat *lg_adapter_chat_ref(lg_adapter_chat *c)
{
    if (c)
        atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
    return c;
}

void lg_adapter_chat_unref(lg_adapter_chat *c)
{
    if (c && atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1) {
        lg_chat_template_free(c->t);
        free(c);
    }
}

const lg_chat_template *lg_adapter_chat_template(const lg_adapter_chat *c) { return c ? c->t : NULL; }
