/*
 * tenant_adapters.h — the tenants' adapters: (tenant id, adapter name) ->
 * the engine's adapter version id and the store's version (digest, rank,
 * targets, path), in memory for the event loops, and the one place that
 * adds adapters to the engine and removes them.
 *
 * The engine knows a tenant's adapter as "<tenant id>/<name>", so a
 * replace in the engine (a new version id; in-flight requests finish on the
 * old one) is a replace of exactly that tenant's adapter. A request copies
 * the entry at submit time (lg_tenant_adapters_find), so a concurrent
 * replace or delete never changes what a running request uses.
 *
 * Threads. find and list run on loop threads (a read lock and a copy).
 * inspect reads files (any thread but a loop); install and uninstall run on
 * the worker pool, serialized by the store's writer lock (store_writer.h),
 * so that two replaces of one name install in commit order.
 *
 * An adapter whose files include chat_template.jinja (its own chat
 * template, adapter_template.h) renders its chat requests with it: parsed
 * once at install, shared by reference (find_chat), unless --chat-template
 * overrides every template (set_chat).
 */
#ifndef LG_GW_TENANT_ADAPTERS_H
#define LG_GW_TENANT_ADAPTERS_H

#include <stdbool.h>
#include <stdint.h>

#include "db/store.h"
#include "engine/model/model_config.h"
#include "engine/runtime/dp_router.h"
#include "gateway/adapter_template.h"

typedef struct lg_tenant_adapters lg_tenant_adapters;

typedef struct lg_tenant_adapter {
    int64_t tenant_id;
    char name[LG_STORE_NAME_MAX];
    int engine_id;              /* the engine's version id (lg_request_params.adapter_id) */
    lg_adapter_version version; /* digest, rank, targets, path, created_at */
    int64_t created_at;         /* the adapter's (first version's) creation time, Unix ms (the store's unit) */
} lg_tenant_adapter;

/* engine: where adapters are installed (every engine behind the router,
 * one version id); base and max_lora_rank: what an adapter must fit (the `--lora` checks); data_dir: the root of the
 * versions' paths. All must outlive the registry. */
int lg_tenant_adapters_create(lg_dp *engine, const lg_model_config *base, int max_lora_rank, const char *data_dir,
                              lg_tenant_adapters **out, lg_err *err);
/* What adapters' templates see as bos_token / eos_token (the base model's
 * texts, may be NULL), and templates_off: --chat-template overrides them
 * (they are still checked at upload, not used). Call before any install. */
int lg_tenant_adapters_set_chat(lg_tenant_adapters *ta, const char *bos_text, const char *eos_text,
                                bool templates_off, lg_err *err);
/* NULL: no-op. Frees the entries; the engine is not told (it stops first). */
void lg_tenant_adapters_free(lg_tenant_adapters *ta);

/* Copy of the tenant's adapter `name` (out may be NULL); false if none. Never blocks. */
bool lg_tenant_adapters_find(lg_tenant_adapters *ta, int64_t tenant_id, const char *name, lg_tenant_adapter *out);
/* find, and in the same instant a reference to that version's own chat
 * template (*chat NULL: it has none; the base model's applies). The
 * caller drops it with lg_adapter_chat_unref. */
bool lg_tenant_adapters_find_chat(lg_tenant_adapters *ta, int64_t tenant_id, const char *name, lg_tenant_adapter *out,
                                  lg_adapter_chat **chat);
/* Copies of the tenant's adapters, sorted by name (free() the array). -1: out of memory. */
int lg_tenant_adapters_list(lg_tenant_adapters *ta, int64_t tenant_id, lg_tenant_adapter **out, int *n);

/* Validates a PEFT adapter directory against the served base model exactly
 * as `--lora` does, and fills what the store keeps of it (digest, max_rank,
 * target_modules, size_bytes; path left empty). A chat template the
 * directory ships (chat_template.jinja or tokenizer_config.json) must
 * parse (else -1, err naming the file); its text is *tmpl (malloc'd; NULL:
 * none). Reads files. */
int lg_tenant_adapters_inspect(lg_tenant_adapters *ta, const char *dir, lg_adapter_version *out, char **tmpl,
                               size_t *tmpl_len, lg_err *err);
/* Makes version v (files already at DATA_DIR/v->path) the tenant's adapter
 * `name` in the engine and here: new requests use it, in-flight ones finish
 * on the one they started with. Call after the store committed it. */
int lg_tenant_adapters_install(lg_tenant_adapters *ta, int64_t tenant_id, const char *name,
                               const lg_adapter_version *v, int64_t created_at, lg_err *err);
/* Removes it here and from the engine (in-flight requests finish). No-op if absent. */
void lg_tenant_adapters_uninstall(lg_tenant_adapters *ta, int64_t tenant_id, const char *name);
/* Every adapter of a tenant (the tenant was deleted). */
void lg_tenant_adapters_uninstall_tenant(lg_tenant_adapters *ta, int64_t tenant_id);

#endif
