/*
 * data_dir.h — what `serve` does to DATA_DIR before it serves: the
 * directory's permissions, and the leftovers of a previous process in
 * DATA_DIR/tmp.
 *
 * Permissions. DATA_DIR holds the database (every tenant's keys as hashes,
 * usage, prices), the operator key file and the TLS private key, so it is
 * private to the service user: when loragate creates it, it is made 0700
 * (chmod after mkdir, so the umask cannot widen or break it). A directory
 * the operator made is left as it is, but if group or others can enter or
 * read it, one warning line says so (the secret files in it are 0600
 * anyway: admin.key, tls/key.pem, loragate.db and its -wal/-shm; see
 * admin_key.c, tls.c, db/store.c).
 *
 * Leftovers. The server writes DATA_DIR/tmp only while it runs: upload
 * directories and files (upload-*, adapter_upload.c, db/adapter_files.c),
 * content directories being built (put-*, db/adapter_files.c) and h2o's
 * request-body spill files (h2o.b.*, server.c). Whatever of those names is
 * in tmp/ when a server starts was left by a process that crashed or was
 * killed, so it is removed then (a directory with its content; symbolic
 * links are removed, never followed). Other names are not ours and stay.
 * Only one `serve` may use a data directory at a time.
 */
#ifndef LG_GW_DATA_DIR_H
#define LG_GW_DATA_DIR_H

#include <stdbool.h>
#include <stdio.h>

#include "engine/base/common.h"

/* Creates dir (mode 0700) when it does not exist and sets *created; fails
 * when it is not a directory. An existing directory with any group/other
 * permission bit is not changed: one line on `warn` (NULL: none) says so. */
int lg_data_dir_prepare(const char *dir, FILE *warn, bool *created, lg_err *err);

/* True for the names loragate gives to what it puts in DATA_DIR/tmp
 * (upload-*, put-*, h2o.b.*; something after the prefix). */
bool lg_data_dir_tmp_name_ours(const char *name);

/* Removes the entries of DIR/tmp whose names are ours (above), with their
 * content. *removed: entries removed; *failed: entries that could not be
 * removed (the first reason in err, which is then non-empty). A missing
 * tmp/ is not an error. Returns 0, or -1 when tmp/ cannot be read. */
int lg_data_dir_clean_tmp(const char *dir, int *removed, int *failed, lg_err *err);

#endif
