/*
 * adapter_files.h — the content-addressed adapter files on disk:
 *
 *   DATA_DIR/adapters/<sha256>/adapter_config.json
 *   DATA_DIR/adapters/<sha256>/adapter_model.safetensors
 *   DATA_DIR/adapters/<sha256>-<t16>/   the same, plus chat_template.jinja
 *                                       (an adapter's own chat template;
 *                                       <t16>: 16 hex of its SHA-256)
 *   DATA_DIR/tmp/                 uploads in progress, put directories
 *
 * <sha256> is the hex SHA-256 of adapter_config.json's bytes followed by
 * adapter_model.safetensors's bytes (the digest adapters/peft.c computes).
 *
 * Invariant: a directory under adapters/ is complete and durable, or
 * absent. A put builds DATA_DIR/tmp/put-<random>/ (both files written and
 * fsynced), fsyncs it, renames it to adapters/<sha256> and fsyncs
 * adapters/, so nothing half-written is ever visible, also after a crash.
 * A put of content that is already there changes nothing (idempotent; two
 * concurrent puts of the same content are both fine).
 *
 * Large uploads: write the weights to a file made by lg_store_tmp_file
 * (DATA_DIR/tmp, same filesystem as adapters/) while receiving them, then
 * call lg_store_put_adapter_files_from_tmp: the file is renamed into place,
 * never copied; its SHA-256 is computed in one sequential read.
 *
 * These functions only store bytes: validate the PEFT content against the
 * model first (adapters/peft.h). They block on fsync: worker threads only.
 * They touch no database; record the version with lg_store_adapter_create
 * or lg_store_adapter_replace (db/store.h) after a put. Not yet: removal of
 * content directories that no adapter version references.
 */
#ifndef LG_ADAPTER_FILES_H
#define LG_ADAPTER_FILES_H

#include "engine/base/common.h"
#include "db/store.h"

#define LG_ADAPTER_CONFIG_FILE "adapter_config.json"
#define LG_ADAPTER_WEIGHTS_FILE "adapter_model.safetensors"
#define LG_ADAPTER_TEMPLATE_FILE "chat_template.jinja"
#define LG_ADAPTER_MAX_TEMPLATE (1u << 20) /* an adapter's chat template: at most 1 MiB */

/* Creates DATA_DIR/tmp/upload-XXXXXX (mode 0600, DATA_DIR/tmp created if
 * missing) and returns its path and an open descriptor (the caller closes
 * it, and unlinks the file if it does not hand it to a put). */
int lg_store_tmp_file(const char *data_dir, char *path_out, size_t path_size, int *fd_out, lg_err *err);

/* Stores config + weights given as bytes. digest_out: 64 hex + NUL;
 * relpath_out: "adapters/<digest>", relative to data_dir. */
int lg_store_put_adapter_files(const char *data_dir, const void *config, size_t config_len, const void *weights,
                               size_t weights_len, char digest_out[65], char relpath_out[LG_ADAPTER_PATH_MAX],
                               lg_err *err);

/* Stores config (bytes) + weights already written to weights_tmp_path, a
 * regular file on the same filesystem as DATA_DIR/adapters (use
 * lg_store_tmp_file). On success the file is gone from weights_tmp_path
 * (renamed into place, or removed when the content was already stored). On
 * failure it is left where it was, except when only the final fsync of
 * adapters/ failed: then the content is in place and the message says so. */
int lg_store_put_adapter_files_from_tmp(const char *data_dir, const void *config, size_t config_len,
                                        const char *weights_tmp_path, char digest_out[65],
                                        char relpath_out[LG_ADAPTER_PATH_MAX], lg_err *err);

/* lg_store_put_adapter_files_from_tmp with an optional chat template
 * (tmpl NULL: none; at most LG_ADAPTER_MAX_TEMPLATE bytes), stored as
 * chat_template.jinja in adapters/<digest>-<t16> (relpath_out names it).
 * digest_out stays the digest of config || weights. */
int lg_store_put_adapter_files_tmpl(const char *data_dir, const void *config, size_t config_len, const char *tmpl,
                                    size_t tmpl_len, const char *weights_tmp_path, char digest_out[65],
                                    char relpath_out[LG_ADAPTER_PATH_MAX], lg_err *err);

#endif
